//! Device and host allocations backed by host memory. A device pointer is simply the host
//! address of its backing, so copies are plain memory copies.
//!
//! Backing: anonymous `MAP_NORESERVE` mappings for 64 KiB and more (so multi-GiB simulated
//! allocations cost no resident memory until touched), `posix_memalign` below that, with
//! freed blocks kept for reuse (up to 256 MiB). Devices are charged the requested bytes
//! exactly.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr;
use std::sync::Mutex;

use crate::abi::*;
use crate::state::{self, State};
use crate::{context, host_register, pools, vmm};

/// Allocations of at least this size get their own anonymous mapping.
const MMAP_THRESHOLD: usize = 64 << 10;
/// Alignment of small allocations, like the real driver's minimum.
const SMALL_ALIGNMENT: usize = 256;
/// Row alignment of pitched allocations.
const PITCH_ALIGNMENT: usize = 512;

/// Where an allocation's address must lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Anywhere,
    /// Below 4 GiB, for the legacy entry points with 32-bit device pointers.
    Low32,
}

#[derive(Clone, Copy, Debug)]
enum Backing {
    Mapped { len: usize },
    Heap { size: usize },
}

/// Freed small blocks by size, newest last, reused for the next allocation of the same
/// size. Why: `posix_memalign`'s path, and with it the time an allocation or a free takes
/// here, depends on where glibc's heap happens to stand (which any other allocation in the
/// process shifts) and, with many blocks live, on consolidating free neighbours across the
/// heap; a benchmark of an interposer in front of this library then measured glibc, by
/// chance. Reused blocks make the stand-in's own cost small and the same in every run.
static SPARE: Mutex<Spare> = Mutex::new(Spare {
    by_size: BTreeMap::new(),
    bytes: 0,
});
/// At most this many bytes of spare blocks; beyond it, freed blocks go back to glibc.
const SPARE_BYTES: usize = 256 << 20;

struct Spare {
    by_size: BTreeMap<usize, Vec<usize>>,
    bytes: usize,
}

fn spare() -> std::sync::MutexGuard<'static, Spare> {
    SPARE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub struct Allocation {
    /// Requested bytes: what the device is charged.
    pub size: u64,
    /// The device charged; `None` for host memory (a host pool's allocation).
    pub device: Option<usize>,
    /// The memory pool of a stream-ordered allocation.
    pub pool: Option<usize>,
    /// The context that owns it (the current one): destroying or resetting the context
    /// frees it. 0: none (a pool allocation: see `pools`).
    pub context: usize,
    backing: Backing,
}

pub struct HostAllocation {
    pub size: usize,
    pub flags: u32,
    backing: Backing,
}

/// Who pays for a device allocation.
#[derive(Clone, Copy, Debug)]
pub struct Payer {
    /// `None`: host memory, no device is charged.
    pub device: Option<usize>,
    pub pool: Option<usize>,
    /// The owning context (0: none).
    pub context: usize,
}

impl Payer {
    /// The device of the calling thread's current context, which owns the allocation.
    pub fn current_context(state: &State) -> Result<Payer, CUresult> {
        let (context, c) = context::current(state)?;
        Ok(Payer {
            device: Some(c.device),
            pool: None,
            context: context::owner(state, context),
        })
    }
}

/// Gets `size` bytes of host memory.
fn obtain(size: usize, placement: Placement) -> Option<(usize, Backing)> {
    if size < MMAP_THRESHOLD && placement == Placement::Anywhere {
        let backing = Backing::Heap { size };
        let mut spare = spare();
        if let Some(address) = spare.by_size.get_mut(&size).and_then(Vec::pop) {
            spare.bytes -= size;
            return Some((address, backing));
        }
        drop(spare);
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: posix_memalign only writes the new block's address into `p`.
        let rc = unsafe { libc::posix_memalign(&mut p, SMALL_ALIGNMENT, size) };
        return (rc == 0 && !p.is_null()).then_some((p as usize, backing));
    }
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    if placement == Placement::Low32 {
        flags |= libc::MAP_32BIT;
    }
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing touches no
    // existing memory.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let backing = Backing::Mapped { len: size };
    if placement == Placement::Low32 && (p as usize).saturating_add(size) > u32::MAX as usize {
        release(p as usize, backing);
        return None;
    }
    Some((p as usize, backing))
}

/// Gives back memory obtained by [`obtain`].
fn release(address: usize, backing: Backing) {
    match backing {
        Backing::Heap { size } => {
            let mut spare = spare();
            if spare.bytes + size <= SPARE_BYTES {
                spare.bytes += size;
                spare.by_size.entry(size).or_default().push(address);
                return;
            }
            drop(spare);
            // SAFETY: `address` came from posix_memalign and is freed once, by its owner.
            unsafe { libc::free(address as *mut c_void) }
        }
        // SAFETY: `address..address+len` is a mapping we created and nothing else uses.
        Backing::Mapped { len } => unsafe {
            libc::munmap(address as *mut c_void, len);
        },
    }
}

