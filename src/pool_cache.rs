//! The pool cache's books: where each pool's memory lands, the pools this process allocated
//! from, what each keeps beyond its live allocations, and which pool each live pool
//! allocation came from. Plain data under two locks; `engine/pool_cache.rs` meets the driver
//! with them (the rules are told there).

use crate::contexts::ContextSlot;
use crate::key_map::KeyMap;
use crate::ledger::Charge;
use crate::spin::{SpinGuard, SpinLock};
use std::collections::HashMap;

/// Where a pool's memory lands, from its properties or the query that returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolPlace {
    Device(u32),
    /// Host or host-NUMA memory: not charged.
    Host,
    /// A CUDA 13 managed pool: charged as `cuMemAllocManaged` is, to the device of the
    /// context it is allocated in (here: the stream's).
    Managed,
}

/// The pool cache part's state: one lock for where pools land (read on every stream-ordered
/// allocation from a given pool), one for the books (taken after the driver answered).
pub struct PoolCache {
    /// Pools whose location is known (made by `cuMemPoolCreate`, or returned by a
    /// default/current pool query) → where their memory lands.
    places: SpinLock<HashMap<usize, PoolPlace>>,
    books: SpinLock<PoolBooks>,
}

impl PoolCache {
    pub fn new() -> PoolCache {
        PoolCache {
            places: SpinLock::new(HashMap::new()),
            books: SpinLock::new(PoolBooks::default()),
        }
    }

    #[inline]
    pub fn place(&self, pool: usize) -> Option<PoolPlace> {
        self.places.lock().get(&pool).copied()
    }

    pub fn set_place(&self, pool: usize, place: PoolPlace) {
        self.places.lock().insert(pool, place);
    }

    pub fn forget_place(&self, pool: usize) {
        self.places.lock().remove(&pool);
    }

    #[inline]
    pub fn books(&self) -> SpinGuard<'_, PoolBooks> {
        self.books.lock()
    }

    /// The books if their lock comes within `attempts` (at exit: never a wait).
    pub fn try_books(&self, attempts: u32) -> Option<SpinGuard<'_, PoolBooks>> {
        self.books.try_lock_for(attempts)
    }

    /// In a forked child: no pool is known.
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        // SAFETY (both): the caller's promise.
        unsafe {
            self.places.reset_in_child(HashMap::new());
            self.books.reset_in_child(PoolBooks::default());
        }
    }
}

impl Default for PoolCache {
    fn default() -> Self {
        Self::new()
    }
}

/// A context's pool allocations taken out of the books: pointer, charge, pool.
pub type TakenPooled = Vec<(u64, Charge, Option<u64>)>;

/// One pool this process allocated from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool {
    /// Our own number for it: a destroyed pool's handle can come back for another pool.
    pub id: u64,
    pub handle: usize,
    pub device: u32,
    /// Its share of the pool cache: `reserved − used` at the last reading, plus what was
    /// freed into it since.
    pub cached: u64,
    /// Its allocations still live.
    pub live: u64,
    /// `cuMemPoolDestroy`ed: no longer read or trimmed (its handle may name another pool).
    pub destroyed: bool,
}

/// What a free of pool memory does to its charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freed {
    /// Its pool keeps the memory: the charge moves to the pool cache.
    Kept,
    /// It was the last allocation of a destroyed pool: the charge and the pool's `cached`
    /// bytes go.
    PoolGone { cached: u64 },
    /// No pool known for it: the charge goes, as for any free.
    Untracked,
}

/// A live pool allocation: what it charged, and its pool (`None`: a pool forgotten since).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pooled {
    pub charge: Charge,
    pub pool: Option<u64>,
}

/// The pool cache's books: plain data, kept under [`PoolCache`]'s lock. They are
/// also the ledger of pool allocations: one look-up under the one lock finds a pointer's
/// charge and its pool.
#[derive(Default)]
pub struct PoolBooks {
    /// The pools, in a list: a process allocates from a few (one per device, as a rule), and
    /// a short scan costs less than any map on the stream-ordered allocation's path.
    pools: Vec<Pool>,
    /// Live pool allocations by pointer.
    pointers: KeyMap<Pooled>,
    next: u64,
}

