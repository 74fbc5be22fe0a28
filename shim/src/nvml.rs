//! NVML's view of the simulated machine: the shim also answers as `libnvidia-ml.so.1` (a link
//! to the same file, which the loader maps as the same object), so NVML and the driver read
//! one accounting and agree.
//!
//! NVML sees every simulated device by its physical index, whatever `CUDA_VISIBLE_DEVICES`
//! hides from the driver, with the same UUID and PCI bus id. A device's used memory is this
//! process's footprint on it (allocations and contexts) plus what simulated other processes
//! hold (`cuShimOtherProcess`, `CUDA_SHIM_OTHER_PROCESS`); free is the rest, which is what
//! `cuMemGetInfo` reports as free. The running compute processes are this process (once it
//! has a context on the device, with its footprint) and the other processes.
//!
//! NVML counts its initialisations: every function but `nvmlErrorString` needs one not yet
//! shut down (`NVML_ERROR_UNINITIALIZED`).

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::abi::*;
use crate::config::Config;
use crate::state::{self, State};

/// Live `nvmlInit*` calls not yet shut down.
static INITS: AtomicU32 = AtomicU32::new(0);
/// Whether `nvmlInit*` ever succeeded in this process.
static EVER_INITIALIZED: AtomicBool = AtomicBool::new(false);

/// `nvmlInit*`: creates the simulated devices if `cuInit` has not, and counts the call.
pub fn init(cfg: &Config) {
    state::create_devices(&mut state::lock(), cfg);
    INITS.fetch_add(1, Ordering::AcqRel);
    EVER_INITIALIZED.store(true, Ordering::Release);
}

/// `nvmlShutdown`: one initialisation fewer. As documented, calling it more often than
/// `nvmlInit` is no error; with none ever made it is `NVML_ERROR_UNINITIALIZED`.
pub fn shutdown() -> Result<(), NvmlReturn> {
    if !EVER_INITIALIZED.load(Ordering::Acquire) {
        return Err(NVML_ERROR_UNINITIALIZED);
    }
    let _ = INITS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    Ok(())
}

pub fn check_initialized() -> Result<(), NvmlReturn> {
    if INITS.load(Ordering::Acquire) == 0 {
        return Err(NVML_ERROR_UNINITIALIZED);
    }
    Ok(())
}

/// How many devices NVML sees: all of them.
pub fn count(state: &State) -> usize {
    state.machine.totals.len()
}

/// Device handles (`nvmlDevice_t`) look like pointers but point at nothing, and differ from
/// the driver's handles.
const HANDLE_BASE: usize = 0x0cd1_0000_0000;
const HANDLE_STEP: usize = 0x100;

pub fn handle(physical: usize) -> usize {
    HANDLE_BASE + (physical + 1) * HANDLE_STEP
}

/// The physical index of a device handle, or `NVML_ERROR_INVALID_ARGUMENT`.
pub fn physical_of(state: &State, handle: usize) -> Result<usize, NvmlReturn> {
    let offset = handle
        .checked_sub(HANDLE_BASE + HANDLE_STEP)
        .filter(|o| o % HANDLE_STEP == 0)
        .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
    Some(offset / HANDLE_STEP)
        .filter(|&p| p < count(state))
        .ok_or(NVML_ERROR_INVALID_ARGUMENT)
}

/// A device's memory: (total, used, free). Used is this process's footprint plus the other
/// processes' memory; free is what `cuMemGetInfo` reports.
pub fn memory(state: &State, physical: usize) -> (u64, u64, u64) {
    let total = state.machine.totals[physical];
    let others = others_on(state, physical);
    let own =
        state::ordinal_of_physical(state, physical).map_or(0, |o| state.devices[o].footprint());
    let used = own.saturating_add(others).min(total);
    (total, used, total - used)
}

fn others_on(state: &State, physical: usize) -> u64 {
    state
        .machine
        .other_processes
        .iter()
        .filter(|(p, _, _)| *p == physical)
        .map(|(_, _, bytes)| bytes)
        .sum()
}

/// This process's PID as NVML reports it: the kernel's outermost view, not the PID a process
/// in a PID namespace (a container) sees. The stand-in reads it from `/proc/self/status`'s
/// `NSpid:` line, whose first field is the PID in the namespace the `/proc` mount belongs to:
/// the host's unless the process mounted a `/proc` of its own (then its own PID).
fn reported_pid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(std::process::id)
}

/// The compute processes on a device, (pid, used bytes): this process first, once it has a
/// context there, then the simulated others.
pub fn processes(state: &State, physical: usize) -> Vec<(u32, u64)> {
    let mut list = Vec::new();
    if let Some(ordinal) = state::ordinal_of_physical(state, physical) {
        if has_context(state, ordinal) {
            list.push((reported_pid(), state.devices[ordinal].footprint()));
        }
    }
    list.extend(
        state
            .machine
            .other_processes
            .iter()
            .filter(|(p, _, _)| *p == physical)
            .map(|&(_, pid, bytes)| (pid, bytes)),
    );
    list
}

/// Whether this process has a context on the device: a created one, or its primary context
/// retained.
fn has_context(state: &State, ordinal: usize) -> bool {
    let device = &state.devices[ordinal];
    state
        .contexts
        .values()
        .any(|c| c.device == ordinal && (!c.primary || device.primary_refs > 0))
}

