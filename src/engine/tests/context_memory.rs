//! Context memory through the engine: the glue between `context_memory`'s rules,
//! the driver's and NVML's answers, and the footprint's context part.
use super::super::*;
use super::fake::{self, FakeDriver, GIB, MIB};
use crate::cuda_abi::CuResult;
use crate::quota::Part;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// An engine on a GPU whose free memory NVML and the driver agree on; its current context
/// is 0x1000; NVML does not list the process until a test says what it uses.
fn engine(vars: &[(&str, &str)]) -> (Engine, Arc<FakeDriver>) {
    let (e, gpu) = fake::engine(vars);
    gpu.enable_nvml();
    (e, gpu)
}

/// A retain that makes the primary context, which takes `bytes` of the GPU.
fn retain(e: &Engine, gpu: &FakeDriver, bytes: u64, released: &std::cell::Cell<bool>) -> CuResult {
    e.primary_retain(
        "cuDevicePrimaryCtxRetain",
        0,
        || true,
        || {
            gpu.take(0, bytes);
            (CuResult::SUCCESS, 0x1000)
        },
        || {
            gpu.give(0, bytes);
            released.set(true);
        },
    )
}

#[test]
fn the_primary_context_is_charged_and_credited_at_its_reset() {
    let (e, gpu) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    let released = std::cell::Cell::new(false);
    assert_eq!(retain(&e, &gpu, 300 * MIB, &released), CuResult::SUCCESS);
    assert_eq!(e.part_total(0, Part::Context), 300 * MIB);
    assert_eq!(e.memory_info("m", 8 * GIB, 8 * GIB).0, GIB - 300 * MIB);
    // a retain of the active context measures nothing
    let again = e.primary_retain("r", 0, || false, || (CuResult::SUCCESS, 0x1000), || {});
    assert_eq!(again, CuResult::SUCCESS);
    assert_eq!(e.part_total(0, Part::Context), 300 * MIB);
    e.primary_gone("cuDevicePrimaryCtxReset_v2", 0);
    assert_eq!(e.part_total(0, Part::Context), 0);
    assert!(!released.get());
}

#[test]
fn a_context_that_does_not_fit_is_undone_and_refused() {
    let (e, gpu) = engine(&[("CUQUOTA_LIMIT", "256MiB")]);
    let released = std::cell::Cell::new(false);
    let rc = retain(&e, &gpu, 300 * MIB, &released);
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
    assert!(released.get(), "released again");
    assert_eq!(e.part_total(0, Part::Context), 0);
    // a created one is destroyed, and its slot is free again
    let destroyed = std::cell::Cell::new(0);
    let rc = e.context_create(
        "cuCtxCreate_v2",
        0,
        || {
            gpu.take(0, 300 * MIB);
            (CuResult::SUCCESS, 0x2000)
        },
        |c| destroyed.set(c),
    );
    assert_eq!((rc, destroyed.get()), (CuResult::OUT_OF_MEMORY, 0x2000));
    assert_eq!(e.contexts.find(0x2000), None);
}

#[test]
fn a_limit_that_does_not_fit_is_set_back() {
    let (e, gpu) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
    let released = std::cell::Cell::new(false);
    retain(&e, &gpu, 100 * MIB, &released);
    let gpu = &*gpu;
    let grow = |bytes: u64| {
        move || {
            gpu.take(0, bytes);
            (CuResult::SUCCESS, ())
        }
    };
    let ok = e.context_grows("cuCtxSetLimit", grow(64 * MIB), |()| None, |()| false);
    assert_eq!(ok, CuResult::SUCCESS);
    assert_eq!(e.part_total(0, Part::Context), 164 * MIB);
    let set_back = std::cell::Cell::new(false);
    let undo = |()| {
        gpu.give(0, GIB);
        set_back.set(true);
        true
    };
    let refused = e.context_grows("cuCtxSetLimit", grow(GIB), |()| None, undo);
    assert_eq!((refused, set_back.get()), (CuResult::OUT_OF_MEMORY, true));
    assert_eq!(e.part_total(0, Part::Context), 164 * MIB);
    // a module's load is given back at its unload
    let load = || {
        gpu.take(0, 8 * MIB);
        (CuResult::SUCCESS, 0xd0d)
    };
    let loaded = e.context_grows("cuModuleLoad", load, Some, |_| true);
    assert_eq!(loaded, CuResult::SUCCESS);
    assert_eq!(e.part_total(0, Part::Context), 172 * MIB);
    e.module_unloaded("cuModuleUnload", 0xd0d);
    assert_eq!(e.part_total(0, Part::Context), 164 * MIB);
    // what cannot be undone is charged anyway
    let kept = e.context_grows("cuCtxSetLimit", grow(GIB), |()| None, |()| false);
    assert_eq!(kept, CuResult::SUCCESS);
    assert_eq!(e.part_total(0, Part::Context), 164 * MIB + GIB);
}

