//! The live allocations: key (device pointer or `cuMemCreate` handle) → what was charged.
//! Sharded by key so that threads rarely meet on a lock, and O(1) whatever the number of
//! live allocations (a peer's linked list made a free cost O(live)).

use crate::array_shape::ArrayShape;
use crate::contexts::{ContextSlot, NO_CONTEXT, POOLED};
use crate::key_map::{self, KeyMap, SHARD_BITS};
use crate::spin::{SpinGuard, SpinLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

cuquota_format::listed_enum! {
    /// What a charge is keyed by: each kind is a key space with a ledger of its own. A new
    /// kind (arrays, contexts) is a variant here; [`Allocations`] keeps one ledger per entry of
    /// `ALL`, and everything that sums or resets goes over all of them. (Pool allocations,
    /// while the quota counts the footprint, are in the pool cache's books, with their
    /// pools: see `pool_cache`.) A kind indexes the ledgers: as a usize it needs no widening
    /// on the alloc/free path.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(usize)]
    pub enum Kind {
        /// Device pointers (`cuMemAlloc`, pools, pitch).
        Pointer,
        /// `cuMemCreate` handles.
        Handle,
        /// CUDA arrays and mipmapped arrays (`CUarray`, `CUmipmappedArray` handles).
        Array,
    }
}

/// How many (device, array shape) sizes are remembered at most.
const ARRAY_SIZES_KEPT: usize = 4096;

/// The allocations part's state: a ledger per [`Kind`], and what the driver gave each array
/// shape on each device (an array's true size, asked once per shape).
pub struct Allocations {
    ledgers: [Ledger; Kind::ALL.len()],
    array_sizes: SpinLock<HashMap<(u32, ArrayShape), u64>>,
}

impl Allocations {
    pub fn new() -> Allocations {
        Allocations {
            ledgers: std::array::from_fn(|_| Ledger::new()),
            array_sizes: SpinLock::new(HashMap::new()),
        }
    }

    #[inline(always)]
    pub fn ledger(&self, kind: Kind) -> &Ledger {
        &self.ledgers[kind as usize]
    }

    /// Every kind's ledger.
    pub fn ledgers(&self) -> &[Ledger] {
        &self.ledgers
    }

    /// What the driver gave `shape` on `device`, once known.
    pub fn array_size(&self, device: u32, shape: ArrayShape) -> Option<u64> {
        self.array_sizes.lock().get(&(device, shape)).copied()
    }

    pub fn remember_array_size(&self, device: u32, shape: ArrayShape, bytes: u64) {
        let mut sizes = self.array_sizes.lock();
        // A program that makes endless shapes must not grow this without end.
        if sizes.len() >= ARRAY_SIZES_KEPT {
            sizes.clear();
        }
        sizes.insert((device, shape), bytes);
    }

    /// In a forked child: the parent's allocations are not the child's.
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        for ledger in &self.ledgers {
            // SAFETY: the caller's promise.
            unsafe { ledger.reset_in_child() };
        }
        // SAFETY: as above.
        unsafe { self.array_sizes.reset_in_child(HashMap::new()) };
    }
}

impl Default for Allocations {
    fn default() -> Self {
        Self::new()
    }
}

/// What one live allocation charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    pub device: u32,
    pub bytes: u64,
    /// The context that owns the memory (its destruction frees it), or [`NO_CONTEXT`].
    pub context: ContextSlot,
}

impl Charge {
    /// A charge no context owns (`cuMemCreate` handles belong to the process).
    #[cfg(test)]
    pub fn unowned(device: u32, bytes: u64) -> Charge {
        Charge {
            device,
            bytes,
            context: NO_CONTEXT,
        }
    }
}

const SHARDS: usize = 1 << SHARD_BITS;

/// A charge packed into one word (GPU ordinal in the top 8 bits, the context slot in the
/// next 8, bytes below), so that an entry is 16 bytes and more of a large ledger stays in
/// cache.
#[derive(Clone, Copy)]
struct Packed(u64);

const BYTES_BITS: u32 = 48;
const CONTEXT_SHIFT: u32 = 48;
const DEVICE_SHIFT: u32 = 56;

impl From<Charge> for Packed {
    fn from(c: Charge) -> Packed {
        // No driver hands out 256 TiB at once; clamp rather than corrupt the other bits.
        let bytes = c.bytes.min((1 << BYTES_BITS) - 1);
        Packed(
            (u64::from(c.device) << DEVICE_SHIFT) | (u64::from(c.context) << CONTEXT_SHIFT) | bytes,
        )
    }
}

impl From<Packed> for Charge {
    fn from(p: Packed) -> Charge {
        Charge {
            device: (p.0 >> DEVICE_SHIFT) as u32,
            context: (p.0 >> CONTEXT_SHIFT) as ContextSlot,
            bytes: p.0 & ((1 << BYTES_BITS) - 1),
        }
    }
}

