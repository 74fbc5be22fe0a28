//! Green contexts and the device resources they are made of (see `green`).

use std::ffi::{c_int, c_uint};

use super::{h, handle_ptr};
use crate::abi::*;
use crate::ffi::{self, Out};
use crate::green;

exports! {
    fn cuDeviceGetDevResource(
        device: CUdevice,
        resource: *mut DevResource,
        kind: c_uint,
    ) as cuDeviceGetDevResource since 12040 {
        let out = Out::new(resource)?;
        out.write(green::device_resource(device, kind)?);
        Ok(())
    }

    fn cuDevResourceGenerateDesc(
        desc: *mut Handle,
        resources: *mut DevResource,
        count: c_uint,
    ) as cuDevResourceGenerateDesc since 12040 {
        let out = Out::new(desc)?;
        let resources = ffi::slice(resources, count as usize)?;
        out.write(handle_ptr(green::generate_desc(resources)?));
        Ok(())
    }

    fn cuGreenCtxCreate(
        green_ctx: *mut Handle,
        desc: Handle,
        device: CUdevice,
        flags: c_uint,
    ) as cuGreenCtxCreate since 12040 {
        let out = Out::new(green_ctx)?;
        out.write(handle_ptr(green::create(h(desc), device, flags)?));
        Ok(())
    }

    fn cuGreenCtxDestroy(green_ctx: Handle) as cuGreenCtxDestroy since 12040 {
        green::destroy(h(green_ctx))
    }

    fn cuCtxFromGreenCtx(ctx: *mut Handle, green_ctx: Handle) as cuCtxFromGreenCtx since 12040 {
        let out = Out::new(ctx)?;
        out.write(handle_ptr(green::context_of(h(green_ctx))?));
        Ok(())
    }

    fn cuGreenCtxStreamCreate(
        stream: *mut Handle,
        green_ctx: Handle,
        flags: c_uint,
        priority: c_int,
    ) as cuGreenCtxStreamCreate since 12050 {
        let out = Out::new(stream)?;
        out.write(handle_ptr(green::stream_create(h(green_ctx), flags, priority)?));
        Ok(())
    }
}
