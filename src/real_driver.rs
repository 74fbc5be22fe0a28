//! The real CUDA driver, libcuda.so.1: every function cuquota resolves in it, declared once
//! here (symbol and prototype), and the few questions the engine asks the driver. The facts
//! `cuGetProcAddress` needs (base name, version, stream) are the driver catalogue's
//! (`cuquota_driver`, held to NVIDIA's header by the census), read at compile time; whether a
//! function is hooked is said where the hooks are (`exports`), and the catalogue's class
//! says the same (a test holds the two together).

use crate::cuda_abi::{
    CuArray, CuArray3DDescriptor, CuArray3DDescriptorV1, CuArrayDescriptor, CuArrayDescriptorV1,
    CuArrayMapInfo, CuArrayMemoryRequirements, CuContext, CuDevice, CuDevicePtr, CuDevicePtrV1,
    CuIpcMemHandle, CuMemAllocationProp, CuMemHandle, CuMemLocation, CuMemPoolPropsHead,
    CuMemoryPool, CuResult, CuStream,
};
// graph memory
use crate::cuda_abi::{
    CuGraph, CuGraphExec, CuGraphInstantiateParams, CuGraphNode, CuMemAllocNodeParams,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
    CU_GRAPH_NODE_TYPE_GRAPH, CU_GRAPH_NODE_TYPE_MEM_ALLOC, CU_GRAPH_NODE_TYPE_MEM_FREE,
};
use crate::lookup::library;
/// A `CUmodule` or `CUlibrary` handle (opaque to cuquota; context memory).
pub type CuModule = *mut c_void;
/// A `CUgreenCtx` handle (opaque to cuquota; context memory).
pub type CuGreenCtx = *mut c_void;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

