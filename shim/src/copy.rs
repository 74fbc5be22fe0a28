//! Copies and memsets. Device pointers are host addresses, so these are plain memory
//! operations, done at once whatever the stream. Device-side ranges are checked against the
//! known allocations first, so a bad pointer is an error instead of a crash.

use std::ffi::c_void;
use std::ptr;

use crate::abi::*;
use crate::memory;
use crate::state;
use crate::streams;

/// What kind of memory one side of a copy is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Must lie in device-accessible memory the shim knows about.
    Device,
    /// Any host memory.
    Host,
    /// Either (`cuMemcpy`, with unified addressing).
    Unified,
}

/// Copies `len` bytes from `src` to `dst`, "on" `stream` (0 for the synchronous calls;
/// either way a default stream needs a current context).
///
/// # Safety
/// A `Host` or `Unified` side that is not device memory the shim allocated must be null
/// or valid for `len` bytes (reads for `src`, writes for `dst`): the C caller's contract.
pub unsafe fn copy(
    dst: u64,
    dst_side: Side,
    src: u64,
    src_side: Side,
    len: usize,
    stream: usize,
) -> Result<(), CUresult> {
    {
        let state = state::lock();
        streams::device(&state, stream)?;
        if len == 0 {
            return Ok(());
        }
        let valid = |address: u64, side: Side, write: bool| match side {
            Side::Device => memory::is_device_accessible(&state, address, len, write),
            Side::Host | Side::Unified => address != 0 && address.checked_add(len as u64).is_some(),
        };
        if !valid(dst, dst_side, true) || !valid(src, src_side, false) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    // SAFETY: device-side ranges were just checked to lie in memory the shim allocated;
    // host-side pointers are non-null and valid for `len` bytes by this function's contract.
    // ptr::copy tolerates overlap.
    unsafe { ptr::copy(src as *const u8, dst as *mut u8, len) };
    Ok(())
}

/// Sets `count` elements of `element_size` (1, 2 or 4) bytes at `dst` to `value`.
pub fn memset(
    dst: u64,
    value: u32,
    element_size: usize,
    count: usize,
    stream: usize,
) -> Result<(), CUresult> {
    let len = count
        .checked_mul(element_size)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    {
        let state = state::lock();
        streams::device(&state, stream)?;
        if len == 0 {
            return Ok(());
        }
        if !dst.is_multiple_of(element_size as u64)
            || !memory::is_device_accessible(&state, dst, len, true)
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    // SAFETY: `dst..dst+len` was just checked to lie in writable memory the shim
    // allocated, and `dst` is aligned for the element type.
    unsafe {
        match element_size {
            1 => ptr::write_bytes(dst as *mut u8, value as u8, count),
            2 => std::slice::from_raw_parts_mut(dst as *mut u16, count).fill(value as u16),
            _ => std::slice::from_raw_parts_mut(dst as *mut u32, count).fill(value),
        }
    }
    Ok(())
}

/// A host pointer as an address.
pub fn host(p: *const c_void) -> u64 {
    p as u64
}
