//! The live allocations: key (device pointer or `cuMemCreate` handle) → what was charged.
//! Sharded by key so that threads rarely meet on a lock, and O(1) whatever the number of
//! live allocations (a peer's linked list made a free cost O(live)).

use crate::spin::SpinLock;
use cuquota_format::hash::BuildKeyHasher;
use std::collections::HashMap;

/// What one live allocation charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    pub device: u32,
    pub bytes: u64,
}

const SHARDS: usize = 64;

/// A charge packed into one word (GPU ordinal in the top 8 bits, bytes below), so that an
/// entry is 16 bytes and more of a large ledger stays in cache.
#[derive(Clone, Copy)]
struct Packed(u64);

const BYTES_BITS: u32 = 56;

impl From<Charge> for Packed {
    fn from(c: Charge) -> Packed {
        // No driver hands out 64 PiB; clamp rather than corrupt the device bits if one did.
        let bytes = c.bytes.min((1 << BYTES_BITS) - 1);
        Packed((u64::from(c.device) << BYTES_BITS) | bytes)
    }
}

impl From<Packed> for Charge {
    fn from(p: Packed) -> Charge {
        Charge {
            device: (p.0 >> BYTES_BITS) as u32,
            bytes: p.0 & ((1 << BYTES_BITS) - 1),
        }
    }
}

type Map = HashMap<u64, Packed, BuildKeyHasher>;
type Shard = SpinLock<Map>;

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
            shards: std::array::from_fn(|_| SpinLock::new(Map::default())),
        }
    }

    fn shard(&self, key: u64) -> &Shard {
        // Allocations are at least 256-byte aligned: drop the low bits, mix the rest.
        let mixed = (key >> 8).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.shards[(mixed >> 58) as usize % SHARDS]
    }

    /// Records a new allocation. Returns the entry it replaced, if the key was already live
    /// (a free we never saw); the caller gives that charge back.
    pub fn insert(&self, key: u64, charge: Charge) -> Option<Charge> {
        self.shard(key)
            .lock()
            .insert(key, charge.into())
            .map(Charge::from)
    }

    /// Removes an allocation before the driver frees it, so that a thread which gets the
    /// same address from the driver right after cannot have its entry removed by us.
    pub fn remove(&self, key: u64) -> Option<Charge> {
        self.shard(key).lock().remove(&key).map(Charge::from)
    }

    /// In a forked child: no lock held, no entry (the parent's memory is not the child's).
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        for shard in &self.shards {
            // SAFETY: the caller's promise: the child of a fork, with one thread.
            unsafe { shard.reset_in_child(Map::default()) };
        }
    }

    /// Live allocations per device: (count, bytes), for the exit summary.
    /// [`Self::live_on`] for the exit handler: None if a shard stays locked for `attempts`
    /// tries (its holder may be the thread running the exit handler).
    pub fn try_live_on(&self, device: u32, attempts: u32) -> Option<(u64, u64)> {
        let mut count = 0;
        let mut bytes = 0;
        for shard in &self.shards {
            for c in shard
                .try_lock_for(attempts)?
                .values()
                .map(|p| Charge::from(*p))
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
                .lock()
                .values()
                .map(|p| Charge::from(*p))
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
        let c = Charge {
            device: 0,
            bytes: 4096,
        };
        assert_eq!(l.insert(0x7000_0000, c), None);
        assert_eq!(
            l.insert(
                0x7000_1000,
                Charge {
                    device: 1,
                    bytes: 1
                }
            ),
            None
        );
        assert_eq!(l.live_on(0), (1, 4096));
        assert_eq!(
            l.insert(
                0x7000_0000,
                Charge {
                    device: 0,
                    bytes: 8
                }
            ),
            Some(c)
        );
        assert_eq!(
            l.remove(0x7000_0000),
            Some(Charge {
                device: 0,
                bytes: 8
            })
        );
        assert_eq!(l.remove(0x7000_0000), None);
        assert_eq!(l.live_on(1), (1, 1));
        let big = Charge {
            device: 63,
            bytes: (1 << 56) - 1,
        };
        l.insert(0x8000, big);
        assert_eq!(l.remove(0x8000), Some(big), "a charge survives packing");
        std::mem::forget(l.shard(0x7000_1000).lock());
        // SAFETY: this test is the ledger's only user.
        unsafe { l.reset_in_child() };
        assert_eq!(l.live_on(1), (0, 0));
    }

    #[test]
    fn many_live_allocations() {
        let l = Ledger::new();
        for i in 0..20_000u64 {
            l.insert(
                i << 12,
                Charge {
                    device: 0,
                    bytes: i,
                },
            );
        }
        assert_eq!(l.live_on(0).0, 20_000);
        for i in (0..20_000u64).rev() {
            assert_eq!(l.remove(i << 12).unwrap().bytes, i);
        }
        assert_eq!(l.live_on(0), (0, 0));
    }
}
