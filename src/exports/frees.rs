//! Frees: the engine credits what the allocation was charged once the driver freed it.

use super::{hook, hooked, per_thread, table};
use crate::cuda_abi::{CuDevicePtr, CuDevicePtrV1, CuResult, CuStream};
use crate::engine::Kind;
use crate::in_hook;
use crate::lookup::{CFunction, Real};
use crate::real_driver as real;

// `#[inline]`: also called from `arrays` (see the frames in mod.rs).
#[inline]
pub(super) fn free_of<F: CFunction>(
    real: &'static Real<F>,
    kind: Kind,
    key: u64,
    call: impl Fn(F) -> CuResult,
) -> CuResult {
    hook(
        real,
        |f, e| e.free(real.name(), kind, key, || call(f)),
        &call,
    )
}

hooked!(cuMemFree_v2, |ptr: CuDevicePtr| {
    // SAFETY: the caller's argument, passed on.
    free_of(&real::cuMemFree_v2, Kind::Pointer, ptr, |real| unsafe {
        real(ptr)
    })
});

hooked!(cuMemFree, |ptr: CuDevicePtrV1| {
    // SAFETY: the caller's argument, passed on.
    free_of(&real::cuMemFree, Kind::Pointer, ptr.into(), |real| unsafe {
        real(ptr)
    })
});

/// `cuMemFreeAsync(_ptsz)`: on a capturing stream the free is a graph node (the memory
/// stays until the graph runs), so nothing is credited.
fn free_async(
    real: &'static Real<real::cuMemFreeAsync>,
    ptr: CuDevicePtr,
    stream: CuStream,
    meant: usize,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    let call = |real: real::cuMemFreeAsync| unsafe { real(ptr, stream) };
    hook(
        real,
        |f, e| {
            if real::stream_capturing(meant) {
                return in_hook::driver(|| call(f));
            }
            e.free(real.name(), Kind::Pointer, ptr, || call(f))
        },
        call,
    )
}

hooked!(cuMemFreeAsync, |ptr: CuDevicePtr, stream: CuStream| {
    free_async(&real::cuMemFreeAsync, ptr, stream, stream as usize)
});

hooked!(cuMemFreeAsync_ptsz, |ptr: CuDevicePtr, stream: CuStream| {
    free_async(&real::cuMemFreeAsync_ptsz, ptr, stream, per_thread(stream))
});

table!(cuMemFree_v2, cuMemFree, cuMemFreeAsync, cuMemFreeAsync_ptsz);
