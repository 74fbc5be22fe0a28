//! Copies and memsets (stream 0 for the synchronous forms).

use std::ffi::{c_uint, c_void};
use std::ptr;

use super::h;
use crate::abi::*;
use crate::copy::{self, Side};

exports! {
    fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) as cuMemcpy since 4000 {
        copy::copy(dst, Side::Unified, src, Side::Unified, bytes, 0)
    }

    fn cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) as cuMemcpy since 7000 Ptds {
        copy::copy(dst, Side::Unified, src, Side::Unified, bytes, 0)
    }

    fn cuMemcpyAsync(
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
        stream: Handle,
    ) as cuMemcpyAsync since 4000 {
        copy::copy(dst, Side::Unified, src, Side::Unified, bytes, h(stream))
    }

    fn cuMemcpyAsync_ptsz(
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
        stream: Handle,
    ) as cuMemcpyAsync since 7000 Ptsz {
        copy::copy(dst, Side::Unified, src, Side::Unified, bytes, h(stream))
    }

    fn cuMemcpyHtoD_v2(
        dst: CUdeviceptr,
        src: *const c_void,
        bytes: usize,
    ) as cuMemcpyHtoD since 3020 {
        htod(dst, src, bytes, SYNC)
    }

    fn cuMemcpyHtoD_v2_ptds(
        dst: CUdeviceptr,
        src: *const c_void,
        bytes: usize,
    ) as cuMemcpyHtoD since 7000 Ptds {
        htod(dst, src, bytes, SYNC)
    }

    fn cuMemcpyHtoD(
        dst: CUdeviceptrV1,
        src: *const c_void,
        bytes: c_uint,
    ) as cuMemcpyHtoD since 2000 {
        htod(dst.into(), src, bytes as usize, SYNC)
    }

    fn cuMemcpyDtoH_v2(
        dst: *mut c_void,
        src: CUdeviceptr,
        bytes: usize,
    ) as cuMemcpyDtoH since 3020 {
        dtoh(dst, src, bytes, SYNC)
    }

    fn cuMemcpyDtoH_v2_ptds(
        dst: *mut c_void,
        src: CUdeviceptr,
        bytes: usize,
    ) as cuMemcpyDtoH since 7000 Ptds {
        dtoh(dst, src, bytes, SYNC)
    }

    fn cuMemcpyDtoH(
        dst: *mut c_void,
        src: CUdeviceptrV1,
        bytes: c_uint,
    ) as cuMemcpyDtoH since 2000 {
        dtoh(dst, src.into(), bytes as usize, SYNC)
    }

    fn cuMemcpyDtoD_v2(
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
    ) as cuMemcpyDtoD since 3020 {
        dtod(dst, src, bytes, SYNC)
    }

    fn cuMemcpyDtoD_v2_ptds(
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
    ) as cuMemcpyDtoD since 7000 Ptds {
        dtod(dst, src, bytes, SYNC)
    }

    fn cuMemcpyDtoD(
        dst: CUdeviceptrV1,
        src: CUdeviceptrV1,
        bytes: c_uint,
    ) as cuMemcpyDtoD since 2000 {
        dtod(dst.into(), src.into(), bytes as usize, SYNC)
    }

    fn cuMemcpyHtoDAsync_v2(
        dst: CUdeviceptr,
        src: *const c_void,
        bytes: usize,
        stream: Handle,
    ) as cuMemcpyHtoDAsync since 3020 {
        htod(dst, src, bytes, stream)
    }

    fn cuMemcpyHtoDAsync_v2_ptsz(
        dst: CUdeviceptr,
        src: *const c_void,
        bytes: usize,
        stream: Handle,
    ) as cuMemcpyHtoDAsync since 7000 Ptsz {
        htod(dst, src, bytes, stream)
    }

    fn cuMemcpyHtoDAsync(
        dst: CUdeviceptrV1,
        src: *const c_void,
        bytes: c_uint,
        stream: Handle,
    ) as cuMemcpyHtoDAsync since 2000 {
        htod(dst.into(), src, bytes as usize, stream)
    }

    fn cuMemcpyDtoHAsync_v2(
        dst: *mut c_void,
        src: CUdeviceptr,
        bytes: usize,
        stream: Handle,
    ) as cuMemcpyDtoHAsync since 3020 {
        dtoh(dst, src, bytes, stream)
    }

    fn cuMemcpyDtoHAsync_v2_ptsz(
        dst: *mut c_void,
        src: CUdeviceptr,
        bytes: usize,
        stream: Handle,
    ) as cuMemcpyDtoHAsync since 7000 Ptsz {
        dtoh(dst, src, bytes, stream)
    }

    fn cuMemcpyDtoHAsync(
        dst: *mut c_void,
        src: CUdeviceptrV1,
        bytes: c_uint,
        stream: Handle,
    ) as cuMemcpyDtoHAsync since 2000 {
        dtoh(dst, src.into(), bytes as usize, stream)
    }

    fn cuMemcpyDtoDAsync_v2(
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
        stream: Handle,
    ) as cuMemcpyDtoDAsync since 3020 {
        dtod(dst, src, bytes, stream)
    }

    fn cuMemcpyDtoDAsync_v2_ptsz(
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
        stream: Handle,
    ) as cuMemcpyDtoDAsync since 7000 Ptsz {
        dtod(dst, src, bytes, stream)
    }

    fn cuMemcpyDtoDAsync(
        dst: CUdeviceptrV1,
        src: CUdeviceptrV1,
        bytes: c_uint,
        stream: Handle,
    ) as cuMemcpyDtoDAsync since 3000 {
        dtod(dst.into(), src.into(), bytes as usize, stream)
    }

    fn cuMemsetD8_v2(dst: CUdeviceptr, value: u8, count: usize) as cuMemsetD8 since 3020 {
        copy::memset(dst, value.into(), 1, count, 0)
    }

    fn cuMemsetD8_v2_ptds(dst: CUdeviceptr, value: u8, count: usize) as cuMemsetD8 since 7000 Ptds {
        copy::memset(dst, value.into(), 1, count, 0)
    }

    fn cuMemsetD8(dst: CUdeviceptrV1, value: u8, count: c_uint) as cuMemsetD8 since 2000 {
        copy::memset(dst.into(), value.into(), 1, count as usize, 0)
    }

    fn cuMemsetD16_v2(dst: CUdeviceptr, value: u16, count: usize) as cuMemsetD16 since 3020 {
        copy::memset(dst, value.into(), 2, count, 0)
    }

    fn cuMemsetD16_v2_ptds(
        dst: CUdeviceptr,
        value: u16,
        count: usize,
    ) as cuMemsetD16 since 7000 Ptds {
        copy::memset(dst, value.into(), 2, count, 0)
    }

    fn cuMemsetD16(dst: CUdeviceptrV1, value: u16, count: c_uint) as cuMemsetD16 since 2000 {
        copy::memset(dst.into(), value.into(), 2, count as usize, 0)
    }

    fn cuMemsetD32_v2(dst: CUdeviceptr, value: u32, count: usize) as cuMemsetD32 since 3020 {
        copy::memset(dst, value, 4, count, 0)
    }

    fn cuMemsetD32_v2_ptds(
        dst: CUdeviceptr,
        value: u32,
        count: usize,
    ) as cuMemsetD32 since 7000 Ptds {
        copy::memset(dst, value, 4, count, 0)
    }

    fn cuMemsetD32(dst: CUdeviceptrV1, value: u32, count: c_uint) as cuMemsetD32 since 2000 {
        copy::memset(dst.into(), value, 4, count as usize, 0)
    }

    fn cuMemsetD8Async(
        dst: CUdeviceptr,
        value: u8,
        count: usize,
        stream: Handle,
    ) as cuMemsetD8Async since 3020 {
        copy::memset(dst, value.into(), 1, count, h(stream))
    }

    fn cuMemsetD8Async_ptsz(
        dst: CUdeviceptr,
        value: u8,
        count: usize,
        stream: Handle,
    ) as cuMemsetD8Async since 7000 Ptsz {
        copy::memset(dst, value.into(), 1, count, h(stream))
    }

    fn cuMemsetD16Async(
        dst: CUdeviceptr,
        value: u16,
        count: usize,
        stream: Handle,
    ) as cuMemsetD16Async since 3020 {
        copy::memset(dst, value.into(), 2, count, h(stream))
    }

    fn cuMemsetD16Async_ptsz(
        dst: CUdeviceptr,
        value: u16,
        count: usize,
        stream: Handle,
    ) as cuMemsetD16Async since 7000 Ptsz {
        copy::memset(dst, value.into(), 2, count, h(stream))
    }

    fn cuMemsetD32Async(
        dst: CUdeviceptr,
        value: u32,
        count: usize,
        stream: Handle,
    ) as cuMemsetD32Async since 3020 {
        copy::memset(dst, value, 4, count, h(stream))
    }

    fn cuMemsetD32Async_ptsz(
        dst: CUdeviceptr,
        value: u32,
        count: usize,
        stream: Handle,
    ) as cuMemsetD32Async since 7000 Ptsz {
        copy::memset(dst, value, 4, count, h(stream))
    }
}

/// # Safety
/// `src` must be null or readable for `bytes` bytes.
unsafe fn htod(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: Handle,
) -> Result<(), CUresult> {
    let src = copy::host(src);
    // SAFETY: the host side is this function's contract; the device side is checked.
    unsafe { copy::copy(dst, Side::Device, src, Side::Host, bytes, h(stream)) }
}

/// # Safety
/// `dst` must be null or writable for `bytes` bytes.
unsafe fn dtoh(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> Result<(), CUresult> {
    let dst = copy::host(dst);
    // SAFETY: the host side is this function's contract; the device side is checked.
    unsafe { copy::copy(dst, Side::Host, src, Side::Device, bytes, h(stream)) }
}

fn dtod(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: Handle) -> Result<(), CUresult> {
    // SAFETY: both sides are device memory, which `copy` checks.
    unsafe { copy::copy(dst, Side::Device, src, Side::Device, bytes, h(stream)) }
}

const SYNC: Handle = ptr::null_mut();
