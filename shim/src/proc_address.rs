//! `cuGetProcAddress`: one table of every exported function, keyed by the base name callers
//! ask for, with the driver API version that introduced each variant (from the `PFN_*_vNNNN`
//! typedefs of `cudaTypedefs.h`) and its default-stream flavour.

use std::ffi::c_void;

use crate::exports;

/// The default-stream semantics a variant was built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// The plain symbol (legacy default stream).
    Normal,
    /// `_ptsz`: per-thread default stream, for calls taking a stream.
    Ptsz,
    /// `_ptds`: per-thread default stream, for the synchronous calls.
    Ptds,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Row {
    pub base: &'static str,
    pub symbol: &'static str,
    pub version: i32,
    pub stream: StreamKind,
    address: Address,
}

impl Row {
    pub fn address(&self) -> *mut c_void {
        self.address.0 as *mut c_void
    }
}

/// The address of one of our exported functions.
#[derive(Debug, PartialEq, Eq)]
struct Address(*const ());

// SAFETY: the pointer is the address of code; it is never written through and is valid for
// the life of the library, so sharing it between threads is harmless.
unsafe impl Sync for Address {}

macro_rules! table {
    ($($base:ident $version:literal $stream:ident $symbol:ident,)*) => {
        static TABLE: &[Row] = &[$(Row {
            base: stringify!($base),
            symbol: stringify!($symbol),
            version: $version,
            stream: StreamKind::$stream,
            address: Address(exports::$symbol as *const ()),
        },)*];
    };
}