type Map = KeyMap<Packed>;

/// On a 128-byte line of its own (two 64-byte lines: some CPUs fetch lines in pairs): two
/// threads that free keys of neighbouring shards must not take turns at one line.
#[repr(align(128))]
struct Shard {
    map: SpinLock<Map>,
    /// The map's entries, written under its lock after every change, so that a look-up of a
    /// key in an empty shard (a free of pool memory, which asks this ledger first) takes no
    /// lock. Whoever frees a key learnt it after its insert, so the count it reads includes
    /// that entry.
    live: AtomicUsize,
}

impl Shard {
    #[inline(always)]
    fn lock(&self) -> ShardGuard<'_> {
        ShardGuard {
            map: self.map.lock(),
            live: &self.live,
        }
    }
}

/// A shard's map, locked; its `live` count follows it when the guard goes.
struct ShardGuard<'a> {
    map: SpinGuard<'a, Map>,
    live: &'a AtomicUsize,
}

impl Drop for ShardGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.live.store(self.map.len(), Relaxed);
    }
}

pub struct Ledger {
    shards: [Shard; SHARDS],
}

impl Default for Ledger {
    fn default() -> Self {
        Self::new()
    }
}

impl Ledger {
    pub fn new() -> Self {
        Ledger {
            shards: std::array::from_fn(|_| Shard {
                map: SpinLock::new(Map::default()),
                live: AtomicUsize::new(0),
            }),
        }
    }

    #[inline(always)]
    fn shard(&self, key: u64) -> &Shard {
        &self.shards[(key_map::hash(key) >> (64 - SHARD_BITS)) as usize]
    }

    /// Records a new allocation. Returns the entry it replaced, if the key was already live
    /// (a free we never saw); the caller gives that charge back.
    #[inline(always)]
    pub fn insert(&self, key: u64, charge: Charge) -> Option<Charge> {
        self.shard(key)
            .lock()
            .map
            .insert(key, charge.into())
            .map(Charge::from)
    }

    /// Removes an allocation before the driver frees it, so that a thread which gets the
    /// same address from the driver right after cannot have its entry removed by us.
    #[inline(always)]
    pub fn remove(&self, key: u64) -> Option<Charge> {
        let shard = self.shard(key);
        if shard.live.load(Relaxed) == 0 {
            return None;
        }
        shard.lock().map.remove(key).map(Charge::from)
    }

