//! VMM lifetimes and imports. A `cuMemCreate` allocation is charged until it is released,
//! unmapped and every export of it closed (the engine's `vmm_*` entry points keep the
//! books); imports are never charged (an import of our own export is a reference of ours).

use super::{hook, hooked, out, table};
use crate::cuda_abi::{
    CuArrayMapInfo, CuDevicePtr, CuIpcMemHandle, CuMemHandle, CuMemoryPool, CuResult, CuStream,
};
use crate::ffi;
use crate::in_hook;
use crate::lookup::{CFunction, Real};
use crate::real_driver as real;
use std::ffi::{c_int, c_uint, c_void};

hooked!(cuMemRelease, |handle: CuMemHandle| {
    // SAFETY: the caller's argument, passed on.
    let call = |real: real::cuMemRelease| unsafe { real(handle) };
    hook(
        &real::cuMemRelease,
        |real, e| e.vmm_release(real::cuMemRelease.name(), handle, || call(real)),
        call,
    )
});

hooked!(cuMemMap, |ptr: CuDevicePtr,
                   size: usize,
                   offset: usize,
                   handle: CuMemHandle,
                   flags: u64| {
    // SAFETY: the caller's arguments, passed on.
    let call = |real: real::cuMemMap| unsafe { real(ptr, size, offset, handle, flags) };
    hook(
        &real::cuMemMap,
        |real, e| {
            e.vmm_map(real::cuMemMap.name(), ptr, size as u64, handle, || {
                call(real)
            })
        },
        call,
    )
});

hooked!(cuMemUnmap, |ptr: CuDevicePtr, size: usize| {
    // SAFETY: the caller's arguments, passed on.
    let call = |real: real::cuMemUnmap| unsafe { real(ptr, size) };
    hook(
        &real::cuMemUnmap,
        |real, e| e.vmm_unmap(real::cuMemUnmap.name(), ptr, size as u64, || call(real)),
        call,
    )
});

// Freeing a reservation ends whatever the driver still has mapped in it (if it allows
// that at all: a refusal ends nothing).
hooked!(cuMemAddressFree, |ptr: CuDevicePtr, size: usize| {
    // SAFETY: the caller's arguments, passed on.
    let call = |real: real::cuMemAddressFree| unsafe { real(ptr, size) };
    hook(
        &real::cuMemAddressFree,
        |real, e| {
            e.vmm_unmap(real::cuMemAddressFree.name(), ptr, size as u64, || {
                call(real)
            })
        },
        call,
    )
});

