//! Green contexts: the creation is measured as context memory (like `cuCtxCreate`'s) and
//! undone when it does not fit; the `CUcontext` of one (`cuCtxFromGreenCtx`, the context of
//! its streams) is charged on its device; the destruction gives back what it took and
//! frees its slots (`engine/green_contexts.rs` says how).

use super::{hooked, measured, out_handle, table, watched};
use crate::cuda_abi::{CuContext, CuDevice, CuStream};
use crate::real_driver::{self as real, CuGreenCtx};
use std::ffi::{c_int, c_uint, c_void};

/// Destroys a green context the caller never got (it did not fit).
fn destroy_green(green: usize) {
    if let Some(f) = real::cuGreenCtxDestroy.get() {
        // SAFETY: the driver just made this green context for this call; nobody else has it.
        unsafe { f(green as CuGreenCtx) };
    }
}

hooked!(cuGreenCtxCreate, |green: *mut CuGreenCtx,
                           desc: *mut c_void,
                           dev: CuDevice,
                           flags: c_uint| {
    // SAFETY: the caller's arguments, passed on; `green` is its out-pointer.
    let call = |f: real::cuGreenCtxCreate| unsafe { f(green, desc, dev, flags) };
    measured(
        &real::cuGreenCtxCreate,
        |f, e| {
            // SAFETY: `green` is the caller's out-pointer, null or valid.
            let create = || unsafe { out_handle(call(f), green) };
            e.green_context_create(real::cuGreenCtxCreate.name(), dev, create, destroy_green)
        },
        call,
    )
});

hooked!(cuGreenCtxDestroy, |green: CuGreenCtx| {
    watched(
        &real::cuGreenCtxDestroy,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(green) },
        |e| {
            let api = real::cuGreenCtxDestroy.name();
            e.green_context_destroyed(api, green as usize, real::primary_active)
        },
    )
});

hooked!(
    cuCtxFromGreenCtx,
    |context: *mut CuContext, green: CuGreenCtx| {
        watched(
            &real::cuCtxFromGreenCtx,
            // SAFETY: the caller's arguments, passed on.
            |f| unsafe { f(context, green) },
            |e| {
                // SAFETY: the call succeeded: `context` is the caller's valid out-pointer.
                let (_, made) = unsafe { out_handle(crate::cuda_abi::CuResult::SUCCESS, context) };
                e.green_context_seen(green as usize, made)
            },
        )
    }
);

hooked!(
    cuGreenCtxStreamCreate,
    |stream: *mut CuStream, green: CuGreenCtx, flags: c_uint, priority: c_int| {
        watched(
            &real::cuGreenCtxStreamCreate,
            // SAFETY: the caller's arguments, passed on.
            |f| unsafe { f(stream, green, flags, priority) },
            |e| {
                // SAFETY: the call succeeded: `stream` is the caller's valid out-pointer.
                let (_, made) = unsafe { out_handle(crate::cuda_abi::CuResult::SUCCESS, stream) };
                e.green_stream_made(green as usize, made)
            },
        )
    }
);

table!(
    cuGreenCtxCreate,
    cuGreenCtxDestroy,
    cuCtxFromGreenCtx,
    cuGreenCtxStreamCreate
);
