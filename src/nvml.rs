//! NVML (`libnvidia-ml.so.1`), a second real library: called here, and its memory figures
//! hooked in `exports/nvml.rs` (cuquota's own calls below reach the real functions: they are
//! resolved in NVML's handle, never through a hook). It answers what
//! the driver cannot before a device has a context: the device's free memory (so that what
//! creating the first context takes can be measured) and this process's own used memory
//! (what `nvidia-smi` shows, to correct the context figure).
//!
//! Loaded on first use (`RTLD_NOW | RTLD_LOCAL`; the driver ships it), initialised once with
//! `nvmlInit_v2` and never shut down while the process runs (another user of NVML in the
//! process keeps its own reference count). Without it every answer is `None`, said once at
//! `info`. A CUDA ordinal is matched to an NVML device by PCI bus id, else by UUID. The
//! layouts below are from NVIDIA's `nvml.h` (checked by the unit tests).

use crate::context_memory::Unread;
use crate::cuda_abi::CuDevice;
use crate::lookup::library;
use crate::real_driver;
use crate::spin::SpinLock;
use std::ffi::{c_char, c_uint, c_void, CStr};

/// `nvmlReturn_t`.
pub type NvmlReturn = c_uint;
/// `nvmlDevice_t`: an opaque handle.
pub type NvmlDevice = *mut c_void;

