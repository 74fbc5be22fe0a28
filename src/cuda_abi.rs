//! The slice of the CUDA driver ABI that cuquota touches: our own Rust definitions of the
//! types and constants, written from the facts in NVIDIA's public `cuda.h`.

use std::ffi::c_void;

/// A `CUresult`. A transparent `u32` rather than an enum, so that a code we don't know
/// (a newer driver's, or garbage) stays representable and is passed back unchanged.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CuResult(pub u32);

impl CuResult {
    pub const SUCCESS: CuResult = CuResult(0);
    pub const INVALID_VALUE: CuResult = CuResult(1);
    pub const OUT_OF_MEMORY: CuResult = CuResult(2);
    pub const INVALID_CONTEXT: CuResult = CuResult(201);
    pub const NOT_FOUND: CuResult = CuResult(500);
    pub const NOT_PERMITTED: CuResult = CuResult(800);
    pub const NOT_SUPPORTED: CuResult = CuResult(801);
    pub const UNKNOWN: CuResult = CuResult(999);

    pub fn is_ok(self) -> bool {
        self.0 == 0
    }

    /// The `CUDA_ERROR_*` name, or `None` for a code this build does not know.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "CUDA_SUCCESS",
            1 => "CUDA_ERROR_INVALID_VALUE",
            2 => "CUDA_ERROR_OUT_OF_MEMORY",
            3 => "CUDA_ERROR_NOT_INITIALIZED",
            4 => "CUDA_ERROR_DEINITIALIZED",
            5 => "CUDA_ERROR_PROFILER_DISABLED",
            6 => "CUDA_ERROR_PROFILER_NOT_INITIALIZED",
            7 => "CUDA_ERROR_PROFILER_ALREADY_STARTED",
            8 => "CUDA_ERROR_PROFILER_ALREADY_STOPPED",
            34 => "CUDA_ERROR_STUB_LIBRARY",
            46 => "CUDA_ERROR_DEVICE_UNAVAILABLE",
            100 => "CUDA_ERROR_NO_DEVICE",
            101 => "CUDA_ERROR_INVALID_DEVICE",
            102 => "CUDA_ERROR_DEVICE_NOT_LICENSED",
            200 => "CUDA_ERROR_INVALID_IMAGE",
            201 => "CUDA_ERROR_INVALID_CONTEXT",
            202 => "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
            205 => "CUDA_ERROR_MAP_FAILED",
            206 => "CUDA_ERROR_UNMAP_FAILED",
            207 => "CUDA_ERROR_ARRAY_IS_MAPPED",
            208 => "CUDA_ERROR_ALREADY_MAPPED",
            209 => "CUDA_ERROR_NO_BINARY_FOR_GPU",
            210 => "CUDA_ERROR_ALREADY_ACQUIRED",
            211 => "CUDA_ERROR_NOT_MAPPED",
            212 => "CUDA_ERROR_NOT_MAPPED_AS_ARRAY",
            213 => "CUDA_ERROR_NOT_MAPPED_AS_POINTER",
            214 => "CUDA_ERROR_ECC_UNCORRECTABLE",
            215 => "CUDA_ERROR_UNSUPPORTED_LIMIT",
            216 => "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
            217 => "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
            218 => "CUDA_ERROR_INVALID_PTX",
            219 => "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
            220 => "CUDA_ERROR_NVLINK_UNCORRECTABLE",
            221 => "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
            222 => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            223 => "CUDA_ERROR_JIT_COMPILATION_DISABLED",
            224 => "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
            225 => "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC",
            226 => "CUDA_ERROR_CONTAINED",
            300 => "CUDA_ERROR_INVALID_SOURCE",
            301 => "CUDA_ERROR_FILE_NOT_FOUND",
            302 => "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
            303 => "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
            304 => "CUDA_ERROR_OPERATING_SYSTEM",
            400 => "CUDA_ERROR_INVALID_HANDLE",
            401 => "CUDA_ERROR_ILLEGAL_STATE",
            402 => "CUDA_ERROR_LOSSY_QUERY",
            500 => "CUDA_ERROR_NOT_FOUND",
            600 => "CUDA_ERROR_NOT_READY",
            700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
            701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
            702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
            703 => "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING",
            704 => "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
            705 => "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
            708 => "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
            709 => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
            710 => "CUDA_ERROR_ASSERT",
            711 => "CUDA_ERROR_TOO_MANY_PEERS",
            712 => "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
            713 => "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
            714 => "CUDA_ERROR_HARDWARE_STACK_ERROR",
            715 => "CUDA_ERROR_ILLEGAL_INSTRUCTION",
            716 => "CUDA_ERROR_MISALIGNED_ADDRESS",
            717 => "CUDA_ERROR_INVALID_ADDRESS_SPACE",
            718 => "CUDA_ERROR_INVALID_PC",
            719 => "CUDA_ERROR_LAUNCH_FAILED",
            720 => "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
            721 => "CUDA_ERROR_TENSOR_MEMORY_LEAK",
            800 => "CUDA_ERROR_NOT_PERMITTED",
            801 => "CUDA_ERROR_NOT_SUPPORTED",
            802 => "CUDA_ERROR_SYSTEM_NOT_READY",
            803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            804 => "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            805 => "CUDA_ERROR_MPS_CONNECTION_FAILED",
            806 => "CUDA_ERROR_MPS_RPC_FAILURE",
            807 => "CUDA_ERROR_MPS_SERVER_NOT_READY",
            808 => "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
            809 => "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED",
            810 => "CUDA_ERROR_MPS_CLIENT_TERMINATED",
            811 => "CUDA_ERROR_CDP_NOT_SUPPORTED",
            812 => "CUDA_ERROR_CDP_VERSION_MISMATCH",
            900 => "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
            901 => "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
            902 => "CUDA_ERROR_STREAM_CAPTURE_MERGE",
            903 => "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
            904 => "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
            905 => "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
            906 => "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
            907 => "CUDA_ERROR_CAPTURED_EVENT",
            908 => "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
            909 => "CUDA_ERROR_TIMEOUT",
            910 => "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
            911 => "CUDA_ERROR_EXTERNAL_DEVICE",
            912 => "CUDA_ERROR_INVALID_CLUSTER_SIZE",
            913 => "CUDA_ERROR_FUNCTION_NOT_LOADED",
            914 => "CUDA_ERROR_INVALID_RESOURCE_TYPE",
            915 => "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
            916 => "CUDA_ERROR_KEY_ROTATION",
            999 => "CUDA_ERROR_UNKNOWN",
            _ => return None,
        })
    }

    /// The name, or the number for an unknown code (`CUresult 12345`).
    pub fn describe(self) -> String {
        match self.name() {
            Some(n) => n.to_string(),
            None => format!("CUresult {}", self.0),
        }
    }
}

