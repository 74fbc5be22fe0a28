//! Pool reservations beyond live allocations: the `pool cache` part of the footprint.
//!
//! A memory pool keeps what its allocations free (up to its release threshold until a
//! synchronisation, or until `cuMemPoolTrimTo`), so what a process holds on a device through
//! a pool is the pool's reservation, not only its live pointers. With
//! `CUQUOTA_COUNT=footprint`:
//! - a stream-ordered allocation reserves its size before the call, as any allocation does;
//!   after it, the pool's used and reserved bytes are read from the driver and the pool's
//!   share of the pool cache is settled to `reserved − used`, so the part is Σ over this
//!   process's pools on the device. Growth that does not fit: the device's pools are
//!   trimmed once; if it still does not fit, the allocation is freed, the pool trimmed, and
//!   the caller refused with the usual line.
//! - a free of pool memory moves its charge into the pool cache (the pool keeps it). What
//!   a pool gave back since (at a synchronisation) is read lazily, when a decision needs
//!   it: a request that does not fit ([`Engine::trim_pools`], which trims only if reading
//!   again is not enough), `cuMemGetInfo`, a primary reset. Never on the plain
//!   `cuMemAlloc`/`cuMemFree` path, and never from the exit handler (the driver may be gone
//!   by then): the summary gives the last figure.
//! - only this process's pools are read or trimmed: those it allocated from (an imported
//!   pool cannot allocate), so never another process's.
//! - a destroyed pool cannot be read; the driver releases its memory "once there are no
//!   more outstanding allocations", so its last figure stays charged until its last live
//!   allocation is freed.
//!
//! Every reading of the driver and the change it makes to the part happen under one lock,
//! in order, so an older figure never overwrites a newer one. A pool's figure is raised only
//! by a settlement, checked against the quota (a figure forced up could be another thread's
//! growth, in flight, which would then pass unchecked), or after a primary reset, when the
//! driver holds what its pools keep whatever cuquota says.

use super::admission::{Ask, Granted, PartRefusal};
use super::explain::{Outcome, Refusal, Request};
use super::placement::{place_in_pool, Place};
use super::state::Engine;
use crate::cuda_abi::CuResult;
use crate::in_hook::driver;
use crate::ledger::{Charge, Kind};
use crate::pool_cache::{Freed, PoolBooks, PoolPlace, Pooled, TakenPooled};
use crate::quota::{DeviceQuota, Part, UNLIMITED};

/// Which pool a stream-ordered allocation comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolOf {
    /// The current pool of the stream's device (`cuMemAllocAsync`).
    Current,
    /// This one (`cuMemAllocFromPoolAsync`).
    Given(usize),
}

/// A pool's figure after an allocation from it, against its books.
enum Reading {
    /// Lower by this much (kept already): what its cache gave the allocation.
    Fell(u64),
    /// Higher by this much: the pool grew, still to charge.
    Rose(u64),
    /// The same, or the pool cannot be read.
    Same,
}

