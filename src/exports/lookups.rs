//! `cuGetProcAddress(_v2)`: the driver answers, then `lookup` swaps in our hook where the
//! answer is a variant we hook (`dlsym` is routed in `dlsym_entry`).

use super::{guard, hooked, table, CUDA_HOOKS};
use crate::cuda_abi::CuResult;
use crate::ffi::{self, Out};
use crate::lookup;
use crate::real_driver as real;
use std::ffi::{c_char, c_int, c_void};

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

hooked!(cuGetProcAddress, |symbol: *const c_char,
                           pfn: *mut *mut c_void,
                           version: c_int,
                           flags: u64| {
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
});

hooked!(
    cuGetProcAddress_v2,
    |symbol: *const c_char,
     pfn: *mut *mut c_void,
     version: c_int,
     flags: u64,
     status: *mut c_int| {
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
);

table!(cuGetProcAddress, cuGetProcAddress_v2);