/// `CUdeviceptr` on 64-bit hosts.
pub type CuDevicePtr = u64;
/// The legacy 32-bit `CUdeviceptr_v1` of the unversioned entry points.
pub type CuDevicePtrV1 = u32;
pub type CuDevice = i32;
pub type CuContext = *mut c_void;
pub type CuStream = *mut c_void;
pub type CuMemoryPool = *mut c_void;
pub type CuMemHandle = u64;

/// `CUmemLocationType` values.
pub const CU_MEM_LOCATION_TYPE_DEVICE: i32 = 1;
pub const CU_MEM_LOCATION_TYPE_HOST: i32 = 2;
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA: i32 = 3;
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: i32 = 4;
/// CUDA 13.4: "a portion of device memory, specified by the locality domain ID".
pub const CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN: i32 = 6;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CuMemLocation {
    pub kind: i32,
    /// A union in cuda.h: `int id`, or for `DEVICE_LOCALITY_DOMAIN` `struct { unsigned char
    /// deviceId; unsigned char localityDomainId; } localized` in its first two bytes.
    pub id: i32,
}

impl CuMemLocation {
    /// The union's `localized` member: (deviceId, localityDomainId).
    pub fn localized(self) -> (u8, u8) {
        let bytes = self.id.to_ne_bytes();
        (bytes[0], bytes[1])
    }

    /// Whose memory this location is: a GPU for `DEVICE` (its `id`) and
    /// `DEVICE_LOCALITY_DOMAIN` (its `localized.deviceId`: "a portion of device memory");
    /// the host for the three host types (`HOST`, `HOST_NUMA`, `HOST_NUMA_CURRENT`);
    /// anything else (a type this build does not know, a negative device) is memory cuquota
    /// cannot place, never taken for host memory.
    pub fn located(self) -> Located {
        match self.kind {
            CU_MEM_LOCATION_TYPE_DEVICE => match u32::try_from(self.id) {
                Ok(device) => Located::Device(device),
                Err(_) => Located::Unknown,
            },
            CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN => {
                Located::Device(self.localized().0.into())
            }
            CU_MEM_LOCATION_TYPE_HOST
            | CU_MEM_LOCATION_TYPE_HOST_NUMA
            | CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => Located::Host,
            _ => Located::Unknown,
        }
    }
}