impl Engine {
    /// A stream-ordered allocation of `bytes` on `stream` from `pool`: `call` runs the
    /// driver and returns its result and the pointer; `undo` frees an allocation whose pool
    /// growth does not fit the quota. Counting allocations only (or a managed pool, whose
    /// memory is charged as `cuMemAllocManaged`'s): a plain allocation, as before.
    pub fn alloc_pooled(
        &self,
        api: &'static str,
        pool: PoolOf,
        stream: usize,
        bytes: u64,
        call: impl FnOnce() -> (CuResult, u64),
        undo: impl FnOnce(u64),
    ) -> CuResult {
        let call = move || driver(call);
        let (place, managed) = match pool {
            PoolOf::Current => (Place::Stream(stream), false),
            PoolOf::Given(p) => {
                let known = self.pool_cache.place(p);
                (
                    place_in_pool(known, stream),
                    known == Some(PoolPlace::Managed),
                )
            }
        };
        if !self.counts_footprint() || managed {
            return self.alloc(api, Kind::Pointer, place, bytes, call);
        }
        let (device, owner) = match self.resolve_place(place) {
            Ok(Some(placed)) => placed,
            // A host pool, or no context: the driver's own answer, uncharged.
            _ => return call().0,
        };
        let handle = match pool {
            PoolOf::Given(p) => p,
            PoolOf::Current => match self.queries.current_pool(device) {
                Ok(p) => p,
                // The driver cannot name the pool: charged as a plain allocation.
                Err(_) => return self.alloc(api, Kind::Pointer, place, bytes, call),
            },
        };
        let Granted { ask, rc, got: ptr } = match self.reserve_and_call(api, device, bytes, call) {
            Ok(granted) => granted,
            Err(rc) => return rc,
        };
        let quota = ask.quota;
        let mut books = self.pool_cache.books();
        let id = books.pool(handle, device);
        // The pool's figure now: what it fell by, its cache gave this allocation (charged
        // with the commit below); what it rose by, the pool grew, checked against the quota.
        let taken = match self.pool_reading(&mut books, id) {
            Reading::Fell(taken) => taken,
            Reading::Same => 0,
            Reading::Rose(grow) => {
                let settled = self.charge_growth(&mut books, ask.fresh(), id, grow);
                if let Err((refusal, grow)) = settled {
                    // The pool grew beyond the quota's room: the allocation goes back, and
                    // what the pool kept for it with it.
                    undo(ptr);
                    let _ = self.queries.trim_pool(handle);
                    // Lowered only: what is above our figure now is another thread's
                    // growth, in flight, which its own settlement checks against the quota.
                    // (A real driver may hold the freed block until the stream reaches the
                    // free; the next settlement of this pool charges it then.)
                    self.reread(&mut books, api, device, quota, id, false);
                    drop(books);
                    quota.rollback(bytes);
                    // Refused for what it needed: its size and the pool's growth beyond it,
                    // on top of what the quota held without it.
                    let in_use = refusal.in_use.saturating_sub(bytes);
                    let (needed, limit) = (bytes + grow, refusal.limit);
                    let refusal = Refusal::new(api, device, needed, in_use, limit, Request::Memory);
                    self.explain(Outcome::Refused(refusal));
                    return CuResult::OUT_OF_MEMORY;
                }
                0
            }
        };
        // A plain allocation's entry at this address is stale (its free was not seen: its
        // context's end, recorded after the driver gave the address out again); left there,
        // the free of this pool allocation would find it first.
        if let Some(stale) = self.ledger(Kind::Pointer).remove(ptr) {
            self.released_stale(ptr, stale);
        }
        // Committed under the books' lock, so that a context's end (which takes its pool
        // allocations out of the books) sees it whole or not at all.
        let charge = Charge {
            device,
            bytes,
            context: owner,
        };
        if let Some(stale) = books.allocated(ptr, charge, id) {
            self.released_stale(ptr, stale);
        }
        self.committed_pooled(api, ptr, quota, charge, taken);
        rc
    }

    /// Reads pool `id` after an allocation from it: a lower figure is kept at once.
    #[inline]
    fn pool_reading(&self, books: &mut PoolBooks, id: u64) -> Reading {
        let Some(pool) = books.get(id).filter(|p| !p.destroyed) else {
            return Reading::Same;
        };
        let Ok((reserved, used)) = self.queries.pool_usage(pool.handle) else {
            return Reading::Same;
        };
        let figure = reserved.saturating_sub(used);
        if figure < pool.cached {
            books.set_cached(id, figure);
            Reading::Fell(pool.cached - figure)
        } else if figure > pool.cached {
            Reading::Rose(figure - pool.cached)
        } else {
            Reading::Same
        }
    }

    /// A pool allocation, in the books, is held; if the pool's cache gave `taken` bytes of
    /// it, the part gives them up in the same step (see `DeviceQuota::commit_from_part`),
    /// and the lines are those of the part's change and then the allocation.
    fn committed_pooled(
        &self,
        api: &'static str,
        ptr: u64,
        quota: &DeviceQuota,
        charge: Charge,
        taken: u64,
    ) {
        let (device, bytes) = (charge.device, charge.bytes);
        let (held, taken) = if taken == 0 {
            (quota.commit(bytes), 0)
        } else {
            quota.commit_from_part(Part::PoolCache, taken, bytes)
        };
        if taken > 0 {
            // Held as it was between the two steps: without the part's bytes, before the
            // allocation's.
            let between = held.saturating_sub(bytes);
            self.part_changed(api, device, quota, Part::PoolCache, between);
        }
        self.explain(Outcome::Admitted {
            device,
            api,
            key: ptr,
            bytes,
            held,
        });
    }

    /// Charges pool `id`'s growth `grow` (its figure read above its books') through the one
    /// settlement: refused, the device's pools are trimmed once (under the books' lock held
    /// here) and what is left to charge is read again. Refused: what the quota held and the
    /// growth that did not fit.
    fn charge_growth(
        &self,
        books: &mut PoolBooks,
        ask: Ask<'_>,
        id: u64,
        grow: u64,
    ) -> Result<(), (PartRefusal, u64)> {
        let Ask {
            api, device, quota, ..
        } = ask;
        let make_room = || {
            (self.trim_locked(books, api, device, quota, grow) > 0)
                .then(|| self.reread(books, api, device, quota, id, false))
        };
        let grow = self.settle(ask, 0, grow, make_room)?;
        if grow > 0 {
            books.set_cached(id, books.cached(id) + grow);
            let held = quota.commit_part(Part::PoolCache, grow);
            self.part_changed(api, device, quota, Part::PoolCache, held);
        }
        Ok(())
    }

