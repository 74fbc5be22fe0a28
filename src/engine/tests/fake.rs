//! The one fake driver of the engine's unit tests: the driver (and NVML) as the engine sees
//! it through [`Queries`], small enough to read at once.
//!
//! - Two devices of 8 GiB. Context handles are `0x1000 + device` (one per device, as the
//!   primary context), stream handles `0x10_000 + context`; 0 is no context. The current
//!   context is one per test (every thread of a test sees it), device 0's at the start.
//! - Free memory per device moves only when a test says so ([`FakeDriver::take`],
//!   [`FakeDriver::give`]): a context, a module. The driver and NVML agree on it.
//! - NVML is off until [`FakeDriver::enable_nvml`]; then it answers the free memory and this
//!   process's used memory per device (not listed until [`FakeDriver::set_used`]). Every
//!   NVML question is counted in `nvml_calls`.
//! - Memory pools, named by handle, come into being at their first use; each device's
//!   current pool is its default one ([`default_pool`]). A pool reserves in 2 MiB chunks,
//!   keeps freed memory up to its release threshold until a synchronisation
//!   ([`FakeDriver::sync`]), and a trim (`cuMemPoolTrimTo(pool, 0)`) releases every chunk no
//!   live allocation uses. Attribute reads are counted in `pool_reads`.
//! - Graphs are lists of [`GraphNode`]s; each device has a graph memory pool that a launch
//!   grows by what its unused reservation lacks, in 2 MiB granules, and that a trim shrinks
//!   to what live allocations use. Graph questions are counted in `graph_calls`.

use crate::config::Config;
use crate::cuda_abi::CuResult;
use crate::engine::{Engine, GraphNode, Queries};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// How many devices the fake has, and each one's memory.
pub const DEVICES: u32 = 2;
pub const TOTAL: u64 = 8 * GIB;

/// What pools reserve at a time, and what the graph memory pool maps at a time.
pub const CHUNK: u64 = 2 * MIB;
pub const GRAPH_GRANULE: u64 = 2 * MIB;

/// `CUDA_ERROR_INVALID_DEVICE` and `CUDA_ERROR_INVALID_HANDLE`.
const INVALID_DEVICE: CuResult = CuResult(101);
const INVALID_HANDLE: CuResult = CuResult(400);

/// No current context (the `current` device).
const NONE: u32 = u32::MAX;
/// This process's NVML figure when it is not in NVML's process list.
const NOT_LISTED: u64 = u64::MAX;

/// A device's context.
pub const fn context(device: u32) -> usize {
    0x1000 + device as usize
}

/// A stream of a context.
pub const fn stream(context: usize) -> usize {
    0x10_000 + context
}

/// A device's default pool, its current pool.
pub const fn default_pool(device: u32) -> usize {
    0x900 + 0x1000 * device as usize
}

/// An engine on a fresh fake driver, configured by `vars` (`CUQUOTA_…`), its log off.
pub fn engine(vars: &[(&str, &str)]) -> (Engine, Arc<FakeDriver>) {
    // Refusal lines from the tests are not wanted on the test output.
    crate::log::configure(&crate::config::LogTarget::Off);
    let fake = Arc::new(FakeDriver::default());
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain([("CUQUOTA_LOG".into(), "off".into())])
        .collect();
    let config = Config::from_vars(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()));
    (Engine::new(config, Box::new(fake.clone())), fake)
}

/// An engine with `CUQUOTA_LIMIT=limit` and nothing else set.
pub fn with_limit(limit: &str) -> (Engine, Arc<FakeDriver>) {
    engine(&[("CUQUOTA_LIMIT", limit)])
}

/// A memory pool as the driver keeps it.
#[derive(Clone, Copy, Default)]
struct Pool {
    threshold: u64,
    reserved: u64,
    used: u64,
}

impl Pool {
    /// Releases unused chunks, keeping at least `keep` reserved (and what is used).
    fn trim_to(&mut self, keep: u64) {
        let floor = keep
            .max(self.used.next_multiple_of(CHUNK))
            .min(self.reserved);
        self.reserved -= (self.reserved - floor) / CHUNK * CHUNK;
    }
}

#[derive(Default)]
struct Pools {
    pools: HashMap<usize, Pool>,
    /// Live pool allocations: address → (pool, size).
    live: HashMap<u64, (usize, u64)>,
    /// Freed addresses, handed out again first (as a pool does).
    freed: Vec<u64>,
    next: u64,
}

pub struct FakeDriver {
    /// The current context's device (`NONE`: no context).
    current: AtomicU32,
    free: [AtomicU64; DEVICES as usize],
    nvml: AtomicBool,
    used: [AtomicU64; DEVICES as usize],
    /// NVML questions asked (free memory, the process's used memory).
    pub nvml_calls: AtomicU32,
    pools: Mutex<Pools>,
    /// Pool attribute reads.
    pub pool_reads: AtomicU64,
    graphs: Mutex<HashMap<usize, Vec<GraphNode>>>,
    /// Each device's graph memory pool: (reserved, used).
    graph_pools: Mutex<[(u64, u64); DEVICES as usize]>,
    graph_pool_reported: AtomicBool,
    /// Graph questions asked (nodes, graph pool attributes, trims).
    pub graph_calls: AtomicU64,
}

