//! What the engine asks the driver (and NVML) besides the call being hooked: a trait, so the
//! engine is unit-tested against a fake driver and `exports` supplies the real calls.

use crate::cuda_abi::CuResult;

/// A graph node as far as memory goes (what [`Queries::graph_nodes`] answers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphNode {
    /// An allocation node: its device (`None`: not device memory), size and address.
    Alloc {
        device: Option<u32>,
        bytes: u64,
        address: u64,
    },
    /// A free node, and the address it frees.
    Free(u64),
    /// A child graph node's graph.
    Child(usize),
    /// Any other node.
    Other,
}

/// What the engine asks the driver besides the call being hooked.
pub trait Queries: Sync + Send {
    /// The device of the calling thread's current context.
    fn current_device(&self) -> Result<u32, CuResult>;
    /// The calling thread's current context (0: none, or the driver could not say).
    fn current_context(&self) -> usize;
    /// The device of a context.
    fn context_device(&self, context: usize) -> Result<u32, CuResult>;
    /// The context of a stream (not one of the default streams).
    fn stream_context(&self, stream: usize) -> Result<usize, CuResult>;
    /// A device's real total memory.
    fn total_memory(&self, device: u32) -> Result<u64, CuResult>;
    /// The real (free, total) of the current context's device.
    fn memory_info(&self) -> Result<(u64, u64), CuResult>;
    /// Every device: ordinal, name, real total (for the trace header).
    fn devices(&self) -> Vec<(u32, String, Option<u64>)> {
        Vec::new()
    }
    /// A device's UUID (per-GPU limits may name one).
    fn device_uuid(&self, _device: u32) -> Option<[u8; 16]> {
        None
    }

    // -- context memory: NVML, which needs no context
    /// A device's free memory from NVML; `None` without NVML.
    fn nvml_free(&self, _device: u32) -> Option<u64> {
        None
    }
    /// This process's used memory on a device, from NVML's process list, or why not.
    fn used_by_process(&self, _device: u32) -> Result<u64, crate::context_memory::Unread> {
        Err(crate::context_memory::Unread::NoNvml)
    }
    /// Why NVML cannot be used, once (said at `info`).
    fn nvml_absence(&self) -> Option<String> {
        None
    }
    /// The driver's version (`cuDriverGetVersion`: 1000·major + 10·minor), if it can say.
    fn driver_version(&self) -> Option<u32> {
        None
    }

    // -- graph memory --
    /// The nodes of a graph, as far as memory goes (None: the driver cannot say).
    fn graph_nodes(&self, _graph: usize) -> Option<Vec<GraphNode>> {
        None
    }
    /// A device's graph memory pool: (reserved, used) bytes.
    fn graph_memory(&self, _device: u32) -> Option<(u64, u64)> {
        None
    }
    /// `cuDeviceGraphMemTrim(device)`: whether it succeeded.
    fn graph_memory_trim(&self, _device: u32) -> bool {
        false
    }

    // -- pool reservations (the pool cache; see `pool_cache`) --
    /// A pool's (reserved, used) bytes now (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`,
    /// `CU_MEMPOOL_ATTR_USED_MEM_CURRENT`).
    fn pool_usage(&self, _pool: usize) -> Result<(u64, u64), CuResult> {
        Err(CuResult::NOT_SUPPORTED)
    }
    /// Releases what a pool keeps beyond its live allocations (`cuMemPoolTrimTo(pool, 0)`).
    fn trim_pool(&self, _pool: usize) -> Result<(), CuResult> {
        Err(CuResult::NOT_SUPPORTED)
    }
    /// A device's current pool, which `cuMemAllocAsync` allocates from (`cuDeviceGetMemPool`).
    fn current_pool(&self, _device: u32) -> Result<usize, CuResult> {
        Err(CuResult::NOT_SUPPORTED)
    }
}
