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

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`: like stream 0, they mean "the current
/// context's default stream".
pub const STREAM_LEGACY: usize = 0x1;
pub const STREAM_PER_THREAD: usize = 0x2;

/// `CU_MEM_LOCATION_TYPE_*`.
pub const LOCATION_DEVICE: i32 = 1;
pub const LOCATION_HOST: i32 = 2;
pub const LOCATION_HOST_NUMA: i32 = 3;
pub const LOCATION_HOST_NUMA_CURRENT: i32 = 4;
/// Capture (issue 10).
pub const CUDA_ERROR_ILLEGAL_STATE: CUresult = 401;
pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
pub const ACCESS_READ_WRITE: i32 = 3;
/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
pub const ALLOCATION_PINNED: i32 = 1;
/// `CU_MEM_ALLOCATION_TYPE_MANAGED` (CUDA 13).
pub const ALLOCATION_MANAGED: i32 = 2;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemLocation {
    pub kind: i32,
    pub id: i32,
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
