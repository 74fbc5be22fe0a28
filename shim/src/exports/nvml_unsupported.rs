//! The NVML getters the shim has no figure for, each exported and answering
//! `NVML_ERROR_NOT_SUPPORTED` (after the initialisation check), as real NVML does for a
//! query a device cannot answer. Monitoring tools show that as N/A, whereas a missing symbol
//! is an error to them (nvitop lists it at exit; pynvml raises `NVMLError_FunctionNotFound`).
//!
//! The list is what nvitop 1.7.2 and gpustat 1.1.1 ask through nvidia-ml-py 13.615.71 that
//! the shim does not answer otherwise. The arguments are never read: each stub takes none,
//! which the C calling convention allows (the caller's arguments are simply ignored).
//! `nvmlDeviceGetRunningProcessDetailList` is among them on purpose: with the `_v3` process
//! functions and `nvmlDeviceGetConfComputeMemSizeInfo` present but it absent, nvitop would
//! read the process list with a 32-byte struct instead of nvml.h's 24-byte one.

use crate::abi::*;

macro_rules! not_supported {
    ($($symbol:ident)*) => {$(
        #[no_mangle]
        #[allow(non_snake_case)]
        pub extern "C" fn $symbol() -> NvmlReturn {
            super::nvml::not_supported()
        }
    )*};
}

not_supported! {
    nvmlDeviceGetBAR1MemoryInfo
    nvmlDeviceGetClockInfo
    nvmlDeviceGetComputeInstanceId
    nvmlDeviceGetComputeMode
    nvmlDeviceGetConfComputeMemSizeInfo
    nvmlDeviceGetCudaComputeCapability
    nvmlDeviceGetDecoderUtilization
    nvmlDeviceGetDeviceHandleFromMigDeviceHandle
    nvmlDeviceGetDisplayActive
    nvmlDeviceGetDisplayMode
    nvmlDeviceGetDriverModel
    nvmlDeviceGetDriverModel_v2
    nvmlDeviceGetEncoderUtilization
    nvmlDeviceGetEnforcedPowerLimit
    nvmlDeviceGetFanSpeed
    nvmlDeviceGetFanSpeed_v2
    nvmlDeviceGetFieldValues
    nvmlDeviceGetGpuInstanceId
    nvmlDeviceGetMaxClockInfo
    nvmlDeviceGetMaxMigDeviceCount
    nvmlDeviceGetMigDeviceHandleByIndex
    nvmlDeviceGetMigMode
    nvmlDeviceGetNumFans
    nvmlDeviceGetPcieThroughput
    nvmlDeviceGetPerformanceState
    nvmlDeviceGetPersistenceMode
    nvmlDeviceGetPowerManagementLimit
    nvmlDeviceGetPowerUsage
    nvmlDeviceGetProcessUtilization
    nvmlDeviceGetRunningProcessDetailList
    nvmlDeviceGetSerial
    nvmlDeviceGetTemperature
    nvmlDeviceGetTemperatureV
    nvmlDeviceGetTotalEccErrors
    nvmlDeviceGetUtilizationRates
    nvmlDeviceIsMigDeviceHandle
}
