//! Linear device memory and page-locked host memory.

use std::ffi::{c_uint, c_void};

use super::to_u32;
use crate::abi::*;
use crate::ffi::{write_optional, Out};
use crate::memory::{self, Placement};

exports! {
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) as cuMemGetInfo since 3020 {
        let (free, total) = (Out::optional(free), Out::optional(total));
        let (f, t) = memory::info()?;
        write_optional(free, f as usize);
        write_optional(total, t as usize);
        Ok(())
    }

    /// Legacy: both numbers clamped to 32 bits.
    fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) as cuMemGetInfo since 2000 {
        let (free, total) = (Out::optional(free), Out::optional(total));
        let (f, t) = memory::info()?;
        let clamp = |n: u64| n.min(u32::MAX as u64) as c_uint;
        write_optional(free, clamp(f));
        write_optional(total, clamp(t));
        Ok(())
    }

    fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) as cuMemAlloc since 3020 {
        let out = Out::new(dptr)?;
        out.write(memory::allocate_current(bytes, Placement::Anywhere)?);
        Ok(())
    }

    /// Legacy: a 32-bit device pointer.
    fn cuMemAlloc(dptr: *mut CUdeviceptrV1, bytes: c_uint) as cuMemAlloc since 2000 {
        let out = Out::new(dptr)?;
        let p = memory::allocate_current(bytes as usize, Placement::Low32)?;
        out.write(to_u32(p)?);
        Ok(())
    }

    fn cuMemFree_v2(dptr: CUdeviceptr) as cuMemFree since 3020 {
        memory::free(dptr, true)
    }

    fn cuMemFree(dptr: CUdeviceptrV1) as cuMemFree since 2000 {
        memory::free(dptr.into(), true)
    }

    fn cuMemAllocPitch_v2(
        dptr: *mut CUdeviceptr,
        pitch: *mut usize,
        width: usize,
        height: usize,
        element_size: c_uint,
    ) as cuMemAllocPitch since 3020 {
        let (out, pitch_out) = (Out::new(dptr)?, Out::new(pitch)?);
        let (pitch, bytes) = memory::pitch_layout(width, height, element_size)?;
        out.write(memory::allocate_current(bytes, Placement::Anywhere)?);
        pitch_out.write(pitch);
        Ok(())
    }

    fn cuMemAllocPitch(
        dptr: *mut CUdeviceptrV1,
        pitch: *mut c_uint,
        width: c_uint,
        height: c_uint,
        element_size: c_uint,
    ) as cuMemAllocPitch since 2000 {
        let (out, pitch_out) = (Out::new(dptr)?, Out::new(pitch)?);
        let (pitch, bytes) = memory::pitch_layout(width as usize, height as usize, element_size)?;
        let pitch = to_u32(pitch)?;
        out.write(to_u32(memory::allocate_current(bytes, Placement::Low32)?)?);
        pitch_out.write(pitch);
        Ok(())
    }

    fn cuMemAllocManaged(
        dptr: *mut CUdeviceptr,
        bytes: usize,
        flags: c_uint,
    ) as cuMemAllocManaged since 6000 {
        let out = Out::new(dptr)?;
        out.write(memory::allocate_managed(bytes, flags)?);
        Ok(())
    }

    fn cuMemGetAddressRange_v2(
        base: *mut CUdeviceptr,
        size: *mut usize,
        dptr: CUdeviceptr,
    ) as cuMemGetAddressRange since 3020 {
        let (base, size) = (Out::optional(base), Out::optional(size));
        let (b, s) = memory::address_range(dptr)?;
        write_optional(base, b);
        write_optional(size, s as usize);
        Ok(())
    }

    fn cuMemGetAddressRange(
        base: *mut CUdeviceptrV1,
        size: *mut c_uint,
        dptr: CUdeviceptrV1,
    ) as cuMemGetAddressRange since 2000 {
        let (base, size) = (Out::optional(base), Out::optional(size));
        let (b, s) = memory::address_range(dptr.into())?;
        write_optional(base, to_u32(b)?);
        write_optional(size, to_u32(s)?);
        Ok(())
    }

    fn cuMemHostAlloc(
        pp: *mut *mut c_void,
        bytes: usize,
        flags: c_uint,
    ) as cuMemHostAlloc since 2020 {
        host_alloc(Out::new(pp)?, bytes, flags)
    }

    fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytes: usize) as cuMemAllocHost since 3020 {
        host_alloc(Out::new(pp)?, bytes, 0)
    }

    fn cuMemAllocHost(pp: *mut *mut c_void, bytes: c_uint) as cuMemAllocHost since 2000 {
        host_alloc(Out::new(pp)?, bytes as usize, 0)
    }

    fn cuMemFreeHost(p: *mut c_void) as cuMemFreeHost since 2000 {
        memory::host_free(p as usize)
    }

    fn cuMemHostGetDevicePointer_v2(
        dptr: *mut CUdeviceptr,
        p: *mut c_void,
        flags: c_uint,
    ) as cuMemHostGetDevicePointer since 3020 {
        let out = Out::new(dptr)?;
        out.write(memory::host_device_pointer(p as usize, flags)?);
        Ok(())
    }

    fn cuMemHostGetDevicePointer(
        dptr: *mut CUdeviceptrV1,
        p: *mut c_void,
        flags: c_uint,
    ) as cuMemHostGetDevicePointer since 2020 {
        let out = Out::new(dptr)?;
        out.write(to_u32(memory::host_device_pointer(p as usize, flags)?)?);
        Ok(())
    }

    fn cuMemHostGetFlags(flags: *mut c_uint, p: *mut c_void) as cuMemHostGetFlags since 2030 {
        let out = Out::new(flags)?;
        out.write(memory::host_flags(p as usize)?);
        Ok(())
    }
}

fn host_alloc(out: Out<*mut c_void>, bytes: usize, flags: c_uint) -> Result<(), CUresult> {
    out.write(memory::host_allocate(bytes, flags)? as *mut c_void);
    Ok(())
}
