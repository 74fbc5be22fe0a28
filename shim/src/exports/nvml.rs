//! The NVML functions the shim answers as `libnvidia-ml.so.1` (prototypes from `nvml.h`; see
//! `crate::nvml` for the model), and the test helper that simulates other processes.
//!
//! NVML functions are not driver functions: no `cuGetProcAddress` row, no fault injection,
//! no `cuInit` needed. Each body runs inside [`entry`] (initialisation check, panics caught
//! as `NVML_ERROR_UNKNOWN`); pointer arguments are trusted to follow `nvml.h`'s contract.

use std::ffi::{c_char, c_int, c_uint};
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::settings;
use crate::abi::*;
use crate::ffi::{self, Out};
use crate::{devices, nvml, state};

exports! {
    /// Simulates another process holding `bytes` on the device with NVML index `index`
    /// (replacing what that pid held there; 0 removes it): counted in both APIs' free
    /// memory and listed by NVML under `pid`. Returns 0, 2 if it does not fit, 3 before
    /// `cuInit` or `nvmlInit`, 101 for a bad index.
    fn cuShimOtherProcess(
        index: c_int,
        pid: c_uint,
        bytes: usize,
    ) as cuShimOtherProcess since 0, helper {
        let mut state = state::lock();
        if !state.machine.created {
            return Err(CUDA_ERROR_NOT_INITIALIZED);
        }
        let physical = usize::try_from(index).map_err(|_| CUDA_ERROR_INVALID_DEVICE)?;
        nvml::set_other_process(&mut state, physical, pid, bytes as u64, true)
    }
}

