//! Every function the library exports, each a thin C-ABI wrapper around the module that
//! implements it.
//!
//! Each body runs inside [`entry`] (fault injection, the `cuInit` check, panics caught). This
//! is the only place where C's pointer arguments are turned into Rust values: output pointers
//! become [`Out`]s and inputs are read through the [`ffi`] helpers, both of which reject null.
//! Beyond that, every pointer is trusted to follow the CUDA driver API's documented contract,
//! which is the safety requirement of every function here.

#![allow(non_snake_case)]
// The safety contract of every function here is the driver API's documentation of its
// parameters; the bodies are the unsafe context that relies on it (see above).
#![allow(clippy::missing_safety_doc)]
#![allow(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr;

use crate::abi::*;
use crate::context;
use crate::copy::{self, Side};
use crate::ffi::{self, entry, write_optional, Needs, Out};
use crate::memory::{self, Placement};
use crate::pools::{self, AttributeValue};
use crate::proc_address::{self, Lookup};
use crate::state;
use crate::streams;
use crate::vmm;
use crate::{config, devices, errors, faults};

/// A handle's value.
fn h(handle: Handle) -> usize {
    handle as usize
}

/// A handle value as the pointer type C sees.
fn handle_ptr(handle: usize) -> Handle {
    ptr::without_provenance_mut(handle)
}

/// A 32-bit device pointer or size, for the legacy entry points.
fn to_u32<T: TryInto<u32>>(value: T) -> Result<u32, CUresult> {
    value.try_into().map_err(|_| CUDA_ERROR_INVALID_VALUE)
}

