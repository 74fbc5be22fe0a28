//! `cuGetErrorName` / `cuGetErrorString`: the name of every `CUresult` in `cuda.h` and a
//! short description (our own wording).

use std::ffi::CStr;

use crate::abi::CUresult;

/// (code, name, description).
const ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (0, c"CUDA_SUCCESS", c"no error"),
    (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED", c"driver not initialized"),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (5, c"CUDA_ERROR_PROFILER_DISABLED", c"profiler disabled"),
    (
        6,
        c"CUDA_ERROR_PROFILER_NOT_INITIALIZED",
        c"profiler not initialized",
    ),
    (
        7,
        c"CUDA_ERROR_PROFILER_ALREADY_STARTED",
        c"profiler already started",
    ),
    (
        8,
        c"CUDA_ERROR_PROFILER_ALREADY_STOPPED",
        c"profiler already stopped",
    ),
    (
        34,
        c"CUDA_ERROR_STUB_LIBRARY",
        c"stub driver library loaded",
    ),
    (46, c"CUDA_ERROR_DEVICE_UNAVAILABLE", c"device unavailable"),
    (100, c"CUDA_ERROR_NO_DEVICE", c"no device"),
    (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    (
        102,
        c"CUDA_ERROR_DEVICE_NOT_LICENSED",
        c"device not licensed",
    ),
    (200, c"CUDA_ERROR_INVALID_IMAGE", c"invalid kernel image"),
    (201, c"CUDA_ERROR_INVALID_CONTEXT", c"invalid context"),
    (
        202,
        c"CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
        c"context already current",
    ),
    (205, c"CUDA_ERROR_MAP_FAILED", c"map failed"),
    (206, c"CUDA_ERROR_UNMAP_FAILED", c"unmap failed"),
    (207, c"CUDA_ERROR_ARRAY_IS_MAPPED", c"array is mapped"),
    (208, c"CUDA_ERROR_ALREADY_MAPPED", c"already mapped"),
    (
        209,
        c"CUDA_ERROR_NO_BINARY_FOR_GPU",
        c"no kernel image for the device",
    ),
    (210, c"CUDA_ERROR_ALREADY_ACQUIRED", c"already acquired"),
    (211, c"CUDA_ERROR_NOT_MAPPED", c"not mapped"),
    (
        212,
        c"CUDA_ERROR_NOT_MAPPED_AS_ARRAY",
        c"not mapped as array",
    ),
    (
        213,
        c"CUDA_ERROR_NOT_MAPPED_AS_POINTER",
        c"not mapped as pointer",
    ),
    (
        214,
        c"CUDA_ERROR_ECC_UNCORRECTABLE",
        c"uncorrectable ECC error",
    ),
    (215, c"CUDA_ERROR_UNSUPPORTED_LIMIT", c"limit not supported"),
    (
        216,
        c"CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
        c"context already in use",
    ),
    (
        217,
        c"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
        c"peer access not supported",
    ),
    (218, c"CUDA_ERROR_INVALID_PTX", c"invalid PTX"),
    (
        219,
        c"CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
        c"invalid graphics context",
    ),
    (
        220,
        c"CUDA_ERROR_NVLINK_UNCORRECTABLE",
        c"uncorrectable NVLink error",
    ),
    (
        221,
        c"CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
        c"JIT compiler not found",
    ),
    (
        222,
        c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        c"PTX version not supported",
    ),
    (
        223,
        c"CUDA_ERROR_JIT_COMPILATION_DISABLED",
        c"JIT compilation disabled",
    ),
    (
        224,
        c"CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
        c"execution affinity not supported",
    ),
    (
        225,
        c"CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC",
        c"device-side sync not supported",
    ),
    (226, c"CUDA_ERROR_CONTAINED", c"contained error"),
    (300, c"CUDA_ERROR_INVALID_SOURCE", c"invalid source"),
    (301, c"CUDA_ERROR_FILE_NOT_FOUND", c"file not found"),
    (
        302,
        c"CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
        c"shared object symbol not found",
    ),
    (
        303,
        c"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
        c"shared object initialization failed",
    ),
    (
        304,
        c"CUDA_ERROR_OPERATING_SYSTEM",
        c"operating system call failed",
    ),
    (
        400,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (401, c"CUDA_ERROR_ILLEGAL_STATE", c"illegal state"),
    (402, c"CUDA_ERROR_LOSSY_QUERY", c"lossy query"),
    (500, c"CUDA_ERROR_NOT_FOUND", c"not found"),
    (600, c"CUDA_ERROR_NOT_READY", c"not ready"),
    (700, c"CUDA_ERROR_ILLEGAL_ADDRESS", c"illegal memory access"),
    (
        701,
        c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        c"too many resources requested for launch",
    ),
    (702, c"CUDA_ERROR_LAUNCH_TIMEOUT", c"launch timed out"),
    (
        703,
        c"CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING",
        c"incompatible texturing",
    ),
    (
        704,
        c"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
        c"peer access already enabled",
    ),
    (
        705,
        c"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
        c"peer access not enabled",
    ),
    (
        708,
        c"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
        c"primary context already active",
    ),
    (
        709,
        c"CUDA_ERROR_CONTEXT_IS_DESTROYED",
        c"context destroyed",
    ),
    (710, c"CUDA_ERROR_ASSERT", c"device-side assert triggered"),
    (711, c"CUDA_ERROR_TOO_MANY_PEERS", c"too many peers"),
    (
        712,
        c"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
        c"host memory already registered",
    ),
    (
        713,
        c"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
        c"host memory not registered",
    ),
    (
        714,
        c"CUDA_ERROR_HARDWARE_STACK_ERROR",
        c"hardware stack error",
    ),
    (
        715,
        c"CUDA_ERROR_ILLEGAL_INSTRUCTION",
        c"illegal instruction",
    ),
    (716, c"CUDA_ERROR_MISALIGNED_ADDRESS", c"misaligned address"),
    (
        717,
        c"CUDA_ERROR_INVALID_ADDRESS_SPACE",
        c"invalid address space",
    ),
    (718, c"CUDA_ERROR_INVALID_PC", c"invalid program counter"),
    (719, c"CUDA_ERROR_LAUNCH_FAILED", c"launch failed"),
    (
        720,
        c"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
        c"cooperative launch too large",
    ),
    (721, c"CUDA_ERROR_TENSOR_MEMORY_LEAK", c"tensor memory leak"),
    (800, c"CUDA_ERROR_NOT_PERMITTED", c"operation not permitted"),
    (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (802, c"CUDA_ERROR_SYSTEM_NOT_READY", c"system not ready"),
    (
        803,
        c"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        c"driver and kernel module versions differ",
    ),
    (
        804,
        c"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        c"forward compatibility not supported on this device",
    ),
    (
        805,
        c"CUDA_ERROR_MPS_CONNECTION_FAILED",
        c"MPS connection failed",
    ),
    (806, c"CUDA_ERROR_MPS_RPC_FAILURE", c"MPS RPC failure"),
    (
        807,
        c"CUDA_ERROR_MPS_SERVER_NOT_READY",
        c"MPS server not ready",
    ),
    (
        808,
        c"CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
        c"MPS client limit reached",
    ),
    (
        809,
        c"CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED",
        c"MPS connection limit reached",
    ),
    (
        810,
        c"CUDA_ERROR_MPS_CLIENT_TERMINATED",
        c"MPS client terminated",
    ),
    (
        811,
        c"CUDA_ERROR_CDP_NOT_SUPPORTED",
        c"dynamic parallelism not supported",
    ),
    (
        812,
        c"CUDA_ERROR_CDP_VERSION_MISMATCH",
        c"dynamic parallelism version mismatch",
    ),
    (
        900,
        c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        c"not allowed during stream capture",
    ),
    (
        901,
        c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        c"stream capture invalidated",
    ),
    (
        902,
        c"CUDA_ERROR_STREAM_CAPTURE_MERGE",
        c"stream capture merge not allowed",
    ),
    (
        903,
        c"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
        c"stream capture not matched",
    ),
    (
        904,
        c"CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
        c"stream capture not joined",
    ),
    (
        905,
        c"CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
        c"stream capture isolation violated",
    ),
    (
        906,
        c"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
        c"implicit stream in capture",
    ),
    (
        907,
        c"CUDA_ERROR_CAPTURED_EVENT",
        c"operation not allowed on a captured event",
    ),
    (
        908,
        c"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
        c"stream capture ended on another thread",
    ),
    (909, c"CUDA_ERROR_TIMEOUT", c"timed out"),
    (
        910,
        c"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
        c"graph update not performed",
    ),
    (911, c"CUDA_ERROR_EXTERNAL_DEVICE", c"external device error"),
    (
        912,
        c"CUDA_ERROR_INVALID_CLUSTER_SIZE",
        c"invalid cluster size",
    ),
    (
        913,
        c"CUDA_ERROR_FUNCTION_NOT_LOADED",
        c"function not loaded",
    ),
    (
        914,
        c"CUDA_ERROR_INVALID_RESOURCE_TYPE",
        c"invalid resource type",
    ),
    (
        915,
        c"CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
        c"invalid resource configuration",
    ),
    (916, c"CUDA_ERROR_KEY_ROTATION", c"key rotation error"),
    (917, c"CUDA_ERROR_STREAM_DETACHED", c"stream is detached"),
    (
        918,
        c"CUDA_ERROR_GRAPH_RECAPTURE_FAILURE",
        c"graph recapture failed",
    ),
    (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

fn find(code: CUresult) -> Option<&'static (CUresult, &'static CStr, &'static CStr)> {
    ERRORS.iter().find(|(c, _, _)| *c == code)
}

pub fn name(code: CUresult) -> Option<&'static CStr> {
    find(code).map(|e| e.1)
}

pub fn description(code: CUresult) -> Option<&'static CStr> {
    find(code).map(|e| e.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        assert_eq!(name(2), Some(c"CUDA_ERROR_OUT_OF_MEMORY"));
        assert_eq!(description(0), Some(c"no error"));
        assert_eq!(name(3000), None);
        let mut codes: Vec<_> = ERRORS.iter().map(|e| e.0).collect();
        codes.dedup();
        assert_eq!(codes.len(), ERRORS.len());
    }
}
