//! Contexts as owners: the hooks of a context's end (destroy, detach, a primary context's
//! reset or last release, which credit what the context owned), of an attach, and of the
//! retain that makes a primary context (measured: context memory is a part of the
//! footprint).

use super::{hooked, measured, out_handle, table, watched, watched_ending, Ends};
use crate::cuda_abi::{CuContext, CuDevice, CuResult};
use crate::ffi::Out;
use crate::lookup::Real;
use crate::real_driver as real;
use std::ffi::c_uint;

fn context_destroyed(real: &'static Real<real::cuCtxDestroy>, ctx: CuContext) -> CuResult {
    watched_ending(
        real,
        Ends::Surely,
        |_| ctx as usize,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(ctx) },
        |e| e.context_destroyed(real.name(), ctx as usize),
    )
}

hooked!(cuCtxDestroy_v2, |ctx: CuContext| {
    context_destroyed(&real::cuCtxDestroy_v2, ctx)
});

hooked!(cuCtxDestroy, |ctx: CuContext| {
    context_destroyed(&real::cuCtxDestroy, ctx)
});

// Deprecated, still exported (PyCUDA): destroys the context when its usage count drops to
// 0; `cuCtxAttach`'s references are counted so that only that detach credits.
hooked!(cuCtxDetach, |ctx: CuContext| {
    watched_ending(
        &real::cuCtxDetach,
        Ends::Maybe,
        |_| ctx as usize,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(ctx) },
        |e| e.context_detached(real::cuCtxDetach.name(), ctx as usize),
    )
});

hooked!(cuCtxAttach, |ctx: *mut CuContext, flags: c_uint| {
    watched(
        &real::cuCtxAttach,
        // SAFETY: the caller's arguments, passed on.
        |f| unsafe { f(ctx, flags) },
        |e| {
            // SAFETY: `ctx` is the caller's out-pointer, null or valid.
            if let Some(c) = unsafe { Out::new(ctx) } {
                e.context_attached(c.get() as usize);
            }
        },
    )
});

// The retain that makes the primary context is measured (context memory, a part of the footprint).
hooked!(
    cuDevicePrimaryCtxRetain,
    |ctx: *mut CuContext, dev: CuDevice| {
        // SAFETY: the caller's arguments, passed on; `ctx` is its out-pointer.
        let call = |f: real::cuDevicePrimaryCtxRetain| unsafe { out_handle(f(ctx, dev), ctx) };
        measured(
            &real::cuDevicePrimaryCtxRetain,
            |f, e| {
                let api = real::cuDevicePrimaryCtxRetain.name();
                // Not active: this retain makes it (an unknown state counts as made already).
                let inactive = || real::primary_active(dev as u32) == Ok(false);
                e.primary_retain(api, dev, inactive, || call(f), || release_primary(dev))
            },
            |f| call(f).0,
        )
    }
);

/// Drops the reference a refused retain took.
fn release_primary(dev: CuDevice) {
    let release = real::cuDevicePrimaryCtxRelease_v2.get();
    if let Some(f) = release.or(real::cuDevicePrimaryCtxRelease.get()) {
        // SAFETY: the retain this undoes succeeded on `dev`.
        unsafe { f(dev) };
    }
}

fn primary_reset(real: &'static Real<real::cuDevicePrimaryCtxReset>, dev: CuDevice) -> CuResult {
    watched_ending(
        real,
        Ends::Surely,
        |e| e.primary_context(dev as u32),
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(dev) },
        |e| {
            if let Ok(device) = u32::try_from(dev) {
                e.primary_gone(real.name(), device);
            }
        },
    )
}

hooked!(cuDevicePrimaryCtxReset_v2, |dev: CuDevice| {
    primary_reset(&real::cuDevicePrimaryCtxReset_v2, dev)
});

hooked!(cuDevicePrimaryCtxReset, |dev: CuDevice| {
    primary_reset(&real::cuDevicePrimaryCtxReset, dev)
});

/// The release that drops the last reference destroys the primary context: the driver says
/// whether it is still active.
fn primary_release(
    real: &'static Real<real::cuDevicePrimaryCtxRelease>,
    dev: CuDevice,
) -> CuResult {
    watched_ending(
        real,
        Ends::Maybe,
        |e| e.primary_context(dev as u32),
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(dev) },
        |e| {
            if let (Ok(device), Ok(false)) = (u32::try_from(dev), real::primary_active(dev as u32))
            {
                e.primary_gone(real.name(), device);
            }
        },
    )
}

hooked!(cuDevicePrimaryCtxRelease_v2, |dev: CuDevice| {
    primary_release(&real::cuDevicePrimaryCtxRelease_v2, dev)
});

hooked!(cuDevicePrimaryCtxRelease, |dev: CuDevice| {
    primary_release(&real::cuDevicePrimaryCtxRelease, dev)
});

table!(
    cuCtxDestroy_v2,
    cuCtxDestroy,
    cuCtxDetach,
    cuCtxAttach,
    cuDevicePrimaryCtxRetain,
    cuDevicePrimaryCtxReset_v2,
    cuDevicePrimaryCtxReset,
    cuDevicePrimaryCtxRelease_v2,
    cuDevicePrimaryCtxRelease
);
