//! The device's graph memory reservation: the `graph` part of the footprint.
//!
//! The driver backs the allocation nodes of a graph (stream capture of `cuMemAllocAsync`,
//! `cuGraphAddMemAllocNode`) from a per-device graph memory pool when the executable graph
//! is uploaded or launched, and the pool keeps its reservation
//! (`CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT`) until `cuDeviceGraphMemTrim`. The `graph` part
//! on a device is that reservation by the driver's own figure, reconciled after every call
//! that may change it: instantiation, upload, launch and the program's own trim.
//!
//! At instantiation cuquota learns what the executable graph's allocations take on each
//! device from the source graph's memory nodes (child graphs included). Before an upload or
//! a launch it reserves what the call may add: those bytes less the pool's unused
//! reservation (reserved − used, less what other uploads and launches in flight count on),
//! rounded up to the pool's granule. If that does not fit, it trims unused graph memory
//! once and tries again; still over the quota, the call is refused with
//! `CUDA_ERROR_OUT_OF_MEMORY` before the driver runs it. After the call the part is set to
//! the driver's reservation.
//!
//! Graphs without memory nodes cost nothing here (no book, no driver call); a device whose
//! graph pool the driver cannot report (`cuDeviceGetGraphMemAttribute` fails) is not
//! charged for it; with `CUQUOTA_COUNT=allocations` every hook passes straight through.

use super::admission::PartRefusal;
use super::explain::Outcome;
use super::queries::{GraphNode, Queries};
use super::state::Engine;
use crate::cuda_abi::{
    CuResult, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD,
};
use crate::graph_memory::{add_to, growth, on, ExecNeeds};
use crate::in_hook::driver;
use crate::quota::Part;
use std::collections::HashSet;

/// How deep child graphs are followed, and how many nodes are read at most, at one
/// instantiation (a graph beyond either is charged for what was read).
const MAX_DEPTH: usize = 8;
const MAX_NODES: usize = 1 << 20;

/// The memory nodes of `graph` (child graphs to [`MAX_DEPTH`]) summed per device; None
/// when the driver cannot list the graph's nodes.
pub fn needs_of(queries: &dyn Queries, graph: usize) -> Option<ExecNeeds> {
    let mut allocs: Vec<(u32, u64, u64)> = Vec::new();
    let mut freed: HashSet<u64> = HashSet::new();
    let mut pending = vec![(graph, 0usize)];
    let mut read = 0usize;
    let mut first = true;
    'walk: while let Some((g, depth)) = pending.pop() {
        let nodes = match queries.graph_nodes(g) {
            Some(nodes) => nodes,
            None if first => return None,
            None => continue,
        };
        first = false;
        for node in nodes {
            read += 1;
            if read > MAX_NODES {
                break 'walk;
            }
            match node {
                GraphNode::Alloc {
                    device: Some(d),
                    bytes,
                    address,
                } => allocs.push((d, bytes, address)),
                GraphNode::Free(address) => {
                    freed.insert(address);
                }
                GraphNode::Child(child) if depth + 1 < MAX_DEPTH => {
                    pending.push((child, depth + 1))
                }
                _ => {}
            }
        }
    }
    let mut needs = ExecNeeds::default();
    for (device, bytes, address) in allocs {
        add_to(&mut needs.need, device, bytes);
        if !freed.contains(&address) {
            add_to(&mut needs.unfreed, device, bytes);
        }
    }
    Some(needs)
}

/// One device's share of a staged upload or launch.
#[derive(Clone, Copy, Debug)]
struct Staged {
    device: u32,
    need: u64,
    reserved: u64,
}

