//! The shim's global state, one mutex around all of it, and `cuInit`.
//!
//! One lock keeps the bookkeeping simple and consistent (a device's charge and the record of
//! the allocation it pays for change together). Slow system calls on the hot allocation path
//! (mmap, munmap) run outside it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::abi::*;
use crate::arrays::Arrays;
use crate::config::Config;
use crate::context::Context;
use crate::devices::{Device, Machine};
use crate::graphs::Graphs;
use crate::green::Greens;
use crate::host_register::Registration;
use crate::memory::{Allocation, HostAllocation};
use crate::pools::Pool;
use crate::streams::Stream;
use crate::vmm::Vmm;

pub struct State {
    pub devices: Vec<Device>,
    /// Contexts by handle, primary ones included. Destroyed contexts are removed.
    pub contexts: BTreeMap<usize, Context>,
    pub streams: BTreeMap<usize, Stream>,
    /// Events by handle, with the device of the context they were created in.
    pub events: BTreeMap<usize, usize>,
    /// Device allocations (linear, managed, stream-ordered) by base address.
    pub allocations: BTreeMap<u64, Allocation>,
    /// Page-locked host allocations by base address.
    pub host_allocations: BTreeMap<usize, HostAllocation>,
    pub pools: BTreeMap<usize, Pool>,
    pub vmm: Vmm,
    /// CUDA arrays and mipmapped arrays (see `arrays`).
    pub arrays: Arrays,
    /// Host ranges registered with `cuMemHostRegister` (see `host_register`).
    pub registered: BTreeMap<usize, Registration>,
    /// Limits set with `cuCtxSetLimit`, by (context, limit) (see `limits`).
    pub limits: BTreeMap<(usize, u32), usize>,
    /// Graphs with memory nodes, executable graphs, graph memory pools (see `graphs`).
    pub graphs: Graphs,
    /// Green contexts and resource descriptors (see `green`).
    pub greens: Greens,
    /// Every simulated device, visible to the driver or not, and what is on them besides
    /// this process's allocations (NVML's view, context memory).
    pub machine: Machine,
}

static STATE: Mutex<State> = Mutex::new(State {
    devices: Vec::new(),
    contexts: BTreeMap::new(),
    streams: BTreeMap::new(),
    events: BTreeMap::new(),
    allocations: BTreeMap::new(),
    host_allocations: BTreeMap::new(),
    pools: BTreeMap::new(),
    vmm: Vmm::new(),
    arrays: Arrays::new(),
    registered: BTreeMap::new(),
    limits: BTreeMap::new(),
    graphs: Graphs::new(),
    greens: Greens::new(),
    machine: Machine::new(),
});

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// Locks the global state, even if a panic (caught at the FFI boundary) poisoned the lock:
/// every update of the state is a few plain assignments, so there is no half-done invariant
/// to protect.
pub fn lock() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A new opaque handle value for a context, stream, event, pool or physical allocation.
/// Handles are never reused, so a stale handle is always recognised as unknown. They look
/// like pointers (non-null, 256-byte aligned) but point at nothing.
pub fn new_handle() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    const BASE: usize = 0x0cd0_0000_0000;
    BASE + NEXT.fetch_add(1, Ordering::Relaxed) * 0x100
}

pub fn is_initialized() -> bool {
    INITIALIZED.load(Ordering::Acquire)
}

/// `cuInit` with good settings: creates the simulated devices (once; later calls just
/// succeed). With none visible to the driver, `CUDA_ERROR_NO_DEVICE`.
pub fn initialize(cfg: &Config, flags: u32) -> Result<(), CUresult> {
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut state = lock();
    create_devices(&mut state, cfg);
    if state.devices.is_empty() {
        return Err(CUDA_ERROR_NO_DEVICE);
    }
    INITIALIZED.store(true, Ordering::Release);
    Ok(())
}

/// Creates the simulated devices once, one of each size in `cfg.memory` (by physical
/// index); the driver's ordinals number those `CUDA_VISIBLE_DEVICES` lets it see.
pub fn create_devices(state: &mut State, cfg: &Config) {
    if state.machine.created {
        return;
    }
    state.machine.created = true;
    state.machine.totals = cfg.memory.clone();
    state.machine.context_cost = cfg.context_memory;
    state.machine.green_context_cost = cfg.green_context_memory;
    for physical in crate::devices::visible(cfg.visible_devices.as_deref(), cfg.memory.len()) {
        let ordinal = state.devices.len();
        let default_pool = crate::pools::create_default(state, ordinal);
        let mut device = Device::new(cfg.memory[physical], default_pool);
        device.physical = physical;
        state.devices.push(device);
    }
    for &(physical, pid, bytes) in &cfg.other_processes {
        let _ = crate::nvml::set_other_process(state, physical, pid, bytes, false);
    }
}

impl State {
    /// The device with this ordinal, or `CUDA_ERROR_INVALID_DEVICE`.
    pub fn device(&self, ordinal: CUdevice) -> Result<&Device, CUresult> {
        usize::try_from(ordinal)
            .ok()
            .and_then(|i| self.devices.get(i))
            .ok_or(CUDA_ERROR_INVALID_DEVICE)
    }

    pub fn device_mut(&mut self, ordinal: CUdevice) -> Result<&mut Device, CUresult> {
        usize::try_from(ordinal)
            .ok()
            .and_then(|i| self.devices.get_mut(i))
            .ok_or(CUDA_ERROR_INVALID_DEVICE)
    }
}

/// Checks a device ordinal: its index, or `CUDA_ERROR_INVALID_DEVICE`.
pub fn device_index(ordinal: CUdevice) -> Result<usize, CUresult> {
    lock().device(ordinal).map(|_| ordinal as usize)
}

/// A device ordinal's physical index (its UUID, PCI bus id and NVML index follow it), or
/// `CUDA_ERROR_INVALID_DEVICE`.
pub fn physical_index(ordinal: CUdevice) -> Result<usize, CUresult> {
    lock().device(ordinal).map(|d| d.physical)
}

/// The ordinal of the device with this physical index, if the driver sees it.
pub fn ordinal_of_physical(state: &State, physical: usize) -> Option<usize> {
    state.devices.iter().position(|d| d.physical == physical)
}