/// Charges `payer` for `size` bytes: its pool (which charges its device for any growth of
/// its reservation), or else its device.
fn charge(state: &mut State, payer: Payer, size: u64) -> Result<(), CUresult> {
    if let Some(pool) = payer.pool {
        return pools::charge(state, pool, size);
    }
    match payer.device {
        Some(device) => state.devices[device].charge(size),
        None => Ok(()),
    }
}

fn uncharge(state: &mut State, payer: Payer, size: u64) {
    if let Some(pool) = payer.pool {
        return pools::uncharge(state, pool, size);
    }
    if let Some(device) = payer.device {
        state.devices[device].uncharge(size);
    }
}

/// Allocates `size` bytes of device memory for the payer that `payer` picks (with the
/// state locked) and returns the device pointer.
pub fn allocate(
    size: usize,
    placement: Placement,
    payer: impl FnOnce(&State) -> Result<Payer, CUresult>,
) -> Result<u64, CUresult> {
    let payer = {
        let mut state = state::lock();
        let payer = payer(&state)?;
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        charge(&mut state, payer, size as u64)?;
        payer
    };
    let Some((address, backing)) = obtain(size, placement) else {
        uncharge(&mut state::lock(), payer, size as u64);
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    };
    let allocation = Allocation {
        size: size as u64,
        device: payer.device,
        pool: payer.pool,
        context: payer.context,
        backing,
    };
    state::lock().allocations.insert(address as u64, allocation);
    Ok(address as u64)
}

/// Allocates on the current context's device.
pub fn allocate_current(size: usize, placement: Placement) -> Result<u64, CUresult> {
    allocate(size, placement, Payer::current_context)
}

/// Frees a device allocation. Null is a no-op; an unknown pointer is an invalid value.
/// Otherwise, with `need_context`, the calling thread must have a current context (as for
/// `cuMemFree`).
pub fn free(dptr: u64, need_context: bool) -> Result<(), CUresult> {
    if dptr == 0 {
        return Ok(());
    }
    let allocation = {
        let mut state = state::lock();
        if need_context {
            context::current(&state)?;
        }
        let Some(allocation) = state.allocations.remove(&dptr) else {
            // A graph's allocation, live after its launch, is freed the same ways.
            return crate::graphs::free_live(&mut state, dptr);
        };
        let payer = Payer {
            device: allocation.device,
            pool: allocation.pool,
            context: allocation.context,
        };
        uncharge(&mut state, payer, allocation.size);
        allocation
    };
    release(dptr as usize, allocation.backing);
    Ok(())
}

/// A context was destroyed or reset: the driver frees every allocation it owns (never a
/// pool allocation: those belong to no context, see `pools`).
pub fn free_owned_by(context: usize) {
    free_where(|a| a.context != 0 && a.context == context);
}

/// Frees every allocation `gone` picks: out of the books and uncharged under the lock, the
/// backing released after it.
pub(crate) fn free_where(gone: impl Fn(&Allocation) -> bool) {
    let freed: Vec<(u64, Allocation)> = {
        let mut state = state::lock();
        let picked: Vec<u64> = (state.allocations.iter())
            .filter(|(_, a)| gone(a))
            .map(|(&address, _)| address)
            .collect();
        picked
            .into_iter()
            .filter_map(|address| {
                let a = state.allocations.remove(&address)?;
                let payer = Payer {
                    device: a.device,
                    pool: a.pool,
                    context: a.context,
                };
                uncharge(&mut state, payer, a.size);
                Some((address, a))
            })
            .collect()
    };
    for (address, a) in freed {
        release(address as usize, a.backing);
    }
}

/// `cuMemAllocPitch`: (pitch, bytes) for `height` rows of `width` bytes.
pub fn pitch_layout(
    width: usize,
    height: usize,
    element_size: u32,
) -> Result<(usize, usize), CUresult> {
    if !matches!(element_size, 4 | 8 | 16) || width == 0 || height == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let pitch = width
        .checked_next_multiple_of(PITCH_ALIGNMENT)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let bytes = pitch.checked_mul(height).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    Ok((pitch, bytes))
}

/// `cuMemAllocManaged`: flags must be `CU_MEM_ATTACH_GLOBAL` or `CU_MEM_ATTACH_HOST`.
pub fn allocate_managed(size: usize, flags: u32) -> Result<u64, CUresult> {
    if !matches!(flags, 1 | 2) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    allocate_current(size, Placement::Anywhere)
}

/// `cuMemGetInfo`: (free, total) of the current context's device.
pub fn info() -> Result<(u64, u64), CUresult> {
    let mut state = state::lock();
    vmm::reap_closed_exports(&mut state);
    let device = &state.devices[context::current_device(&state)?];
    Ok((device.free(), device.total))
}

/// `cuMemGetAddressRange`: (base, size) of the allocation or mapping containing `dptr`.
pub fn address_range(dptr: u64) -> Result<(u64, u64), CUresult> {
    let state = state::lock();
    context::current(&state)?;
    if let Some((&base, a)) = state.allocations.range(..=dptr).next_back() {
        if dptr < base + a.size {
            return Ok((base, a.size));
        }
    }
    if let Some(range) = crate::graphs::live_range(&state, dptr, dptr + 1) {
        return Ok(range);
    }
    vmm::mapping_range(&state, dptr as usize)
        .map(|(base, size)| (base as u64, size as u64))
        .ok_or(CUDA_ERROR_NOT_FOUND)
}