// ---------------------------------------------------------------------------------------
// Initialization, versions, errors, entry points
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    entry("cuInit", Needs::Nothing, || state::initialize(flags))
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    entry("cuDriverGetVersion", Needs::Nothing, || {
        Out::new(version)?.write(config::driver_version());
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, text: *mut *const c_char) -> CUresult {
    entry("cuGetErrorName", Needs::Nothing, || {
        let out = Out::new(text)?;
        let name = errors::name(error);
        out.write(name.map_or(ptr::null(), |s| s.as_ptr()));
        name.map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, text: *mut *const c_char) -> CUresult {
    entry("cuGetErrorString", Needs::Nothing, || {
        let out = Out::new(text)?;
        let description = errors::description(error);
        out.write(description.map_or(ptr::null(), |s| s.as_ptr()));
        description.map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE)
    })
}

/// NVIDIA's private export tables are not imitated.
#[no_mangle]
pub unsafe extern "C" fn cuGetExportTable(
    _table: *mut *const c_void,
    _table_id: *const Uuid,
) -> CUresult {
    entry("cuGetExportTable", Needs::Nothing, || {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    })
}

unsafe fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> Result<(), CUresult> {
    let status = Out::optional(status);
    let symbol = ffi::c_str(symbol)?;
    let pfn = Out::new(pfn)?;
    let (address, code, result) = match proc_address::lookup(symbol, version, flags) {
        Lookup::Found(row) => (row.address(), 0, Ok(())),
        Lookup::NotFound => (ptr::null_mut(), 1, Err(CUDA_ERROR_NOT_FOUND)),
        Lookup::VersionNotSufficient => (ptr::null_mut(), 2, Err(CUDA_ERROR_NOT_FOUND)),
    };
    pfn.write(address);
    write_optional(status, code);
    result
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CUresult {
    entry("cuGetProcAddress", Needs::Nothing, || {
        get_proc_address(symbol, pfn, cuda_version, flags, ptr::null_mut())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut c_int,
) -> CUresult {
    entry("cuGetProcAddress_v2", Needs::Nothing, || {
        get_proc_address(symbol, pfn, cuda_version, flags, symbol_status)
    })
}

// ---------------------------------------------------------------------------------------
// Devices
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    entry("cuDeviceGet", Needs::Init, || {
        let out = Out::new(device)?;
        state::device_index(ordinal)?;
        out.write(ordinal);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    entry("cuDeviceGetCount", Needs::Init, || {
        Out::new(count)?.write(state::lock().devices.len() as c_int);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    entry("cuDeviceGetName", Needs::Init, || {
        let index = state::device_index(dev)?;
        ffi::write_c_string(name, len, &devices::name(index))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut Uuid, dev: CUdevice) -> CUresult {
    entry("cuDeviceGetUuid", Needs::Init, || {
        let out = Out::new(uuid)?;
        let bytes = devices::uuid(state::device_index(dev)?);
        out.write(Uuid { bytes });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut Uuid, dev: CUdevice) -> CUresult {
    entry("cuDeviceGetUuid_v2", Needs::Init, || {
        let out = Out::new(uuid)?;
        let bytes = devices::uuid(state::device_index(dev)?);
        out.write(Uuid { bytes });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    entry("cuDeviceTotalMem_v2", Needs::Init, || {
        let out = Out::new(bytes)?;
        out.write(state::lock().device(dev)?.total as usize);
        Ok(())
    })
}

/// Legacy: the total clamped to 32 bits.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, dev: CUdevice) -> CUresult {
    entry("cuDeviceTotalMem", Needs::Init, || {
        let out = Out::new(bytes)?;
        let total = state::lock().device(dev)?.total;
        out.write(total.min(u32::MAX as u64) as c_uint);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    dev: CUdevice,
) -> CUresult {
    entry("cuDeviceGetAttribute", Needs::Init, || {
        let out = Out::new(value)?;
        out.write(devices::attribute(attribute, state::device_index(dev)?)?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceComputeCapability(
    major: *mut c_int,
    minor: *mut c_int,
    dev: CUdevice,
) -> CUresult {
    entry("cuDeviceComputeCapability", Needs::Init, || {
        let (major, minor) = (Out::new(major)?, Out::new(minor)?);
        let index = state::device_index(dev)?;
        major.write(devices::attribute(75, index)?);
        minor.write(devices::attribute(76, index)?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(
    bus_id: *mut c_char,
    len: c_int,
    dev: CUdevice,
) -> CUresult {
    entry("cuDeviceGetPCIBusId", Needs::Init, || {
        let index = state::device_index(dev)?;
        ffi::write_c_string(bus_id, len, &devices::pci_bus_id(index))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetByPCIBusId(
    dev: *mut CUdevice,
    bus_id: *const c_char,
) -> CUresult {
    entry("cuDeviceGetByPCIBusId", Needs::Init, || {
        let out = Out::new(dev)?;
        let index = devices::parse_pci_bus_id(ffi::c_str(bus_id)?)
            .and_then(|i| c_int::try_from(i).ok())
            .ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        state::device_index(index)?;
        out.write(index);
        Ok(())
    })
}

/// Peer access is never possible between simulated devices.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(
    can_access: *mut c_int,
    dev: CUdevice,
    peer: CUdevice,
) -> CUresult {
    entry("cuDeviceCanAccessPeer", Needs::Init, || {
        let out = Out::new(can_access)?;
        state::device_index(dev)?;
        state::device_index(peer)?;
        out.write(0);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut Handle, dev: CUdevice) -> CUresult {
    entry("cuDeviceGetDefaultMemPool", Needs::Init, || {
        let out = Out::new(pool)?;
        out.write(handle_ptr(pools::default_pool(dev)?));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut Handle, dev: CUdevice) -> CUresult {
    entry("cuDeviceGetMemPool", Needs::Init, || {
        let out = Out::new(pool)?;
        out.write(handle_ptr(pools::current_pool(dev)?));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceSetMemPool(dev: CUdevice, pool: Handle) -> CUresult {
    entry("cuDeviceSetMemPool", Needs::Init, || {
        pools::set_current_pool(dev, h(pool))
    })
}

// ---------------------------------------------------------------------------------------
// Primary contexts
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut Handle, dev: CUdevice) -> CUresult {
    entry("cuDevicePrimaryCtxRetain", Needs::Init, || {
        let out = Out::new(ctx)?;
        out.write(handle_ptr(context::primary_retain(dev)?));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    entry("cuDevicePrimaryCtxRelease", Needs::Init, || {
        context::primary_release(dev)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    entry("cuDevicePrimaryCtxRelease_v2", Needs::Init, || {
        context::primary_release(dev)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset(dev: CUdevice) -> CUresult {
    entry("cuDevicePrimaryCtxReset", Needs::Init, || {
        context::primary_reset(dev)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CUresult {
    entry("cuDevicePrimaryCtxReset_v2", Needs::Init, || {
        context::primary_reset(dev)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags(dev: CUdevice, flags: c_uint) -> CUresult {
    entry("cuDevicePrimaryCtxSetFlags", Needs::Init, || {
        context::primary_set_flags(dev, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: c_uint) -> CUresult {
    entry("cuDevicePrimaryCtxSetFlags_v2", Needs::Init, || {
        context::primary_set_flags(dev, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    entry("cuDevicePrimaryCtxGetState", Needs::Init, || {
        let (flags, active) = (Out::new(flags)?, Out::new(active)?);
        let (f, a) = context::primary_state(dev)?;
        flags.write(f);
        active.write(c_int::from(a));
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Contexts
// ---------------------------------------------------------------------------------------

unsafe fn create_context(ctx: *mut Handle, flags: c_uint, dev: CUdevice) -> Result<(), CUresult> {
    let out = Out::new(ctx)?;
    out.write(handle_ptr(context::create(dev, flags)?));
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate(ctx: *mut Handle, flags: c_uint, dev: CUdevice) -> CUresult {
    entry("cuCtxCreate", Needs::Init, || {
        create_context(ctx, flags, dev)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    ctx: *mut Handle,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    entry("cuCtxCreate_v2", Needs::Init, || {
        create_context(ctx, flags, dev)
    })
}

/// Execution-affinity parameters are accepted and ignored.
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    ctx: *mut Handle,
    params: *mut c_void,
    num_params: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    entry("cuCtxCreate_v3", Needs::Init, || {
        if num_params < 0 || (num_params > 0 && params.is_null()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        create_context(ctx, flags, dev)
    })
}

/// Creation parameters (affinity, CIG) are accepted and ignored.
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v4(
    ctx: *mut Handle,
    _params: *mut c_void,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    entry("cuCtxCreate_v4", Needs::Init, || {
        create_context(ctx, flags, dev)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy(ctx: Handle) -> CUresult {
    entry("cuCtxDestroy", Needs::Init, || context::destroy(h(ctx)))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: Handle) -> CUresult {
    entry("cuCtxDestroy_v2", Needs::Init, || context::destroy(h(ctx)))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent(ctx: Handle) -> CUresult {
    entry("cuCtxPushCurrent", Needs::Init, || context::push(h(ctx)))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: Handle) -> CUresult {
    entry("cuCtxPushCurrent_v2", Needs::Init, || context::push(h(ctx)))
}

unsafe fn pop_context(ctx: *mut Handle) -> Result<(), CUresult> {
    let out = Out::optional(ctx);
    write_optional(out, handle_ptr(context::pop()?));
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent(ctx: *mut Handle) -> CUresult {
    entry("cuCtxPopCurrent", Needs::Init, || pop_context(ctx))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(ctx: *mut Handle) -> CUresult {
    entry("cuCtxPopCurrent_v2", Needs::Init, || pop_context(ctx))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: Handle) -> CUresult {
    entry("cuCtxSetCurrent", Needs::Init, || {
        context::set_current(h(ctx))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut Handle) -> CUresult {
    entry("cuCtxGetCurrent", Needs::Init, || {
        Out::new(ctx)?.write(handle_ptr(context::current_handle().unwrap_or(0)));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(dev: *mut CUdevice) -> CUresult {
    entry("cuCtxGetDevice", Needs::Init, || {
        let out = Out::new(dev)?;
        let device = match context::current_device_unlocked() {
            Some(device) => device?,
            None => context::current_device(&state::lock())?,
        };
        out.write(device as CUdevice);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    entry("cuCtxSynchronize", Needs::Init, || {
        context::current(&state::lock()).map(|_| ())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: Handle, version: *mut c_uint) -> CUresult {
    entry("cuCtxGetApiVersion", Needs::Init, || {
        let out = Out::new(version)?;
        out.write(context::api_version(h(ctx))?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    entry("cuCtxGetFlags", Needs::Init, || {
        let out = Out::new(flags)?;
        out.write(context::current(&state::lock())?.1.flags);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetId(ctx: Handle, id: *mut u64) -> CUresult {
    entry("cuCtxGetId", Needs::Init, || {
        let out = Out::new(id)?;
        out.write(context::id(h(ctx))?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CUresult {
    entry("cuCtxGetStreamPriorityRange", Needs::Init, || {
        let (least, greatest) = (Out::optional(least), Out::optional(greatest));
        context::current(&state::lock())?;
        write_optional(least, 0);
        write_optional(greatest, -5);
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut Handle, flags: c_uint) -> CUresult {
    entry("cuStreamCreate", Needs::Init, || {
        let out = Out::new(stream)?;
        out.write(handle_ptr(streams::create(flags, 0)?));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    stream: *mut Handle,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    entry("cuStreamCreateWithPriority", Needs::Init, || {
        let out = Out::new(stream)?;
        out.write(handle_ptr(streams::create(flags, priority)?));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy(stream: Handle) -> CUresult {
    entry("cuStreamDestroy", Needs::Init, || {
        streams::destroy(h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: Handle) -> CUresult {
    entry("cuStreamDestroy_v2", Needs::Init, || {
        streams::destroy(h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: Handle) -> CUresult {
    entry("cuStreamSynchronize", Needs::Init, || {
        streams::check(h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize_ptsz(stream: Handle) -> CUresult {
    entry("cuStreamSynchronize_ptsz", Needs::Init, || {
        streams::check(h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(stream: Handle) -> CUresult {
    entry("cuStreamQuery", Needs::Init, || streams::check(h(stream)))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery_ptsz(stream: Handle) -> CUresult {
    entry("cuStreamQuery_ptsz", Needs::Init, || {
        streams::check(h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    stream: Handle,
    event: Handle,
    _flags: c_uint,
) -> CUresult {
    entry("cuStreamWaitEvent", Needs::Init, || {
        streams::check_event_and_stream(h(event), h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent_ptsz(
    stream: Handle,
    event: Handle,
    _flags: c_uint,
) -> CUresult {
    entry("cuStreamWaitEvent_ptsz", Needs::Init, || {
        streams::check_event_and_stream(h(event), h(stream))
    })
}

unsafe fn stream_flags(stream: Handle, flags: *mut c_uint) -> Result<(), CUresult> {
    let out = Out::new(flags)?;
    out.write(streams::properties(h(stream))?.0);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags(stream: Handle, flags: *mut c_uint) -> CUresult {
    entry("cuStreamGetFlags", Needs::Init, || {
        stream_flags(stream, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags_ptsz(stream: Handle, flags: *mut c_uint) -> CUresult {
    entry("cuStreamGetFlags_ptsz", Needs::Init, || {
        stream_flags(stream, flags)
    })
}

unsafe fn stream_priority(stream: Handle, priority: *mut c_int) -> Result<(), CUresult> {
    let out = Out::new(priority)?;
    out.write(streams::properties(h(stream))?.1);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority(stream: Handle, priority: *mut c_int) -> CUresult {
    entry("cuStreamGetPriority", Needs::Init, || {
        stream_priority(stream, priority)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority_ptsz(
    stream: Handle,
    priority: *mut c_int,
) -> CUresult {
    entry("cuStreamGetPriority_ptsz", Needs::Init, || {
        stream_priority(stream, priority)
    })
}

/// Nothing is ever captured: every stream reports `CU_STREAM_CAPTURE_STATUS_NONE`.
unsafe fn stream_is_capturing(stream: Handle, status: *mut c_int) -> Result<(), CUresult> {
    let out = Out::new(status)?;
    streams::check(h(stream))?;
    out.write(0);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: Handle, status: *mut c_int) -> CUresult {
    entry("cuStreamIsCapturing", Needs::Init, || {
        stream_is_capturing(stream, status)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing_ptsz(stream: Handle, status: *mut c_int) -> CUresult {
    entry("cuStreamIsCapturing_ptsz", Needs::Init, || {
        stream_is_capturing(stream, status)
    })
}

// ---------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut Handle, flags: c_uint) -> CUresult {
    entry("cuEventCreate", Needs::Init, || {
        let out = Out::new(event)?;
        out.write(handle_ptr(streams::create_event(flags)?));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: Handle, stream: Handle) -> CUresult {
    entry("cuEventRecord", Needs::Init, || {
        streams::check_event_and_stream(h(event), h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord_ptsz(event: Handle, stream: Handle) -> CUresult {
    entry("cuEventRecord_ptsz", Needs::Init, || {
        streams::check_event_and_stream(h(event), h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags(
    event: Handle,
    stream: Handle,
    _flags: c_uint,
) -> CUresult {
    entry("cuEventRecordWithFlags", Needs::Init, || {
        streams::check_event_and_stream(h(event), h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags_ptsz(
    event: Handle,
    stream: Handle,
    _flags: c_uint,
) -> CUresult {
    entry("cuEventRecordWithFlags_ptsz", Needs::Init, || {
        streams::check_event_and_stream(h(event), h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(event: Handle) -> CUresult {
    entry("cuEventQuery", Needs::Init, || {
        streams::check_event(h(event))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(event: Handle) -> CUresult {
    entry("cuEventSynchronize", Needs::Init, || {
        streams::check_event(h(event))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy(event: Handle) -> CUresult {
    entry("cuEventDestroy", Needs::Init, || {
        streams::destroy_event(h(event))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(event: Handle) -> CUresult {
    entry("cuEventDestroy_v2", Needs::Init, || {
        streams::destroy_event(h(event))
    })
}

/// Work completes as it is issued, so no time ever passes between two events.
unsafe fn elapsed_time(ms: *mut f32, start: Handle, end: Handle) -> Result<(), CUresult> {
    let out = Out::new(ms)?;
    streams::check_event(h(start))?;
    streams::check_event(h(end))?;
    out.write(0.0);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: Handle, end: Handle) -> CUresult {
    entry("cuEventElapsedTime", Needs::Init, || {
        elapsed_time(ms, start, end)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut f32,
    start: Handle,
    end: Handle,
) -> CUresult {
    entry("cuEventElapsedTime_v2", Needs::Init, || {
        elapsed_time(ms, start, end)
    })
}

// ---------------------------------------------------------------------------------------
// Linear device memory
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    entry("cuMemGetInfo_v2", Needs::Init, || {
        let (free, total) = (Out::optional(free), Out::optional(total));
        let (f, t) = memory::info()?;
        write_optional(free, f as usize);
        write_optional(total, t as usize);
        Ok(())
    })
}

/// Legacy: both numbers clamped to 32 bits.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> CUresult {
    entry("cuMemGetInfo", Needs::Init, || {
        let (free, total) = (Out::optional(free), Out::optional(total));
        let (f, t) = memory::info()?;
        let clamp = |n: u64| n.min(u32::MAX as u64) as c_uint;
        write_optional(free, clamp(f));
        write_optional(total, clamp(t));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    entry("cuMemAlloc_v2", Needs::Init, || {
        let out = Out::new(dptr)?;
        out.write(memory::allocate_current(bytes, Placement::Anywhere)?);
        Ok(())
    })
}

/// Legacy: a 32-bit device pointer.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc(dptr: *mut CUdeviceptrV1, bytes: c_uint) -> CUresult {
    entry("cuMemAlloc", Needs::Init, || {
        let out = Out::new(dptr)?;
        let p = memory::allocate_current(bytes as usize, Placement::Low32)?;
        out.write(to_u32(p)?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    entry("cuMemFree_v2", Needs::Init, || memory::free(dptr, true))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree(dptr: CUdeviceptrV1) -> CUresult {
    entry("cuMemFree", Needs::Init, || memory::free(dptr.into(), true))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element_size: c_uint,
) -> CUresult {
    entry("cuMemAllocPitch_v2", Needs::Init, || {
        let (out, pitch_out) = (Out::new(dptr)?, Out::new(pitch)?);
        let (pitch, bytes) = memory::pitch_layout(width, height, element_size)?;
        out.write(memory::allocate_current(bytes, Placement::Anywhere)?);
        pitch_out.write(pitch);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch(
    dptr: *mut CUdeviceptrV1,
    pitch: *mut c_uint,
    width: c_uint,
    height: c_uint,
    element_size: c_uint,
) -> CUresult {
    entry("cuMemAllocPitch", Needs::Init, || {
        let (out, pitch_out) = (Out::new(dptr)?, Out::new(pitch)?);
        let (pitch, bytes) = memory::pitch_layout(width as usize, height as usize, element_size)?;
        let pitch = to_u32(pitch)?;
        out.write(to_u32(memory::allocate_current(bytes, Placement::Low32)?)?);
        pitch_out.write(pitch);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    entry("cuMemAllocManaged", Needs::Init, || {
        let out = Out::new(dptr)?;
        out.write(memory::allocate_managed(bytes, flags)?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut CUdeviceptr,
    size: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    entry("cuMemGetAddressRange_v2", Needs::Init, || {
        let (base, size) = (Out::optional(base), Out::optional(size));
        let (b, s) = memory::address_range(dptr)?;
        write_optional(base, b);
        write_optional(size, s as usize);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange(
    base: *mut CUdeviceptrV1,
    size: *mut c_uint,
    dptr: CUdeviceptrV1,
) -> CUresult {
    entry("cuMemGetAddressRange", Needs::Init, || {
        let (base, size) = (Out::optional(base), Out::optional(size));
        let (b, s) = memory::address_range(dptr.into())?;
        write_optional(base, to_u32(b)?);
        write_optional(size, to_u32(s)?);
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Page-locked host memory
// ---------------------------------------------------------------------------------------

unsafe fn host_alloc(pp: *mut *mut c_void, bytes: usize, flags: c_uint) -> Result<(), CUresult> {
    let out = Out::new(pp)?;
    out.write(memory::host_allocate(bytes, flags)? as *mut c_void);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    entry("cuMemHostAlloc", Needs::Init, || {
        host_alloc(pp, bytes, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytes: usize) -> CUresult {
    entry("cuMemAllocHost_v2", Needs::Init, || {
        host_alloc(pp, bytes, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost(pp: *mut *mut c_void, bytes: c_uint) -> CUresult {
    entry("cuMemAllocHost", Needs::Init, || {
        host_alloc(pp, bytes as usize, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    entry("cuMemFreeHost", Needs::Init, || {
        memory::host_free(p as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    dptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    entry("cuMemHostGetDevicePointer_v2", Needs::Init, || {
        let out = Out::new(dptr)?;
        out.write(memory::host_device_pointer(p as usize, flags)?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer(
    dptr: *mut CUdeviceptrV1,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    entry("cuMemHostGetDevicePointer", Needs::Init, || {
        let out = Out::new(dptr)?;
        out.write(to_u32(memory::host_device_pointer(p as usize, flags)?)?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetFlags(flags: *mut c_uint, p: *mut c_void) -> CUresult {
    entry("cuMemHostGetFlags", Needs::Init, || {
        let out = Out::new(flags)?;
        out.write(memory::host_flags(p as usize)?);
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Copies and memsets (stream 0 for the synchronous forms)
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) -> CUresult {
    entry("cuMemcpy", Needs::Init, || {
        copy::copy(dst, Side::Unified, src, Side::Unified, bytes, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpy_ptds(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    entry("cuMemcpy_ptds", Needs::Init, || {
        copy::copy(dst, Side::Unified, src, Side::Unified, bytes, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAsync(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyAsync", Needs::Init, || {
        copy::copy(dst, Side::Unified, src, Side::Unified, bytes, h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAsync_ptsz(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyAsync_ptsz", Needs::Init, || {
        copy::copy(dst, Side::Unified, src, Side::Unified, bytes, h(stream))
    })
}

fn htod(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: Handle,
) -> Result<(), CUresult> {
    copy::copy(
        dst,
        Side::Device,
        copy::host(src),
        Side::Host,
        bytes,
        h(stream),
    )
}

fn dtoh(dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: Handle) -> Result<(), CUresult> {
    copy::copy(
        copy::host(dst),
        Side::Host,
        src,
        Side::Device,
        bytes,
        h(stream),
    )
}

fn dtod(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: Handle) -> Result<(), CUresult> {
    copy::copy(dst, Side::Device, src, Side::Device, bytes, h(stream))
}

const SYNC: Handle = ptr::null_mut();

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> CUresult {
    entry("cuMemcpyHtoD_v2", Needs::Init, || {
        htod(dst, src, bytes, SYNC)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2_ptds(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> CUresult {
    entry("cuMemcpyHtoD_v2_ptds", Needs::Init, || {
        htod(dst, src, bytes, SYNC)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD(
    dst: CUdeviceptrV1,
    src: *const c_void,
    bytes: c_uint,
) -> CUresult {
    entry("cuMemcpyHtoD", Needs::Init, || {
        htod(dst.into(), src, bytes as usize, SYNC)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    entry("cuMemcpyDtoH_v2", Needs::Init, || {
        dtoh(dst, src, bytes, SYNC)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2_ptds(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    entry("cuMemcpyDtoH_v2_ptds", Needs::Init, || {
        dtoh(dst, src, bytes, SYNC)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH(
    dst: *mut c_void,
    src: CUdeviceptrV1,
    bytes: c_uint,
) -> CUresult {
    entry("cuMemcpyDtoH", Needs::Init, || {
        dtoh(dst, src.into(), bytes as usize, SYNC)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    entry("cuMemcpyDtoD_v2", Needs::Init, || {
        dtod(dst, src, bytes, SYNC)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2_ptds(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    entry("cuMemcpyDtoD_v2_ptds", Needs::Init, || {
        dtod(dst, src, bytes, SYNC)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD(
    dst: CUdeviceptrV1,
    src: CUdeviceptrV1,
    bytes: c_uint,
) -> CUresult {
    entry("cuMemcpyDtoD", Needs::Init, || {
        dtod(dst.into(), src.into(), bytes as usize, SYNC)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyHtoDAsync_v2", Needs::Init, || {
        htod(dst, src, bytes, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2_ptsz(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyHtoDAsync_v2_ptsz", Needs::Init, || {
        htod(dst, src, bytes, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync(
    dst: CUdeviceptrV1,
    src: *const c_void,
    bytes: c_uint,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyHtoDAsync", Needs::Init, || {
        htod(dst.into(), src, bytes as usize, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyDtoHAsync_v2", Needs::Init, || {
        dtoh(dst, src, bytes, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2_ptsz(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyDtoHAsync_v2_ptsz", Needs::Init, || {
        dtoh(dst, src, bytes, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync(
    dst: *mut c_void,
    src: CUdeviceptrV1,
    bytes: c_uint,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyDtoHAsync", Needs::Init, || {
        dtoh(dst, src.into(), bytes as usize, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyDtoDAsync_v2", Needs::Init, || {
        dtod(dst, src, bytes, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2_ptsz(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyDtoDAsync_v2_ptsz", Needs::Init, || {
        dtod(dst, src, bytes, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync(
    dst: CUdeviceptrV1,
    src: CUdeviceptrV1,
    bytes: c_uint,
    stream: Handle,
) -> CUresult {
    entry("cuMemcpyDtoDAsync", Needs::Init, || {
        dtod(dst.into(), src.into(), bytes as usize, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, value: u8, count: usize) -> CUresult {
    entry("cuMemsetD8_v2", Needs::Init, || {
        copy::memset(dst, value.into(), 1, count, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2_ptds(dst: CUdeviceptr, value: u8, count: usize) -> CUresult {
    entry("cuMemsetD8_v2_ptds", Needs::Init, || {
        copy::memset(dst, value.into(), 1, count, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8(dst: CUdeviceptrV1, value: u8, count: c_uint) -> CUresult {
    entry("cuMemsetD8", Needs::Init, || {
        copy::memset(dst.into(), value.into(), 1, count as usize, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16_v2(dst: CUdeviceptr, value: u16, count: usize) -> CUresult {
    entry("cuMemsetD16_v2", Needs::Init, || {
        copy::memset(dst, value.into(), 2, count, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16_v2_ptds(
    dst: CUdeviceptr,
    value: u16,
    count: usize,
) -> CUresult {
    entry("cuMemsetD16_v2_ptds", Needs::Init, || {
        copy::memset(dst, value.into(), 2, count, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16(dst: CUdeviceptrV1, value: u16, count: c_uint) -> CUresult {
    entry("cuMemsetD16", Needs::Init, || {
        copy::memset(dst.into(), value.into(), 2, count as usize, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: CUdeviceptr, value: u32, count: usize) -> CUresult {
    entry("cuMemsetD32_v2", Needs::Init, || {
        copy::memset(dst, value, 4, count, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32_v2_ptds(
    dst: CUdeviceptr,
    value: u32,
    count: usize,
) -> CUresult {
    entry("cuMemsetD32_v2_ptds", Needs::Init, || {
        copy::memset(dst, value, 4, count, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32(dst: CUdeviceptrV1, value: u32, count: c_uint) -> CUresult {
    entry("cuMemsetD32", Needs::Init, || {
        copy::memset(dst.into(), value, 4, count as usize, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    value: u8,
    count: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemsetD8Async", Needs::Init, || {
        copy::memset(dst, value.into(), 1, count, h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async_ptsz(
    dst: CUdeviceptr,
    value: u8,
    count: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemsetD8Async_ptsz", Needs::Init, || {
        copy::memset(dst, value.into(), 1, count, h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16Async(
    dst: CUdeviceptr,
    value: u16,
    count: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemsetD16Async", Needs::Init, || {
        copy::memset(dst, value.into(), 2, count, h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16Async_ptsz(
    dst: CUdeviceptr,
    value: u16,
    count: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemsetD16Async_ptsz", Needs::Init, || {
        copy::memset(dst, value.into(), 2, count, h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: CUdeviceptr,
    value: u32,
    count: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemsetD32Async", Needs::Init, || {
        copy::memset(dst, value, 4, count, h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async_ptsz(
    dst: CUdeviceptr,
    value: u32,
    count: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemsetD32Async_ptsz", Needs::Init, || {
        copy::memset(dst, value, 4, count, h(stream))
    })
}

// ---------------------------------------------------------------------------------------
// Stream-ordered allocation and memory pools
// ---------------------------------------------------------------------------------------

unsafe fn alloc_async(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> Result<(), CUresult> {
    let out = Out::new(dptr)?;
    out.write(pools::allocate_async(bytes, h(stream))?);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemAllocAsync", Needs::Init, || {
        alloc_async(dptr, bytes, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    entry("cuMemAllocAsync_ptsz", Needs::Init, || {
        alloc_async(dptr, bytes, stream)
    })
}

unsafe fn alloc_from_pool(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: Handle,
    stream: Handle,
) -> Result<(), CUresult> {
    let out = Out::new(dptr)?;
    out.write(pools::allocate_from_pool(bytes, h(pool), h(stream))?);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: Handle,
    stream: Handle,
) -> CUresult {
    entry("cuMemAllocFromPoolAsync", Needs::Init, || {
        alloc_from_pool(dptr, bytes, pool, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: Handle,
    stream: Handle,
) -> CUresult {
    entry("cuMemAllocFromPoolAsync_ptsz", Needs::Init, || {
        alloc_from_pool(dptr, bytes, pool, stream)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: Handle) -> CUresult {
    entry("cuMemFreeAsync", Needs::Init, || {
        pools::free_async(dptr, h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, stream: Handle) -> CUresult {
    entry("cuMemFreeAsync_ptsz", Needs::Init, || {
        pools::free_async(dptr, h(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut Handle,
    props: *const MemPoolPropsHead,
) -> CUresult {
    entry("cuMemPoolCreate", Needs::Init, || {
        let out = Out::new(pool)?;
        out.write(handle_ptr(pools::create(&ffi::read(props)?)?));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: Handle) -> CUresult {
    entry("cuMemPoolDestroy", Needs::Init, || pools::destroy(h(pool)))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: Handle,
    attribute: c_int,
    value: *mut c_void,
) -> CUresult {
    entry("cuMemPoolSetAttribute", Needs::Init, || {
        let value = if pools::attribute_is_int(attribute)? {
            AttributeValue::Int(ffi::read(value.cast::<c_int>())?)
        } else {
            AttributeValue::U64(ffi::read(value.cast::<u64>())?)
        };
        pools::set_attribute(h(pool), attribute, value)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: Handle,
    attribute: c_int,
    value: *mut c_void,
) -> CUresult {
    entry("cuMemPoolGetAttribute", Needs::Init, || {
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
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: Handle, _min_bytes_to_keep: usize) -> CUresult {
    entry("cuMemPoolTrimTo", Needs::Init, || pools::trim(h(pool)))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAccess(
    pool: Handle,
    map: *const MemAccessDesc,
    count: usize,
) -> CUresult {
    entry("cuMemPoolSetAccess", Needs::Init, || {
        pools::set_access(h(pool), ffi::slice(map, count)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAccess(
    flags: *mut c_int,
    pool: Handle,
    location: *const MemLocation,
) -> CUresult {
    entry("cuMemPoolGetAccess", Needs::Init, || {
        let out = Out::new(flags)?;
        out.write(pools::get_access(h(pool), ffi::read(location)?)?);
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Virtual memory management
// ---------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const MemAllocationProp,
    option: c_int,
) -> CUresult {
    entry("cuMemGetAllocationGranularity", Needs::Init, || {
        let out = Out::new(granularity)?;
        out.write(vmm::granularity(&ffi::read(prop)?, option)?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const MemAllocationProp,
    flags: u64,
) -> CUresult {
    entry("cuMemCreate", Needs::Init, || {
        let out = Out::new(handle)?;
        out.write(vmm::create(size, &ffi::read(prop)?, flags)?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    entry("cuMemRelease", Needs::Init, || vmm::release(handle))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    entry("cuMemAddressReserve", Needs::Init, || {
        let out = Out::new(ptr)?;
        out.write(vmm::reserve(size, alignment, addr as usize, flags)? as CUdeviceptr);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    entry("cuMemAddressFree", Needs::Init, || {
        vmm::free_reservation(ptr as usize, size)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    entry("cuMemMap", Needs::Init, || {
        vmm::map(ptr as usize, size, offset, handle, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    entry("cuMemUnmap", Needs::Init, || vmm::unmap(ptr as usize, size))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const MemAccessDesc,
    count: usize,
) -> CUresult {
    entry("cuMemSetAccess", Needs::Init, || {
        vmm::set_access(ptr as usize, size, ffi::slice(desc, count)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAccess(
    flags: *mut u64,
    location: *const MemLocation,
    ptr: CUdeviceptr,
) -> CUresult {
    entry("cuMemGetAccess", Needs::Init, || {
        let out = Out::new(flags)?;
        out.write(vmm::get_access(ffi::read(location)?, ptr as usize)?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationPropertiesFromHandle(
    prop: *mut MemAllocationProp,
    handle: CUmemGenericAllocationHandle,
) -> CUresult {
    entry(
        "cuMemGetAllocationPropertiesFromHandle",
        Needs::Init,
        || {
            let out = Out::new(prop)?;
            out.write(vmm::properties(handle)?);
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(
    handle: *mut CUmemGenericAllocationHandle,
    addr: *mut c_void,
) -> CUresult {
    entry("cuMemRetainAllocationHandle", Needs::Init, || {
        let out = Out::new(handle)?;
        out.write(vmm::retain(addr as usize)?);
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Test helpers (not part of CUDA)
// ---------------------------------------------------------------------------------------

/// Makes the `nth` call (0: every call) of the exported function `func` from now on return
/// `code` without doing anything. Code 0 removes `func`'s rules; a null `func` removes all
/// rules. Returns 0, or 1 if `func` is not an exported function.
#[no_mangle]
pub unsafe extern "C" fn cuShimInjectFault(
    func: *const c_char,
    nth: c_uint,
    code: c_uint,
) -> c_int {
    ffi::helper(|| {
        let func = if func.is_null() {
            None
        } else {
            Some(ffi::c_str(func)?)
        };
        if func.is_some_and(|f| !proc_address::is_exported(f)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        faults::inject(func, nth, code);
        Ok(())
    })
}

/// The driver's own accounting of a device: bytes in use, the peak of that, and the number
/// of live allocations (each output may be null). Returns 0, 3 before `cuInit`, or 101 for
/// a bad device.
#[no_mangle]
pub unsafe extern "C" fn cuShimStats(
    dev: c_int,
    in_use: *mut usize,
    peak: *mut usize,
    live: *mut u64,
) -> c_int {
    ffi::helper(|| {
        let (in_use, peak, live) = (
            Out::optional(in_use),
            Out::optional(peak),
            Out::optional(live),
        );
        if !state::is_initialized() {
            return Err(CUDA_ERROR_NOT_INITIALIZED);
        }
        let (bytes, high, count) = memory::stats(dev)?;
        write_optional(in_use, bytes as usize);
        write_optional(peak, high as usize);
        write_optional(live, count);
        Ok(())
    })
}