/// Whose memory a [`CuMemLocation`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Located {
    Device(u32),
    Host,
    Unknown,
}

/// `CUmemAllocationProp` (v1): 32 bytes; only `location` is read by cuquota.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CuMemAllocationProp {
    pub kind: i32,
    pub requested_handle_types: i32,
    pub location: CuMemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: [u8; 8],
}

/// `CUmemPoolProps` (v1): only the leading fields are read (type, handle types, location).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CuMemPoolPropsHead {
    pub alloc_type: i32,
    pub handle_types: i32,
    pub location: CuMemLocation,
}

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CuIpcMemHandle {
    pub reserved: [u8; 64],
}

/// `cuGetProcAddress` flags.
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

// ---- CUDA arrays ----------------------------------------------------------------------

/// `CUarray` and `CUmipmappedArray`: opaque handles.
pub type CuArray = *mut c_void;

/// `CUDA_ARRAY_DESCRIPTOR_v2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CuArrayDescriptor {
    pub width: usize,
    pub height: usize,
    pub format: u32,
    pub num_channels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR_v2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CuArray3DDescriptor {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub format: u32,
    pub num_channels: u32,
    pub flags: u32,
}

/// `CUDA_ARRAY_DESCRIPTOR_v1` of the legacy `cuArrayCreate`: 32-bit dimensions.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CuArrayDescriptorV1 {
    pub width: u32,
    pub height: u32,
    pub format: u32,
    pub num_channels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR_v1` of the legacy `cuArray3DCreate`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CuArray3DDescriptorV1 {
    pub width: u32,
    pub height: u32,
    pub depth: u32,
    pub format: u32,
    pub num_channels: u32,
    pub flags: u32,
}

/// `CUDA_ARRAY_MEMORY_REQUIREMENTS_v1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CuArrayMemoryRequirements {
    pub size: usize,
    pub alignment: usize,
    pub reserved: [u32; 4],
}

/// `CUarrayMapInfo` (v1): 96 bytes; the subresource union kept as its 32 raw bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CuArrayMapInfo {
    pub resource_type: i32,
    /// The `CUarray` or `CUmipmappedArray`.
    pub resource: usize,
    pub subresource_type: i32,
    pub subresource: [u64; 4],
    /// [`CU_MEM_OPERATION_TYPE_MAP`] or [`CU_MEM_OPERATION_TYPE_UNMAP`].
    pub operation: i32,
    pub handle_type: i32,
    pub handle: CuMemHandle,
    pub offset: u64,
    pub device_mask: u32,
    pub flags: u32,
    pub reserved: [u32; 2],
}

/// `CUmemOperationType` values.
pub const CU_MEM_OPERATION_TYPE_MAP: i32 = 1;
pub const CU_MEM_OPERATION_TYPE_UNMAP: i32 = 2;

/// `CUDA_ARRAY3D_*` flags.
pub const CUDA_ARRAY3D_LAYERED: u32 = 0x01;
pub const CUDA_ARRAY3D_CUBEMAP: u32 = 0x04;
pub const CUDA_ARRAY3D_SPARSE: u32 = 0x40;
pub const CUDA_ARRAY3D_DEFERRED_MAPPING: u32 = 0x80;

// ---- CUDA graphs and graph memory ------------------------------------------------------

/// `CUgraph`, `CUgraphExec`, `CUgraphNode`: opaque handles.
pub type CuGraph = *mut c_void;
pub type CuGraphExec = *mut c_void;
pub type CuGraphNode = *mut c_void;

/// `CUgraphNodeType` values cuquota reads.
pub const CU_GRAPH_NODE_TYPE_GRAPH: i32 = 4;
pub const CU_GRAPH_NODE_TYPE_MEM_ALLOC: i32 = 10;
pub const CU_GRAPH_NODE_TYPE_MEM_FREE: i32 = 11;

/// `CUgraphMem_attribute` values cuquota reads.
pub const CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: i32 = 0;
pub const CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: i32 = 2;

/// `CUgraphInstantiate_flags`: upload the graph as part of instantiating it.
pub const CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: u64 = 2;
/// `CUgraphInstantiate_flags`: a relaunch first frees what the last launch left allocated.
pub const CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: u64 = 1;

