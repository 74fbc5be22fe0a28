//! The classes the catalogue's rows name: one per family of functions, each with the reason
//! it is hooked, passes through or is not governed. Where a reason rests on what the driver
//! documents, it names the function of `cuda.h` whose documentation says so.

use crate::{Class, Hook, Kind, Role};

const fn hooked(role: Role, kind: Kind, note: &'static str) -> Class {
    Class::Hooked(Hook {
        role,
        kind,
        note,
        not_yet: false,
    })
}

/// Should be hooked (the header shows a way around the footprint through it) and is not yet:
/// what a CUDA bump's census finds first. None is today.
#[allow(dead_code)]
const fn not_yet(role: Role, kind: Kind, note: &'static str) -> Class {
    Class::Hooked(Hook {
        role,
        kind,
        note,
        not_yet: true,
    })
}

const fn passes(reason: &'static str) -> Class {
    Class::PassesThrough(reason)
}

const fn not_governed(reason: &'static str) -> Class {
    Class::NotGoverned(reason)
}

// ---- hooked ---------------------------------------------------------------------------------

pub const INIT: Class = hooked(
    Role::Lookup,
    Kind::Charged,
    "the first call a program makes: the configuration is checked here",
);
pub const LOOKUP: Class = hooked(
    Role::Lookup,
    Kind::Lookup,
    "the driver's answer is swapped for our hook where it is a variant we hook",
);
pub const ALLOCATION: Class = hooked(
    Role::Allocations,
    Kind::Charged,
    "device memory: charged before the call, settled to what the driver gave",
);
pub const VMM_CREATE: Class = hooked(
    Role::Allocations,
    Kind::Charged,
    "physical memory of a VMM handle, charged at its location's device",
);
pub const FREE: Class = hooked(
    Role::Allocations,
    Kind::Charged,
    "credits what the allocation was charged",
);
pub const VMM_REFERENCE: Class = hooked(
    Role::Allocations,
    Kind::Charged,
    "references and mappings of VMM memory, an exported handle and a sparse-array mapping \
     among them: it is freed when the last goes (cuMemRelease: \"including its shareable \
     counterparts\")",
);
pub const IMPORT: Class = hooked(
    Role::Allocations,
    Kind::Charged,
    "memory of another process or API mapped here: recorded so that its free credits nothing",
);
pub const POOL_PLACE: Class = hooked(
    Role::Ownership,
    Kind::Watched,
    "where a pool's memory lands (its device, the device's current pool)",
);
pub const CONTEXT_CREATE: Class = hooked(
    Role::Context,
    Kind::Measured,
    "what a context takes is measured around its creation",
);
pub const CONTEXT_END: Class = hooked(
    Role::Ownership,
    Kind::Ending,
    "a context that ends takes its allocations with it (cuCtxDestroy)",
);
pub const CONTEXT_ATTACH: Class = hooked(
    Role::Ownership,
    Kind::Watched,
    "one more reference to a context that cuCtxDetach may end",
);
pub const CONTEXT_LIMIT: Class = hooked(
    Role::Context,
    Kind::Measured,
    "limits (stack, heap, printf FIFO) grow what the context takes (cuCtxSetLimit)",
);
pub const MODULE_LOAD: Class = hooked(
    Role::Context,
    Kind::Measured,
    "a module's code and globals are context memory, measured around the load",
);
pub const MODULE_UNLOAD: Class = hooked(
    Role::Context,
    Kind::Watched,
    "gives back what the load was measured to take",
);
pub const FIGURE: Class = hooked(
    Role::Figures,
    Kind::Figure,
    "answers with the quota and what is left of it",
);
pub const ARRAY: Class = hooked(
    Role::Allocations,
    Kind::Charged,
    "CUDA arrays are device memory (cuArrayGetMemoryRequirements gives their size)",
);
pub const CAPTURE: Class = hooked(
    Role::Ownership,
    Kind::Watched,
    "counted: an allocation on a capturing stream is a graph node, not memory",
);
pub const GRAPH_INSTANTIATE: Class = hooked(
    Role::Graph,
    Kind::Charged,
    "an executable graph's memory nodes (cuGraphAddMemAllocNode)",
);
pub const GRAPH_RUN: Class = hooked(
    Role::Graph,
    Kind::Watched,
    "the graph memory pool grows at upload or launch and shrinks at trim \
     (cuGraphAddMemAllocNode, cuDeviceGraphMemTrim)",
);

// ---- hooked: the capture forms of 13.1 and 13.3, green contexts ------------------------------

pub const CAPTURE_NEWER: Class = hooked(
    Role::Ownership,
    Kind::Watched,
    "capture forms of 13.1 and 13.3: allocations during them are graph nodes \
     (cuStreamBeginRecaptureToGraph, cuStreamBeginCaptureToCig); without the count an \
     allocation there is charged as memory",
);
pub const GREEN_CONTEXT_CREATE: Class = hooked(
    Role::Context,
    Kind::Measured,
    "green contexts are contexts: what they take is context memory (cuGreenCtxCreate)",
);
pub const GREEN_CONTEXT_OWNERSHIP: Class = hooked(
    Role::Ownership,
    Kind::Watched,
    "a green context's CUcontext and streams belong to its device's books, and its end \
     frees its slot (cuCtxFromGreenCtx, cuGreenCtxStreamCreate, cuGreenCtxDestroy)",
);

// ---- passes through -------------------------------------------------------------------------

pub const ERROR_TEXT: Class = passes("static text about an error code");
pub const DEVICE_QUERY: Class =
    passes("reads what the driver knows of a device; allocates nothing");
