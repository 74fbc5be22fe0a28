//! The real libcuda.so.1 and the real `dlsym`, resolved once and cached. Our own lookups
//! never go through our `dlsym` hook: the real `dlsym` comes from `dlvsym(RTLD_NEXT, …)`.

use crate::cuda_abi::{CuDevice, CuResult};
use crate::hook_table::{Func, COUNT};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// The real `dlsym`; read by the `dlsym` trampoline too, hence `pub` and a plain address.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
static DRIVER: AtomicUsize = AtomicUsize::new(0);
static REAL: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];

/// The real `dlsym`, resolved on first use.
pub fn real_dlsym() -> Option<DlsymFn> {
    let mut addr = REAL_DLSYM.load(Relaxed);
    if addr == 0 {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym with RTLD_NEXT and valid C strings; it is not hooked by us.
            addr = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) }
                as usize;
            if addr != 0 {
                break;
            }
        }
        REAL_DLSYM.store(addr, Relaxed);
    }
    // SAFETY: a non-zero address came from the dynamic linker for `dlsym` itself.
    (addr != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(addr) })
}

/// `extern "C"` entry used by the trampoline when `REAL_DLSYM` is not resolved yet.
pub extern "C" fn resolve_real_dlsym() -> usize {
    real_dlsym().map_or(0, |f| f as usize)
}

/// Calls the real `dlsym`.
pub fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    match real_dlsym() {
        // SAFETY: the caller's arguments are passed on as they came.
        Some(f) => unsafe { f(handle, name) },
        None => std::ptr::null_mut(),
    }
}

/// The handle of the real driver, if the process has loaded it. cuquota never loads the
/// driver itself (RTLD_NOLOAD): every hook is reached only after the program loaded it, and
/// so no driver start-up code ever runs inside one of our calls. Matches by soname, so a
/// program's `dlopen("libcuda.so")` counts too.
fn driver() -> Option<*mut c_void> {
    let handle = DRIVER.load(Relaxed);
    if handle != 0 {
        return Some(handle as *mut c_void);
    }
    // SAFETY: a constant C string; with RTLD_NOLOAD nothing is loaded or initialised.
    let handle = unsafe {
        libc::dlopen(
            c"libcuda.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NOLOAD,
        )
    };
    if handle.is_null() {
        return None;
    }
    DRIVER.store(handle as usize, Relaxed);
    Some(handle)
}

/// The real driver's address of `func`, or None if the driver lacks it.
#[inline]
pub fn address(func: Func) -> Option<usize> {
    match REAL[func as usize].load(Relaxed) {
        0 => resolve(func),
        cached => Some(cached),
    }
}

#[cold]
fn resolve(func: Func) -> Option<usize> {
    let slot = &REAL[func as usize];
    let handle = driver()?;
    let mut name = func.symbol().as_bytes().to_vec();
    name.push(0);
    let found = dlsym(handle, name.as_ptr().cast()) as usize;
    if found == 0 {
        return None;
    }
    slot.store(found, Relaxed);
    Some(found)
}

/// The real function as a typed pointer. `F` must be the `unsafe extern "C" fn` type of
/// `func`'s C prototype; every call site names it next to the `Func`.
#[inline]
pub fn function<F: Copy>(func: Func) -> Option<F> {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
    // SAFETY: the address is the driver's own function `func`, and F is its prototype.
    address(func).map(|a| unsafe { std::mem::transmute_copy::<usize, F>(&a) })
}

/// The device of the calling thread's current context, from the real driver.
pub fn current_device() -> Result<u32, CuResult> {
    type F = unsafe extern "C" fn(*mut CuDevice) -> CuResult;
    let f = function::<F>(Func::CtxGetDevice).ok_or(CuResult::NOT_FOUND)?;
    let mut dev: CuDevice = -1;
    // SAFETY: dev is a valid out-pointer for the call.
    let rc = unsafe { f(&mut dev) };
    match (rc.is_ok(), u32::try_from(dev)) {
        (true, Ok(d)) => Ok(d),
        (true, Err(_)) => Err(CuResult::INVALID_CONTEXT),
        (false, _) => Err(rc),
    }
}

/// The real total memory of a device (`cuDeviceTotalMem_v2`).
pub fn total_memory(device: u32) -> Result<u64, CuResult> {
    type F = unsafe extern "C" fn(*mut usize, CuDevice) -> CuResult;
    let f = function::<F>(Func::DeviceTotalMem).ok_or(CuResult::NOT_FOUND)?;
    let mut bytes = 0usize;
    // SAFETY: bytes is a valid out-pointer.
    let rc = unsafe { f(&mut bytes, device as CuDevice) };
    if rc.is_ok() {
        Ok(bytes as u64)
    } else {
        Err(rc)
    }
}

/// The real (free, total) of the current context's device (`cuMemGetInfo_v2`).
pub fn memory_info() -> Result<(u64, u64), CuResult> {
    type F = unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult;
    let f = function::<F>(Func::MemGetInfo).ok_or(CuResult::NOT_FOUND)?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both are valid out-pointers.
    let rc = unsafe { f(&mut free, &mut total) };
    if rc.is_ok() {
        Ok((free as u64, total as u64))
    } else {
        Err(rc)
    }
}

/// Number of devices and their names, for the configuration line and the trace header.
pub fn devices() -> Vec<(u32, String, Option<u64>)> {
    type Count = unsafe extern "C" fn(*mut i32) -> CuResult;
    type Name = unsafe extern "C" fn(*mut c_char, i32, CuDevice) -> CuResult;
    let mut count = 0;
    let Some(get_count) = function::<Count>(Func::DeviceGetCount) else {
        return Vec::new();
    };
    // SAFETY: count is a valid out-pointer.
    if !unsafe { get_count(&mut count) }.is_ok() {
        return Vec::new();
    }
    let get_name = function::<Name>(Func::DeviceGetName);
    (0..count.max(0) as u32)
        .map(|d| {
            let mut buf = [0 as c_char; 256];
            let name = match get_name {
                // SAFETY: buf holds 256 bytes and the driver writes a NUL-terminated name.
                Some(f)
                    if unsafe { f(buf.as_mut_ptr(), buf.len() as i32, d as CuDevice) }.is_ok() =>
                {
                    // SAFETY: the driver NUL-terminated it; the last byte stays 0 regardless.
                    buf[255] = 0;
                    unsafe { CStr::from_ptr(buf.as_ptr()) }
                        .to_string_lossy()
                        .into_owned()
                }
                _ => String::from("?"),
            };
            (d, name, total_memory(d).ok())
        })
        .collect()
}
