//! The shim's own test helpers (not part of CUDA): fault injection and the shim's own
//! accounting, to cross-check an interposer against.

use std::ffi::{c_char, c_int, c_uint};

use super::{settings, TABLE};
use crate::abi::*;
use crate::ffi::{self, write_optional, Out};
use crate::{context, faults, memory, state};

exports! {
    /// Makes the `nth` call (0: every call) of the exported function `func` from now on return
    /// `code` without doing anything. Code 0 removes `func`'s rules; a null `func` removes all
    /// rules. Returns 0, or 1 if `func` is not an exported function.
    fn cuShimInjectFault(
        func: *const c_char,
        nth: c_uint,
        code: c_uint,
    ) as cuShimInjectFault since 0, helper {
        let func = if func.is_null() {
            None
        } else {
            Some(ffi::c_str(func)?)
        };
        if func.is_some_and(|f| !TABLE.is_exported(f)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // The environment's rules first, so that they cannot overwrite these.
        let _ = settings();
        faults::inject(func, nth, code);
        Ok(())
    }

    /// The driver takes `bytes` more device memory for the current context on its own, as
    /// lazy module loading or a launch's local memory would (see `context::grow_current`).
    /// Returns 0, 2 if it does not fit, or 201 without a current context.
    fn cuShimContextGrowth(bytes: usize) as cuShimContextGrowth since 0, helper {
        context::grow_current(bytes as u64)
    }

    /// The shim's own accounting of a device: bytes in use, the peak of that, and the number
    /// of live allocations (each output may be null). Returns 0, 3 before `cuInit`, or 101 for
    /// a bad device.
    fn cuShimStats(
        dev: c_int,
        in_use: *mut usize,
        peak: *mut usize,
        live: *mut u64,
    ) as cuShimStats since 0, helper {
        let (in_use, peak, live) = (
            Out::optional(in_use),
            Out::optional(peak),
            Out::optional(live),
        );
        if !state::is_initialized() {
            return Err(CUDA_ERROR_NOT_INITIALIZED);
        }
        let (bytes, high, count) = memory::stats(dev)?;
        write_optional(in_use, bytes as usize);
        write_optional(peak, high as usize);
        write_optional(live, count);
        Ok(())
    }

    /// The shim's own footprint of a device by part: bytes of live allocations
    /// (as `cuShimStats`' in use), of pool reservations beyond their live allocations, of
    /// the graph memory pool's reservation and of context memory. Their sum is what the
    /// device's capacity and `cuMemGetInfo` go by. Each output may be null. Returns 0, 3
    /// before `cuInit`, or 101 for a bad device.
    fn cuShimFootprint(
        dev: c_int,
        allocations: *mut usize,
        pool_cache: *mut usize,
        graph: *mut usize,
        context: *mut usize,
    ) as cuShimFootprint since 0, helper {
        let outs = [
            Out::optional(allocations),
            Out::optional(pool_cache),
            Out::optional(graph),
            Out::optional(context),
        ];
        if !state::is_initialized() {
            return Err(CUDA_ERROR_NOT_INITIALIZED);
        }
        let (a, p, g, c) = memory::footprint(dev)?;
        for (out, value) in outs.into_iter().zip([a, p, g, c]) {
            write_optional(out, value as usize);
        }
        Ok(())
    }
}