pub const NOTIFICATION: Class =
    passes("registers a host callback for the driver's notifications; allocates nothing");
pub const CONTEXT_STATE: Class = passes(
    "which context is current, and its settings other than limits: the current context is \
     asked of the driver at each charge, and these take no device memory of their own",
);
pub const GREEN_CONTEXT_QUERY: Class = passes(
    "descriptions of a device's SM partitions and queries of green contexts; memory is \
     taken only when a green context is created (cuGreenCtxCreate)",
);
pub const CAPTURE_STATE: Class = passes(
    "questions about a capture, and its dependencies; the capture's start and end are hooked",
);
pub const STREAM: Class = passes(
    "streams order work and hold no allocation; what a stream object costs the driver is \
     context memory",
);
pub const EVENT: Class = passes("events hold no device memory the driver reports per allocation");
pub const COPY: Class =
    passes("copies and fills write memory that is already allocated and charged");
pub const MANAGED_PLACEMENT: Class = passes(
    "moves or describes the pages of managed memory, which is charged in full at \
     cuMemAllocManaged (cuMemPrefetchAsync, cuMemAdvise)",
);
pub const HOST_MEMORY: Class = passes(
    "page-locked host memory (cuMemHostAlloc): no device memory, which is what the quota counts",
);
pub const MEMORY_QUERY: Class = passes(
    "reads or sets what an allocation is (its range, attributes, access), not how big it is",
);
pub const ADDRESS_RESERVE: Class = passes(
    "reserves virtual address space only (cuMemAddressReserve); physical memory comes from \
     cuMemCreate",
);
pub const POOL_SETTING: Class = passes(
    "a pool's attributes and trimming: what a pool keeps is read from the driver \
     (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, cuMemPoolGetAttribute) whenever the pool cache needs it",
);
pub const POOL_SHARING: Class = passes(
    "shares a pool with another process: the memory stays charged to the process that \
     allocated it (cuMemPoolImportPointer is hooked on the importing side)",
);
pub const IPC_HANDLE: Class = passes(
    "names an allocation for another process, or closes an import: the memory is charged to \
     the process that allocated it (cuIpcOpenMemHandle is hooked)",
);
pub const MODULE_QUERY: Class =
    passes("functions and kernels of a loaded module or library, and their attributes");
pub const HOST_FUNCTION: Class = passes("a host function on a stream: no device memory");
pub const OCCUPANCY: Class = passes("occupancy arithmetic: no call into the device");
pub const LINKER: Class =
    passes("JIT linking produces an image in host memory; loading it is cuModuleLoadData (hooked)");
pub const TEXTURE: Class = passes(
    "descriptors and views of arrays or memory already allocated (textures, surfaces, tensor maps)",
);
pub const EXTERNAL_SEMAPHORE: Class = passes("synchronisation with another API: no memory");
pub const GRAPH_MEMORY_QUERY: Class = passes(
    "reads or resets the graph memory pool's statistics (cuDeviceGetGraphMemAttribute); \
     its size changes only through the hooked launch, upload and trim",
);
pub const GRAPH_BUILD: Class = passes(
    "building, editing and reading graphs: memory nodes take memory only when an executable \
     graph is uploaded or launched (cuGraphAddMemAllocNode), which is hooked",
);
pub const ARRAY_QUERY: Class = passes("reads what an array is; allocates nothing");
pub const DIAGNOSTICS: Class = passes("core dumps and driver logs: no device memory");

// ---- not governed ---------------------------------------------------------------------------

pub const PEER_ACCESS: Class = not_governed(
    "maps allocations already charged on their own device into a peer's address space; what \
     the mappings cost the driver is not announced per call (NVML's per-process figure sees it)",
);
pub const DMA_BUF: Class = not_governed(
    "a dma-buf file descriptor for a range of device memory (cuMemGetHandleForAddressRange); \
     the memory is charged by its allocation, and whether the descriptor keeps it alive \
     after a free is not documented",
);
pub const LAZY_LOAD: Class = not_governed(
    "may load a module's code and globals on first use (lazy loading, cuModuleGetLoadingMode): \
     growth of context memory that no call announces; NVML's per-process figure sees it",
);
pub const LAUNCH: Class = not_governed(
    "a launch may load lazily and grow local memory (stack size × resident threads, \
     cuCtxSetLimit): growth that no call announces; NVML's per-process figure sees it",
);
pub const GRAPHICS_INTEROP: Class = not_governed(
    "memory allocated by a graphics API (OpenGL, Direct3D, VDPAU, EGL) outside CUDA; mapping \
     it allocates no CUDA memory, and the graphics API's own allocations are not cuquota's to count",
);
pub const EXTERNAL_MEMORY: Class = not_governed(
    "memory allocated by another API (Vulkan, Direct3D 12, NvSciBuf) and imported \
     (cuImportExternalMemory): that API allocated it; a mapped buffer of it is hooked",
);
pub const FABRIC_BINDING: Class = not_governed(
    "multicast objects and logical endpoints bind memory made by cuMemCreate (charged there) \
     (cuMulticastBindMem, cuLogicalEndpointBindMem); what the fabric reserves for the object \
     itself is not announced",
);
pub const CHECKPOINT: Class = not_governed(
    "checkpoint and restore move the whole process's device memory out and back \
     (cuCheckpointProcessCheckpoint); the books keep the allocations the driver restores",
);
pub const EXPORT_TABLE: Class = not_governed(
    "NVIDIA's private tables for its own libraries: undocumented functions, passed through \
     untouched (a hook there would guess at their contract)",
);
