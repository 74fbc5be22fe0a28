use super::*;
use crate::array_shape::ArrayShape;
use crate::contexts::NO_CONTEXT;
use crate::cuda_abi::CuResult;
use crate::cuda_abi::{CUDA_ARRAY3D_DEFERRED_MAPPING, CUDA_ARRAY3D_SPARSE};
use crate::quota::Part;
use admission::PartRefusal;
use fake::{engine, with_limit, GIB, MIB};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

pub(super) mod fake;

#[test]
fn every_kind_has_its_ledger() {
    for (i, kind) in Kind::ALL.into_iter().enumerate() {
        assert_eq!(kind as usize, i, "Kind::ALL is in discriminant order");
    }
}

#[test]
fn parts_share_the_quota_with_allocations() {
    let (e, _) = with_limit("1GiB");
    assert!(e.counts_footprint());
    assert_eq!(e.part_grow("ctx", 0, Part::Context, 256 * MIB), Ok(()));
    let ok = || (CuResult::SUCCESS, 0x1000);
    assert_eq!(
        e.alloc("a", Kind::Pointer, Place::Current, 768 * MIB, ok),
        CuResult::SUCCESS
    );
    assert_eq!(
        e.part_grow("ctx", 0, Part::Context, 1),
        Err(PartRefusal {
            in_use: GIB,
            limit: GIB
        })
    );
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (0, GIB));
    e.part_force("load", 0, Part::Context, MIB);
    assert_eq!(e.part_total(0, Part::Context), 257 * MIB);
    e.part_set("sync", 0, Part::Context, 200 * MIB);
    assert_eq!(e.part_total(0, Part::Context), 200 * MIB);
    e.part_shrink("destroy", 0, Part::Context, u64::MAX);
    assert_eq!(e.part_total(0, Part::Context), 0);
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (256 * MIB, GIB));
    let usage = e.quota(0).unwrap().usage();
    assert_eq!(
        (usage.part_peaks[Part::Context], usage.refusals),
        (257 * MIB, 1)
    );
}

#[test]
fn counting_allocations_leaves_the_parts_out() {
    let (e, _) = engine(&[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_COUNT", "allocations")]);
    assert!(!e.counts_footprint());
    assert_eq!(e.part_grow("ctx", 0, Part::Context, 2 * GIB), Ok(()));
    e.part_force("ctx", 0, Part::Context, 2 * GIB);
    assert_eq!(e.part_total(0, Part::Context), 0);
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (GIB, GIB));
}

#[test]
fn quota_refuses_and_free_gives_room_back() {
    let (e, _) = with_limit("1GiB");
    let ok = |p: u64| move || (CuResult::SUCCESS, p);
    for i in 0..4 {
        assert_eq!(
            e.alloc(
                "a",
                Kind::Pointer,
                Place::Current,
                256 * MIB,
                ok(0x1000 * (i + 1))
            ),
            CuResult::SUCCESS
        );
    }
    let mut called = false;
    let rc = e.alloc("a", Kind::Pointer, Place::Current, 1, || {
        called = true;
        (CuResult::SUCCESS, 0x9000)
    });
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
    assert!(!called, "a refused request never reaches the driver");
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (0, 1 << 30));
    assert_eq!(
        e.free("f", Kind::Pointer, 0x1000, || CuResult::SUCCESS),
        CuResult::SUCCESS
    );
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (256 * MIB, 1 << 30));
    assert_eq!(e.total_memory(0, 8 << 30), 1 << 30);
}

#[test]
fn driver_failure_rolls_back_and_passes_the_code_through() {
    let (e, _) = with_limit("1GiB");
    for code in [2, 1, 3, 12345] {
        let rc = e.alloc("a", Kind::Pointer, Place::Current, 1 << 30, || {
            (CuResult(code), 0)
        });
        assert_eq!(rc, CuResult(code));
    }
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (1 << 30, 1 << 30));
    assert_eq!(
        e.alloc("a", Kind::Pointer, Place::Current, 1 << 30, || (
            CuResult::SUCCESS,
            0x10
        )),
        CuResult::SUCCESS
    );
    // a failing free keeps the charge; an unknown pointer goes through untouched
    assert_eq!(
        e.free("f", Kind::Pointer, 0x10, || CuResult(999)),
        CuResult(999)
    );
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, 0);
    assert_eq!(
        e.free("f", Kind::Pointer, 0x1234, || CuResult(1)),
        CuResult(1)
    );
    assert_eq!(
        e.free("f", Kind::Pointer, 0x10, || CuResult::SUCCESS),
        CuResult::SUCCESS
    );
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, 1 << 30);
}

