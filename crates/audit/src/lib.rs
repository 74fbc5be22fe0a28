//! `libcuquota_audit.so`: an rtld-audit module (rtld-audit(7), `LD_AUDIT`) that `cuquota run`
//! sets beside the preload. An object loaded with `RTLD_DEEPBIND` binds its undefined
//! symbols to its own dependencies first, so its `cuMemAlloc_v2` binds to the driver and its
//! `dlsym` to libc, past the preloaded interposer. The dynamic linker reports every such
//! binding to this module (`la_symbind64`, for lazy and, since glibc 2.35, bind-now ones),
//! and the module answers with cuquota's function of the same name instead:
//! - a driver function (`cu…`, defined by libcuda.so) that libcuquota.so exports, i.e. hooks;
//! - `dlsym` (defined by libc, or libdl before glibc 2.34), so lookups on the driver's handle reach cuquota's routing.
//!
//! Only the main namespace is redirected: a `dlmopen` namespace has its own copy of the
//! driver, which cuquota's hooks (calling the main namespace's driver) must not stand in for.
//! cuquota reports at exit a driver it never saw a call for (src/process.rs).
//!
//! Cost: the linker asks only about bindings *to* the driver and libc, *from* objects other
//! than those and libcuquota.so; an answer is a few compares, plus one `dlsym` in
//! libcuquota.so for the rare binding that is redirected. Nothing per call: a redirected
//! binding is written into the caller's GOT like any other.
//!
//! The module runs in a namespace of its own, before the program's libraries are relocated:
//! it keeps nothing but three link-map addresses and calls nothing but `dlsym`.
#![deny(unsafe_op_in_unsafe_fn)]
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_long, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The audit interface version this module is written for (glibc 2.35+; older glibc asks
/// for 1 and gets it).
const LAV_CURRENT: c_uint = 2;
const LA_FLG_BINDTO: c_uint = 0x01;
const LA_FLG_BINDFROM: c_uint = 0x02;
const LM_ID_BASE: c_long = 0;
/// The binding is a `dlsym` answer, not a symbol reference (<link.h>).
const LA_SYMB_DLSYM: c_uint = 0x04;

/// The public head of glibc's `struct link_map` (<link.h>).
#[repr(C)]
pub struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
    l_ld: *mut c_void,
    l_next: *mut LinkMap,
    l_prev: *mut LinkMap,
}

/// The link maps (main namespace) of libcuquota.so, the driver and libc; 0 until loaded.
/// A cookie is its object's link-map address: this module leaves glibc's default.
static CUQUOTA: AtomicUsize = AtomicUsize::new(0);
static DRIVER: AtomicUsize = AtomicUsize::new(0);
static LIBC: AtomicUsize = AtomicUsize::new(0);

/// Which of the objects this module cares about a file is, by its name's last component.
#[derive(Debug, PartialEq, Eq)]
enum Object {
    Cuquota,
    Driver,
    Libc,
    Other,
}

fn classify(path: &[u8]) -> Object {
    let base = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    if base == b"libcuquota.so" {
        Object::Cuquota
    } else if base.starts_with(b"libcuda.so") {
        Object::Driver
    } else if base.starts_with(b"libc.so") || base.starts_with(b"libdl.so") {
        Object::Libc
    } else {
        Object::Other
    }
}

/// What to do with a binding of `name` defined in `defined`: look up cuquota's own.
fn redirected(name: &[u8], defined: Object) -> bool {
    match defined {
        Object::Driver => name.starts_with(b"cu"),
        Object::Libc => name == b"dlsym",
        _ => false,
    }
}

#[no_mangle]
pub extern "C" fn la_version(version: c_uint) -> c_uint {
    version.min(LAV_CURRENT)
}

#[no_mangle]
pub unsafe extern "C" fn la_objopen(
    map: *mut LinkMap,
    lmid: c_long,
    _cookie: *mut usize,
) -> c_uint {
    if map.is_null() || lmid != LM_ID_BASE {
        return 0;
    }
    // SAFETY: the dynamic linker passes a valid link map whose l_name is a C string (or null).
    let name = unsafe { (*map).l_name };
    let object = if name.is_null() {
        Object::Other
    } else {
        // SAFETY: as above.
        classify(unsafe { CStr::from_ptr(name) }.to_bytes())
    };
    let slot = match object {
        Object::Cuquota => &CUQUOTA,
        Object::Driver => &DRIVER,
        Object::Libc => &LIBC,
        Object::Other => return LA_FLG_BINDFROM,
    };
    slot.store(map as usize, Relaxed);
    match object {
        // cuquota's own bindings (to the real driver, to libc's dlsym) stay as they are.
        Object::Cuquota => 0,
        _ => LA_FLG_BINDTO,
    }
}

