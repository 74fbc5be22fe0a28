//! The error-name table: every `CUresult` of NVIDIA's `cuda.h` (`typedef enum cudaError_enum
//! { … } CUresult`), each with its code, its name and a short description in our own words
//! (what the stand-in's `cuGetErrorString` answers). Written once here: the interposer's
//! trace and messages, the stand-in's result codes and `cuGetErrorName`/`cuGetErrorString`,
//! and the CLI read it; the census ([`crate::census`]) fails when the header has a value this
//! table lacks or names differently.
//!
//! [`name`] is a `match` on the code, inlined where it is called, as the interposer's own
//! was: the trace's lookup costs what it did.

use std::ffi::CStr;

/// One `CUresult` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Code {
    pub code: u32,
    /// `CUDA_SUCCESS`, `CUDA_ERROR_*`.
    pub name: &'static str,
    /// The name, NUL-terminated (what `cuGetErrorName` hands out).
    pub c_name: &'static CStr,
    /// Our description (what `cuGetErrorString` hands out).
    pub description: &'static CStr,
}

/// `concat!(name, "\0")` as a `CStr`, at compile time.
const fn c_str(with_nul: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(with_nul.as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("a CUresult name with a NUL inside"),
    }
}

macro_rules! results {
    ($($name:ident = $code:literal, $description:literal;)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "` (", stringify!($code), ").")]
            pub const $name: u32 = $code;
        )*

        /// Each name as text, for comparing with a trace's `result` (`names::CUDA_SUCCESS`).
        pub mod names {
            $(pub const $name: &str = stringify!($name);)*
        }

        /// Every value, in the header's order (ascending codes).
        pub static CODES: &[Code] = &[$(Code {
            code: $code,
            name: stringify!($name),
            c_name: c_str(concat!(stringify!($name), "\0")),
            description: $description,
        }),*];

        /// The name of `code`, or `None` for a code this build does not know (a newer
        /// driver's, or garbage).
        #[inline]
        pub const fn name(code: u32) -> Option<&'static str> {
            Some(match code {
                $($code => stringify!($name),)*
                _ => return None,
            })
        }
    };
}