table! {
    // base                               version stream symbol
    cuInit                                 2000 Normal cuInit,
    cuDriverGetVersion                     2020 Normal cuDriverGetVersion,
    cuGetErrorName                         6000 Normal cuGetErrorName,
    cuGetErrorString                       6000 Normal cuGetErrorString,
    cuGetExportTable                       3000 Normal cuGetExportTable,
    cuGetProcAddress                      11030 Normal cuGetProcAddress,
    cuGetProcAddress                      12000 Normal cuGetProcAddress_v2,

    cuDeviceGet                            2000 Normal cuDeviceGet,
    cuDeviceGetCount                       2000 Normal cuDeviceGetCount,
    cuDeviceGetName                        2000 Normal cuDeviceGetName,
    cuDeviceGetUuid                        9020 Normal cuDeviceGetUuid,
    cuDeviceGetUuid                       11040 Normal cuDeviceGetUuid_v2,
    cuDeviceTotalMem                       2000 Normal cuDeviceTotalMem,
    cuDeviceTotalMem                       3020 Normal cuDeviceTotalMem_v2,
    cuDeviceGetAttribute                   2000 Normal cuDeviceGetAttribute,
    cuDeviceComputeCapability              2000 Normal cuDeviceComputeCapability,
    cuDeviceGetPCIBusId                    4010 Normal cuDeviceGetPCIBusId,
    cuDeviceGetByPCIBusId                  4010 Normal cuDeviceGetByPCIBusId,
    cuDeviceCanAccessPeer                  4000 Normal cuDeviceCanAccessPeer,
    cuDeviceGetDefaultMemPool             11020 Normal cuDeviceGetDefaultMemPool,
    cuDeviceGetMemPool                    11020 Normal cuDeviceGetMemPool,
    cuDeviceSetMemPool                    11020 Normal cuDeviceSetMemPool,

    cuDevicePrimaryCtxRetain               7000 Normal cuDevicePrimaryCtxRetain,
    cuDevicePrimaryCtxRelease              7000 Normal cuDevicePrimaryCtxRelease,
    cuDevicePrimaryCtxRelease             11000 Normal cuDevicePrimaryCtxRelease_v2,
    cuDevicePrimaryCtxReset                7000 Normal cuDevicePrimaryCtxReset,
    cuDevicePrimaryCtxReset               11000 Normal cuDevicePrimaryCtxReset_v2,
    cuDevicePrimaryCtxSetFlags             7000 Normal cuDevicePrimaryCtxSetFlags,
    cuDevicePrimaryCtxSetFlags            11000 Normal cuDevicePrimaryCtxSetFlags_v2,
    cuDevicePrimaryCtxGetState             7000 Normal cuDevicePrimaryCtxGetState,

    cuCtxCreate                            2000 Normal cuCtxCreate,
    cuCtxCreate                            3020 Normal cuCtxCreate_v2,
    cuCtxCreate                           11040 Normal cuCtxCreate_v3,
    cuCtxCreate                           12050 Normal cuCtxCreate_v4,
    cuCtxDestroy                           2000 Normal cuCtxDestroy,
    cuCtxDestroy                           4000 Normal cuCtxDestroy_v2,
    cuCtxPushCurrent                       2000 Normal cuCtxPushCurrent,
    cuCtxPushCurrent                       4000 Normal cuCtxPushCurrent_v2,
    cuCtxPopCurrent                        2000 Normal cuCtxPopCurrent,
    cuCtxPopCurrent                        4000 Normal cuCtxPopCurrent_v2,
    cuCtxSetCurrent                        4000 Normal cuCtxSetCurrent,
    cuCtxGetCurrent                        4000 Normal cuCtxGetCurrent,
    cuCtxGetDevice                         2000 Normal cuCtxGetDevice,
    cuCtxSynchronize                       2000 Normal cuCtxSynchronize,
    cuCtxGetApiVersion                     3020 Normal cuCtxGetApiVersion,
    cuCtxGetFlags                          7000 Normal cuCtxGetFlags,
    cuCtxGetId                            12000 Normal cuCtxGetId,
    cuCtxGetStreamPriorityRange            5050 Normal cuCtxGetStreamPriorityRange,

    cuStreamCreate                         2000 Normal cuStreamCreate,
    cuStreamCreateWithPriority             5050 Normal cuStreamCreateWithPriority,
    cuStreamDestroy                        2000 Normal cuStreamDestroy,
    cuStreamDestroy                        4000 Normal cuStreamDestroy_v2,
    cuStreamSynchronize                    2000 Normal cuStreamSynchronize,
    cuStreamSynchronize                    7000 Ptsz   cuStreamSynchronize_ptsz,
    cuStreamQuery                          2000 Normal cuStreamQuery,
    cuStreamQuery                          7000 Ptsz   cuStreamQuery_ptsz,
    cuStreamWaitEvent                      3020 Normal cuStreamWaitEvent,
    cuStreamWaitEvent                      7000 Ptsz   cuStreamWaitEvent_ptsz,
    cuStreamGetFlags                       5050 Normal cuStreamGetFlags,
    cuStreamGetFlags                       7000 Ptsz   cuStreamGetFlags_ptsz,
    cuStreamGetPriority                    5050 Normal cuStreamGetPriority,
    cuStreamGetPriority                    7000 Ptsz   cuStreamGetPriority_ptsz,
    cuStreamIsCapturing                   10000 Normal cuStreamIsCapturing,
    cuStreamIsCapturing                   10000 Ptsz   cuStreamIsCapturing_ptsz,

    cuEventCreate                          2000 Normal cuEventCreate,
    cuEventRecord                          2000 Normal cuEventRecord,
    cuEventRecord                          7000 Ptsz   cuEventRecord_ptsz,
    cuEventRecordWithFlags                11010 Normal cuEventRecordWithFlags,
    cuEventRecordWithFlags                11010 Ptsz   cuEventRecordWithFlags_ptsz,
    cuEventQuery                           2000 Normal cuEventQuery,
    cuEventSynchronize                     2000 Normal cuEventSynchronize,
    cuEventDestroy                         2000 Normal cuEventDestroy,
    cuEventDestroy                         4000 Normal cuEventDestroy_v2,
    cuEventElapsedTime                     2000 Normal cuEventElapsedTime,
    cuEventElapsedTime                    12080 Normal cuEventElapsedTime_v2,

    cuMemGetInfo                           2000 Normal cuMemGetInfo,
    cuMemGetInfo                           3020 Normal cuMemGetInfo_v2,
    cuMemAlloc                             2000 Normal cuMemAlloc,
    cuMemAlloc                             3020 Normal cuMemAlloc_v2,
    cuMemFree                              2000 Normal cuMemFree,
    cuMemFree                              3020 Normal cuMemFree_v2,
    cuMemAllocPitch                        2000 Normal cuMemAllocPitch,
    cuMemAllocPitch                        3020 Normal cuMemAllocPitch_v2,
    cuMemAllocManaged                      6000 Normal cuMemAllocManaged,
    cuMemGetAddressRange                   2000 Normal cuMemGetAddressRange,
    cuMemGetAddressRange                   3020 Normal cuMemGetAddressRange_v2,
    cuMemAllocHost                         2000 Normal cuMemAllocHost,
    cuMemAllocHost                         3020 Normal cuMemAllocHost_v2,
    cuMemHostAlloc                         2020 Normal cuMemHostAlloc,
    cuMemFreeHost                          2000 Normal cuMemFreeHost,
    cuMemHostGetDevicePointer              2020 Normal cuMemHostGetDevicePointer,
    cuMemHostGetDevicePointer              3020 Normal cuMemHostGetDevicePointer_v2,
    cuMemHostGetFlags                      2030 Normal cuMemHostGetFlags,

    cuMemcpy                               4000 Normal cuMemcpy,
    cuMemcpy                               7000 Ptds   cuMemcpy_ptds,
    cuMemcpyAsync                          4000 Normal cuMemcpyAsync,
    cuMemcpyAsync                          7000 Ptsz   cuMemcpyAsync_ptsz,
    cuMemcpyHtoD                           2000 Normal cuMemcpyHtoD,
    cuMemcpyHtoD                           3020 Normal cuMemcpyHtoD_v2,
    cuMemcpyHtoD                           7000 Ptds   cuMemcpyHtoD_v2_ptds,
    cuMemcpyDtoH                           2000 Normal cuMemcpyDtoH,
    cuMemcpyDtoH                           3020 Normal cuMemcpyDtoH_v2,
    cuMemcpyDtoH                           7000 Ptds   cuMemcpyDtoH_v2_ptds,
    cuMemcpyDtoD                           2000 Normal cuMemcpyDtoD,
    cuMemcpyDtoD                           3020 Normal cuMemcpyDtoD_v2,
    cuMemcpyDtoD                           7000 Ptds   cuMemcpyDtoD_v2_ptds,
    cuMemcpyHtoDAsync                      2000 Normal cuMemcpyHtoDAsync,
    cuMemcpyHtoDAsync                      3020 Normal cuMemcpyHtoDAsync_v2,
    cuMemcpyHtoDAsync                      7000 Ptsz   cuMemcpyHtoDAsync_v2_ptsz,
    cuMemcpyDtoHAsync                      2000 Normal cuMemcpyDtoHAsync,
    cuMemcpyDtoHAsync                      3020 Normal cuMemcpyDtoHAsync_v2,
    cuMemcpyDtoHAsync                      7000 Ptsz   cuMemcpyDtoHAsync_v2_ptsz,
    cuMemcpyDtoDAsync                      3000 Normal cuMemcpyDtoDAsync,
    cuMemcpyDtoDAsync                      3020 Normal cuMemcpyDtoDAsync_v2,
    cuMemcpyDtoDAsync                      7000 Ptsz   cuMemcpyDtoDAsync_v2_ptsz,
    cuMemsetD8                             2000 Normal cuMemsetD8,
    cuMemsetD8                             3020 Normal cuMemsetD8_v2,
    cuMemsetD8                             7000 Ptds   cuMemsetD8_v2_ptds,
    cuMemsetD16                            2000 Normal cuMemsetD16,
    cuMemsetD16                            3020 Normal cuMemsetD16_v2,
    cuMemsetD16                            7000 Ptds   cuMemsetD16_v2_ptds,
    cuMemsetD32                            2000 Normal cuMemsetD32,
    cuMemsetD32                            3020 Normal cuMemsetD32_v2,
    cuMemsetD32                            7000 Ptds   cuMemsetD32_v2_ptds,
    cuMemsetD8Async                        3020 Normal cuMemsetD8Async,
    cuMemsetD8Async                        7000 Ptsz   cuMemsetD8Async_ptsz,
    cuMemsetD16Async                       3020 Normal cuMemsetD16Async,
    cuMemsetD16Async                       7000 Ptsz   cuMemsetD16Async_ptsz,
    cuMemsetD32Async                       3020 Normal cuMemsetD32Async,
    cuMemsetD32Async                       7000 Ptsz   cuMemsetD32Async_ptsz,

    cuMemAllocAsync                       11020 Normal cuMemAllocAsync,
    cuMemAllocAsync                       11020 Ptsz   cuMemAllocAsync_ptsz,
    cuMemFreeAsync                        11020 Normal cuMemFreeAsync,
    cuMemFreeAsync                        11020 Ptsz   cuMemFreeAsync_ptsz,
    cuMemAllocFromPoolAsync               11020 Normal cuMemAllocFromPoolAsync,
    cuMemAllocFromPoolAsync               11020 Ptsz   cuMemAllocFromPoolAsync_ptsz,
    cuMemPoolCreate                       11020 Normal cuMemPoolCreate,
    cuMemPoolDestroy                      11020 Normal cuMemPoolDestroy,
    cuMemPoolSetAttribute                 11020 Normal cuMemPoolSetAttribute,
    cuMemPoolGetAttribute                 11020 Normal cuMemPoolGetAttribute,
    cuMemPoolTrimTo                       11020 Normal cuMemPoolTrimTo,
    cuMemPoolSetAccess                    11020 Normal cuMemPoolSetAccess,
    cuMemPoolGetAccess                    11020 Normal cuMemPoolGetAccess,

    cuMemGetAllocationGranularity         10020 Normal cuMemGetAllocationGranularity,
    cuMemCreate                           10020 Normal cuMemCreate,
    cuMemRelease                          10020 Normal cuMemRelease,
    cuMemAddressReserve                   10020 Normal cuMemAddressReserve,
    cuMemAddressFree                      10020 Normal cuMemAddressFree,
    cuMemMap                              10020 Normal cuMemMap,
    cuMemUnmap                            10020 Normal cuMemUnmap,
    cuMemSetAccess                        10020 Normal cuMemSetAccess,
    cuMemGetAccess                        10020 Normal cuMemGetAccess,
    cuMemGetAllocationPropertiesFromHandle 10020 Normal cuMemGetAllocationPropertiesFromHandle,
    cuMemRetainAllocationHandle           11000 Normal cuMemRetainAllocationHandle,

    // Not part of CUDA: this stand-in's test helpers.
    cuShimInjectFault                         0 Normal cuShimInjectFault,
    cuShimStats                               0 Normal cuShimStats,
}

