//! Memory another process or API exports: IPC handles of `cuMemAlloc` memory, pointers
//! exported from a memory pool, external (Vulkan, D3D, NvSci) memory. None of it can be
//! simulated honestly: the shim's device memory is private anonymous host memory, which
//! another process cannot map, and there is no external API here to import from. So every
//! one of these is `CUDA_ERROR_NOT_SUPPORTED`, as a driver without the feature answers
//! (VMM allocations, backed by memfds, are shared: see `cuMemExportToShareableHandle`).

use std::ffi::{c_uint, c_void};

use crate::abi::*;

exports! {
    fn cuIpcGetMemHandle(_handle: *mut IpcMemHandle, _dptr: CUdeviceptr)
        as cuIpcGetMemHandle since 4010 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuIpcOpenMemHandle(_dptr: *mut CUdeviceptr, _handle: IpcMemHandle, _flags: c_uint)
        as cuIpcOpenMemHandle since 4010 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuIpcOpenMemHandle_v2(_dptr: *mut CUdeviceptr, _handle: IpcMemHandle, _flags: c_uint)
        as cuIpcOpenMemHandle since 11000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuIpcCloseMemHandle(_dptr: CUdeviceptr) as cuIpcCloseMemHandle since 4010 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemPoolExportPointer(_data: *mut c_void, _dptr: CUdeviceptr)
        as cuMemPoolExportPointer since 11020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemPoolImportPointer(_dptr: *mut CUdeviceptr, _pool: Handle, _data: *mut c_void)
        as cuMemPoolImportPointer since 11020 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuImportExternalMemory(_memory: *mut Handle, _desc: *const c_void)
        as cuImportExternalMemory since 10000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuExternalMemoryGetMappedBuffer(
        _dptr: *mut CUdeviceptr,
        _memory: Handle,
        _desc: *const c_void,
    ) as cuExternalMemoryGetMappedBuffer since 10000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuDestroyExternalMemory(_memory: Handle) as cuDestroyExternalMemory since 10000 {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }
}