library! {
    /// The CUDA driver.
    LIBCUDA = c"libcuda.so.1", names "cu", facts crate::lookup::driver_facts;
    // symbol: prototype (the cuGetProcAddress facts are cuda.h's, from the catalogue)
    cuInit: fn(c_uint) -> CuResult;
    cuMemAlloc_v2: fn(*mut CuDevicePtr, usize) -> CuResult;
    cuMemAlloc: fn(*mut CuDevicePtrV1, c_uint) -> CuResult;
    cuMemAllocPitch_v2: fn(*mut CuDevicePtr, *mut usize, usize, usize, c_uint) -> CuResult;
    cuMemAllocPitch: fn(*mut CuDevicePtrV1, *mut c_uint, c_uint, c_uint, c_uint) -> CuResult;
    cuMemAllocManaged: fn(*mut CuDevicePtr, usize, c_uint) -> CuResult;
    cuMemAllocAsync: fn(*mut CuDevicePtr, usize, CuStream) -> CuResult;
    cuMemAllocAsync_ptsz: fn(*mut CuDevicePtr, usize, CuStream) -> CuResult;
    cuMemAllocFromPoolAsync: fn(*mut CuDevicePtr, usize, CuMemoryPool, CuStream) -> CuResult;
    cuMemAllocFromPoolAsync_ptsz: fn(*mut CuDevicePtr, usize, CuMemoryPool, CuStream) -> CuResult;
    cuMemFree_v2: fn(CuDevicePtr) -> CuResult;
    cuMemFree: fn(CuDevicePtrV1) -> CuResult;
    cuMemFreeAsync: fn(CuDevicePtr, CuStream) -> CuResult;
    cuMemFreeAsync_ptsz: fn(CuDevicePtr, CuStream) -> CuResult;
    cuMemCreate: fn(*mut CuMemHandle, usize, *const CuMemAllocationProp, u64) -> CuResult;
    cuMemRelease: fn(CuMemHandle) -> CuResult;
    cuMemPoolCreate: fn(*mut CuMemoryPool, *const CuMemPoolPropsHead) -> CuResult;
    cuMemGetInfo_v2: fn(*mut usize, *mut usize) -> CuResult;
    cuMemGetInfo: fn(*mut c_uint, *mut c_uint) -> CuResult;
    cuDeviceTotalMem_v2: fn(*mut usize, CuDevice) -> CuResult;
    cuDeviceTotalMem: fn(*mut c_uint, CuDevice) -> CuResult;
    cuGetProcAddress: fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
    cuGetProcAddress_v2: fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;
    cuCtxGetDevice: fn(*mut CuDevice) -> CuResult;
    cuDeviceGetCount: fn(*mut c_int) -> CuResult;
    cuDeviceGetName: fn(*mut c_char, c_int, CuDevice) -> CuResult;
    // -- the driver's version (said with a variant this build does not know)
    cuDriverGetVersion: fn(*mut c_int) -> CuResult;
    // -- GPUs by UUID (called: per-GPU limits may name a UUID) --
    cuDeviceGetUuid_v2: fn(*mut [u8; 16], CuDevice) -> CuResult;
    // arrays (hooked: the creations and destructions; called: the memory requirements)
    cuArrayCreate_v2: fn(*mut CuArray, *const CuArrayDescriptor) -> CuResult;
    cuArray3DCreate_v2: fn(*mut CuArray, *const CuArray3DDescriptor) -> CuResult;
    cuArrayCreate: fn(*mut CuArray, *const CuArrayDescriptorV1) -> CuResult;
    cuArray3DCreate: fn(*mut CuArray, *const CuArray3DDescriptorV1) -> CuResult;
    cuArrayDestroy: fn(CuArray) -> CuResult;
    cuMipmappedArrayCreate: fn(*mut CuArray, *const CuArray3DDescriptor, c_uint) -> CuResult;
    cuMipmappedArrayDestroy: fn(CuArray) -> CuResult;
    cuArrayGetMemoryRequirements: fn(*mut CuArrayMemoryRequirements, CuArray, CuDevice) -> CuResult;
    cuMipmappedArrayGetMemoryRequirements:
        fn(*mut CuArrayMemoryRequirements, CuArray, CuDevice) -> CuResult;
    // -- VMM lifetimes and imports --
    cuMemMap: fn(CuDevicePtr, usize, usize, CuMemHandle, u64) -> CuResult;
    cuMemUnmap: fn(CuDevicePtr, usize) -> CuResult;
    cuMemAddressFree: fn(CuDevicePtr, usize) -> CuResult;
    cuMemRetainAllocationHandle: fn(*mut CuMemHandle, *mut c_void) -> CuResult;
    cuMemImportFromShareableHandle: fn(*mut CuMemHandle, *mut c_void, c_int) -> CuResult;
    cuMemExportToShareableHandle: fn(*mut c_void, CuMemHandle, c_int, u64) -> CuResult;
    cuMemMapArrayAsync: fn(*mut CuArrayMapInfo, c_uint, CuStream) -> CuResult;
    cuMemMapArrayAsync_ptsz: fn(*mut CuArrayMapInfo, c_uint, CuStream) -> CuResult;
    cuIpcOpenMemHandle_v2: fn(*mut CuDevicePtr, CuIpcMemHandle, c_uint) -> CuResult;
    cuIpcOpenMemHandle: fn(*mut CuDevicePtr, CuIpcMemHandle, c_uint) -> CuResult;
    cuMemPoolImportPointer: fn(*mut CuDevicePtr, CuMemoryPool, *mut c_void) -> CuResult;
    cuExternalMemoryGetMappedBuffer: fn(*mut CuDevicePtr, *mut c_void, *const c_void) -> CuResult;

    // -- where a charge lands and who owns it (streams, pools, contexts, capture)
    cuCtxGetCurrent: fn(*mut CuContext) -> CuResult;
    cuCtxPushCurrent_v2: fn(CuContext) -> CuResult;
    cuCtxPopCurrent_v2: fn(*mut CuContext) -> CuResult;
    cuStreamGetCtx: fn(CuStream, *mut CuContext) -> CuResult;
    cuStreamIsCapturing: fn(CuStream, *mut c_int) -> CuResult;
    // (hooked: counted, so that the question above is asked only while a capture may live)
    cuStreamBeginCapture: fn(CuStream) -> CuResult;
    cuStreamBeginCapture_ptsz: fn(CuStream) -> CuResult;
    cuStreamBeginCapture_v2: fn(CuStream, c_int) -> CuResult;
    cuStreamBeginCapture_v2_ptsz: fn(CuStream, c_int) -> CuResult;
    cuStreamBeginCaptureToGraph:
        fn(CuStream, CuGraph, *const CuGraphNode, *const c_void, usize, c_int) -> CuResult;
    cuStreamBeginCaptureToGraph_ptsz:
        fn(CuStream, CuGraph, *const CuGraphNode, *const c_void, usize, c_int) -> CuResult;
    cuStreamEndCapture: fn(CuStream, *mut CuGraph) -> CuResult;
    cuStreamEndCapture_ptsz: fn(CuStream, *mut CuGraph) -> CuResult;
    cuStreamBeginRecaptureToGraph: fn(CuStream, c_int, CuGraph, *mut c_void, *mut c_void) -> CuResult;
    cuStreamBeginRecaptureToGraph_ptsz:
        fn(CuStream, c_int, CuGraph, *mut c_void, *mut c_void) -> CuResult;
    cuStreamBeginCaptureToCig: fn(CuStream, *mut c_void) -> CuResult;
    cuStreamBeginCaptureToCig_ptsz: fn(CuStream, *mut c_void) -> CuResult;
    cuStreamEndCaptureToCig: fn(CuStream) -> CuResult;
    cuStreamEndCaptureToCig_ptsz: fn(CuStream) -> CuResult;
    // green contexts (hooked: context memory; their CUcontexts, their streams' context)
    cuGreenCtxCreate: fn(*mut CuGreenCtx, *mut c_void, CuDevice, c_uint) -> CuResult;
    cuGreenCtxDestroy: fn(CuGreenCtx) -> CuResult;
    cuCtxFromGreenCtx: fn(*mut CuContext, CuGreenCtx) -> CuResult;
    cuGreenCtxStreamCreate: fn(*mut CuStream, CuGreenCtx, c_uint, c_int) -> CuResult;
    cuCtxDestroy_v2: fn(CuContext) -> CuResult;
    cuCtxDestroy: fn(CuContext) -> CuResult;
    cuCtxDetach: fn(CuContext) -> CuResult;
    cuCtxAttach: fn(*mut CuContext, c_uint) -> CuResult;
    cuDevicePrimaryCtxRetain: fn(*mut CuContext, CuDevice) -> CuResult;
    cuDevicePrimaryCtxRelease_v2: fn(CuDevice) -> CuResult;
    cuDevicePrimaryCtxRelease: fn(CuDevice) -> CuResult;
    cuDevicePrimaryCtxReset_v2: fn(CuDevice) -> CuResult;
    cuDevicePrimaryCtxReset: fn(CuDevice) -> CuResult;
    cuDevicePrimaryCtxGetState: fn(CuDevice, *mut c_uint, *mut c_int) -> CuResult;
    cuDeviceGetDefaultMemPool: fn(*mut CuMemoryPool, CuDevice) -> CuResult;
    cuDeviceGetMemPool: fn(*mut CuMemoryPool, CuDevice) -> CuResult;
    cuDeviceSetMemPool: fn(CuDevice, CuMemoryPool) -> CuResult;
    cuMemPoolDestroy: fn(CuMemoryPool) -> CuResult;
    cuMemGetDefaultMemPool: fn(*mut CuMemoryPool, *mut CuMemLocation, c_int) -> CuResult;
    cuMemGetMemPool: fn(*mut CuMemoryPool, *mut CuMemLocation, c_int) -> CuResult;
    cuMemSetMemPool: fn(*mut CuMemLocation, c_int, CuMemoryPool) -> CuResult;

    // -- context memory: creations measured, limits and module loads that grow
    // it; the PCI bus id matches a device to NVML's (called)
    cuDeviceGetPCIBusId: fn(*mut c_char, c_int, CuDevice) -> CuResult;
    cuCtxCreate: fn(*mut CuContext, c_uint, CuDevice) -> CuResult;
    cuCtxCreate_v2: fn(*mut CuContext, c_uint, CuDevice) -> CuResult;
    cuCtxCreate_v3: fn(*mut CuContext, *mut c_void, c_int, c_uint, CuDevice) -> CuResult;
    cuCtxCreate_v4: fn(*mut CuContext, *mut c_void, c_uint, CuDevice) -> CuResult;
    cuCtxSetLimit: fn(c_int, usize) -> CuResult;
    cuCtxGetLimit: fn(*mut usize, c_int) -> CuResult;
    cuModuleLoad: fn(*mut CuModule, *const c_char) -> CuResult;
    cuModuleLoadData: fn(*mut CuModule, *const c_void) -> CuResult;
    cuModuleLoadDataEx:
        fn(*mut CuModule, *const c_void, c_uint, *mut c_int, *mut *mut c_void) -> CuResult;
    cuModuleLoadFatBinary: fn(*mut CuModule, *const c_void) -> CuResult;
    cuModuleUnload: fn(CuModule) -> CuResult;
    cuLibraryLoadData: fn(
        *mut CuModule, *const c_void, *mut c_int, *mut *mut c_void, c_uint,
        *mut c_int, *mut *mut c_void, c_uint,
    ) -> CuResult;
    cuLibraryLoadFromFile: fn(
        *mut CuModule, *const c_char, *mut c_int, *mut *mut c_void, c_uint,
        *mut c_int, *mut *mut c_void, c_uint,
    ) -> CuResult;
    cuLibraryUnload: fn(CuModule) -> CuResult;
    // -- graph memory: hooked (instantiate, upload, launch, exec destroy, the
    // program's trim); called (a graph's memory nodes, the graph memory pool's figures)
    cuGraphInstantiate:
        fn(*mut CuGraphExec, CuGraph, *mut CuGraphNode, *mut c_char, usize) -> CuResult;
    cuGraphInstantiate_v2:
        fn(*mut CuGraphExec, CuGraph, *mut CuGraphNode, *mut c_char, usize) -> CuResult;
    cuGraphInstantiateWithFlags: fn(*mut CuGraphExec, CuGraph, u64) -> CuResult;
    cuGraphInstantiateWithParams:
        fn(*mut CuGraphExec, CuGraph, *mut CuGraphInstantiateParams) -> CuResult;
    cuGraphInstantiateWithParams_ptsz:
        fn(*mut CuGraphExec, CuGraph, *mut CuGraphInstantiateParams) -> CuResult;
    cuGraphUpload: fn(CuGraphExec, CuStream) -> CuResult;
    cuGraphUpload_ptsz: fn(CuGraphExec, CuStream) -> CuResult;
    cuGraphLaunch: fn(CuGraphExec, CuStream) -> CuResult;
    cuGraphLaunch_ptsz: fn(CuGraphExec, CuStream) -> CuResult;
    cuGraphExecDestroy: fn(CuGraphExec) -> CuResult;
    cuDeviceGraphMemTrim: fn(CuDevice) -> CuResult;
    cuGraphGetNodes: fn(CuGraph, *mut CuGraphNode, *mut usize) -> CuResult;
    cuGraphNodeGetType: fn(CuGraphNode, *mut c_int) -> CuResult;
    cuGraphMemAllocNodeGetParams: fn(CuGraphNode, *mut CuMemAllocNodeParams) -> CuResult;
    cuGraphMemFreeNodeGetParams: fn(CuGraphNode, *mut CuDevicePtr) -> CuResult;
    cuGraphChildGraphNodeGetGraph: fn(CuGraphNode, *mut CuGraph) -> CuResult;
    cuDeviceGetGraphMemAttribute: fn(CuDevice, c_int, *mut c_void) -> CuResult;
    // -- pool reservations (the pool cache; called, not hooked)
    cuMemPoolGetAttribute: fn(CuMemoryPool, c_int, *mut c_void) -> CuResult;
    cuMemPoolTrimTo: fn(CuMemoryPool, usize) -> CuResult;
}

