//! The slice of the CUDA driver ABI that cuquota touches: our own Rust definitions of the
//! types and constants, written from the facts in NVIDIA's public `cuda.h`.

use cuquota_driver::results;
use std::ffi::c_void;

/// A `CUresult`. A transparent `u32` rather than an enum, so that a code we don't know
/// (a newer driver's, or garbage) stays representable and is passed back unchanged.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CuResult(pub u32);

impl CuResult {
    pub const SUCCESS: CuResult = CuResult(results::CUDA_SUCCESS);
    pub const INVALID_VALUE: CuResult = CuResult(results::CUDA_ERROR_INVALID_VALUE);
    pub const OUT_OF_MEMORY: CuResult = CuResult(results::CUDA_ERROR_OUT_OF_MEMORY);
    pub const INVALID_CONTEXT: CuResult = CuResult(results::CUDA_ERROR_INVALID_CONTEXT);
    pub const NOT_FOUND: CuResult = CuResult(results::CUDA_ERROR_NOT_FOUND);
    pub const NOT_PERMITTED: CuResult = CuResult(results::CUDA_ERROR_NOT_PERMITTED);
    pub const NOT_SUPPORTED: CuResult = CuResult(results::CUDA_ERROR_NOT_SUPPORTED);
    pub const UNKNOWN: CuResult = CuResult(results::CUDA_ERROR_UNKNOWN);

    pub fn is_ok(self) -> bool {
        self.0 == 0
    }

    /// The `CUDA_ERROR_*` name (the workspace's error-name table), or `None` for a code this
    /// build does not know.
    pub fn name(self) -> Option<&'static str> {
        results::name(self.0)
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
