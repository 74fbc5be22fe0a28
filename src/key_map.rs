//! A map from a `u64` key (a device address or a handle) to a small `Copy` value: the
//! ledger's shards and the pool cache's books. Open addressing with linear probing and
//! backward-shift deletion (no tombstones), so an insert and a remove on the allocation
//! path cost a fraction of what a general-purpose map costs (bench/README.md); its SIMD
//! probing and tombstone upkeep pay off for large tables, not for these.
//!
//! Plain data: the caller locks. No FFI here.

/// The slot value of an empty slot's key: key 0 is kept apart, in `zero`.
const EMPTY: u64 = 0;
/// Slots in the first table made.
const FIRST_CAPACITY: usize = 16;

#[derive(Clone, Debug)]
pub struct KeyMap<V> {
    /// `(key, value)`, a power-of-two count of them (or none before the first insert).
    slots: Vec<(u64, V)>,
    /// Entries, key 0's included.
    len: usize,
    /// `len` at which the table grows: three quarters full, so that probes stay short.
    grow_at: usize,
    /// 64 − log2(slots): the shift that takes a hash's top bits as a slot number.
    shift: u32,
    /// The value of key 0, which cannot live in a slot.
    zero: Option<V>,
}

impl<V> Default for KeyMap<V> {
    fn default() -> Self {
        KeyMap {
            slots: Vec::new(),
            len: 0,
            grow_at: 0,
            shift: 64,
            zero: None,
        }
    }
}

/// A key's hash (the format crate's, shared with the CLI's maps): the ledger picks its
/// shard from the top bits; [`KeyMap`] its slot from the bits below them.
pub use cuquota_format::hash::fold as hash;

/// Bits at the top of [`hash`] that pick a ledger's shard; the slot comes from the rest.
pub const SHARD_BITS: u32 = 6;

impl<V: Copy> KeyMap<V> {
    #[cfg(test)]
    pub fn new() -> Self {
        Self::default()
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// The slot where `key`'s probe starts (the table has slots: callers check).
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        // The shard bits are the same for every key of one ledger shard: skip them. A
        // capacity of 2^k takes the top k bits of the rest (the best mixed ones).
        ((hash(key) << SHARD_BITS) >> self.shift) as usize
    }

