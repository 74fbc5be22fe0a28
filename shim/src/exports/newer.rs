//! A driver newer than the header cuquota was built against: `CUDA_SHIM_DRIVER_VERSION` of
//! 13060 or more gives a variant no `cuda.h` declares yet, `cuMemAlloc_v3`, which
//! `cuGetProcAddress("cuMemAlloc", 13060 or more)` then hands out (as a real driver hands out
//! the newest variant introduced at or before the version asked). It is what cuquota must
//! notice: a variant of a hooked function that its build does not know. Its prototype and
//! behaviour are `cuMemAlloc_v2`'s (a later variant's real ones are unknown). Kept out of
//! the table every other lookup uses ([`NEWER`]): a driver of an older version has no such
//! variant, and the symbol answers `CUDA_ERROR_NOT_FOUND` there.

use super::settings;
use crate::abi::*;
use crate::ffi::Out;
use crate::memory::{self, Placement};

/// The version that introduces the variants of this file.
pub const NEWER_VERSION: i32 = 13060;

exports! {
    fn cuMemAlloc_v3(dptr: *mut CUdeviceptr, bytes: usize) as cuMemAlloc since 13060 {
        if !newer_driver() {
            return Err(CUDA_ERROR_NOT_FOUND);
        }
        let out = Out::new(dptr)?;
        out.write(memory::allocate_current(bytes, Placement::Anywhere)?);
        Ok(())
    }
}

/// The variants of a driver newer than 13.5, for `cuGetProcAddress` when the shim is one.
pub(super) static NEWER: &[crate::proc_address::Row] = ROWS;

/// A newer driver's variant that replaces `found` (a plain variant the table gave for
/// `version`): of the same base, introduced after it, at or before `version`.
pub(super) fn newest(
    found: &'static crate::proc_address::Row,
    version: i32,
) -> Option<&'static crate::proc_address::Row> {
    if !newer_driver() || found.stream != crate::proc_address::StreamKind::Normal {
        return None;
    }
    NEWER
        .iter()
        .filter(|row| {
            row.base == found.base && row.version > found.version && row.version <= version
        })
        .max_by_key(|row| row.version)
}

/// Whether the shim simulates a driver that has the variants of this file.
pub(super) fn newer_driver() -> bool {
    settings().is_ok_and(|c| c.driver_version >= NEWER_VERSION)
}