/// Whether `[address, address+len)` lies in memory a device may access (with `write`, for
/// writing): one device allocation, one page-locked host allocation, or mapped virtual
/// memory with the access set.
pub fn is_device_accessible(state: &State, address: u64, len: usize, write: bool) -> bool {
    let Some(end) = address.checked_add(len as u64) else {
        return false;
    };
    if let Some((&base, a)) = state.allocations.range(..=address).next_back() {
        if end <= base + a.size {
            return true;
        }
    }
    if let Some((&base, h)) = state
        .host_allocations
        .range(..=address as usize)
        .next_back()
    {
        if end <= (base + h.size) as u64 {
            return true;
        }
    }
    // A graph's allocation while it is live after a launch.
    if crate::graphs::live_range(state, address, end).is_some() {
        return true;
    }
    // Registered host memory (`cuMemHostRegister`), unless read-only and written.
    if let Some((_, r)) = host_register::containing(state, address as usize, len) {
        return !write || r.flags & host_register::READ_ONLY == 0;
    }
    vmm::is_accessible(state, address as usize, len, write)
}

/// `cuMemHostAlloc` / `cuMemAllocHost`: page-locked host memory (never charged).
pub fn host_allocate(size: usize, flags: u32) -> Result<usize, CUresult> {
    if flags & !0x7 != 0 || size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    context::current(&state::lock())?;
    let (address, backing) = obtain(size, Placement::Anywhere).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    let allocation = HostAllocation {
        size,
        flags,
        backing,
    };
    state::lock().host_allocations.insert(address, allocation);
    Ok(address)
}

pub fn host_free(address: usize) -> Result<(), CUresult> {
    let allocation = {
        let mut state = state::lock();
        context::current(&state)?;
        state
            .host_allocations
            .remove(&address)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?
    };
    release(address, allocation.backing);
    Ok(())
}

/// The host allocation containing `address`: (base, allocation).
fn host_allocation_at(state: &State, address: usize) -> Option<(usize, &HostAllocation)> {
    let (&base, h) = state.host_allocations.range(..=address).next_back()?;
    (address < base + h.size).then_some((base, h))
}

/// `cuMemHostGetDevicePointer`: with unified addressing, the host address itself.
pub fn host_device_pointer(address: usize, flags: u32) -> Result<u64, CUresult> {
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let state = state::lock();
    context::current(&state)?;
    // Memory from cuMemHostAlloc, or the caller's own registered with cuMemHostRegister.
    let registered = host_register::containing(&state, address, 1).is_some();
    if host_allocation_at(&state, address).is_some() || registered {
        Ok(address as u64)
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    }
}

pub fn host_flags(address: usize) -> Result<u32, CUresult> {
    let state = state::lock();
    context::current(&state)?;
    host_allocation_at(&state, address)
        .map(|(_, h)| h.flags)
        .ok_or(CUDA_ERROR_INVALID_VALUE)
}

/// `cuShimStats`: (in use, peak, live allocations) of a device.
pub fn stats(device: CUdevice) -> Result<(u64, u64, u64), CUresult> {
    let mut state = state::lock();
    vmm::reap_closed_exports(&mut state);
    let d = state.device(device)?;
    Ok((d.in_use, d.peak, d.live))
}

/// `cuShimFootprint`: a device's footprint by part: (live allocations, pool cache, graph
/// memory, context memory).
pub fn footprint(device: CUdevice) -> Result<(u64, u64, u64, u64), CUresult> {
    let mut state = state::lock();
    vmm::reap_closed_exports(&mut state);
    let d = state.device(device)?;
    Ok((d.in_use, d.pool_cache, d.graph_reserved, d.context_memory))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pitch() {
        assert_eq!(pitch_layout(1, 3, 4), Ok((512, 1536)));
        assert_eq!(pitch_layout(512, 2, 8), Ok((512, 1024)));
        assert_eq!(pitch_layout(513, 2, 16), Ok((1024, 2048)));
        assert_eq!(pitch_layout(100, 1, 2), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(pitch_layout(0, 1, 4), Err(CUDA_ERROR_INVALID_VALUE));
    }

    #[test]
    fn backing_round_trip() {
        for (size, placement) in [
            (100, Placement::Anywhere),
            (1 << 20, Placement::Anywhere),
            (4096, Placement::Low32),
        ] {
            let (address, backing) = obtain(size, placement).unwrap();
            if placement == Placement::Low32 {
                assert!(address + size <= u32::MAX as usize);
            } else if size < MMAP_THRESHOLD {
                assert_eq!(address % SMALL_ALIGNMENT, 0);
            }
            // SAFETY: the block was just obtained with `size` writable bytes.
            unsafe { ptr::write_bytes(address as *mut u8, 0xab, size) };
            release(address, backing);
        }
    }
}
