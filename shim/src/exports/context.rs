//! Contexts: primary contexts, created contexts, and the current-context stack.

use std::ffi::{c_int, c_uint, c_void};

use super::{h, handle_ptr};
use crate::abi::*;
use crate::context;
use crate::ffi::{self, write_optional, Out};
use crate::state;

exports! {
    fn cuDevicePrimaryCtxRetain(
        ctx: *mut Handle,
        dev: CUdevice,
    ) as cuDevicePrimaryCtxRetain since 7000 {
        let out = Out::new(ctx)?;
        out.write(handle_ptr(context::primary_retain(dev)?));
        Ok(())
    }

    fn cuDevicePrimaryCtxRelease(dev: CUdevice) as cuDevicePrimaryCtxRelease since 7000 {
        context::primary_release(dev)
    }

    fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) as cuDevicePrimaryCtxRelease since 11000 {
        context::primary_release(dev)
    }

    fn cuDevicePrimaryCtxReset(dev: CUdevice) as cuDevicePrimaryCtxReset since 7000 {
        context::primary_reset(dev)
    }

    fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) as cuDevicePrimaryCtxReset since 11000 {
        context::primary_reset(dev)
    }

    fn cuDevicePrimaryCtxSetFlags(
        dev: CUdevice,
        flags: c_uint,
    ) as cuDevicePrimaryCtxSetFlags since 7000 {
        context::primary_set_flags(dev, flags)
    }

    fn cuDevicePrimaryCtxSetFlags_v2(
        dev: CUdevice,
        flags: c_uint,
    ) as cuDevicePrimaryCtxSetFlags since 11000 {
        context::primary_set_flags(dev, flags)
    }

    fn cuDevicePrimaryCtxGetState(
        dev: CUdevice,
        flags: *mut c_uint,
        active: *mut c_int,
    ) as cuDevicePrimaryCtxGetState since 7000 {
        let (flags, active) = (Out::new(flags)?, Out::new(active)?);
        let (f, a) = context::primary_state(dev)?;
        flags.write(f);
        active.write(c_int::from(a));
        Ok(())
    }

    fn cuCtxCreate(ctx: *mut Handle, flags: c_uint, dev: CUdevice) as cuCtxCreate since 2000 {
        create_context(Out::new(ctx)?, flags, dev)
    }

    fn cuCtxCreate_v2(ctx: *mut Handle, flags: c_uint, dev: CUdevice) as cuCtxCreate since 3020 {
        create_context(Out::new(ctx)?, flags, dev)
    }

    /// Execution-affinity parameters are accepted and ignored.
    fn cuCtxCreate_v3(
        ctx: *mut Handle,
        params: *mut c_void,
        num_params: c_int,
        flags: c_uint,
        dev: CUdevice,
    ) as cuCtxCreate since 11040 {
        if num_params < 0 || (num_params > 0 && params.is_null()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        create_context(Out::new(ctx)?, flags, dev)
    }

    /// Execution-affinity parameters are accepted and ignored. CIG is not supported here
    /// (its device attributes are 0): "Context creation in CIG mode will fail with
    /// CUDA_ERROR_NOT_SUPPORTED if CIG is not supported".
    fn cuCtxCreate_v4(
        ctx: *mut Handle,
        params: *mut CtxCreateParams,
        flags: c_uint,
        dev: CUdevice,
    ) as cuCtxCreate since 12050 {
        let out = Out::new(ctx)?;
        if !params.is_null() && !ffi::read(params)?.cig_params.is_null() {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        create_context(out, flags, dev)
    }

    fn cuCtxDestroy(ctx: Handle) as cuCtxDestroy since 2000 {
        context::destroy(h(ctx))
    }

    fn cuCtxDestroy_v2(ctx: Handle) as cuCtxDestroy since 4000 {
        context::destroy(h(ctx))
    }

    /// Deprecated, still exported by the driver (PyCUDA uses it).
    fn cuCtxAttach(ctx: *mut Handle, flags: c_uint) as cuCtxAttach since 2000 {
        let out = Out::new(ctx)?;
        out.write(handle_ptr(context::attach(flags)?));
        Ok(())
    }

    fn cuCtxDetach(ctx: Handle) as cuCtxDetach since 2000 {
        context::detach(h(ctx))
    }

    fn cuCtxPushCurrent(ctx: Handle) as cuCtxPushCurrent since 2000 {
        context::push(h(ctx))
    }

    fn cuCtxPushCurrent_v2(ctx: Handle) as cuCtxPushCurrent since 4000 {
        context::push(h(ctx))
    }

    fn cuCtxPopCurrent(ctx: *mut Handle) as cuCtxPopCurrent since 2000 {
        pop_context(Out::optional(ctx))
    }

    fn cuCtxPopCurrent_v2(ctx: *mut Handle) as cuCtxPopCurrent since 4000 {
        pop_context(Out::optional(ctx))
    }

    fn cuCtxSetCurrent(ctx: Handle) as cuCtxSetCurrent since 4000 {
        context::set_current(h(ctx))
    }

    fn cuCtxGetCurrent(ctx: *mut Handle) as cuCtxGetCurrent since 4000 {
        Out::new(ctx)?.write(handle_ptr(context::current_handle().unwrap_or(0)));
        Ok(())
    }

    fn cuCtxGetDevice(dev: *mut CUdevice) as cuCtxGetDevice since 2000 {
        let out = Out::new(dev)?;
        let device = match context::current_device_unlocked() {
            Some(device) => device?,
            None => context::current_device(&state::lock())?,
        };
        out.write(device as CUdevice);
        Ok(())
    }

    /// A synchronisation: memory pools release what they keep above their thresholds.
    fn cuCtxSynchronize() as cuCtxSynchronize since 2000 {
        crate::pools::synchronize_current()
    }

    fn cuCtxGetApiVersion(ctx: Handle, version: *mut c_uint) as cuCtxGetApiVersion since 3020 {
        let out = Out::new(version)?;
        out.write(context::api_version(h(ctx))?);
        Ok(())
    }

    fn cuCtxGetFlags(flags: *mut c_uint) as cuCtxGetFlags since 7000 {
        let out = Out::new(flags)?;
        out.write(context::current(&state::lock())?.1.flags);
        Ok(())
    }

    fn cuCtxGetId(ctx: Handle, id: *mut u64) as cuCtxGetId since 12000 {
        let out = Out::new(id)?;
        out.write(context::id(h(ctx))?);
        Ok(())
    }

    fn cuCtxGetStreamPriorityRange(
        least: *mut c_int,
        greatest: *mut c_int,
    ) as cuCtxGetStreamPriorityRange since 5050 {
        let (least, greatest) = (Out::optional(least), Out::optional(greatest));
        context::current(&state::lock())?;
        write_optional(least, 0);
        write_optional(greatest, -5);
        Ok(())
    }
}

fn create_context(out: Out<Handle>, flags: c_uint, dev: CUdevice) -> Result<(), CUresult> {
    out.write(handle_ptr(context::create(dev, flags)?));
    Ok(())
}

fn pop_context(out: Option<Out<Handle>>) -> Result<(), CUresult> {
    write_optional(out, handle_ptr(context::pop()?));
    Ok(())
}