/// The driver's version (1000·major + 10·minor), if it can say.
pub fn driver_version() -> Option<u32> {
    let f = cuDriverGetVersion.get()?;
    let mut version: c_int = 0;
    // SAFETY: version is a valid out-pointer.
    let rc = unsafe { f(&mut version) };
    if rc.is_ok() {
        u32::try_from(version).ok()
    } else {
        None
    }
}

/// The device of the calling thread's current context, from the real driver.
pub fn current_device() -> Result<u32, CuResult> {
    let f = cuCtxGetDevice.get().ok_or(CuResult::NOT_FOUND)?;
    let mut dev: CuDevice = -1;
    // SAFETY: dev is a valid out-pointer for the call.
    let rc = unsafe { f(&mut dev) };
    match (rc.is_ok(), u32::try_from(dev)) {
        (true, Ok(d)) => Ok(d),
        (true, Err(_)) => Err(CuResult::INVALID_CONTEXT),
        (false, _) => Err(rc),
    }
}

// -- where a charge lands and who owns it ------------------------------------------------

/// The calling thread's current context from the real driver (0: none, or it could not
/// say; `current_device` then gives the driver's reason).
pub fn current_context() -> usize {
    let Some(f) = cuCtxGetCurrent.get() else {
        return 0;
    };
    let mut ctx: CuContext = std::ptr::null_mut();
    // SAFETY: ctx is a valid out-pointer for the call.
    let rc = unsafe { f(&mut ctx) };
    if rc.is_ok() {
        ctx as usize
    } else {
        0
    }
}

