//! CUDA arrays: charged what the driver lays out for them, asked of the driver where it can
//! say (`array_shape` estimates otherwise), and credited when destroyed.

use super::frees::free_of;
use super::{hook, hooked, plain, table};
use crate::array_shape::ArrayShape;
use crate::cuda_abi::{
    CuArray, CuArray3DDescriptor, CuArray3DDescriptorV1, CuArrayDescriptor, CuArrayDescriptorV1,
    CuArrayMemoryRequirements, CuDevice, CuResult,
};
use crate::engine::Kind;
use crate::ffi::{self, Out};
use crate::lookup::{CFunction, Real};
use crate::real_driver as real;
use std::ffi::c_uint;

/// An array creation: charged what the driver lays out for it (see `Engine::alloc_array`).
/// `call` creates the array; `probe` asks the driver what the shape takes on a device;
/// `undo` destroys an array whose true size does not fit.
fn create_array<F: CFunction>(
    real: &'static Real<F>,
    shape: Option<ArrayShape>,
    handle: *mut CuArray,
    call: impl Fn(F) -> CuResult,
    undo: fn(u64),
) -> CuResult {
    // Nothing to describe (no descriptor, no levels): the driver's own answer.
    let Some(shape) = shape else {
        return plain(real, call);
    };
    hook(
        real,
        |f, e| {
            let create = || {
                let rc = call(f);
                // SAFETY: `handle` is the caller's out-pointer, null or valid.
                let key = match (rc.is_ok(), unsafe { Out::new(handle) }) {
                    (true, Some(out)) => out.get() as u64,
                    _ => 0,
                };
                (rc, key)
            };
            let probe = |device| array_size_from_driver(shape, device);
            e.alloc_array(real.name(), shape, create, probe, undo)
        },
        &call,
    )
}

/// What the driver gives an array of `shape` on `device`: the memory requirements of a
/// deferred-mapping array of the same shape, made and destroyed for the question (the
/// documented query answers for those only). None when the driver cannot say (no deferred
/// mapping on this device or driver).
fn array_size_from_driver(shape: ArrayShape, device: u32) -> Option<u64> {
    let desc = shape.deferred();
    let mut array: CuArray = std::ptr::null_mut();
    let mut req = CuArrayMemoryRequirements::default();
    let rc = if shape.levels == 1 {
        let (create, query, destroy) = (
            real::cuArray3DCreate_v2.get()?,
            real::cuArrayGetMemoryRequirements.get()?,
            real::cuArrayDestroy.get()?,
        );
        // SAFETY: valid descriptor and out-pointers; the array is ours and destroyed here.
        unsafe {
            if !create(&mut array, &desc).is_ok() {
                return None;
            }
            let rc = query(&mut req, array, device as CuDevice);
            destroy(array);
            rc
        }
    } else {
        let (create, query, destroy) = (
            real::cuMipmappedArrayCreate.get()?,
            real::cuMipmappedArrayGetMemoryRequirements.get()?,
            real::cuMipmappedArrayDestroy.get()?,
        );
        // SAFETY: as above.
        unsafe {
            if !create(&mut array, &desc, shape.levels).is_ok() {
                return None;
            }
            let rc = query(&mut req, array, device as CuDevice);
            destroy(array);
            rc
        }
    };
    rc.is_ok().then_some(req.size as u64)
}

/// Destroys an array the caller never got (its true size was over the quota).
fn destroy_array(array: u64) {
    if let Some(real) = real::cuArrayDestroy.get() {
        // SAFETY: the driver just made this array and nobody else knows it.
        unsafe { real(array as usize as CuArray) };
    }
}

fn destroy_mipmapped(array: u64) {
    if let Some(real) = real::cuMipmappedArrayDestroy.get() {
        // SAFETY: as for destroy_array.
        unsafe { real(array as usize as CuArray) };
    }
}

hooked!(
    cuArrayCreate_v2,
    |handle: *mut CuArray, desc: *const CuArrayDescriptor| {
        // SAFETY: `desc` is null or the caller's valid descriptor.
        let shape = unsafe { ffi::input(desc) }.map(ArrayShape::from_2d);
        create_array(
            &real::cuArrayCreate_v2,
            shape,
            handle,
            // SAFETY: the caller's arguments, passed on.
            |real| unsafe { real(handle, desc) },
            destroy_array,
        )
    }
);

hooked!(
    cuArray3DCreate_v2,
    |handle: *mut CuArray, desc: *const CuArray3DDescriptor| {
        // SAFETY: `desc` is null or the caller's valid descriptor.
        let shape = unsafe { ffi::input(desc) }.map(|d| ArrayShape::from_3d(d, 1));
        create_array(
            &real::cuArray3DCreate_v2,
            shape,
            handle,
            // SAFETY: the caller's arguments, passed on.
            |real| unsafe { real(handle, desc) },
            destroy_array,
        )
    }
);

hooked!(
    cuArrayCreate,
    |handle: *mut CuArray, desc: *const CuArrayDescriptorV1| {
        // SAFETY: `desc` is null or the caller's valid descriptor.
        let shape = unsafe { ffi::input(desc) }.map(ArrayShape::from_2d_v1);
        create_array(
            &real::cuArrayCreate,
            shape,
            handle,
            // SAFETY: the caller's arguments, passed on.
            |real| unsafe { real(handle, desc) },
            destroy_array,
        )
    }
);

hooked!(
    cuArray3DCreate,
    |handle: *mut CuArray, desc: *const CuArray3DDescriptorV1| {
        // SAFETY: `desc` is null or the caller's valid descriptor.
        let shape = unsafe { ffi::input(desc) }.map(ArrayShape::from_3d_v1);
        create_array(
            &real::cuArray3DCreate,
            shape,
            handle,
            // SAFETY: the caller's arguments, passed on.
            |real| unsafe { real(handle, desc) },
            destroy_array,
        )
    }
);

hooked!(
    cuMipmappedArrayCreate,
    |handle: *mut CuArray, desc: *const CuArray3DDescriptor, levels: c_uint| {
        // SAFETY: `desc` is null or the caller's valid descriptor.
        let shape = unsafe { ffi::input(desc) }
            .map(|d| ArrayShape::from_3d(d, levels))
            .filter(|_| levels > 0);
        create_array(
            &real::cuMipmappedArrayCreate,
            shape,
            handle,
            // SAFETY: the caller's arguments, passed on.
            |real| unsafe { real(handle, desc, levels) },
            destroy_mipmapped,
        )
    }
);

hooked!(cuArrayDestroy, |array: CuArray| {
    // SAFETY: the caller's argument, passed on.
    free_of(
        &real::cuArrayDestroy,
        Kind::Array,
        array as u64,
        |real| unsafe { real(array) },
    )
});

hooked!(cuMipmappedArrayDestroy, |array: CuArray| {
    free_of(
        &real::cuMipmappedArrayDestroy,
        Kind::Array,
        array as u64,
        // SAFETY: the caller's argument, passed on.
        |real| unsafe { real(array) },
    )
});

table!(
    cuArrayCreate_v2,
    cuArray3DCreate_v2,
    cuArrayCreate,
    cuArray3DCreate,
    cuMipmappedArrayCreate,
    cuArrayDestroy,
    cuMipmappedArrayDestroy
);
