//! Initialization, versions, error strings, and entry-point lookup (`cuGetProcAddress`).

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr;

use super::{settings, TABLE};
use crate::abi::*;
use crate::config::DEFAULT_DRIVER_VERSION;
use crate::errors;
use crate::ffi::{self, write_optional, Out};
use crate::proc_address::Lookup;
use crate::state;

exports! {
    fn cuInit(flags: c_uint) as cuInit since 2000, before_init {
        let cfg = settings().map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        crate::pools::set_chunk(cfg.pool_chunk);
        state::initialize(cfg, flags)
    }

    fn cuDriverGetVersion(version: *mut c_int) as cuDriverGetVersion since 2020, before_init {
        let out = Out::new(version)?;
        out.write(settings().map_or(DEFAULT_DRIVER_VERSION, |c| c.driver_version));
        Ok(())
    }

    fn cuGetErrorName(
        error: CUresult,
        text: *mut *const c_char,
    ) as cuGetErrorName since 6000, before_init {
        let out = Out::new(text)?;
        let name = errors::name(error);
        out.write(name.map_or(ptr::null(), |s| s.as_ptr()));
        name.map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    fn cuGetErrorString(
        error: CUresult,
        text: *mut *const c_char,
    ) as cuGetErrorString since 6000, before_init {
        let out = Out::new(text)?;
        let description = errors::description(error);
        out.write(description.map_or(ptr::null(), |s| s.as_ptr()));
        description.map(|_| ()).ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    /// NVIDIA's private export tables are not imitated.
    fn cuGetExportTable(
        _table: *mut *const c_void,
        _table_id: *const Uuid,
    ) as cuGetExportTable since 3000, before_init {
        Err(CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGetProcAddress(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        cuda_version: c_int,
        flags: u64,
    ) as cuGetProcAddress since 11030, before_init {
        get_proc_address(ffi::c_str(symbol)?, Out::new(pfn)?, cuda_version, flags, None)
    }

    fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        cuda_version: c_int,
        flags: u64,
        symbol_status: *mut c_int,
    ) as cuGetProcAddress since 12000, before_init {
        let status = Out::optional(symbol_status);
        get_proc_address(ffi::c_str(symbol)?, Out::new(pfn)?, cuda_version, flags, status)
    }
}

/// `cuGetProcAddress(_v2)`: the address of `symbol`'s variant for `version` and `flags`, or
/// null, with the `CUdriverProcAddressQueryResult` code for `status`.
fn get_proc_address(
    symbol: &str,
    pfn: Out<*mut c_void>,
    version: c_int,
    flags: u64,
    status: Option<Out<c_int>>,
) -> Result<(), CUresult> {
    let found = match TABLE.lookup(symbol, version, flags) {
        Lookup::Found(row) => Lookup::Found(super::newer::newest(row, version).unwrap_or(row)),
        other => other,
    };
    let (address, code, result) = match found {
        Lookup::Found(row) => (row.address(), 0, Ok(())),
        Lookup::NotFound => (ptr::null_mut(), 1, Err(CUDA_ERROR_NOT_FOUND)),
        Lookup::VersionNotSufficient => (ptr::null_mut(), 2, Err(CUDA_ERROR_NOT_FOUND)),
    };
    pfn.write(address);
    write_optional(status, code);
    result
}
