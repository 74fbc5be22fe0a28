//! The device's graph memory reservation: the `graph` part of the footprint.

use super::Engine;

impl Engine {
    /// Trims unused graph memory on `device` (`cuDeviceGraphMemTrim`) to make room for
    /// `wanted` bytes through `api`; returns the bytes given back.
    pub(super) fn trim_graph_memory(&self, _api: &'static str, _device: u32, _wanted: u64) -> u64 {
        0
    }
}
