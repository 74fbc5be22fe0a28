//! Virtual memory management: physical allocations (`cuMemCreate`) backed by memfds, address
//! reservations (`PROT_NONE` anonymous mappings), and mappings of the one into the other.
//!
//! A physical allocation located on a device is charged to that device from `cuMemCreate`
//! until it is both released and unmapped everywhere, as with the real driver.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::devices::VMM_GRANULARITY;
use crate::state::{self, State};

/// The allocation properties given to `cuMemCreate`, kept for
/// `cuMemGetAllocationPropertiesFromHandle`.
#[derive(Clone, Copy)]
struct StoredProp {
    kind: i32,
    requested_handle_types: i32,
    location: MemLocation,
    win32_handle_metadata: usize,
    alloc_flags: [u8; 8],
}

struct Physical {
    fd: c_int,
    size: usize,
    prop: StoredProp,
    /// The device charged for it, if it is device memory.
    device: Option<usize>,
    /// Handle references: one from `cuMemCreate`, one per `cuMemRetainAllocationHandle`, one
    /// per import of its own export.
    refs: u32,
    /// Number of mappings of it.
    maps: u32,
    /// Descriptors `cuMemExportToShareableHandle` gave (duplicates of `fd`): "Once all
    /// shareable handles are closed and the allocation is released, the allocated memory
    /// referenced will be released", so each keeps the memory while it is open.
    exports: Vec<c_int>,
}

impl Physical {
    /// Forgets the exports closed since (or whose number now names another file); true if
    /// one is still open.
    fn exports_open(&mut self) -> bool {
        let own = file_id(self.fd).map(|(d, i, _)| (d, i));
        self.exports
            .retain(|&fd| own.is_some() && file_id(fd).map(|(d, i, _)| (d, i)) == own);
        !self.exports.is_empty()
    }
}

struct Mapping {
    size: usize,
    handle: u64,
    /// The `CUmemAccess_flags` last set: 0 none, 1 read, 3 read-write.
    access: i32,
}

/// Where `cuMemMapArrayAsync` mapped memory: (resource type, resource, subresource type,
/// subresource bytes); a deferred-mapping array's is the whole array (subresource zeroed).
type ArraySlot = (i32, usize, i32, [u64; 4]);

pub struct Vmm {
    handles: BTreeMap<u64, Physical>,
    /// Reserved address ranges: base to size.
    reservations: BTreeMap<usize, usize>,
    /// Mapped ranges by base address.
    mappings: BTreeMap<usize, Mapping>,
    /// Tile-pool memory mapped into sparse and deferred-mapping arrays: slot → handle.
    array_mappings: BTreeMap<ArraySlot, u64>,
}

impl Vmm {
    pub const fn new() -> Self {
        Vmm {
            handles: BTreeMap::new(),
            reservations: BTreeMap::new(),
            mappings: BTreeMap::new(),
            array_mappings: BTreeMap::new(),
        }
    }

    /// The bases of the mappings that exactly tile `[address, address+size)`, if they do.
    fn tiling(&self, address: usize, size: usize) -> Option<Vec<usize>> {
        let end = address.checked_add(size)?;
        let mut bases = Vec::new();
        let mut next = address;
        for (&base, mapping) in self.mappings.range(address..end) {
            if base != next {
                return None;
            }
            bases.push(base);
            next = base + mapping.size;
        }
        (next == end && !bases.is_empty()).then_some(bases)
    }

    /// The mapping containing `address`: (base, mapping).
    fn mapping_at(&self, address: usize) -> Option<(usize, &Mapping)> {
        let (&base, mapping) = self.mappings.range(..=address).next_back()?;
        (address < base + mapping.size).then_some((base, mapping))
    }
}

