//! The live allocations: key (device pointer or `cuMemCreate` handle) → what was charged.
//! Sharded by key so that threads rarely meet on a lock, and O(1) whatever the number of
//! live allocations (a peer's linked list made a free cost O(live)).

use crate::contexts::{ContextSlot, NO_CONTEXT};
use crate::key_map::{self, KeyMap, SHARD_BITS};
use crate::spin::{SpinGuard, SpinLock};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

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
    /// freed them with it).
    pub fn remove_context(&self, context: ContextSlot) -> Vec<(u64, Charge)> {
        let mut gone = Vec::new();
        if context == NO_CONTEXT {
            return gone;
        }
        for shard in &self.shards {
            shard.lock().map.retain(|key, p| {
                let c = Charge::from(p);
                let keep = c.context != context;
                if !keep {
                    gone.push((key, c));
                }
                keep
            });
        }
        gone
    }

    /// Live allocations per device: (count, bytes), for the exit summary.
    /// [`Self::live_on`] for the exit handler: None if a shard stays locked for `attempts`
    /// tries (its holder may be the thread running the exit handler).
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
