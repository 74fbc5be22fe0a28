//! C ABI facts of the CUDA driver API that the shim needs: scalar types, result codes,
//! and the layouts of the few structs it reads or writes. Values follow the public `cuda.h`.

use std::ffi::{c_int, c_uint, c_void};

/// `CUresult`: a C enum, returned in a 32-bit register.
pub type CUresult = u32;
/// `CUdevice`: a device ordinal.
pub type CUdevice = c_int;
/// `CUdeviceptr` (v2): a 64-bit device address.
pub type CUdeviceptr = u64;
/// `CUdeviceptr_v1`: the 32-bit device address of the pre-3.2 entry points.
pub type CUdeviceptrV1 = c_uint;
/// Any opaque handle passed as a pointer: `CUcontext`, `CUstream`, `CUevent`, `CUmemoryPool`.
pub type Handle = *mut c_void;
/// `CUmemGenericAllocationHandle`.
pub type CUmemGenericAllocationHandle = u64;

/// The result codes the shim answers with, from the workspace's error-name table.
pub use cuquota_driver::results::{
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
    CUDA_ERROR_ILLEGAL_STATE, CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_DEVICE,
    CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
    CUDA_ERROR_INVALID_RESOURCE_TYPE, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_NO_DEVICE,
    CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_UNKNOWN,
    CUDA_ERROR_UNSUPPORTED_LIMIT, CUDA_SUCCESS,
};

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`: like stream 0, they mean "the current
/// context's default stream".
pub const STREAM_LEGACY: usize = 0x1;
pub const STREAM_PER_THREAD: usize = 0x2;

/// `CU_MEM_LOCATION_TYPE_*`.
pub const LOCATION_DEVICE: i32 = 1;
pub const LOCATION_HOST: i32 = 2;
pub const LOCATION_HOST_NUMA: i32 = 3;
pub const LOCATION_HOST_NUMA_CURRENT: i32 = 4;
/// CUDA 13.4: "a portion of device memory, specified by the locality domain ID".
pub const LOCATION_DEVICE_LOCALITY_DOMAIN: i32 = 6;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
pub const ACCESS_READ_WRITE: i32 = 3;
/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
pub const ALLOCATION_PINNED: i32 = 1;
/// `CU_MEM_ALLOCATION_TYPE_MANAGED` (CUDA 13).
pub const ALLOCATION_MANAGED: i32 = 2;

/// `CUdevResource` (`RESOURCE_ABI_VERSION` 1): its type, 92 internal bytes (the shim keeps
/// the device there), a 40-byte union (`CUdevSmResource` in its first five words), and
/// `nextResource`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DevResource {
    pub kind: u32,
    pub internal: [u8; 92],
    pub data: [u32; 10],
    pub next: *mut DevResource,
}

impl DevResource {
    pub fn zeroed() -> DevResource {
        DevResource {
            kind: 0,
            internal: [0; 92],
            data: [0; 10],
            next: std::ptr::null_mut(),
        }
    }
}

const _: () = assert!(std::mem::size_of::<DevResource>() == 144);

/// `CUctxCreateParams`: execution affinity, or CIG (never both).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CtxCreateParams {
    pub exec_affinity_params: *mut c_void,
    pub num_exec_affinity_params: c_int,
    pub cig_params: *mut c_void,
}

/// `CUstreamCigCaptureParams`: one pointer, to a `CUstreamCigParam` (never read here).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CigCaptureParams {
    pub stream_cig_params: *mut c_void,
}

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IpcMemHandle {
    pub reserved: [u8; 64],
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemLocation {
    pub kind: i32,
    /// cuda.h: a union of `int id` and, for `DEVICE_LOCALITY_DOMAIN`, `struct { unsigned char
    /// deviceId; unsigned char localityDomainId; } localized` (see [`MemLocation::localized`]).
    pub id: i32,
}

impl MemLocation {
    /// The `localized` member of the union: (deviceId, localityDomainId), the first two bytes
    /// of the union's storage.
    pub fn localized(self) -> (u8, u8) {
        let bytes = self.id.to_ne_bytes();
        (bytes[0], bytes[1])
    }