/// Declares NVML exports: `fn SYMBOL(ARGS) [, before_init] { BODY }` with a body that returns
/// `Result<(), NvmlReturn>`, or `fn SYMBOL(ARGS) -> TYPE [or FALLBACK] { BODY }` for one that
/// returns TYPE itself (FALLBACK if it panics).
macro_rules! nvml_exports {
    ($(
        $(#[$attr:meta])*
        fn $symbol:ident($($arg:ident: $ty:ty),* $(,)?)
            $(-> $ret:ty [or $fallback:expr])? $(, $mode:ident)?
            { $($body:tt)* }
    )*) => {
        $(nvml_exports!(@define [$(#[$attr])*] $symbol ($($arg: $ty),*)
            [$($ret, $fallback)?] [$($mode)?] { $($body)* });)*
    };
    (@define [$(#[$attr:meta])*] $symbol:ident ($($arg:ident: $ty:ty),*) [] [$($mode:ident)?]
        { $($body:tt)* }
    ) => {
        $(#[$attr])*
        #[no_mangle]
        #[allow(non_snake_case, unused_unsafe, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $symbol($($arg: $ty),*) -> NvmlReturn {
            entry(nvml_exports!(@needs $($mode)?), || {
                // SAFETY: the caller passes pointers as nvml.h documents for this function,
                // which is what the helpers the body uses require.
                unsafe { $($body)* }
            })
        }
    };
    (@define [$(#[$attr:meta])*] $symbol:ident ($($arg:ident: $ty:ty),*)
        [$ret:ty, $fallback:expr] [] { $($body:tt)* }
    ) => {
        $(#[$attr])*
        #[no_mangle]
        #[allow(non_snake_case, unused_unsafe, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $symbol($($arg: $ty),*) -> $ret {
            // SAFETY: as above.
            catch_unwind(AssertUnwindSafe(|| unsafe { $($body)* })).unwrap_or($fallback)
        }
    };
    (@needs) => { true };
    (@needs before_init) => { false };
}

nvml_exports! {
    fn nvmlInit(), before_init {
        init(0)
    }

    fn nvmlInit_v2(), before_init {
        init(0)
    }

    /// The flags (`NVML_INIT_FLAG_NO_GPUS`, `NVML_INIT_FLAG_NO_ATTACH`) change nothing here.
    fn nvmlInitWithFlags(flags: c_uint), before_init {
        init(flags)
    }

    fn nvmlShutdown(), before_init {
        nvml::shutdown()
    }

    fn nvmlErrorString(result: NvmlReturn) -> *const c_char [or c"Unknown Error".as_ptr()] {
        nvml::error_string(result).as_ptr()
    }

    fn nvmlDeviceGetCount(count: *mut c_uint) {
        device_count(count)
    }

    fn nvmlDeviceGetCount_v2(count: *mut c_uint) {
        device_count(count)
    }

    fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut Handle) {
        handle_by_index(index, device)
    }

    fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut Handle) {
        handle_by_index(index, device)
    }

    fn nvmlDeviceGetHandleByPciBusId(bus_id: *const c_char, device: *mut Handle) {
        handle_by_pci_bus_id(bus_id, device)
    }

    fn nvmlDeviceGetHandleByPciBusId_v2(bus_id: *const c_char, device: *mut Handle) {
        handle_by_pci_bus_id(bus_id, device)
    }

    fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut Handle) {
        let (uuid, out) = (text_in(uuid)?, out(device)?);
        let state = state::lock();
        let physical = (0..nvml::count(&state))
            .find(|&p| devices::uuid_text(p) == uuid)
            .ok_or(NVML_ERROR_NOT_FOUND)?;
        out.write(super::handle_ptr(nvml::handle(physical)));
        Ok(())
    }

    fn nvmlDeviceGetPciInfo_v3(device: Handle, pci: *mut NvmlPciInfo) {
        let out = out(pci)?;
        out.write(nvml::pci_info(physical(device)?));
        Ok(())
    }

    fn nvmlDeviceGetUUID(device: Handle, uuid: *mut c_char, length: c_uint) {
        let text = devices::uuid_text(physical(device)?);
        text_out(uuid, length, &text)
    }

    fn nvmlDeviceGetName(device: Handle, name: *mut c_char, length: c_uint) {
        let text = devices::name(physical(device)?);
        text_out(name, length, &text)
    }

    fn nvmlDeviceGetMemoryInfo(device: Handle, memory: *mut NvmlMemory) {
        let out = out(memory)?;
        let (total, used, free) = memory_of(device)?;
        out.write(NvmlMemory { total, free, used });
        Ok(())
    }

    /// The shim's devices reserve nothing for the system: `reserved` is 0.
    fn nvmlDeviceGetMemoryInfo_v2(device: Handle, memory: *mut NvmlMemoryV2) {
        let version = ffi::read(memory).map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?.version;
        if version != NVML_MEMORY_V2 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, used, free) = memory_of(device)?;
        out(memory)?.write(NvmlMemoryV2 { version, total, reserved: 0, free, used });
        Ok(())
    }

    fn nvmlDeviceGetComputeRunningProcesses(
        device: Handle,
        count: *mut c_uint,
        infos: *mut NvmlProcessInfoV1,
    ) {
        running_processes(device, count, infos, |pid, used_gpu_memory| NvmlProcessInfoV1 {
            pid,
            used_gpu_memory,
        })
    }

    fn nvmlDeviceGetComputeRunningProcesses_v2(
        device: Handle,
        count: *mut c_uint,
        infos: *mut NvmlProcessInfoV2,
    ) {
        running_processes(device, count, infos, process_info_v2)
    }

    /// Takes `nvmlProcessInfo_t`, which is `nvmlProcessInfo_v2_t` in nvml.h.
    fn nvmlDeviceGetComputeRunningProcesses_v3(
        device: Handle,
        count: *mut c_uint,
        infos: *mut NvmlProcessInfoV2,
    ) {
        running_processes(device, count, infos, process_info_v2)
    }

    /// The simulated machine runs no graphics and no MPS clients: their lists are empty, in
    /// each version (`*count` set to 0, `NVML_SUCCESS`).
    fn nvmlDeviceGetGraphicsRunningProcesses(device: Handle, count: *mut c_uint, _infos: *mut NvmlProcessInfoV1) {
        no_processes(device, count)
    }

    fn nvmlDeviceGetGraphicsRunningProcesses_v2(device: Handle, count: *mut c_uint, _infos: *mut NvmlProcessInfoV2) {
        no_processes(device, count)
    }

    fn nvmlDeviceGetGraphicsRunningProcesses_v3(device: Handle, count: *mut c_uint, _infos: *mut NvmlProcessInfoV2) {
        no_processes(device, count)
    }

    fn nvmlDeviceGetMPSComputeRunningProcesses(device: Handle, count: *mut c_uint, _infos: *mut NvmlProcessInfoV1) {
        no_processes(device, count)
    }

    fn nvmlDeviceGetMPSComputeRunningProcesses_v2(device: Handle, count: *mut c_uint, _infos: *mut NvmlProcessInfoV2) {
        no_processes(device, count)
    }

    fn nvmlDeviceGetMPSComputeRunningProcesses_v3(device: Handle, count: *mut c_uint, _infos: *mut NvmlProcessInfoV2) {
        no_processes(device, count)
    }

    /// NVML's index of the device (its physical index: NVML ignores `CUDA_VISIBLE_DEVICES`).
    fn nvmlDeviceGetIndex(device: Handle, index: *mut c_uint) {
        let out = out(index)?;
        out.write(physical(device)? as c_uint);
        Ok(())
    }

    /// The kernel driver's version text ([`DRIVER_VERSION`]; nvml.h's buffer size is 80).
    fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) {
        text_out(version, length, DRIVER_VERSION)
    }

    /// The CUDA version the driver supports, as `cuDriverGetVersion` says
    /// (`CUDA_SHIM_DRIVER_VERSION`).
    fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) {
        cuda_driver_version(version)
    }

    fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) {
        cuda_driver_version(version)
    }
}

