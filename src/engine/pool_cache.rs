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
//!   again is not enough), `cuMemGetInfo`, a context gone. Never on the plain
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
//! growth, in flight, which would then pass unchecked), or after a context went, when the
//! driver holds what its pools keep whatever cuquota says.

use super::{Engine, Kind, Place, PoolPlace, Reserved};
use crate::config::Mode;
use crate::cuda_abi::CuResult;
use crate::engine::PartRefusal;
use crate::ledger::Charge;
use crate::quota::{DeviceQuota, Part, Reservation, UNLIMITED};
use crate::trace::Event;
use cuquota_format::hash::BuildKeyHasher;
use std::collections::HashMap;

/// A context's pool allocations taken out of the books: pointer, charge, pool.
pub(super) type TakenPooled = Vec<(u64, Charge, Option<u64>)>;

/// Which pool a stream-ordered allocation comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolOf {
    /// The current pool of the stream's device (`cuMemAllocAsync`).
    Current,
    /// This one (`cuMemAllocFromPoolAsync`).
    Given(usize),
}

/// One pool this process allocated from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pool {
    handle: usize,
    device: u32,
    /// Its share of the pool cache: `reserved − used` at the last reading, plus what was
    /// freed into it since.
    cached: u64,
    /// Its allocations still live.
    live: u64,
    /// `cuMemPoolDestroy`ed: no longer read or trimmed (its handle may name another pool).
    destroyed: bool,
}

/// What a free of pool memory does to its charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Freed {
    /// Its pool keeps the memory: the charge moves to the pool cache.
    Kept,
    /// It was the last allocation of a destroyed pool: the charge and the pool's `cached`
    /// bytes go.
    PoolGone { cached: u64 },
    /// No pool known for it: the charge goes, as for any free.
    Untracked,
}

/// The pool cache's books: plain data, kept under the engine's `pool_books` lock.
#[derive(Default)]
pub struct PoolBooks {
    /// Pools by a number of our own (a destroyed pool's handle can come back for another).
    pools: HashMap<u64, Pool, BuildKeyHasher>,
    /// Pools not destroyed: handle → number.
    handles: HashMap<usize, u64, BuildKeyHasher>,
    /// Live pool allocations: pointer → its pool's number.
    pointers: HashMap<u64, u64, BuildKeyHasher>,
    next: u64,
}

impl PoolBooks {
    /// The number of pool `handle` (not destroyed), on `device`, entered if new.
    fn pool(&mut self, handle: usize, device: u32) -> u64 {
        if let Some(&id) = self.handles.get(&handle) {
            return id;
        }
        self.next += 1;
        let id = self.next;
        self.handles.insert(handle, id);
        let pool = Pool {
            handle,
            device,
            cached: 0,
            live: 0,
            destroyed: false,
        };
        self.pools.insert(id, pool);
        id
    }

    /// Pools not destroyed on `device` (`None`: on every device): (number, handle, cached).
    fn readable(&self, device: Option<u32>) -> Vec<(u64, usize, u64)> {
        let mut found: Vec<_> = self
            .pools
            .iter()
            .filter(|(_, p)| !p.destroyed && device.is_none_or(|d| p.device == d))
            .map(|(&id, p)| (id, p.handle, p.cached))
            .collect();
        found.sort_unstable();
        found
    }

    fn get(&self, id: u64) -> Option<&Pool> {
        self.pools.get(&id)
    }

    fn cached(&self, id: u64) -> u64 {
        self.pools.get(&id).map_or(0, |p| p.cached)
    }

    fn set_cached(&mut self, id: u64, bytes: u64) {
        if let Some(p) = self.pools.get_mut(&id) {
            p.cached = bytes;
        }
    }

    /// A live allocation at `ptr` from pool `id`.
    fn allocated(&mut self, ptr: u64, id: u64) {
        if let Some(stale) = self.pointers.insert(ptr, id) {
            // A free we never saw: that allocation is gone.
            self.drop_pointer(stale);
        }
        if let Some(p) = self.pools.get_mut(&id) {
            p.live += 1;
        }
    }

