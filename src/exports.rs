//! Every C entry point cuquota exports, each a thin call into the engine, and the table of
//! them that the routing (`lookup`) hands out for `dlsym` and `cuGetProcAddress`.
//!
//! A hook is named as the driver symbol it stands in for; its real function is the slot of
//! that name in `real_driver`, and `CUDA_HOOKS` checks that both have one prototype. Adding
//! a plainly hooked function: its line in `real_driver`'s table, the hook here, and its
//! name in `CUDA_HOOKS` (the compiler says when the line is missing or the prototypes differ,
//! `every_exported_hook_is_in_the_table` when the name is).
//!
//! These are `unsafe extern "C"` because they are the CUDA driver's own prototypes: the
//! caller promises what the driver documentation asks (valid out-pointers, a valid
//! `CUmemAllocationProp`), and we read and write those pointers (through `ffi`) exactly
//! where the real driver would, only after the real call succeeded. Calls to the real
//! function pass the caller's arguments on unchanged, so they carry the caller's promise.
//! No panic leaves these functions.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use crate::array_shape::ArrayShape;
use crate::cuda_abi::{
    CuArray, CuArray3DDescriptor, CuArray3DDescriptorV1, CuArrayDescriptor, CuArrayDescriptorV1,
    CuArrayMemoryRequirements, CuContext, CuDevice, CuDevicePtr, CuDevicePtrV1, CuIpcMemHandle,
    CuMemAllocationProp, CuMemHandle, CuMemLocation, CuMemPoolPropsHead, CuMemoryPool, CuResult,
    CuStream, CU_MEM_LOCATION_TYPE_DEVICE,
};
use crate::cuda_abi::{CuGraph, CuGraphExec, CuGraphInstantiateParams, CuGraphNode};
use crate::engine::{Engine, Kind, Place, PoolOf, PoolPlace};
use crate::ffi::{self, written, Out};
use crate::lookup::{self, hooks, CFunction, Hooks, Real};
use crate::process::engine;
use crate::real_driver as real;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Our hook for each hooked function of the CUDA driver.
pub static CUDA_HOOKS: Hooks = hooks!(LIBCUDA in crate::real_driver:
    cuInit,
    cuMemAlloc_v2,
    cuMemAlloc,
    cuMemAllocPitch_v2,
    cuMemAllocPitch,
    cuMemAllocManaged,
    cuMemAllocAsync,
    cuMemAllocAsync_ptsz,
    cuMemAllocFromPoolAsync,
    cuMemAllocFromPoolAsync_ptsz,
    cuMemFree_v2,
    cuMemFree,
    cuMemFreeAsync,
    cuMemFreeAsync_ptsz,
    cuMemCreate,
    cuMemRelease,
    cuMemPoolCreate,
    cuMemGetInfo_v2,
    cuMemGetInfo,
    cuDeviceTotalMem_v2,
    cuDeviceTotalMem,
    cuGetProcAddress,
    cuGetProcAddress_v2,
    // arrays
    cuArrayCreate_v2,
    cuArray3DCreate_v2,
    cuArrayCreate,
    cuArray3DCreate,
    cuArrayDestroy,
    cuMipmappedArrayCreate,
    cuMipmappedArrayDestroy,
    // -- VMM lifetimes and imports --
    cuMemMap,
    cuMemUnmap,
    cuMemAddressFree,
    cuMemRetainAllocationHandle,
    cuMemImportFromShareableHandle,
    cuIpcOpenMemHandle_v2,
    cuIpcOpenMemHandle,
    cuMemPoolImportPointer,
    cuExternalMemoryGetMappedBuffer,
    // -- where a charge lands and who owns it (issue 10)
    cuCtxDestroy_v2,
    cuCtxDestroy,
    cuCtxDetach,
    cuCtxAttach,
    cuDevicePrimaryCtxRetain,
    cuDevicePrimaryCtxRelease_v2,
    cuDevicePrimaryCtxRelease,
    cuDevicePrimaryCtxReset_v2,
    cuDevicePrimaryCtxReset,
    cuDeviceGetDefaultMemPool,
    cuDeviceGetMemPool,
    cuDeviceSetMemPool,
    cuMemPoolDestroy,
    cuMemGetDefaultMemPool,
    cuMemGetMemPool,
    cuMemSetMemPool,
    // -- context memory (issue 11)
    cuCtxCreate,
    cuCtxCreate_v2,
    cuCtxCreate_v3,
    cuCtxCreate_v4,
    cuCtxSetLimit,
    cuModuleLoad,
    cuModuleLoadData,
    cuModuleLoadDataEx,
    cuModuleLoadFatBinary,
    cuModuleUnload,
    cuLibraryLoadData,
    cuLibraryLoadFromFile,
    cuLibraryUnload,
    // -- graph memory (issue 11)
    cuGraphInstantiate,
    cuGraphInstantiate_v2,
    cuGraphInstantiateWithFlags,
    cuGraphInstantiateWithParams,
    cuGraphInstantiateWithParams_ptsz,
    cuGraphUpload,
    cuGraphUpload_ptsz,
    cuGraphLaunch,
    cuGraphLaunch_ptsz,
    cuGraphExecDestroy,
    cuDeviceGraphMemTrim,
);