    /// Where memory at this location lands: `Some(device)` for device memory, `None` for the
    /// host (`HOST`, `HOST_NUMA`, `HOST_NUMA_CURRENT`). `DEVICE_LOCALITY_DOMAIN` (cuda.h:
    /// "localized.deviceId must specify the device ID ... The locality domain ID must be a
    /// valid locality domain ID for the specified device") is device memory of `deviceId`:
    /// a simulated device has one locality domain, 0, and "On devices with a single locality
    /// domain, ::CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN and localityDomainId 0 is
    /// equivalent to a full-device allocation created with ::CU_MEM_LOCATION_TYPE_DEVICE".
    /// Any other type, or a device that does not exist: `CUDA_ERROR_INVALID_VALUE`.
    pub fn device(self, devices: usize) -> Result<Option<usize>, CUresult> {
        let device = match self.kind {
            LOCATION_DEVICE => usize::try_from(self.id).ok(),
            LOCATION_DEVICE_LOCALITY_DOMAIN => match self.localized() {
                (device, 0) => Some(device as usize),
                _ => None,
            },
            LOCATION_HOST | LOCATION_HOST_NUMA | LOCATION_HOST_NUMA_CURRENT => return Ok(None),
            _ => None,
        };
        match device {
            Some(d) if d < devices => Ok(Some(d)),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    }
}

/// `CUmemAllocationProp`: 32 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemAllocationProp {
    pub kind: i32,
    pub requested_handle_types: i32,
    pub location: MemLocation,
    pub win32_handle_metadata: *mut c_void,
    pub alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc`: 12 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemAccessDesc {
    pub location: MemLocation,
    pub flags: i32,
}

/// The leading fields of `CUmemPoolProps` (the whole struct is 88 bytes; only these are read).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemPoolPropsHead {
    pub alloc_type: i32,
    pub handle_types: i32,
    pub location: MemLocation,
    pub win32_security_attributes: *mut c_void,
    pub max_size: usize,
}

/// `CUuuid`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Uuid {
    pub bytes: [u8; 16],
}

const _: () = assert!(std::mem::size_of::<MemAllocationProp>() == 32);
const _: () = assert!(std::mem::size_of::<MemAccessDesc>() == 12);
const _: () = assert!(std::mem::size_of::<Uuid>() == 16);

// ---- CUDA arrays --------------------------------------------------------------------------

/// `CUarray` and `CUmipmappedArray`: opaque handles.
pub type CUarray = *mut c_void;

/// `CUDA_ARRAY_DESCRIPTOR_v2`: 24 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArrayDescriptor {
    pub width: usize,
    pub height: usize,
    pub format: u32,
    pub num_channels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR_v2`: 40 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Array3DDescriptor {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub format: u32,
    pub num_channels: c_uint,
    pub flags: c_uint,
}

/// `CUDA_ARRAY_DESCRIPTOR_v1` of the legacy `cuArrayCreate`: 32-bit dimensions.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArrayDescriptorV1 {
    pub width: c_uint,
    pub height: c_uint,
    pub format: u32,
    pub num_channels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR_v1` of the legacy `cuArray3DCreate`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Array3DDescriptorV1 {
    pub width: c_uint,
    pub height: c_uint,
    pub depth: c_uint,
    pub format: u32,
    pub num_channels: c_uint,
    pub flags: c_uint,
}

/// `CUDA_ARRAY_MEMORY_REQUIREMENTS_v1`: 32 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArrayMemoryRequirements {
    pub size: usize,
    pub alignment: usize,
    pub reserved: [c_uint; 4],
}

/// `CUDA_ARRAY3D_*` flags.
pub const ARRAY3D_LAYERED: u32 = 0x01;
pub const ARRAY3D_CUBEMAP: u32 = 0x04;
pub const ARRAY3D_SPARSE: u32 = 0x40;
pub const ARRAY3D_DEFERRED_MAPPING: u32 = 0x80;
/// Every flag bit `cuda.h` defines (up to `CUDA_ARRAY3D_VIDEO_ENCODE_DECODE`).
pub const ARRAY3D_ALL_FLAGS: u32 = 0x1ff;

const _: () = assert!(std::mem::size_of::<ArrayDescriptor>() == 24);
const _: () = assert!(std::mem::size_of::<Array3DDescriptor>() == 40);
const _: () = assert!(std::mem::size_of::<ArrayMemoryRequirements>() == 32);
const _: () = assert!(std::mem::size_of::<ArrayDescriptorV1>() == 16);
const _: () = assert!(std::mem::size_of::<Array3DDescriptorV1>() == 24);

// ---- CUDA graphs with memory nodes ----------------------------------------------------------

/// `CUmemPoolProps` in full: the leading fields, then `usage` and the reserved bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemPoolProps {
    pub head: MemPoolPropsHead,
    pub usage: u16,
    pub reserved: [u8; 54],
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS_v1`: 120 bytes; `dptr` is written back.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemAllocNodeParams {
    pub pool_props: MemPoolProps,
    pub access_descs: *const MemAccessDesc,
    pub access_desc_count: usize,
    pub bytesize: usize,
    pub dptr: u64,
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS`: 32 bytes; the last two fields are written back.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GraphInstantiateParams {
    pub flags: u64,
    pub upload_stream: Handle,
    pub err_node_out: Handle,
    pub result_out: i32,
}

/// `CUgraphNodeType` values of memory nodes.
pub const GRAPH_NODE_TYPE_MEM_ALLOC: i32 = 10;
pub const GRAPH_NODE_TYPE_MEM_FREE: i32 = 11;
/// `CUgraphInstantiate_flags`.
pub const GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH: u64 = 1;
pub const GRAPH_INSTANTIATE_UPLOAD: u64 = 2;
pub const GRAPH_INSTANTIATE_DEVICE_LAUNCH: u64 = 4;
pub const GRAPH_INSTANTIATE_USE_NODE_PRIORITY: u64 = 8;
/// `CUgraphInstantiateResult`: `CUDA_GRAPH_INSTANTIATE_SUCCESS` / `_ERROR`.
pub const GRAPH_INSTANTIATE_SUCCESS: i32 = 0;
pub const GRAPH_INSTANTIATE_ERROR: i32 = 1;

const _: () = assert!(std::mem::size_of::<MemPoolProps>() == 88);
const _: () = assert!(std::mem::size_of::<MemAllocNodeParams>() == 120);
const _: () = assert!(std::mem::offset_of!(MemAllocNodeParams, dptr) == 112);
const _: () = assert!(std::mem::size_of::<GraphInstantiateParams>() == 32);
// ---- NVML (the shim also answers as libnvidia-ml.so.1; layouts from nvml.h) -------------

/// `nvmlReturn_t`.
pub type NvmlReturn = u32;
pub const NVML_SUCCESS: NvmlReturn = 0;
pub const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const NVML_ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const NVML_ERROR_NOT_FOUND: NvmlReturn = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
pub const NVML_ERROR_UNKNOWN: NvmlReturn = 999;

/// `nvmlPciInfo_t` (what `nvmlDeviceGetPciInfo_v3` fills).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NvmlPciInfo {
    /// `%04X:%02X:%02X.0`, NUL-terminated.
    pub bus_id_legacy: [u8; 16],
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    /// Device id << 16 | vendor id.
    pub pci_device_id: u32,
    pub pci_sub_system_id: u32,
    /// `%08X:%02X:%02X.0`, NUL-terminated.
    pub bus_id: [u8; 32],
}

/// `nvmlMemory_t` (v1).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NvmlMemory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`; `version` must be [`NVML_MEMORY_V2`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NvmlMemoryV2 {
    pub version: u32,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2`: `NVML_STRUCT_VERSION(Memory, 2)`, the size with the version in the top byte.
pub const NVML_MEMORY_V2: u32 = std::mem::size_of::<NvmlMemoryV2>() as u32 | 2 << 24;

/// `nvmlProcessInfo_v1_t` (`nvmlDeviceGetComputeRunningProcesses`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NvmlProcessInfoV1 {
    pub pid: u32,
    pub used_gpu_memory: u64,
}

/// `nvmlProcessInfo_v2_t`, also `nvmlProcessInfo_t` (`_v2` and `_v3`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NvmlProcessInfoV2 {
    pub pid: u32,
    pub used_gpu_memory: u64,
    /// 0xFFFFFFFF without MIG.
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

const _: () = assert!(std::mem::size_of::<NvmlPciInfo>() == 68);
const _: () = assert!(std::mem::size_of::<NvmlMemory>() == 24);
const _: () = assert!(std::mem::size_of::<NvmlMemoryV2>() == 40);
const _: () = assert!(NVML_MEMORY_V2 == 0x0200_0028);
const _: () = assert!(std::mem::size_of::<NvmlProcessInfoV1>() == 16);
const _: () = assert!(std::mem::size_of::<NvmlProcessInfoV2>() == 24);

/// `CUarrayMapInfo` (v1): 96 bytes. The subresource union (a sparse level's offsets and
/// extents, or a mip tail's layer, offset and size) is kept as its 32 raw bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ArrayMapInfo {
    /// `CUresourcetype`: [`RESOURCE_TYPE_ARRAY`] or [`RESOURCE_TYPE_MIPMAPPED_ARRAY`].
    pub resource_type: i32,
    /// The `CUarray` or `CUmipmappedArray`.
    pub resource: usize,
    pub subresource_type: i32,
    pub subresource: [u64; 4],
    /// [`MEM_OPERATION_MAP`] or [`MEM_OPERATION_UNMAP`].
    pub operation: i32,
    /// `CUmemHandleType`: only `CU_MEM_HANDLE_TYPE_GENERIC` (0).
    pub handle_type: i32,
    pub handle: u64,
    pub offset: u64,
    pub device_mask: u32,
    pub flags: u32,
    pub reserved: [u32; 2],
}
const _: () = assert!(std::mem::size_of::<ArrayMapInfo>() == 96);
pub const RESOURCE_TYPE_ARRAY: i32 = 0;
pub const RESOURCE_TYPE_MIPMAPPED_ARRAY: i32 = 1;
pub const MEM_OPERATION_MAP: i32 = 1;
pub const MEM_OPERATION_UNMAP: i32 = 2;
/// `CU_MEM_CREATE_USAGE_TILE_POOL`, in `CUmemAllocationProp::allocFlags::usage` (an
/// `unsigned short` at byte 2 of `allocFlags`).
pub const CREATE_USAGE_TILE_POOL: u16 = 0x1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_a_device_its_locality_domain_or_the_host() {
        let at = |kind, id| MemLocation { kind, id }.device(2);
        assert_eq!(at(LOCATION_DEVICE, 1), Ok(Some(1)));
        assert_eq!(at(LOCATION_DEVICE, 2), Err(CUDA_ERROR_INVALID_VALUE));
        for host in [
            LOCATION_HOST,
            LOCATION_HOST_NUMA,
            LOCATION_HOST_NUMA_CURRENT,
        ] {
            assert_eq!(at(host, 0), Ok(None));
        }
        // localized { deviceId, localityDomainId }; the union's other bytes are not read
        let localized = |device: u8, domain: u8| i32::from_ne_bytes([device, domain, 0xab, 0xab]);
        assert_eq!(
            at(LOCATION_DEVICE_LOCALITY_DOMAIN, localized(1, 0)),
            Ok(Some(1))
        );
        // one locality domain per simulated device; no device 2
        for bad in [localized(1, 1), localized(2, 0)] {
            assert_eq!(
                at(LOCATION_DEVICE_LOCALITY_DOMAIN, bad),
                Err(CUDA_ERROR_INVALID_VALUE)
            );
        }
        assert_eq!(at(0, 0), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(at(5, 0), Err(CUDA_ERROR_INVALID_VALUE));
    }
}
