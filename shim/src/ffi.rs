//! Pointers handed in by C callers: the helpers through which the exports read and write
//! them. Each rejects null; beyond that, a pointer is trusted to follow the driver API's
//! documented contract, which is each helper's safety requirement.

use std::ffi::{c_char, c_int, CStr};
use std::ptr::NonNull;

use crate::abi::*;

/// A caller's output parameter, checked to be non-null.
pub struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    /// A required output: null is `CUDA_ERROR_INVALID_VALUE`.
    ///
    /// # Safety
    /// `p` must be null or valid for a write of `T` (the C caller's contract).
    pub unsafe fn new(p: *mut T) -> Result<Self, CUresult> {
        NonNull::new(p).map(Out).ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// An optional output: null means "not wanted".
    ///
    /// # Safety
    /// As for [`Out::new`].
    pub unsafe fn optional(p: *mut T) -> Option<Self> {
        NonNull::new(p).map(Out)
    }

    pub fn write(self, value: T) {
        // SAFETY: non-null, and valid for writes by the contract of `new`/`optional`.
        unsafe { self.0.as_ptr().write_unaligned(value) }
    }
}

/// Writes `value` to an optional output.
pub fn write_optional<T>(out: Option<Out<T>>, value: T) {
    if let Some(out) = out {
        out.write(value);
    }
}

/// Reads a caller's input struct; null is `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// `p` must be null or valid for a read of `T`.
pub unsafe fn read<T: Copy>(p: *const T) -> Result<T, CUresult> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null and readable by this function's contract.
    Ok(unsafe { p.read_unaligned() })
}

/// Borrows a caller's array of `count` elements; null or empty is `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// `p` must be null or valid for reads of `count` elements of `T`, for the call's duration.
pub unsafe fn slice<'a, T>(p: *const T, count: usize) -> Result<&'a [T], CUresult> {
    if p.is_null() || count == 0 || !p.is_aligned() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, aligned, and readable for `count` elements by this function's
    // contract.
    Ok(unsafe { std::slice::from_raw_parts(p, count) })
}

/// Borrows a caller's NUL-terminated string; null is `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string alive for the call's duration.
pub unsafe fn c_str<'a>(p: *const c_char) -> Result<&'a str, CUresult> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null and NUL-terminated by this function's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| CUDA_ERROR_INVALID_VALUE)
}

/// Copies `text` into a caller's buffer of `len` bytes as a NUL-terminated string,
/// truncated to fit (like snprintf).
///
/// # Safety
/// `buf` must be null or valid for writes of `len` bytes.
pub unsafe fn write_c_string(buf: *mut c_char, len: c_int, text: &str) -> Result<(), CUresult> {
    let len = usize::try_from(len).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    if buf.is_null() || len == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let n = text.len().min(len - 1);
    // SAFETY: `buf` is writable for `len` bytes and `n + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
    Ok(())
}

/// Writes `values` into a caller's array; null is `CUDA_ERROR_INVALID_VALUE` (an empty
/// `values` writes nothing and accepts null).
///
/// # Safety
/// `p` must be null or valid for writes of `values.len()` elements of `T`.
pub unsafe fn write_array<T: Copy>(p: *mut T, values: &[T]) -> Result<(), CUresult> {
    if values.is_empty() {
        return Ok(());
    }
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    for (i, value) in values.iter().enumerate() {
        // SAFETY: `p` is writable for `values.len()` elements by this function's contract.
        unsafe { p.add(i).write_unaligned(*value) };
    }
    Ok(())
}