impl Engine {
    /// `cuGraphInstantiate*` of `graph` with `flags`; `call` instantiates and returns the
    /// executable graph. With `CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD` the instantiation uploads
    /// too, so it is reserved for as an upload is.
    pub fn graph_instantiate(
        &self,
        api: &'static str,
        graph: usize,
        flags: u64,
        call: impl FnOnce() -> (CuResult, usize),
    ) -> CuResult {
        let call = move || driver(call);
        if !self.counts_footprint() {
            return call().0;
        }
        let needs = needs_of(self.queries.as_ref(), graph).filter(|n| !n.need.is_empty());
        let Some(mut needs) = needs else {
            return call().0;
        };
        needs.auto_free = flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH != 0;
        let staged = if flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD != 0 {
            match self.graph_stage(api, &needs, false) {
                Ok(staged) => staged,
                Err(rc) => return rc,
            }
        } else {
            Vec::new()
        };
        let (rc, exec) = call();
        if rc.is_ok() {
            self.graph_memory.lock().remember(exec, needs.clone());
        }
        self.graph_settle(api, &staged);
        // The instantiation may have reserved memory of its own: the driver's figure.
        for &(device, _) in &needs.need {
            if !staged.iter().any(|s| s.device == device) {
                self.reconcile_graph(api, device);
            }
        }
        rc
    }

    /// `cuGraphUpload` (`launch` false) or `cuGraphLaunch` of `exec`; `call` runs it.
    pub fn graph_run(
        &self,
        api: &'static str,
        exec: usize,
        launch: bool,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        let call = move || driver(call);
        if !self.counts_footprint() {
            return call();
        }
        let Some(needs) = self.graph_memory.lock().needs(exec) else {
            return call();
        };
        let staged = match self.graph_stage(api, &needs, launch) {
            Ok(staged) => staged,
            Err(rc) => return rc,
        };
        let rc = call();
        if rc.is_ok() && launch {
            self.graph_memory.lock().launched(exec);
        }
        self.graph_settle(api, &staged);
        rc
    }

    /// `cuGraphExecDestroy(exec)` succeeded: its book goes (the handle may come back).
    pub fn graph_exec_destroyed(&self, exec: usize) {
        self.graph_memory.lock().forget(exec);
    }

    /// A context on `device` was destroyed or reset (the driver may have released graph
    /// memory with it): the part follows the driver. No driver call when it holds nothing.
    pub(super) fn graph_context_gone(&self, api: &'static str, device: u32) {
        if self.counts_footprint() && self.part_total(device, Part::Graph) > 0 {
            self.reconcile_graph(api, device);
        }
    }

    /// The program's own `cuDeviceGraphMemTrim(device)` succeeded.
    pub fn graph_memory_trimmed(&self, api: &'static str, device: u32) {
        if self.counts_footprint() {
            self.reconcile_graph(api, device);
        }
    }

    /// Reserves, device by device, what an upload or launch of `needs` may add; a device
    /// where it does not fit (after one trim of unused graph memory) refuses the call: what
    /// was staged on the others is settled, the refusal explained.
    fn graph_stage(
        &self,
        api: &'static str,
        needs: &ExecNeeds,
        launch: bool,
    ) -> Result<Vec<Staged>, CuResult> {
        // A relaunch with auto-free first frees what the last launch left live.
        let relaunch_frees = launch && needs.auto_free && needs.launched;
        let mut staged = Vec::with_capacity(needs.need.len());
        for &(device, need) in &needs.need {
            let frees = if relaunch_frees {
                on(&needs.unfreed, device)
            } else {
                0
            };
            let mut attempt = self.stage_on(api, device, need, frees);
            // Trimming needs no call of ours in flight on the device (they count on the
            // pool's unused memory), so it comes after this one's share was taken back.
            if let Err((add, _)) = attempt {
                if self.trim_graph_memory(api, device, add) > 0 {
                    if let Some(q) = self.quota(device) {
                        q.forgive_refusal(); // tried again: not a refusal yet
                    }
                    attempt = self.stage_on(api, device, need, frees);
                }
            }
            match attempt {
                Ok(Some(share)) => staged.push(share),
                Ok(None) => {}
                Err((add, refusal)) => {
                    self.graph_settle(api, &staged);
                    self.part_refused(api, device, Part::Graph, add, refusal);
                    return Err(CuResult::OUT_OF_MEMORY);
                }
            }
        }
        Ok(staged)
    }