/// The context of a stream (not a default stream).
pub fn stream_context(stream: usize) -> Result<usize, CuResult> {
    let f = cuStreamGetCtx.get().ok_or(CuResult::NOT_FOUND)?;
    let mut ctx: CuContext = std::ptr::null_mut();
    // SAFETY: the stream is the caller's handle, passed as given; ctx a valid out-pointer.
    let rc = unsafe { f(stream as CuStream, &mut ctx) };
    match (rc.is_ok(), ctx as usize) {
        (true, 0) => Err(CuResult::INVALID_CONTEXT),
        (true, c) => Ok(c),
        (false, _) => Err(rc),
    }
}

/// The device of a context: made current for one `cuCtxGetDevice`, then popped (asked once
/// per context; the engine caches the answer).
pub fn context_device(context: usize) -> Result<u32, CuResult> {
    let push = cuCtxPushCurrent_v2.get().ok_or(CuResult::NOT_FOUND)?;
    let pop = cuCtxPopCurrent_v2.get().ok_or(CuResult::NOT_FOUND)?;
    // SAFETY: a context handle the driver gave (through cuStreamGetCtx).
    let rc = unsafe { push(context as CuContext) };
    if !rc.is_ok() {
        return Err(rc);
    }
    let device = current_device();
    let mut popped: CuContext = std::ptr::null_mut();
    // SAFETY: popped is a valid out-pointer; we pop what we pushed.
    unsafe { pop(&mut popped) };
    device
}