#[test]
fn pitch_charges_what_the_driver_gave() {
    let (e, _) = with_limit("1MiB");
    // 1000 × 1000 fits as an estimate; the driver's pitch of 1024 makes it 1024000 ≤ 1 MiB
    let rc = e.alloc_pitch(
        "p",
        1000,
        1000,
        || (CuResult::SUCCESS, 0x100, 1024),
        |_| panic!("no undo"),
    );
    assert_eq!(rc, CuResult::SUCCESS);
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB - 1_024_000);
    assert_eq!(
        e.free("f", Kind::Pointer, 0x100, || CuResult::SUCCESS),
        CuResult::SUCCESS
    );
    // 1040 × 1000 = 1040000 fits the estimate, but a 1536-byte pitch does not: undone
    let mut undone = 0;
    let rc = e.alloc_pitch(
        "p",
        1040,
        1000,
        || (CuResult::SUCCESS, 0x200, 1536),
        |p| undone = p,
    );
    assert_eq!((rc, undone), (CuResult::OUT_OF_MEMORY, 0x200));
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB);
}

#[test]
fn arrays_settle_to_the_drivers_size_which_is_remembered_per_shape() {
    let (e, _) = with_limit("2MiB");
    let shape = |w: u64, flags: u32| ArrayShape {
        width: w,
        height: 1000,
        depth: 0,
        format: 1,
        channels: 1,
        flags,
        levels: 1,
    };
    let asked = std::cell::Cell::new(0);
    let truth = |bytes: u64| {
        let asked = &asked;
        move |_device: u32| {
            asked.set(asked.get() + 1);
            Some(bytes)
        }
    };
    let no_undo = |_| panic!("no undo");
    // 1 000 000 estimated, 1 MiB true: settled up
    let ok = |p: u64| move || (CuResult::SUCCESS, p);
    let rc = e.alloc_array("a", shape(1000, 0), ok(0x10), truth(MIB), no_undo);
    assert_eq!((rc, asked.get()), (CuResult::SUCCESS, 1));
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB);
    // the same shape again: reserved at its true size at once, the driver not asked
    let rc = e.alloc_array("a", shape(1000, 0), ok(0x20), truth(0), no_undo);
    assert_eq!((rc, asked.get()), (CuResult::SUCCESS, 1));
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, 0);
    e.free("f", Kind::Array, 0x20, || CuResult::SUCCESS);
    // 1 040 000 estimated fits the 1 MiB left, 1.5 MiB true does not: destroyed, refused
    let mut undone = 0;
    let big = shape(1040, 0);
    let rc = e.alloc_array("a", big, ok(0x30), truth(3 * MIB / 2), |a| undone = a);
    assert_eq!((rc, undone), (CuResult::OUT_OF_MEMORY, 0x30));
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB);
    // now known: refused before the driver is called
    let rc = e.alloc_array("a", big, || panic!("not called"), truth(0), no_undo);
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
    // deferred-mapping and sparse arrays are not charged, whatever their size
    for flags in [CUDA_ARRAY3D_DEFERRED_MAPPING, CUDA_ARRAY3D_SPARSE] {
        let rc = e.alloc_array("a", shape(1 << 30, flags), ok(0x40), truth(0), no_undo);
        assert_eq!(rc, CuResult::SUCCESS);
    }
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB);
    // a driver that cannot say: the estimate is charged; destroy credits it
    let rc = e.alloc_array("a", shape(10, 0), ok(0x50), |_| None, no_undo);
    assert_eq!(rc, CuResult::SUCCESS);
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB - 10_000);
    e.free("f", Kind::Array, 0x50, || CuResult::SUCCESS);
    e.free("f", Kind::Array, 0x10, || CuResult::SUCCESS);
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, 2 * MIB);
}