    /// One live allocation of pool `id` is gone without a free of ours (its context went,
    /// or its address was reused). Returns the `cached` bytes of a destroyed pool that
    /// goes with it.
    fn drop_pointer(&mut self, id: u64) -> u64 {
        let Some(p) = self.pools.get_mut(&id) else {
            return 0;
        };
        p.live = p.live.saturating_sub(1);
        if p.destroyed && p.live == 0 {
            let cached = p.cached;
            self.pools.remove(&id);
            return cached;
        }
        0
    }

    /// A free of `ptr` is about to be called: its pool's number, out of the books (so that
    /// another thread that gets the same address from the driver right after cannot have
    /// its entry taken by this free).
    fn take_pointer(&mut self, ptr: u64) -> Option<u64> {
        self.pointers.remove(&ptr)
    }

    /// The free failed: `ptr` is live again.
    fn restore_pointer(&mut self, ptr: u64, id: u64) {
        self.pointers.insert(ptr, id);
    }

    /// An allocation of `bytes` from pool `id` (`take_pointer`'s) was freed.
    fn freed(&mut self, id: Option<u64>, bytes: u64) -> Freed {
        let Some(p) = id.and_then(|id| self.pools.get_mut(&id)) else {
            return Freed::Untracked;
        };
        p.live = p.live.saturating_sub(1);
        if p.destroyed && p.live == 0 {
            let cached = p.cached;
            if let Some(id) = id {
                self.pools.remove(&id);
            }
            return Freed::PoolGone { cached };
        }
        p.cached = p.cached.saturating_add(bytes);
        Freed::Kept
    }

    /// `cuMemPoolDestroy(handle)`: `Some((device, cached))` when its memory goes now (no
    /// live allocation left); else it goes with the last one.
    fn destroyed(&mut self, handle: usize) -> Option<(u32, u64)> {
        let id = self.handles.remove(&handle)?;
        let p = self.pools.get_mut(&id)?;
        p.destroyed = true;
        if p.live > 0 {
            return None;
        }
        let gone = (p.device, p.cached);
        self.pools.remove(&id);
        Some(gone)
    }

    /// A readable pool the driver no longer knows (gone with its context): forgotten, with
    /// its pointers. Returns its `cached` bytes.
    fn forget(&mut self, id: u64) -> u64 {
        let Some(p) = self.pools.remove(&id) else {
            return 0;
        };
        self.handles.remove(&p.handle);
        self.pointers.retain(|_, pool| *pool != id);
        p.cached
    }
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
        let (place, managed) = match pool {
            PoolOf::Current => (Place::Stream(stream), false),
            PoolOf::Given(p) => (
                self.pool_place(p, stream),
                self.pools.lock().get(&p) == Some(&PoolPlace::Managed),
            ),
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
        let Some(quota) = self.quota(device) else {
            return call().0;
        };
        let limit = match self.limit(device, quota) {
            Ok(l) => l,
            Err(rc) => return rc,
        };
        match self.reserve(api, device, quota, bytes, limit) {
            Reserved::Refused => return CuResult::OUT_OF_MEMORY,
            Reserved::Charged => {}
            Reserved::Uncharged => {
                let rc = call().0;
                if !rc.is_ok() {
                    self.driver_failed(api, device, quota, bytes, limit, rc);
                }
                return rc;
            }
        }
        let (rc, ptr) = call();
        if !rc.is_ok() {
            quota.rollback(bytes);
            self.driver_failed(api, device, quota, bytes, limit, rc);
            return rc;
        }
        let mut books = self.pool_books.lock();
        let id = books.pool(handle, device);
        if let Err((refusal, grow)) = self.settle(&mut books, api, device, quota, limit, id) {
            // The pool grew beyond the quota's room: the allocation goes back, and what the
            // pool kept for it with it.
            undo(ptr);
            let _ = self.queries.trim_pool(handle);
            // Lowered only: what is above our figure now is another thread's growth, in
            // flight, which its own settlement checks against the quota. (A real driver
            // may hold the freed block until the stream reaches the free; the next
            // settlement of this pool charges it then.)
            self.reread(&mut books, api, device, quota, id, false);
            drop(books);
            quota.rollback(bytes);
            // Refused for what it needed: its size and the pool's growth beyond it, on top
            // of what the quota held without it.
            let in_use = refusal.in_use.saturating_sub(bytes);
            self.refused(device, bytes + grow, api, refusal.limit, in_use);
            return CuResult::OUT_OF_MEMORY;
        }
        books.allocated(ptr, id);
        // A plain allocation's entry at this address is stale (its free was not seen: its
        // context's end, recorded after the driver gave the address out again); left there,
        // the free of this pool allocation would find it first.
        if let Some(stale) = self.ledger(Kind::Pointer).remove(ptr) {
            self.released_stale(ptr, stale);
        }
        // Committed under the books' lock, so that a context's end (which takes its pool
        // allocations out of the ledger and the books together) sees both or neither.
        let charge = Charge {
            device,
            bytes,
            context: owner,
        };
        self.committed(api, Kind::PoolPointer, ptr, quota, charge);
        rc
    }