impl PoolBooks {
    #[inline]
    fn by_id(&mut self, id: u64) -> Option<&mut Pool> {
        self.pools.iter_mut().find(|p| p.id == id)
    }

    fn remove(&mut self, id: u64) -> Option<Pool> {
        let i = self.pools.iter().position(|p| p.id == id)?;
        Some(self.pools.swap_remove(i))
    }

    /// The number of pool `handle` (not destroyed), on `device`, entered if new.
    #[inline]
    pub fn pool(&mut self, handle: usize, device: u32) -> u64 {
        if let Some(p) = self
            .pools
            .iter()
            .find(|p| p.handle == handle && !p.destroyed)
        {
            return p.id;
        }
        self.next += 1;
        self.pools.push(Pool {
            id: self.next,
            handle,
            device,
            cached: 0,
            live: 0,
            destroyed: false,
        });
        self.next
    }

    /// Pools not destroyed on `device` (`None`: on every device): (number, handle, cached).
    pub fn readable(&self, device: Option<u32>) -> Vec<(u64, usize, u64)> {
        let mut found: Vec<_> = self
            .pools
            .iter()
            .filter(|p| !p.destroyed && device.is_none_or(|d| p.device == d))
            .map(|p| (p.id, p.handle, p.cached))
            .collect();
        found.sort_unstable();
        found
    }

    #[inline]
    pub fn get(&self, id: u64) -> Option<Pool> {
        self.pools.iter().find(|p| p.id == id).copied()
    }

    pub fn cached(&self, id: u64) -> u64 {
        self.get(id).map_or(0, |p| p.cached)
    }

    #[inline]
    pub fn set_cached(&mut self, id: u64, bytes: u64) {
        if let Some(p) = self.by_id(id) {
            p.cached = bytes;
        }
    }

    /// A live allocation at `ptr` from pool `id`. Returns the charge of an entry it
    /// replaced: a free we never saw, that allocation is gone (the caller gives it back).
    #[inline(always)]
    pub fn allocated(&mut self, ptr: u64, charge: Charge, id: u64) -> Option<Charge> {
        let pooled = Pooled {
            charge,
            pool: Some(id),
        };
        let stale = self.pointers.insert(ptr, pooled);
        if let Some(old) = stale.and_then(|s| s.pool) {
            self.drop_pointer(old);
        }
        if let Some(p) = self.by_id(id) {
            p.live += 1;
        }
        stale.map(|s| s.charge)
    }

    /// One live allocation of pool `id` is gone without a free of ours (its context went,
    /// or its address was reused). Returns the `cached` bytes of a destroyed pool that
    /// goes with it.
    fn drop_pointer(&mut self, id: u64) -> u64 {
        let Some(p) = self.by_id(id) else {
            return 0;
        };
        p.live = p.live.saturating_sub(1);
        if p.destroyed && p.live == 0 {
            return self.remove(id).map_or(0, |p| p.cached);
        }
        0
    }

    /// A free of `ptr` is about to be called: its entry, out of the books (so that another
    /// thread that gets the same address from the driver right after cannot have its entry
    /// taken by this free).
    #[inline(always)]
    pub fn take_pointer(&mut self, ptr: u64) -> Option<Pooled> {
        self.pointers.remove(ptr)
    }

    /// The free failed: `ptr` is live again.
    pub fn restore_pointer(&mut self, ptr: u64, pooled: Pooled) {
        self.pointers.insert(ptr, pooled);
    }

    /// Gives every live allocation `from` owns to `to` (see `Ledger::reown_context`).
    pub fn reown_context(&mut self, from: ContextSlot, to: ContextSlot) {
        let owned: Vec<(u64, Pooled)> = (self.pointers.iter())
            .filter(|(_, p)| p.charge.context == from)
            .collect();
        for (ptr, mut p) in owned {
            p.charge.context = to;
            self.pointers.insert(ptr, p);
        }
    }

    /// Every live allocation context `slot` owns, out of the books: pointer, charge, pool.
    pub fn take_context(&mut self, slot: ContextSlot) -> TakenPooled {
        let mut taken = Vec::new();
        self.pointers.retain(|ptr, p| {
            let keep = p.charge.context != slot;
            if !keep {
                taken.push((ptr, p.charge, p.pool));
            }
            keep
        });
        taken
    }