#[test]
fn devices_places_and_percentages() {
    let (e, fake) = with_limit("0:1GiB,1:25%");
    assert_eq!(e.total_memory(1, 8 << 30), 2 << 30);
    assert_eq!(
        e.total_memory(2, 8 << 30),
        8 << 30,
        "unnamed devices are unlimited"
    );
    // cuMemCreate on device 1 from a thread without a context
    fake.set_current(None);
    assert_eq!(
        e.alloc("c", Kind::Handle, Place::Device(1), 2 << 30, || (
            CuResult::SUCCESS,
            7
        )),
        CuResult::SUCCESS
    );
    assert_eq!(
        e.alloc("c", Kind::Handle, Place::Device(1), 1, || (
            CuResult::SUCCESS,
            8
        )),
        CuResult::OUT_OF_MEMORY
    );
    // host memory is not charged; no context means nothing to charge
    assert_eq!(
        e.alloc("c", Kind::Handle, Place::Uncharged, 1 << 40, || (
            CuResult::SUCCESS,
            9
        )),
        CuResult::SUCCESS
    );
    assert_eq!(
        e.alloc("a", Kind::Pointer, Place::Current, 1, || (
            CuResult::INVALID_CONTEXT,
            0
        )),
        CuResult::INVALID_CONTEXT
    );
    assert_eq!(
        e.free("f", Kind::Handle, 7, || CuResult::SUCCESS),
        CuResult::SUCCESS
    );
    fake.set_current(Some(1));
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (2 << 30, 2 << 30));
    // pools remember their location; an unknown pool lands on the stream's device
    e.pool_located(0xabc, PoolPlace::Device(0));
    e.pool_located(0xdef, PoolPlace::Host);
    assert_eq!(e.pool_place(0xabc, 7), Place::Pool(0));
    assert_eq!(e.pool_place(0xdef, 7), Place::Uncharged);
    assert_eq!(e.pool_place(0x123, 7), Place::Stream(7));
    e.pool_destroyed(0xabc);
    assert_eq!(e.pool_place(0xabc, 7), Place::Stream(7));
}

/// A stream's context's device, whatever is current; no context: the driver answers.
#[test]
fn streams_and_pools_place_on_their_device() {
    let (e, fake) = with_limit("0:1GiB,1:1GiB");
    let gpu1_stream = fake::stream(fake::context(1));
    let ok = |p: u64| move || (CuResult::SUCCESS, p);
    // GPU 0 current, GPU 1's stream: charged on GPU 1
    let rc = e.alloc(
        "a",
        Kind::Pointer,
        Place::Stream(gpu1_stream),
        GIB,
        ok(0x10),
    );
    assert_eq!(rc, CuResult::SUCCESS);
    assert_eq!(e.quota(1).unwrap().held(), GIB);
    assert_eq!(e.quota(0).unwrap().held(), 0);
    // the default streams mean the current context
    for s in [0, 1, 2] {
        assert_eq!(
            e.alloc("a", Kind::Pointer, Place::Stream(s), 1, ok(0x20 + s as u64)),
            CuResult::SUCCESS
        );
    }
    assert_eq!(e.quota(0).unwrap().held(), 3);
    // no current context: a pool of GPU 1 on GPU 1's stream is charged there; the
    // default stream cannot be placed and the driver's answer comes back, uncharged
    fake.set_current(None);
    e.pool_located(0x9002, PoolPlace::Device(1));
    let place = e.pool_place(0x9002, gpu1_stream);
    assert_eq!(
        e.alloc("p", Kind::Pointer, place, 1, ok(0x40)),
        CuResult::OUT_OF_MEMORY
    );
    for (rc, key) in [(CuResult::SUCCESS, 0x50), (CuResult::INVALID_CONTEXT, 0)] {
        assert_eq!(
            e.alloc("a", Kind::Pointer, Place::Stream(0), 1, || (rc, key)),
            rc,
            "the driver's own answer"
        );
    }
    assert_eq!(e.quota(0).unwrap().held(), 3);
}

