//! 2D copies, host registration, pointer attributes, memory advice and context limits: the
//! functions loaders such as ffmpeg's and PyCUDA's resolve up front that the shim can
//! simulate on host memory.

use std::ffi::{c_uint, c_void};

use super::h;
use crate::abi::*;
use crate::copy2d::{self, Memcpy2D};
use crate::ffi::{self, Out};
use crate::{host_register, limits, pointers, state};

/// `CU_MEM_ADVISE_SET_READ_MOSTLY` .. `CU_MEM_ADVISE_UNSET_ACCESSED_BY`.
const ADVICE: std::ops::RangeInclusive<c_uint> = 1..=6;
/// `CU_DEVICE_CPU`.
const DEVICE_CPU: CUdevice = -1;

exports! {
    fn cuMemcpy2D_v2(copy: *const Memcpy2D) as cuMemcpy2D since 3020 {
        copy2d::copy(&ffi::read(copy)?, SYNC)
    }

    fn cuMemcpy2D_v2_ptds(copy: *const Memcpy2D) as cuMemcpy2D since 7000 Ptds {
        copy2d::copy(&ffi::read(copy)?, SYNC)
    }

    fn cuMemcpy2DUnaligned_v2(copy: *const Memcpy2D) as cuMemcpy2DUnaligned since 3020 {
        copy2d::copy(&ffi::read(copy)?, SYNC)
    }

    fn cuMemcpy2DUnaligned_v2_ptds(
        copy: *const Memcpy2D,
    ) as cuMemcpy2DUnaligned since 7000 Ptds {
        copy2d::copy(&ffi::read(copy)?, SYNC)
    }

    fn cuMemcpy2DAsync_v2(
        copy: *const Memcpy2D,
        stream: Handle,
    ) as cuMemcpy2DAsync since 3020 {
        copy2d::copy(&ffi::read(copy)?, h(stream))
    }

    fn cuMemcpy2DAsync_v2_ptsz(
        copy: *const Memcpy2D,
        stream: Handle,
    ) as cuMemcpy2DAsync since 7000 Ptsz {
        copy2d::copy(&ffi::read(copy)?, h(stream))
    }

    fn cuMemHostRegister(
        p: *mut c_void,
        bytes: usize,
        flags: c_uint,
    ) as cuMemHostRegister since 4000 {
        host_register::register(p as usize, bytes, flags)
    }

    fn cuMemHostRegister_v2(
        p: *mut c_void,
        bytes: usize,
        flags: c_uint,
    ) as cuMemHostRegister since 6050 {
        host_register::register(p as usize, bytes, flags)
    }

    fn cuMemHostUnregister(p: *mut c_void) as cuMemHostUnregister since 4000 {
        host_register::unregister(p as usize)
    }

    fn cuPointerGetAttribute(
        data: *mut c_void,
        attribute: c_uint,
        ptr: CUdeviceptr,
    ) as cuPointerGetAttribute since 4000 {
        if data.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        pointers::get(attribute, ptr)?.write(data)
    }

    fn cuPointerGetAttributes(
        count: c_uint,
        attributes: *const c_uint,
        data: *const *mut c_void,
        ptr: CUdeviceptr,
    ) as cuPointerGetAttributes since 7000 {
        let attributes = ffi::slice(attributes, count as usize)?;
        let data = ffi::slice(data, count as usize)?;
        let values = pointers::get_many(attributes, ptr)?;
        for (value, &out) in values.into_iter().zip(data) {
            value.write(out)?;
        }
        Ok(())
    }

    fn cuMemAdvise(
        ptr: CUdeviceptr,
        count: usize,
        advice: c_uint,
        device: CUdevice,
    ) as cuMemAdvise since 8000 {
        if !ADVICE.contains(&advice) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if device != DEVICE_CPU {
            state::lock().device(device)?;
        }
        pointers::advise(ptr, count)
    }

    fn cuMemAdvise_v2(
        ptr: CUdeviceptr,
        count: usize,
        advice: c_uint,
        location: MemLocation,
    ) as cuMemAdvise since 12020 {
        if !ADVICE.contains(&advice) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        match location.kind {
            LOCATION_DEVICE => {
                state::lock().device(location.id)?;
            }
            LOCATION_HOST | LOCATION_HOST_NUMA | LOCATION_HOST_NUMA_CURRENT => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        pointers::advise(ptr, count)
    }

    fn cuCtxSetLimit(limit: c_uint, value: usize) as cuCtxSetLimit since 3010 {
        limits::set(limit, value)
    }

    fn cuCtxGetLimit(value: *mut usize, limit: c_uint) as cuCtxGetLimit since 3010 {
        let out = Out::new(value)?;
        out.write(limits::get(limit)?);
        Ok(())
    }
}

/// The stream the synchronous forms run "on".
const SYNC: usize = 0;
