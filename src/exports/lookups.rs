//! `cuGetProcAddress(_v2)`: the driver answers, then `lookup` swaps in our hook where the
//! answer is a variant we hook (`dlsym` is routed in `dlsym_entry`).

use super::{guard, hooked, table, CUDA_HOOKS};
use crate::cuda_abi::CuResult;
use crate::ffi::{self, Out};
use crate::lookup;
use crate::process::engine;
use crate::real_driver as real;
use std::ffi::{c_char, c_int, c_void};

/// After the real lookup succeeded: swap in our hook where the driver gave a hooked variant;
/// a variant of a hooked function this build does not know is said, and, if the policy
/// refuses it, taken back: the lookup then fails as for an unknown symbol (the returned
/// result, with `*status` set to `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`).
///
/// # Safety
/// The caller's arguments of `cuGetProcAddress(_v2)`; `status` null or its out-pointer.
unsafe fn swap_in_hook(
    rc: CuResult,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    // SAFETY: `symbol` is null or the caller's C string; `pfn` null or its out-pointer.
    let (base, pfn) = unsafe { (ffi::c_str(symbol), Out::new(pfn)) };
    let (true, Some(base), Some(pfn)) = (rc.is_ok(), base, pfn) else {
        return rc;
    };
    let found = pfn.get();
    if found.is_null() {
        return rc;
    }
    match lookup::hook_for_lookup(base, found as usize, version, flags, &CUDA_HOOKS) {
        lookup::Routed::Hook(hook) => pfn.set(hook as *mut c_void),
        lookup::Routed::Untouched => {}
        lookup::Routed::Unknown { symbol, base } => {
            if engine().unknown_variant(&symbol, base, "cuGetProcAddress") {
                pfn.set(std::ptr::null_mut());
                // SAFETY: null or the caller's out-pointer.
                if let Some(status) = unsafe { Out::new(status) } {
                    status.set(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
                }
                return CuResult::NOT_FOUND;
            }
        }
    }
    rc
}

/// `CUdriverProcAddressQueryResult`'s "symbol not found".
const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: c_int = 1;

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
            swap_in_hook(rc, symbol, pfn, version, flags, std::ptr::null_mut())
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
                swap_in_hook(rc, symbol, pfn, version, flags, status)
            }
        })
    }
);

table!(cuGetProcAddress, cuGetProcAddress_v2);
