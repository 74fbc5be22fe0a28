//! Allocations: every call that gives the caller new device memory is charged before the
//! driver makes it (the engine reserves, calls, then commits or rolls back), and memory the
//! caller never gets (over the quota after the fact) is freed here on its behalf.

use super::{hook, hooked, out, per_thread, table};
use crate::cuda_abi::{
    CuDevicePtr, CuDevicePtrV1, CuMemAllocationProp, CuMemHandle, CuMemoryPool, CuResult, CuStream,
    Located,
};
use crate::engine::{Engine, Kind, Place, PoolOf};
use crate::ffi::{self, written, Out};
use crate::lookup::{CFunction, Real};
use crate::real_driver as real;
use std::cell::Cell;
use std::ffi::c_uint;

/// A device-pointer allocation on the current context's device.
fn alloc_on<F: CFunction>(
    real: &'static Real<F>,
    place: impl FnOnce(&Engine) -> Place,
    bytes: u64,
    call: impl Fn(F) -> (CuResult, u64),
) -> CuResult {
    hook(
        real,
        |f, e| e.alloc(real.name(), Kind::Pointer, place(e), bytes, || call(f)),
        |f| call(f).0,
    )
}

hooked!(cuMemAlloc_v2, |dptr: *mut CuDevicePtr, bytes: usize| {
    alloc_on(
        &real::cuMemAlloc_v2,
        |_| Place::Current,
        bytes as u64,
        // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
        |real| unsafe { out(real(dptr, bytes), dptr) },
    )
});

hooked!(cuMemAlloc, |dptr: *mut CuDevicePtrV1, bytes: c_uint| {
    alloc_on(
        &real::cuMemAlloc,
        |_| Place::Current,
        bytes.into(),
        // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
        |real| unsafe { out(real(dptr, bytes), dptr) },
    )
});

hooked!(
    cuMemAllocPitch_v2,
    |dptr: *mut CuDevicePtr, pitch: *mut usize, width: usize, height: usize, element: c_uint| {
        let call = |real: real::cuMemAllocPitch_v2| {
            // SAFETY: the caller's arguments, passed on; `dptr` and `pitch` are its out-pointers.
            unsafe {
                let (rc, ptr) = out(real(dptr, pitch, width, height, element), dptr);
                let pitch = Out::new(pitch).filter(|_| rc.is_ok());
                (rc, ptr, pitch.map_or(0, |p| p.get() as u64))
            }
        };
        hook(
            &real::cuMemAllocPitch_v2,
            |real, e| {
                e.alloc_pitch(
                    real::cuMemAllocPitch_v2.name(),
                    width as u64,
                    height as u64,
                    || call(real),
                    free_plain,
                )
            },
            |real| call(real).0,
        )
    }
);

hooked!(cuMemAllocPitch, |dptr: *mut CuDevicePtrV1,
                          pitch: *mut c_uint,
                          width: c_uint,
                          height: c_uint,
                          element: c_uint| {
    let call = |real: real::cuMemAllocPitch| {
        // SAFETY: the caller's arguments, passed on; `dptr` and `pitch` are its out-pointers.
        unsafe {
            let (rc, ptr) = out(real(dptr, pitch, width, height, element), dptr);
            (rc, ptr, written(rc.is_ok(), pitch))
        }
    };
    hook(
        &real::cuMemAllocPitch,
        |real, e| {
            e.alloc_pitch(
                real::cuMemAllocPitch.name(),
                width.into(),
                height.into(),
                || call(real),
                free_plain,
            )
        },
        |real| call(real).0,
    )
});

/// Frees an allocation the caller never got (a pitch allocation over quota).
fn free_plain(ptr: u64) {
    if let Some(real) = real::cuMemFree_v2.get() {
        // SAFETY: ptr was just returned by the driver and is known to nobody else.
        unsafe { real(ptr) };
    }
}

hooked!(
    cuMemAllocManaged,
    |dptr: *mut CuDevicePtr, bytes: usize, flags: c_uint| {
        alloc_on(
            &real::cuMemAllocManaged,
            |_| Place::Current,
            bytes as u64,
            // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
            |real| unsafe { out(real(dptr, bytes, flags), dptr) },
        )
    }
);

/// # Safety
/// The caller's arguments of `cuMemAllocAsync(_ptsz)`; `stream` as the variant means it.
unsafe fn alloc_async(
    real: &'static Real<real::cuMemAllocAsync>,
    dptr: *mut CuDevicePtr,
    bytes: usize,
    stream: CuStream,
    meant: usize,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
    let call = |real: real::cuMemAllocAsync| unsafe { out(real(dptr, bytes, stream), dptr) };
    hook(
        real,
        |f, e| {
            // On a capturing stream the driver records a graph node and allocates nothing.
            if real::stream_capturing(meant) {
                return call(f).0;
            }
            let pool = PoolOf::Current;
            let undo = |ptr| free_pool_memory(real.name(), ptr, stream);
            e.alloc_pooled(real.name(), pool, meant, bytes as u64, || call(f), undo)
        },
        |f| call(f).0,
    )
}

