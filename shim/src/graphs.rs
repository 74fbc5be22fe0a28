//! CUDA graphs, as far as memory goes: graphs of memory allocation and free nodes (built by
//! stream capture of `cuMemAllocAsync` / `cuMemFreeAsync` or with `cuGraphAddMemAllocNode` /
//! `cuGraphAddMemFreeNode`), their executable graphs, and each device's graph memory pool.
//!
//! The driver's rules (CUDA driver API on these functions; the programming guide's "Graph
//! Memory Nodes"):
//!
//! * an allocation node's address is fixed when the node is made, and nothing is allocated
//!   then;
//! * `cuGraphUpload` and `cuGraphLaunch` back the graph's allocations with memory from the
//!   device's graph memory pool, whose reservation grows (in pool chunks) when its unused
//!   part is too small; that growth must fit on the device (else `CUDA_ERROR_OUT_OF_MEMORY`
//!   and nothing happens);
//! * an allocation freed inside the graph goes back to the pool when the launch completes
//!   (used drops, the reservation stays); one not freed there stays live after the launch,
//!   until `cuMemFreeAsync` / `cuMemFree`, a launch of a graph with a free node for it, or
//!   the next launch of an executable graph instantiated with
//!   `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`; without that flag, launching again
//!   while it is live fails with `CUDA_ERROR_INVALID_VALUE`;
//! * the reservation stays until `cuDeviceGraphMemTrim`, which releases what no live graph
//!   allocation uses (nothing here is ever still executing);
//! * a graph with memory nodes has at most one executable graph at a time.
//!
//! A simplification on the safe side of the footprint: a launch maps all of its graph's
//! allocations at once (the driver may let allocations that are never live together share
//! memory). Each allocation node reserves host address space for its fixed address (no
//! memory: `PROT_NONE`, `MAP_NORESERVE`); while the allocation is live after a launch it is
//! readable and writable, so copies to and from it work like the driver's. Only memory
//! nodes exist here: the shim runs no kernels, so there is nothing else a graph could
//! honestly do.
//!
//! The device's reservation is its `graph_reserved`, part of its footprint; graph memory is
//! not in `in_use` (`cuShimStats`).

use std::collections::BTreeMap;

use crate::abi::*;
use crate::memory;
use crate::pools::{self, Reservation};
use crate::state::{self, State};
use crate::streams;

#[derive(Default)]
pub struct Graphs {
    graphs: BTreeMap<usize, Graph>,
    nodes: BTreeMap<usize, Node>,
    execs: BTreeMap<usize, Exec>,
    /// The allocations of allocation nodes, by address.
    allocations: BTreeMap<u64, GraphAllocation>,
    /// Each device's graph memory pool (its `reserved` is the device's `graph_reserved`).
    pools: BTreeMap<usize, Reservation>,
}

impl Graphs {
    pub const fn new() -> Self {
        Graphs {
            graphs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            execs: BTreeMap::new(),
            allocations: BTreeMap::new(),
            pools: BTreeMap::new(),
        }
    }
}

struct Graph {
    /// In creation order.
    nodes: Vec<usize>,
    /// Its executable graph, while one exists (only one may, with memory nodes).
    exec: Option<usize>,
}

enum Node {
    Alloc {
        graph: usize,
        address: u64,
        /// What `cuGraphMemAllocNodeGetParams` returns; `_access` holds the access
        /// descriptors it points at.
        params: StoredParams,
        _access: Box<[MemAccessDesc]>,
    },
    Free {
        graph: usize,
        address: u64,
    },
}

/// An allocation node's parameters as the caller gave them (with the address filled in).
struct StoredParams(MemAllocNodeParams);

// SAFETY: the shim never dereferences the struct's pointers: `access_descs` points into the
// node's own boxed slice (moved with it, freed with it) and the Windows security attributes
// pointer is the caller's, only handed back.
unsafe impl Send for StoredParams {}

impl Node {
    fn graph(&self) -> usize {
        match self {
            Node::Alloc { graph, .. } | Node::Free { graph, .. } => *graph,
        }
    }

    fn address(&self) -> u64 {
        match self {
            Node::Alloc { address, .. } | Node::Free { address, .. } => *address,
        }
    }
}

struct GraphAllocation {
    size: u64,
    /// `None`: located on the host (charges no device).
    device: Option<usize>,
    /// The graph of its allocation node.
    owner: usize,
    /// The graph holding its free node, if any (at most one may).
    freed_in: Option<usize>,
    /// Mapped and not freed since a launch.
    live: bool,
}

