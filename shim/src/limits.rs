//! `cuCtxSetLimit` / `cuCtxGetLimit`: a context's limits, remembered. The shim runs no
//! kernels, so a limit only has to read back what was set (or the driver's usual default).
//!
//! Three limits take device memory, as on the real driver, which reserves it when the limit
//! is set (and fails with `CUDA_ERROR_OUT_OF_MEMORY` when it cannot): the malloc heap and
//! the printf FIFO their value in bytes, the stack its value for every thread the device can
//! hold resident at once ([`resident_threads`]: SMs × threads per SM, 132 × 2048 = 270,336
//! on the shim's Hopper-class device, so the 1 KiB default stack is 264 MiB). What the
//! defaults take is inside `CUDA_SHIM_CONTEXT_MEMORY`; the growth beyond them is charged to
//! the context (its device's `context_memory`), a smaller value gives it back, and the
//! context's end frees it.

use crate::abi::*;
use crate::context;
use crate::devices;
use crate::state::{self, State};

/// `CUdevice_attribute` values.
const MULTIPROCESSOR_COUNT: i32 = 16;
const MAX_THREADS_PER_MULTIPROCESSOR: i32 = 39;

const STACK_SIZE: u32 = 0x00;
const PRINTF_FIFO_SIZE: u32 = 0x01;
const MALLOC_HEAP_SIZE: u32 = 0x02;
const MAX_L2_FETCH_GRANULARITY: u32 = 0x05;
const PERSISTING_L2_CACHE_SIZE: u32 = 0x06;
const SHMEM_SIZE: u32 = 0x07;
const CIG_ENABLED: u32 = 0x08;

/// A limit's value in a context that never set it, as a current GPU's driver reports it.
/// `None`: a limit the shim does not know (`CUDA_ERROR_UNSUPPORTED_LIMIT`).
fn default(limit: u32) -> Option<usize> {
    Some(match limit {
        STACK_SIZE => 1024,
        PRINTF_FIFO_SIZE => 1 << 20,
        MALLOC_HEAP_SIZE => 8 << 20,
        0x03 => 2,    // DEV_RUNTIME_SYNC_DEPTH
        0x04 => 2048, // DEV_RUNTIME_PENDING_LAUNCH_COUNT
        MAX_L2_FETCH_GRANULARITY => 64,
        PERSISTING_L2_CACHE_SIZE => 0,
        // The shim's contexts are never CIG contexts.
        CIG_ENABLED => 0,
        _ => return None,
    })
}

/// Checks a value for `cuCtxSetLimit`.
fn check_set(limit: u32, value: usize) -> Result<(), CUresult> {
    default(limit).ok_or(CUDA_ERROR_UNSUPPORTED_LIMIT)?;
    match limit {
        // Query-only limits.
        SHMEM_SIZE | CIG_ENABLED => Err(CUDA_ERROR_INVALID_VALUE),
        MAX_L2_FETCH_GRANULARITY if value > 128 => Err(CUDA_ERROR_INVALID_VALUE),
        _ => Ok(()),
    }
}

fn current(state: &State) -> Result<usize, CUresult> {
    context::current(state).map(|(handle, _)| handle)
}

/// How many threads the device with this physical index holds resident at once: its SM
/// count times its threads per SM, as its attributes report them.
fn resident_threads(physical: usize) -> u64 {
    let attribute = |a| devices::attribute(a, physical).unwrap_or(0).max(0) as u64;
    attribute(MULTIPROCESSOR_COUNT) * attribute(MAX_THREADS_PER_MULTIPROCESSOR)
}

/// The device memory a limit's value takes (0 for the limits that take none).
fn memory(limit: u32, value: usize, threads: u64) -> u64 {
    match limit {
        STACK_SIZE => (value as u64).saturating_mul(threads),
        PRINTF_FIFO_SIZE | MALLOC_HEAP_SIZE => value as u64,
        _ => 0,
    }
}

/// What a limit's value takes beyond its default's (which the context's own memory holds).
fn growth(limit: u32, value: usize, threads: u64) -> u64 {
    let default = default(limit).unwrap_or(0);
    memory(limit, value, threads).saturating_sub(memory(limit, default, threads))
}

pub fn set(limit: u32, value: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    let ctx = current(&state)?;
    check_set(limit, value)?;
    let context = &state.contexts[&ctx];
    let device = context.device;
    // A primary context released for the last time (or reset) is gone until retained
    // again: it has no limits to set.
    if context.primary && state.devices[device].primary_refs == 0 {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    let threads = resident_threads(state.devices[device].physical);
    let old = state.limits.get(&(ctx, limit)).copied();
    let old = old.or(default(limit)).unwrap_or(0);
    let (before, after) = (growth(limit, old, threads), growth(limit, value, threads));
    if after > before {
        state.devices[device].charge_context(after - before)?;
    } else {
        state.devices[device].uncharge_context(before - after);
    }
    if let Some(context) = state.contexts.get_mut(&ctx) {
        context.memory = context.memory + after - before;
    }
    state.limits.insert((ctx, limit), value);
    Ok(())
}

pub fn get(limit: u32) -> Result<usize, CUresult> {
    let state = state::lock();
    let ctx = current(&state)?;
    let value = default(limit).ok_or(CUDA_ERROR_UNSUPPORTED_LIMIT)?;
    Ok(state.limits.get(&(ctx, limit)).copied().unwrap_or(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_limits_have_defaults_and_settable_ones_check_values() {
        assert_eq!(default(STACK_SIZE), Some(1024));
        assert_eq!(default(0x0A), None);
        assert_eq!(check_set(0x0A, 1), Err(CUDA_ERROR_UNSUPPORTED_LIMIT));
        assert_eq!(check_set(CIG_ENABLED, 1), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(
            check_set(MAX_L2_FETCH_GRANULARITY, 129),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        assert_eq!(check_set(MAX_L2_FETCH_GRANULARITY, 128), Ok(()));
        assert_eq!(check_set(0x02, 64 << 20), Ok(()));
    }

    #[test]
    fn memory_limits_charge_their_growth_over_the_defaults() {
        let threads = resident_threads(0);
        assert_eq!(threads, 132 * 2048);
        assert_eq!(memory(STACK_SIZE, 1024, threads), 264 << 20);
        assert_eq!(growth(STACK_SIZE, 1024, threads), 0);
        assert_eq!(growth(STACK_SIZE, 4096, threads), (3 * 264) << 20);
        assert_eq!(growth(STACK_SIZE, 512, threads), 0);
        assert_eq!(growth(MALLOC_HEAP_SIZE, 64 << 20, threads), 56 << 20);
        assert_eq!(growth(PRINTF_FIFO_SIZE, 3 << 20, threads), 2 << 20);
        assert_eq!(growth(PRINTF_FIFO_SIZE, 1 << 10, threads), 0);
        assert_eq!(growth(0x04, 1 << 20, threads), 0);
        assert_eq!(
            growth(STACK_SIZE, usize::MAX, threads),
            u64::MAX - (264 << 20)
        );
    }
}
