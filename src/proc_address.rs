//! How a program's lookups of driver functions get our hooks: `dlsym` on the driver's
//! handle and `cuGetProcAddress(_v2)`. A hook is handed out only where the answer is the
//! real driver's own function for a name we hook, so every other name, library and handle
//! passes through untouched.

use crate::hook_table::{hooked_symbol, hooked_variants, variant_by_rules};
use crate::real_driver;
use std::ffi::{c_char, c_void, CStr};

/// `dlsym` with an explicit handle (the trampoline in `dlsym_entry.rs` sends the
/// caller-dependent RTLD_DEFAULT / RTLD_NEXT straight to the real one).
pub extern "C" fn dlsym_explicit(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let found = real_driver::dlsym(handle, name);
    if found.is_null() || name.is_null() {
        return found;
    }
    // SAFETY: dlsym just read `name` as a C string, so it is one.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    std::panic::catch_unwind(|| hook_for_symbol(name, found as usize))
        .ok()
        .flatten()
        .map_or(found, |hook| hook as *mut c_void)
}

/// The hook for `name` if `found` is the real driver's function of that name.
pub fn hook_for_symbol(name: &[u8], found: usize) -> Option<usize> {
    let func = hooked_symbol(name)?;
    (real_driver::address(func) == Some(found))
        .then(|| func.hook())
        .flatten()
}

/// After a successful `cuGetProcAddress(base, version, flags)` that returned `found`: the hook
/// for exactly the variant the driver gave, or None to leave the answer alone.
pub fn hook_for_lookup(base: &[u8], found: usize, version: i32, flags: u64) -> Option<usize> {
    let mut known = false;
    for func in hooked_variants(base) {
        known = true;
        if real_driver::address(func) == Some(found) {
            return func.hook();
        }
    }
    if !known {
        return None;
    }
    // The driver may hand out an address that is none of its exports. Then the documented
    // rules name the variant — unless the address is another exported function (a variant
    // newer than this build knows), which must pass through untouched.
    let per_thread = flags & crate::cuda_abi::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0;
    let func = variant_by_rules(base, u32::try_from(version).ok()?, per_thread)?;
    match exported_name_at(found) {
        Some(name) if name != func.symbol().as_bytes() => None,
        _ => func.hook(),
    }
}

/// The exported symbol that starts exactly at `addr`, if any.
fn exported_name_at(addr: usize) -> Option<Vec<u8>> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address and fills `info`.
    let ok = unsafe { libc::dladdr(addr as *const c_void, &mut info) } != 0;
    if !ok || info.dli_sname.is_null() || info.dli_saddr as usize != addr {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated symbol name owned by the loader.
    Some(
        unsafe { CStr::from_ptr(info.dli_sname) }
            .to_bytes()
            .to_vec(),
    )
}