#[derive(Clone)]
struct Exec {
    graph: usize,
    auto_free: bool,
    /// Addresses of its allocation nodes and of its free nodes, fixed at instantiation.
    allocs: Vec<u64>,
    frees: Vec<u64>,
}

/// Host address space for a graph allocation of `size` bytes (its fixed address): mapped
/// without access and without memory until the allocation is live.
fn reserve(size: u64) -> Option<u64> {
    let len = usize::try_from(size).ok()?;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing touches no
    // existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as u64)
}

/// Makes a reserved range accessible (a live allocation) or not (freed: its pages dropped).
fn set_live(address: u64, size: u64, live: bool) {
    let (p, len) = (address as *mut std::ffi::c_void, size as usize);
    // SAFETY: `address..+size` is a mapping `reserve` made for this allocation, used by
    // nothing else; changing its protection or dropping its pages touches no other memory.
    unsafe {
        if live {
            libc::mprotect(p, len, libc::PROT_READ | libc::PROT_WRITE);
        } else {
            libc::madvise(p, len, libc::MADV_DONTNEED);
            libc::mprotect(p, len, libc::PROT_NONE);
        }
    }
}

/// Gives back the address space of an allocation no graph can reach any more.
fn unreserve(address: u64, size: u64) {
    // SAFETY: as for `set_live`; the record of the allocation is gone, so nothing refers to
    // the range any more.
    unsafe {
        libc::munmap(address as *mut std::ffi::c_void, size as usize);
    }
}

/// `cuGraphCreate` (flags must be 0), and the graph a stream capture builds.
pub fn create(state: &mut State, flags: u32) -> Result<usize, CUresult> {
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let handle = state::new_handle();
    let graph = Graph {
        nodes: Vec::new(),
        exec: None,
    };
    state.graphs.graphs.insert(handle, graph);
    Ok(handle)
}

pub fn create_graph(flags: u32) -> Result<usize, CUresult> {
    create(&mut state::lock(), flags)
}

