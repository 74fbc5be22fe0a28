//! `cuMemHostRegister` / `cuMemHostUnregister`: the caller's own host memory, page-locked
//! and made device-accessible. Device pointers are host addresses here, so registering only
//! records the range; nothing is charged (the real driver charges no device memory either).

use crate::abi::*;
use crate::context;
use crate::state::{self, State};

/// `CU_MEMHOSTREGISTER_PORTABLE | DEVICEMAP | IOMEMORY | READ_ONLY`.
const KNOWN_FLAGS: u32 = 0x0f;
/// I/O memory (a device's BAR) is not host memory the shim can stand in for.
const IOMEMORY: u32 = 0x04;
pub const READ_ONLY: u32 = 0x08;

pub struct Registration {
    pub size: usize,
    pub flags: u32,
}

/// The registration containing `[address, address+len)`, if one does: (base, registration).
pub fn containing(state: &State, address: usize, len: usize) -> Option<(usize, &Registration)> {
    let (&base, r) = state.registered.range(..=address).next_back()?;
    let end = address.checked_add(len)?;
    (end <= base + r.size).then_some((base, r))
}

/// Whether `[address, address+size)` overlaps a registration or a `cuMemHostAlloc` block.
fn overlaps(state: &State, address: usize, size: usize) -> bool {
    let end = address + size;
    let before = |base: usize, len: usize| base < end && address < base + len;
    state
        .registered
        .range(..end)
        .next_back()
        .is_some_and(|(&b, r)| before(b, r.size))
        || state
            .host_allocations
            .range(..end)
            .next_back()
            .is_some_and(|(&b, h)| before(b, h.size))
}

pub fn register(address: usize, size: usize, flags: u32) -> Result<(), CUresult> {
    if address == 0 || size == 0 || flags & !KNOWN_FLAGS != 0 || address.checked_add(size).is_none()
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut state = state::lock();
    context::current(&state)?;
    if flags & IOMEMORY != 0 {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    if overlaps(&state, address, size) {
        return Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    }
    state
        .registered
        .insert(address, Registration { size, flags });
    Ok(())
}

/// `p` must be the base address a registration was made with.
pub fn unregister(address: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    context::current(&state)?;
    state
        .registered
        .remove(&address)
        .map(|_| ())
        .ok_or(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
}
