//! The graph memory part's books: what each executable graph's memory nodes take per
//! device, the uploads and launches in flight, and the rule for what a call may add to a
//! device's graph reservation. Plain data; `engine/graph_memory.rs` meets the driver with it
//! (the rules are told there).

use cuquota_format::settings::MAX_DEVICES;
use std::collections::HashMap;

/// The graph pool maps memory in units of the device's allocation granularity (2 MiB on
/// every current GPU); a launch's growth is rounded up to it.
const GRAPH_GRANULE: u64 = 2 << 20;

/// How many executable graphs with memory nodes are remembered at once; beyond that a new
/// one is not charged before its launches (its reservation is still reconciled after the
/// calls of the others on the same device).
const EXECS_KEPT: usize = 4096;

/// Bytes per device, a few entries.
pub type PerDevice = Vec<(u32, u64)>;

pub fn add_to(v: &mut PerDevice, device: u32, bytes: u64) {
    match v.iter_mut().find(|(d, _)| *d == device) {
        Some((_, b)) => *b = b.saturating_add(bytes),
        None => v.push((device, bytes)),
    }
}

pub fn on(v: &PerDevice, device: u32) -> u64 {
    v.iter().find(|(d, _)| *d == device).map_or(0, |(_, b)| *b)
}

/// What an executable graph's allocations take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecNeeds {
    /// All its allocation nodes' bytes, per device.
    pub need: PerDevice,
    /// Of those, the ones not freed inside the graph: live after a launch.
    pub unfreed: PerDevice,
    /// Instantiated with `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`.
    pub auto_free: bool,
    /// Launched at least once.
    pub launched: bool,
}

/// Uploads and launches between their reservation and their settlement, on one device.
#[derive(Clone, Copy, Debug, Default)]
pub struct InFlight {
    /// Their graphs' allocations: what they count on the pool's unused memory for.
    pub need: u64,
    /// What they reserved in the quota beyond the driver's reservation.
    pub reserved: u64,
}

/// The graph memory part's books: executable graphs with memory nodes, and calls in flight.
pub struct GraphBooks {
    execs: HashMap<usize, ExecNeeds>,
    in_flight: [InFlight; MAX_DEVICES],
}

impl GraphBooks {
    pub fn new() -> GraphBooks {
        GraphBooks {
            execs: HashMap::new(),
            in_flight: [InFlight::default(); MAX_DEVICES],
        }
    }

    pub fn in_flight(&mut self, device: u32) -> Option<&mut InFlight> {
        self.in_flight.get_mut(device as usize)
    }

    /// `exec` was instantiated with memory nodes needing `needs` (kept while there is room).
    pub fn remember(&mut self, exec: usize, needs: ExecNeeds) {
        if self.execs.len() < EXECS_KEPT || self.execs.contains_key(&exec) {
            self.execs.insert(exec, needs);
        }
    }

    pub fn needs(&self, exec: usize) -> Option<ExecNeeds> {
        self.execs.get(&exec).cloned()
    }

    /// `exec` was launched (its allocations may be live from now on).
    pub fn launched(&mut self, exec: usize) {
        if let Some(n) = self.execs.get_mut(&exec) {
            n.launched = true;
        }
    }

    /// `exec` was destroyed (its handle may come back).
    pub fn forget(&mut self, exec: usize) {
        self.execs.remove(&exec);
    }
}

impl Default for GraphBooks {
    fn default() -> Self {
        GraphBooks::new()
    }
}

/// What an upload or launch may add to a device's graph reservation: its allocations
/// less the pool's unused reservation that no other call in flight counts on, rounded up to
/// the granule. `extra_free`: what the call itself frees first (an auto-free relaunch).
pub fn growth(need: u64, reserved: u64, used: u64, others: u64, extra_free: u64) -> u64 {
    let unused = reserved.saturating_sub(used).saturating_add(extra_free);
    let short = need.saturating_sub(unused.saturating_sub(others));
    short.div_ceil(GRAPH_GRANULE).saturating_mul(GRAPH_GRANULE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn books_remember_graphs_while_there_is_room() {
        let mut b = GraphBooks::new();
        let needs = ExecNeeds {
            need: vec![(0, MIB)],
            ..ExecNeeds::default()
        };
        b.remember(1, needs.clone());
        b.launched(1);
        assert!(b
            .needs(1)
            .is_some_and(|n| n.launched && n.need == needs.need));
        for exec in 2..=EXECS_KEPT + 1 {
            b.remember(exec, needs.clone());
        }
        assert_eq!(b.needs(EXECS_KEPT + 1), None, "beyond the bound: not kept");
        b.remember(1, ExecNeeds::default());
        assert_eq!(
            b.needs(1),
            Some(ExecNeeds::default()),
            "a known one is replaced"
        );
        b.forget(1);
        assert_eq!(b.needs(1), None);
        assert!(b.in_flight(0).is_some() && b.in_flight(MAX_DEVICES as u32).is_none());
    }

    #[test]
    fn growth_is_the_shortfall_in_granules() {
        // An empty pool: all of it, rounded up.
        assert_eq!(growth(3 * MIB, 0, 0, 0, 0), 4 * MIB);
        assert_eq!(growth(4 * MIB, 0, 0, 0, 0), 4 * MIB);
        // Unused reservation is used first.
        assert_eq!(growth(4 * MIB, 6 * MIB, 4 * MIB, 0, 0), 2 * MIB);
        assert_eq!(growth(4 * MIB, 8 * MIB, 2 * MIB, 0, 0), 0);
        // Unless another call in flight counts on it.
        assert_eq!(growth(4 * MIB, 8 * MIB, 2 * MIB, 4 * MIB, 0), 2 * MIB);
        // An auto-free relaunch frees its own live allocations first.
        assert_eq!(growth(4 * MIB, 4 * MIB, 4 * MIB, 0, 4 * MIB), 0);
        assert_eq!(growth(0, 0, 0, 0, 0), 0);
    }

    #[test]
    fn per_device_sums() {
        let mut v = PerDevice::new();
        add_to(&mut v, 1, 5);
        add_to(&mut v, 0, 2);
        add_to(&mut v, 1, u64::MAX);
        assert_eq!(v, vec![(1, u64::MAX), (0, 2)]);
        assert_eq!((on(&v, 0), on(&v, 3)), (2, 0));
    }
}