/// The driver frees a context's memory before cuquota credits it and may give an
/// address out again at once: the stale entry another context's allocation finds there
/// is given back and kept for the ending context's event, once.
#[test]
fn an_address_given_out_again_while_its_context_ends_stays_the_contexts() {
    let (e, fake) = with_limit("1GiB");
    let ok = |p: u64| move || (CuResult::SUCCESS, p);
    e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x100)); // context 0x1000
    let end = e.context_end("d", 0x1000, false);
    let slot = end.slot;
    assert_ne!(slot, NO_CONTEXT);
    fake.set_current(Some(1)); // another thread, context 0x1001, gets 0x100
    e.alloc("a", Kind::Pointer, Place::Current, 2 * MIB, ok(0x100));
    assert_eq!(e.contexts.ending().stolen_entries(), [(slot, 0x100, MIB)]);
    assert_eq!(e.quota(0).unwrap().held(), 0, "given back at once");
    e.context_destroyed("d", 0x1000);
    drop(end);
    assert!(e.contexts.ending().is_empty());
    assert_eq!(e.quota(1).unwrap().held(), 2 * MIB, "the new one stays");
    // not ending: a stale entry is only given back
    e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x300));
    fake.set_current(Some(0));
    e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x300));
    assert!(e.contexts.ending().stolen_entries().is_empty());
    assert_eq!(e.quota(1).unwrap().held(), 2 * MIB);
}

/// Destroying a context credits every kind it owns, nothing else: not a pool allocation
/// made on its stream (no context owns those). A primary reset also credits the device's
/// pool allocations.
#[test]
fn a_context_takes_its_charges_with_it() {
    let (e, fake) = with_limit("0:1GiB,1:1GiB");
    let ok = |p: u64| move || (CuResult::SUCCESS, p);
    e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x100));
    e.alloc("c", Kind::Handle, Place::Device(0), MIB, ok(0x200));
    e.pool_located(0x9001, PoolPlace::Device(1));
    // GPU 0's context allocates from GPU 1's pool: GPU 1 pays, no context owns it
    let place = e.pool_place(0x9001, 0);
    e.alloc("p", Kind::Pointer, place, MIB, ok(0x300));
    e.alloc("p", Kind::Pointer, Place::Stream(0), MIB, ok(0x500));
    fake.set_current(Some(1));
    e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x400));
    assert_eq!(e.quota(1).unwrap().held(), 2 * MIB);
    e.context_destroyed("d", 0x1000);
    assert_eq!(
        e.quota(0).unwrap().held(),
        2 * MIB,
        "the handle belongs to the process, the pool allocation to none"
    );
    assert_eq!(
        e.quota(1).unwrap().held(),
        2 * MIB,
        "GPU 1's own context keeps its own, and the pool allocation stays"
    );
    assert_eq!(
        e.free("f", Kind::Pointer, 0x100, || CuResult(1)),
        CuResult(1)
    );
    // primary contexts: a reset credits the retained one's charges and the device's pool
    // allocations, not another device's
    e.primary_retained(1, 0x1001);
    e.primary_gone("r", 1);
    assert_eq!(e.quota(1).unwrap().held(), 0);
    e.primary_gone("r", 5); // never retained: nothing
    assert_eq!(e.quota(0).unwrap().held(), 2 * MIB);
    // a primary context never current: its reset still takes the device's pool allocations
    e.primary_gone("r", 0);
    assert_eq!(e.quota(0).unwrap().held(), MIB, "the handle stays");
}

#[test]
fn the_summary_peak_is_what_was_held() {
    let (e, _) = with_limit("1GiB");
    // a 512 MiB request in flight, refused by the driver, while 4 KiB commits
    let rc = e.alloc("a", Kind::Pointer, Place::Current, 512 * MIB, || {
        let inner = e.alloc("a", Kind::Pointer, Place::Current, 4096, || {
            (CuResult::SUCCESS, 0x10)
        });
        assert_eq!(inner, CuResult::SUCCESS);
        (CuResult::OUT_OF_MEMORY, 0)
    });
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
    assert_eq!(e.quota(0).unwrap().usage().peak, 4096);
}