thread_local! {
    /// Set while this thread runs a hook: if the driver calls back into an exported hook,
    /// that inner call passes straight through, so nothing is counted twice.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Holds this thread's `IN_HOOK` flag; keeps its address so that leaving costs no second
/// thread-local look-up (each is a `__tls_get_addr` call in a shared library).
struct InHook(*const Cell<bool>);

impl InHook {
    fn enter() -> Option<InHook> {
        IN_HOOK.with(|h| (!h.replace(true)).then_some(InHook(h)))
    }
}

impl Drop for InHook {
    fn drop(&mut self) {
        // SAFETY: the flag has no destructor, so it lives as long as this thread, and this
        // guard never leaves the thread that made it.
        unsafe { (*self.0).set(false) };
    }
}

/// Catches a panic at the FFI boundary: the caller gets CUDA_ERROR_UNKNOWN, never an abort.
fn guard(body: impl FnOnce() -> CuResult) -> CuResult {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(CuResult::UNKNOWN)
}

/// The frame of every charged hook: resolve the real function, pass nested calls straight
/// through, fail closed on a bad configuration, else run `charged`.
fn hook<F: CFunction>(
    real: &'static Real<F>,
    charged: impl FnOnce(F, &'static Engine) -> CuResult,
    plain: impl FnOnce(F) -> CuResult,
) -> CuResult {
    guard(|| {
        let Some(real) = real.get() else {
            return CuResult::NOT_FOUND;
        };
        let Some(_in_hook) = InHook::enter() else {
            return plain(real);
        };
        let engine = engine();
        match engine.check_config() {
            Ok(()) => charged(real, engine),
            Err(rc) => rc,
        }
    })
}

/// The call's result and the new pointer (0 if the call failed or had no out-pointer).
///
/// # Safety
/// `p` is the caller's out-pointer: null or valid for reads (see `ffi::Out::new`).
unsafe fn out<T: Copy + Into<u64>>(rc: CuResult, p: *mut T) -> (CuResult, u64) {
    // SAFETY: passed on from the caller.
    (rc, unsafe { written(rc.is_ok(), p) })
}

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CuResult {
    hook(
        &real::cuInit,
        // SAFETY: the caller's argument, passed on.
        |real, _| unsafe { real(flags) },
        // SAFETY: the caller's argument, passed on.
        |real| unsafe { real(flags) },
    )
}

// ---- allocation ------------------------------------------------------------------------

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

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CuDevicePtr, bytes: usize) -> CuResult {
    alloc_on(
        &real::cuMemAlloc_v2,
        |_| Place::Current,
        bytes as u64,
        // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
        |real| unsafe { out(real(dptr, bytes), dptr) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc(dptr: *mut CuDevicePtrV1, bytes: c_uint) -> CuResult {
    alloc_on(
        &real::cuMemAlloc,
        |_| Place::Current,
        bytes.into(),
        // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
        |real| unsafe { out(real(dptr, bytes), dptr) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    flags: c_uint,
) -> CuResult {
    alloc_on(
        &real::cuMemAllocManaged,
        |_| Place::Current,
        bytes as u64,
        // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
        |real| unsafe { out(real(dptr, bytes, flags), dptr) },
    )
}

/// The stream a `_ptsz` variant means by 0: the per-thread default stream.
fn per_thread(stream: CuStream) -> usize {
    match stream as usize {
        0 => PER_THREAD_STREAM,
        s => s,
    }
}

/// `CU_STREAM_PER_THREAD`.
const PER_THREAD_STREAM: usize = 2;

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

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    stream: CuStream,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    unsafe { alloc_async(&real::cuMemAllocAsync, dptr, bytes, stream, stream as usize) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync_ptsz(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    stream: CuStream,
) -> CuResult {
    let meant = per_thread(stream);
    // SAFETY: the caller's arguments, passed on.
    unsafe { alloc_async(&real::cuMemAllocAsync_ptsz, dptr, bytes, stream, meant) }
}

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

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    pool: CuMemoryPool,
    stream: CuStream,
) -> CuResult {
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

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    pool: CuMemoryPool,
    stream: CuStream,
) -> CuResult {
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

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CuDevicePtr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: c_uint,
) -> CuResult {
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

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch(
    dptr: *mut CuDevicePtrV1,
    pitch: *mut c_uint,
    width: c_uint,
    height: c_uint,
    element: c_uint,
) -> CuResult {
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
}

/// Frees an allocation the caller never got (a pitch allocation over quota).
fn free_plain(ptr: u64) {
    if let Some(real) = real::cuMemFree_v2.get() {
        // SAFETY: ptr was just returned by the driver and is known to nobody else.
        unsafe { real(ptr) };
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CuMemHandle,
    size: usize,
    prop: *const CuMemAllocationProp,
    flags: u64,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `handle` is its out-pointer.
    let call = |real: real::cuMemCreate| unsafe { out(real(handle, size, prop, flags), handle) };
    // The properties name the device: no current context is needed.
    // SAFETY: `prop` is null or the caller's valid CUmemAllocationProp.
    let place = match unsafe { ffi::input(prop) } {
        Some(p) if p.location.kind == CU_MEM_LOCATION_TYPE_DEVICE && p.location.id >= 0 => {
            Place::Device(p.location.id as u32)
        }
        _ => Place::Uncharged,
    };
    hook(
        &real::cuMemCreate,
        |real, e| {
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
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut CuMemoryPool,
    props: *const CuMemPoolPropsHead,
) -> CuResult {
    // SAFETY: `props` is null or the caller's valid CUmemPoolProps.
    let place = unsafe { ffi::input(props) }.and_then(|p| pool_place(p.alloc_type, p.location));
    hook(
        &real::cuMemPoolCreate,
        |real, e| {
            // SAFETY: the caller's arguments, passed on.
            let rc = unsafe { real(pool, props) };
            // SAFETY: `pool` is the caller's out-pointer, null or valid.
            if let (true, Some(pool)) = (rc.is_ok(), unsafe { Out::new(pool) }) {
                if let Some(place) = place {
                    e.pool_located(pool.get() as usize, place);
                }
            }
            rc
        },
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(pool, props) },
    )
}

// ---- free ------------------------------------------------------------------------------

fn free_of<F: CFunction>(
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

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(ptr: CuDevicePtr) -> CuResult {
    // SAFETY: the caller's argument, passed on.
    free_of(&real::cuMemFree_v2, Kind::Pointer, ptr, |real| unsafe {
        real(ptr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree(ptr: CuDevicePtrV1) -> CuResult {
    // SAFETY: the caller's argument, passed on.
    free_of(&real::cuMemFree, Kind::Pointer, ptr.into(), |real| unsafe {
        real(ptr)
    })
}

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
                return call(f);
            }
            e.free(real.name(), Kind::Pointer, ptr, || call(f))
        },
        call,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(ptr: CuDevicePtr, stream: CuStream) -> CuResult {
    free_async(&real::cuMemFreeAsync, ptr, stream, stream as usize)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync_ptsz(ptr: CuDevicePtr, stream: CuStream) -> CuResult {
    free_async(&real::cuMemFreeAsync_ptsz, ptr, stream, per_thread(stream))
}

// ---- VMM lifetimes and imports ----------------------------------------------------------
//
// A `cuMemCreate` allocation is charged until it is both released and unmapped (the
// engine's `vmm_*` entry points keep the books); imports are never charged.

#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CuMemHandle) -> CuResult {
    // SAFETY: the caller's argument, passed on.
    let call = |real: real::cuMemRelease| unsafe { real(handle) };
    hook(
        &real::cuMemRelease,
        |real, e| e.vmm_release(real::cuMemRelease.name(), handle, || call(real)),
        call,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: CuDevicePtr,
    size: usize,
    offset: usize,
    handle: CuMemHandle,
    flags: u64,
) -> CuResult {
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
}

#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CuDevicePtr, size: usize) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    let call = |real: real::cuMemUnmap| unsafe { real(ptr, size) };
    hook(
        &real::cuMemUnmap,
        |real, e| e.vmm_unmap(real::cuMemUnmap.name(), ptr, size as u64, || call(real)),
        call,
    )
}

/// Freeing a reservation ends whatever the driver still has mapped in it (if it allows
/// that at all: a refusal ends nothing).
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CuDevicePtr, size: usize) -> CuResult {
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
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(
    handle: *mut CuMemHandle,
    addr: *mut c_void,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `handle` is its out-pointer.
    let call = |real: real::cuMemRetainAllocationHandle| unsafe { out(real(handle, addr), handle) };
    hook(
        &real::cuMemRetainAllocationHandle,
        |real, e| {
            let api = real::cuMemRetainAllocationHandle.name();
            e.vmm_retain(api, addr as u64, || call(real))
        },
        |real| call(real).0,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemImportFromShareableHandle(
    handle: *mut CuMemHandle,
    os_handle: *mut c_void,
    kind: c_int,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `handle` is its out-pointer.
    let call = |real: real::cuMemImportFromShareableHandle| unsafe {
        out(real(handle, os_handle, kind), handle)
    };
    hook(
        &real::cuMemImportFromShareableHandle,
        |real, e| {
            let (rc, imported) = call(real);
            if rc.is_ok() {
                e.imported_handle(real::cuMemImportFromShareableHandle.name(), imported);
            }
            rc
        },
        |real| call(real).0,
    )
}

/// An import that gives a device pointer: the driver's call, then the engine forgets any
/// stale charge at that address; nothing is charged.
fn import_pointer<F: CFunction>(
    real: &'static Real<F>,
    call: impl Fn(F) -> (CuResult, u64),
) -> CuResult {
    hook(
        real,
        |f, e| {
            let (rc, ptr) = call(f);
            if rc.is_ok() {
                e.imported_pointer(real.name(), ptr);
            }
            rc
        },
        |f| call(f).0,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(
    dptr: *mut CuDevicePtr,
    handle: CuIpcMemHandle,
    flags: c_uint,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
    import_pointer(&real::cuIpcOpenMemHandle_v2, |real| unsafe {
        out(real(dptr, handle, flags), dptr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle(
    dptr: *mut CuDevicePtr,
    handle: CuIpcMemHandle,
    flags: c_uint,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
    import_pointer(&real::cuIpcOpenMemHandle, |real| unsafe {
        out(real(dptr, handle, flags), dptr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolImportPointer(
    dptr: *mut CuDevicePtr,
    pool: CuMemoryPool,
    data: *mut c_void,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
    import_pointer(&real::cuMemPoolImportPointer, |real| unsafe {
        out(real(dptr, pool, data), dptr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuExternalMemoryGetMappedBuffer(
    dptr: *mut CuDevicePtr,
    memory: *mut c_void,
    desc: *const c_void,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `dptr` is its out-pointer.
    import_pointer(&real::cuExternalMemoryGetMappedBuffer, |real| unsafe {
        out(real(dptr, memory, desc), dptr)
    })
}

// ---- where a charge lands and who owns it (issue 10) -------------------------------------

/// `CU_MEM_ALLOCATION_TYPE_MANAGED` (CUDA 13).
const ALLOCATION_MANAGED: i32 = 2;

/// Where a pool of `alloc_type` at `location` keeps its memory; `None` for a location type
/// cuquota does not know (such a pool's allocations land on the stream's device).
fn pool_place(alloc_type: i32, location: CuMemLocation) -> Option<PoolPlace> {
    if alloc_type == ALLOCATION_MANAGED {
        return Some(PoolPlace::Managed);
    }
    match location.kind {
        CU_MEM_LOCATION_TYPE_DEVICE if location.id >= 0 => {
            Some(PoolPlace::Device(location.id as u32))
        }
        // HOST, HOST_NUMA, HOST_NUMA_CURRENT: host memory.
        2..=4 => Some(PoolPlace::Host),
        _ => None,
    }
}

/// The frame of a hook that only watches: the real call, then (on success, outside nested
/// calls, with a good configuration) `then` tells the engine. Never fails the call itself.
fn watched<F: CFunction>(
    real: &'static Real<F>,
    call: impl Fn(F) -> CuResult,
    then: impl FnOnce(&'static Engine),
) -> CuResult {
    guard(|| {
        let Some(f) = real.get() else {
            return CuResult::NOT_FOUND;
        };
        let Some(_in_hook) = InHook::enter() else {
            return call(f);
        };
        let rc = call(f);
        let engine = engine();
        if rc.is_ok() && engine.check_config().is_ok() {
            then(engine);
        }
        rc
    })
}

/// How surely a call ends its context if it succeeds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ends {
    /// `cuCtxDestroy`, `cuDevicePrimaryCtxReset`: its charges leave the books before the
    /// driver runs it (`Engine::context_end`).
    Surely,
    /// `cuCtxDetach`, `cuDevicePrimaryCtxRelease`: only the last one does, known after.
    Maybe,
}

/// [`watched`] for a call that may end a context (destroy, detach, primary reset or
/// release): the context is marked ending while the driver runs it and cuquota credits it
/// (see `ContextEnd`), and a sure end takes its charges out first.
fn watched_ending<F: CFunction>(
    real: &'static Real<F>,
    ends: Ends,
    context: impl FnOnce(&'static Engine) -> usize,
    call: impl Fn(F) -> CuResult,
    then: impl FnOnce(&'static Engine),
) -> CuResult {
    guard(|| {
        let Some(f) = real.get() else {
            return CuResult::NOT_FOUND;
        };
        let Some(_in_hook) = InHook::enter() else {
            return call(f);
        };
        let engine = engine();
        let context = context(engine);
        let surely = ends == Ends::Surely && engine.check_config().is_ok();
        let mut end = engine.context_end(real.name(), context, surely);
        let rc = call(f);
        end.settle(rc.is_ok());
        if rc.is_ok() && engine.check_config().is_ok() {
            then(engine);
        }
        // `end` goes here: the context is no longer marked ending.
        rc
    })
}

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

#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: CuContext) -> CuResult {
    context_destroyed(&real::cuCtxDestroy_v2, ctx)
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy(ctx: CuContext) -> CuResult {
    context_destroyed(&real::cuCtxDestroy, ctx)
}

/// Deprecated, still exported (PyCUDA): destroys the context when its usage count drops to
/// 0; `cuCtxAttach`'s references are counted so that only that detach credits.
#[no_mangle]
pub unsafe extern "C" fn cuCtxDetach(ctx: CuContext) -> CuResult {
    watched_ending(
        &real::cuCtxDetach,
        Ends::Maybe,
        |_| ctx as usize,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(ctx) },
        |e| e.context_detached(real::cuCtxDetach.name(), ctx as usize),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxAttach(ctx: *mut CuContext, flags: c_uint) -> CuResult {
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
}

/// The retain that makes the primary context is measured (context memory, issue 11).
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut CuContext, dev: CuDevice) -> CuResult {
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

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CuDevice) -> CuResult {
    primary_reset(&real::cuDevicePrimaryCtxReset_v2, dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset(dev: CuDevice) -> CuResult {
    primary_reset(&real::cuDevicePrimaryCtxReset, dev)
}

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

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CuDevice) -> CuResult {
    primary_release(&real::cuDevicePrimaryCtxRelease_v2, dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: CuDevice) -> CuResult {
    primary_release(&real::cuDevicePrimaryCtxRelease, dev)
}

/// A default or current pool query: the pool returned keeps its memory on `dev`.
fn device_pool(
    real: &'static Real<real::cuDeviceGetMemPool>,
    pool: *mut CuMemoryPool,
    dev: CuDevice,
) -> CuResult {
    watched(
        real,
        // SAFETY: the caller's arguments, passed on.
        |f| unsafe { f(pool, dev) },
        |e| {
            // SAFETY: `pool` is the caller's out-pointer, null or valid.
            if let (Some(p), Ok(d)) = (unsafe { Out::new(pool) }, u32::try_from(dev)) {
                e.pool_located(p.get() as usize, PoolPlace::Device(d));
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(
    pool: *mut CuMemoryPool,
    dev: CuDevice,
) -> CuResult {
    device_pool(&real::cuDeviceGetDefaultMemPool, pool, dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut CuMemoryPool, dev: CuDevice) -> CuResult {
    device_pool(&real::cuDeviceGetMemPool, pool, dev)
}

/// The driver accepts only a pool of `dev` as its current pool.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceSetMemPool(dev: CuDevice, pool: CuMemoryPool) -> CuResult {
    watched(
        &real::cuDeviceSetMemPool,
        // SAFETY: the caller's arguments, passed on.
        |f| unsafe { f(dev, pool) },
        |e| {
            if let Ok(d) = u32::try_from(dev) {
                e.pool_located(pool as usize, PoolPlace::Device(d));
            }
        },
    )
}

/// CUDA 13: a pool by location and allocation type; the pool returned keeps its memory
/// there.
fn pool_by_location(
    real: &'static Real<real::cuMemGetMemPool>,
    pool: *mut CuMemoryPool,
    location: *mut CuMemLocation,
    alloc_type: c_int,
) -> CuResult {
    watched(
        real,
        // SAFETY: the caller's arguments, passed on.
        |f| unsafe { f(pool, location, alloc_type) },
        |e| {
            // SAFETY: `pool` and `location` are the caller's, null or valid.
            let (out, at) = unsafe { (Out::new(pool), ffi::input(location)) };
            if let (Some(p), Some(place)) = (out, at.and_then(|l| pool_place(alloc_type, *l))) {
                e.pool_located(p.get() as usize, place);
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetDefaultMemPool(
    pool: *mut CuMemoryPool,
    location: *mut CuMemLocation,
    alloc_type: c_int,
) -> CuResult {
    pool_by_location(&real::cuMemGetDefaultMemPool, pool, location, alloc_type)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetMemPool(
    pool: *mut CuMemoryPool,
    location: *mut CuMemLocation,
    alloc_type: c_int,
) -> CuResult {
    pool_by_location(&real::cuMemGetMemPool, pool, location, alloc_type)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemSetMemPool(
    location: *mut CuMemLocation,
    alloc_type: c_int,
    pool: CuMemoryPool,
) -> CuResult {
    // SAFETY: `location` is null or the caller's valid CUmemLocation (the call only reads
    // it).
    let place = unsafe { ffi::input(location) }.and_then(|l| pool_place(alloc_type, *l));
    watched(
        &real::cuMemSetMemPool,
        // SAFETY: the caller's arguments, passed on.
        |f| unsafe { f(location, alloc_type, pool) },
        |e| {
            if let Some(place) = place {
                e.pool_located(pool as usize, place);
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: CuMemoryPool) -> CuResult {
    watched(
        &real::cuMemPoolDestroy,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(pool) },
        |e| e.pool_destroyed(pool as usize),
    )
}

// ---- memory figures --------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    hook(
        &real::cuMemGetInfo_v2,
        |real, e| {
            // SAFETY: the caller's arguments, passed on; both are its out-pointers.
            let (rc, outs) = unsafe { (real(free, total), (Out::new(free), Out::new(total))) };
            if let (true, (Some(free), Some(total))) = (rc.is_ok(), outs) {
                let (f, t) = e.memory_info(
                    real::cuMemGetInfo_v2.name(),
                    free.get() as u64,
                    total.get() as u64,
                );
                free.set(f as usize);
                total.set(t as usize);
            }
            rc
        },
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(free, total) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> CuResult {
    hook(
        &real::cuMemGetInfo,
        |real, e| {
            // SAFETY: the caller's arguments, passed on; both are its out-pointers.
            let (rc, outs) = unsafe { (real(free, total), (Out::new(free), Out::new(total))) };
            if let (true, (Some(free), Some(total))) = (rc.is_ok(), outs) {
                // Never more than the driver said, so the values still fit in 32 bits.
                let (f, t) = e.memory_info(
                    real::cuMemGetInfo.name(),
                    free.get().into(),
                    total.get().into(),
                );
                free.set(f as c_uint);
                total.set(t as c_uint);
            }
            rc
        },
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(free, total) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CuDevice) -> CuResult {
    hook(
        &real::cuDeviceTotalMem_v2,
        |real, e| {
            // SAFETY: the caller's arguments, passed on; `bytes` is its out-pointer.
            let (rc, out) = unsafe { (real(bytes, device), Out::new(bytes)) };
            if let (true, Some(out), Ok(device)) = (rc.is_ok(), out, u32::try_from(device)) {
                out.set(e.total_memory(device, out.get() as u64) as usize);
            }
            rc
        },
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(bytes, device) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, device: CuDevice) -> CuResult {
    hook(
        &real::cuDeviceTotalMem,
        |real, e| {
            // SAFETY: the caller's arguments, passed on; `bytes` is its out-pointer.
            let (rc, out) = unsafe { (real(bytes, device), Out::new(bytes)) };
            if let (true, Some(out), Ok(device)) = (rc.is_ok(), out, u32::try_from(device)) {
                out.set(e.total_memory(device, out.get().into()) as c_uint);
            }
            rc
        },
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(bytes, device) },
    )
}

// ---- lookups ---------------------------------------------------------------------------

/// After the real lookup succeeded: swap in our hook where the driver gave a hooked variant.
///
/// # Safety
/// The caller's arguments of `cuGetProcAddress(_v2)`.
unsafe fn swap_in_hook(
    rc: CuResult,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) {
    // SAFETY: `symbol` is null or the caller's C string; `pfn` null or its out-pointer.
    let (base, pfn) = unsafe { (ffi::c_str(symbol), Out::new(pfn)) };
    let (true, Some(base), Some(pfn)) = (rc.is_ok(), base, pfn) else {
        return;
    };
    let found = pfn.get();
    if found.is_null() {
        return;
    }
    if let Some(hook) = lookup::hook_for_lookup(base, found as usize, version, flags, &CUDA_HOOKS) {
        pfn.set(hook as *mut c_void);
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    guard(|| {
        let Some(real) = real::cuGetProcAddress.get() else {
            return CuResult::NOT_FOUND;
        };
        // SAFETY: the caller's arguments, passed on, then read back as the driver wrote them.
        unsafe {
            let rc = real(symbol, pfn, version, flags);
            swap_in_hook(rc, symbol, pfn, version, flags);
            rc
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    guard(|| {
        let Some(real) = real::cuGetProcAddress_v2.get() else {
            return CuResult::NOT_FOUND;
        };
        // SAFETY: the caller's arguments, passed on, then read back as the driver wrote them.
        unsafe {
            let rc = real(symbol, pfn, version, flags, status);
            swap_in_hook(rc, symbol, pfn, version, flags);
            rc
        }
    })
}

// ---- arrays ----------------------------------------------------------------------------

/// An array creation: charged what the driver lays out for it (see `Engine::alloc_array`).
/// `call` creates the array; `probe` asks the driver what the shape takes on a device;
/// `undo` destroys an array whose true size does not fit.
fn create_array<F: CFunction>(
    real: &'static Real<F>,
    shape: Option<ArrayShape>,
    handle: *mut CuArray,
    call: impl Fn(F) -> CuResult,
    undo: fn(u64),
) -> CuResult {
    // Nothing to describe (no descriptor, no levels): the driver's own answer.
    let Some(shape) = shape else {
        return plain(real, call);
    };
    hook(
        real,
        |f, e| {
            let create = || {
                let rc = call(f);
                // SAFETY: `handle` is the caller's out-pointer, null or valid.
                let key = match (rc.is_ok(), unsafe { Out::new(handle) }) {
                    (true, Some(out)) => out.get() as u64,
                    _ => 0,
                };
                (rc, key)
            };
            let probe = |device| array_size_from_driver(shape, device);
            e.alloc_array(real.name(), shape, create, probe, undo)
        },
        &call,
    )
}

/// What the driver gives an array of `shape` on `device`: the memory requirements of a
/// deferred-mapping array of the same shape, made and destroyed for the question (the
/// documented query answers for those only). None when the driver cannot say (no deferred
/// mapping on this device or driver).
fn array_size_from_driver(shape: ArrayShape, device: u32) -> Option<u64> {
    let desc = shape.deferred();
    let mut array: CuArray = std::ptr::null_mut();
    let mut req = CuArrayMemoryRequirements::default();
    let rc = if shape.levels == 1 {
        let (create, query, destroy) = (
            real::cuArray3DCreate_v2.get()?,
            real::cuArrayGetMemoryRequirements.get()?,
            real::cuArrayDestroy.get()?,
        );
        // SAFETY: valid descriptor and out-pointers; the array is ours and destroyed here.
        unsafe {
            if !create(&mut array, &desc).is_ok() {
                return None;
            }
            let rc = query(&mut req, array, device as CuDevice);
            destroy(array);
            rc
        }
    } else {
        let (create, query, destroy) = (
            real::cuMipmappedArrayCreate.get()?,
            real::cuMipmappedArrayGetMemoryRequirements.get()?,
            real::cuMipmappedArrayDestroy.get()?,
        );
        // SAFETY: as above.
        unsafe {
            if !create(&mut array, &desc, shape.levels).is_ok() {
                return None;
            }
            let rc = query(&mut req, array, device as CuDevice);
            destroy(array);
            rc
        }
    };
    rc.is_ok().then_some(req.size as u64)
}

/// Destroys an array the caller never got (its true size was over the quota).
fn destroy_array(array: u64) {
    if let Some(real) = real::cuArrayDestroy.get() {
        // SAFETY: the driver just made this array and nobody else knows it.
        unsafe { real(array as usize as CuArray) };
    }
}

fn destroy_mipmapped(array: u64) {
    if let Some(real) = real::cuMipmappedArrayDestroy.get() {
        // SAFETY: as for destroy_array.
        unsafe { real(array as usize as CuArray) };
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayCreate_v2(
    handle: *mut CuArray,
    desc: *const CuArrayDescriptor,
) -> CuResult {
    // SAFETY: `desc` is null or the caller's valid descriptor.
    let shape = unsafe { ffi::input(desc) }.map(ArrayShape::from_2d);
    create_array(
        &real::cuArrayCreate_v2,
        shape,
        handle,
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(handle, desc) },
        destroy_array,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArray3DCreate_v2(
    handle: *mut CuArray,
    desc: *const CuArray3DDescriptor,
) -> CuResult {
    // SAFETY: `desc` is null or the caller's valid descriptor.
    let shape = unsafe { ffi::input(desc) }.map(|d| ArrayShape::from_3d(d, 1));
    create_array(
        &real::cuArray3DCreate_v2,
        shape,
        handle,
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(handle, desc) },
        destroy_array,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayCreate(
    handle: *mut CuArray,
    desc: *const CuArrayDescriptorV1,
) -> CuResult {
    // SAFETY: `desc` is null or the caller's valid descriptor.
    let shape = unsafe { ffi::input(desc) }.map(ArrayShape::from_2d_v1);
    create_array(
        &real::cuArrayCreate,
        shape,
        handle,
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(handle, desc) },
        destroy_array,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArray3DCreate(
    handle: *mut CuArray,
    desc: *const CuArray3DDescriptorV1,
) -> CuResult {
    // SAFETY: `desc` is null or the caller's valid descriptor.
    let shape = unsafe { ffi::input(desc) }.map(ArrayShape::from_3d_v1);
    create_array(
        &real::cuArray3DCreate,
        shape,
        handle,
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(handle, desc) },
        destroy_array,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayCreate(
    handle: *mut CuArray,
    desc: *const CuArray3DDescriptor,
    levels: c_uint,
) -> CuResult {
    // SAFETY: `desc` is null or the caller's valid descriptor.
    let shape = unsafe { ffi::input(desc) }
        .map(|d| ArrayShape::from_3d(d, levels))
        .filter(|_| levels > 0);
    create_array(
        &real::cuMipmappedArrayCreate,
        shape,
        handle,
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(handle, desc, levels) },
        destroy_mipmapped,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayDestroy(array: CuArray) -> CuResult {
    // SAFETY: the caller's argument, passed on.
    free_of(
        &real::cuArrayDestroy,
        Kind::Array,
        array as u64,
        |real| unsafe { real(array) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayDestroy(array: CuArray) -> CuResult {
    free_of(
        &real::cuMipmappedArrayDestroy,
        Kind::Array,
        array as u64,
        // SAFETY: the caller's argument, passed on.
        |real| unsafe { real(array) },
    )
}

// ---- context memory (issue 11) ---------------------------------------------------------
//
// What a context takes is measured around the calls that make or grow one (the engine and
// `context_memory` say how); one that does not fit is undone and refused.

/// The frame of a measured hook: as `watched` (a bad configuration never fails the call:
/// it passes through), but the engine makes the call.
fn measured<F: CFunction>(
    real: &'static Real<F>,
    counted: impl FnOnce(F, &'static Engine) -> CuResult,
    plain: impl FnOnce(F) -> CuResult,
) -> CuResult {
    guard(|| {
        let Some(f) = real.get() else {
            return CuResult::NOT_FOUND;
        };
        let Some(_in_hook) = InHook::enter() else {
            return plain(f);
        };
        let engine = engine();
        match engine.check_config() {
            Ok(()) => counted(f, engine),
            Err(_) => plain(f),
        }
    })
}

/// The call's result and the handle it wrote (0 if it failed or had no out-pointer).
///
/// # Safety
/// `p` is the caller's out-pointer: null or valid for reads (see `ffi::Out::new`).
unsafe fn out_handle<T>(rc: CuResult, p: *mut *mut T) -> (CuResult, usize) {
    // SAFETY: passed on from the caller.
    match (rc.is_ok(), unsafe { Out::new(p) }) {
        (true, Some(out)) => (rc, out.get() as usize),
        _ => (rc, 0),
    }
}

/// Destroys a context the caller never got (it did not fit).
fn destroy_context(context: usize) {
    let destroy = real::cuCtxDestroy_v2.get().or(real::cuCtxDestroy.get());
    if let Some(f) = destroy {
        // SAFETY: the driver just made this context for this call; nobody else has it.
        unsafe { f(context as CuContext) };
    }
}

/// Drops the reference a refused retain took.
fn release_primary(dev: CuDevice) {
    let release = real::cuDevicePrimaryCtxRelease_v2.get();
    if let Some(f) = release.or(real::cuDevicePrimaryCtxRelease.get()) {
        // SAFETY: the retain this undoes succeeded on `dev`.
        unsafe { f(dev) };
    }
}

fn create_context<F: CFunction>(
    real: &'static Real<F>,
    ctx: *mut CuContext,
    dev: CuDevice,
    call: impl Fn(F) -> CuResult,
) -> CuResult {
    measured(
        real,
        |f, e| {
            // SAFETY: `ctx` is the caller's out-pointer, null or valid.
            let create = || unsafe { out_handle(call(f), ctx) };
            e.context_create(real.name(), dev, create, destroy_context)
        },
        &call,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate(
    ctx: *mut CuContext,
    flags: c_uint,
    dev: CuDevice,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    create_context(&real::cuCtxCreate, ctx, dev, |f| unsafe {
        f(ctx, flags, dev)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    ctx: *mut CuContext,
    flags: c_uint,
    dev: CuDevice,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    create_context(&real::cuCtxCreate_v2, ctx, dev, |f| unsafe {
        f(ctx, flags, dev)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    ctx: *mut CuContext,
    params: *mut c_void,
    num_params: c_int,
    flags: c_uint,
    dev: CuDevice,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    create_context(&real::cuCtxCreate_v3, ctx, dev, |f| unsafe {
        f(ctx, params, num_params, flags, dev)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v4(
    ctx: *mut CuContext,
    params: *mut c_void,
    flags: c_uint,
    dev: CuDevice,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    create_context(&real::cuCtxCreate_v4, ctx, dev, |f| unsafe {
        f(ctx, params, flags, dev)
    })
}

/// A larger stack, heap or FIFO takes device memory: measured, charged to the current
/// context; a limit that does not fit is set back and refused.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: c_int, value: usize) -> CuResult {
    measured(
        &real::cuCtxSetLimit,
        |f, e| {
            let old = real::context_limit(limit);
            // SAFETY (both calls): the caller's limit; the new value is the caller's, the
            // old one what the driver just reported.
            let set = || (unsafe { f(limit, value) }, ());
            let undo = |()| old.is_some_and(|old| unsafe { f(limit, old) }.is_ok());
            e.context_grows(real::cuCtxSetLimit.name(), set, |()| None, undo)
        },
        // SAFETY: the caller's arguments, passed on.
        |f| unsafe { f(limit, value) },
    )
}

/// A module or library load: what it takes is measured and charged to the current context
/// until its unload; one that does not fit is unloaded and refused.
fn load_module<F: CFunction>(
    real: &'static Real<F>,
    call: impl Fn(F) -> (CuResult, usize),
    unload: fn(usize),
) -> CuResult {
    measured(
        real,
        |f, e| {
            let undo = |module: usize| {
                unload(module);
                true
            };
            e.context_grows(real.name(), || call(f), |m| (m != 0).then_some(m), undo)
        },
        |f| call(f).0,
    )
}

fn unload_module(module: usize) {
    if let Some(f) = real::cuModuleUnload.get() {
        // SAFETY: the driver just loaded this module for this call; nobody else has it.
        unsafe { f(module as real::CuModule) };
    }
}

fn unload_library(library: usize) {
    if let Some(f) = real::cuLibraryUnload.get() {
        // SAFETY: as for unload_module.
        unsafe { f(library as real::CuModule) };
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoad(
    module: *mut real::CuModule,
    name: *const c_char,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `module` is its out-pointer.
    let call = |f: real::cuModuleLoad| unsafe { out_handle(f(module, name), module) };
    load_module(&real::cuModuleLoad, call, unload_module)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(
    module: *mut real::CuModule,
    image: *const c_void,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `module` is its out-pointer.
    let call = |f: real::cuModuleLoadData| unsafe { out_handle(f(module, image), module) };
    load_module(&real::cuModuleLoadData, call, unload_module)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut real::CuModule,
    image: *const c_void,
    num_options: c_uint,
    options: *mut c_int,
    values: *mut *mut c_void,
) -> CuResult {
    let call = |f: real::cuModuleLoadDataEx| {
        // SAFETY: the caller's arguments, passed on; `module` is its out-pointer.
        unsafe { out_handle(f(module, image, num_options, options, values), module) }
    };
    load_module(&real::cuModuleLoadDataEx, call, unload_module)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadFatBinary(
    module: *mut real::CuModule,
    image: *const c_void,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on; `module` is its out-pointer.
    let call = |f: real::cuModuleLoadFatBinary| unsafe { out_handle(f(module, image), module) };
    load_module(&real::cuModuleLoadFatBinary, call, unload_module)
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryLoadData(
    library: *mut real::CuModule,
    code: *const c_void,
    jit_options: *mut c_int,
    jit_values: *mut *mut c_void,
    num_jit: c_uint,
    library_options: *mut c_int,
    library_values: *mut *mut c_void,
    num_library: c_uint,
) -> CuResult {
    let call = |f: real::cuLibraryLoadData| {
        // SAFETY: the caller's arguments, passed on; `library` is its out-pointer.
        unsafe {
            let rc = f(
                library,
                code,
                jit_options,
                jit_values,
                num_jit,
                library_options,
                library_values,
                num_library,
            );
            out_handle(rc, library)
        }
    };
    load_module(&real::cuLibraryLoadData, call, unload_library)
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryLoadFromFile(
    library: *mut real::CuModule,
    name: *const c_char,
    jit_options: *mut c_int,
    jit_values: *mut *mut c_void,
    num_jit: c_uint,
    library_options: *mut c_int,
    library_values: *mut *mut c_void,
    num_library: c_uint,
) -> CuResult {
    let call = |f: real::cuLibraryLoadFromFile| {
        // SAFETY: the caller's arguments, passed on; `library` is its out-pointer.
        unsafe {
            let rc = f(
                library,
                name,
                jit_options,
                jit_values,
                num_jit,
                library_options,
                library_values,
                num_library,
            );
            out_handle(rc, library)
        }
    };
    load_module(&real::cuLibraryLoadFromFile, call, unload_library)
}

fn module_unloaded(real: &'static Real<real::cuModuleUnload>, module: real::CuModule) -> CuResult {
    watched(
        real,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(module) },
        |e| e.module_unloaded(real.name(), module as usize),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(module: real::CuModule) -> CuResult {
    module_unloaded(&real::cuModuleUnload, module)
}

#[no_mangle]
pub unsafe extern "C" fn cuLibraryUnload(library: real::CuModule) -> CuResult {
    module_unloaded(&real::cuLibraryUnload, library)
}

// ---- graph memory (issue 11) -----------------------------------------------------------
//
// Instantiation learns an executable graph's allocations, uploads and launches reserve what
// they may add to the graph memory pool, and each of these and the program's own trim set
// the `graph` part to the driver's reservation after (see `engine/graph_memory.rs`).

/// An instantiation of `graph` with `flags`; `call` instantiates into the caller's `exec`.
fn instantiate<F: CFunction>(
    real: &'static Real<F>,
    exec: *mut CuGraphExec,
    graph: CuGraph,
    flags: u64,
    call: impl Fn(F) -> CuResult,
) -> CuResult {
    hook(
        real,
        |f, e| {
            e.graph_instantiate(real.name(), graph as usize, flags, || {
                let rc = call(f);
                // SAFETY: `exec` is the caller's out-pointer, null or valid.
                let made = match (rc.is_ok(), unsafe { Out::new(exec) }) {
                    (true, Some(out)) => out.get() as usize,
                    _ => 0,
                };
                (rc, made)
            })
        },
        &call,
    )
}

/// The CUDA 10 and 11.0 forms: no flags.
fn instantiate_logged(
    real: &'static Real<real::cuGraphInstantiate>,
    exec: *mut CuGraphExec,
    graph: CuGraph,
    error_node: *mut CuGraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CuResult {
    instantiate(real, exec, graph, 0, |f| {
        // SAFETY: the caller's arguments, passed on.
        unsafe { f(exec, graph, error_node, log, log_size) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate(
    exec: *mut CuGraphExec,
    graph: CuGraph,
    error_node: *mut CuGraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CuResult {
    instantiate_logged(
        &real::cuGraphInstantiate,
        exec,
        graph,
        error_node,
        log,
        log_size,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    exec: *mut CuGraphExec,
    graph: CuGraph,
    error_node: *mut CuGraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CuResult {
    instantiate_logged(
        &real::cuGraphInstantiate_v2,
        exec,
        graph,
        error_node,
        log,
        log_size,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut CuGraphExec,
    graph: CuGraph,
    flags: u64,
) -> CuResult {
    instantiate(
        &real::cuGraphInstantiateWithFlags,
        exec,
        graph,
        flags,
        |f| {
            // SAFETY: the caller's arguments, passed on.
            unsafe { f(exec, graph, flags) }
        },
    )
}

/// # Safety
/// The caller's arguments of `cuGraphInstantiateWithParams(_ptsz)`.
unsafe fn instantiate_with_params(
    real: &'static Real<real::cuGraphInstantiateWithParams>,
    exec: *mut CuGraphExec,
    graph: CuGraph,
    params: *mut CuGraphInstantiateParams,
) -> CuResult {
    // SAFETY: `params` is null or the caller's valid CUDA_GRAPH_INSTANTIATE_PARAMS.
    let flags = unsafe { ffi::input(params.cast_const()) }.map_or(0, |p| p.flags);
    instantiate(real, exec, graph, flags, |f| {
        // SAFETY: the caller's arguments, passed on.
        unsafe { f(exec, graph, params) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams(
    exec: *mut CuGraphExec,
    graph: CuGraph,
    params: *mut CuGraphInstantiateParams,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    unsafe { instantiate_with_params(&real::cuGraphInstantiateWithParams, exec, graph, params) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams_ptsz(
    exec: *mut CuGraphExec,
    graph: CuGraph,
    params: *mut CuGraphInstantiateParams,
) -> CuResult {
    let real = &real::cuGraphInstantiateWithParams_ptsz;
    // SAFETY: the caller's arguments, passed on.
    unsafe { instantiate_with_params(real, exec, graph, params) }
}

/// An upload (`launch` false) or launch of `exec` into `stream`.
fn graph_run(
    real: &'static Real<real::cuGraphLaunch>,
    exec: CuGraphExec,
    stream: CuStream,
    launch: bool,
) -> CuResult {
    // SAFETY: the caller's arguments, passed on.
    let call = |f: real::cuGraphLaunch| unsafe { f(exec, stream) };
    hook(
        real,
        |f, e| e.graph_run(real.name(), exec as usize, launch, || call(f)),
        call,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload(exec: CuGraphExec, stream: CuStream) -> CuResult {
    graph_run(&real::cuGraphUpload, exec, stream, false)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload_ptsz(exec: CuGraphExec, stream: CuStream) -> CuResult {
    graph_run(&real::cuGraphUpload_ptsz, exec, stream, false)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: CuGraphExec, stream: CuStream) -> CuResult {
    graph_run(&real::cuGraphLaunch, exec, stream, true)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch_ptsz(exec: CuGraphExec, stream: CuStream) -> CuResult {
    graph_run(&real::cuGraphLaunch_ptsz, exec, stream, true)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: CuGraphExec) -> CuResult {
    watched(
        &real::cuGraphExecDestroy,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(exec) },
        |e| e.graph_exec_destroyed(exec as usize),
    )
}

/// The program's own trim: only watched (it charges nothing), then the part follows.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGraphMemTrim(dev: CuDevice) -> CuResult {
    watched(
        &real::cuDeviceGraphMemTrim,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(dev) },
        |e| {
            if let Ok(device) = u32::try_from(dev) {
                e.graph_memory_trimmed(real::cuDeviceGraphMemTrim.name(), device);
            }
        },
    )
}

/// A call passed to the driver unchanged (no panic leaves it).
fn plain<F: CFunction>(real: &'static Real<F>, call: impl FnOnce(F) -> CuResult) -> CuResult {
    guard(|| match real.get() {
        Some(f) => call(f),
        None => CuResult::NOT_FOUND,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lookup::{hooked_symbol, variant_by_rules};

    fn symbol(name: &[u8]) -> Option<&'static str> {
        hooked_symbol(name, &CUDA_HOOKS).map(|h| h.real.name())
    }

    #[test]
    fn exact_names() {
        assert_eq!(symbol(b"cuMemAlloc_v2"), Some("cuMemAlloc_v2"));
        assert_eq!(symbol(b"cuMemAlloc"), Some("cuMemAlloc"));
        assert_eq!(symbol(b"cuCtxGetDevice"), None, "called, not hooked");
        assert_eq!(symbol(b"malloc"), None);
        assert_eq!(symbol(b"cuGetExportTable"), None);
    }

    fn by_rules(base: &[u8], version: u32, per_thread: bool) -> Option<&'static str> {
        variant_by_rules(base, version, per_thread, &CUDA_HOOKS).map(|h| h.real.name())
    }

    #[test]
    fn version_and_flag_rules() {
        assert_eq!(by_rules(b"cuMemAlloc", 3020, false), Some("cuMemAlloc_v2"));
        assert_eq!(by_rules(b"cuMemAlloc", 12000, true), Some("cuMemAlloc_v2"));
        assert_eq!(by_rules(b"cuMemAlloc", 2000, false), Some("cuMemAlloc"));
        assert_eq!(
            by_rules(b"cuMemAllocAsync", 11020, true),
            Some("cuMemAllocAsync_ptsz")
        );
        assert_eq!(
            by_rules(b"cuMemAllocAsync", 12000, false),
            Some("cuMemAllocAsync")
        );
        assert_eq!(by_rules(b"cuMemAllocAsync", 11000, false), None);
        assert_eq!(
            by_rules(b"cuGetProcAddress", 11030, false),
            Some("cuGetProcAddress")
        );
        assert_eq!(
            by_rules(b"cuGetProcAddress", 12000, false),
            Some("cuGetProcAddress_v2")
        );
        assert_eq!(by_rules(b"cuLaunchKernel", 12000, false), None);
    }

    #[test]
    fn every_hook_is_listed_once() {
        let mut names: Vec<_> = CUDA_HOOKS.hooks.iter().map(|h| h.real.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CUDA_HOOKS.hooks.len());
    }

    /// A hook missing from `CUDA_HOOKS` would still catch calls through the exported symbol,
    /// but `dlsym` and `cuGetProcAddress` would hand out the real function: every exported
    /// hook of this file must be in the table.
    #[test]
    fn every_exported_hook_is_in_the_table() {
        let source = include_str!("exports.rs");
        let exported: Vec<&str> = source
            .split("pub unsafe extern \"C\" fn ")
            .skip(1)
            .filter_map(|rest| rest.split('(').next())
            .collect();
        assert!(exported.len() >= 20, "found {exported:?}");
        for name in exported {
            assert!(
                symbol(name.as_bytes()).is_some(),
                "{name} is exported here but missing from CUDA_HOOKS"
            );
        }
    }
}
