//! `cuCtxSetLimit` / `cuCtxGetLimit`: a context's limits, remembered. The shim runs no
//! kernels, so a limit only has to read back what was set (or the driver's usual default).

use crate::abi::*;
use crate::context;
use crate::state::{self, State};

const STACK_SIZE: u32 = 0x00;
const MAX_L2_FETCH_GRANULARITY: u32 = 0x05;
const PERSISTING_L2_CACHE_SIZE: u32 = 0x06;
const SHMEM_SIZE: u32 = 0x07;
const CIG_ENABLED: u32 = 0x08;

/// A limit's value in a context that never set it, as a current GPU's driver reports it.
/// `None`: a limit the shim does not know (`CUDA_ERROR_UNSUPPORTED_LIMIT`).
fn default(limit: u32) -> Option<usize> {
    Some(match limit {
        STACK_SIZE => 1024,
        0x01 => 1 << 20, // PRINTF_FIFO_SIZE
        0x02 => 8 << 20, // MALLOC_HEAP_SIZE
        0x03 => 2,       // DEV_RUNTIME_SYNC_DEPTH
        0x04 => 2048,    // DEV_RUNTIME_PENDING_LAUNCH_COUNT
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

pub fn set(limit: u32, value: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    let ctx = current(&state)?;
    check_set(limit, value)?;
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
}