/// NVML's figure for the process corrects the context part at `cuMemGetInfo`.
#[test]
fn nvml_corrects_the_context_part_at_a_memory_query() {
    let (e, gpu) = engine(&[("CUQUOTA_LIMIT", "2GiB")]);
    let released = std::cell::Cell::new(false);
    gpu.set_used(0, 300 * MIB);
    retain(&e, &gpu, 300 * MIB, &released);
    assert_eq!(e.part_total(0, Part::Context), 300 * MIB);
    // 1 s later, the first kernel launch loaded 200 MiB of modules
    gpu.set_used(0, 500 * MIB);
    std::thread::sleep(std::time::Duration::from_millis(1010));
    assert_eq!(e.memory_info("m", 8 * GIB, 8 * GIB).0, 2 * GIB - 500 * MIB);
    assert_eq!(e.part_total(0, Part::Context), 500 * MIB);
}

#[test]
fn allocations_mode_and_zero_ask_nothing() {
    for vars in [
        [("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_COUNT", "allocations")],
        [("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_CONTEXT", "0")],
    ] {
        let (e, gpu) = engine(&vars);
        let released = std::cell::Cell::new(false);
        assert_eq!(retain(&e, &gpu, 300 * MIB, &released), CuResult::SUCCESS);
        assert_eq!(e.memory_info("m", 8 * GIB, 8 * GIB).0, GIB);
        assert_eq!(gpu.nvml_calls.load(Relaxed), 0);
        assert_eq!(e.contexts.find(0x1000).map(|(_, d)| d), Some(0));
    }
}

/// A green context: its creation is measured like a context's, its `CUcontext` charges its
/// device, and at its destruction what that context owns goes to the primary context (still
/// active) or is credited (the destruction was the primary context's last release).
#[test]
fn a_green_context_is_measured_and_its_context_handed_over() {
    let (e, gpu) = engine(&[("CUQUOTA_LIMIT", "0:1GiB,1:1GiB")]);
    let ok = |p: u64| move || (CuResult::SUCCESS, p);
    let made = |green: usize| {
        let create = || {
            gpu.take(1, 100 * MIB);
            (CuResult::SUCCESS, green)
        };
        e.green_context_create("cuGreenCtxCreate", 1, create, |_| {})
    };
    assert_eq!(made(0x7000), CuResult::SUCCESS);
    assert_eq!(e.part_total(1, Part::Context), 100 * MIB);
    e.primary_retained(1, 0x2001);
    e.green_context_seen(0x7000, fake::context(1));
    gpu.set_current(Some(1));
    e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x100));
    e.green_context_destroyed("cuGreenCtxDestroy", 0x7000, |_| Ok(true));
    gpu.give(1, 100 * MIB);
    assert_eq!(e.part_total(1, Part::Context), 0);
    assert_eq!(e.contexts.find(0x7000), None, "its slot is free");
    assert_eq!(e.contexts.find(fake::context(1)), None, "its context's too");
    assert_eq!(e.quota(1).unwrap().held(), MIB, "the primary context's now");
    e.primary_gone("cuDevicePrimaryCtxReset_v2", 1);
    assert_eq!(e.quota(1).unwrap().held(), 0);
    // the destruction that was the primary context's last release credits its context's
    assert_eq!(made(0x7001), CuResult::SUCCESS);
    e.green_context_seen(0x7001, fake::context(1));
    e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x200));
    assert_eq!(e.quota(1).unwrap().held(), 100 * MIB + MIB);
    e.green_context_destroyed("cuGreenCtxDestroy", 0x7001, |_| Ok(false));
    assert_eq!(e.quota(1).unwrap().held(), 0);
}