impl Default for FakeDriver {
    fn default() -> FakeDriver {
        FakeDriver {
            current: AtomicU32::new(0),
            free: [const { AtomicU64::new(TOTAL) }; DEVICES as usize],
            nvml: AtomicBool::new(false),
            used: [const { AtomicU64::new(NOT_LISTED) }; DEVICES as usize],
            nvml_calls: AtomicU32::new(0),
            pools: Mutex::default(),
            pool_reads: AtomicU64::new(0),
            graphs: Mutex::default(),
            graph_pools: Mutex::default(),
            graph_pool_reported: AtomicBool::new(true),
            graph_calls: AtomicU64::new(0),
        }
    }
}

impl FakeDriver {
    // -- contexts and memory --

    /// Makes `device`'s context current (`None`: no context).
    pub fn set_current(&self, device: Option<u32>) {
        self.current.store(device.unwrap_or(NONE), Relaxed);
    }
    fn device(&self) -> Option<u32> {
        Some(self.current.load(Relaxed)).filter(|d| *d != NONE)
    }
    /// The driver takes `bytes` of `device` (a context, a module, a limit).
    pub fn take(&self, device: u32, bytes: u64) {
        self.free[device as usize].fetch_sub(bytes, Relaxed);
    }
    /// The driver gives `bytes` of `device` back.
    pub fn give(&self, device: u32, bytes: u64) {
        self.free[device as usize].fetch_add(bytes, Relaxed);
    }

    // -- NVML --

    /// NVML is there from now on.
    pub fn enable_nvml(&self) {
        self.nvml.store(true, Relaxed);
    }
    /// NVML lists this process with `bytes` used on `device`.
    pub fn set_used(&self, device: u32, bytes: u64) {
        self.used[device as usize].store(bytes, Relaxed);
    }

    // -- memory pools --

    /// `cuMemAllocFromPoolAsync` of `size` (the stream is synchronised at once).
    pub fn pool_alloc(&self, pool: usize, size: u64) -> (CuResult, u64) {
        let mut books = self.pools.lock().unwrap();
        let p = books.pools.entry(pool).or_default();
        if p.used + size > p.reserved {
            p.reserved += (p.used + size - p.reserved).next_multiple_of(CHUNK);
        }
        p.used += size;
        let ptr = match books.freed.pop() {
            Some(ptr) => ptr,
            None => {
                books.next += 1;
                books.next << 24
            }
        };
        books.live.insert(ptr, (pool, size));
        (CuResult::SUCCESS, ptr)
    }
    /// `cuMemFreeAsync(ptr)`: the memory goes back to its pool, which keeps it.
    pub fn pool_free(&self, ptr: u64) -> CuResult {
        let mut books = self.pools.lock().unwrap();
        let Some((pool, size)) = books.live.remove(&ptr) else {
            return CuResult::INVALID_VALUE;
        };
        if let Some(p) = books.pools.get_mut(&pool) {
            p.used -= size;
        }
        books.freed.push(ptr);
        CuResult::SUCCESS
    }
    /// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`.
    pub fn set_threshold(&self, pool: usize, threshold: u64) {
        let mut books = self.pools.lock().unwrap();
        books.pools.entry(pool).or_default().threshold = threshold;
    }
    /// `cuMemPoolDestroy`: the handle is unknown to the driver from now on.
    pub fn pool_destroy(&self, pool: usize) {
        self.pools.lock().unwrap().pools.remove(&pool);
    }
    /// A synchronisation: every pool releases unused chunks down to its threshold.
    pub fn sync(&self) {
        for p in self.pools.lock().unwrap().pools.values_mut() {
            p.trim_to(p.threshold);
        }
    }
    /// What every pool reserves.
    pub fn reserved(&self) -> u64 {
        let books = self.pools.lock().unwrap();
        books.pools.values().map(|p| p.reserved).sum()
    }
    /// What every pool reserves beyond its live allocations.
    pub fn unused(&self) -> u64 {
        let books = self.pools.lock().unwrap();
        books.pools.values().map(|p| p.reserved - p.used).sum()
    }

    // -- graphs and the graph memory pool --