    /// One device's share of an upload or launch whose allocations take `need` there (and
    /// which first frees up to `frees` of its own): charged and in flight, or refused with
    /// the bytes it would have added (nothing left in flight). `None`: not charged (the
    /// driver cannot say what its graph pool holds, or no quota is kept for the device).
    fn stage_on(
        &self,
        api: &'static str,
        device: u32,
        need: u64,
        frees: u64,
    ) -> Result<Option<Staged>, (u64, PartRefusal)> {
        let add = {
            // The pool's figures are read under the books' lock, so no trim of ours can
            // come between them and this share being counted in flight.
            let mut books = self.graph_memory.lock();
            let Some(flight) = books.in_flight(device) else {
                return Ok(None);
            };
            let Some((reserved, used)) = self.queries.graph_memory(device) else {
                return Ok(None);
            };
            let add = growth(need, reserved, used, flight.need, frees.min(used));
            flight.need += need;
            flight.reserved += add;
            add
        };
        let share = Staged {
            device,
            need,
            reserved: add,
        };
        match self.part_grow(api, device, Part::Graph, add) {
            Ok(()) => Ok(Some(share)),
            Err(refusal) => {
                self.graph_unstage(share);
                Err((add, refusal))
            }
        }
    }

    /// A staged share is no longer in flight (nothing was charged for it, or its call
    /// returned).
    fn graph_unstage(&self, share: Staged) {
        if let Some(flight) = self.graph_memory.lock().in_flight(share.device) {
            flight.need -= share.need;
            flight.reserved -= share.reserved;
        }
    }

    /// After the call: each staged share leaves the books and its device's part is set to
    /// the driver's reservation.
    fn graph_settle(&self, api: &'static str, staged: &[Staged]) {
        for &share in staged {
            self.graph_unstage(share);
            self.reconcile_graph(api, share.device);
        }
    }

    /// The `graph` part on `device` := the driver's reservation, plus what calls still in
    /// flight reserved beyond it. Under the books' lock, so two settlements cannot
    /// interleave their reads and writes.
    fn reconcile_graph(&self, api: &'static str, device: u32) {
        let mut books = self.graph_memory.lock();
        let Some(flight) = books.in_flight(device).copied() else {
            return;
        };
        if let Some((reserved, _)) = self.queries.graph_memory(device) {
            self.part_set(api, device, Part::Graph, reserved + flight.reserved);
        }
    }

    /// Trims unused graph memory on `device` (`cuDeviceGraphMemTrim`) to make room for
    /// `wanted` bytes through `api`; returns the bytes given back. Nothing to do (and no
    /// driver call) when the part holds nothing; not while an upload or launch on the
    /// device is in flight, since it counts on that unused memory.
    pub(super) fn trim_graph_memory(&self, api: &'static str, device: u32, wanted: u64) -> u64 {
        if !self.counts_footprint() || self.part_total(device, Part::Graph) == 0 {
            return 0;
        }
        let (released, after) = {
            let mut books = self.graph_memory.lock();
            let Some(flight) = books.in_flight(device).copied() else {
                return 0;
            };
            if flight.need > 0 {
                return 0;
            }
            let Some((reserved, used)) = self.queries.graph_memory(device) else {
                return 0;
            };
            if reserved <= used || !self.queries.graph_memory_trim(device) {
                // Nothing to trim; but the part may be behind the driver (a context reset
                // released the pool): the driver's figure, and any room it gives.
                let before = self.part_total(device, Part::Graph);
                self.part_set(api, device, Part::Graph, reserved + flight.reserved);
                return before.saturating_sub(self.part_total(device, Part::Graph));
            }
            let now = self
                .queries
                .graph_memory(device)
                .map_or(reserved, |(r, _)| r);
            let total = now + flight.reserved;
            let released = self.part_total(device, Part::Graph).saturating_sub(total);
            // Shrunk without an event: the trim is traced first, then the part's total.
            if let Some(q) = self.quota(device) {
                q.release_part(Part::Graph, released);
            }
            (released, total)
        };
        if released == 0 {
            return 0;
        }
        self.trimmed(api, device, Part::Graph, released, wanted);
        if self.quota(device).is_some() {
            self.explain(Outcome::PartChanged {
                device,
                api,
                part: Part::Graph,
                total: after,
                held: self.held(device),
            });
        }
        released
    }
}

#[cfg(test)]
mod tests;
