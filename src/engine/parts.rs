use super::admission::{Ask, PartRefusal};
use super::explain::{Outcome, Refusal, Request};
use super::state::Engine;
use crate::config::Count;
use crate::quota::{DeviceQuota, Part, UNLIMITED};
use cuquota_format::part::PerPart;

// ---- The footprint's other parts -------------------------------------------------------
//
// With `CUQUOTA_COUNT=footprint` (the default) the quota bounds allocations plus each
// [`Part`]: what pools keep, graph memory, what contexts take. A part is charged into the
// same counter as allocations (so one compare-and-swap checks the whole footprint), kept
// apart to say where the room went, and traced as a `footprint` event at every change. With
// `CUQUOTA_COUNT=allocations` every call below does nothing.

impl Engine {
    /// Whether the quota bounds the whole footprint (`CUQUOTA_COUNT=footprint`).
    pub fn counts_footprint(&self) -> bool {
        self.config
            .as_ref()
            .is_ok_and(|c| c.count == Count::Footprint)
    }

    /// Each part's bytes on `device` now.
    pub(super) fn parts_of(&self, device: u32) -> PerPart<u64> {
        self.quota(device).map_or(PerPart::default(), |q| q.parts())
    }

    /// Bytes of `part` charged on `device` now.
    pub fn part_total(&self, device: u32, part: Part) -> u64 {
        self.quota(device).map_or(0, |q| q.part(part))
    }

    /// `part` grows by `bytes` on `device`, if the quota has room (after trimming this
    /// process's unused pool and graph memory once). Refused: nothing is charged, the
    /// refusal is counted, and the caller undoes what the driver did and says so with
    /// [`Engine::part_refused`]. Observe mode charges it and says what would have been.
    pub fn part_grow(
        &self,
        api: &'static str,
        device: u32,
        part: Part,
        bytes: u64,
    ) -> Result<(), PartRefusal> {
        if !self.counts_footprint() || bytes == 0 {
            return Ok(());
        }
        let Some(quota) = self.quota(device) else {
            return Ok(());
        };
        let limit = self.limit(device, quota).unwrap_or(UNLIMITED);
        let ask = Ask {
            api,
            device,
            quota,
            limit,
        };
        let make_room = || self.made_room(api, device, bytes).then_some(bytes);
        let bytes = self.settle(ask, 0, bytes, make_room).map_err(|(r, _)| r)?;
        if bytes > 0 {
            let held = quota.commit_part(part, bytes);
            self.part_changed(api, device, quota, part, held);
        }
        Ok(())
    }

    /// Explains a refused [`Engine::part_grow`] of `bytes`: one line, and a `refused` event.
    #[cold]
    pub fn part_refused(
        &self,
        api: &'static str,
        device: u32,
        part: Part,
        bytes: u64,
        refusal: PartRefusal,
    ) {
        let PartRefusal { in_use, limit } = refusal;
        let what = match part {
            Part::Context => Request::Context,
            Part::Graph => Request::Graph,
            Part::PoolCache => Request::Growth,
        };
        let refusal = Refusal::new(api, device, bytes, in_use, limit, what);
        self.explain(Outcome::Refused(refusal));
    }

    /// `part` grew by `bytes` that the driver already holds and cannot give back: charged
    /// whatever the quota.
    pub fn part_force(&self, api: &'static str, device: u32, part: Part, bytes: u64) {
        if !self.counts_footprint() || bytes == 0 {
            return;
        }
        if let Some(quota) = self.quota(device) {
            let held = quota.force_part(part, bytes);
            self.part_changed(api, device, quota, part, held);
        }
    }

    /// `part` shrank by `bytes` (never below zero).
    pub fn part_shrink(&self, api: &'static str, device: u32, part: Part, bytes: u64) {
        let Some(quota) = self.quota(device) else {
            return;
        };
        if quota.release_part(part, bytes) > 0 {
            self.part_changed(api, device, quota, part, quota.held());
        }
    }

    /// `part` is `total` on `device` by the driver's own figure: charged (whatever the
    /// quota: the driver holds it) or given back to match.
    pub fn part_set(&self, api: &'static str, device: u32, part: Part, total: u64) {
        let now = self.part_total(device, part);
        if total > now {
            self.part_force(api, device, part, total - now);
        } else if total < now {
            self.part_shrink(api, device, part, now - total);
        }
    }

    /// A request of `wanted` bytes did not fit: end the allocations whose exports were
    /// closed since, and trim each trimmable part of this process on `device` once.
    /// True if that gave anything back.
    #[cold]
    #[inline(never)]
    pub(super) fn made_room(&self, api: &'static str, device: u32, wanted: u64) -> bool {
        // An export closed since may have ended an allocation (whatever is counted).
        let reaped = self.reap_exports(api);
        if !self.counts_footprint() {
            return reaped;
        }
        let released: u64 = (Part::ALL.into_iter())
            .filter(|part| part.trimmable())
            .map(|part| self.trim(api, device, part, wanted))
            .sum();
        released > 0 || reaped
    }

    /// Trims this process's unused `part` on `device` (a [`Part::trimmable`] one) for a
    /// request of `wanted` bytes: the bytes it gave back.
    fn trim(&self, api: &'static str, device: u32, part: Part, wanted: u64) -> u64 {
        match part {
            Part::PoolCache => self.trim_pools(api, device, wanted),
            Part::Graph => self.trim_graph_memory(api, device, wanted),
            Part::Context => 0,
        }
    }

    /// cuquota's own trim of `part` on `device` gave `released` bytes back (already
    /// shrunk from the part): counted for the summary, traced, said at info.
    pub fn trimmed(&self, api: &'static str, device: u32, part: Part, released: u64, wanted: u64) {
        let Some(quota) = self.quota(device) else {
            return;
        };
        quota.count_trim(released);
        self.explain(Outcome::Trimmed {
            device,
            api,
            part,
            released,
            wanted,
            held: quota.held(),
        });
    }

    /// `part` changed on `device` (`held` after): said, with the part's new total.
    pub(super) fn part_changed(
        &self,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        part: Part,
        held: u64,
    ) {
        let total = quota.part(part);
        self.explain(Outcome::PartChanged {
            device,
            api,
            part,
            total,
            held,
        });
    }
}
