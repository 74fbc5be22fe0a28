use super::*;
use crate::engine::tests::fake::{self, with_limit, FakeDriver, GIB, MIB};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

const DEFAULT_POOL: usize = fake::default_pool(0);
/// Device 0's context, the current one; every stream here is one of its.
const CONTEXT: usize = fake::context(0);
const STREAM: usize = fake::stream(CONTEXT);

/// `cuMemAllocAsync` of `size` from the device's current pool (the default one).
fn alloc_async(e: &Engine, d: &FakeDriver, size: u64) -> (CuResult, u64) {
    alloc_from(e, d, PoolOf::Current, size)
}

fn alloc_from(e: &Engine, d: &FakeDriver, pool: PoolOf, size: u64) -> (CuResult, u64) {
    let handle = match pool {
        PoolOf::Current => DEFAULT_POOL,
        PoolOf::Given(p) => p,
    };
    let got = std::cell::Cell::new(0);
    let rc = e.alloc_pooled(
        "cuMemAllocAsync",
        pool,
        STREAM,
        size,
        || {
            let (rc, ptr) = d.pool_alloc(handle, size);
            got.set(ptr);
            (rc, ptr)
        },
        |ptr| {
            d.pool_free(ptr);
        },
    );
    (rc, if rc.is_ok() { got.get() } else { 0 })
}

fn free_async(e: &Engine, d: &FakeDriver, ptr: u64) -> CuResult {
    e.free("cuMemFreeAsync", Kind::Pointer, ptr, || d.pool_free(ptr))
}

fn usage(e: &Engine) -> crate::quota::Usage {
    e.quota(0).unwrap().usage()
}

fn pool_cache(e: &Engine) -> u64 {
    e.part_total(0, Part::PoolCache)
}

#[test]
fn settled_to_the_pools_chunk_growth() {
    let (e, d) = with_limit("1GiB");
    let (rc, p) = alloc_async(&e, &d, 3 * MIB);
    assert_eq!(rc, CuResult::SUCCESS);
    // 4 MiB reserved (two chunks) for 3 MiB used: the pool keeps 1 MiB
    assert_eq!(pool_cache(&e), MIB);
    assert_eq!(usage(&e).in_use, 4 * MIB);
    let (_, q) = alloc_async(&e, &d, MIB);
    assert_eq!(pool_cache(&e), 0, "the second fits in what the pool kept");
    // freed: the pool keeps it
    assert_eq!(free_async(&e, &d, p), CuResult::SUCCESS);
    assert_eq!((pool_cache(&e), usage(&e).in_use), (3 * MIB, 4 * MIB));
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, GIB - 4 * MIB);
    // after a synchronisation the pool gave back what no allocation uses
    d.sync();
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, GIB - 2 * MIB);
    assert_eq!(pool_cache(&e), MIB);
    assert_eq!(free_async(&e, &d, q), CuResult::SUCCESS);
    d.sync();
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, GIB);
    assert_eq!((usage(&e).in_use, usage(&e).part_peaks.0[0]), (0, 3 * MIB));
}

/// The 12-GiB example at 64 MiB: a pool that never gives memory back holds 64 MiB it
/// freed; a plain 64 MiB allocation trims it and fits, never above the quota.
#[test]
fn a_pool_that_keeps_memory_is_trimmed_for_a_plain_allocation() {
    let (e, d) = with_limit("64MiB");
    d.set_threshold(DEFAULT_POOL, u64::MAX);
    let (_, p) = alloc_async(&e, &d, 64 * MIB);
    free_async(&e, &d, p);
    d.sync();
    assert_eq!(usage(&e).in_use, 64 * MIB, "the pool keeps it");
    let plain = e.alloc(
        "cuMemAlloc_v2",
        Kind::Pointer,
        Place::Current,
        64 * MIB,
        || (CuResult::SUCCESS, 0x7000_0000),
    );
    assert_eq!(plain, CuResult::SUCCESS);
    assert_eq!(d.reserved(), 0, "trimmed");
    let u = usage(&e);
    assert_eq!((u.in_use, u.peak, u.refusals), (64 * MIB, 64 * MIB, 0));
    assert_eq!((u.trims, u.trimmed), (1, 64 * MIB));
    assert_eq!(pool_cache(&e), 0);
}

#[test]
fn live_pool_memory_is_not_trimmed_and_the_request_is_refused() {
    let (e, d) = with_limit("64MiB");
    let (_, _p) = alloc_async(&e, &d, 64 * MIB);
    let plain = e.alloc(
        "cuMemAlloc_v2",
        Kind::Pointer,
        Place::Current,
        64 * MIB,
        || panic!("not called"),
    );
    assert_eq!(plain, CuResult::OUT_OF_MEMORY);
    let u = usage(&e);
    assert_eq!((u.in_use, u.refusals, u.trims), (64 * MIB, 1, 0));
}

