//! Context memory through the engine (issue 11): the glue between `context_memory`'s rules,
//! the driver's and NVML's answers, and the footprint's context part.
use super::super::*;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// One 8 GiB GPU whose free memory NVML and the driver agree on; its current context is
/// 0x1000; `used` is this process's NVML figure (u64::MAX: not listed).
struct Gpu {
    free: AtomicU64,
    used: AtomicU64,
    nvml_calls: AtomicU32,
}

impl Queries for Arc<Gpu> {
    fn current_device(&self) -> Result<u32, CuResult> {
        Ok(0)
    }
    fn current_context(&self) -> usize {
        0x1000
    }
    fn context_device(&self, _: usize) -> Result<u32, CuResult> {
        Ok(0)
    }
    fn stream_context(&self, _: usize) -> Result<usize, CuResult> {
        Ok(0x1000)
    }
    fn total_memory(&self, _: u32) -> Result<u64, CuResult> {
        Ok(8 * GIB)
    }
    fn memory_info(&self) -> Result<(u64, u64), CuResult> {
        Ok((self.free.load(Relaxed), 8 * GIB))
    }
    fn nvml_free(&self, _: u32) -> Option<u64> {
        self.nvml_calls.fetch_add(1, Relaxed);
        Some(self.free.load(Relaxed))
    }
    fn used_by_process(&self, _: u32) -> Option<u64> {
        self.nvml_calls.fetch_add(1, Relaxed);
        Some(self.used.load(Relaxed)).filter(|u| *u != u64::MAX)
    }
}

fn engine(vars: &[(&str, &str)]) -> (Engine, Arc<Gpu>) {
    crate::log::configure(&crate::config::LogTarget::Off);
    let gpu = Arc::new(Gpu {
        free: AtomicU64::new(8 * GIB),
        used: AtomicU64::new(u64::MAX),
        nvml_calls: AtomicU32::new(0),
    });
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain([("CUQUOTA_LOG".into(), "off".into())])
        .collect();
    let config = Config::from_vars(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()));
    (Engine::new(config, Box::new(gpu.clone())), gpu)
}

/// A retain that makes the primary context, which takes `bytes` of the GPU.
fn retain(e: &Engine, gpu: &Gpu, bytes: u64, released: &std::cell::Cell<bool>) -> CuResult {
    e.primary_retain(
        "cuDevicePrimaryCtxRetain",
        0,
        || true,
        || {
            gpu.free.fetch_sub(bytes, Relaxed);
            (CuResult::SUCCESS, 0x1000)
        },
        || {
            gpu.free.fetch_add(bytes, Relaxed);
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
            gpu.free.fetch_sub(300 * MIB, Relaxed);
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
            gpu.free.fetch_sub(bytes, Relaxed);
            (CuResult::SUCCESS, ())
        }
    };
    let ok = e.context_grows("cuCtxSetLimit", grow(64 * MIB), |()| None, |()| false);
    assert_eq!(ok, CuResult::SUCCESS);
    assert_eq!(e.part_total(0, Part::Context), 164 * MIB);
    let set_back = std::cell::Cell::new(false);
    let undo = |()| {
        gpu.free.fetch_add(GIB, Relaxed);
        set_back.set(true);
        true
    };
    let refused = e.context_grows("cuCtxSetLimit", grow(GIB), |()| None, undo);
    assert_eq!((refused, set_back.get()), (CuResult::OUT_OF_MEMORY, true));
    assert_eq!(e.part_total(0, Part::Context), 164 * MIB);
    // a module's load is given back at its unload
    let load = || {
        gpu.free.fetch_sub(8 * MIB, Relaxed);
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
    gpu.used.store(300 * MIB, Relaxed);
    retain(&e, &gpu, 300 * MIB, &released);
    assert_eq!(e.part_total(0, Part::Context), 300 * MIB);
    // 1 s later, the first kernel launch loaded 200 MiB of modules
    gpu.used.store(500 * MIB, Relaxed);
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
