//! Stream-ordered allocation: memory pools and `cuMemAllocAsync` / `cuMemFreeAsync`.
//!
//! A pool keeps memory, as the driver's do (CUDA driver API, `CUmemPool_attribute` and
//! `cuMemPoolTrimTo`; the programming guide's "Stream Ordered Memory Allocator"):
//!
//! * its reservation (`RESERVED_MEM_CURRENT`) grows in chunks of [`chunk`] bytes
//!   (`CUDA_SHIM_POOL_CHUNK`) when an allocation does not fit in its unused part, and only
//!   that growth is checked against the device's free memory;
//! * a free returns the memory to the pool: `USED_MEM_CURRENT` drops, the reservation stays;
//! * at a synchronisation (stream, event or context synchronize: all work here is complete
//!   at once, so every free has completed) a pool whose reservation is above its
//!   `RELEASE_THRESHOLD` (default 0) releases unused chunks down to it;
//! * `cuMemPoolTrimTo(keep)` releases unused chunks while at least `keep` bytes stay.
//!
//! The reservation is modelled without fragmentation: the chunks backing live allocations
//! are `used` rounded up to a chunk. What a device's pools reserve beyond their live
//! allocations is its `pool_cache`, part of its footprint. A pool located on the host
//! (`HOST`, `HOST_NUMA`, `HOST_NUMA_CURRENT`) charges no device.
//!
//! A pool allocation belongs to no context. cuda.h on `cuCtxDestroy`: it "will not destroy
//! memory allocations by cuMemCreate(), cuMemAllocAsync() and cuMemAllocFromPoolAsync().
//! These memory allocations are not associated with any CUDA context and need to be
//! destroyed explicitly." So destroying (or detaching the last reference of) the context
//! whose stream allocated it leaves it allocated, freeable from any context. What ends it
//! besides a free is device-wide: `cuDevicePrimaryCtxReset` "destroys and cleans up all
//! resources associated with the current device in the current process", and the primary
//! context "is automatically reset once the last reference to it is released"
//! (`cuDevicePrimaryCtxRelease`): every allocation from a pool located on that device goes,
//! and its pools release all they keep ([`device_reset`]). Allocations from pools elsewhere
//! (another device, the host) stay.
//!
//! On a stream that is capturing, an allocation only records a graph node (see `graphs`): it
//! gets the address the graph's memory will have, and nothing is allocated; a free there is
//! a node too and frees nothing until the graph runs.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::abi::*;
use crate::captures;
use crate::config::MAX_DEVICES;
use crate::memory::{self, Payer, Placement};
use crate::state::{self, State};
use crate::streams;

/// The pools' reservation granularity, set at `cuInit` from `CUDA_SHIM_POOL_CHUNK`.
static CHUNK: AtomicU64 = AtomicU64::new(crate::config::DEFAULT_POOL_CHUNK);

pub fn set_chunk(bytes: u64) {
    CHUNK.store(bytes.max(1), Ordering::Relaxed);
}

/// How many bytes a pool's (and the graph pool's) reservation grows or shrinks by.
pub fn chunk() -> u64 {
    CHUNK.load(Ordering::Relaxed)
}

/// A pool's memory: what it reserves and what its live allocations use, with their
/// high-water marks. Also the model of the per-device graph memory pool (see `graphs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reservation {
    pub reserved: u64,
    pub used: u64,
    pub reserved_high: u64,
    pub used_high: u64,
}

impl Reservation {
    /// How much the reservation must grow for `size` more bytes in use: nothing if its
    /// unused part holds them, else the shortfall rounded up to a chunk (capped at `limit`
    /// total reservation, 0: none). `None`: over the limit.
    pub fn growth(&self, size: u64, chunk: u64, limit: u64) -> Option<u64> {
        let unused = self.reserved - self.used;
        if size <= unused {
            return Some(0);
        }
        let short = size - unused;
        let grow = short.checked_next_multiple_of(chunk.max(1))?;
        if limit == 0 {
            return Some(grow);
        }
        let room = limit.saturating_sub(self.reserved);
        (short <= room).then_some(grow.min(room))
    }