    /// Reads pool `id` from the driver: a lower figure is given back at once; a higher one
    /// is charged only if `force` (the driver holds it whatever the quota), else returned
    /// as the growth still to charge. A pool that cannot be read keeps its figure.
    fn reread(
        &self,
        books: &mut PoolBooks,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        id: u64,
        force: bool,
    ) -> u64 {
        let Some(pool) = books.get(id).filter(|p| !p.destroyed) else {
            return 0;
        };
        let Ok((reserved, used)) = self.queries.pool_usage(pool.handle) else {
            return 0;
        };
        let (figure, cached) = (reserved.saturating_sub(used), pool.cached);
        if figure < cached {
            books.set_cached(id, figure);
            self.part_shrink(api, device, Part::PoolCache, cached - figure);
        } else if figure > cached {
            if !force {
                return figure - cached;
            }
            books.set_cached(id, figure);
            let held = quota.force_part(Part::PoolCache, figure - cached);
            self.part_changed(api, device, quota, Part::PoolCache, held);
        }
        0
    }

    /// Trims every readable pool of this process on `device` that keeps unused memory
    /// (`cuMemPoolTrimTo(pool, 0)`), for a request of `wanted` bytes through `api`: what the
    /// reservations dropped is counted as a trim, the part lowered to the figures read after.
    /// Returns the bytes the trims gave back.
    fn trim_locked(
        &self,
        books: &mut PoolBooks,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        wanted: u64,
    ) -> u64 {
        let (mut released, mut lowered) = (0u64, 0u64);
        for (id, handle, cached) in books.readable(Some(device)) {
            let Ok((reserved, used)) = self.queries.pool_usage(handle) else {
                continue;
            };
            if reserved <= used || self.queries.trim_pool(handle).is_err() {
                continue;
            }
            let Ok((after, used)) = self.queries.pool_usage(handle) else {
                continue;
            };
            released += reserved.saturating_sub(after);
            let figure = after.saturating_sub(used);
            if figure < cached {
                books.set_cached(id, figure);
                lowered += quota.release_part(Part::PoolCache, cached - figure);
            }
        }
        if released > 0 {
            self.trimmed(api, device, Part::PoolCache, released, wanted);
        }
        if lowered > 0 {
            self.part_changed(api, device, quota, Part::PoolCache, quota.held());
        }
        released
    }

    /// A request of `wanted` bytes through `api` did not fit on `device` (the engine's
    /// trim-and-retry seam): read this process's pools there again (a synchronisation may
    /// have given memory back); if that is not room enough, trim them. Returns what the pool
    /// cache gave back.
    pub(super) fn trim_pools(&self, api: &'static str, device: u32, wanted: u64) -> u64 {
        let Some(quota) = self.quota(device) else {
            return 0;
        };
        let before = quota.part(Part::PoolCache);
        if before == 0 {
            return 0;
        }
        let mut books = self.pool_cache.books();
        for (id, _, cached) in books.readable(Some(device)) {
            if cached > 0 {
                self.reread(&mut books, api, device, quota, id, false);
            }
        }
        let limit = quota.known_limit().unwrap_or(UNLIMITED);
        if quota.quota_in_use().saturating_add(wanted) > limit {
            self.trim_locked(&mut books, api, device, quota, wanted);
        }
        before.saturating_sub(quota.part(Part::PoolCache))
    }

    /// Before a figure is told (`cuMemGetInfo`): read this process's pools on `device`
    /// again, where they keep anything.
    pub(super) fn refresh_pools(&self, api: &'static str, device: u32) {
        let Some(quota) = self.quota(device) else {
            return;
        };
        if !self.counts_footprint() || quota.part(Part::PoolCache) == 0 {
            return;
        }
        let mut books = self.pool_cache.books();
        for (id, _, cached) in books.readable(Some(device)) {
            if cached > 0 {
                self.reread(&mut books, api, device, quota, id, false);
            }
        }
    }

    /// `device`'s primary context was reset or released for the last time: device-wide, the
    /// driver freed every pool allocation there and its pools gave back what they kept (a
    /// created context's end frees none: they belong to no context). They leave the books
    /// here, their charges moved into the pool cache as for a free (in one step: nobody can
    /// take the room in between), and the device's pools are read again, so that what went
    /// back is given back (a pool the driver no longer knows is forgotten). Returns their
    /// pointers and bytes, for the context's event.
    pub(super) fn device_pool_allocations(
        &self,
        api: &'static str,
        device: u32,
    ) -> (Vec<u64>, u64) {
        let taken = self.take_device_pool_pointers(device);
        self.credit_context_pool_pointers(api, taken)
    }