#[no_mangle]
pub unsafe extern "C" fn la_symbind64(
    sym: *mut libc::Elf64_Sym,
    _ndx: c_uint,
    refcook: *mut usize,
    defcook: *mut usize,
    flags: *mut c_uint,
    symname: *const c_char,
) -> usize {
    // SAFETY: the dynamic linker passes the resolved symbol (st_value: its address), the
    // flags, both objects' cookies and the name as a C string.
    let (original, flags, referring, defined, name) = unsafe {
        (
            (*sym).st_value as usize,
            *flags,
            *refcook,
            *defcook,
            CStr::from_ptr(symname),
        )
    };
    let cuquota = CUQUOTA.load(Relaxed);
    // `dlsym` answers are left alone: cuquota finds the real functions that way (its own
    // lookups name the driver's handle, so they cannot be told apart from others'); a
    // deep-bound object's `dlsym` itself is redirected instead. cuquota's and the driver's
    // own references are never touched.
    if flags & LA_SYMB_DLSYM != 0 || referring == cuquota || referring == DRIVER.load(Relaxed) {
        return original;
    }
    let object = if defined == DRIVER.load(Relaxed) {
        Object::Driver
    } else if defined == LIBC.load(Relaxed) {
        Object::Libc
    } else {
        return original;
    };
    if cuquota == 0 || defined == 0 || !redirected(name.to_bytes(), object) {
        return original;
    }
    let Some(handle) = cuquota_handle(cuquota) else {
        return original;
    };
    // cuquota's export of that name (its local scope: itself first, then libc and the
    // like, which define no `cu…` name).
    // SAFETY: a handle from dlmopen; name is a C string.
    let ours = unsafe { libc::dlsym(handle, name.as_ptr()) } as usize;
    if ours == 0 {
        original
    } else {
        ours
    }
}

/// A `dlsym` handle of libcuquota.so (main namespace). A bare link map is not one: an object
/// loaded at start-up has no search list until `dlopen` makes it one.
static CUQUOTA_HANDLE: AtomicUsize = AtomicUsize::new(0);

fn cuquota_handle(map: usize) -> Option<*mut c_void> {
    let cached = CUQUOTA_HANDLE.load(Relaxed);
    if cached != 0 {
        return Some(cached as *mut c_void);
    }
    // SAFETY: the link map la_objopen recorded; its l_name is the path it was loaded from.
    let path = unsafe { (*(map as *const LinkMap)).l_name };
    if path.is_null() {
        return None;
    }
    // SAFETY: a C string path; RTLD_NOLOAD only finds the already loaded object.
    let handle = unsafe { libc::dlmopen(LM_ID_BASE, path, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    CUQUOTA_HANDLE.store(handle as usize, Relaxed);
    Some(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_told_by_their_file_name() {
        assert_eq!(classify(b"/opt/cuquota/libcuquota.so"), Object::Cuquota);
        assert_eq!(
            classify(b"/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
            Object::Driver
        );
        assert_eq!(classify(b"libcuda.so"), Object::Driver);
        assert_eq!(classify(b"/lib/x86_64-linux-gnu/libc.so.6"), Object::Libc);
        assert_eq!(classify(b"/lib/libcudart.so.12"), Object::Other);
        assert_eq!(classify(b"/lib/libcuquota_audit.so"), Object::Other);
        assert_eq!(classify(b""), Object::Other);
    }

    #[test]
    fn only_driver_names_and_dlsym_are_redirected() {
        assert!(redirected(b"cuMemAlloc_v2", Object::Driver));
        assert!(!redirected(b"dlsym", Object::Driver));
        assert!(redirected(b"dlsym", Object::Libc));
        assert!(!redirected(b"dlopen", Object::Libc));
        assert!(!redirected(b"cuMemAlloc_v2", Object::Other));
    }
}