    /// Settles pool `id`'s share of the pool cache to the driver's figure. Growth must fit
    /// the quota, after one trim of the device's pools; refused: what the quota held and the
    /// growth that did not fit.
    fn settle(
        &self,
        books: &mut PoolBooks,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        limit: u64,
        id: u64,
    ) -> Result<(), (PartRefusal, u64)> {
        let mut grow = self.reread(books, api, device, quota, id, false);
        if grow == 0 {
            return Ok(());
        }
        let enforce = self.mode() == Mode::Enforce;
        let mut reservation = quota.reserve(grow, limit, enforce);
        if matches!(reservation, Reservation::Refused { .. })
            && self.trim_locked(books, api, device, quota, grow) > 0
        {
            quota.forgive_refusal();
            grow = self.reread(books, api, device, quota, id, false);
            if grow == 0 {
                return Ok(());
            }
            reservation = quota.reserve(grow, limit, enforce);
        }
        match reservation {
            Reservation::Refused { in_use, limit } => {
                return Err((PartRefusal { in_use, limit }, grow))
            }
            // Beyond any counter: the driver would not have it; nothing to charge.
            Reservation::Uncharged => return Ok(()),
            Reservation::Granted { .. } => {}
            Reservation::Allowed {
                in_use_before,
                limit,
            } => self.would_refuse(device, grow, api, limit, in_use_before),
        }
        books.set_cached(id, books.cached(id) + grow);
        let held = quota.commit_part(Part::PoolCache, grow);
        let total = quota.part(Part::PoolCache);
        self.emit(Event::footprint(device, api, Part::PoolCache, total, held));
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
            let total = quota.part(Part::PoolCache);
            self.emit(Event::footprint(device, api, Part::PoolCache, total, held));
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
            let (total, held) = (quota.part(Part::PoolCache), quota.held());
            self.emit(Event::footprint(device, api, Part::PoolCache, total, held));
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
        let mut books = self.pool_books.lock();
        for (id, _, cached) in books.readable(Some(device)) {
            if cached > 0 {
                self.reread(&mut books, api, device, quota, id, false);
            }
        }
        let limit = quota.known_limit().unwrap_or(UNLIMITED);
        if quota.in_use().saturating_add(wanted) > limit {
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
        let mut books = self.pool_books.lock();
        for (id, _, cached) in books.readable(Some(device)) {
            if cached > 0 {
                self.reread(&mut books, api, device, quota, id, false);
            }
        }
    }

    /// Context `slot` was destroyed or reset: the driver freed its allocations, synchronised
    /// its work, and its pools kept what they keep up to their thresholds. Its pool
    /// allocations leave the ledger here, their charges moved into the pool cache as for a
    /// free (in one step: nobody can take the room in between), and the pools they came
    /// from are read again, so that what went back is given back (a pool the driver no longer
    /// knows is forgotten). Returns their pointers and bytes, for the context's event.
    pub(super) fn context_pool_allocations(
        &self,
        api: &'static str,
        slot: crate::contexts::Slot,
    ) -> (Vec<u64>, u64) {
        let taken = self.take_context_pool_pointers(slot);
        self.settle_context_pool_pointers(api, taken)
    }

    /// Context `slot`'s pool allocations out of the ledger and the books (together, under
    /// the books' lock), each with its pool: before the driver ends the context, when the
    /// end is certain (see `Engine::context_will_end`).
    pub(super) fn take_context_pool_pointers(&self, slot: crate::contexts::Slot) -> TakenPooled {
        let mut books = self.pool_books.lock();
        let taken = self.ledger(Kind::PoolPointer).remove_context(slot);
        taken
            .into_iter()
            .map(|(key, charge)| (key, charge, books.take_pointer(key)))
            .collect()
    }

    /// The end did not happen: the pool allocations taken are live again.
    pub(super) fn restore_context_pool_pointers(&self, taken: TakenPooled) {
        let mut books = self.pool_books.lock();
        for (key, charge, id) in taken {
            if let Some(id) = id {
                books.restore_pointer(key, id);
            }
            self.ledger(Kind::PoolPointer).insert(key, charge);
        }
    }

    /// The driver ended the context: what its pool allocations charged moves into the pool
    /// cache, and their pools are read again. Returns their pointers and bytes.
    pub(super) fn settle_context_pool_pointers(
        &self,
        api: &'static str,
        taken: TakenPooled,
    ) -> (Vec<u64>, u64) {
        let (mut keys, mut bytes) = (Vec::new(), 0u64);
        if taken.is_empty() {
            return (keys, bytes);
        }
        let mut books = self.pool_books.lock();
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
            let (total, held) = (quota.part(Part::PoolCache), quota.held());
            self.emit(Event::footprint(device, api, Part::PoolCache, total, held));
        }
        (keys, bytes)
    }