    /// The slot holding `key`, or the empty slot where it would go.
    #[inline(always)]
    fn find(&self, key: u64) -> Result<usize, usize> {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            match self.slots[i].0 {
                k if k == key => return Ok(i),
                EMPTY => return Err(i),
                _ => i = (i + 1) & mask,
            }
        }
    }

    #[inline]
    #[cfg(test)]
    pub fn get(&self, key: u64) -> Option<V> {
        if key == EMPTY {
            return self.zero;
        }
        if self.slots.is_empty() {
            return None;
        }
        self.find(key).ok().map(|i| self.slots[i].1)
    }

    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        if key == EMPTY {
            return self.zero.as_mut();
        }
        if self.slots.is_empty() {
            return None;
        }
        let i = self.find(key).ok()?;
        Some(&mut self.slots[i].1)
    }

    /// Enters `key`; returns the value it replaced, if it was there.
    #[inline(always)]
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        if key == EMPTY {
            let old = self.zero.replace(value);
            self.len += usize::from(old.is_none());
            return old;
        }
        if self.len >= self.grow_at {
            self.grow(value);
        }
        match self.find(key) {
            Ok(i) => Some(std::mem::replace(&mut self.slots[i].1, value)),
            Err(i) => {
                self.slots[i] = (key, value);
                self.len += 1;
                None
            }
        }
    }

    /// Takes `key` out; returns its value, if it was there.
    #[inline(always)]
    pub fn remove(&mut self, key: u64) -> Option<V> {
        if key == EMPTY {
            let old = self.zero.take();
            self.len -= usize::from(old.is_some());
            return old;
        }
        if self.len == 0 || self.slots.is_empty() {
            return None;
        }
        let mut hole = self.find(key).ok()?;
        let value = self.slots[hole].1;
        // Backward shift: each later entry of the run that may move into the hole (its
        // probe started at or before the hole) moves back, so no probe ever meets a gap
        // before its key.
        let mask = self.mask();
        let mut next = (hole + 1) & mask;
        while self.slots[next].0 != EMPTY {
            let home = self.home(self.slots[next].0);
            // Distances along the probe order, wrapping round the end.
            if (next.wrapping_sub(home) & mask) >= (next.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[next];
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.slots[hole].0 = EMPTY;
        self.len -= 1;
        Some(value)
    }

    /// Twice the room (`filler` fills the new slots' values, which no one reads).
    #[cold]
    #[inline(never)]
    fn grow(&mut self, filler: V) {
        let capacity = (self.slots.len() * 2).max(FIRST_CAPACITY);
        let old = std::mem::replace(&mut self.slots, vec![(EMPTY, filler); capacity]);
        self.grow_at = capacity / 4 * 3;
        self.shift = 64 - capacity.trailing_zeros();
        for (key, value) in old {
            // Each key is in the old table once, so `find` gives an empty slot.
            if key != EMPTY {
                if let Err(i) = self.find(key) {
                    self.slots[i] = (key, value);
                }
            }
        }
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, V)> + '_ {
        let zero = self.zero.map(|v| (EMPTY, v));
        zero.into_iter()
            .chain(self.slots.iter().copied().filter(|(k, _)| *k != EMPTY))
    }

    /// Keeps the entries `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(u64, V) -> bool) {
        let gone: Vec<u64> = self
            .iter()
            .filter(|&(k, v)| !keep(k, v))
            .map(|(k, _)| k)
            .collect();
        for key in gone {
            self.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn insert_replace_remove() {
        let mut m = KeyMap::new();
        assert_eq!(m.remove(0x1000), None, "an empty map has nothing");
        assert_eq!(m.insert(0, 1), None);
        assert_eq!(m.remove(0x1000), None, "key 0 alone: still no table");
        assert_eq!(m.remove(0), Some(1));
        assert_eq!(m.insert(0x1000, 1), None);
        assert_eq!(m.insert(0x1000, 2), Some(1));
        *m.get_mut(0x1000).unwrap() += 1;
        assert_eq!(m.get(0x1000), Some(3));
        assert_eq!(m.get_mut(0x2000), None);
        assert_eq!(m.insert(0, 7), None, "key 0 is a key like any other");
        assert_eq!(m.len(), 2);
        assert_eq!(m.get(0), Some(7));
        assert_eq!(m.remove(0x1000), Some(3));
        assert_eq!(m.remove(0x1000), None);
        assert_eq!(m.remove(0), Some(7));
        assert!(m.is_empty());
    }

    #[test]
    fn many_keys_and_retain() {
        let mut m = KeyMap::new();
        for i in 1..=20_000u64 {
            m.insert(i << 12, i);
        }
        assert_eq!(m.len(), 20_000);
        m.retain(|_, v| v % 2 == 0);
        assert_eq!(m.len(), 10_000);
        for i in (1..=20_000u64).rev() {
            let want = (i % 2 == 0).then_some(i);
            assert_eq!(m.remove(i << 12), want, "key {i}");
        }
        assert!(m.is_empty());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
    }

    /// Keys from a small set (so that removes hit and runs collide), some aligned, some not,
    /// 0 among them.
    fn op() -> impl Strategy<Value = Op> {
        let key = prop_oneof![0u64..64, (0u64..64).prop_map(|k| k << 21), Just(u64::MAX)];
        prop_oneof![
            (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            key.prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Whatever the inserts and removes, the map answers as std's does.
        #[test]
        fn answers_as_a_hash_map(ops in proptest::collection::vec(op(), 0..400)) {
            let (mut ours, mut std) = (KeyMap::new(), HashMap::new());
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(ours.insert(k, v), std.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(ours.remove(k), std.remove(&k)),
                }
                prop_assert_eq!(ours.len(), std.len());
            }
            for (k, v) in &std {
                prop_assert_eq!(ours.get(*k), Some(*v));
            }
            let mut all: Vec<_> = ours.iter().collect();
            all.sort_unstable();
            let mut want: Vec<_> = std.into_iter().collect();
            want.sort_unstable();
            prop_assert_eq!(all, want);
        }
    }
}
