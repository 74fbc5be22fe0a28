//! The one rule that groups refusals into back-off episodes. The interposer applies it as the
//! refusals happen (its log's "backed off" / "retried" line and the trace's `backoff` line),
//! and `cuquota report` applies it again to the trace's `refused` and `alloc` lines, so both
//! show the same episodes with the same sizes.
//!
//! The rule, per thread:
//! - a refusal opens an episode on its device when the thread has none open;
//! - every later refusal of that thread on that device joins it, whatever its size (a larger
//!   request is still the same caller failing to get memory: nothing is dropped);
//! - the thread's next successful allocation on that device ends it as a recovery, with the
//!   size it got; successful allocations on other devices leave it open;
//! - a refusal on another device ends it unrecovered (the caller gave up on that device) and
//!   opens the next one; so does the end of the process (never satisfied).
//!
//! A recovery is a retry when every refused size is the size that then fit (an allocator that
//! freed its cache and asked again), and a back-off otherwise (one that shrank its request).
//!
//! An episode keeps the count of its refusals, its first `HEAD` sizes and its last `TAIL`;
//! it is `Copy` and fixed-size, so that the interposer can keep it in a thread-local without
//! a destructor.

/// A run of refusals on one thread and device, waiting to see whether the caller recovers.
#[derive(Clone, Copy, Debug)]
pub struct Episode<const HEAD: usize, const TAIL: usize> {
    pub device: u32,
    refusals: u64,
    /// Every refusal so far asked for `head[0]` bytes.
    same_size: bool,
    head: [u64; HEAD],
    /// The latest sizes beyond `head`, a ring: the n-th of them is at `n % TAIL`.
    tail: [u64; TAIL],
}

/// How an episode ended, when the caller recovered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Other sizes were refused (the sizes kept, in order), then `got` fit.
    BackedOff { refused: Vec<u64>, got: u64 },
    /// The same size every time (after the caller freed its cache), and it fit.
    Retried { bytes: u64, refusals: u64 },
}

impl<const HEAD: usize, const TAIL: usize> Episode<HEAD, TAIL> {
    const KEEPS_BOTH_ENDS: () = assert!(HEAD > 0 && TAIL > 0);

    /// A thread's first refusal since its last success on `device` (or since it had
    /// refusals on another device).
    pub fn start(device: u32, bytes: u64) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::KEEPS_BOTH_ENDS;
        let mut head = [0; HEAD];
        head[0] = bytes;
        Episode {
            device,
            refusals: 1,
            same_size: true,
            head,
            tail: [0; TAIL],
        }
    }

    /// Another refusal on the same thread. Returns false when it is on another device: this
    /// episode ended unrecovered, and the caller starts a new one with this refusal.
    pub fn refused(&mut self, device: u32, bytes: u64) -> bool {
        if device != self.device {
            return false;
        }
        let n = self.refusals as usize;
        if n < HEAD {
            self.head[n] = bytes;
        } else {
            self.tail[(n - HEAD) % TAIL] = bytes;
        }
        self.refusals += 1;
        self.same_size &= bytes == self.head[0];
        true
    }

    /// A successful allocation of `bytes` on the same thread: the recovery that ends this
    /// episode, or `None` when it is on another device (the episode stays open).
    pub fn succeeded(&self, device: u32, bytes: u64) -> Option<Recovery> {
        if device != self.device {
            return None;
        }
        Some(if self.same_size && bytes == self.head[0] {
            Recovery::Retried {
                bytes,
                refusals: self.refusals,
            }
        } else {
            Recovery::BackedOff {
                refused: self.sizes().collect(),
                got: bytes,
            }
        })
    }

    /// Every refusal of the episode, also those whose sizes were not kept.
    pub fn refusals(&self) -> u64 {
        self.refusals
    }

    /// The refused sizes kept, in order: the first `HEAD`, then the last `TAIL`.
    pub fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        let n = self.refusals as usize;
        let beyond = n.saturating_sub(HEAD);
        let from = beyond.saturating_sub(TAIL);
        self.head[..n.min(HEAD)]
            .iter()
            .copied()
            .chain((from..beyond).map(|i| self.tail[i % TAIL]))
    }

    /// Refusals whose sizes were left out, between the head and the tail.
    pub fn elided(&self) -> u64 {
        self.refusals.saturating_sub((HEAD + TAIL) as u64)
    }

    pub fn truncated(&self) -> bool {
        self.elided() > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    type Ep = Episode<6, 2>;

    #[test]
    fn larger_requests_stay_in_the_episode() {
        // The case the log and the report used to disagree on.
        let mut e = Ep::start(0, 4 * GIB);
        assert!(e.refused(0, 8 * GIB));
        assert_eq!(
            e.succeeded(0, GIB),
            Some(Recovery::BackedOff {
                refused: vec![4 * GIB, 8 * GIB],
                got: GIB
            })
        );
    }

    #[test]
    fn devices_end_and_keep_episodes() {
        let mut e = Ep::start(0, GIB);
        assert_eq!(
            e.succeeded(1, GIB),
            None,
            "a success elsewhere leaves it open"
        );
        assert!(!e.refused(1, GIB), "a refusal elsewhere ends it");
        assert_eq!(e.refusals(), 1);
    }

    #[test]
    fn retries_are_the_same_size_every_time() {
        let mut e = Ep::start(0, GIB);
        e.refused(0, GIB);
        assert_eq!(
            e.succeeded(0, GIB),
            Some(Recovery::Retried {
                bytes: GIB,
                refusals: 2
            })
        );
        e.refused(0, 2 * GIB);
        e.refused(0, GIB);
        assert!(matches!(
            e.succeeded(0, GIB),
            Some(Recovery::BackedOff { .. })
        ));
        assert!(matches!(
            Ep::start(0, GIB).succeeded(0, GIB / 2),
            Some(Recovery::BackedOff { .. })
        ));
    }

    #[test]
    fn long_episodes_keep_head_and_tail() {
        let mut e = Ep::start(0, 100);
        for i in 1..20 {
            assert!(e.refused(0, 100 - i));
        }
        assert_eq!(e.refusals(), 20);
        assert_eq!(
            e.sizes().collect::<Vec<_>>(),
            [100, 99, 98, 97, 96, 95, 82, 81]
        );
        assert_eq!((e.elided(), e.truncated()), (12, true));

        let mut short = Episode::<3, 1>::start(0, 9);
        assert_eq!(short.sizes().collect::<Vec<_>>(), [9]);
        for b in [8, 7, 6, 5] {
            short.refused(0, b);
        }
        assert_eq!(short.sizes().collect::<Vec<_>>(), [9, 8, 7, 5]);
        assert_eq!(short.elided(), 1);
    }
}
