//! `cuMemcpy2D*`: copies of `Height` rows of `WidthInBytes` bytes between pitched host and
//! device memory, described by a `CUDA_MEMCPY2D`. Arrays are not backed by host memory the
//! shim can address row by row, so array sides are `CUDA_ERROR_NOT_SUPPORTED`.

use std::ffi::c_void;
use std::ptr;

use crate::abi::*;
use crate::memory;
use crate::state;
use crate::streams;

/// `CUDA_MEMCPY2D` (`CUDA_MEMCPY2D_v2` in cuda.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Memcpy2D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_memory_type: u32,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: CUarray,
    pub src_pitch: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_memory_type: u32,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: CUarray,
    pub dst_pitch: usize,
    pub width_in_bytes: usize,
    pub height: usize,
}

const MEMORYTYPE_HOST: u32 = 1;
const MEMORYTYPE_DEVICE: u32 = 2;
const MEMORYTYPE_ARRAY: u32 = 3;
const MEMORYTYPE_UNIFIED: u32 = 4;

/// One side of a 2D copy, resolved: the first byte it touches, its pitch, and whether the
/// shim must find it in device-accessible memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plane {
    start: u64,
    pitch: usize,
    device: bool,
}

/// A side's plane from its fields, with the span checks the driver documents: the pitch
/// holds `x + width`.
fn plane(
    memory_type: u32,
    host: u64,
    device: u64,
    x: usize,
    y: usize,
    pitch: usize,
    width: usize,
) -> Result<Plane, CUresult> {
    let (base, on_device) = match memory_type {
        MEMORYTYPE_HOST => (host, false),
        MEMORYTYPE_DEVICE => (device, true),
        // Unified addressing: the device field, which may be host or device memory.
        MEMORYTYPE_UNIFIED => (device, false),
        MEMORYTYPE_ARRAY => return Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    let row_end = x.checked_add(width).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if base == 0 || row_end > pitch {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let offset = y
        .checked_mul(pitch)
        .and_then(|o| o.checked_add(x))
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let start = base
        .checked_add(offset as u64)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    Ok(Plane {
        start,
        pitch,
        device: on_device,
    })
}

/// Bytes from a plane's first byte to the end of its last row.
fn span(plane: Plane, width: usize, height: usize) -> Option<usize> {
    (height - 1).checked_mul(plane.pitch)?.checked_add(width)
}

/// Performs the copy "on" `stream` (0 for `cuMemcpy2D_v2`; all work is synchronous).
///
/// # Safety
/// Host-side rows must be valid for the copy (the C caller's contract).
pub unsafe fn copy(p: &Memcpy2D, stream: usize) -> Result<(), CUresult> {
    let (width, height) = (p.width_in_bytes, p.height);
    let src = plane(
        p.src_memory_type,
        p.src_host as u64,
        p.src_device,
        p.src_x_in_bytes,
        p.src_y,
        p.src_pitch,
        width,
    )?;
    let dst = plane(
        p.dst_memory_type,
        p.dst_host as u64,
        p.dst_device,
        p.dst_x_in_bytes,
        p.dst_y,
        p.dst_pitch,
        width,
    )?;
    {
        let state = state::lock();
        streams::device(&state, stream)?;
        if width == 0 || height == 0 {
            return Ok(());
        }
        for (side, write) in [(src, false), (dst, true)] {
            let len = span(side, width, height).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            let fits = side.start.checked_add(len as u64).is_some();
            if !fits
                || (side.device && !memory::is_device_accessible(&state, side.start, len, write))
            {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
        }
    }
    for row in 0..height {
        let from = src.start as usize + row * src.pitch;
        let to = dst.start as usize + row * dst.pitch;
        // SAFETY: device-side spans were checked to lie in memory the shim allocated; host
        // rows are valid by this function's contract. ptr::copy tolerates overlap.
        unsafe { ptr::copy(from as *const u8, to as *mut u8, width) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_check_pitch_and_types() {
        let p = plane(MEMORYTYPE_HOST, 0x1000, 0, 4, 2, 16, 8).unwrap();
        assert_eq!(p.start, 0x1000 + 2 * 16 + 4);
        assert!(!p.device);
        assert_eq!(span(p, 8, 3), Some(2 * 16 + 8));
        assert!(
            plane(MEMORYTYPE_DEVICE, 0, 0x2000, 0, 0, 8, 8)
                .unwrap()
                .device
        );
        // x + width beyond the pitch.
        assert_eq!(
            plane(MEMORYTYPE_HOST, 0x1000, 0, 4, 0, 8, 8),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
        assert_eq!(
            plane(MEMORYTYPE_ARRAY, 0, 0, 0, 0, 8, 8),
            Err(CUDA_ERROR_NOT_SUPPORTED)
        );
        assert_eq!(plane(9, 1, 1, 0, 0, 8, 8), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(
            plane(MEMORYTYPE_DEVICE, 0x1000, 0, 0, 0, 8, 8),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
    }
}