    /// In a forked child: no lock held, no entry (the parent's memory is not the child's).
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        for shard in &self.shards {
            // SAFETY: the caller's promise: the child of a fork, with one thread.
            unsafe { shard.map.reset_in_child(Map::default()) };
            shard.live.store(0, Relaxed);
        }
    }

    /// Removes every allocation `context` owns (the context was destroyed, and the driver
    /// freed them with it). Never a pool allocation's ([`POOLED`]: no context owns it).
    pub fn remove_context(&self, context: ContextSlot) -> Vec<(u64, Charge)> {
        if context == NO_CONTEXT || context == POOLED {
            return Vec::new();
        }
        self.remove_where(|c| c.context == context)
    }

    /// Removes every pool allocation charged to `device` (its primary context was reset or
    /// released for the last time: device-wide, the driver freed them).
    pub fn remove_pooled_on(&self, device: u32) -> Vec<(u64, Charge)> {
        self.remove_where(|c| c.context == POOLED && c.device == device)
    }

    fn remove_where(&self, gone: impl Fn(&Charge) -> bool) -> Vec<(u64, Charge)> {
        let mut removed = Vec::new();
        for shard in &self.shards {
            shard.lock().map.retain(|key, p| {
                let c = Charge::from(p);
                let keep = !gone(&c);
                if !keep {
                    removed.push((key, c));
                }
                keep
            });
        }
        removed
    }

    /// Gives every allocation `from` owns to `to` (`from` ended, and its memory did not go
    /// with it: a green context's, which is its primary context's).
    pub fn reown_context(&self, from: ContextSlot, to: ContextSlot) {
        if from == NO_CONTEXT {
            return;
        }
        for shard in &self.shards {
            let mut s = shard.lock();
            let owned: Vec<(u64, Charge)> = (s.map.iter())
                .map(|(key, p)| (key, Charge::from(p)))
                .filter(|(_, c)| c.context == from)
                .collect();
            for (key, c) in owned {
                s.map.insert(key, Charge { context: to, ..c }.into());
            }
        }
    }

    /// Live allocations on `device`: (count, bytes), for the exit summary. None if a shard
    /// stays locked for `attempts` tries (its holder may be the thread running the exit
    /// handler).
    pub fn try_live_on(&self, device: u32, attempts: u32) -> Option<(u64, u64)> {
        let mut count = 0;
        let mut bytes = 0;
        for shard in &self.shards {
            for c in shard
                .map
                .try_lock_for(attempts)?
                .iter()
                .map(|(_, p)| Charge::from(p))
                .filter(|c| c.device == device)
            {
                count += 1;
                bytes += c.bytes;
            }
        }
        Some((count, bytes))
    }

    /// [`Self::try_live_on`], waiting for each shard.
    #[cfg(test)]
    pub fn live_on(&self, device: u32) -> (u64, u64) {
        let mut count = 0;
        let mut bytes = 0;
        for shard in &self.shards {
            for c in shard
                .map
                .lock()
                .iter()
                .map(|(_, p)| Charge::from(p))
                .filter(|c| c.device == device)
            {
                count += 1;
                bytes += c.bytes;
            }
        }
        (count, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_keep_a_ledger_per_kind_and_array_sizes() {
        let a = Allocations::new();
        assert_eq!(a.ledgers().len(), Kind::ALL.len());
        for kind in Kind::ALL {
            a.ledger(kind)
                .insert(0x100, Charge::unowned(0, kind as u64 + 1));
        }
        for kind in Kind::ALL {
            assert_eq!(a.ledger(kind).live_on(0), (1, kind as u64 + 1), "{kind:?}");
        }
        let shape = |width| ArrayShape {
            width,
            height: 1,
            depth: 0,
            format: 1,
            channels: 1,
            flags: 0,
            levels: 1,
        };
        a.remember_array_size(0, shape(1), 512);
        assert_eq!(
            (a.array_size(0, shape(1)), a.array_size(1, shape(1))),
            (Some(512), None)
        );
        // Endless shapes: the table is emptied when full, never grown past its bound.
        for w in 2..=ARRAY_SIZES_KEPT as u64 + 1 {
            a.remember_array_size(0, shape(w), w);
        }
        assert_eq!(a.array_size(0, shape(1)), None);
        assert_eq!(
            a.array_size(0, shape(ARRAY_SIZES_KEPT as u64 + 1)),
            Some(ARRAY_SIZES_KEPT as u64 + 1)
        );
        // SAFETY: this test is the only user.
        unsafe { a.reset_in_child() };
        assert_eq!(a.ledger(Kind::Array).live_on(0), (0, 0));
        assert_eq!(a.array_size(0, shape(ARRAY_SIZES_KEPT as u64 + 1)), None);
    }

    #[test]
    fn insert_remove_and_replace() {
        let l = Ledger::new();
        let c = Charge::unowned(0, 4096);
        assert_eq!(l.insert(0x7000_0000, c), None);
        assert_eq!(l.insert(0x7000_1000, Charge::unowned(1, 1)), None);
        assert_eq!(l.live_on(0), (1, 4096));
        assert_eq!(l.insert(0x7000_0000, Charge::unowned(0, 8)), Some(c));
        assert_eq!(l.remove(0x7000_0000), Some(Charge::unowned(0, 8)));
        assert_eq!(l.remove(0x7000_0000), None);
        assert_eq!(l.live_on(1), (1, 1));
        let big = Charge {
            device: 63,
            bytes: (1 << 48) - 1,
            context: 255,
        };
        l.insert(0x8000, big);
        assert_eq!(l.remove(0x8000), Some(big), "a charge survives packing");
        let owned = |bytes, context| Charge {
            device: 2,
            bytes,
            context,
        };
        l.insert(0x9000, owned(5, 3));
        l.insert(0xa000, owned(6, 3));
        l.insert(0xb000, owned(7, 4));
        let mut gone: Vec<u64> = l.remove_context(3).iter().map(|(_, c)| c.bytes).collect();
        gone.sort();
        assert_eq!(gone, [5, 6], "only that context's charges");
        assert_eq!(l.live_on(2), (1, 7));
        assert!(l.remove_context(NO_CONTEXT).is_empty());
        // pool allocations: no context's end takes them, their device's reset does
        l.insert(0xc000, owned(8, POOLED));
        l.insert(
            0xd000,
            Charge {
                device: 1,
                ..owned(9, POOLED)
            },
        );
        assert!(l.remove_context(POOLED).is_empty());
        assert_eq!(l.remove_pooled_on(2), [(0xc000, owned(8, POOLED))]);
        assert_eq!(l.live_on(2), (1, 7), "the context's own stays");
        assert_eq!(l.live_on(1), (2, 10));
        std::mem::forget(l.shard(0x7000_1000).map.lock());
        // SAFETY: this test is the ledger's only user.
        unsafe { l.reset_in_child() };
        assert_eq!(l.live_on(1), (0, 0));
    }

    #[test]
    fn many_live_allocations() {
        let l = Ledger::new();
        for i in 0..20_000u64 {
            l.insert(i << 12, Charge::unowned(0, i));
        }
        assert_eq!(l.live_on(0).0, 20_000);
        for i in (0..20_000u64).rev() {
            assert_eq!(l.remove(i << 12).unwrap().bytes, i);
        }
        assert_eq!(l.live_on(0), (0, 0));
    }
}