/// Runs an NVML function's body: the initialisation check (unless `needs_init` is false),
/// then the body, a panic caught as `NVML_ERROR_UNKNOWN`.
fn entry(needs_init: bool, body: impl FnOnce() -> Result<(), NvmlReturn>) -> NvmlReturn {
    let result = catch_unwind(AssertUnwindSafe(|| {
        if needs_init {
            nvml::check_initialized()?;
        }
        body()
    }));
    match result {
        Ok(Ok(())) => NVML_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => NVML_ERROR_UNKNOWN,
    }
}

/// What a getter the shim has no figure for answers: `NVML_ERROR_NOT_SUPPORTED` once NVML
/// is initialised (see `nvml_unsupported`).
pub(super) fn not_supported() -> NvmlReturn {
    entry(true, || Err(NVML_ERROR_NOT_SUPPORTED))
}

/// `nvmlInit*`: with bad `CUDA_SHIM_*` settings (reported once on stderr), as if the driver
/// could not be reached.
fn init(_flags: c_uint) -> Result<(), NvmlReturn> {
    let cfg = settings().map_err(|_| NVML_ERROR_UNKNOWN)?;
    nvml::init(cfg);
    Ok(())
}

/// A required output pointer; null is `NVML_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
/// `p` must be null or valid for a write of `T`.
unsafe fn out<T>(p: *mut T) -> Result<Out<T>, NvmlReturn> {
    // SAFETY: passed on from this function's contract.
    unsafe { Out::new(p) }.map_err(|_| NVML_ERROR_INVALID_ARGUMENT)
}

/// A caller's string; null (or not UTF-8) is `NVML_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
/// `p` must be null or a NUL-terminated string alive for the call.
unsafe fn text_in<'a>(p: *const c_char) -> Result<&'a str, NvmlReturn> {
    // SAFETY: passed on from this function's contract.
    unsafe { ffi::c_str(p) }.map_err(|_| NVML_ERROR_INVALID_ARGUMENT)
}