/// Growth beyond the quota: the device's pools are trimmed first; when that is not
/// enough the allocation is freed and refused, and nothing of it stays charged.
#[test]
fn pool_growth_that_does_not_fit_is_undone() {
    let (e, d) = with_limit("7680KiB");
    let other = 0x901;
    let (_, a) = alloc_async(&e, &d, 2 * MIB);
    let (_, _b) = alloc_async(&e, &d, 2 * MIB);
    let (_, c) = alloc_from(&e, &d, PoolOf::Given(other), MIB);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (6 * MIB, MIB));
    free_async(&e, &d, a);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (6 * MIB, 3 * MIB));
    // 2 MiB more from the other pool fits the quota, but the pool grows by a chunk
    // beyond it: trimming the default pool (which keeps 2 MiB) makes room
    let (rc, _) = alloc_from(&e, &d, PoolOf::Given(other), 2 * MIB);
    assert_eq!(rc, CuResult::SUCCESS);
    let u = usage(&e);
    assert_eq!(
        (u.in_use, u.trims, u.trimmed, u.refusals),
        (6 * MIB, 1, 2 * MIB, 0)
    );
    assert_eq!(d.reserved(), 6 * MIB);
    // now nothing is left to trim: the allocation is undone and refused
    let (rc, _) = alloc_from(&e, &d, PoolOf::Given(other), 3 * MIB / 2);
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
    assert_eq!((usage(&e).in_use, d.reserved()), (6 * MIB, 6 * MIB));
    assert_eq!(usage(&e).refusals, 1);
    assert_eq!(e.pool_cache.books().live_on(0), (3, 5 * MIB));
    free_async(&e, &d, c);
    assert_eq!(usage(&e).in_use, d.reserved());
}

#[test]
fn a_plain_free_of_pool_memory_moves_it_to_the_cache() {
    let (e, d) = with_limit("1GiB");
    let (_, p) = alloc_async(&e, &d, 2 * MIB);
    let rc = e.free("cuMemFree_v2", Kind::Pointer, p, || d.pool_free(p));
    assert_eq!(rc, CuResult::SUCCESS);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (2 * MIB, 2 * MIB));
    // unknown pointers still reach the driver, unchanged
    let rc = e.free("cuMemFree_v2", Kind::Pointer, 0x1234, || CuResult(1));
    assert_eq!(rc, CuResult(1));
    // a failed free keeps the charge where it was
    let (_, q) = alloc_async(&e, &d, 2 * MIB);
    let rc = e.free("cuMemFree_v2", Kind::Pointer, q, || CuResult(1));
    assert_eq!(rc, CuResult(1));
    assert_eq!(e.pool_cache.books().live_on(0), (1, 2 * MIB));
}

#[test]
fn a_destroyed_pool_keeps_its_memory_until_its_last_allocation_goes() {
    let (e, d) = with_limit("1GiB");
    let pool = 0x902;
    let (_, p) = alloc_from(&e, &d, PoolOf::Given(pool), 3 * MIB);
    let (_, q) = alloc_from(&e, &d, PoolOf::Given(pool), MIB);
    free_async(&e, &d, p);
    e.pool_destroyed(pool);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (4 * MIB, 3 * MIB));
    free_async(&e, &d, q);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (0, 0));
    // one with nothing live goes at once (a new pool, by the same handle)
    d.pool_destroy(pool);
    let (_, r) = alloc_from(&e, &d, PoolOf::Given(pool), MIB);
    free_async(&e, &d, r);
    assert_eq!(usage(&e).in_use, 2 * MIB);
    e.pool_destroyed(pool);
    assert_eq!(usage(&e).in_use, 0);
}