    /// `device`'s pool allocations out of the books (under their lock): before the driver
    /// resets the device's primary context, when the reset is certain (see
    /// `Engine::context_end`), or after it. (Counted as plain allocations, they are in the
    /// ledger instead: `Ledger::remove_pooled_on`.)
    pub(super) fn take_device_pool_pointers(&self, device: u32) -> TakenPooled {
        self.pool_cache.books().take_device(device)
    }

    /// The end did not happen: the pool allocations taken are live again.
    pub(super) fn restore_context_pool_pointers(&self, taken: TakenPooled) {
        let mut books = self.pool_cache.books();
        for (key, charge, pool) in taken {
            books.restore_pointer(key, Pooled { charge, pool });
        }
    }

    /// The driver reset the device: what its pool allocations charged moves into the pool
    /// cache, and their pools are read again. Returns their pointers and bytes.
    pub(super) fn credit_context_pool_pointers(
        &self,
        api: &'static str,
        taken: TakenPooled,
    ) -> (Vec<u64>, u64) {
        let (mut keys, mut bytes) = (Vec::new(), 0u64);
        if taken.is_empty() {
            return (keys, bytes);
        }
        let mut books = self.pool_cache.books();
        let mut devices = Vec::new();
        for (key, charge, id) in taken {
            if let Some(quota) = self.quota(charge.device) {
                match books.freed(id, charge.bytes) {
                    Freed::Kept => {
                        quota.move_to_part(Part::PoolCache, charge.bytes);
                    }
                    Freed::Untracked => {
                        quota.release(charge.bytes);
                    }
                    Freed::PoolGone { cached } => {
                        quota.release_part(Part::PoolCache, cached);
                        quota.release(charge.bytes);
                    }
                }
            }
            if !devices.contains(&charge.device) {
                devices.push(charge.device);
            }
            keys.push(key);
            bytes = bytes.saturating_add(charge.bytes);
        }
        for device in devices {
            let Some(quota) = self.quota(device) else {
                continue;
            };
            for (id, handle, _) in books.readable(Some(device)) {
                if self.queries.pool_usage(handle).is_ok() {
                    self.reread(&mut books, api, device, quota, id, false);
                } else {
                    let cached = books.forget(id);
                    quota.release_part(Part::PoolCache, cached);
                }
            }
            // The part after the moves and the readings (moves write no line of their own).
            self.part_changed(api, device, quota, Part::PoolCache, quota.held());
        }
        (keys, bytes)
    }

    /// `cuMemPoolDestroy(pool)` succeeded.
    pub(super) fn pool_cache_destroyed(&self, pool: usize) {
        let mut books = self.pool_cache.books();
        if let Some((device, cached)) = books.destroyed(pool) {
            self.part_shrink("cuMemPoolDestroy", device, Part::PoolCache, cached);
        }
    }

    /// A free of `key` that no ledger of `kind` knows: a pool allocation's (`cuMemFree` or
    /// `cuMemFreeAsync` of a pool pointer), whose charge moves to the pool cache, or one the
    /// driver answers alone. Out of line: the plain free never comes here.
    #[cold]
    #[inline(never)]
    pub(super) fn free_unknown(
        &self,
        api: &'static str,
        kind: Kind,
        key: u64,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        if kind != Kind::Pointer {
            return call();
        }
        // Out of the books under their lock: a context's end takes its pool allocations
        // from them, and must find each one there or not at all.
        let Some(pooled) = self.pool_cache.books().take_pointer(key) else {
            return call();
        };
        let Pooled { charge, pool: id } = pooled;
        // Before the driver frees, as for any free (`traced_free`); the pool cache's line
        // follows after the call.
        if self.tracing {
            self.traced_free(api, key, charge);
        }
        let rc = call();
        if !rc.is_ok() {
            self.pool_cache.books().restore_pointer(key, pooled);
            if self.tracing {
                self.traced_free_failed(api, key, charge);
            }
            return rc;
        }
        let Some(quota) = self.quota(charge.device) else {
            return rc;
        };
        let (device, bytes) = (charge.device, charge.bytes);
        // The part's change and its `footprint` line under the books' lock, so that the
        // trace has every pool cache total in the order it was.
        let mut books = self.pool_cache.books();
        let freed = books.freed(id, bytes);
        match freed {
            Freed::Kept => {
                quota.move_to_part(Part::PoolCache, bytes);
            }
            Freed::Untracked => {
                quota.release(bytes);
            }
            Freed::PoolGone { cached } => {
                quota.release_part(Part::PoolCache, cached);
                quota.release(bytes);
            }
        }
        if freed != Freed::Untracked {
            self.part_changed(api, device, quota, Part::PoolCache, quota.held());
        }
        drop(books);
        rc
    }
}

#[cfg(test)]
mod tests;