/// Checks a graph handle.
pub fn check_graph(state: &State, graph: usize) -> Result<(), CUresult> {
    match state.graphs.graphs.contains_key(&graph) {
        true => Ok(()),
        false => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// How many nodes `graph` has (0 for none).
pub fn node_count(state: &State, graph: usize) -> usize {
    state.graphs.graphs.get(&graph).map_or(0, |g| g.nodes.len())
}

/// A node as a recapture compares it.
pub enum Recorded {
    /// An allocation node: its fixed address, size and device (`None`: the host).
    Alloc {
        address: u64,
        size: u64,
        device: Option<usize>,
    },
    /// A free node of `address`.
    Free { address: u64 },
}

/// The node at `position` of `graph`'s nodes in creation order, if there is one.
pub fn recorded(state: &State, graph: usize, position: usize) -> Option<Recorded> {
    let node = state.graphs.graphs.get(&graph)?.nodes.get(position)?;
    Some(match state.graphs.nodes.get(node)? {
        Node::Alloc { address, .. } => {
            let a = state.graphs.allocations.get(address)?;
            Recorded::Alloc {
                address: *address,
                size: a.size,
                device: a.device,
            }
        }
        Node::Free { address, .. } => Recorded::Free { address: *address },
    })
}

/// Checks a node list: nodes of `graph`, no duplicates.
pub fn check_dependencies(state: &State, graph: usize, deps: &[usize]) -> Result<(), CUresult> {
    for (i, dep) in deps.iter().enumerate() {
        let in_graph = state
            .graphs
            .nodes
            .get(dep)
            .is_some_and(|n| n.graph() == graph);
        if !in_graph || deps[..i].contains(dep) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    Ok(())
}

fn add_node(state: &mut State, graph: usize, node: Node) -> usize {
    let handle = state::new_handle();
    state.graphs.nodes.insert(handle, node);
    if let Some(g) = state.graphs.graphs.get_mut(&graph) {
        g.nodes.push(handle);
    }
    handle
}

/// An allocation node of `size` bytes on `device` (`None`: the host): its node handle and
/// fixed address.
fn add_alloc(
    state: &mut State,
    graph: usize,
    mut params: MemAllocNodeParams,
    access: Box<[MemAccessDesc]>,
    device: Option<usize>,
) -> Result<(usize, u64), CUresult> {
    let size = params.bytesize as u64;
    let address = reserve(size).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    params.dptr = address;
    params.access_descs = if access.is_empty() {
        std::ptr::null()
    } else {
        access.as_ptr()
    };
    let allocation = GraphAllocation {
        size,
        device,
        owner: graph,
        freed_in: None,
        live: false,
    };
    state.graphs.allocations.insert(address, allocation);
    let node = Node::Alloc {
        graph,
        address,
        params: StoredParams(params),
        _access: access,
    };
    Ok((add_node(state, graph, node), address))
}

/// `cuGraphAddMemAllocNode`: pinned memory on a device or the host (as pools may be; host
/// memory charges no device), no IPC handle types, a size, access descriptors for devices
/// that exist.
pub fn add_mem_alloc_node(
    graph: usize,
    deps: &[usize],
    params: MemAllocNodeParams,
    access: &[MemAccessDesc],
) -> Result<(usize, u64), CUresult> {
    let mut state = state::lock();
    if !state.graphs.graphs.contains_key(&graph) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_dependencies(&state, graph, deps)?;
    let props = params.pool_props.head;
    if props.alloc_type != ALLOCATION_PINNED || props.handle_types != 0 || params.bytesize == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let device = match props.location.kind {
        LOCATION_DEVICE => {
            state
                .device(props.location.id)
                .map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
            Some(props.location.id as usize)
        }
        LOCATION_HOST..=LOCATION_HOST_NUMA_CURRENT => None,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    if access.len() > state.devices.len() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    for desc in access {
        let bad_flags = !matches!(desc.flags, 0 | 1 | 3);
        if desc.location.kind != LOCATION_DEVICE
            || bad_flags
            || state.device(desc.location.id).is_err()
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    add_alloc(&mut state, graph, params, access.into(), device)
}

/// `cuGraphAddMemFreeNode`: the address must be an allocation node's, not freed by a free
/// node yet (in this graph or another).
pub fn add_mem_free_node(graph: usize, deps: &[usize], address: u64) -> Result<usize, CUresult> {
    let mut state = state::lock();
    if !state.graphs.graphs.contains_key(&graph) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_dependencies(&state, graph, deps)?;
    add_free(&mut state, graph, address)
}

fn add_free(state: &mut State, graph: usize, address: u64) -> Result<usize, CUresult> {
    let allocation = state
        .graphs
        .allocations
        .get_mut(&address)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if allocation.freed_in.is_some() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    allocation.freed_in = Some(graph);
    Ok(add_node(state, graph, Node::Free { graph, address }))
}

/// A `cuMemAllocAsync` / `cuMemAllocFromPoolAsync` captured into `graph`: an allocation
/// node with the pool's properties (`device` `None`: a host pool's).
pub fn capture_alloc(
    state: &mut State,
    graph: usize,
    size: usize,
    device: Option<usize>,
) -> Result<u64, CUresult> {
    if size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let location = match device {
        Some(d) => MemLocation {
            kind: LOCATION_DEVICE,
            id: d as i32,
        },
        None => MemLocation {
            kind: LOCATION_HOST,
            id: 0,
        },
    };
    let params = MemAllocNodeParams {
        pool_props: MemPoolProps {
            head: MemPoolPropsHead {
                alloc_type: ALLOCATION_PINNED,
                handle_types: 0,
                location,
                win32_security_attributes: std::ptr::null_mut(),
                max_size: 0,
            },
            usage: 0,
            reserved: [0; 54],
        },
        access_descs: std::ptr::null(),
        access_desc_count: 0,
        bytesize: size,
        dptr: 0,
    };
    add_alloc(state, graph, params, Box::new([]), device).map(|(_, address)| address)
}

/// A `cuMemFreeAsync` captured into `graph`: a free node for a graph allocation, or for a
/// device allocation (freed when the graph runs, like `cuMemFreeAsync`).
pub fn capture_free(state: &mut State, graph: usize, address: u64) -> Result<(), CUresult> {
    if state.graphs.allocations.contains_key(&address) {
        return add_free(state, graph, address).map(|_| ());
    }
    if !state.allocations.contains_key(&address) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    add_node(state, graph, Node::Free { graph, address });
    Ok(())
}

/// `cuGraphChildGraphNodeGetGraph`: "Gets a handle to the embedded graph in a child graph
/// node" (cuda.h). Only memory nodes exist here, so no node is a child graph node: every
/// node is refused with `CUDA_ERROR_INVALID_VALUE`, as an unknown one is.
pub fn child_graph(node: usize) -> Result<usize, CUresult> {
    node_type(node)?;
    Err(CUDA_ERROR_INVALID_VALUE)
}

/// `cuGraphGetNodes`: the graph's nodes in creation order.
pub fn nodes(graph: usize) -> Result<Vec<usize>, CUresult> {
    let state = state::lock();
    state
        .graphs
        .graphs
        .get(&graph)
        .map(|g| g.nodes.clone())
        .ok_or(CUDA_ERROR_INVALID_VALUE)
}

/// `cuGraphNodeGetType`.
pub fn node_type(node: usize) -> Result<i32, CUresult> {
    match state::lock().graphs.nodes.get(&node) {
        Some(Node::Alloc { .. }) => Ok(GRAPH_NODE_TYPE_MEM_ALLOC),
        Some(Node::Free { .. }) => Ok(GRAPH_NODE_TYPE_MEM_FREE),
        None => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// `cuGraphMemAllocNodeGetParams`: the parameters, whose access descriptors the node owns.
pub fn alloc_node_params(node: usize) -> Result<MemAllocNodeParams, CUresult> {
    match state::lock().graphs.nodes.get(&node) {
        Some(Node::Alloc { params, .. }) => Ok(params.0),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// `cuGraphMemFreeNodeGetParams`: the address it frees.
pub fn free_node_address(node: usize) -> Result<u64, CUresult> {
    match state::lock().graphs.nodes.get(&node) {
        Some(Node::Free { address, .. }) => Ok(*address),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// `cuGraphDestroy`: the graph and its nodes go; an executable graph made from it stays
/// usable, and its live allocations stay live until freed.
pub fn destroy(graph: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    let g = state
        .graphs
        .graphs
        .remove(&graph)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    for node in g.nodes {
        state.graphs.nodes.remove(&node);
    }
    forget_unreachable(&mut state.graphs);
    Ok(())
}

/// Drops the records of allocations nothing can reach any more (not live, and no node or
/// executable graph names their address) and gives back their address space. An address a
/// free node still names stays reserved, so it cannot be handed out again under it.
fn forget_unreachable(graphs: &mut Graphs) {
    let Graphs {
        nodes,
        execs,
        allocations,
        ..
    } = graphs;
    allocations.retain(|&address, a| {
        let named = || {
            nodes.values().any(|n| n.address() == address)
                || execs
                    .values()
                    .any(|e| e.allocs.contains(&address) || e.frees.contains(&address))
        };
        let keep = a.live || named();
        if !keep {
            unreserve(address, a.size);
        }
        keep
    });
}

/// `cuGraphInstantiate*`: flags `AUTO_FREE_ON_LAUNCH`, `UPLOAD` (only with `params`, which
/// `WithParams` passes), `USE_NODE_PRIORITY`; device launch is not simulated.
pub fn instantiate(graph: usize, flags: u64, with_params: bool) -> Result<usize, CUresult> {
    let known = GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH
        | GRAPH_INSTANTIATE_UPLOAD
        | GRAPH_INSTANTIATE_DEVICE_LAUNCH
        | GRAPH_INSTANTIATE_USE_NODE_PRIORITY;
    if flags & !known != 0 || (flags & GRAPH_INSTANTIATE_UPLOAD != 0 && !with_params) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if flags & GRAPH_INSTANTIATE_DEVICE_LAUNCH != 0 {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    let mut state = state::lock();
    let g = state
        .graphs
        .graphs
        .get(&graph)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    // Every node here is a memory node: one executable graph at a time.
    if g.exec.is_some() && !g.nodes.is_empty() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut exec = Exec {
        graph,
        auto_free: flags & GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH != 0,
        allocs: Vec::new(),
        frees: Vec::new(),
    };
    for node in &g.nodes {
        match state.graphs.nodes.get(node) {
            Some(Node::Alloc { address, .. }) => exec.allocs.push(*address),
            Some(Node::Free { address, .. }) => exec.frees.push(*address),
            None => {}
        }
    }
    let handle = state::new_handle();
    state.graphs.execs.insert(handle, exec);
    if let Some(g) = state.graphs.graphs.get_mut(&graph) {
        g.exec = Some(handle);
    }
    Ok(handle)
}

/// `cuGraphExecDestroy`: its graph may be instantiated again; live allocations stay live.
pub fn exec_destroy(exec: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    let e = state
        .graphs
        .execs
        .remove(&exec)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if let Some(g) = state.graphs.graphs.get_mut(&e.graph) {
        if g.exec == Some(exec) {
            g.exec = None;
        }
    }
    forget_unreachable(&mut state.graphs);
    Ok(())
}

/// The graph pool growth each device needs to back `need` more bytes in use, after the
/// graph pools in `pools` (a working copy) — or out-of-memory if some device lacks it.
fn grow_for(
    state: &State,
    pools: &mut BTreeMap<usize, Reservation>,
    need: &BTreeMap<usize, u64>,
) -> Result<BTreeMap<usize, u64>, CUresult> {
    let mut growth = BTreeMap::new();
    for (&device, &bytes) in need {
        let pool = pools.entry(device).or_default();
        let grow = pool
            .growth(bytes, pools::chunk(), 0)
            .ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        let d = &state.devices[device];
        // The device's reservation as it will be once the working copy is applied.
        let current = state.graphs.pools.get(&device).map_or(0, |p| p.reserved);
        let extra = (pool.reserved + grow).saturating_sub(current);
        if !d.fits(extra) {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        growth.insert(device, grow);
    }
    Ok(growth)
}

/// What an executable graph's allocations need per device.
fn needs(state: &State, exec: &Exec) -> BTreeMap<usize, u64> {
    let mut need = BTreeMap::new();
    for address in &exec.allocs {
        if let Some(a) = state.graphs.allocations.get(address) {
            if let Some(device) = a.device {
                *need.entry(device).or_insert(0) += a.size;
            }
        }
    }
    need
}

/// Writes the graph pools back and mirrors each reservation into its device's footprint.
fn store_pools(state: &mut State, pools: BTreeMap<usize, Reservation>) {
    for (device, pool) in pools {
        state.devices[device].graph_reserved = pool.reserved;
        state.graphs.pools.insert(device, pool);
    }
}

fn live_exec(state: &State, exec: usize) -> Result<Exec, CUresult> {
    state
        .graphs
        .execs
        .get(&exec)
        .cloned()
        .ok_or(CUDA_ERROR_INVALID_VALUE)
}

/// `cuGraphUpload`: backs the graph's allocations, growing the graph pools as needed.
pub fn upload(exec: usize, stream: usize) -> Result<(), CUresult> {
    let mut state = state::lock();
    streams::device(&state, stream)?;
    let e = live_exec(&state, exec)?;
    let need = needs(&state, &e);
    let mut pools = state.graphs.pools.clone();
    let growth = grow_for(&state, &mut pools, &need)?;
    for (device, grow) in growth {
        if let Some(pool) = pools.get_mut(&device) {
            pool.take(0, grow);
        }
    }
    store_pools(&mut state, pools);
    Ok(())
}

/// `cuGraphLaunch`: runs the graph at once (see the module's rules).
pub fn launch(exec: usize, stream: usize) -> Result<(), CUresult> {
    let to_free = {
        let mut state = state::lock();
        streams::device(&state, stream)?;
        let e = live_exec(&state, exec)?;
        let still_live: Vec<u64> = e
            .allocs
            .iter()
            .copied()
            .filter(|a| state.graphs.allocations.get(a).is_some_and(|a| a.live))
            .collect();
        if !still_live.is_empty() && !e.auto_free {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut pools = state.graphs.pools.clone();
        // Auto-free: as if cuMemFreeAsync of each came first (live again just below).
        for address in &still_live {
            let a = &state.graphs.allocations[address];
            if let Some(device) = a.device {
                pools.entry(device).or_default().give_back(a.size);
            }
        }
        let need = needs(&state, &e);
        let growth = grow_for(&state, &mut pools, &need)?;
        for (&device, &bytes) in &need {
            if let Some(pool) = pools.get_mut(&device) {
                pool.take(bytes, growth[&device]);
            }
        }
        // Allocations freed inside the graph return to the pool; the others stay live.
        for address in &e.allocs {
            let Some(a) = state.graphs.allocations.get_mut(address) else {
                continue;
            };
            let was_live = a.live;
            a.live = a.freed_in != Some(e.graph);
            if a.live != was_live {
                set_live(*address, a.size, a.live);
            }
            if !a.live {
                if let Some(device) = a.device {
                    pools.entry(device).or_default().give_back(a.size);
                }
            }
        }
        // Free nodes for other graphs' allocations, or for device allocations.
        let mut to_free = Vec::new();
        for address in &e.frees {
            match state.graphs.allocations.get_mut(address) {
                Some(a) if a.owner != e.graph => {
                    if a.live {
                        a.live = false;
                        set_live(*address, a.size, false);
                        if let Some(device) = a.device {
                            pools.entry(device).or_default().give_back(a.size);
                        }
                    }
                }
                Some(_) => {}
                None => to_free.push(*address),
            }
        }
        store_pools(&mut state, pools);
        to_free
    };
    for address in to_free {
        // Freed like cuMemFreeAsync; one already freed since capture is not the launch's
        // error to report.
        let _ = memory::free(address, false);
    }
    Ok(())
}

/// `cuMemFreeAsync` / `cuMemFree` of a live graph allocation: back to its graph pool.
/// Anything else is an invalid value.
pub fn free_live(state: &mut State, address: u64) -> Result<(), CUresult> {
    let a = match state.graphs.allocations.get_mut(&address) {
        Some(a) if a.live => a,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    a.live = false;
    let (size, device) = (a.size, a.device);
    set_live(address, size, false);
    if let Some(device) = device {
        if let Some(pool) = state.graphs.pools.get_mut(&device) {
            pool.give_back(size);
        }
    }
    Ok(())
}

/// The live graph allocation holding all of `[address, end)`: (base, size). For copies and
/// `cuMemGetAddressRange`.
pub fn live_range(state: &State, address: u64, end: u64) -> Option<(u64, u64)> {
    let (&base, a) = state.graphs.allocations.range(..=address).next_back()?;
    (a.live && end <= base + a.size).then_some((base, a.size))
}

/// A primary context reset: the device's live graph allocations are freed and its graph
/// memory released (its graphs and executable graphs stay usable: a launch backs them
/// again).
pub fn device_reset(state: &mut State, device: usize) {
    for (&address, a) in state.graphs.allocations.iter_mut() {
        if a.device == Some(device) && a.live {
            a.live = false;
            set_live(address, a.size, false);
        }
    }
    let pool = state.graphs.pools.entry(device).or_default();
    pool.used = 0;
    pool.reserved = 0;
    state.devices[device].graph_reserved = 0;
    forget_unreachable(&mut state.graphs);
}

/// `cuDeviceGraphMemTrim`: releases the graph pool's chunks no live allocation uses.
pub fn trim(device: CUdevice) -> Result<(), CUresult> {
    let mut state = state::lock();
    state.device(device)?;
    let device = device as usize;
    if let Some(pool) = state.graphs.pools.get_mut(&device) {
        pool.trim_to(0, pools::chunk());
        let reserved = pool.reserved;
        state.devices[device].graph_reserved = reserved;
    }
    Ok(())
}

/// `CUgraphMem_attribute`: `USED_MEM_CURRENT`, `USED_MEM_HIGH`, `RESERVED_MEM_CURRENT`,
/// `RESERVED_MEM_HIGH`.
pub fn get_attribute(device: CUdevice, attribute: i32) -> Result<u64, CUresult> {
    let state = state::lock();
    state.device(device)?;
    let pool = state
        .graphs
        .pools
        .get(&(device as usize))
        .copied()
        .unwrap_or_default();
    match attribute {
        0 => Ok(pool.used),
        1 => Ok(pool.used_high),
        2 => Ok(pool.reserved),
        3 => Ok(pool.reserved_high),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// `cuDeviceSetGraphMemAttribute`: only the high-water marks, only reset (to 0, which
/// makes them the current values).
pub fn set_attribute(device: CUdevice, attribute: i32, value: u64) -> Result<(), CUresult> {
    let mut state = state::lock();
    state.device(device)?;
    let pool = state.graphs.pools.entry(device as usize).or_default();
    match (attribute, value) {
        (1, 0) => pool.used_high = pool.used,
        (3, 0) => pool.reserved_high = pool.reserved,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ranges_become_accessible_while_live() {
        let a = reserve(1 << 20).unwrap();
        set_live(a, 1 << 20, true);
        // SAFETY: the range was just made readable and writable.
        unsafe { std::ptr::write_bytes(a as *mut u8, 0x5a, 1 << 20) };
        set_live(a, 1 << 20, false);
        set_live(a, 1 << 20, true);
        // SAFETY: as above; dropped pages read back as zeros.
        assert_eq!(unsafe { *(a as *const u8) }, 0);
        unreserve(a, 1 << 20);
    }
}