results! {
    CUDA_SUCCESS = 0, c"no error";
    CUDA_ERROR_INVALID_VALUE = 1, c"invalid argument";
    CUDA_ERROR_OUT_OF_MEMORY = 2, c"out of memory";
    CUDA_ERROR_NOT_INITIALIZED = 3, c"driver not initialized";
    CUDA_ERROR_DEINITIALIZED = 4, c"driver shutting down";
    CUDA_ERROR_PROFILER_DISABLED = 5, c"profiler disabled";
    CUDA_ERROR_PROFILER_NOT_INITIALIZED = 6, c"profiler not initialized";
    CUDA_ERROR_PROFILER_ALREADY_STARTED = 7, c"profiler already started";
    CUDA_ERROR_PROFILER_ALREADY_STOPPED = 8, c"profiler already stopped";
    CUDA_ERROR_STUB_LIBRARY = 34, c"stub driver library loaded";
    CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER = 36, c"the call needs a newer driver";
    CUDA_ERROR_DEVICE_UNAVAILABLE = 46, c"device unavailable";
    CUDA_ERROR_MULTICAST_RESOURCE_FULL = 47, c"multicast resources exhausted";
    CUDA_ERROR_NO_DEVICE = 100, c"no device";
    CUDA_ERROR_INVALID_DEVICE = 101, c"invalid device ordinal";
    CUDA_ERROR_DEVICE_NOT_LICENSED = 102, c"device not licensed";
    CUDA_ERROR_INVALID_IMAGE = 200, c"invalid kernel image";
    CUDA_ERROR_INVALID_CONTEXT = 201, c"invalid context";
    CUDA_ERROR_CONTEXT_ALREADY_CURRENT = 202, c"context already current";
    CUDA_ERROR_MAP_FAILED = 205, c"map failed";
    CUDA_ERROR_UNMAP_FAILED = 206, c"unmap failed";
    CUDA_ERROR_ARRAY_IS_MAPPED = 207, c"array is mapped";
    CUDA_ERROR_ALREADY_MAPPED = 208, c"already mapped";
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209, c"no kernel image for the device";
    CUDA_ERROR_ALREADY_ACQUIRED = 210, c"already acquired";
    CUDA_ERROR_NOT_MAPPED = 211, c"not mapped";
    CUDA_ERROR_NOT_MAPPED_AS_ARRAY = 212, c"not mapped as array";
    CUDA_ERROR_NOT_MAPPED_AS_POINTER = 213, c"not mapped as pointer";
    CUDA_ERROR_ECC_UNCORRECTABLE = 214, c"uncorrectable ECC error";
    CUDA_ERROR_UNSUPPORTED_LIMIT = 215, c"limit not supported";
    CUDA_ERROR_CONTEXT_ALREADY_IN_USE = 216, c"context already in use";
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217, c"peer access not supported";
    CUDA_ERROR_INVALID_PTX = 218, c"invalid PTX";
    CUDA_ERROR_INVALID_GRAPHICS_CONTEXT = 219, c"invalid graphics context";
    CUDA_ERROR_NVLINK_UNCORRECTABLE = 220, c"uncorrectable NVLink error";
    CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221, c"JIT compiler not found";
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222, c"PTX version not supported";
    CUDA_ERROR_JIT_COMPILATION_DISABLED = 223, c"JIT compilation disabled";
    CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY = 224, c"execution affinity not supported";
    CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC = 225, c"device-side sync not supported";
    CUDA_ERROR_CONTAINED = 226, c"contained error";
    CUDA_ERROR_INSUFFICIENT_LOADER_VERSION = 227, c"loader version too old for the fatbin";
    CUDA_ERROR_INVALID_SOURCE = 300, c"invalid source";
    CUDA_ERROR_FILE_NOT_FOUND = 301, c"file not found";
    CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND = 302, c"shared object symbol not found";
    CUDA_ERROR_SHARED_OBJECT_INIT_FAILED = 303, c"shared object initialization failed";
    CUDA_ERROR_OPERATING_SYSTEM = 304, c"operating system call failed";
    CUDA_ERROR_INVALID_HANDLE = 400, c"invalid resource handle";
    CUDA_ERROR_ILLEGAL_STATE = 401, c"illegal state";
    CUDA_ERROR_LOSSY_QUERY = 402, c"lossy query";
    CUDA_ERROR_NOT_FOUND = 500, c"not found";
    CUDA_ERROR_NOT_READY = 600, c"not ready";
    CUDA_ERROR_ILLEGAL_ADDRESS = 700, c"illegal memory access";
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701, c"too many resources requested for launch";
    CUDA_ERROR_LAUNCH_TIMEOUT = 702, c"launch timed out";
    CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING = 703, c"incompatible texturing";
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704, c"peer access already enabled";
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705, c"peer access not enabled";
    CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE = 708, c"primary context already active";
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709, c"context destroyed";
    CUDA_ERROR_ASSERT = 710, c"device-side assert triggered";
    CUDA_ERROR_TOO_MANY_PEERS = 711, c"too many peers";
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712, c"host memory already registered";
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713, c"host memory not registered";
    CUDA_ERROR_HARDWARE_STACK_ERROR = 714, c"hardware stack error";
    CUDA_ERROR_ILLEGAL_INSTRUCTION = 715, c"illegal instruction";
    CUDA_ERROR_MISALIGNED_ADDRESS = 716, c"misaligned address";
    CUDA_ERROR_INVALID_ADDRESS_SPACE = 717, c"invalid address space";
    CUDA_ERROR_INVALID_PC = 718, c"invalid program counter";
    CUDA_ERROR_LAUNCH_FAILED = 719, c"launch failed";
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720, c"cooperative launch too large";
    CUDA_ERROR_TENSOR_MEMORY_LEAK = 721, c"tensor memory leak";
    CUDA_ERROR_NOT_PERMITTED = 800, c"operation not permitted";
    CUDA_ERROR_NOT_SUPPORTED = 801, c"operation not supported";
    CUDA_ERROR_SYSTEM_NOT_READY = 802, c"system not ready";
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803, c"driver and kernel module versions differ";
    CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804, c"forward compatibility not supported on this device";
    CUDA_ERROR_MPS_CONNECTION_FAILED = 805, c"MPS connection failed";
    CUDA_ERROR_MPS_RPC_FAILURE = 806, c"MPS RPC failure";
    CUDA_ERROR_MPS_SERVER_NOT_READY = 807, c"MPS server not ready";
    CUDA_ERROR_MPS_MAX_CLIENTS_REACHED = 808, c"MPS client limit reached";
    CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED = 809, c"MPS connection limit reached";
    CUDA_ERROR_MPS_CLIENT_TERMINATED = 810, c"MPS client terminated";
    CUDA_ERROR_CDP_NOT_SUPPORTED = 811, c"dynamic parallelism not supported";
    CUDA_ERROR_CDP_VERSION_MISMATCH = 812, c"dynamic parallelism version mismatch";
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900, c"not allowed during stream capture";
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901, c"stream capture invalidated";
    CUDA_ERROR_STREAM_CAPTURE_MERGE = 902, c"stream capture merge not allowed";
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903, c"stream capture not matched";
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904, c"stream capture not joined";
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905, c"stream capture isolation violated";
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906, c"implicit stream in capture";
    CUDA_ERROR_CAPTURED_EVENT = 907, c"operation not allowed on a captured event";
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908, c"stream capture ended on another thread";
    CUDA_ERROR_TIMEOUT = 909, c"timed out";
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910, c"graph update not performed";
    CUDA_ERROR_EXTERNAL_DEVICE = 911, c"external device error";
    CUDA_ERROR_INVALID_CLUSTER_SIZE = 912, c"invalid cluster size";
    CUDA_ERROR_FUNCTION_NOT_LOADED = 913, c"function not loaded";
    CUDA_ERROR_INVALID_RESOURCE_TYPE = 914, c"invalid resource type";
    CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION = 915, c"invalid resource configuration";
    CUDA_ERROR_KEY_ROTATION = 916, c"key rotation error";
    CUDA_ERROR_STREAM_DETACHED = 917, c"stream is detached";
    CUDA_ERROR_GRAPH_RECAPTURE_FAILURE = 918, c"graph recapture failed";
    CUDA_ERROR_FABRIC_NOT_READY = 919, c"GPU fabric not ready";
    CUDA_ERROR_UNKNOWN = 999, c"unknown error";
}

/// The row of `code`.
pub fn code(code: u32) -> Option<&'static Code> {
    CODES
        .binary_search_by_key(&code, |c| c.code)
        .ok()
        .map(|at| &CODES[at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_ascend_and_every_lookup_agrees_with_the_table() {
        assert!(CODES.windows(2).all(|w| w[0].code < w[1].code));
        for c in CODES {
            assert_eq!(name(c.code), Some(c.name));
            assert_eq!(code(c.code), Some(c));
            assert_eq!(c.c_name.to_str(), Ok(c.name));
            assert!(!c.description.is_empty(), "{}", c.name);
        }
        assert_eq!(
            name(CUDA_ERROR_OUT_OF_MEMORY),
            Some("CUDA_ERROR_OUT_OF_MEMORY")
        );
        assert_eq!(code(0).map(|c| c.description), Some(c"no error"));
        assert_eq!(names::CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED");
        assert_eq!(name(12345), None);
        assert_eq!(code(12345), None);
    }
}