/// Copies `text` into a caller's buffer of `length` bytes: `NVML_ERROR_INSUFFICIENT_SIZE`
/// (nothing written) when it does not fit with its NUL, as NVML does.
///
/// # Safety
/// `buf` must be null or valid for writes of `length` bytes.
unsafe fn text_out(buf: *mut c_char, length: c_uint, text: &str) -> Result<(), NvmlReturn> {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (length as usize) <= text.len() {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    let length = c_int::try_from(length).unwrap_or(c_int::MAX);
    // SAFETY: `buf` is writable for `length` bytes by this function's contract.
    unsafe { ffi::write_c_string(buf, length, text) }.map_err(|_| NVML_ERROR_INVALID_ARGUMENT)
}

/// A device handle's physical index, or `NVML_ERROR_INVALID_ARGUMENT`.
fn physical(device: Handle) -> Result<usize, NvmlReturn> {
    nvml::physical_of(&state::lock(), super::h(device))
}

fn memory_of(device: Handle) -> Result<(u64, u64, u64), NvmlReturn> {
    let mut state = state::lock();
    // An exported allocation whose descriptors were all closed is gone by now.
    crate::vmm::reap_closed_exports(&mut state);
    let physical = nvml::physical_of(&state, super::h(device))?;
    Ok(nvml::memory(&state, physical))
}

/// # Safety
/// `count` must be null or valid for a write of `c_uint`.
unsafe fn device_count(count: *mut c_uint) -> Result<(), NvmlReturn> {
    // SAFETY: passed on from this function's contract.
    let out = unsafe { out(count) }?;
    out.write(nvml::count(&state::lock()) as c_uint);
    Ok(())
}

/// # Safety
/// `device` must be null or valid for a write of a handle.
unsafe fn handle_by_index(index: c_uint, device: *mut Handle) -> Result<(), NvmlReturn> {
    // SAFETY: passed on from this function's contract.
    let out = unsafe { out(device) }?;
    if index as usize >= nvml::count(&state::lock()) {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    out.write(super::handle_ptr(nvml::handle(index as usize)));
    Ok(())
}

/// # Safety
/// `bus_id` must be null or a NUL-terminated string; `device` null or writable.
unsafe fn handle_by_pci_bus_id(
    bus_id: *const c_char,
    device: *mut Handle,
) -> Result<(), NvmlReturn> {
    // SAFETY: passed on from this function's contract.
    let (bus_id, out) = unsafe { (text_in(bus_id)?, out(device)?) };
    let physical = devices::parse_pci_bus_id(bus_id)
        .filter(|&p| p < nvml::count(&state::lock()))
        .ok_or(NVML_ERROR_NOT_FOUND)?;
    out.write(super::handle_ptr(nvml::handle(physical)));
    Ok(())
}

/// The kernel driver version the shim reports through NVML.
pub const DRIVER_VERSION: &str = "580.65.06";

/// # Safety
/// `version` must be null or valid for a write of `c_int`.
unsafe fn cuda_driver_version(version: *mut c_int) -> Result<(), NvmlReturn> {
    let cfg = settings().map_err(|_| NVML_ERROR_UNKNOWN)?;
    // SAFETY: passed on from this function's contract.
    unsafe { out(version) }?.write(cfg.driver_version);
    Ok(())
}

/// An empty process list for a valid device; a null `count` is `NVML_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
/// `count` must be null or valid for a write of `c_uint`.
unsafe fn no_processes(device: Handle, count: *mut c_uint) -> Result<(), NvmlReturn> {
    physical(device)?;
    // SAFETY: passed on from this function's contract.
    unsafe { out(count) }?.write(0);
    Ok(())
}

fn process_info_v2(pid: u32, used_gpu_memory: u64) -> NvmlProcessInfoV2 {
    NvmlProcessInfoV2 {
        pid,
        used_gpu_memory,
        gpu_instance_id: u32::MAX,
        compute_instance_id: u32::MAX,
    }
}

/// `nvmlDeviceGetComputeRunningProcesses*`: `*count` is the room in `infos`; when the list is
/// longer, `NVML_ERROR_INSUFFICIENT_SIZE` with the length needed in `*count` (so `*count == 0`
/// asks for the length, and `infos` may then be null).
///
/// # Safety
/// `count` must be null or valid for a read and a write of `c_uint`; `infos` null or valid
/// for writes of `*count` elements.
unsafe fn running_processes<T: Copy>(
    device: Handle,
    count: *mut c_uint,
    infos: *mut T,
    make: impl Fn(u32, u64) -> T,
) -> Result<(), NvmlReturn> {
    // SAFETY: passed on from this function's contract.
    let room = unsafe { ffi::read(count) }.map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?;
    let list = {
        let mut state = state::lock();
        crate::vmm::reap_closed_exports(&mut state);
        let physical = nvml::physical_of(&state, super::h(device))?;
        nvml::processes(&state, physical)
    };
    // SAFETY: as above.
    let count = unsafe { out(count) }?;
    if list.len() > room as usize {
        count.write(list.len() as c_uint);
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    let infos_list: Vec<T> = list.iter().map(|&(pid, bytes)| make(pid, bytes)).collect();
    // SAFETY: `infos` has room for `room` >= `list.len()` elements by the contract.
    unsafe { ffi::write_array(infos, &infos_list) }.map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?;
    count.write(list.len() as c_uint);
    Ok(())
}