    /// Puts `size` bytes in use after the reservation grew by `growth`.
    pub fn take(&mut self, size: u64, growth: u64) {
        self.reserved += growth;
        self.used += size;
        self.reserved_high = self.reserved_high.max(self.reserved);
        self.used_high = self.used_high.max(self.used);
    }

    /// `size` bytes freed: back in the reservation, unused.
    pub fn give_back(&mut self, size: u64) {
        self.used -= size;
    }

    /// Releases unused chunks while at least `keep` bytes stay reserved (the chunks under
    /// live allocations always stay); returns the bytes released.
    pub fn trim_to(&mut self, keep: u64, chunk: u64) -> u64 {
        let chunk = chunk.max(1);
        let floor = keep.max(self.used);
        let stays = floor
            .checked_next_multiple_of(chunk)
            .map_or(self.reserved, |n| n.min(self.reserved));
        let released = self.reserved - stays;
        self.reserved = stays;
        released
    }
}

pub struct Pool {
    pub device: usize,
    /// Located on the host: its allocations charge no device (`device` is then 0).
    host: bool,
    is_default: bool,
    destroyed: bool,
    /// `CU_MEMPOOL_ATTR_REUSE_*` (attributes 1 to 3).
    reuse: [i32; 3],
    release_threshold: u64,
    /// 0: no limit.
    max_size: u64,
    memory: Reservation,
    /// `CUmemAccess_flags` granted to each device; the owner's is always read-write.
    access: [i32; MAX_DEVICES],
}

/// The C type of a pool attribute's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttributeValue {
    Int(i32),
    U64(u64),
}

impl Pool {
    fn new(device: usize, is_default: bool, max_size: u64) -> Self {
        Pool {
            device,
            host: false,
            is_default,
            destroyed: false,
            reuse: [1; 3],
            release_threshold: 0,
            max_size,
            memory: Reservation::default(),
            access: std::array::from_fn(|d| if d == device { ACCESS_READ_WRITE } else { 0 }),
        }
    }
}

