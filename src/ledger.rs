//! The live allocations: key (device pointer or `cuMemCreate` handle) → what was charged.
//! Sharded by key so that threads rarely meet on a lock, and O(1) whatever the number of
//! live allocations (a peer's linked list made a free cost O(live)).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// What one live allocation charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    pub device: u32,
    pub bytes: u64,
}

const SHARDS: usize = 64;

/// Keys are addresses or handles: already well spread, so a multiply is hash enough.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Shard = Mutex<HashMap<u64, Charge, BuildHasherDefault<KeyHasher>>>;

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
            shards: std::array::from_fn(|_| Mutex::new(HashMap::default())),
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
        self.shard(key).lock().insert(key, charge)
    }

    /// Removes an allocation before the driver frees it, so that a thread which gets the
    /// same address from the driver right after cannot have its entry removed by us.
    pub fn remove(&self, key: u64) -> Option<Charge> {
        self.shard(key).lock().remove(&key)
    }

    /// Before `fork()`: hold every shard, so that no lock is copied into the child half-held.
    pub fn lock_all(&self) {
        for shard in &self.shards {
            std::mem::forget(shard.lock());
        }
    }

    /// After `fork()`, in both processes: release what [`Self::lock_all`] took; in the child
    /// also forget every entry (the parent's memory is not the child's).
    pub fn unlock_all(&self, clear: bool) {
        for shard in &self.shards {
            // SAFETY: lock_all locked every shard on this thread and forgot the guards.
            unsafe { shard.force_unlock() };
            if clear {
                shard.lock().clear();
            }
        }
    }

    /// Live allocations per device: (count, bytes), for the exit summary.
    pub fn live_on(&self, device: u32) -> (u64, u64) {
        let mut count = 0;
        let mut bytes = 0;
        for shard in &self.shards {
            for c in shard.lock().values().filter(|c| c.device == device) {
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
        l.lock_all();
        l.unlock_all(true);
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