    #[cfg(test)]
    pub fn no_pointers(&self) -> bool {
        self.pointers.is_empty()
    }

    /// Live pool allocations on `device`: (count, bytes).
    pub fn live_on(&self, device: u32) -> (u64, u64) {
        self.pointers
            .iter()
            .filter(|(_, p)| p.charge.device == device)
            .fold((0, 0), |(n, b), (_, p)| (n + 1, b + p.charge.bytes))
    }

    /// An allocation of `bytes` from pool `id` (`take_pointer`'s) was freed.
    #[inline(always)]
    pub fn freed(&mut self, id: Option<u64>, bytes: u64) -> Freed {
        let Some((id, p)) = id.and_then(|id| Some((id, self.by_id(id)?))) else {
            return Freed::Untracked;
        };
        p.live = p.live.saturating_sub(1);
        if p.destroyed && p.live == 0 {
            let cached = p.cached;
            self.remove(id);
            return Freed::PoolGone { cached };
        }
        p.cached = p.cached.saturating_add(bytes);
        Freed::Kept
    }

    /// `cuMemPoolDestroy(handle)`: `Some((device, cached))` when its memory goes now (no
    /// live allocation left); else it goes with the last one.
    pub fn destroyed(&mut self, handle: usize) -> Option<(u32, u64)> {
        let p = self
            .pools
            .iter_mut()
            .find(|p| p.handle == handle && !p.destroyed)?;
        p.destroyed = true;
        if p.live > 0 {
            return None;
        }
        let (id, gone) = (p.id, (p.device, p.cached));
        self.remove(id);
        Some(gone)
    }

    /// A readable pool the driver no longer knows (gone with its context): forgotten, with
    /// its pointers. Returns its `cached` bytes.
    pub fn forget(&mut self, id: u64) -> u64 {
        let Some(p) = self.remove(id) else {
            return 0;
        };
        // Its allocations stay charged, as any whose pool is not known.
        let orphans: Vec<u64> = (self.pointers.iter())
            .filter(|(_, p)| p.pool == Some(id))
            .map(|(ptr, _)| ptr)
            .collect();
        for ptr in orphans {
            if let Some(p) = self.pointers.get_mut(ptr) {
                p.pool = None;
            }
        }
        p.cached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn books_follow_pools_pointers_and_destruction() {
        let mut b = PoolBooks::default();
        let a = b.pool(0x10, 0);
        assert_eq!(b.pool(0x10, 0), a, "one number per live handle");
        let charge = |bytes| Charge::unowned(0, bytes);
        assert_eq!(b.allocated(0x100, charge(5), a), None);
        assert_eq!(b.allocated(0x200, charge(7), a), None);
        assert_eq!(b.live_on(0), (2, 12));
        let id = b.take_pointer(0x100).and_then(|p| p.pool);
        assert_eq!(b.freed(id, 5), Freed::Kept);
        assert_eq!(b.cached(a), 5);
        let none = b.take_pointer(0x999).and_then(|p| p.pool);
        assert_eq!(b.freed(none, 5), Freed::Untracked);
        // destroyed with an allocation live: its memory goes with that allocation
        assert_eq!(b.destroyed(0x10), None);
        let again = b.pool(0x10, 1);
        assert_ne!(again, a, "the handle came back for another pool");
        assert_eq!(b.readable(None), vec![(again, 0x10, 0)]);
        let id = b.take_pointer(0x200).and_then(|p| p.pool);
        assert_eq!(b.freed(id, 7), Freed::PoolGone { cached: 5 });
        assert!(b.get(a).is_none());
        // a pool with nothing live goes at once
        b.set_cached(again, 9);
        assert_eq!(b.destroyed(0x10), Some((1, 9)));
        assert_eq!(b.destroyed(0x10), None);
        // an address given out again with no free seen: the old entry's charge comes back
        let c = b.pool(0x20, 0);
        assert_eq!(b.allocated(0x300, charge(3), c), None);
        assert_eq!(b.allocated(0x300, charge(4), c), Some(charge(3)));
        assert_eq!(b.get(c).map(|p| p.live), Some(1));
        assert_eq!(b.live_on(0), (1, 4));
    }
}
