//! The only code that touches pointers handed in by C callers. Hooks read and write them
//! exactly where the real driver would, and only after the real call succeeded; the
//! caller's promise (valid or null, as the driver documentation asks) is what makes that
//! sound, and each helper below states it once.

use std::ffi::{c_char, CStr};
use std::ptr::NonNull;

/// A caller's non-null pointer to a value the driver reads or writes.
pub struct Out<T>(NonNull<T>);

impl<T: Copy> Out<T> {
    /// None for a null pointer.
    ///
    /// # Safety
    /// `p` must be null or valid for reads and writes of `T` while the hook runs (the C
    /// caller's contract with the driver).
    #[inline]
    pub unsafe fn new(p: *mut T) -> Option<Out<T>> {
        NonNull::new(p).map(Out)
    }

    #[inline]
    pub fn get(&self) -> T {
        // SAFETY: non-null, and valid for reads by the contract of `new`.
        unsafe { self.0.as_ptr().read() }
    }

    #[inline]
    pub fn set(&self, value: T) {
        // SAFETY: non-null, and valid for writes by the contract of `new`.
        unsafe { self.0.as_ptr().write(value) }
    }
}

/// The first `count` elements of a caller's array, each as an [`Out`] (none for a null
/// pointer).
///
/// # Safety
/// `p` must be null or valid for reads and writes of `count` elements of `T` while the hook
/// runs.
pub unsafe fn outs<T: Copy>(p: *mut T, count: usize) -> Vec<Out<T>> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: within the caller's `count` elements, so each pointer is valid and non-null.
    (0..count)
        .filter_map(|i| unsafe { Out::new(p.add(i)) })
        .collect()
}

/// Copies of the first `count` elements of a caller's input array (none for a null
/// pointer).
///
/// # Safety
/// `p` must be null or valid for reads of `count` elements of `T` while the hook runs.
pub unsafe fn inputs<T: Copy>(p: *const T, count: usize) -> Vec<T> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: within the caller's `count` elements.
    (0..count).map(|i| unsafe { *p.add(i) }).collect()
}

/// What the driver wrote through `p` if the call succeeded and `p` is not null, else 0.
///
/// # Safety
/// As for [`Out::new`].
#[inline]
pub unsafe fn written<T: Copy + Into<u64>>(rc_ok: bool, p: *mut T) -> u64 {
    // SAFETY: the caller's contract, passed on.
    match unsafe { Out::new(p) } {
        Some(out) if rc_ok => out.get().into(),
        _ => 0,
    }
}

/// A caller's input struct, or None for a null pointer.
///
/// # Safety
/// `p` must be null or point to a valid `T` while the hook runs.
#[inline]
pub unsafe fn input<'a, T>(p: *const T) -> Option<&'a T> {
    // SAFETY: the caller's contract, passed on.
    unsafe { p.as_ref() }
}

/// The bytes of a caller's C string, or None for a null pointer.
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string while the hook runs.
#[inline]
pub unsafe fn c_str<'a>(p: *const c_char) -> Option<&'a [u8]> {
    // SAFETY: non-null here, and NUL-terminated by the caller's contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes())
}
