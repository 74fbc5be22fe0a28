//! Virtual memory management: physical allocations, address reservations, mappings.

use std::ffi::{c_int, c_uint, c_void};

use crate::abi::*;
use crate::ffi::{self, Out};
use crate::vmm;

exports! {
    fn cuMemMapArrayAsync(
        infos: *mut ArrayMapInfo,
        count: c_uint,
        stream: Handle,
    ) as cuMemMapArrayAsync since 11010 {
        vmm::map_array(ffi::slice(infos, count as usize)?, stream as usize)
    }

    fn cuMemMapArrayAsync_ptsz(
        infos: *mut ArrayMapInfo,
        count: c_uint,
        stream: Handle,
    ) as cuMemMapArrayAsync since 11010 Ptsz {
        vmm::map_array(ffi::slice(infos, count as usize)?, stream as usize)
    }

    fn cuMemGetAllocationGranularity(
        granularity: *mut usize,
        prop: *const MemAllocationProp,
        option: c_int,
    ) as cuMemGetAllocationGranularity since 10020 {
        let out = Out::new(granularity)?;
        out.write(vmm::granularity(&ffi::read(prop)?, option)?);
        Ok(())
    }

    fn cuMemCreate(
        handle: *mut CUmemGenericAllocationHandle,
        size: usize,
        prop: *const MemAllocationProp,
        flags: u64,
    ) as cuMemCreate since 10020 {
        let out = Out::new(handle)?;
        out.write(vmm::create(size, &ffi::read(prop)?, flags)?);
        Ok(())
    }

    fn cuMemRelease(handle: CUmemGenericAllocationHandle) as cuMemRelease since 10020 {
        vmm::release(handle)
    }

    fn cuMemAddressReserve(
        ptr: *mut CUdeviceptr,
        size: usize,
        alignment: usize,
        addr: CUdeviceptr,
        flags: u64,
    ) as cuMemAddressReserve since 10020 {
        let out = Out::new(ptr)?;
        out.write(vmm::reserve(size, alignment, addr as usize, flags)? as CUdeviceptr);
        Ok(())
    }

    fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) as cuMemAddressFree since 10020 {
        vmm::free_reservation(ptr as usize, size)
    }

    fn cuMemMap(
        ptr: CUdeviceptr,
        size: usize,
        offset: usize,
        handle: CUmemGenericAllocationHandle,
        flags: u64,
    ) as cuMemMap since 10020 {
        vmm::map(ptr as usize, size, offset, handle, flags)
    }

    fn cuMemUnmap(ptr: CUdeviceptr, size: usize) as cuMemUnmap since 10020 {
        vmm::unmap(ptr as usize, size)
    }

    fn cuMemSetAccess(
        ptr: CUdeviceptr,
        size: usize,
        desc: *const MemAccessDesc,
        count: usize,
    ) as cuMemSetAccess since 10020 {
        vmm::set_access(ptr as usize, size, ffi::slice(desc, count)?)
    }

    fn cuMemGetAccess(
        flags: *mut u64,
        location: *const MemLocation,
        ptr: CUdeviceptr,
    ) as cuMemGetAccess since 10020 {
        let out = Out::new(flags)?;
        out.write(vmm::get_access(ffi::read(location)?, ptr as usize)?);
        Ok(())
    }

    fn cuMemGetAllocationPropertiesFromHandle(
        prop: *mut MemAllocationProp,
        handle: CUmemGenericAllocationHandle,
    ) as cuMemGetAllocationPropertiesFromHandle since 10020 {
        let out = Out::new(prop)?;
        out.write(vmm::properties(handle)?);
        Ok(())
    }

    fn cuMemRetainAllocationHandle(
        handle: *mut CUmemGenericAllocationHandle,
        addr: *mut c_void,
    ) as cuMemRetainAllocationHandle since 11000 {
        let out = Out::new(handle)?;
        out.write(vmm::retain(addr as usize)?);
        Ok(())
    }

    fn cuMemExportToShareableHandle(
        shareable: *mut c_void,
        handle: CUmemGenericAllocationHandle,
        kind: c_int,
        flags: u64,
    ) as cuMemExportToShareableHandle since 10020 {
        let out = Out::new(shareable.cast::<c_int>())?;
        out.write(vmm::export(handle, kind, flags)?);
        Ok(())
    }

    fn cuMemImportFromShareableHandle(
        handle: *mut CUmemGenericAllocationHandle,
        os_handle: *mut c_void,
        kind: c_int,
    ) as cuMemImportFromShareableHandle since 10020 {
        let out = Out::new(handle)?;
        out.write(vmm::import(os_handle as usize, kind)?);
        Ok(())
    }
}
