//! The one hash for maps keyed by device addresses and handles: [`fold`] for the
//! interposer's ledger (tables of its own), [`KeyHasher`] for std maps (the trace writer's
//! tally, the live-allocation map of `cuquota report`). SipHash (std's default) would cost
//! the ledger a third of a hook and the report a third of its time, and these keys are not
//! chosen by an attacker.

use std::hash::{BuildHasherDefault, Hasher};

/// Keys are addresses or handles. A folded multiply spreads them into the low bits too,
/// which pick the hash table's bucket (a plain multiply would keep an aligned address's zero
/// low bits, and every entry of a table would probe from the same few buckets). A key of
/// several integers (the report's `(device, address)`) folds each into the state in turn;
/// a single `u64` key costs exactly one multiply and one xor, as the state starts at zero.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHasher(u64);

/// For `HashMap<K, V, BuildKeyHasher>`.
pub type BuildKeyHasher = BuildHasherDefault<KeyHasher>;

const MULTIPLIER: u128 = 0x9e37_79b9_7f4a_7c15;

/// One key's hash: a folded multiply, which spreads aligned addresses and small handles
/// alike over every bit, the top ones included.
#[inline(always)]
pub fn fold(key: u64) -> u64 {
    let product = u128::from(key) * MULTIPLIER;
    (product as u64) ^ ((product >> 64) as u64)
}

// `#[inline]` throughout: the interposer's hot path calls these across the crate boundary.
impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    #[inline]
    fn write_u64(&mut self, key: u64) {
        self.0 = fold(self.0 ^ key);
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    #[inline]
    fn write_i32(&mut self, n: i32) {
        self.write_u64(n as u64);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    #[test]
    fn aligned_addresses_spread_over_the_low_bits() {
        let build = BuildKeyHasher::default();
        let buckets: HashSet<u64> = (0..1024u64)
            .map(|i| build.hash_one(0x7f00_0000_0000 + (i << 21)) & 1023)
            .collect();
        assert!(buckets.len() > 600, "{} buckets of 1024", buckets.len());
    }

    #[test]
    fn every_part_of_a_compound_key_counts() {
        let build = BuildKeyHasher::default();
        assert_ne!(
            build.hash_one((0i32, 0x1000u64)),
            build.hash_one((1i32, 0x1000u64))
        );
        assert_ne!(
            build.hash_one((0i32, 0x1000u64)),
            build.hash_one((0i32, 0x2000u64))
        );
        // One u64: the folded product of the key alone.
        let product = u128::from(0x1000u64) * MULTIPLIER;
        assert_eq!(
            build.hash_one(0x1000u64),
            (product as u64) ^ ((product >> 64) as u64)
        );
    }
}