/// Checks allocation properties; returns the device to charge (None for host memory).
fn check_prop(state: &State, prop: &MemAllocationProp) -> Result<Option<usize>, CUresult> {
    if prop.kind != ALLOCATION_PINNED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match prop.location.kind {
        LOCATION_DEVICE => state
            .device(prop.location.id)
            .map(|_| Some(prop.location.id as usize)),
        // cuda.h: "will localize the allocation to the specified locality domain" of
        // `localized.deviceId` (see `MemLocation::device`).
        LOCATION_DEVICE_LOCALITY_DOMAIN => prop.location.device(state.devices.len()),
        LOCATION_HOST | LOCATION_HOST_NUMA | LOCATION_HOST_NUMA_CURRENT => Ok(None),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

fn is_granular(n: usize) -> bool {
    n.is_multiple_of(VMM_GRANULARITY)
}

/// `cuMemGetAllocationGranularity`: 2 MiB, minimum and recommended alike.
pub fn granularity(prop: &MemAllocationProp, option: i32) -> Result<usize, CUresult> {
    check_prop(&state::lock(), prop)?;
    match option {
        0 | 1 => Ok(VMM_GRANULARITY),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// A memfd of `size` bytes (sparse: costs nothing until touched), named for its location
/// (`cuquota-shim-dev<N>` on device N), so that a process importing it can tell.
fn memfd(size: usize, device: Option<usize>) -> Option<c_int> {
    let name = match device {
        Some(d) => format!("{MEMFD_PREFIX}{d}\0"),
        None => format!("{HOST_MEMFD}\0"),
    };
    // The system call, not glibc's wrapper (glibc 2.27), so that the shim loads on glibc 2.17
    // (the manylinux2014 wheel).
    // SAFETY: the name is a NUL-terminated string; the call creates a new file descriptor.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_memfd_create,
            name.as_ptr(),
            libc::MFD_CLOEXEC as libc::c_uint,
        )
    } as c_int;
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is the descriptor just created and owned here.
    if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
        // SAFETY: as above; closed once.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(fd)
}

/// `cuMemCreate`. Needs no current context.
pub fn create(size: usize, prop: &MemAllocationProp, flags: u64) -> Result<u64, CUresult> {
    if flags != 0 || size == 0 || !is_granular(size) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut state = state::lock();
    reap_closed_exports(&mut state);
    let device = check_prop(&state, prop)?;
    if let Some(d) = device {
        state.devices[d].charge(size as u64)?;
    }
    let Some(fd) = memfd(size, device) else {
        if let Some(d) = device {
            state.devices[d].uncharge(size as u64);
        }
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    };
    let handle = state::new_handle() as u64;
    let physical = Physical {
        fd,
        size,
        prop: StoredProp {
            kind: prop.kind,
            requested_handle_types: prop.requested_handle_types,
            // Localized to the one locality domain of a simulated device: "equivalent to a
            // full-device allocation ... The resulting allocation will be of type
            // ::CU_MEM_LOCATION_TYPE_DEVICE".
            location: match (prop.location.kind, device) {
                (LOCATION_DEVICE_LOCALITY_DOMAIN, Some(d)) => MemLocation {
                    kind: LOCATION_DEVICE,
                    id: d as i32,
                },
                _ => prop.location,
            },
            win32_handle_metadata: prop.win32_handle_metadata as usize,
            alloc_flags: prop.alloc_flags,
        },
        device,
        refs: 1,
        maps: 0,
        exports: Vec::new(),
    };
    state.vmm.handles.insert(handle, physical);
    Ok(handle)
}

/// Frees a physical allocation once nothing refers to it any more: no handle reference, no
/// mapping, no export still open (cuda.h on `cuMemRelease`: "when all outstanding mappings
/// to the memory are unmapped and when all outstanding references to the handle (including
/// it's shareable counterparts) are also released").
fn destroy_if_unused(state: &mut State, handle: u64) {
    let unused = match state.vmm.handles.get_mut(&handle) {
        Some(p) if p.refs == 0 && p.maps == 0 => !p.exports_open(),
        _ => false,
    };
    if !unused {
        return;
    }
    if let Some(physical) = state.vmm.handles.remove(&handle) {
        // SAFETY: the descriptor belongs to this allocation and is closed once.
        unsafe { libc::close(physical.fd) };
        if let Some(d) = physical.device {
            state.devices[d].uncharge(physical.size as u64);
        }
    }
}

/// Frees the allocations that only an export kept, if their exports were closed since (no
/// call announces a `close`): looked at before the shim's figures are read (its own,
/// `cuMemGetInfo`, NVML's) and before a `cuMemCreate` is charged.
pub fn reap_closed_exports(state: &mut State) {
    let kept: Vec<u64> = (state.vmm.handles.iter())
        .filter(|(_, p)| p.refs == 0 && p.maps == 0)
        .map(|(&h, _)| h)
        .collect();
    for handle in kept {
        destroy_if_unused(state, handle);
    }
}

/// `cuMemMapArrayAsync`: maps tile-pool memory into (or unmaps it from) sparse and
/// deferred-mapping arrays. cuda.h: "The tile pool allocation has to be created by
/// specifying the ::CU_MEM_CREATE_USAGE_TILE_POOL flag", `memHandleType` must be
/// `CU_MEM_HANDLE_TYPE_GENERIC`, an unmap's `memHandle` "must be NULL", `deviceBitMask`
/// "must have exactly one bit set, and the corresponding device must match the device
/// associated with the stream" (and the tile pool's, for a map), `flags` and `reserved`
/// zero. A mapping counts as one of its allocation's: the memory is freed only "when all
/// outstanding mappings to the memory are unmapped" (`cuMemRelease`). Every entry is
/// checked before any is applied; all the stream's work is complete at once here.
/// Tile alignment and extents are not checked (the shim keeps no array contents).
pub fn map_array(infos: &[ArrayMapInfo], stream: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    let stream_device = crate::streams::device(&state, stream)?;
    let mut slots = Vec::with_capacity(infos.len());
    for info in infos {
        let (device, deferred) =
            crate::arrays::mappable(&state, info.resource_type, info.resource)?;
        let one_device = info.device_mask.count_ones() == 1
            && info.device_mask.trailing_zeros() as usize == stream_device
            && device == stream_device;
        if info.handle_type != 0 || info.flags != 0 || info.reserved != [0; 2] || !one_device {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let slot: ArraySlot = match deferred {
            true => (info.resource_type, info.resource, 0, [0; 4]),
            false => (
                info.resource_type,
                info.resource,
                info.subresource_type,
                info.subresource,
            ),
        };
        match info.operation {
            MEM_OPERATION_MAP => {
                let p = state.vmm.handles.get(&info.handle);
                let usage =
                    p.map(|p| u16::from_ne_bytes([p.prop.alloc_flags[2], p.prop.alloc_flags[3]]));
                let tile_pool = usage.is_some_and(|u| u & CREATE_USAGE_TILE_POOL != 0);
                match p {
                    Some(p) if p.refs > 0 && tile_pool && p.device == Some(device) => {}
                    _ => return Err(CUDA_ERROR_INVALID_VALUE),
                }
            }
            MEM_OPERATION_UNMAP if info.handle == 0 => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        slots.push((slot, info.operation, info.handle));
    }
    for (slot, operation, handle) in slots {
        let gone = match operation {
            MEM_OPERATION_MAP => {
                if let Some(p) = state.vmm.handles.get_mut(&handle) {
                    p.maps += 1;
                }
                state.vmm.array_mappings.insert(slot, handle)
            }
            _ => state.vmm.array_mappings.remove(&slot),
        };
        // What was mapped there before (a remap, or the unmapped memory) is one mapping less.
        if let Some(old) = gone {
            if let Some(p) = state.vmm.handles.get_mut(&old) {
                p.maps -= 1;
            }
            destroy_if_unused(&mut state, old);
        }
    }
    Ok(())
}

/// The name of a device allocation's memfd, before the ordinal.
const MEMFD_PREFIX: &str = "cuquota-shim-dev";
/// The name of a host allocation's memfd.
const HOST_MEMFD: &str = "cuquota-shim-host";

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`, the one shareable handle type simulated (a
/// file descriptor can honestly be passed between processes; Win32 and fabric handles
/// cannot be, and get `CUDA_ERROR_NOT_SUPPORTED`).
const HANDLE_TYPE_POSIX_FD: i32 = 1;

/// `cuMemExportToShareableHandle` as a POSIX file descriptor: a new descriptor of the
/// allocation's memfd, which the caller owns (and may pass to another process). The type
/// must have been requested at `cuMemCreate`.
pub fn export(handle: u64, kind: i32, flags: u64) -> Result<c_int, CUresult> {
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if kind != HANDLE_TYPE_POSIX_FD {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    let mut state = state::lock();
    let physical = match state.vmm.handles.get_mut(&handle) {
        Some(p) if p.refs > 0 && p.prop.requested_handle_types & HANDLE_TYPE_POSIX_FD != 0 => p,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    // SAFETY: `fd` is the allocation's open descriptor; dup makes a new one.
    let exported = unsafe { libc::dup(physical.fd) };
    if exported < 0 {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    physical.exports.push(exported);
    Ok(exported)
}

/// Where a shim memfd's memory is, from its name (`/memfd:cuquota-shim-devN (deleted)`,
/// `/memfd:cuquota-shim-host (deleted)`); None for any other file.
fn memfd_location(fd: c_int) -> Option<MemLocation> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let name = link.to_str()?.strip_prefix("/memfd:")?;
    let name = name.strip_suffix(" (deleted)").unwrap_or(name);
    if name == HOST_MEMFD {
        return Some(MemLocation {
            kind: LOCATION_HOST,
            id: 0,
        });
    }
    let id = name.strip_prefix(MEMFD_PREFIX)?.parse().ok()?;
    Some(MemLocation {
        kind: LOCATION_DEVICE,
        id,
    })
}

/// (device, inode) of an open file, to recognise one of this process's own allocations.
fn file_id(fd: c_int) -> Option<(u64, u64, usize)> {
    // SAFETY: an all-zero stat is a valid value; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer; a bad descriptor only makes fstat fail.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((
        st.st_dev as u64,
        st.st_ino as u64,
        st.st_size as usize,
    ))
}

/// `cuMemImportFromShareableHandle` of a POSIX file descriptor another process of the shim
/// exported: a new handle to that memory (at the location it was made at), with one
/// reference. The memory belongs to the exporting process and is charged there, not here.
/// An import of this process's own allocation gives its handle with one more reference:
/// "Each time a recipient process imports a shareable handle, it needs to pair it with
/// ::cuMemRelease for the handle to be freed" (whether the real driver gives the same value
/// is a question `scripts/gpu-check.sh`'s `questions` check asks it).
pub fn import(os_handle: usize, kind: i32) -> Result<u64, CUresult> {
    if kind != HANDLE_TYPE_POSIX_FD {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    let fd = c_int::try_from(os_handle).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    let (dev, ino, size) = file_id(fd).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let location = memfd_location(fd).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if size == 0 || !is_granular(size) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut state = state::lock();
    let own = (state.vmm.handles.iter_mut())
        .find(|(_, p)| file_id(p.fd).is_some_and(|(d, i, _)| (d, i) == (dev, ino)));
    if let Some((&handle, physical)) = own {
        physical.refs += 1;
        return Ok(handle);
    }
    // SAFETY: `fd` is the caller's open descriptor; this makes a new one the shim owns.
    let fd = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let handle = state::new_handle() as u64;
    let physical = Physical {
        fd,
        size,
        prop: StoredProp {
            kind: ALLOCATION_PINNED,
            requested_handle_types: HANDLE_TYPE_POSIX_FD,
            location,
            win32_handle_metadata: 0,
            alloc_flags: [0; 8],
        },
        // the exporting process's memory: not charged to this one
        device: None,
        refs: 1,
        maps: 0,
        exports: Vec::new(),
    };
    state.vmm.handles.insert(handle, physical);
    Ok(handle)
}

/// `cuMemRelease`: drops one handle reference.
pub fn release(handle: u64) -> Result<(), CUresult> {
    let mut state = state::lock();
    match state.vmm.handles.get_mut(&handle) {
        Some(p) if p.refs > 0 => p.refs -= 1,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    destroy_if_unused(&mut state, handle);
    Ok(())
}

/// `cuMemRetainAllocationHandle`: the handle mapped at `address`, with one more reference.
pub fn retain(address: usize) -> Result<u64, CUresult> {
    let mut state = state::lock();
    let handle = state
        .vmm
        .mapping_at(address)
        .map(|(_, m)| m.handle)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if let Some(p) = state.vmm.handles.get_mut(&handle) {
        p.refs += 1;
    }
    Ok(handle)
}

/// `cuMemGetAllocationPropertiesFromHandle`.
pub fn properties(handle: u64) -> Result<MemAllocationProp, CUresult> {
    let state = state::lock();
    let p = match state.vmm.handles.get(&handle) {
        Some(p) if p.refs > 0 => p.prop,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    Ok(MemAllocationProp {
        kind: p.kind,
        requested_handle_types: p.requested_handle_types,
        location: p.location,
        win32_handle_metadata: p.win32_handle_metadata as *mut c_void,
        alloc_flags: p.alloc_flags,
    })
}

/// An inaccessible, unbacked anonymous mapping; with `at`, exactly there (replacing what
/// is mapped there, which the caller must own).
fn map_none(at: Option<usize>, size: usize) -> Option<usize> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    if at.is_some() {
        flags |= libc::MAP_FIXED;
    }
    let address = at.unwrap_or(0) as *mut c_void;
    // SAFETY: either the kernel picks a free range, or (MAP_FIXED) the range is one of our
    // reservations, which nothing but this module uses.
    let p = unsafe { libc::mmap(address, size, libc::PROT_NONE, flags, -1, 0) };
    (p != libc::MAP_FAILED).then_some(p as usize)
}

fn unmap_range(address: usize, size: usize) {
    if size > 0 {
        // SAFETY: the range is part of a reservation made by this module.
        unsafe { libc::munmap(address as *mut c_void, size) };
    }
}

/// `cuMemAddressReserve`: `size` bytes of address space aligned to at least the granularity,
/// at `hint` if that is free.
pub fn reserve(size: usize, alignment: usize, hint: usize, flags: u64) -> Result<usize, CUresult> {
    if flags != 0 || size == 0 || !is_granular(size) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if alignment != 0 && !alignment.is_power_of_two() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let alignment = alignment.max(VMM_GRANULARITY);
    let base = reserve_at_hint(hint, size, alignment).or_else(|| {
        let padded = size.checked_add(alignment)?;
        let start = map_none(None, padded)?;
        let base = start.next_multiple_of(alignment);
        unmap_range(start, base - start);
        unmap_range(base + size, start + padded - (base + size));
        Some(base)
    });
    let base = base.ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    state::lock().vmm.reservations.insert(base, size);
    Ok(base)
}

fn reserve_at_hint(hint: usize, size: usize, alignment: usize) -> Option<usize> {
    if hint == 0 || !hint.is_multiple_of(alignment) {
        return None;
    }
    let flags =
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE;
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; older kernels treat
    // the address as a plain hint, and a different result is unmapped below.
    let p = unsafe { libc::mmap(hint as *mut c_void, size, libc::PROT_NONE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return None;
    }
    if p as usize != hint {
        unmap_range(p as usize, size);
        return None;
    }
    Some(hint)
}

/// `cuMemAddressFree`: frees a whole reservation, unmapping whatever is still mapped in it.
pub fn free_reservation(address: usize, size: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    if state.vmm.reservations.get(&address) != Some(&size) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let inside: Vec<usize> = state
        .vmm
        .mappings
        .range(address..address + size)
        .map(|(&base, _)| base)
        .collect();
    for base in inside {
        drop_mapping(&mut state, base);
    }
    state.vmm.reservations.remove(&address);
    unmap_range(address, size);
    Ok(())
}

/// Forgets a mapping (the caller fixes up the address range) and its hold on its handle.
fn drop_mapping(state: &mut State, base: usize) {
    if let Some(mapping) = state.vmm.mappings.remove(&base) {
        if let Some(p) = state.vmm.handles.get_mut(&mapping.handle) {
            p.maps -= 1;
        }
        destroy_if_unused(state, mapping.handle);
    }
}

/// `cuMemMap`: maps `size` bytes of `handle` from `offset` at `address`, inaccessible
/// until `cuMemSetAccess`.
pub fn map(
    address: usize,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> Result<(), CUresult> {
    if flags != 0
        || size == 0
        || !is_granular(size)
        || !is_granular(offset)
        || !is_granular(address)
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let end = address.checked_add(size).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let mut state = state::lock();
    let fd = match state.vmm.handles.get(&handle) {
        Some(p) if p.refs > 0 && offset.checked_add(size).is_some_and(|e| e <= p.size) => p.fd,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    let reserved = matches!(
        state.vmm.reservations.range(..=address).next_back(),
        Some((&base, &len)) if end <= base + len
    );
    let overlaps = state
        .vmm
        .mappings
        .range(..end)
        .next_back()
        .is_some_and(|(&base, m)| base + m.size > address);
    if !reserved || overlaps {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `address..end` lies in one of our reservations and is not mapped yet, so
    // MAP_FIXED replaces only our own PROT_NONE placeholder.
    let p = unsafe {
        libc::mmap(
            address as *mut c_void,
            size,
            libc::PROT_NONE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    state.vmm.mappings.insert(
        address,
        Mapping {
            size,
            handle,
            access: 0,
        },
    );
    if let Some(p) = state.vmm.handles.get_mut(&handle) {
        p.maps += 1;
    }
    Ok(())
}

/// `cuMemUnmap`: the range must consist of whole mappings; it reverts to reserved space.
pub fn unmap(address: usize, size: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    let bases = state
        .vmm
        .tiling(address, size)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    for base in bases {
        let len = state.vmm.mappings[&base].size;
        map_none(Some(base), len).ok_or(CUDA_ERROR_UNKNOWN)?;
        drop_mapping(&mut state, base);
    }
    Ok(())
}

/// `cuMemSetAccess`: the range must consist of whole mappings.
pub fn set_access(address: usize, size: usize, descs: &[MemAccessDesc]) -> Result<(), CUresult> {
    let mut state = state::lock();
    let mut access = 0;
    for desc in descs {
        match desc.location.kind {
            LOCATION_DEVICE => {
                state.device(desc.location.id)?;
            }
            LOCATION_HOST | LOCATION_HOST_NUMA | LOCATION_HOST_NUMA_CURRENT => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        if !matches!(desc.flags, 0 | 1 | 3) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        access = access.max(desc.flags);
    }
    if descs.is_empty() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let bases = state
        .vmm
        .tiling(address, size)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let prot = match access {
        0 => libc::PROT_NONE,
        1 => libc::PROT_READ,
        _ => libc::PROT_READ | libc::PROT_WRITE,
    };
    // SAFETY: the range is exactly our own mappings.
    if unsafe { libc::mprotect(address as *mut c_void, size, prot) } != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    for base in bases {
        if let Some(m) = state.vmm.mappings.get_mut(&base) {
            m.access = access;
        }
    }
    Ok(())
}

/// `cuMemGetAccess`: the access flags of the mapping containing `address`.
pub fn get_access(location: MemLocation, address: usize) -> Result<u64, CUresult> {
    let state = state::lock();
    if location.kind == LOCATION_DEVICE {
        state.device(location.id)?;
    }
    state
        .vmm
        .mapping_at(address)
        .map(|(_, m)| m.access as u64)
        .ok_or(CUDA_ERROR_INVALID_VALUE)
}

/// The mapping containing `address`: (base, size).
pub fn mapping_range(state: &State, address: usize) -> Option<(usize, usize)> {
    state
        .vmm
        .mapping_at(address)
        .map(|(base, m)| (base, m.size))
}

/// Whether `[address, address+len)` is mapped with (read, or with `write` read-write)
/// access, possibly across adjacent mappings.
pub fn is_accessible(state: &State, address: usize, len: usize, write: bool) -> bool {
    let Some(end) = address.checked_add(len) else {
        return false;
    };
    let needed = if write { 3 } else { 1 };
    let mut at = address;
    loop {
        match state.vmm.mapping_at(at) {
            Some((base, m)) if m.access & needed == needed => {
                at = base + m.size;
                if at >= end {
                    return true;
                }
            }
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiling() {
        let mut vmm = Vmm::new();
        for (base, size) in [(0x1000, 0x1000), (0x2000, 0x2000), (0x5000, 0x1000)] {
            vmm.mappings.insert(
                base,
                Mapping {
                    size,
                    handle: 1,
                    access: 0,
                },
            );
        }
        assert_eq!(vmm.tiling(0x1000, 0x3000), Some(vec![0x1000, 0x2000]));
        assert_eq!(vmm.tiling(0x2000, 0x2000), Some(vec![0x2000]));
        assert_eq!(vmm.tiling(0x1000, 0x1800), None);
        assert_eq!(vmm.tiling(0x1000, 0x5000), None);
        assert_eq!(vmm.tiling(0x4000, 0x1000), None);
    }

    #[test]
    fn a_memfd_names_its_device() {
        let fd = memfd(VMM_GRANULARITY, Some(3)).unwrap();
        let dev3 = MemLocation {
            kind: LOCATION_DEVICE,
            id: 3,
        };
        assert_eq!(memfd_location(fd), Some(dev3));
        assert_eq!(file_id(fd).map(|(_, _, size)| size), Some(VMM_GRANULARITY));
        let host = memfd(VMM_GRANULARITY, None).unwrap();
        let on_host = memfd_location(host).map(|l| l.kind);
        assert_eq!(on_host, Some(LOCATION_HOST));
        // SAFETY: both descriptors were made here and are closed once.
        unsafe {
            libc::close(fd);
            libc::close(host);
        }
        assert_eq!(memfd_location(-1), None);
    }
}