fn live_pool(state: &State, handle: usize) -> Result<&Pool, CUresult> {
    match state.pools.get(&handle) {
        Some(pool) if !pool.destroyed => Ok(pool),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

fn live_pool_mut(state: &mut State, handle: usize) -> Result<&mut Pool, CUresult> {
    match state.pools.get_mut(&handle) {
        Some(pool) if !pool.destroyed => Ok(pool),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// The device a pool's memory is on; `None` for a host pool.
fn location(state: &State, handle: usize) -> Option<usize> {
    state
        .pools
        .get(&handle)
        .and_then(|p| (!p.host).then_some(p.device))
}

/// Creates a device's default pool (at `cuInit`).
pub fn create_default(state: &mut State, device: usize) -> usize {
    let handle = state::new_handle();
    state.pools.insert(handle, Pool::new(device, true, 0));
    handle
}

/// `cuMemPoolCreate`: pinned pools on a device, a device's locality domain or the host (any
/// host NUMA node: the simulated host has one).
pub fn create(props: &MemPoolPropsHead) -> Result<usize, CUresult> {
    let mut state = state::lock();
    match props.alloc_type {
        ALLOCATION_PINNED => {}
        // CUDA 13's managed pools are not simulated.
        ALLOCATION_MANAGED => return Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    // A device (or a locality domain of one: "a memory pool created with
    // ::CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN and localityDomainId 0 is equivalent to
    // a full-device memory pool"), or the host; anything else is invalid.
    let device = props.location.device(state.devices.len())?;
    let mut pool = Pool::new(device.unwrap_or(0), false, props.max_size as u64);
    pool.host = device.is_none();
    let handle = state::new_handle();
    state.pools.insert(handle, pool);
    Ok(handle)
}

/// `cuMemPoolDestroy`. Allocations still live stay valid and can be freed.
pub fn destroy(handle: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    let pool = live_pool_mut(&mut state, handle)?;
    if pool.is_default {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    pool.destroyed = true;
    let device = pool.device;
    // Its unused memory goes now, the rest once its last allocation is freed.
    trim(&mut state, handle, 0);
    let device = &mut state.devices[device];
    if device.current_pool == handle {
        device.current_pool = device.default_pool;
    }
    Ok(())
}

/// Charges an allocation of `size` bytes from a pool: its unused reservation first, then
/// growth in chunks, which must fit on the pool's device (unless it is a host pool). The
/// device's live allocations count it; its pool cache changes by the growth minus `size`.
pub fn charge(state: &mut State, handle: usize, size: u64) -> Result<(), CUresult> {
    let pool = live_pool(state, handle)?;
    let growth = pool
        .memory
        .growth(size, chunk(), pool.max_size)
        .ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    let (device, host) = (pool.device, pool.host);
    if !host {
        let device = &mut state.devices[device];
        if !device.fits(growth) {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        device.in_use += size;
        device.peak = device.peak.max(device.in_use);
        device.live += 1;
        device.pool_cache = device.pool_cache + growth - size;
    }
    if let Some(pool) = state.pools.get_mut(&handle) {
        pool.memory.take(size, growth);
    }
    Ok(())
}

/// Returns a freed allocation to its pool (which may have been destroyed since: then it
/// releases what no allocation uses any more).
pub fn uncharge(state: &mut State, handle: usize, size: u64) {
    let Some(pool) = state.pools.get_mut(&handle) else {
        return;
    };
    pool.memory.give_back(size);
    let (device, host, destroyed) = (pool.device, pool.host, pool.destroyed);
    if !host {
        let device = &mut state.devices[device];
        device.in_use -= size;
        device.live -= 1;
        device.pool_cache += size;
    }
    if destroyed {
        trim(state, handle, 0);
    }
}

/// Releases a pool's unused chunks while at least `keep` bytes stay reserved, and gives
/// them back to its device; returns the bytes released.
fn trim(state: &mut State, handle: usize, keep: u64) -> u64 {
    let Some(pool) = state.pools.get_mut(&handle) else {
        return 0;
    };
    let released = pool.memory.trim_to(keep, chunk());
    if !pool.host {
        state.devices[pool.device].pool_cache -= released;
    }
    released
}

/// A synchronisation observed on `device`: its pools release what they keep above their
/// release thresholds.
pub fn synchronized(state: &mut State, device: usize) {
    let over: Vec<(usize, u64)> = state
        .pools
        .iter()
        .filter(|(_, p)| !p.host && p.device == device)
        .filter(|(_, p)| p.memory.reserved > p.release_threshold)
        .map(|(&h, p)| (h, p.release_threshold))
        .collect();
    for (handle, threshold) in over {
        trim(state, handle, threshold);
    }
}

/// `cuDevicePrimaryCtxReset` ("destroys and cleans up all resources associated with the
/// current device in the current process"), also the release of the primary context's last
/// reference: every allocation from a pool located on `device` is freed, whichever context's
/// stream made it, the device's pools release every chunk, whatever their thresholds, and
/// its graph memory goes (see `graphs::device_reset`).
pub fn device_reset(device: usize) {
    memory::free_where(|a| a.pool.is_some() && a.device == Some(device));
    let mut state = state::lock();
    let handles: Vec<usize> = state
        .pools
        .iter()
        .filter(|(_, p)| !p.host && p.device == device)
        .map(|(&h, _)| h)
        .collect();
    for handle in handles {
        trim(&mut state, handle, 0);
    }
    crate::graphs::device_reset(&mut state, device);
}

/// `cuStreamSynchronize`: the stream's device (the current context's for the default
/// streams) is synchronized.
pub fn synchronize_stream(stream: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    let device = streams::device(&state, stream)?;
    synchronized(&mut state, device);
    Ok(())
}

/// `cuCtxSynchronize`: the current context's device is synchronized.
pub fn synchronize_current() -> Result<(), CUresult> {
    let mut state = state::lock();
    let device = crate::context::current_device(&state)?;
    synchronized(&mut state, device);
    Ok(())
}

/// `cuEventSynchronize`: the event's device is synchronized.
pub fn synchronize_event(event: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    let device = streams::event_device(&state, event)?;
    synchronized(&mut state, device);
    Ok(())
}

/// CUDA 13's default pool of the host (`cuMemGetDefaultMemPool` for a host location): one,
/// made at its first request (the simulated host has one NUMA node).
pub fn host_default_pool() -> usize {
    static HOST_POOL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut state = state::lock();
    match HOST_POOL.load(std::sync::atomic::Ordering::Relaxed) {
        0 => {
            let handle = state::new_handle();
            let mut pool = Pool::new(0, true, 0);
            pool.host = true;
            state.pools.insert(handle, pool);
            HOST_POOL.store(handle, std::sync::atomic::Ordering::Relaxed);
            handle
        }
        handle => handle,
    }
}

pub fn default_pool(device: CUdevice) -> Result<usize, CUresult> {
    state::lock().device(device).map(|d| d.default_pool)
}

pub fn current_pool(device: CUdevice) -> Result<usize, CUresult> {
    state::lock().device(device).map(|d| d.current_pool)
}

/// `cuDeviceSetMemPool`: the pool must belong to the device.
pub fn set_current_pool(device: CUdevice, handle: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    state.device(device)?;
    let pool = live_pool(&state, handle)?;
    if pool.host || pool.device != device as usize {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    state.device_mut(device)?.current_pool = handle;
    Ok(())
}

/// Whether attribute `attribute` takes an `int` (else a `cuuint64_t`).
pub fn attribute_is_int(attribute: i32) -> Result<bool, CUresult> {
    match attribute {
        1..=3 => Ok(true),
        4..=8 => Ok(false),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

pub fn set_attribute(handle: usize, attribute: i32, value: AttributeValue) -> Result<(), CUresult> {
    let mut state = state::lock();
    let pool = live_pool_mut(&mut state, handle)?;
    match (attribute, value) {
        (1..=3, AttributeValue::Int(v)) => pool.reuse[attribute as usize - 1] = v,
        (4, AttributeValue::U64(v)) => pool.release_threshold = v,
        // Resetting a high-water mark: the only value allowed is 0.
        (6, AttributeValue::U64(0)) => pool.memory.reserved_high = pool.memory.reserved,
        (8, AttributeValue::U64(0)) => pool.memory.used_high = pool.memory.used,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    Ok(())
}

pub fn get_attribute(handle: usize, attribute: i32) -> Result<AttributeValue, CUresult> {
    let state = state::lock();
    let pool = live_pool(&state, handle)?;
    Ok(match attribute {
        1..=3 => AttributeValue::Int(pool.reuse[attribute as usize - 1]),
        4 => AttributeValue::U64(pool.release_threshold),
        5 => AttributeValue::U64(pool.memory.reserved),
        6 => AttributeValue::U64(pool.memory.reserved_high),
        7 => AttributeValue::U64(pool.memory.used),
        8 => AttributeValue::U64(pool.memory.used_high),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

/// `cuMemPoolSetAccess`: per-device access to the pool's allocations. The owner always
/// keeps read-write access; a request to lower it is refused.
pub fn set_access(handle: usize, descs: &[MemAccessDesc]) -> Result<(), CUresult> {
    let mut state = state::lock();
    for desc in descs {
        if desc.location.kind != LOCATION_DEVICE || !matches!(desc.flags, 0 | 1 | 3) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        state.device(desc.location.id)?;
    }
    let pool = live_pool_mut(&mut state, handle)?;
    for desc in descs {
        let device = desc.location.id as usize;
        if device == pool.device && desc.flags != ACCESS_READ_WRITE {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
    }
    for desc in descs {
        pool.access[desc.location.id as usize] = desc.flags;
    }
    Ok(())
}

/// `cuMemPoolGetAccess`.
pub fn get_access(handle: usize, location: MemLocation) -> Result<i32, CUresult> {
    let state = state::lock();
    if location.kind != LOCATION_DEVICE {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    state.device(location.id)?;
    Ok(live_pool(&state, handle)?.access[location.id as usize])
}

/// `cuMemPoolTrimTo`: "if the pool has less than `keep` reserved, a no-op; otherwise the
/// pool is guaranteed to have at least `keep` bytes reserved after".
pub fn trim_to(handle: usize, keep: u64) -> Result<(), CUresult> {
    let mut state = state::lock();
    live_pool(&state, handle)?;
    trim(&mut state, handle, keep);
    Ok(())
}

/// `cuMemAllocAsync`: from the current pool of the stream's device, owned by no context.
pub fn allocate_async(size: usize, stream: usize) -> Result<u64, CUresult> {
    let captured = captures::allocation(stream, size, |state| {
        let device = streams::device(state, stream)?;
        Ok(location(state, state.devices[device].current_pool))
    })?;
    if let Some(address) = captured {
        return Ok(address);
    }
    memory::allocate(size, Placement::Anywhere, |state| {
        let device = streams::device(state, stream)?;
        Ok(Payer {
            device: Some(device),
            pool: Some(state.devices[device].current_pool),
            context: 0,
        })
    })
}

/// `cuMemAllocFromPoolAsync`: charged to the pool's device (none for a host pool), owned
/// by no context.
pub fn allocate_from_pool(size: usize, pool: usize, stream: usize) -> Result<u64, CUresult> {
    live_pool(&state::lock(), pool)?;
    let captured = captures::allocation(stream, size, |state| Ok(location(state, pool)))?;
    if let Some(address) = captured {
        return Ok(address);
    }
    memory::allocate(size, Placement::Anywhere, |state| {
        // The stream must be valid (its context alive), though it owns nothing.
        streams::context(state, stream)?;
        let p = live_pool(state, pool)?;
        Ok(Payer {
            device: (!p.host).then_some(p.device),
            pool: Some(pool),
            context: 0,
        })
    })
}

/// `cuMemFreeAsync`: frees at once (any device allocation, like the real driver); on a
/// capturing stream it only records a node.
pub fn free_async(dptr: u64, stream: usize) -> Result<(), CUresult> {
    streams::check(stream)?;
    if captures::free(stream, dptr)? {
        return Ok(());
    }
    memory::free(dptr, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const CHUNK: u64 = 2 * MIB;

    #[test]
    fn reservations_grow_in_chunks_and_reuse_what_is_unused() {
        let mut r = Reservation::default();
        assert_eq!(r.growth(3 * MIB, CHUNK, 0), Some(4 * MIB));
        r.take(3 * MIB, 4 * MIB);
        // 1 MiB unused: a 1 MiB allocation needs nothing more, 2 MiB a chunk.
        assert_eq!(r.growth(MIB, CHUNK, 0), Some(0));
        assert_eq!(r.growth(2 * MIB, CHUNK, 0), Some(2 * MIB));
        r.give_back(3 * MIB);
        assert_eq!((r.reserved, r.used), (4 * MIB, 0));
        assert_eq!(r.growth(4 * MIB, CHUNK, 0), Some(0));
        assert_eq!((r.reserved_high, r.used_high), (4 * MIB, 3 * MIB));
    }

    #[test]
    fn a_maximum_size_caps_the_reservation() {
        let r = Reservation::default();
        assert_eq!(r.growth(3 * MIB, CHUNK, 3 * MIB), Some(3 * MIB));
        assert_eq!(r.growth(3 * MIB + 1, CHUNK, 3 * MIB), None);
    }

    #[test]
    fn trimming_keeps_at_least_what_is_asked_and_what_live_allocations_use() {
        let mut r = Reservation::default();
        r.take(MIB, 8 * MIB);
        // keep 5 MiB: one chunk at a time while at least 5 MiB stay
        assert_eq!(r.trim_to(5 * MIB, CHUNK), 2 * MIB);
        assert_eq!(r.reserved, 6 * MIB);
        // the chunk under the live MiB stays
        assert_eq!(r.trim_to(0, CHUNK), 4 * MIB);
        assert_eq!(r.reserved, 2 * MIB);
        // asking to keep more than it has: nothing happens
        assert_eq!(r.trim_to(16 * MIB, CHUNK), 0);
        r.give_back(MIB);
        // a reservation capped by a pool's maximum size goes entirely too
        let mut capped = Reservation::default();
        capped.take(0, 3 * MIB);
        assert_eq!(capped.trim_to(MIB, CHUNK), MIB);
        assert_eq!(capped.trim_to(0, CHUNK), 2 * MIB);
        assert_eq!(r.trim_to(0, CHUNK), 2 * MIB);
        assert_eq!(r.reserved, 0);
    }
}