/// Sets what the simulated process `pid` holds on the device with this physical index (0:
/// it holds nothing there). With `check`, growth that does not fit the device's free memory
/// fails with `CUDA_ERROR_OUT_OF_MEMORY` and changes nothing.
pub fn set_other_process(
    state: &mut State,
    physical: usize,
    pid: u32,
    bytes: u64,
    check: bool,
) -> Result<(), CUresult> {
    if physical >= count(state) {
        return Err(CUDA_ERROR_INVALID_DEVICE);
    }
    let old = state
        .machine
        .other_processes
        .iter()
        .find(|(p, q, _)| *p == physical && *q == pid)
        .map_or(0, |e| e.2);
    let ordinal = state::ordinal_of_physical(state, physical);
    if check && bytes > old {
        let free = match ordinal {
            Some(o) => state.devices[o].free(),
            None => memory(state, physical).2,
        };
        if bytes - old > free {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
    }
    let others = &mut state.machine.other_processes;
    others.retain(|(p, q, _)| !(*p == physical && *q == pid));
    if bytes > 0 {
        others.push((physical, pid, bytes));
    }
    let sum = others_on(state, physical);
    if let Some(o) = ordinal {
        state.devices[o].other_processes = sum;
    }
    Ok(())
}

/// `nvmlErrorString`.
pub fn error_string(code: NvmlReturn) -> &'static CStr {
    match code {
        NVML_SUCCESS => c"Success",
        NVML_ERROR_UNINITIALIZED => c"Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        NVML_ERROR_NOT_FOUND => c"Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        9 => c"Driver Not Loaded",
        13 => c"Function Not Found",
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH => c"Argument version mismatch",
        _ => c"Unknown Error",
    }
}

/// The PCI information of a device, consistent with `cuDeviceGetPCIBusId`.
pub fn pci_info(physical: usize) -> NvmlPciInfo {
    let mut info = NvmlPciInfo {
        bus_id_legacy: [0; 16],
        domain: 0,
        bus: physical as u32,
        device: 0,
        // An H100 SXM5's device id, NVIDIA's vendor id.
        pci_device_id: 0x2330_10de,
        pci_sub_system_id: 0x16c1_10de,
        bus_id: [0; 32],
    };
    let legacy = crate::devices::pci_bus_id(physical);
    let long = crate::devices::pci_bus_id_long(physical);
    info.bus_id_legacy[..legacy.len()].copy_from_slice(legacy.as_bytes());
    info.bus_id[..long.len()].copy_from_slice(long.as_bytes());
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_reject_strangers() {
        let mut state = test_state(&[1 << 30, 2 << 30]);
        assert_eq!(physical_of(&state, handle(1)), Ok(1));
        assert_eq!(physical_of(&state, handle(0)), Ok(0));
        for bad in [0, HANDLE_BASE, handle(2), handle(1) + 1] {
            assert_eq!(
                physical_of(&state, bad),
                Err(NVML_ERROR_INVALID_ARGUMENT),
                "{bad:#x}"
            );
        }
        state.machine.totals.push(1);
        assert_eq!(physical_of(&state, handle(2)), Ok(2));
    }

    #[test]
    fn other_processes_take_memory_and_give_it_back() {
        let mut state = test_state(&[1 << 30, 2 << 30]);
        set_other_process(&mut state, 1, 77, 512 << 20, true).unwrap();
        set_other_process(&mut state, 1, 78, 256 << 20, true).unwrap();
        assert_eq!(memory(&state, 1), (2 << 30, 768 << 20, 1280 << 20));
        assert_eq!(processes(&state, 1), vec![(77, 512 << 20), (78, 256 << 20)]);
        assert_eq!(
            set_other_process(&mut state, 1, 77, 2 << 30, true),
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        );
        set_other_process(&mut state, 1, 77, 0, true).unwrap();
        assert_eq!(processes(&state, 1), vec![(78, 256 << 20)]);
        assert_eq!(memory(&state, 0), (1 << 30, 0, 1 << 30));
        assert_eq!(
            set_other_process(&mut state, 2, 1, 1, true),
            Err(CUDA_ERROR_INVALID_DEVICE)
        );
    }

    #[test]
    fn pci_info_matches_the_drivers_bus_id() {
        let info = pci_info(3);
        assert_eq!(&info.bus_id_legacy[..13], b"0000:03:00.0\0");
        assert_eq!(&info.bus_id[..17], b"00000000:03:00.0\0");
        assert_eq!((info.domain, info.bus, info.device), (0, 3, 0));
    }

    #[test]
    fn error_strings() {
        assert_eq!(error_string(NVML_SUCCESS), c"Success");
        assert_eq!(
            error_string(NVML_ERROR_INSUFFICIENT_SIZE),
            c"Insufficient Size"
        );
        assert_eq!(error_string(12345), c"Unknown Error");
    }

    /// Devices known to NVML only (none visible to the driver).
    fn test_state(totals: &[u64]) -> State {
        State {
            devices: Vec::new(),
            contexts: Default::default(),
            streams: Default::default(),
            events: Default::default(),
            allocations: Default::default(),
            host_allocations: Default::default(),
            pools: Default::default(),
            vmm: crate::vmm::Vmm::new(),
            arrays: crate::arrays::Arrays::new(),
            registered: Default::default(),
            limits: Default::default(),
            graphs: Default::default(),
            greens: Default::default(),
            machine: crate::devices::Machine {
                created: true,
                totals: totals.to_vec(),
                other_processes: Vec::new(),
                context_cost: 0,
                green_context_cost: 0,
            },
        }
    }
}