hooked!(
    cuMemRetainAllocationHandle,
    |handle: *mut CuMemHandle, addr: *mut c_void| {
        // SAFETY: the caller's arguments, passed on; `handle` is its out-pointer.
        let call =
            |real: real::cuMemRetainAllocationHandle| unsafe { out(real(handle, addr), handle) };
        hook(
            &real::cuMemRetainAllocationHandle,
            |real, e| {
                let api = real::cuMemRetainAllocationHandle.name();
                e.vmm_retain(api, addr as u64, || call(real))
            },
            |real| call(real).0,
        )
    }
);

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`: the shareable handle is an `int` descriptor
/// (passed to an import as the pointer's value).
const HANDLE_TYPE_POSIX_FD: c_int = 1;

hooked!(
    cuMemImportFromShareableHandle,
    |handle: *mut CuMemHandle, os_handle: *mut c_void, kind: c_int| {
        // SAFETY: the caller's arguments, passed on; `handle` is its out-pointer.
        let call = |real: real::cuMemImportFromShareableHandle| unsafe {
            out(real(handle, os_handle, kind), handle)
        };
        let fd = (kind == HANDLE_TYPE_POSIX_FD).then_some(os_handle as usize as c_int);
        hook(
            &real::cuMemImportFromShareableHandle,
            |real, e| {
                let (rc, imported) = in_hook::driver(|| call(real));
                if rc.is_ok() {
                    e.imported_handle(imported, fd);
                }
                rc
            },
            |real| call(real).0,
        )
    }
);

// An exported descriptor is a reference of the allocation ("including it's shareable
// counterparts"): it keeps the memory until it is closed.
hooked!(
    cuMemExportToShareableHandle,
    |shareable: *mut c_void, handle: CuMemHandle, kind: c_int, flags: u64| {
        // SAFETY: the caller's arguments, passed on.
        let call = |real: real::cuMemExportToShareableHandle| unsafe {
            real(shareable, handle, kind, flags)
        };
        hook(
            &real::cuMemExportToShareableHandle,
            |real, e| {
                let rc = in_hook::driver(|| call(real));
                if rc.is_ok() && kind == HANDLE_TYPE_POSIX_FD {
                    // SAFETY: for a POSIX descriptor `shareable` is the caller's `int *`,
                    // which the driver just wrote.
                    if let Some(fd) = unsafe { ffi::input(shareable as *const c_int) } {
                        e.vmm_exported(handle, *fd);
                    }
                }
                rc
            },
            call,
        )
    }
);

/// An import that gives a device pointer: the driver's call, then the engine forgets any
/// stale charge at that address; nothing is charged.
fn import_pointer<F: CFunction>(
    real: &'static Real<F>,
    call: impl Fn(F) -> (CuResult, u64),
) -> CuResult {
    hook(
        real,
        |f, e| {
            let (rc, ptr) = in_hook::driver(|| call(f));
            if rc.is_ok() {
                e.imported_pointer(real.name(), ptr);
            }
            rc
        },
        |f| call(f).0,
    )
}

hooked!(
    cuIpcOpenMemHandle_v2,
    |dptr: *mut CuDevicePtr, handle: CuIpcMemHandle, flags: c_uint| {
        // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
        import_pointer(&real::cuIpcOpenMemHandle_v2, |real| unsafe {
            out(real(dptr, handle, flags), dptr)
        })
    }
);

hooked!(
    cuIpcOpenMemHandle,
    |dptr: *mut CuDevicePtr, handle: CuIpcMemHandle, flags: c_uint| {
        // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
        import_pointer(&real::cuIpcOpenMemHandle, |real| unsafe {
            out(real(dptr, handle, flags), dptr)
        })
    }
);

hooked!(
    cuMemPoolImportPointer,
    |dptr: *mut CuDevicePtr, pool: CuMemoryPool, data: *mut c_void| {
        // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
        import_pointer(&real::cuMemPoolImportPointer, |real| unsafe {
            out(real(dptr, pool, data), dptr)
        })
    }
);

hooked!(
    cuExternalMemoryGetMappedBuffer,
    |dptr: *mut CuDevicePtr, memory: *mut c_void, desc: *const c_void| {
        // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
        import_pointer(&real::cuExternalMemoryGetMappedBuffer, |real| unsafe {
            out(real(dptr, memory, desc), dptr)
        })
    }
);

/// A map or unmap into a sparse or deferred-mapping array: a mapping of the allocation.
fn map_array(
    real: &'static Real<real::cuMemMapArrayAsync>,
    infos: *mut CuArrayMapInfo,
    count: c_uint,
    stream: CuStream,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    let call = |f: real::cuMemMapArrayAsync| unsafe { f(infos, count, stream) };
    hook(
        real,
        |f, e| {
            // SAFETY: `infos` is null or the caller's `count` valid CUarrayMapInfo.
            let list = unsafe { ffi::inputs(infos, count as usize) };
            e.vmm_map_array(real.name(), &list, || call(f))
        },
        call,
    )
}

hooked!(
    cuMemMapArrayAsync,
    |infos: *mut CuArrayMapInfo, count: c_uint, stream: CuStream| {
        map_array(&real::cuMemMapArrayAsync, infos, count, stream)
    }
);

hooked!(
    cuMemMapArrayAsync_ptsz,
    |infos: *mut CuArrayMapInfo, count: c_uint, stream: CuStream| {
        map_array(&real::cuMemMapArrayAsync_ptsz, infos, count, stream)
    }
);

table!(
    cuMemMapArrayAsync,
    cuMemMapArrayAsync_ptsz,
    cuMemExportToShareableHandle,
    cuMemRelease,
    cuMemMap,
    cuMemUnmap,
    cuMemAddressFree,
    cuMemRetainAllocationHandle,
    cuMemImportFromShareableHandle,
    cuIpcOpenMemHandle_v2,
    cuIpcOpenMemHandle,
    cuMemPoolImportPointer,
    cuExternalMemoryGetMappedBuffer
);
