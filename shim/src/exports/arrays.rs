//! CUDA arrays and mipmapped arrays.

use std::ffi::c_uint;

use super::{h, handle_ptr};
use crate::abi::*;
use crate::arrays;
use crate::ffi::{self, Out};

exports! {
    fn cuArrayCreate_v2(
        handle: *mut CUarray,
        desc: *const ArrayDescriptor,
    ) as cuArrayCreate since 3020 {
        let out = Out::new(handle)?;
        out.write(handle_ptr(arrays::create_2d(&ffi::read(desc)?)?));
        Ok(())
    }

    fn cuArray3DCreate_v2(
        handle: *mut CUarray,
        desc: *const Array3DDescriptor,
    ) as cuArray3DCreate since 3020 {
        let out = Out::new(handle)?;
        out.write(handle_ptr(arrays::create(&ffi::read(desc)?)?));
        Ok(())
    }

    /// Legacy: 32-bit dimensions.
    fn cuArrayCreate(
        handle: *mut CUarray,
        desc: *const ArrayDescriptorV1,
    ) as cuArrayCreate since 2000 {
        let out = Out::new(handle)?;
        let d = ffi::read(desc)?;
        let desc = ArrayDescriptor {
            width: d.width as usize,
            height: d.height as usize,
            format: d.format,
            num_channels: d.num_channels,
        };
        out.write(handle_ptr(arrays::create_2d(&desc)?));
        Ok(())
    }

    /// Legacy: 32-bit dimensions.
    fn cuArray3DCreate(
        handle: *mut CUarray,
        desc: *const Array3DDescriptorV1,
    ) as cuArray3DCreate since 2000 {
        let out = Out::new(handle)?;
        let d = ffi::read(desc)?;
        let desc = Array3DDescriptor {
            width: d.width as usize,
            height: d.height as usize,
            depth: d.depth as usize,
            format: d.format,
            num_channels: d.num_channels,
            flags: d.flags,
        };
        out.write(handle_ptr(arrays::create(&desc)?));
        Ok(())
    }

    fn cuArrayDestroy(array: CUarray) as cuArrayDestroy since 2000 {
        arrays::destroy(h(array))
    }

    fn cuArrayGetDescriptor_v2(
        desc: *mut ArrayDescriptor,
        array: CUarray,
    ) as cuArrayGetDescriptor since 3020 {
        let out = Out::new(desc)?;
        out.write(arrays::descriptor_2d(h(array))?);
        Ok(())
    }

    fn cuArray3DGetDescriptor_v2(
        desc: *mut Array3DDescriptor,
        array: CUarray,
    ) as cuArray3DGetDescriptor since 3020 {
        let out = Out::new(desc)?;
        out.write(arrays::descriptor(h(array))?);
        Ok(())
    }

    fn cuArrayGetMemoryRequirements(
        requirements: *mut ArrayMemoryRequirements,
        array: CUarray,
        device: CUdevice,
    ) as cuArrayGetMemoryRequirements since 11060 {
        let out = Out::new(requirements)?;
        out.write(arrays::array_requirements(h(array), device)?);
        Ok(())
    }

    fn cuMipmappedArrayCreate(
        handle: *mut CUarray,
        desc: *const Array3DDescriptor,
        levels: c_uint,
    ) as cuMipmappedArrayCreate since 5000 {
        let out = Out::new(handle)?;
        out.write(handle_ptr(arrays::create_mipmapped(&ffi::read(desc)?, levels)?));
        Ok(())
    }

    fn cuMipmappedArrayGetLevel(
        level_array: *mut CUarray,
        mipmapped: CUarray,
        level: c_uint,
    ) as cuMipmappedArrayGetLevel since 5000 {
        let out = Out::new(level_array)?;
        out.write(handle_ptr(arrays::level(h(mipmapped), level)?));
        Ok(())
    }

    fn cuMipmappedArrayDestroy(mipmapped: CUarray) as cuMipmappedArrayDestroy since 5000 {
        arrays::destroy_mipmapped(h(mipmapped))
    }

    fn cuMipmappedArrayGetMemoryRequirements(
        requirements: *mut ArrayMemoryRequirements,
        mipmapped: CUarray,
        device: CUdevice,
    ) as cuMipmappedArrayGetMemoryRequirements since 11060 {
        let out = Out::new(requirements)?;
        out.write(arrays::mipmapped_requirements(h(mipmapped), device)?);
        Ok(())
    }
}