/// Whether `stream` is capturing into a graph (an allocation there records a node and
/// allocates nothing). An error (an invalid stream) counts as not capturing: the
/// allocation call then gets the driver's own answer.
/// Asked only while a capture may be live (`crate::captures`): else no stream captures.
#[inline(always)]
pub fn stream_capturing(stream: usize) -> bool {
    crate::captures::may_be_live() && ask_capturing(stream)
}

/// [`stream_capturing`], asked of the driver whatever the count says.
pub fn ask_capturing(stream: usize) -> bool {
    // The legacy default stream (0 in a plain call, or CU_STREAM_LEGACY) cannot capture
    // (`cuStreamBeginCapture` refuses it): no driver call on its path.
    if stream <= 1 {
        return false;
    }
    let Some(f) = cuStreamIsCapturing.get() else {
        return false;
    };
    let mut status: c_int = 0;
    // SAFETY: the caller's stream, passed as given; status a valid out-pointer.
    let rc = unsafe { f(stream as CuStream, &mut status) };
    // CU_STREAM_CAPTURE_STATUS_ACTIVE (1) or _INVALIDATED (2): part of a capture.
    rc.is_ok() && status != 0
}

/// Whether `device`'s primary context is active (has references).
pub fn primary_active(device: u32) -> Result<bool, CuResult> {
    let f = cuDevicePrimaryCtxGetState
        .get()
        .ok_or(CuResult::NOT_FOUND)?;
    let (mut flags, mut active): (c_uint, c_int) = (0, 0);
    // SAFETY: both are valid out-pointers.
    let rc = unsafe { f(device as CuDevice, &mut flags, &mut active) };
    if rc.is_ok() {
        Ok(active != 0)
    } else {
        Err(rc)
    }
}

