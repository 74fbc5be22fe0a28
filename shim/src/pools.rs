//! Stream-ordered allocation: memory pools and `cuMemAllocAsync` / `cuMemFreeAsync`.
//!
//! A pool here is bookkeeping only: every allocation gets its own backing and is charged to
//! the device at once, and freeing returns the memory at once (nothing is kept in reserve,
//! so "reserved" and "used" are the same number). A pool located on the host (`HOST`,
//! `HOST_NUMA`, `HOST_NUMA_CURRENT`) charges no device. A stream-ordered allocation belongs
//! to its stream's context: destroying or resetting that context frees it.
//!
//! On a stream that is capturing, an allocation only records a graph node: it gets an
//! address (which the graph's memory will have) and nothing is allocated; a free there is a
//! node too and frees nothing. Graphs cannot be launched here (`cuGraphLaunch` is not
//! exported), so that memory never comes to exist.

use crate::abi::*;
use crate::config::MAX_DEVICES;
use crate::memory::{self, Payer, Placement};
use crate::state::{self, State};
use crate::streams;

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
    used: u64,
    used_high: u64,
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
            used: 0,
            used_high: 0,
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

/// Creates a device's default pool (at `cuInit`).
pub fn create_default(state: &mut State, device: usize) -> usize {
    let handle = state::new_handle();
    state.pools.insert(handle, Pool::new(device, true, 0));
    handle
}

/// `cuMemPoolCreate`: pinned pools on a device or on the host (any host NUMA node: the
/// simulated host has one).
pub fn create(props: &MemPoolPropsHead) -> Result<usize, CUresult> {
    let mut state = state::lock();
    match props.alloc_type {
        ALLOCATION_PINNED => {}
        // CUDA 13's managed pools are not simulated.
        ALLOCATION_MANAGED => return Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    let host = (LOCATION_HOST..=LOCATION_HOST_NUMA_CURRENT).contains(&props.location.kind);
    if !host {
        if props.location.kind != LOCATION_DEVICE {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        state
            .device(props.location.id)
            .map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    }
    let device = if host { 0 } else { props.location.id as usize };
    let mut pool = Pool::new(device, false, props.max_size as u64);
    pool.host = host;
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
    let device = &mut state.devices[device];
    if device.current_pool == handle {
        device.current_pool = device.default_pool;
    }
    Ok(())
}

/// Charges a pool for an allocation from it.
pub fn charge(state: &mut State, handle: usize, size: u64) -> Result<(), CUresult> {
    let pool = live_pool_mut(state, handle)?;
    if pool.max_size != 0 && size > pool.max_size - pool.used {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    pool.used += size;
    pool.used_high = pool.used_high.max(pool.used);
    Ok(())
}

/// Returns the charge of a freed allocation (to a pool that may have been destroyed since).
pub fn uncharge(state: &mut State, handle: usize, size: u64) {
    if let Some(pool) = state.pools.get_mut(&handle) {
        pool.used -= size;
    }
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
        (6 | 8, AttributeValue::U64(0)) => pool.used_high = pool.used,
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
        5 | 7 => AttributeValue::U64(pool.used),
        6 | 8 => AttributeValue::U64(pool.used_high),
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

/// `cuMemPoolTrimTo`: nothing is ever held in reserve, so there is nothing to trim.
pub fn trim(handle: usize) -> Result<(), CUresult> {
    live_pool(&state::lock(), handle).map(|_| ())
}

/// `cuMemAllocAsync`: from the current pool of the stream's device, owned by the stream's
/// context.
pub fn allocate_async(size: usize, stream: usize) -> Result<u64, CUresult> {
    if let Some(address) = streams::capture_allocation(stream, size)? {
        return Ok(address);
    }
    memory::allocate(size, Placement::Anywhere, |state| {
        let device = streams::device(state, stream)?;
        Ok(Payer {
            device: Some(device),
            pool: Some(state.devices[device].current_pool),
            context: streams::context(state, stream)?,
        })
    })
}

/// `cuMemAllocFromPoolAsync`: charged to the pool's device (none for a host pool), owned
/// by the stream's context.
pub fn allocate_from_pool(size: usize, pool: usize, stream: usize) -> Result<u64, CUresult> {
    live_pool(&state::lock(), pool)?;
    if let Some(address) = streams::capture_allocation(stream, size)? {
        return Ok(address);
    }
    memory::allocate(size, Placement::Anywhere, |state| {
        let context = streams::context(state, stream)?;
        let p = live_pool(state, pool)?;
        Ok(Payer {
            device: (!p.host).then_some(p.device),
            pool: Some(pool),
            context,
        })
    })
}

/// `cuMemFreeAsync`: frees at once (any device allocation, like the real driver); on a
/// capturing stream it only records a node.
pub fn free_async(dptr: u64, stream: usize) -> Result<(), CUresult> {
    streams::check(stream)?;
    if streams::capture_free(stream, dptr)? {
        return Ok(());
    }
    memory::free(dptr, false)
}