    /// `graph`'s nodes.
    pub fn set_graph(&self, graph: usize, nodes: Vec<GraphNode>) {
        self.graphs.lock().unwrap().insert(graph, nodes);
    }
    /// An upload or launch on `device` whose allocations take `need`, of which `kept` stays
    /// allocated after it (not freed in the graph).
    pub fn graph_launch(&self, device: u32, need: u64, kept: u64) -> CuResult {
        let mut pools = self.graph_pools.lock().unwrap();
        let (reserved, used) = &mut pools[device as usize];
        let short = need.saturating_sub(*reserved - *used);
        *reserved += short.next_multiple_of(GRAPH_GRANULE);
        *used += kept;
        CuResult::SUCCESS
    }
    /// Graph allocations of `bytes` on `device` freed (outside the graph, or by an
    /// auto-free relaunch).
    pub fn graph_free(&self, device: u32, bytes: u64) {
        let mut pools = self.graph_pools.lock().unwrap();
        let (_, used) = &mut pools[device as usize];
        *used = used.saturating_sub(bytes);
    }
    /// The driver released `device`'s graph memory pool (a context reset).
    pub fn graph_pool_released(&self, device: u32) {
        self.graph_pools.lock().unwrap()[device as usize] = (0, 0);
    }
    /// `cuDeviceGetGraphMemAttribute` fails on every device from now on.
    pub fn hide_graph_pool(&self) {
        self.graph_pool_reported.store(false, Relaxed);
    }
}

impl Queries for Arc<FakeDriver> {
    fn current_device(&self) -> Result<u32, CuResult> {
        self.device().ok_or(CuResult::INVALID_CONTEXT)
    }
    fn current_context(&self) -> usize {
        self.device().map_or(0, context)
    }
    fn context_device(&self, c: usize) -> Result<u32, CuResult> {
        (0..DEVICES)
            .find(|d| context(*d) == c)
            .ok_or(CuResult::INVALID_CONTEXT)
    }
    fn stream_context(&self, s: usize) -> Result<usize, CuResult> {
        (0..DEVICES)
            .map(context)
            .find(|c| stream(*c) == s)
            .ok_or(INVALID_HANDLE)
    }
    fn total_memory(&self, device: u32) -> Result<u64, CuResult> {
        (device < DEVICES).then_some(TOTAL).ok_or(INVALID_DEVICE)
    }
    fn memory_info(&self) -> Result<(u64, u64), CuResult> {
        let device = self.current_device()?;
        Ok((self.free[device as usize].load(Relaxed), TOTAL))
    }
    fn devices(&self) -> Vec<(u32, String, Option<u64>)> {
        (0..DEVICES)
            .map(|d| (d, format!("Fake GPU {d}"), Some(TOTAL)))
            .collect()
    }

    fn nvml_free(&self, device: u32) -> Option<u64> {
        self.nvml_calls.fetch_add(1, Relaxed);
        let free = self.free.get(device as usize)?;
        self.nvml.load(Relaxed).then(|| free.load(Relaxed))
    }
    fn used_by_process(&self, device: u32) -> Result<u64, crate::context_memory::Unread> {
        use crate::context_memory::Unread;
        self.nvml_calls.fetch_add(1, Relaxed);
        let used = self.used.get(device as usize).ok_or(Unread::NoNvml)?;
        match (self.nvml.load(Relaxed), used.load(Relaxed)) {
            (false, _) => Err(Unread::NoNvml),
            (true, NOT_LISTED) => Err(Unread::NotListed),
            (true, used) => Ok(used),
        }
    }
    fn nvml_absence(&self) -> Option<String> {
        (!self.nvml.load(Relaxed)).then(|| "the fake driver has no NVML".into())
    }

    fn graph_nodes(&self, graph: usize) -> Option<Vec<GraphNode>> {
        self.graph_calls.fetch_add(1, Relaxed);
        self.graphs.lock().unwrap().get(&graph).cloned()
    }
    fn graph_memory(&self, device: u32) -> Option<(u64, u64)> {
        self.graph_calls.fetch_add(1, Relaxed);
        if !self.graph_pool_reported.load(Relaxed) {
            return None;
        }
        self.graph_pools
            .lock()
            .unwrap()
            .get(device as usize)
            .copied()
    }
    fn graph_memory_trim(&self, device: u32) -> bool {
        self.graph_calls.fetch_add(1, Relaxed);
        let mut pools = self.graph_pools.lock().unwrap();
        let Some((reserved, used)) = pools.get_mut(device as usize) else {
            return false;
        };
        *reserved = used.next_multiple_of(GRAPH_GRANULE);
        true
    }

    fn pool_usage(&self, pool: usize) -> Result<(u64, u64), CuResult> {
        self.pool_reads.fetch_add(1, Relaxed);
        let books = self.pools.lock().unwrap();
        let p = books.pools.get(&pool).ok_or(CuResult::INVALID_VALUE)?;
        Ok((p.reserved, p.used))
    }
    fn trim_pool(&self, pool: usize) -> Result<(), CuResult> {
        let mut books = self.pools.lock().unwrap();
        books
            .pools
            .get_mut(&pool)
            .ok_or(CuResult::INVALID_VALUE)?
            .trim_to(0);
        Ok(())
    }
    fn current_pool(&self, device: u32) -> Result<usize, CuResult> {
        (device < DEVICES)
            .then_some(default_pool(device))
            .ok_or(INVALID_DEVICE)
    }
}
