//! Pool reservations beyond live allocations: the `pool cache` part of the footprint.

use super::Engine;

impl Engine {
    /// Trims this process's pools on `device` (`cuMemPoolTrimTo`) to make room for
    /// `wanted` bytes through `api`; returns the bytes given back.
    pub(super) fn trim_pools(&self, _api: &'static str, _device: u32, _wanted: u64) -> u64 {
        0
    }
}
