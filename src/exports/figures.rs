//! The memory figures a program sees: the driver's own, with the quota in place of the
//! device's memory (see `Engine::memory_info` and `Engine::total_memory`).

use super::{hook, hooked, table};
use crate::cuda_abi::CuDevice;
use crate::ffi::Out;
use crate::in_hook;
use crate::real_driver as real;
use std::ffi::c_uint;

hooked!(cuMemGetInfo_v2, |free: *mut usize, total: *mut usize| {
    hook(
        &real::cuMemGetInfo_v2,
        |real, e| {
            // SAFETY: the caller's arguments, passed on; both are its out-pointers.
            let rc = in_hook::driver(|| unsafe { real(free, total) });
            // SAFETY: as above.
            let outs = unsafe { (Out::new(free), Out::new(total)) };
            if let (true, (Some(free), Some(total))) = (rc.is_ok(), outs) {
                let (f, t) = e.memory_info(
                    real::cuMemGetInfo_v2.name(),
                    free.get() as u64,
                    total.get() as u64,
                );
                // A group that could not take this GPU fails the call that found it out.
                if let Err(rc) = e.check_config() {
                    return rc;
                }
                free.set(f as usize);
                total.set(t as usize);
            }
            rc
        },
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(free, total) },
    )
});

hooked!(cuMemGetInfo, |free: *mut c_uint, total: *mut c_uint| {
    hook(
        &real::cuMemGetInfo,
        |real, e| {
            // SAFETY: the caller's arguments, passed on; both are its out-pointers.
            let rc = in_hook::driver(|| unsafe { real(free, total) });
            // SAFETY: as above.
            let outs = unsafe { (Out::new(free), Out::new(total)) };
            if let (true, (Some(free), Some(total))) = (rc.is_ok(), outs) {
                // Never more than the driver said, so the values still fit in 32 bits.
                let (f, t) = e.memory_info(
                    real::cuMemGetInfo.name(),
                    free.get().into(),
                    total.get().into(),
                );
                if let Err(rc) = e.check_config() {
                    return rc;
                }
                free.set(f as c_uint);
                total.set(t as c_uint);
            }
            rc
        },
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(free, total) },
    )
});

hooked!(
    cuDeviceTotalMem_v2,
    |bytes: *mut usize, device: CuDevice| {
        hook(
            &real::cuDeviceTotalMem_v2,
            |real, e| {
                // SAFETY: the caller's arguments, passed on; `bytes` is its out-pointer.
                let rc = in_hook::driver(|| unsafe { real(bytes, device) });
                // SAFETY: as above.
                let out = unsafe { Out::new(bytes) };
                if let (true, Some(out), Ok(device)) = (rc.is_ok(), out, u32::try_from(device)) {
                    let told = e.total_memory(device, out.get() as u64);
                    if let Err(rc) = e.check_config() {
                        return rc;
                    }
                    out.set(told as usize);
                }
                rc
            },
            // SAFETY: the caller's arguments, passed on.
            |real| unsafe { real(bytes, device) },
        )
    }
);

hooked!(cuDeviceTotalMem, |bytes: *mut c_uint, device: CuDevice| {
    hook(
        &real::cuDeviceTotalMem,
        |real, e| {
            // SAFETY: the caller's arguments, passed on; `bytes` is its out-pointer.
            let rc = in_hook::driver(|| unsafe { real(bytes, device) });
            // SAFETY: as above.
            let out = unsafe { Out::new(bytes) };
            if let (true, Some(out), Ok(device)) = (rc.is_ok(), out, u32::try_from(device)) {
                let told = e.total_memory(device, out.get().into());
                if let Err(rc) = e.check_config() {
                    return rc;
                }
                out.set(told as c_uint);
            }
            rc
        },
        // SAFETY: the caller's arguments, passed on.
        |real| unsafe { real(bytes, device) },
    )
});

table!(
    cuMemGetInfo_v2,
    cuMemGetInfo,
    cuDeviceTotalMem_v2,
    cuDeviceTotalMem
);