/// cuda.h: pool allocations "are not associated with any CUDA context": a destroyed context
/// takes none of them, a free from anywhere gives the room back.
#[test]
fn a_destroyed_context_leaves_its_streams_pool_allocations_charged() {
    let (e, d) = with_limit("1GiB");
    let (_, p) = alloc_async(&e, &d, 3 * MIB);
    e.context_destroyed("cuCtxDestroy_v2", CONTEXT);
    assert_eq!(e.pool_cache.books().live_on(0), (1, 3 * MIB));
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (4 * MIB, MIB));
    assert_eq!(free_async(&e, &d, p), CuResult::SUCCESS);
    d.sync();
    e.memory_info("m", 8 << 30, 8 << 30);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (0, 0));
    // counted as plain allocations: the same
    let (e, d) = fake::engine(&[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_COUNT", "allocations")]);
    let (_, p) = alloc_async(&e, &d, 3 * MIB);
    e.context_destroyed("cuCtxDestroy_v2", CONTEXT);
    assert_eq!(usage(&e).in_use, 3 * MIB);
    assert_eq!(free_async(&e, &d, p), CuResult::SUCCESS);
    assert_eq!(usage(&e).in_use, 0);
}

/// A primary reset is device-wide: the device's pool allocations go, whichever context's
/// stream made them, and the pools are read again.
#[test]
fn a_primary_reset_takes_the_devices_pool_allocations_and_the_pools_are_read_again() {
    for surely in [false, true] {
        let (e, d) = with_limit("1GiB");
        d.set_threshold(DEFAULT_POOL, u64::MAX);
        e.primary_retained(0, CONTEXT);
        let (_, p) = alloc_async(&e, &d, 3 * MIB);
        // the driver frees the device's pool allocations; the pool keeps the memory
        let mut end = e.context_end("cuDevicePrimaryCtxReset_v2", CONTEXT, surely);
        d.pool_free(p);
        end.conclude(true);
        drop(end);
        e.primary_gone("cuDevicePrimaryCtxReset_v2", 0);
        assert_eq!(e.pool_cache.books().live_on(0), (0, 0));
        assert_eq!((usage(&e).in_use, pool_cache(&e)), (4 * MIB, 4 * MIB));
        assert!(e.pool_cache.books().no_pointers());
    }
    // threshold 0: the reset gave it back, and so does the quota
    let (e, d) = with_limit("1GiB");
    e.primary_retained(0, CONTEXT);
    let (_, p) = alloc_async(&e, &d, 3 * MIB);
    d.pool_free(p);
    d.sync();
    e.primary_gone("cuDevicePrimaryCtxReset_v2", 0);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (0, 0));
}

#[test]
fn counting_allocations_reads_no_pool() {
    let (e, d) = fake::engine(&[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_COUNT", "allocations")]);
    let (rc, p) = alloc_async(&e, &d, 3 * MIB);
    assert_eq!(rc, CuResult::SUCCESS);
    assert_eq!(usage(&e).in_use, 3 * MIB);
    free_async(&e, &d, p);
    assert_eq!(usage(&e).in_use, 0);
    e.memory_info("m", 8 << 30, 8 << 30);
    assert_eq!(d.pool_reads.load(Relaxed), 0);
    assert_eq!(e.ledger(Kind::Pointer).live_on(0), (0, 0));
}

/// Threads mix stream-ordered and plain allocations under a quota: the quota holds at
/// every step, and at rest cuquota's figure is the pools' reservation exactly.
#[test]
fn exact_under_threads() {
    let (e, d) = with_limit("64MiB");
    let (e, d) = (Arc::new(e), d);
    let plain = Arc::new(AtomicU64::new(1));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (e, d, plain) = (e.clone(), d.clone(), plain.clone());
            std::thread::spawn(move || {
                let pool = [PoolOf::Current, PoolOf::Given(0x903)][t as usize % 2];
                let mut live = Vec::new();
                for i in 0..400u64 {
                    let size = MIB / 2 + (i % 5) * MIB / 4;
                    if i % 3 == 0 {
                        let p = plain.fetch_add(1, Relaxed) << 40;
                        let rc = e.alloc("a", Kind::Pointer, Place::Current, 4 * MIB, || {
                            (CuResult::SUCCESS, p)
                        });
                        if rc.is_ok() {
                            e.free("f", Kind::Pointer, p, || CuResult::SUCCESS);
                        }
                    } else if let (CuResult::SUCCESS, p) = alloc_from(&e, &d, pool, size) {
                        live.push(p);
                    }
                    assert!(e.quota(0).unwrap().in_use() <= 64 * MIB);
                    if live.len() > 3 {
                        free_async(&e, &d, live.remove(0));
                    }
                    if i % 50 == 0 {
                        d.sync();
                    }
                }
                for p in live {
                    free_async(&e, &d, p);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(usage(&e).peak <= 64 * MIB);
    assert_eq!(usage(&e).in_use, pool_cache(&e), "no allocation live");
    assert!(
        pool_cache(&e) >= d.unused(),
        "never below what the pools keep"
    );
    e.memory_info("m", 8 << 30, 8 << 30);
    assert_eq!(pool_cache(&e), d.unused(), "read again: exact");
}
