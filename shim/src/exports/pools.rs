//! Stream-ordered allocation and memory pools.

use std::ffi::{c_int, c_void};

use super::{h, handle_ptr};
use crate::abi::*;
use crate::ffi::{self, Out};
use crate::pools::{self, AttributeValue};

exports! {
    fn cuMemAllocAsync(
        dptr: *mut CUdeviceptr,
        bytes: usize,
        stream: Handle,
    ) as cuMemAllocAsync since 11020 {
        alloc_async(Out::new(dptr)?, bytes, stream)
    }

    fn cuMemAllocAsync_ptsz(
        dptr: *mut CUdeviceptr,
        bytes: usize,
        stream: Handle,
    ) as cuMemAllocAsync since 11020 Ptsz {
        alloc_async(Out::new(dptr)?, bytes, stream)
    }

    fn cuMemAllocFromPoolAsync(
        dptr: *mut CUdeviceptr,
        bytes: usize,
        pool: Handle,
        stream: Handle,
    ) as cuMemAllocFromPoolAsync since 11020 {
        alloc_from_pool(Out::new(dptr)?, bytes, pool, stream)
    }

    fn cuMemAllocFromPoolAsync_ptsz(
        dptr: *mut CUdeviceptr,
        bytes: usize,
        pool: Handle,
        stream: Handle,
    ) as cuMemAllocFromPoolAsync since 11020 Ptsz {
        alloc_from_pool(Out::new(dptr)?, bytes, pool, stream)
    }

    fn cuMemFreeAsync(dptr: CUdeviceptr, stream: Handle) as cuMemFreeAsync since 11020 {
        pools::free_async(dptr, h(stream))
    }

    fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, stream: Handle) as cuMemFreeAsync since 11020 Ptsz {
        pools::free_async(dptr, h(stream))
    }

    // -- CUDA 13: pools by location and allocation type. Pinned pools of a
    // device or the host; managed pools are not simulated (CUDA_ERROR_NOT_SUPPORTED).
    fn cuMemGetDefaultMemPool(
        pool: *mut Handle,
        location: *mut MemLocation,
        kind: c_int,
    ) as cuMemGetDefaultMemPool since 13000 {
        let out = Out::new(pool)?;
        out.write(handle_ptr(pool_at(ffi::read(location)?, kind, pools::default_pool)?));
        Ok(())
    }

    fn cuMemGetMemPool(
        pool: *mut Handle,
        location: *mut MemLocation,
        kind: c_int,
    ) as cuMemGetMemPool since 13000 {
        let out = Out::new(pool)?;
        out.write(handle_ptr(pool_at(ffi::read(location)?, kind, pools::current_pool)?));
        Ok(())
    }

    fn cuMemSetMemPool(
        location: *mut MemLocation,
        kind: c_int,
        pool: Handle,
    ) as cuMemSetMemPool since 13000 {
        let location = ffi::read(location)?;
        match (location.kind, kind) {
            (LOCATION_DEVICE, ALLOCATION_PINNED) => pools::set_current_pool(location.id, h(pool)),
            (LOCATION_DEVICE_LOCALITY_DOMAIN, ALLOCATION_PINNED) => {
                let device = localized_device(location)?;
                pools::set_current_pool(device, h(pool))
            }
            (_, ALLOCATION_PINNED | ALLOCATION_MANAGED) => Err(CUDA_ERROR_NOT_SUPPORTED),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }

    fn cuMemPoolCreate(
        pool: *mut Handle,
        props: *const MemPoolPropsHead,
    ) as cuMemPoolCreate since 11020 {
        let out = Out::new(pool)?;
        out.write(handle_ptr(pools::create(&ffi::read(props)?)?));
        Ok(())
    }

    fn cuMemPoolDestroy(pool: Handle) as cuMemPoolDestroy since 11020 {
        pools::destroy(h(pool))
    }

    fn cuMemPoolSetAttribute(
        pool: Handle,
        attribute: c_int,
        value: *mut c_void,
    ) as cuMemPoolSetAttribute since 11020 {
        let value = if pools::attribute_is_int(attribute)? {
            AttributeValue::Int(ffi::read(value.cast::<c_int>())?)
        } else {
            AttributeValue::U64(ffi::read(value.cast::<u64>())?)
        };
        pools::set_attribute(h(pool), attribute, value)
    }

    fn cuMemPoolGetAttribute(
        pool: Handle,
        attribute: c_int,
        value: *mut c_void,
    ) as cuMemPoolGetAttribute since 11020 {
        let is_int = pools::attribute_is_int(attribute)?;
        if value.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        match pools::get_attribute(h(pool), attribute)? {
            AttributeValue::Int(v) if is_int => Out::new(value.cast::<c_int>())?.write(v),
            AttributeValue::U64(v) if !is_int => Out::new(value.cast::<u64>())?.write(v),
            _ => return Err(CUDA_ERROR_UNKNOWN),
        }
        Ok(())
    }

    fn cuMemPoolTrimTo(pool: Handle, min_bytes_to_keep: usize) as cuMemPoolTrimTo since 11020 {
        pools::trim_to(h(pool), min_bytes_to_keep as u64)
    }

    fn cuMemPoolSetAccess(
        pool: Handle,
        map: *const MemAccessDesc,
        count: usize,
    ) as cuMemPoolSetAccess since 11020 {
        pools::set_access(h(pool), ffi::slice(map, count)?)
    }

    fn cuMemPoolGetAccess(
        flags: *mut c_int,
        pool: Handle,
        location: *const MemLocation,
    ) as cuMemPoolGetAccess since 11020 {
        let out = Out::new(flags)?;
        out.write(pools::get_access(h(pool), ffi::read(location)?)?);
        Ok(())
    }
}

/// The device of a `DEVICE_LOCALITY_DOMAIN` location: its one locality domain (0) is the
/// whole device (see `MemLocation::device`).
fn localized_device(location: MemLocation) -> Result<CUdevice, CUresult> {
    let devices = crate::state::lock().devices.len();
    match location.device(devices)? {
        Some(device) => Ok(device as CUdevice),
        None => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// The pool CUDA 13 names by location: `of_device` for a device (a locality domain's is the
/// device's: a simulated device has one), the host's default pool for a host location (the
/// simulated host's current pool is its default one).
fn pool_at(
    location: MemLocation,
    kind: c_int,
    of_device: fn(CUdevice) -> Result<usize, CUresult>,
) -> Result<usize, CUresult> {
    match (location.kind, kind) {
        (LOCATION_DEVICE, ALLOCATION_PINNED) => of_device(location.id),
        (LOCATION_DEVICE_LOCALITY_DOMAIN, ALLOCATION_PINNED) => {
            of_device(localized_device(location)?)
        }
        (LOCATION_HOST..=LOCATION_HOST_NUMA_CURRENT, ALLOCATION_PINNED) => {
            Ok(pools::host_default_pool())
        }
        (_, ALLOCATION_MANAGED) => Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

fn alloc_async(out: Out<CUdeviceptr>, bytes: usize, stream: Handle) -> Result<(), CUresult> {
    out.write(pools::allocate_async(bytes, h(stream))?);
    Ok(())
}

fn alloc_from_pool(
    out: Out<CUdeviceptr>,
    bytes: usize,
    pool: Handle,
    stream: Handle,
) -> Result<(), CUresult> {
    out.write(pools::allocate_from_pool(bytes, h(pool), h(stream))?);
    Ok(())
}