#[test]
fn observe_mode_allows_and_bad_config_fails_closed() {
    let (e, _) = engine(&[("CUQUOTA_LIMIT", "1KiB"), ("CUQUOTA_MODE", "observe")]);
    assert_eq!(
        e.alloc("a", Kind::Pointer, Place::Current, 4096, || (
            CuResult::SUCCESS,
            1
        )),
        CuResult::SUCCESS
    );
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (0, 1024));
    let (bad, _) = with_limit("6GBB");
    assert_eq!(bad.check_config(), Err(CuResult::INVALID_VALUE));
}

#[test]
fn exact_under_threads() {
    let (e, _) = with_limit("64MiB");
    let e = Arc::new(e);
    let next = Arc::new(AtomicU64::new(1));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (e, next) = (e.clone(), next.clone());
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for _ in 0..5000 {
                    let p = next.fetch_add(1, Relaxed) << 12;
                    if e.alloc("a", Kind::Pointer, Place::Current, 4 * MIB, || {
                        (CuResult::SUCCESS, p)
                    })
                    .is_ok()
                    {
                        live.push(p);
                    }
                    assert!(e.quota(0).unwrap().in_use() <= 64 * MIB);
                    if live.len() == 4 {
                        e.free("f", Kind::Pointer, live.remove(0), || CuResult::SUCCESS);
                    }
                }
                for p in live {
                    e.free("f", Kind::Pointer, p, || CuResult::SUCCESS);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let u = e.quota(0).unwrap().usage();
    assert_eq!(u.in_use, 0);
    assert_eq!(e.ledger(Kind::Pointer).live_on(0), (0, 0));
    assert!(u.peak <= 64 * MIB);
}

// ---- VMM lifetimes and imports ----

fn create(e: &Engine, handle: u64, bytes: u64) -> CuResult {
    let rc = e.alloc("c", Kind::Handle, Place::Device(0), bytes, || {
        (CuResult::SUCCESS, handle)
    });
    if rc.is_ok() {
        e.vmm_created(handle);
    }
    rc
}

fn free_bytes(e: &Engine) -> u64 {
    e.memory_info("m", 8 << 30, 8 << 30).0
}

#[test]
fn vmm_memory_stays_charged_while_mapped() {
    let (e, _) = with_limit("1GiB");
    let ok = || CuResult::SUCCESS;
    // the samples' pattern: create, map, release
    for (h, base) in [(1, 0x1000_0000), (2, 0x4000_0000)] {
        assert_eq!(create(&e, h, 512 * MIB), CuResult::SUCCESS);
        assert_eq!(e.vmm_map("m", base, 512 * MIB, h, ok), CuResult::SUCCESS);
        assert_eq!(e.vmm_release("r", h, ok), CuResult::SUCCESS);
    }
    assert_eq!(free_bytes(&e), 0, "released but mapped: still charged");
    assert_eq!(create(&e, 3, 512 * MIB), CuResult::OUT_OF_MEMORY);
    // retain + release around the unmap (NCCL's free path)
    let got = e.vmm_retain("t", 0x1000_0000 + 4096, || (CuResult::SUCCESS, 1));
    assert_eq!(got, CuResult::SUCCESS);
    assert_eq!(e.vmm_release("r", 1, ok), CuResult::SUCCESS);
    assert_eq!(free_bytes(&e), 0, "mapped memory is not credited");
    // a failed unmap keeps everything
    let failed = e.vmm_unmap("u", 0x1000_0000, 512 * MIB, || CuResult::INVALID_VALUE);
    assert_eq!(failed, CuResult::INVALID_VALUE);
    assert_eq!(free_bytes(&e), 0);
    assert_eq!(
        e.vmm_unmap("u", 0x1000_0000, 512 * MIB, ok),
        CuResult::SUCCESS
    );
    assert_eq!(free_bytes(&e), 512 * MIB, "the last unmap credits");
    // unmap first, then the release credits, once
    assert_eq!(create(&e, 3, 512 * MIB), CuResult::SUCCESS);
    assert_eq!(
        e.vmm_map("m", 0x7000_0000, 512 * MIB, 3, ok),
        CuResult::SUCCESS
    );
    assert_eq!(
        e.vmm_unmap("u", 0x7000_0000, 512 * MIB, ok),
        CuResult::SUCCESS
    );
    assert_eq!(free_bytes(&e), 0);
    assert_eq!(e.vmm_release("r", 3, ok), CuResult::SUCCESS);
    assert_eq!(free_bytes(&e), 512 * MIB);
    // released but mapped: a second release ends nothing, whatever the driver says
    assert_eq!(create(&e, 9, 2 * MIB), CuResult::SUCCESS);
    assert_eq!(
        e.vmm_map("m", 0xa000_0000, 2 * MIB, 9, ok),
        CuResult::SUCCESS
    );
    assert_eq!(e.vmm_release("r", 9, ok), CuResult::SUCCESS);
    assert_eq!(e.vmm_release("r", 9, ok), CuResult::SUCCESS);
    assert_eq!(free_bytes(&e), 510 * MIB);
    assert_eq!(
        e.vmm_unmap("u", 0xa000_0000, 2 * MIB, ok),
        CuResult::SUCCESS
    );
    assert_eq!(free_bytes(&e), 512 * MIB);
    let again = e.vmm_release("r", 3, || CuResult::INVALID_VALUE);
    assert_eq!(again, CuResult::INVALID_VALUE);
    assert_eq!(free_bytes(&e), 512 * MIB, "credited exactly once");
    // a failed release keeps the reference
    assert_eq!(create(&e, 4, 256 * MIB), CuResult::SUCCESS);
    assert_eq!(e.vmm_release("r", 4, || CuResult(999)), CuResult(999));
    assert_eq!(free_bytes(&e), 256 * MIB);
    assert_eq!(e.vmm_release("r", 4, ok), CuResult::SUCCESS);
    assert_eq!(free_bytes(&e), 512 * MIB);
    assert_eq!(e.ledger(Kind::Handle).live_on(0), (1, 512 * MIB));
}

#[test]
fn imports_are_not_charged_and_drop_stale_entries() {
    let (e, _) = with_limit("1GiB");
    let ok = || CuResult::SUCCESS;
    // an imported handle: mapping, retaining, unmapping and releasing it credit nothing
    assert_eq!(create(&e, 1, 256 * MIB), CuResult::SUCCESS);
    e.imported_handle(0x77, None);
    assert_eq!(
        e.vmm_map("m", 0x1000_0000, 64 * MIB, 0x77, ok),
        CuResult::SUCCESS
    );
    assert_eq!(
        e.vmm_retain("t", 0x1000_0000, || (CuResult::SUCCESS, 0x77)),
        CuResult::SUCCESS
    );
    assert_eq!(e.vmm_release("r", 0x77, ok), CuResult::SUCCESS);
    assert_eq!(
        e.vmm_unmap("u", 0x1000_0000, 64 * MIB, ok),
        CuResult::SUCCESS
    );
    assert_eq!(e.vmm_release("r", 0x77, ok), CuResult::SUCCESS);
    assert_eq!(free_bytes(&e), 768 * MIB);
    // an imported pointer at an address the ledger still holds: that entry was stale
    let p = 0x9000_0000;
    let alloc = e.alloc("a", Kind::Pointer, Place::Current, 128 * MIB, || {
        (CuResult::SUCCESS, p)
    });
    assert_eq!(alloc, CuResult::SUCCESS);
    e.imported_pointer("o", p);
    assert_eq!(free_bytes(&e), 768 * MIB);
    assert_eq!(e.free("f", Kind::Pointer, p, ok), CuResult::SUCCESS);
    assert_eq!(
        free_bytes(&e),
        768 * MIB,
        "the import's free credits nothing"
    );
}

/// cuda.h: freed once every reference "(including it's shareable counterparts)" is
/// released; each import "needs to pair it with ::cuMemRelease". An export is a reference
/// until its descriptor is closed, an import of it one more (whatever value the driver
/// gives it), and a handle value of ours given back by an import is never credited.
#[test]
fn an_exported_allocation_stays_charged_until_its_descriptor_closes() {
    use std::os::fd::AsRawFd;
    let (e, _) = with_limit("1GiB");
    let ok = || CuResult::SUCCESS;
    let path = std::env::temp_dir().join(format!("cuquota-export-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let fd = file.as_raw_fd();
    assert_eq!(create(&e, 1, 256 * MIB), CuResult::SUCCESS);
    e.vmm_exported(1, fd);
    e.imported_handle(0x55, Some(fd)); // another value for our allocation
    e.imported_handle(1, None); // our own value given back: one more reference
    for handle in [1, 0x55, 1] {
        assert_eq!(e.vmm_release("r", handle, ok), CuResult::SUCCESS);
    }
    assert_eq!(free_bytes(&e), 768 * MIB, "the export is still open");
    drop(file);
    assert_eq!(free_bytes(&e), GIB, "closed: the allocation is gone");
    assert_eq!(e.ledger(Kind::Handle).live_on(0), (0, 0));
}

/// Threads create, map, release and unmap (in both orders, with retains) under a
/// quota: it is never exceeded, and at rest nothing is charged.
#[test]
fn vmm_exact_under_threads() {
    let (e, _) = with_limit("64MiB");
    let e = Arc::new(e);
    let next = Arc::new(AtomicU64::new(1));
    let ok = || CuResult::SUCCESS;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (e, next) = (e.clone(), next.clone());
            std::thread::spawn(move || {
                for i in 0..2000u64 {
                    let h = next.fetch_add(1, Relaxed);
                    let base = h << 24;
                    if !create(&e, h, 4 * MIB).is_ok() {
                        continue;
                    }
                    assert!(e.quota(0).unwrap().in_use() <= 64 * MIB);
                    assert!(e.vmm_map("m", base, 4 * MIB, h, ok).is_ok());
                    if (i + t) % 3 == 0 {
                        let (rc, got) = (CuResult::SUCCESS, h);
                        assert!(e.vmm_retain("t", base + 4096, || (rc, got)).is_ok());
                        e.vmm_release("r", h, ok);
                    }
                    if i % 2 == 0 {
                        e.vmm_release("r", h, ok);
                        e.vmm_unmap("u", base, 4 * MIB, ok);
                    } else {
                        e.vmm_unmap("u", base, 4 * MIB, ok);
                        e.vmm_release("r", h, ok);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(e.quota(0).unwrap().in_use(), 0);
    assert_eq!(e.ledger(Kind::Handle).live_on(0), (0, 0));
}

mod context_memory;

#[test]
fn unknown_variants_are_counted_and_refused_where_the_policy_says() {
    let (e, _) = with_limit("1GiB");
    assert!(!e.unknown_variant(b"cuMemAlloc_v3", "cuMemAlloc", "dlsym"));
    assert!(!e.unknown_variant(b"cuMemAlloc_v3", "cuMemAlloc", "cuGetProcAddress"));
    assert!(!e.unknown_variant(b"cuMemFree_v3", "cuMemFree", "dlsym"));
    let lines = e.summary_lines();
    assert_eq!(
        lines.last().map(String::as_str),
        Some(
            "3 lookups of variants this build of cuquota does not know were handed out: \
             cuMemAlloc_v3, cuMemFree_v3"
        )
    );
    let (mut refusing, _) = with_limit("1GiB");
    if let Ok(c) = &mut refusing.config {
        c.refuse_unknown_variants = true;
    }
    assert!(refusing.unknown_variant(b"cuMemAlloc_v3", "cuMemAlloc", "dlsym"));
    let (bad, _) = with_limit("6GBB");
    assert!(
        bad.unknown_variant(b"cuMemAlloc_v3", "cuMemAlloc", "dlsym"),
        "fail closed"
    );
    let (quiet, _) = with_limit("1GiB");
    assert!(quiet.summary_lines().is_empty());
}