/// `CUmemPoolProps` (v1) whole: 88 bytes (the driver writes all of it).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CuMemPoolProps {
    pub head: CuMemPoolPropsHead,
    pub win32_security_attributes: *mut c_void,
    pub max_size: usize,
    pub usage: u16,
    pub reserved: [u8; 54],
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS` (v1), as `cuGraphMemAllocNodeGetParams` writes it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CuMemAllocNodeParams {
    pub pool_props: CuMemPoolProps,
    pub access_descs: *const c_void,
    pub access_desc_count: usize,
    pub bytesize: usize,
    pub dptr: CuDevicePtr,
}

impl Default for CuMemAllocNodeParams {
    fn default() -> Self {
        CuMemAllocNodeParams {
            pool_props: CuMemPoolProps {
                head: CuMemPoolPropsHead {
                    alloc_type: 0,
                    handle_types: 0,
                    location: CuMemLocation::default(),
                },
                win32_security_attributes: std::ptr::null_mut(),
                max_size: 0,
                usage: 0,
                reserved: [0; 54],
            },
            access_descs: std::ptr::null(),
            access_desc_count: 0,
            bytesize: 0,
            dptr: 0,
        }
    }
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS`: only `flags` is read by cuquota.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CuGraphInstantiateParams {
    pub flags: u64,
    pub upload_stream: CuStream,
    pub err_node_out: CuGraphNode,
    pub result_out: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown_codes() {
        assert_eq!(CuResult(2).name(), Some("CUDA_ERROR_OUT_OF_MEMORY"));
        assert_eq!(CuResult(0).describe(), "CUDA_SUCCESS");
        assert_eq!(CuResult(12345).name(), None);
        assert_eq!(CuResult(12345).describe(), "CUresult 12345");
    }

    #[test]
    fn locations_are_a_device_the_host_or_unknown() {
        let at = |kind, id| CuMemLocation { kind, id }.located();
        assert_eq!(at(1, 3), Located::Device(3));
        assert_eq!(at(1, -1), Located::Unknown);
        for host in 2..=4 {
            assert_eq!(at(host, 7), Located::Host);
        }
        // localized { deviceId = 2, localityDomainId = 1 }, the rest of the union unset
        let localized = i32::from_ne_bytes([2, 1, 0xab, 0xcd]);
        let location = CuMemLocation {
            kind: 6,
            id: localized,
        };
        assert_eq!(location.localized(), (2, 1));
        assert_eq!(location.located(), Located::Device(2));
        for unknown in [0, 5, 7, i32::MAX] {
            assert_eq!(at(unknown, 0), Located::Unknown, "type {unknown}");
        }
    }

    #[test]
    fn struct_layouts_match_cuda_h() {
        assert_eq!(std::mem::size_of::<CuMemAllocationProp>(), 32);
        assert_eq!(std::mem::offset_of!(CuMemAllocationProp, location), 8);
        assert_eq!(std::mem::offset_of!(CuMemPoolPropsHead, location), 8);
        assert_eq!(std::mem::size_of::<CuArrayDescriptor>(), 24);
        assert_eq!(std::mem::size_of::<CuArray3DDescriptor>(), 40);
        assert_eq!(std::mem::offset_of!(CuArray3DDescriptor, flags), 32);
        assert_eq!(std::mem::size_of::<CuArrayMemoryRequirements>(), 32);
        assert_eq!(std::mem::size_of::<CuArrayDescriptorV1>(), 16);
        assert_eq!(std::mem::size_of::<CuArray3DDescriptorV1>(), 24);
        assert_eq!(std::mem::size_of::<CuIpcMemHandle>(), 64);
        assert_eq!(std::mem::size_of::<CuArrayMapInfo>(), 96);
        assert_eq!(std::mem::offset_of!(CuArrayMapInfo, subresource), 24);
        assert_eq!(std::mem::offset_of!(CuArrayMapInfo, handle), 64);
        assert_eq!(std::mem::offset_of!(CuArrayMapInfo, device_mask), 80);
        // graphs and graph memory
        assert_eq!(std::mem::size_of::<CuMemPoolProps>(), 88);
        assert_eq!(std::mem::size_of::<CuMemAllocNodeParams>(), 120);
        assert_eq!(std::mem::offset_of!(CuMemAllocNodeParams, bytesize), 104);
        assert_eq!(std::mem::size_of::<CuGraphInstantiateParams>(), 32);
    }
}