/// The outcome of a lookup, as `CUdriverProcAddressQueryResult` describes it.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Found(&'static Row),
    /// The base name is known, but every variant is newer than the version asked for.
    VersionNotSufficient,
    NotFound,
}

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// The newest variant of `base` introduced no later than `version`; with the per-thread
/// default stream flag, a `_ptsz`/`_ptds` variant is preferred where one qualifies.
pub fn lookup(base: &str, version: i32, flags: u64) -> Lookup {
    let variants = || TABLE.iter().filter(move |row| row.base == base);
    if variants().next().is_none() {
        return Lookup::NotFound;
    }
    let newest = |per_thread: bool| {
        variants()
            .filter(|row| (row.stream != StreamKind::Normal) == per_thread)
            .filter(|row| row.version <= version)
            .max_by_key(|row| row.version)
    };
    let per_thread = if flags & PER_THREAD_DEFAULT_STREAM != 0 {
        newest(true)
    } else {
        None
    };
    match per_thread.or_else(|| newest(false)) {
        Some(row) => Lookup::Found(row),
        None => Lookup::VersionNotSufficient,
    }
}

/// Whether `symbol` is one of the functions this library exports.
pub fn is_exported(symbol: &str) -> bool {
    TABLE.iter().any(|row| row.symbol == symbol)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(base: &str, version: i32, flags: u64) -> &'static str {
        match lookup(base, version, flags) {
            Lookup::Found(row) => row.symbol,
            other => panic!("{base}@{version}/{flags}: {other:?}"),
        }
    }

    #[test]
    fn versions_pick_the_newest_qualifying_variant() {
        assert_eq!(found("cuMemAlloc", 2000, 0), "cuMemAlloc");
        assert_eq!(found("cuMemAlloc", 3010, 0), "cuMemAlloc");
        assert_eq!(found("cuMemAlloc", 3020, 0), "cuMemAlloc_v2");
        assert_eq!(found("cuMemAlloc", 12080, 0), "cuMemAlloc_v2");
        assert_eq!(lookup("cuMemAlloc", 1000, 0), Lookup::VersionNotSufficient);
        assert_eq!(found("cuGetProcAddress", 11030, 0), "cuGetProcAddress");
        assert_eq!(found("cuGetProcAddress", 11080, 0), "cuGetProcAddress");
        assert_eq!(found("cuGetProcAddress", 12000, 0), "cuGetProcAddress_v2");
        assert_eq!(found("cuCtxCreate", 12080, 0), "cuCtxCreate_v4");
        assert_eq!(found("cuEventElapsedTime", 12060, 0), "cuEventElapsedTime");
        assert_eq!(
            found("cuEventElapsedTime", 12080, 0),
            "cuEventElapsedTime_v2"
        );
        assert_eq!(
            lookup("cuMemAllocAsync", 11000, 0),
            Lookup::VersionNotSufficient
        );
        assert_eq!(
            lookup("cuMemAllocAsync", 11000, 2),
            Lookup::VersionNotSufficient
        );
    }

    #[test]
    fn per_thread_flag_prefers_ptsz_and_ptds() {
        assert_eq!(found("cuMemAllocAsync", 12000, 0), "cuMemAllocAsync");
        assert_eq!(found("cuMemAllocAsync", 12000, 1), "cuMemAllocAsync");
        assert_eq!(found("cuMemAllocAsync", 12000, 2), "cuMemAllocAsync_ptsz");
        assert_eq!(found("cuMemcpyHtoD", 12000, 2), "cuMemcpyHtoD_v2_ptds");
        assert_eq!(found("cuMemcpyHtoD", 12000, 0), "cuMemcpyHtoD_v2");
        // The per-thread variant is too new: fall back to the plain one.
        assert_eq!(found("cuMemcpyHtoD", 3020, 2), "cuMemcpyHtoD_v2");
        // No per-thread variant at all.
        assert_eq!(found("cuMemAlloc", 12000, 2), "cuMemAlloc_v2");
    }

    #[test]
    fn variant_names_and_unknown_names_are_not_found() {
        assert_eq!(lookup("cuMemAlloc_v2", 12000, 0), Lookup::NotFound);
        assert_eq!(lookup("cuNoSuchThing", 12000, 0), Lookup::NotFound);
        assert_eq!(lookup("", 12000, 0), Lookup::NotFound);
    }

    #[test]
    fn every_row_is_reachable_and_distinct() {
        for row in TABLE {
            let flags = if row.stream == StreamKind::Normal {
                0
            } else {
                2
            };
            assert_eq!(found(row.base, row.version, flags), row.symbol);
            assert!(row.symbol.starts_with(row.base), "{}", row.symbol);
        }
        let mut symbols: Vec<_> = TABLE.iter().map(|r| r.symbol).collect();
        symbols.sort();
        symbols.dedup();
        assert_eq!(symbols.len(), TABLE.len());
        let mut addresses: Vec<_> = TABLE.iter().map(|r| r.address() as usize).collect();
        addresses.sort();
        addresses.dedup();
        assert_eq!(
            addresses.len(),
            TABLE.len(),
            "each export has its own address"
        );
    }

    /// Every function defined in exports.rs is in the table, and each one's body reports
    /// its own name to the fault injector.
    #[test]
    fn table_covers_every_export() {
        let source = include_str!("exports.rs");
        let mut count = 0;
        for chunk in source.split("pub unsafe extern \"C\" fn ").skip(1) {
            let name = &chunk[..chunk.find('(').unwrap()];
            assert!(is_exported(name), "{name} is missing from the table");
            let body_end = chunk.find("\n}\n").unwrap_or(chunk.len());
            let body: String = chunk[..body_end].split_whitespace().collect();
            if body.contains("entry(") {
                assert!(
                    body.contains(&format!("entry(\"{name}\"")),
                    "{name} reports another name to entry()"
                );
            }
            count += 1;
        }
        assert_eq!(count, TABLE.len());
    }
}