/// The real total memory of a device (`cuDeviceTotalMem_v2`).
pub fn total_memory(device: u32) -> Result<u64, CuResult> {
    let f = cuDeviceTotalMem_v2.get().ok_or(CuResult::NOT_FOUND)?;
    let mut bytes = 0usize;
    // SAFETY: bytes is a valid out-pointer.
    let rc = unsafe { f(&mut bytes, device as CuDevice) };
    if rc.is_ok() {
        Ok(bytes as u64)
    } else {
        Err(rc)
    }
}

/// The real (free, total) of the current context's device (`cuMemGetInfo_v2`).
pub fn memory_info() -> Result<(u64, u64), CuResult> {
    let f = cuMemGetInfo_v2.get().ok_or(CuResult::NOT_FOUND)?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both are valid out-pointers.
    let rc = unsafe { f(&mut free, &mut total) };
    if rc.is_ok() {
        Ok((free as u64, total as u64))
    } else {
        Err(rc)
    }
}

/// A device's UUID (`cuDeviceGetUuid_v2`: a CUuuid is 16 bytes).
pub fn device_uuid(device: u32) -> Option<[u8; 16]> {
    let f = cuDeviceGetUuid_v2.get()?;
    let mut bytes = [0u8; 16];
    // SAFETY: bytes is a valid out-pointer to 16 bytes, the size of a CUuuid.
    let rc = unsafe { f(&mut bytes, device as CuDevice) };
    rc.is_ok().then_some(bytes)
}

/// Number of devices and their names, for the configuration line and the trace header.
pub fn devices() -> Vec<(u32, String, Option<u64>)> {
    let mut count = 0;
    let Some(get_count) = cuDeviceGetCount.get() else {
        return Vec::new();
    };
    // SAFETY: count is a valid out-pointer.
    if !unsafe { get_count(&mut count) }.is_ok() {
        return Vec::new();
    }
    let get_name = cuDeviceGetName.get();
    (0..count.max(0) as u32)
        .map(|d| {
            let mut buf = [0 as c_char; 256];
            let named = match get_name {
                // SAFETY: buf holds 256 bytes, the length passed; the driver writes the name there.
                Some(f) => unsafe { f(buf.as_mut_ptr(), buf.len() as i32, d as CuDevice) }.is_ok(),
                None => false,
            };
            let name = if named {
                // The last byte stays 0 whatever the driver wrote.
                buf[255] = 0;
                // SAFETY: buf is NUL-terminated (its last byte is 0).
                unsafe { CStr::from_ptr(buf.as_ptr()) }
                    .to_string_lossy()
                    .into_owned()
            } else {
                String::from("?")
            };
            (d, name, total_memory(d).ok())
        })
        .collect()
}

// -- context memory -------------------------------------------------------------------------

/// The current context's value of a limit (`cuCtxGetLimit`), to set it back.
pub fn context_limit(limit: c_int) -> Option<usize> {
    let f = cuCtxGetLimit.get()?;
    let mut value = 0usize;
    // SAFETY: value is a valid out-pointer; the limit is passed as the caller gave it.
    unsafe { f(&mut value, limit) }.is_ok().then_some(value)
}

// -- graph memory ------------------------------------------------------------------------

/// A graph node as far as memory goes, in the driver's words.
pub enum RawGraphNode {
    /// An allocation node: its location (`CUmemLocationType`, id), size and address.
    Alloc {
        location: (c_int, c_int),
        bytes: u64,
        address: u64,
    },
    /// A free node and the address it frees.
    Free(u64),
    /// A child graph node's graph.
    Child(usize),
    /// Any other node (no memory of its own).
    Other,
}