hooked!(
    cuMemAllocAsync,
    |dptr: *mut CuDevicePtr, bytes: usize, stream: CuStream| {
        // SAFETY: the caller's arguments, passed on.
        unsafe { alloc_async(&real::cuMemAllocAsync, dptr, bytes, stream, stream as usize) }
    }
);

hooked!(
    cuMemAllocAsync_ptsz,
    |dptr: *mut CuDevicePtr, bytes: usize, stream: CuStream| {
        let meant = per_thread(stream);
        // SAFETY: the caller's arguments, passed on.
        unsafe { alloc_async(&real::cuMemAllocAsync_ptsz, dptr, bytes, stream, meant) }
    }
);

/// # Safety
/// The caller's arguments of `cuMemAllocFromPoolAsync(_ptsz)`; `stream` as the variant
/// means it.
unsafe fn alloc_from_pool(
    real: &'static Real<real::cuMemAllocFromPoolAsync>,
    dptr: *mut CuDevicePtr,
    bytes: usize,
    pool: CuMemoryPool,
    stream: CuStream,
    meant: usize,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
    let call =
        |real: real::cuMemAllocFromPoolAsync| unsafe { out(real(dptr, bytes, pool, stream), dptr) };
    hook(
        real,
        |f, e| {
            if real::stream_capturing(meant) {
                return call(f).0;
            }
            let from = PoolOf::Given(pool as usize);
            let undo = |ptr| free_pool_memory(real.name(), ptr, stream);
            e.alloc_pooled(real.name(), from, meant, bytes as u64, || call(f), undo)
        },
        |f| call(f).0,
    )
}

/// Frees a pool allocation the caller never got (its pool's growth was over the quota) on
/// the caller's `stream`, with the variant its allocation used (`_ptsz` for `_ptsz`, whose
/// 0 is the per-thread default stream).
fn free_pool_memory(allocated_by: &str, ptr: u64, stream: CuStream) {
    let free = if allocated_by.ends_with("_ptsz") {
        &real::cuMemFreeAsync_ptsz
    } else {
        &real::cuMemFreeAsync
    };
    if let Some(real) = free.get() {
        // SAFETY: ptr was just returned by the driver and is known to nobody else; the
        // stream is the caller's.
        unsafe { real(ptr, stream) };
    }
}

hooked!(
    cuMemAllocFromPoolAsync,
    |dptr: *mut CuDevicePtr, bytes: usize, pool: CuMemoryPool, stream: CuStream| {
        let meant = stream as usize;
        // SAFETY: the caller's arguments, passed on.
        unsafe {
            alloc_from_pool(
                &real::cuMemAllocFromPoolAsync,
                dptr,
                bytes,
                pool,
                stream,
                meant,
            )
        }
    }
);

hooked!(
    cuMemAllocFromPoolAsync_ptsz,
    |dptr: *mut CuDevicePtr, bytes: usize, pool: CuMemoryPool, stream: CuStream| {
        // SAFETY: the caller's arguments, passed on.
        unsafe {
            alloc_from_pool(
                &real::cuMemAllocFromPoolAsync_ptsz,
                dptr,
                bytes,
                pool,
                stream,
                per_thread(stream),
            )
        }
    }
);

hooked!(cuMemCreate, |handle: *mut CuMemHandle,
                      size: usize,
                      prop: *const CuMemAllocationProp,
                      flags: u64| {
    // SAFETY: the caller's arguments, passed on; `handle` is its out-pointer.
    let call = |real: real::cuMemCreate| unsafe { out(real(handle, size, prop, flags), handle) };
    // The properties name the device (no current context is needed): `DEVICE` or a
    // `DEVICE_LOCALITY_DOMAIN` of it; the three host types are not charged; any other
    // location is refused (see `CuMemLocation::located`). No properties: the driver's answer.
    // SAFETY: `prop` is null or the caller's valid CUmemAllocationProp.
    let place = match unsafe { ffi::input(prop) }.map(|p| (p.location, p.location.located())) {
        Some((_, Located::Device(device))) => Ok(Place::Device(device)),
        Some((_, Located::Host)) | None => Ok(Place::Uncharged),
        Some((location, Located::Unknown)) => Err(location),
    };
    hook(
        &real::cuMemCreate,
        |real, e| {
            let place = match place {
                Ok(place) => place,
                Err(location) => return e.unknown_location(real::cuMemCreate.name(), location),
            };
            let made = Cell::new(0);
            let rc = e.alloc(
                real::cuMemCreate.name(),
                Kind::Handle,
                place,
                size as u64,
                || {
                    let (rc, h) = call(real);
                    made.set(h);
                    (rc, h)
                },
            );
            if rc.is_ok() {
                e.vmm_created(made.get());
            }
            rc
        },
        |real| call(real).0,
    )
});

table!(
    cuMemAlloc_v2,
    cuMemAlloc,
    cuMemAllocPitch_v2,
    cuMemAllocPitch,
    cuMemAllocManaged,
    cuMemAllocAsync,
    cuMemAllocAsync_ptsz,
    cuMemAllocFromPoolAsync,
    cuMemAllocFromPoolAsync_ptsz,
    cuMemCreate
);