pub const NVML_SUCCESS: NvmlReturn = 0;
/// `NVML_ERROR_NO_PERMISSION`: what a hook answers a signal handler that interrupted one.
pub const NVML_ERROR_NO_PERMISSION: NvmlReturn = 4;
pub const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
/// `NVML_ERROR_FUNCTION_NOT_FOUND`: what a hook answers when the real library lacks it.
pub const NVML_ERROR_FUNCTION_NOT_FOUND: NvmlReturn = 13;
/// `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`: a versioned struct of another version.
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
/// `NVML_ERROR_UNKNOWN`: what a hook answers if it panicked.
pub const NVML_ERROR_UNKNOWN: NvmlReturn = 999;
/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE`.
pub const UUID_BUFFER_SIZE: usize = 96;
/// `NVML_VALUE_NOT_AVAILABLE` as an `unsigned long long` (`usedGpuMemory` under WDDM, or
/// without the privilege to see it).
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
/// `NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE`.
const PCI_BUS_ID_SIZE: usize = 32;

/// `nvmlMemory_t` (v1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NvmlMemoryV1 {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`: versioned (`version` = `nvmlMemory_v2`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NvmlMemoryV2 {
    pub version: c_uint,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2` = `NVML_STRUCT_VERSION(Memory, 2)`: the struct's size | version << 24.
pub const NVML_MEMORY_V2: c_uint = std::mem::size_of::<NvmlMemoryV2>() as c_uint | (2 << 24);

/// `nvmlProcessInfo_v1_t` (`nvmlDeviceGetComputeRunningProcesses`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NvmlProcessInfoV1 {
    pub pid: c_uint,
    pub used_gpu_memory: u64,
}

/// `nvmlProcessInfo_v2_t` = `nvmlProcessInfo_t` (`_v2` and `_v3` of the query).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NvmlProcessInfoV2 {
    pub pid: c_uint,
    pub used_gpu_memory: u64,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

library! {
    /// The NVIDIA Management Library.
    LIBNVML = c"libnvidia-ml.so.1", names "nvml";
    nvmlInit_v2: fn() -> NvmlReturn;
    nvmlDeviceGetHandleByPciBusId_v2: fn(*const c_char, *mut NvmlDevice) -> NvmlReturn;
    nvmlDeviceGetHandleByUUID: fn(*const c_char, *mut NvmlDevice) -> NvmlReturn;
    nvmlDeviceGetMemoryInfo_v2: fn(NvmlDevice, *mut NvmlMemoryV2) -> NvmlReturn;
    nvmlDeviceGetMemoryInfo: fn(NvmlDevice, *mut NvmlMemoryV1) -> NvmlReturn;
    nvmlDeviceGetComputeRunningProcesses_v3:
        fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfoV2) -> NvmlReturn;
    nvmlDeviceGetComputeRunningProcesses_v2:
        fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfoV2) -> NvmlReturn;
    nvmlDeviceGetComputeRunningProcesses:
        fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfoV1) -> NvmlReturn;
    nvmlDeviceGetGraphicsRunningProcesses_v3:
        fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfoV2) -> NvmlReturn;
    nvmlDeviceGetGraphicsRunningProcesses_v2:
        fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfoV2) -> NvmlReturn;
    nvmlDeviceGetGraphicsRunningProcesses:
        fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfoV1) -> NvmlReturn;
    nvmlDeviceGetMPSComputeRunningProcesses_v3:
        fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfoV2) -> NvmlReturn;
    nvmlDeviceGetMPSComputeRunningProcesses_v2:
        fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfoV2) -> NvmlReturn;
    nvmlDeviceGetMPSComputeRunningProcesses:
        fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfoV1) -> NvmlReturn;
    nvmlDeviceGetUUID: fn(NvmlDevice, *mut c_char, c_uint) -> NvmlReturn;
    nvmlDeviceGetIndex: fn(NvmlDevice, *mut c_uint) -> NvmlReturn;
}

/// How many CUDA ordinals get a remembered NVML handle.
const DEVICES: usize = cuquota_format::settings::MAX_DEVICES;

/// Where NVML stands in this process.
enum State {
    /// Not tried yet.
    Untried,
    /// Loaded and initialised; each ordinal's handle once matched (`None`: not tried,
    /// `Some(None)`: no match).
    Ready(Box<[Option<Option<usize>>; DEVICES]>),
    /// Not there, or its initialisation failed: every answer is `None`.
    Absent,
}

static STATE: SpinLock<State> = SpinLock::new(State::Untried);

/// Whether `nvmlDeviceGetMemoryInfo_v2` failed once (an older NVML): v1 from then on, so
/// that every measurement compares figures of one kind.
static MEMORY_V1_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Loads and initialises NVML if not tried yet; keeps the reason when it is absent.
fn ensure_loaded(state: &mut State) {
    if !matches!(state, State::Untried) {
        return;
    }
    *state = match load() {
        Ok(()) => State::Ready(Box::new([None; DEVICES])),
        Err(why) => {
            *ABSENCE.lock() = Some(why);
            State::Absent
        }
    };
}

/// Why NVML is absent, until [`absence_note`] takes it.
static ABSENCE: SpinLock<Option<String>> = SpinLock::new(None);

/// Why NVML could not be used, once (the caller says so at `info`); `None` when it is
/// there, not tried yet, or already said.
pub fn absence_note() -> Option<String> {
    ABSENCE.lock().take()
}

fn load() -> Result<(), String> {
    // SAFETY: a NUL-terminated soname. The handle is kept for the life of the process
    // (never dlclose'd): the table below resolves in it (RTLD_NOLOAD then finds it).
    let handle =
        unsafe { libc::dlopen(LIBNVML_SONAME.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err("libnvidia-ml.so.1 could not be loaded".into());
    }
    let init = nvmlInit_v2.get().ok_or("no nvmlInit_v2")?;
    // SAFETY: no arguments; NVML counts initialisations, so another user's is unaffected.
    match unsafe { init() } {
        NVML_SUCCESS => Ok(()),
        rc => Err(format!("nvmlInit_v2 returned {rc}")),
    }
}

const LIBNVML_SONAME: &CStr = c"libnvidia-ml.so.1";

/// The NVML handle of CUDA ordinal `device`, matched once (loading NVML if need be).
fn device_handle(device: u32) -> Option<NvmlDevice> {
    let index = device as usize;
    if index >= DEVICES {
        return None;
    }
    let mut state = STATE.lock();
    ensure_loaded(&mut state);
    let State::Ready(handles) = &mut *state else {
        return None;
    };
    let handle = *handles[index].get_or_insert_with(|| match_device(device).map(|h| h as usize));
    handle.map(|h| h as NvmlDevice)
}

/// The NVML device that is CUDA's `device`: by PCI bus id, else by UUID.
fn match_device(device: u32) -> Option<NvmlDevice> {
    by_pci_bus_id(device).or_else(|| by_uuid(device))
}

fn by_pci_bus_id(device: u32) -> Option<NvmlDevice> {
    let get_id = real_driver::cuDeviceGetPCIBusId.get()?;
    let find = nvmlDeviceGetHandleByPciBusId_v2.get()?;
    let mut id = [0 as c_char; PCI_BUS_ID_SIZE];
    // SAFETY: `id` holds the length passed; the driver writes a NUL-terminated id there.
    let rc = unsafe { get_id(id.as_mut_ptr(), id.len() as i32, device as CuDevice) };
    if !rc.is_ok() {
        return None;
    }
    id[PCI_BUS_ID_SIZE - 1] = 0;
    let mut handle: NvmlDevice = std::ptr::null_mut();
    // SAFETY: a NUL-terminated id and a valid out-pointer.
    let rc = unsafe { find(id.as_ptr(), &mut handle) };
    (rc == NVML_SUCCESS && !handle.is_null()).then_some(handle)
}

fn by_uuid(device: u32) -> Option<NvmlDevice> {
    let find = nvmlDeviceGetHandleByUUID.get()?;
    let uuid = uuid_string(&real_driver::device_uuid(device)?);
    let uuid = std::ffi::CString::new(uuid).ok()?;
    let mut handle: NvmlDevice = std::ptr::null_mut();
    // SAFETY: a NUL-terminated UUID and a valid out-pointer.
    let rc = unsafe { find(uuid.as_ptr(), &mut handle) };
    (rc == NVML_SUCCESS && !handle.is_null()).then_some(handle)
}

/// NVML's spelling of a CUDA UUID: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_string(bytes: &[u8; 16]) -> String {
    let mut s = String::from("GPU-");
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The free memory of CUDA's `device` as NVML reports it (no context needed); `None`
/// without NVML or a matched device.
pub fn free_memory(device: u32) -> Option<u64> {
    let handle = device_handle(device)?;
    use std::sync::atomic::Ordering::Relaxed;
    if !MEMORY_V1_ONLY.load(Relaxed) {
        if let Some(f) = nvmlDeviceGetMemoryInfo_v2.get() {
            let mut info = NvmlMemoryV2 {
                version: NVML_MEMORY_V2,
                ..Default::default()
            };
            // SAFETY: a handle NVML gave and a valid, versioned out-struct.
            if unsafe { f(handle, &mut info) } == NVML_SUCCESS {
                return Some(info.free);
            }
        }
        MEMORY_V1_ONLY.store(true, Relaxed);
    }
    let f = nvmlDeviceGetMemoryInfo.get()?;
    let mut info = NvmlMemoryV1::default();
    // SAFETY: a handle NVML gave and a valid out-struct.
    (unsafe { f(handle, &mut info) } == NVML_SUCCESS).then_some(info.free)
}

/// How many times the process list is asked again when it grew between the size query
/// and the read.
const LIST_TRIES: usize = 3;
/// More processes on one GPU than this is not a figure to allocate for.
const MOST_PROCESSES: c_uint = 4096;

/// This process's used memory on CUDA's `device` from NVML's compute process list, or why
/// it cannot be read: no NVML, the pid is not listed (e.g. another pid namespace), or NVML
/// has no figure for it.
pub fn used_by_this_process(device: u32) -> Result<u64, Unread> {
    let handle = device_handle(device).ok_or(Unread::NoNvml)?;
    let pid = std::process::id();
    // SAFETY (of each call below): a handle NVML gave; `process_list` passes a count and
    // a buffer with room for that many entries of the version's struct.
    let found = if let Some(f) = nvmlDeviceGetComputeRunningProcesses_v3.get() {
        process_list(|n, p| unsafe { f(handle, n, p) })
    } else if let Some(f) = nvmlDeviceGetComputeRunningProcesses_v2.get() {
        process_list(|n, p| unsafe { f(handle, n, p) })
    } else {
        let f = nvmlDeviceGetComputeRunningProcesses
            .get()
            .ok_or(Unread::NoNvml)?;
        let v1: Vec<NvmlProcessInfoV1> =
            process_list(|n, p| unsafe { f(handle, n, p) }).ok_or(Unread::NoFigure)?;
        return own_usage(v1.iter().map(|p| (p.pid, p.used_gpu_memory)), pid);
    }
    .ok_or(Unread::NoFigure)?;
    own_usage(found.iter().map(|p| (p.pid, p.used_gpu_memory)), pid)
}

/// This pid's figure, summed over its entries (NVML lists one per context on a device).
fn own_usage(entries: impl Iterator<Item = (c_uint, u64)>, pid: u32) -> Result<u64, Unread> {
    let mut total = None;
    for (p, used) in entries {
        if p == pid {
            if used == VALUE_NOT_AVAILABLE {
                return Err(Unread::NoFigure);
            }
            total = Some(total.unwrap_or(0u64).saturating_add(used));
        }
    }
    total.ok_or(Unread::NotListed)
}

/// The size-query protocol of the running-process lists: ask with 0 entries for the count,
/// then read with room for it (and some to spare); a list that grew in between is asked
/// again, a bounded number of times. `call(count, infos)` is the NVML query; it is only
/// handed a null `infos` with a count of 0, or a buffer with room for `*count` entries.
fn process_list<T: Default + Clone>(
    call: impl Fn(*mut c_uint, *mut T) -> NvmlReturn,
) -> Option<Vec<T>> {
    let mut count: c_uint = 0;
    match call(&mut count, std::ptr::null_mut()) {
        NVML_SUCCESS => return Some(Vec::new()),
        NVML_ERROR_INSUFFICIENT_SIZE => {}
        _ => return None,
    }
    for _ in 0..LIST_TRIES {
        if count > MOST_PROCESSES {
            return None;
        }
        let room = count + 8;
        // Spare room beyond what is announced: some drivers' entries were larger than the
        // header of the same version says (the protected-memory field), and they must not
        // write past the buffer.
        let mut infos = vec![T::default(); room as usize * 2];
        let mut n = room;
        match call(&mut n, infos.as_mut_ptr()) {
            NVML_SUCCESS => {
                infos.truncate(n.min(room) as usize);
                return Some(infos);
            }
            NVML_ERROR_INSUFFICIENT_SIZE => count = n,
            _ => return None,
        }
    }
    None
}

/// In a forked child: the lock is freed, what was learnt is kept (NVML's handles stay
/// valid in the child's copy of the library).
///
/// # Safety
/// Only in the child right after `fork()`, while it has one thread.
pub unsafe fn unlock_in_child() {
    // SAFETY: the caller's promise.
    unsafe {
        STATE.unlock_in_child();
        ABSENCE.unlock_in_child();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The layouts of nvml.h (x86-64 and aarch64 Linux: 8-byte `unsigned long long`).
    #[test]
    fn struct_layouts_are_nvml_h() {
        assert_eq!(size_of::<NvmlMemoryV1>(), 24);
        assert_eq!(offset_of!(NvmlMemoryV1, free), 8);
        assert_eq!(size_of::<NvmlMemoryV2>(), 40);
        assert_eq!(offset_of!(NvmlMemoryV2, total), 8);
        assert_eq!(offset_of!(NvmlMemoryV2, reserved), 16);
        assert_eq!(offset_of!(NvmlMemoryV2, free), 24);
        assert_eq!(offset_of!(NvmlMemoryV2, used), 32);
        assert_eq!(NVML_MEMORY_V2, 0x0200_0028);
        assert_eq!(size_of::<NvmlProcessInfoV1>(), 16);
        assert_eq!(offset_of!(NvmlProcessInfoV1, used_gpu_memory), 8);
        assert_eq!(size_of::<NvmlProcessInfoV2>(), 24);
        assert_eq!(offset_of!(NvmlProcessInfoV2, gpu_instance_id), 16);
        assert_eq!(offset_of!(NvmlProcessInfoV2, compute_instance_id), 20);
    }

    #[test]
    fn uuids_are_spelt_as_nvml_does() {
        let bytes = [
            0x5a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6, 0xd7,
            0xe8, 0xf9,
        ];
        assert_eq!(
            uuid_string(&bytes),
            "GPU-5a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
        );
    }

    #[test]
    fn own_usage_sums_this_pid_only() {
        let entries = [(7, 100), (9, 5), (7, 20)];
        assert_eq!(own_usage(entries.into_iter(), 7), Ok(120));
        assert_eq!(own_usage(entries.into_iter(), 8), Err(Unread::NotListed));
        let hidden = [(7, 100), (7, VALUE_NOT_AVAILABLE)];
        assert_eq!(own_usage(hidden.into_iter(), 7), Err(Unread::NoFigure));
    }

    /// The size protocol: a count first, then the list; a list that grows is asked again;
    /// an empty list is success with no entries; errors are `None`.
    #[test]
    fn the_process_list_protocol() {
        use std::cell::Cell;
        let listed = Cell::new(2u32);
        let calls = Cell::new(0);
        let fake = |n: *mut c_uint, p: *mut NvmlProcessInfoV2| {
            calls.set(calls.get() + 1);
            // SAFETY: the protocol's own pointers, as process_list passes them.
            unsafe {
                let have = listed.get();
                if p.is_null() || *n < have {
                    *n = have;
                    // the list grows by 20 after the size query, once
                    if p.is_null() {
                        listed.set(have + 20);
                    }
                    return NVML_ERROR_INSUFFICIENT_SIZE;
                }
                for i in 0..have as usize {
                    *p.add(i) = NvmlProcessInfoV2 {
                        pid: i as c_uint,
                        used_gpu_memory: 10,
                        ..Default::default()
                    };
                }
                *n = have;
                NVML_SUCCESS
            }
        };
        let list = process_list(fake).unwrap();
        assert_eq!(list.len(), 22);
        assert_eq!(calls.get(), 3);
        let empty = |_: *mut c_uint, _: *mut NvmlProcessInfoV1| NVML_SUCCESS;
        assert_eq!(process_list(empty).unwrap().len(), 0);
        let failing = |_: *mut c_uint, _: *mut NvmlProcessInfoV1| 3;
        assert!(process_list(failing).is_none());
        // SAFETY: the count pointer process_list passes.
        let absurd = |n: *mut c_uint, _: *mut NvmlProcessInfoV1| unsafe {
            *n = u32::MAX;
            NVML_ERROR_INSUFFICIENT_SIZE
        };
        assert!(process_list(absurd).is_none());
    }
}