/// The nodes of `graph` (`cuGraphGetNodes`, then each node's type and memory parameters);
/// None when the driver cannot say.
pub fn graph_nodes(graph: usize) -> Option<Vec<RawGraphNode>> {
    let get_nodes = cuGraphGetNodes.get()?;
    let node_type = cuGraphNodeGetType.get()?;
    let mut count = 0usize;
    // SAFETY: a null node array asks for the count; count is a valid out-pointer.
    if !unsafe { get_nodes(graph as CuGraph, std::ptr::null_mut(), &mut count) }.is_ok() {
        return None;
    }
    let mut nodes: Vec<CuGraphNode> = vec![std::ptr::null_mut(); count];
    // SAFETY: the array holds `count` entries, the number passed in.
    if !unsafe { get_nodes(graph as CuGraph, nodes.as_mut_ptr(), &mut count) }.is_ok() {
        return None;
    }
    nodes.truncate(count);
    let described = nodes
        .into_iter()
        .map(|node| {
            let mut kind: c_int = -1;
            // SAFETY: a node the driver just listed; kind a valid out-pointer.
            if !unsafe { node_type(node, &mut kind) }.is_ok() {
                return RawGraphNode::Other;
            }
            match kind {
                CU_GRAPH_NODE_TYPE_MEM_ALLOC => alloc_node(node).unwrap_or(RawGraphNode::Other),
                CU_GRAPH_NODE_TYPE_MEM_FREE => free_node(node).unwrap_or(RawGraphNode::Other),
                CU_GRAPH_NODE_TYPE_GRAPH => child_graph(node).unwrap_or(RawGraphNode::Other),
                _ => RawGraphNode::Other,
            }
        })
        .collect();
    Some(described)
}

fn alloc_node(node: CuGraphNode) -> Option<RawGraphNode> {
    let f = cuGraphMemAllocNodeGetParams.get()?;
    let mut params = CuMemAllocNodeParams::default();
    // SAFETY: an allocation node; params is a whole CUDA_MEM_ALLOC_NODE_PARAMS to write.
    let rc = unsafe { f(node, &mut params) };
    let location = params.pool_props.head.location;
    rc.is_ok().then_some(RawGraphNode::Alloc {
        location: (location.kind, location.id),
        bytes: params.bytesize as u64,
        address: params.dptr,
    })
}

fn free_node(node: CuGraphNode) -> Option<RawGraphNode> {
    let f = cuGraphMemFreeNodeGetParams.get()?;
    let mut address: CuDevicePtr = 0;
    // SAFETY: a free node; address is a valid out-pointer.
    let rc = unsafe { f(node, &mut address) };
    rc.is_ok().then_some(RawGraphNode::Free(address))
}

fn child_graph(node: CuGraphNode) -> Option<RawGraphNode> {
    let f = cuGraphChildGraphNodeGetGraph.get()?;
    let mut graph: CuGraph = std::ptr::null_mut();
    // SAFETY: a child graph node; graph is a valid out-pointer.
    let rc = unsafe { f(node, &mut graph) };
    (rc.is_ok() && !graph.is_null()).then_some(RawGraphNode::Child(graph as usize))
}

/// A device's graph memory pool: (reserved, used) bytes (`cuDeviceGetGraphMemAttribute`,
/// `RESERVED_MEM_CURRENT` and `USED_MEM_CURRENT`).
pub fn graph_memory(device: u32) -> Option<(u64, u64)> {
    let f = cuDeviceGetGraphMemAttribute.get()?;
    let read = |attribute| {
        let mut value = 0u64;
        // SAFETY: both attributes are a cuuint64_t, written to a valid u64.
        let rc = unsafe { f(device as CuDevice, attribute, (&raw mut value).cast()) };
        rc.is_ok().then_some(value)
    };
    let reserved = read(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)?;
    let used = read(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)?;
    Some((reserved, used))
}

/// `cuDeviceGraphMemTrim(device)`: whether it succeeded.
pub fn graph_memory_trim(device: u32) -> bool {
    let Some(f) = cuDeviceGraphMemTrim.get() else {
        return false;
    };
    // SAFETY: a plain call with a device ordinal.
    unsafe { f(device as CuDevice) }.is_ok()
}

