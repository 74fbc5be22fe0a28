//! Every C entry point cuquota exports, each a thin call into the engine.
//!
//! These are `unsafe extern "C"` because they are the CUDA driver's own prototypes: the
//! caller promises what the driver documentation asks (valid out-pointers, a valid
//! `CUmemAllocationProp`), and we read and write those pointers exactly where the real driver
//! would, only after the real call succeeded. No panic leaves these functions.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use crate::cuda_abi::{
    CuDevice, CuDevicePtr, CuDevicePtrV1, CuMemAllocationProp, CuMemHandle, CuMemPoolPropsHead,
    CuMemoryPool, CuResult, CuStream, CU_MEM_LOCATION_TYPE_DEVICE,
};
use crate::engine::{Engine, Kind, Place};
use crate::hook_table::Func;
use crate::proc_address::hook_for_lookup;
use crate::process::engine;
use crate::real_driver;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

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

/// The frame of every charged hook: resolve the real function (`F` is its prototype), pass
/// nested calls straight through, fail closed on a bad configuration, else run `charged`.
fn hook<F: Copy>(
    func: Func,
    charged: impl FnOnce(F, &'static Engine) -> CuResult,
    plain: impl FnOnce(F) -> CuResult,
) -> CuResult {
    guard(|| {
        let Some(real) = real_driver::function::<F>(func) else {
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

/// The new pointer after a successful call (0 if the caller passed no out-pointer).
unsafe fn out<T: Copy + Into<u64>>(rc: CuResult, p: *const T) -> (CuResult, u64) {
    let value = if rc.is_ok() && !p.is_null() {
        (*p).into()
    } else {
        0
    };
    (rc, value)
}

type Init = unsafe extern "C" fn(c_uint) -> CuResult;

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CuResult {
    hook(
        Func::Init,
        |real: Init, _| real(flags),
        |real: Init| real(flags),
    )
}

// ---- allocation ------------------------------------------------------------------------

type Alloc = unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult;
type AllocV1 = unsafe extern "C" fn(*mut CuDevicePtrV1, c_uint) -> CuResult;
type AllocManaged = unsafe extern "C" fn(*mut CuDevicePtr, usize, c_uint) -> CuResult;
type AllocAsync = unsafe extern "C" fn(*mut CuDevicePtr, usize, CuStream) -> CuResult;
type AllocPool = unsafe extern "C" fn(*mut CuDevicePtr, usize, CuMemoryPool, CuStream) -> CuResult;
type Pitch = unsafe extern "C" fn(*mut CuDevicePtr, *mut usize, usize, usize, c_uint) -> CuResult;
type PitchV1 =
    unsafe extern "C" fn(*mut CuDevicePtrV1, *mut c_uint, c_uint, c_uint, c_uint) -> CuResult;
type Create =
    unsafe extern "C" fn(*mut CuMemHandle, usize, *const CuMemAllocationProp, u64) -> CuResult;
type PoolCreate = unsafe extern "C" fn(*mut CuMemoryPool, *const CuMemPoolPropsHead) -> CuResult;

/// A device-pointer allocation on the current context's device.
unsafe fn alloc_on<F: Copy>(
    func: Func,
    place: impl FnOnce(&Engine) -> Place,
    bytes: u64,
    call: impl Fn(F) -> (CuResult, u64),
) -> CuResult {
    hook(
        func,
        |real: F, e| e.alloc(func.symbol(), Kind::Pointer, place(e), bytes, || call(real)),
        |real: F| call(real).0,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CuDevicePtr, bytes: usize) -> CuResult {
    alloc_on(
        Func::MemAlloc,
        |_| Place::Current,
        bytes as u64,
        |real: Alloc| out(real(dptr, bytes), dptr),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc(dptr: *mut CuDevicePtrV1, bytes: c_uint) -> CuResult {
    alloc_on(
        Func::MemAllocLegacy,
        |_| Place::Current,
        bytes.into(),
        |real: AllocV1| out(real(dptr, bytes), dptr),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    flags: c_uint,
) -> CuResult {
    alloc_on(
        Func::MemAllocManaged,
        |_| Place::Current,
        bytes as u64,
        |real: AllocManaged| out(real(dptr, bytes, flags), dptr),
    )
}

unsafe fn alloc_async(
    func: Func,
    dptr: *mut CuDevicePtr,
    bytes: usize,
    stream: CuStream,
) -> CuResult {
    alloc_on(
        func,
        |_| Place::Current,
        bytes as u64,
        |real: AllocAsync| out(real(dptr, bytes, stream), dptr),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    stream: CuStream,
) -> CuResult {
    alloc_async(Func::MemAllocAsync, dptr, bytes, stream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync_ptsz(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    stream: CuStream,
) -> CuResult {
    alloc_async(Func::MemAllocAsyncPtsz, dptr, bytes, stream)
}

unsafe fn alloc_from_pool(
    func: Func,
    dptr: *mut CuDevicePtr,
    bytes: usize,
    pool: CuMemoryPool,
    stream: CuStream,
) -> CuResult {
    alloc_on(
        func,
        |e| e.pool_place(pool as usize),
        bytes as u64,
        |real: AllocPool| out(real(dptr, bytes, pool, stream), dptr),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    pool: CuMemoryPool,
    stream: CuStream,
) -> CuResult {
    alloc_from_pool(Func::MemAllocFromPool, dptr, bytes, pool, stream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut CuDevicePtr,
    bytes: usize,
    pool: CuMemoryPool,
    stream: CuStream,
) -> CuResult {
    alloc_from_pool(Func::MemAllocFromPoolPtsz, dptr, bytes, pool, stream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CuDevicePtr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: c_uint,
) -> CuResult {
    let call = |real: Pitch| {
        let rc = real(dptr, pitch, width, height, element);
        let (rc, ptr) = out(rc, dptr);
        (
            rc,
            ptr,
            if rc.is_ok() && !pitch.is_null() {
                *pitch as u64
            } else {
                0
            },
        )
    };
    hook(
        Func::MemAllocPitch,
        |real: Pitch, e| {
            e.alloc_pitch(
                Func::MemAllocPitch.symbol(),
                width as u64,
                height as u64,
                || call(real),
                free_plain,
            )
        },
        |real: Pitch| call(real).0,
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
    let call = |real: PitchV1| {
        let rc = real(dptr, pitch, width, height, element);
        let (rc, ptr) = out(rc, dptr);
        (
            rc,
            ptr,
            if rc.is_ok() && !pitch.is_null() {
                u64::from(*pitch)
            } else {
                0
            },
        )
    };
    hook(
        Func::MemAllocPitchLegacy,
        |real: PitchV1, e| {
            e.alloc_pitch(
                Func::MemAllocPitchLegacy.symbol(),
                width.into(),
                height.into(),
                || call(real),
                free_plain,
            )
        },
        |real: PitchV1| call(real).0,
    )
}

/// Frees an allocation the caller never got (a pitch allocation over quota).
fn free_plain(ptr: u64) {
    if let Some(real) = real_driver::function::<Free>(Func::MemFree) {
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
    let call = |real: Create| out(real(handle, size, prop, flags), handle);
    // The properties name the device: no current context is needed.
    let place = match prop.as_ref() {
        Some(p) if p.location.kind == CU_MEM_LOCATION_TYPE_DEVICE && p.location.id >= 0 => {
            Place::Device(p.location.id as u32)
        }
        _ => Place::Uncharged,
    };
    hook(
        Func::MemCreate,
        |real: Create, e| {
            e.alloc(
                Func::MemCreate.symbol(),
                Kind::Handle,
                place,
                size as u64,
                || call(real),
            )
        },
        |real: Create| call(real).0,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut CuMemoryPool,
    props: *const CuMemPoolPropsHead,
) -> CuResult {
    let device = props
        .as_ref()
        .filter(|p| p.location.kind == CU_MEM_LOCATION_TYPE_DEVICE && p.location.id >= 0)
        .map(|p| p.location.id as u32);
    hook(
        Func::MemPoolCreate,
        |real: PoolCreate, e| {
            let rc = real(pool, props);
            if rc.is_ok() && !pool.is_null() {
                e.pool_created(*pool as usize, device);
            }
            rc
        },
        |real: PoolCreate| real(pool, props),
    )
}

// ---- free ------------------------------------------------------------------------------

type Free = unsafe extern "C" fn(CuDevicePtr) -> CuResult;
type FreeV1 = unsafe extern "C" fn(CuDevicePtrV1) -> CuResult;
type FreeAsync = unsafe extern "C" fn(CuDevicePtr, CuStream) -> CuResult;
type Release = unsafe extern "C" fn(CuMemHandle) -> CuResult;

fn free_of<F: Copy>(func: Func, kind: Kind, key: u64, call: impl Fn(F) -> CuResult) -> CuResult {
    hook(
        func,
        |real: F, e| e.free(func.symbol(), kind, key, || call(real)),
        |real: F| call(real),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(ptr: CuDevicePtr) -> CuResult {
    free_of(Func::MemFree, Kind::Pointer, ptr, |real: Free| real(ptr))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree(ptr: CuDevicePtrV1) -> CuResult {
    free_of(
        Func::MemFreeLegacy,
        Kind::Pointer,
        ptr.into(),
        |real: FreeV1| real(ptr),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(ptr: CuDevicePtr, stream: CuStream) -> CuResult {
    free_of(Func::MemFreeAsync, Kind::Pointer, ptr, |real: FreeAsync| {
        real(ptr, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync_ptsz(ptr: CuDevicePtr, stream: CuStream) -> CuResult {
    free_of(
        Func::MemFreeAsyncPtsz,
        Kind::Pointer,
        ptr,
        |real: FreeAsync| real(ptr, stream),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CuMemHandle) -> CuResult {
    free_of(Func::MemRelease, Kind::Handle, handle, |real: Release| {
        real(handle)
    })
}

// ---- memory figures --------------------------------------------------------------------

type MemInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult;
type MemInfoV1 = unsafe extern "C" fn(*mut c_uint, *mut c_uint) -> CuResult;
type TotalMem = unsafe extern "C" fn(*mut usize, CuDevice) -> CuResult;
type TotalMemV1 = unsafe extern "C" fn(*mut c_uint, CuDevice) -> CuResult;

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    hook(
        Func::MemGetInfo,
        |real: MemInfo, e| {
            let rc = real(free, total);
            if rc.is_ok() && !free.is_null() && !total.is_null() {
                let (f, t) = e.memory_info(Func::MemGetInfo.symbol(), *free as u64, *total as u64);
                (*free, *total) = (f as usize, t as usize);
            }
            rc
        },
        |real: MemInfo| real(free, total),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> CuResult {
    hook(
        Func::MemGetInfoLegacy,
        |real: MemInfoV1, e| {
            let rc = real(free, total);
            if rc.is_ok() && !free.is_null() && !total.is_null() {
                // Never more than the driver said, so the values still fit in 32 bits.
                let (f, t) = e.memory_info(
                    Func::MemGetInfoLegacy.symbol(),
                    (*free).into(),
                    (*total).into(),
                );
                (*free, *total) = (f as c_uint, t as c_uint);
            }
            rc
        },
        |real: MemInfoV1| real(free, total),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CuDevice) -> CuResult {
    hook(
        Func::DeviceTotalMem,
        |real: TotalMem, e| {
            let rc = real(bytes, device);
            if rc.is_ok() && !bytes.is_null() && device >= 0 {
                *bytes = e.total_memory(device as u32, *bytes as u64) as usize;
            }
            rc
        },
        |real: TotalMem| real(bytes, device),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, device: CuDevice) -> CuResult {
    hook(
        Func::DeviceTotalMemLegacy,
        |real: TotalMemV1, e| {
            let rc = real(bytes, device);
            if rc.is_ok() && !bytes.is_null() && device >= 0 {
                *bytes = e.total_memory(device as u32, (*bytes).into()) as c_uint;
            }
            rc
        },
        |real: TotalMemV1| real(bytes, device),
    )
}

// ---- lookups ---------------------------------------------------------------------------

type GetProc = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
type GetProcV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;

/// After the real lookup succeeded: swap in our hook where the driver gave a hooked variant.
unsafe fn swap_in_hook(
    rc: CuResult,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) {
    if !rc.is_ok() || symbol.is_null() || pfn.is_null() || (*pfn).is_null() {
        return;
    }
    let base = CStr::from_ptr(symbol).to_bytes();
    if let Some(hook) = hook_for_lookup(base, *pfn as usize, version, flags) {
        *pfn = hook as *mut c_void;
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
        let Some(real) = real_driver::function::<GetProc>(Func::GetProcAddress) else {
            return CuResult::NOT_FOUND;
        };
        let rc = real(symbol, pfn, version, flags);
        swap_in_hook(rc, symbol, pfn, version, flags);
        rc
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
        let Some(real) = real_driver::function::<GetProcV2>(Func::GetProcAddressV2) else {
            return CuResult::NOT_FOUND;
        };
        let rc = real(symbol, pfn, version, flags, status);
        swap_in_hook(rc, symbol, pfn, version, flags);
        rc
    })
}