    /// `cuMemPoolDestroy(pool)` succeeded.
    pub(super) fn pool_cache_destroyed(&self, pool: usize) {
        let mut books = self.pool_books.lock();
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
        let ledger = self.ledger(Kind::PoolPointer);
        // Out of the ledger and the books together, under the books' lock: a context's end
        // prunes the books by the ledger, and must not see one without the other.
        let (charge, id) = {
            let mut books = self.pool_books.lock();
            let Some(charge) = ledger.remove(key) else {
                drop(books);
                return call();
            };
            (charge, books.take_pointer(key))
        };
        // Before the driver frees, as for any free (`traced_free`); the pool cache's line
        // follows after the call.
        if self.tracing {
            self.traced_free(api, key, charge);
        }
        let rc = call();
        if !rc.is_ok() {
            let mut books = self.pool_books.lock();
            if let Some(id) = id {
                books.restore_pointer(key, id);
            }
            ledger.insert(key, charge);
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
        let mut books = self.pool_books.lock();
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
            let total = quota.part(Part::PoolCache);
            self.emit(Event::footprint(
                device,
                api,
                Part::PoolCache,
                total,
                quota.held(),
            ));
        }
        drop(books);
        rc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::engine::Queries;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::{Arc, Mutex};

    const MIB: u64 = 1 << 20;
    const CHUNK: u64 = 2 * MIB;
    const DEFAULT_POOL: usize = 0x900;
    /// One context (0x1000) on device 0; every stream (0x10_000 and up) belongs to it.
    const CONTEXT: usize = 0x1000;

    /// A pool as the driver keeps it: reservation in chunks, memory kept up to the release
    /// threshold until a synchronisation, trims release unused chunks.
    #[derive(Clone, Copy, Default)]
    struct DriverPool {
        threshold: u64,
        reserved: u64,
        used: u64,
    }

    /// A pretend driver with pools; counts the pool attribute reads.
    #[derive(Default)]
    struct Driver {
        pools: Mutex<HashMap<usize, DriverPool>>,
        reads: AtomicU64,
        next_ptr: AtomicU64,
        /// Freed addresses, handed out again first (as a pool does).
        freed: Mutex<Vec<u64>>,
    }

    impl Driver {
        fn alloc(&self, pool: usize, size: u64) -> (CuResult, u64) {
            let mut pools = self.pools.lock().unwrap();
            let p = pools.entry(pool).or_default();
            if p.used + size > p.reserved {
                p.reserved += (p.used + size - p.reserved).next_multiple_of(CHUNK);
            }
            p.used += size;
            let reused = self.freed.lock().unwrap().pop();
            let ptr = reused.unwrap_or_else(|| (self.next_ptr.fetch_add(1, Relaxed) + 1) << 24);
            (CuResult::SUCCESS, ptr)
        }
        fn free(&self, pool: usize, ptr: u64, size: u64) -> CuResult {
            self.pools.lock().unwrap().get_mut(&pool).unwrap().used -= size;
            self.freed.lock().unwrap().push(ptr);
            CuResult::SUCCESS
        }
        /// A synchronisation: every pool releases unused chunks down to its threshold.
        fn sync(&self) {
            for p in self.pools.lock().unwrap().values_mut() {
                Self::trim_to(p, p.threshold);
            }
        }
        fn trim_to(p: &mut DriverPool, keep: u64) {
            let floor = keep.max(p.used.next_multiple_of(CHUNK)).min(p.reserved);
            p.reserved -= (p.reserved - floor) / CHUNK * CHUNK;
        }
        fn set_threshold(&self, pool: usize, threshold: u64) {
            self.pools
                .lock()
                .unwrap()
                .entry(pool)
                .or_default()
                .threshold = threshold;
        }
        fn reserved(&self) -> u64 {
            self.pools
                .lock()
                .unwrap()
                .values()
                .map(|p| p.reserved)
                .sum()
        }
        fn unused(&self) -> u64 {
            let pools = self.pools.lock().unwrap();
            pools.values().map(|p| p.reserved - p.used).sum()
        }
    }

    impl Queries for Arc<Driver> {
        fn current_device(&self) -> Result<u32, CuResult> {
            Ok(0)
        }
        fn current_context(&self) -> usize {
            CONTEXT
        }
        fn context_device(&self, _context: usize) -> Result<u32, CuResult> {
            Ok(0)
        }
        fn stream_context(&self, _stream: usize) -> Result<usize, CuResult> {
            Ok(CONTEXT)
        }
        fn total_memory(&self, _device: u32) -> Result<u64, CuResult> {
            Ok(8 << 30)
        }
        fn memory_info(&self) -> Result<(u64, u64), CuResult> {
            Ok((8 << 30, 8 << 30))
        }
        fn pool_usage(&self, pool: usize) -> Result<(u64, u64), CuResult> {
            self.reads.fetch_add(1, Relaxed);
            let pools = self.pools.lock().unwrap();
            let p = pools.get(&pool).ok_or(CuResult::INVALID_VALUE)?;
            Ok((p.reserved, p.used))
        }
        fn trim_pool(&self, pool: usize) -> Result<(), CuResult> {
            let mut pools = self.pools.lock().unwrap();
            Driver::trim_to(pools.get_mut(&pool).ok_or(CuResult::INVALID_VALUE)?, 0);
            Ok(())
        }
        fn current_pool(&self, _device: u32) -> Result<usize, CuResult> {
            Ok(DEFAULT_POOL)
        }
    }

    fn engine_with(vars: &[(&str, &str)]) -> (Engine, Arc<Driver>) {
        crate::log::configure(&crate::config::LogTarget::Off);
        let driver = Arc::new(Driver::default());
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let config = Config::from_vars(|k| {
            vars.iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
                .or_else(|| (k == "CUQUOTA_LOG").then(|| "off".into()))
        });
        (Engine::new(config, Box::new(driver.clone())), driver)
    }

    fn engine(limit: &str) -> (Engine, Arc<Driver>) {
        engine_with(&[("CUQUOTA_LIMIT", limit)])
    }

    /// `cuMemAllocAsync` of `size` from the device's current pool (the default one).
    fn alloc_async(e: &Engine, d: &Driver, size: u64) -> (CuResult, u64) {
        alloc_from(e, d, PoolOf::Current, size)
    }

    fn alloc_from(e: &Engine, d: &Driver, pool: PoolOf, size: u64) -> (CuResult, u64) {
        let handle = match pool {
            PoolOf::Current => DEFAULT_POOL,
            PoolOf::Given(p) => p,
        };
        let got = std::cell::Cell::new(0);
        let rc = e.alloc_pooled(
            "cuMemAllocAsync",
            pool,
            0x10_000,
            size,
            || {
                let (rc, ptr) = d.alloc(handle, size);
                got.set(ptr);
                (rc, ptr)
            },
            |ptr| {
                d.free(handle, ptr, size);
            },
        );
        (rc, if rc.is_ok() { got.get() } else { 0 })
    }

    fn free_async(e: &Engine, d: &Driver, pool: usize, ptr: u64, size: u64) -> CuResult {
        e.free("cuMemFreeAsync", Kind::Pointer, ptr, || {
            d.free(pool, ptr, size)
        })
    }

    fn usage(e: &Engine) -> crate::quota::Usage {
        e.quota(0).unwrap().usage()
    }

    fn pool_cache(e: &Engine) -> u64 {
        e.part_total(0, Part::PoolCache)
    }

    #[test]
    fn books_follow_pools_pointers_and_destruction() {
        let mut b = PoolBooks::default();
        let a = b.pool(0x10, 0);
        assert_eq!(b.pool(0x10, 0), a, "one number per live handle");
        b.allocated(0x100, a);
        b.allocated(0x200, a);
        let id = b.take_pointer(0x100);
        assert_eq!(b.freed(id, 5), Freed::Kept);
        assert_eq!(b.cached(a), 5);
        let none = b.take_pointer(0x999);
        assert_eq!(b.freed(none, 5), Freed::Untracked);
        // destroyed with an allocation live: its memory goes with that allocation
        assert_eq!(b.destroyed(0x10), None);
        let again = b.pool(0x10, 1);
        assert_ne!(again, a, "the handle came back for another pool");
        assert_eq!(b.readable(None), vec![(again, 0x10, 0)]);
        let id = b.take_pointer(0x200);
        assert_eq!(b.freed(id, 7), Freed::PoolGone { cached: 5 });
        assert!(b.get(a).is_none());
        // a pool with nothing live goes at once
        b.set_cached(again, 9);
        assert_eq!(b.destroyed(0x10), Some((1, 9)));
        assert_eq!(b.destroyed(0x10), None);
    }

    #[test]
    fn settled_to_the_pools_chunk_growth() {
        let (e, d) = engine("1GiB");
        let (rc, p) = alloc_async(&e, &d, 3 * MIB);
        assert_eq!(rc, CuResult::SUCCESS);
        // 4 MiB reserved (two chunks) for 3 MiB used: the pool keeps 1 MiB
        assert_eq!(pool_cache(&e), MIB);
        assert_eq!(usage(&e).in_use, 4 * MIB);
        let (_, q) = alloc_async(&e, &d, MIB);
        assert_eq!(pool_cache(&e), 0, "the second fits in what the pool kept");
        // freed: the pool keeps it
        assert_eq!(
            free_async(&e, &d, DEFAULT_POOL, p, 3 * MIB),
            CuResult::SUCCESS
        );
        assert_eq!((pool_cache(&e), usage(&e).in_use), (3 * MIB, 4 * MIB));
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, GIB - 4 * MIB);
        // after a synchronisation the pool gave back what no allocation uses
        d.sync();
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, GIB - 2 * MIB);
        assert_eq!(pool_cache(&e), MIB);
        assert_eq!(free_async(&e, &d, DEFAULT_POOL, q, MIB), CuResult::SUCCESS);
        d.sync();
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, GIB);
        assert_eq!((usage(&e).in_use, usage(&e).part_peaks[0]), (0, 3 * MIB));
    }

    const GIB: u64 = 1 << 30;

    /// The 12-GiB example at 64 MiB: a pool that never gives memory back holds 64 MiB it
    /// freed; a plain 64 MiB allocation trims it and fits, never above the quota.
    #[test]
    fn a_pool_that_keeps_memory_is_trimmed_for_a_plain_allocation() {
        let (e, d) = engine("64MiB");
        d.set_threshold(DEFAULT_POOL, u64::MAX);
        let (_, p) = alloc_async(&e, &d, 64 * MIB);
        free_async(&e, &d, DEFAULT_POOL, p, 64 * MIB);
        d.sync();
        assert_eq!(usage(&e).in_use, 64 * MIB, "the pool keeps it");
        let plain = e.alloc(
            "cuMemAlloc_v2",
            Kind::Pointer,
            Place::Current,
            64 * MIB,
            || (CuResult::SUCCESS, 0x7000_0000),
        );
        assert_eq!(plain, CuResult::SUCCESS);
        assert_eq!(d.reserved(), 0, "trimmed");
        let u = usage(&e);
        assert_eq!((u.in_use, u.peak, u.refusals), (64 * MIB, 64 * MIB, 0));
        assert_eq!((u.trims, u.trimmed), (1, 64 * MIB));
        assert_eq!(pool_cache(&e), 0);
    }

    #[test]
    fn live_pool_memory_is_not_trimmed_and_the_request_is_refused() {
        let (e, d) = engine("64MiB");
        let (_, _p) = alloc_async(&e, &d, 64 * MIB);
        let plain = e.alloc(
            "cuMemAlloc_v2",
            Kind::Pointer,
            Place::Current,
            64 * MIB,
            || panic!("not called"),
        );
        assert_eq!(plain, CuResult::OUT_OF_MEMORY);
        let u = usage(&e);
        assert_eq!((u.in_use, u.refusals, u.trims), (64 * MIB, 1, 0));
    }

    /// Growth beyond the quota: the device's pools are trimmed first; when that is not
    /// enough the allocation is freed and refused, and nothing of it stays charged.
    #[test]
    fn pool_growth_that_does_not_fit_is_undone() {
        let (e, d) = engine("7680KiB");
        let other = 0x901;
        let (_, a) = alloc_async(&e, &d, 2 * MIB);
        let (_, _b) = alloc_async(&e, &d, 2 * MIB);
        let (_, c) = alloc_from(&e, &d, PoolOf::Given(other), MIB);
        assert_eq!((usage(&e).in_use, pool_cache(&e)), (6 * MIB, MIB));
        free_async(&e, &d, DEFAULT_POOL, a, 2 * MIB);
        assert_eq!((usage(&e).in_use, pool_cache(&e)), (6 * MIB, 3 * MIB));
        // 2 MiB more from the other pool fits the quota, but the pool grows by a chunk
        // beyond it: trimming the default pool (which keeps 2 MiB) makes room
        let (rc, _) = alloc_from(&e, &d, PoolOf::Given(other), 2 * MIB);
        assert_eq!(rc, CuResult::SUCCESS);
        let u = usage(&e);
        assert_eq!(
            (u.in_use, u.trims, u.trimmed, u.refusals),
            (6 * MIB, 1, 2 * MIB, 0)
        );
        assert_eq!(d.reserved(), 6 * MIB);
        // now nothing is left to trim: the allocation is undone and refused
        let (rc, _) = alloc_from(&e, &d, PoolOf::Given(other), 3 * MIB / 2);
        assert_eq!(rc, CuResult::OUT_OF_MEMORY);
        assert_eq!((usage(&e).in_use, d.reserved()), (6 * MIB, 6 * MIB));
        assert_eq!(usage(&e).refusals, 1);
        assert_eq!(e.ledger(Kind::PoolPointer).live_on(0), (3, 5 * MIB));
        free_async(&e, &d, other, c, MIB);
        assert_eq!(usage(&e).in_use, d.reserved());
    }

    #[test]
    fn a_plain_free_of_pool_memory_moves_it_to_the_cache() {
        let (e, d) = engine("1GiB");
        let (_, p) = alloc_async(&e, &d, 2 * MIB);
        let rc = e.free("cuMemFree_v2", Kind::Pointer, p, || {
            d.free(DEFAULT_POOL, p, 2 * MIB)
        });
        assert_eq!(rc, CuResult::SUCCESS);
        assert_eq!((usage(&e).in_use, pool_cache(&e)), (2 * MIB, 2 * MIB));
        // unknown pointers still reach the driver, unchanged
        let rc = e.free("cuMemFree_v2", Kind::Pointer, 0x1234, || CuResult(1));
        assert_eq!(rc, CuResult(1));
        // a failed free keeps the charge where it was
        let (_, q) = alloc_async(&e, &d, 2 * MIB);
        let rc = e.free("cuMemFree_v2", Kind::Pointer, q, || CuResult(1));
        assert_eq!(rc, CuResult(1));
        assert_eq!(e.ledger(Kind::PoolPointer).live_on(0), (1, 2 * MIB));
    }

    #[test]
    fn a_destroyed_pool_keeps_its_memory_until_its_last_allocation_goes() {
        let (e, d) = engine("1GiB");
        let pool = 0x902;
        let (_, p) = alloc_from(&e, &d, PoolOf::Given(pool), 3 * MIB);
        let (_, q) = alloc_from(&e, &d, PoolOf::Given(pool), MIB);
        free_async(&e, &d, pool, p, 3 * MIB);
        e.pool_destroyed(pool);
        assert_eq!((usage(&e).in_use, pool_cache(&e)), (4 * MIB, 3 * MIB));
        free_async(&e, &d, pool, q, MIB);
        assert_eq!((usage(&e).in_use, pool_cache(&e)), (0, 0));
        // one with nothing live goes at once (a new pool, by the same handle)
        d.pools.lock().unwrap().remove(&pool);
        let (_, r) = alloc_from(&e, &d, PoolOf::Given(pool), MIB);
        free_async(&e, &d, pool, r, MIB);
        assert_eq!(usage(&e).in_use, 2 * MIB);
        e.pool_destroyed(pool);
        assert_eq!(usage(&e).in_use, 0);
    }

    #[test]
    fn a_context_gone_takes_its_pointers_and_the_pools_are_read_again() {
        let (e, d) = engine("1GiB");
        d.set_threshold(DEFAULT_POOL, u64::MAX);
        let (_, _p) = alloc_async(&e, &d, 3 * MIB);
        // the driver frees the context's allocations; the pool keeps the memory
        d.free(DEFAULT_POOL, 0, 3 * MIB);
        e.context_destroyed("cuCtxDestroy_v2", CONTEXT);
        assert_eq!(e.ledger(Kind::PoolPointer).live_on(0), (0, 0));
        assert_eq!((usage(&e).in_use, pool_cache(&e)), (4 * MIB, 4 * MIB));
        assert!(e.pool_books.lock().pointers.is_empty());
        // threshold 0: the teardown gave it back, and so does the quota
        let (e, d) = engine("1GiB");
        let (_, _p) = alloc_async(&e, &d, 3 * MIB);
        d.free(DEFAULT_POOL, 0, 3 * MIB);
        d.sync();
        e.context_destroyed("cuCtxDestroy_v2", CONTEXT);
        assert_eq!((usage(&e).in_use, pool_cache(&e)), (0, 0));
    }

    #[test]
    fn counting_allocations_reads_no_pool() {
        let (e, d) = engine_with(&[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_COUNT", "allocations")]);
        let (rc, p) = alloc_async(&e, &d, 3 * MIB);
        assert_eq!(rc, CuResult::SUCCESS);
        assert_eq!(usage(&e).in_use, 3 * MIB);
        free_async(&e, &d, DEFAULT_POOL, p, 3 * MIB);
        assert_eq!(usage(&e).in_use, 0);
        e.memory_info("m", 8 << 30, 8 << 30);
        assert_eq!(d.reads.load(Relaxed), 0);
        assert_eq!(e.ledger(Kind::Pointer).live_on(0), (0, 0));
    }

    /// Threads mix stream-ordered and plain allocations under a quota: the quota holds at
    /// every step, and at rest cuquota's figure is the pools' reservation exactly.
    #[test]
    fn exact_under_threads() {
        let (e, d) = engine("64MiB");
        let (e, d) = (Arc::new(e), d);
        let plain = Arc::new(AtomicU64::new(1));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (e, d, plain) = (e.clone(), d.clone(), plain.clone());
                std::thread::spawn(move || {
                    let pool = [PoolOf::Current, PoolOf::Given(0x903)][t as usize % 2];
                    let handle = match pool {
                        PoolOf::Current => DEFAULT_POOL,
                        PoolOf::Given(p) => p,
                    };
                    let mut live = Vec::new();
                    for i in 0..400u64 {
                        let size = MIB / 2 + (i % 5) * MIB / 4;
                        if i % 3 == 0 {
                            let p = plain.fetch_add(1, Relaxed) << 40;
                            let rc = e.alloc("a", Kind::Pointer, Place::Current, 4 * MIB, || {
                                (CuResult::SUCCESS, p)
                            });
                            if rc.is_ok() {
                                e.free("f", Kind::Pointer, p, || CuResult::SUCCESS);
                            }
                        } else if let (CuResult::SUCCESS, p) = alloc_from(&e, &d, pool, size) {
                            live.push((p, size));
                        }
                        assert!(e.quota(0).unwrap().in_use() <= 64 * MIB);
                        if live.len() > 3 {
                            let (p, size) = live.remove(0);
                            free_async(&e, &d, handle, p, size);
                        }
                        if i % 50 == 0 {
                            d.sync();
                        }
                    }
                    for (p, size) in live {
                        free_async(&e, &d, handle, p, size);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(usage(&e).peak <= 64 * MIB);
        assert_eq!(usage(&e).in_use, pool_cache(&e), "no allocation live");
        assert!(
            pool_cache(&e) >= d.unused(),
            "never below what the pools keep"
        );
        e.memory_info("m", 8 << 30, 8 << 30);
        assert_eq!(pool_cache(&e), d.unused(), "read again: exact");
    }
}