// -- pool reservations (the pool cache) --------------------------------------------------

/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` and `CU_MEMPOOL_ATTR_USED_MEM_CURRENT` (both
/// `cuuint64_t`).
const POOL_RESERVED_MEM_CURRENT: c_int = 5;
const POOL_USED_MEM_CURRENT: c_int = 7;

/// A pool's (reserved, used) bytes. Used is read first: an allocation between the two reads
/// then makes the figure `reserved − used` too high, never too low.
pub fn pool_usage(pool: usize) -> Result<(u64, u64), CuResult> {
    let f = cuMemPoolGetAttribute.get().ok_or(CuResult::NOT_FOUND)?;
    let read = |attribute| {
        let mut value = 0u64;
        // SAFETY: a pool of this process; both attributes write one cuuint64_t to value.
        let rc = unsafe { f(pool as CuMemoryPool, attribute, (&raw mut value).cast()) };
        if rc.is_ok() {
            Ok(value)
        } else {
            Err(rc)
        }
    };
    let used = read(POOL_USED_MEM_CURRENT)?;
    Ok((read(POOL_RESERVED_MEM_CURRENT)?, used))
}

/// Releases what a pool keeps beyond its live allocations (`cuMemPoolTrimTo(pool, 0)`).
pub fn trim_pool(pool: usize) -> Result<(), CuResult> {
    let f = cuMemPoolTrimTo.get().ok_or(CuResult::NOT_FOUND)?;
    // SAFETY: a pool of this process, passed by value.
    let rc = unsafe { f(pool as CuMemoryPool, 0) };
    if rc.is_ok() {
        Ok(())
    } else {
        Err(rc)
    }
}

/// A device's current pool (`cuDeviceGetMemPool`, the real one: not our hook).
pub fn current_pool(device: u32) -> Result<usize, CuResult> {
    let f = cuDeviceGetMemPool.get().ok_or(CuResult::NOT_FOUND)?;
    let mut pool: CuMemoryPool = std::ptr::null_mut();
    // SAFETY: pool is a valid out-pointer.
    let rc = unsafe { f(&mut pool, device as CuDevice) };
    if rc.is_ok() {
        Ok(pool as usize)
    } else {
        Err(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lookup::Stream;

    #[test]
    fn table_is_consistent() {
        for f in FUNCTIONS {
            assert!(f.name().starts_with(f.base), "{}", f.name());
            assert_eq!(f.stream == Stream::PerThread, f.name().ends_with("_ptsz"));
            assert!(f.name().starts_with(LIBCUDA.prefix));
        }
        let mut names: Vec<_> = FUNCTIONS.iter().map(|f| f.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), FUNCTIONS.len(), "a symbol is listed twice");
    }

    /// Each function's facts are cuda.h's (the catalogue's row), and the table resolves
    /// exactly what the catalogue says cuquota hooks or calls.
    #[test]
    fn table_is_the_catalogues() {
        use cuquota_driver::{catalogue, Class, Stream as CatalogueStream};
        for f in FUNCTIONS {
            let row = catalogue::function(f.name())
                .unwrap_or_else(|| panic!("{} is not a function of cuda.h", f.name()));
            let stream = match f.stream {
                Stream::Plain => CatalogueStream::Plain,
                Stream::PerThread => CatalogueStream::Ptsz,
            };
            assert_eq!(
                (row.base, row.since, row.stream),
                (f.base, f.since, stream),
                "{}",
                f.name()
            );
        }
        let mut table: Vec<_> = FUNCTIONS.iter().map(|f| f.name()).collect();
        let mut catalogue: Vec<_> = catalogue::FUNCTIONS
            .iter()
            .filter(|f| matches!(f.class, Class::Hooked(h) if !h.not_yet))
            .map(|f| f.symbol)
            .chain(catalogue::CALLED.iter().copied())
            .collect();
        table.sort();
        catalogue.sort();
        assert_eq!(table, catalogue);
    }
}
