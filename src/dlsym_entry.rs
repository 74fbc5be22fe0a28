//! Our `dlsym`. With RTLD_DEFAULT or RTLD_NEXT the answer depends on who called (RTLD_NEXT
//! searches the libraries after the caller's), so those calls must reach the real `dlsym`
//! with the caller's own return address: a tail jump from a naked function, which leaves
//! the stack as the caller made it. Calls with a real handle go to `dlsym_explicit`, which
//! may swap in a hook.
//!
//! Versions: built with rust-lld or gold (see build.rs) the entry is exported as `dlsym@@GLIBC_2.34` and
//! `dlsym@GLIBC_2.2.5`, like glibc's own, so a layered interposer that finds "the real
//! dlsym" with `dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5")` reaches ours (`dlvsym` never
//! accepts an unversioned definition). Otherwise it is one unversioned `dlsym`, which serves
//! plain references of either version.

use crate::exports::{CUDA_HOOKS, NVML_HOOKS};
use crate::{ffi, lookup};
use std::ffi::{c_char, c_void};

/// Every library whose functions we hook, for `dlsym` on its handle.
static HOOKED_LIBRARIES: &[&lookup::Hooks] = &[&CUDA_HOOKS, &NVML_HOOKS];

// Both versions name the one entry; `.symver` needs the node in link/dlsym.map.
#[cfg(all(target_arch = "x86_64", versioned_dlsym))]
std::arch::global_asm!(
    ".symver cuquota_dlsym, dlsym@@GLIBC_2.34",
    ".symver cuquota_dlsym_2_2_5, dlsym@GLIBC_2.2.5",
    ".globl cuquota_dlsym_2_2_5",
    ".type cuquota_dlsym_2_2_5, @function",
    "cuquota_dlsym_2_2_5:",
    "jmp cuquota_dlsym",
    ".size cuquota_dlsym_2_2_5, . - cuquota_dlsym_2_2_5",
);

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[cfg_attr(versioned_dlsym, export_name = "cuquota_dlsym")]
#[cfg_attr(not(versioned_dlsym), export_name = "dlsym")]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        "test rdi, rdi",
        "jz 2f",
        "cmp rdi, -1",
        "je 2f",
        "jmp {explicit}",
        // RTLD_DEFAULT (0) or RTLD_NEXT (-1): into the real dlsym, caller unchanged.
        "2:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        // Not resolved yet (a very early call): resolve it, keeping the arguments.
        "3:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "ret",
        explicit = sym dlsym_explicit,
        real = sym crate::lookup::REAL_DLSYM,
        resolve = sym crate::lookup::resolve_real_dlsym,
    )
}

/// Elsewhere, a plain function: RTLD_NEXT then searches after this library instead of after
/// the caller — a known limitation on these architectures.
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    if handle.is_null() || handle as isize == -1 {
        lookup::dlsym(handle, name)
    } else {
        dlsym_explicit(handle, name)
    }
}

/// `dlsym` with an explicit handle: the real answer, or our hook where the answer is the
/// real function of a name we hook.
extern "C" fn dlsym_explicit(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let found = lookup::dlsym(handle, name);
    if found.is_null() {
        return found;
    }
    // SAFETY: dlsym just read `name` as a C string and found it, so it is one.
    let Some(name) = (unsafe { ffi::c_str(name) }) else {
        return found;
    };
    std::panic::catch_unwind(|| {
        if let Some(hook) = lookup::hook_for_symbol(name, found as usize, HOOKED_LIBRARIES) {
            return hook as *mut c_void;
        }
        // A variant of a hooked function this build does not know: said, and refused (as
        // an unknown symbol: null) where the policy says so.
        match lookup::unknown_variant_symbol(name, found as usize, &CUDA_HOOKS) {
            Some(base) if crate::process::engine().unknown_variant(name, base, "dlsym") => {
                std::ptr::null_mut()
            }
            _ => found,
        }
    })
    .unwrap_or(found)
}
