//! The one rule that groups refusals into back-off episodes. The interposer applies it as the
//! refusals happen (its log's outcome line and the trace's `backoff` line), and `cuquota
//! report` applies it again to the trace's `refused` and `alloc` lines, so all three show the
//! same episodes with the same sizes and the same outcome.
//!
//! The rule, per thread and device:
//! - a refusal opens an episode when the thread has none open;
//! - a refusal on the same device, no larger than the last refused size and within [`GAP_NS`]
//!   of the previous refusal, joins it;
//! - a success on the same device within the gap, no larger than the last refused size, ends
//!   it: *retried* when every refusal and the success were of one size (an allocator that
//!   freed its cache and asked again), *backed off* otherwise (one that shrank its request).
//!   Frees in between do not matter: PyTorch and CuPy free their caches, then retry;
//! - anything else ends it as *gave up*: any request after the gap (a refusal then opens the
//!   next episode), a request on that device larger than the last refused one, a refusal on
//!   another device, or the end of the process. Successes on other devices within the gap
//!   leave it open.
//!
//! The gap, 200 ms: the allocators that retry do so at once. TensorFlow's BFC allocator, on a
//! refused growth, asks again for 90% of the size in a tight loop (microseconds apart);
//! PyTorch's caching allocator, refused, synchronises the device, frees its cached segments and
//! asks again (milliseconds, a few tens for a large cache); CuPy's pool frees its free blocks,
//! then runs Python's `gc.collect()` and asks again (tens of milliseconds in a large program).
//! A program that gives up and, half a second later, asks for that size for another reason
//! has not retried.
//!
//! An episode keeps the count of its refusals, its first `HEAD` sizes and its last `TAIL`;
//! it is `Copy` and fixed-size, so that the interposer can keep it without a destructor.

/// Longest time between a refusal and the next request of the same episode.
pub const GAP_NS: u64 = 200_000_000;

/// A run of refusals on one thread and device, waiting to see what the caller does next.
#[derive(Clone, Copy, Debug)]
pub struct Episode<const HEAD: usize, const TAIL: usize> {
    pub device: u32,
    refusals: u64,
    /// Every refusal so far asked for `head[0]` bytes.
    same_size: bool,
    /// The last refused size, and when (ns, on any clock the caller keeps to).
    last_bytes: u64,
    last_t_ns: u64,
    head: [u64; HEAD],
    /// The latest sizes beyond `head`, a ring: the n-th of them is at `n % TAIL`.
    tail: [u64; TAIL],
}

/// How an episode ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpisodeEnd {
    /// Other (smaller) sizes were refused, then `got` fit, `after_ns` after the last refusal.
    BackedOff { got: u64, after_ns: u64 },
    /// One size every time, and then it fit.
    Retried { got: u64, after_ns: u64 },
    /// The caller did not get memory within the episode.
    GaveUp(GaveUp),
}

/// What showed that the caller gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaveUp {
    /// No request on that device within the gap.
    Gap,
    /// Its next request on that device was for more (this many bytes).
    Larger(u64),
    /// Its next refusal was on another device.
    OtherDevice(u32),
    /// The process ended (or the trace did) with the episode open.
    Exit,
}

impl EpisodeEnd {
    pub fn recovered(&self) -> bool {
        !matches!(self, EpisodeEnd::GaveUp(_))
    }
}

impl<const HEAD: usize, const TAIL: usize> Episode<HEAD, TAIL> {
    const KEEPS_BOTH_ENDS: () = assert!(HEAD > 0 && TAIL > 0);

    /// A thread's refusal of `bytes` on `device` at `t_ns` with no episode open.
    pub fn start(device: u32, bytes: u64, t_ns: u64) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::KEEPS_BOTH_ENDS;
        let mut head = [0; HEAD];
        head[0] = bytes;
        Episode {
            device,
            refusals: 1,
            same_size: true,
            last_bytes: bytes,
            last_t_ns: t_ns,
            head,
            tail: [0; TAIL],
        }
    }

    /// Another refusal on the same thread: `None` when it joined the episode, or how the
    /// episode ended (gave up), and the caller starts a new one with this refusal.
    pub fn refused(&mut self, device: u32, bytes: u64, t_ns: u64) -> Option<EpisodeEnd> {
        if let Some(why) = self.gave_up(device, bytes, t_ns) {
            return Some(EpisodeEnd::GaveUp(why));
        }
        let n = self.refusals as usize;
        if n < HEAD {
            self.head[n] = bytes;
        } else {
            self.tail[(n - HEAD) % TAIL] = bytes;
        }
        self.refusals += 1;
        self.same_size &= bytes == self.head[0];
        self.last_bytes = bytes;
        self.last_t_ns = t_ns;
        None
    }

    /// A successful allocation of `bytes` on the same thread: how the episode ended, or
    /// `None` when it is on another device within the gap (the episode stays open).
    pub fn succeeded(&self, device: u32, bytes: u64, t_ns: u64) -> Option<EpisodeEnd> {
        if device != self.device && !self.expired(t_ns) {
            return None;
        }
        if let Some(why) = self.gave_up(device, bytes, t_ns) {
            return Some(EpisodeEnd::GaveUp(why));
        }
        let after_ns = t_ns.saturating_sub(self.last_t_ns);
        Some(if self.same_size && bytes == self.head[0] {
            EpisodeEnd::Retried {
                got: bytes,
                after_ns,
            }
        } else {
            EpisodeEnd::BackedOff {
                got: bytes,
                after_ns,
            }
        })
    }

    /// Whether a request of `bytes` on `device` at `t_ns` shows the caller gave up.
    fn gave_up(&self, device: u32, bytes: u64, t_ns: u64) -> Option<GaveUp> {
        // The gap first: once it has passed the episode is over, whatever comes next.
        if t_ns.saturating_sub(self.last_t_ns) > GAP_NS {
            Some(GaveUp::Gap)
        } else if device != self.device {
            Some(GaveUp::OtherDevice(device))
        } else if bytes > self.last_bytes {
            Some(GaveUp::Larger(bytes))
        } else {
            None
        }
    }

    /// The end of the process (or of the trace) with this episode open: gave up, after the
    /// gap when it had passed.
    pub fn at_exit(&self, t_ns: u64) -> EpisodeEnd {
        if t_ns.saturating_sub(self.last_t_ns) > GAP_NS {
            EpisodeEnd::GaveUp(GaveUp::Gap)
        } else {
            EpisodeEnd::GaveUp(GaveUp::Exit)
        }
    }

    /// Whether the gap has passed at `t_ns` (the episode is over, whatever comes next).
    /// The last refusal was said (logged and traced) at `t_ns`: its gap counts from then, so
    /// that no reader of the log or the trace sees an episode end sooner than the gap after
    /// the refusal's line, however long the line took to write.
    pub fn refusal_said(&mut self, t_ns: u64) {
        self.last_t_ns = self.last_t_ns.max(t_ns);
    }

    pub fn expired(&self, t_ns: u64) -> bool {
        t_ns.saturating_sub(self.last_t_ns) > GAP_NS
    }

    /// The last moment of the gap: the episode has expired at any later time.
    pub fn gap_ends_at(&self) -> u64 {
        self.last_t_ns.saturating_add(GAP_NS)
    }

    /// Every refusal of the episode, also those whose sizes were not kept.
    pub fn refusals(&self) -> u64 {
        self.refusals
    }

    /// The last refused size.
    pub fn last_bytes(&self) -> u64 {
        self.last_bytes
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
    const MS: u64 = 1_000_000;
    type Ep = Episode<6, 2>;

    #[test]
    fn the_gap_counts_from_when_the_refusal_was_said() {
        let mut e = Ep::start(0, GIB, 10 * MS);
        e.refusal_said(12 * MS);
        e.refusal_said(11 * MS); // never earlier
        assert!(!e.expired(12 * MS + GAP_NS));
        assert!(e.expired(12 * MS + GAP_NS + 1));
        assert_eq!(e.gap_ends_at(), 12 * MS + GAP_NS);
    }

    #[test]
    fn shrinking_refusals_then_a_fit_back_off() {
        let mut e = Ep::start(0, 4 * GIB, 0);
        assert_eq!(e.refused(0, 2 * GIB, MS), None);
        assert_eq!(
            e.succeeded(0, GIB, 3 * MS),
            Some(EpisodeEnd::BackedOff {
                got: GIB,
                after_ns: 2 * MS
            })
        );
        assert_eq!(e.sizes().collect::<Vec<_>>(), [4 * GIB, 2 * GIB]);
    }

    #[test]
    fn a_larger_request_ends_it_given_up() {
        let mut e = Ep::start(0, 4 * GIB, 0);
        assert_eq!(
            e.refused(0, 8 * GIB, MS),
            Some(EpisodeEnd::GaveUp(GaveUp::Larger(8 * GIB)))
        );
        assert_eq!(e.refusals(), 1, "the larger refusal is not part of it");
        assert_eq!(
            e.succeeded(0, 5 * GIB, MS),
            Some(EpisodeEnd::GaveUp(GaveUp::Larger(5 * GIB)))
        );
    }

    #[test]
    fn the_gap_ends_it_given_up() {
        let mut e = Ep::start(0, GIB, 0);
        assert_eq!(
            e.refused(0, GIB, GAP_NS),
            None,
            "exactly the gap still joins"
        );
        assert_eq!(
            e.succeeded(0, GIB, 2 * GAP_NS + 1),
            Some(EpisodeEnd::GaveUp(GaveUp::Gap))
        );
        assert_eq!(
            e.refused(0, GIB, 2 * GAP_NS + 1),
            Some(EpisodeEnd::GaveUp(GaveUp::Gap))
        );
        assert!(e.expired(3 * GAP_NS));
        assert_eq!(e.gap_ends_at(), 2 * GAP_NS);
        assert!(!e.expired(e.gap_ends_at()) && e.expired(e.gap_ends_at() + 1));
        assert_eq!(e.at_exit(GAP_NS + 1), EpisodeEnd::GaveUp(GaveUp::Exit));
        assert_eq!(e.at_exit(3 * GAP_NS), EpisodeEnd::GaveUp(GaveUp::Gap));
    }

    #[test]
    fn devices_end_and_keep_episodes() {
        let mut e = Ep::start(0, GIB, 0);
        assert_eq!(
            e.succeeded(1, GIB, 0),
            None,
            "a success elsewhere leaves it open"
        );
        assert_eq!(
            e.refused(1, GIB, 0),
            Some(EpisodeEnd::GaveUp(GaveUp::OtherDevice(1)))
        );
        assert_eq!(e.refusals(), 1);
        assert_eq!(
            e.succeeded(1, GIB, GAP_NS + 1),
            Some(EpisodeEnd::GaveUp(GaveUp::Gap)),
            "after the gap, anything ends it"
        );
        assert_eq!(
            e.refused(1, GIB, GAP_NS + 1),
            Some(EpisodeEnd::GaveUp(GaveUp::Gap))
        );
    }

    #[test]
    fn retries_are_the_same_size_every_time() {
        let mut e = Ep::start(0, GIB, 0);
        e.refused(0, GIB, MS);
        assert_eq!(
            e.succeeded(0, GIB, 2 * MS),
            Some(EpisodeEnd::Retried {
                got: GIB,
                after_ns: MS
            })
        );
        e.refused(0, GIB / 2, 2 * MS);
        assert!(matches!(
            e.succeeded(0, GIB / 2, 2 * MS),
            Some(EpisodeEnd::BackedOff { .. })
        ));
        assert!(matches!(
            Ep::start(0, GIB, 0).succeeded(0, GIB / 2, 0),
            Some(EpisodeEnd::BackedOff { .. })
        ));
    }

    #[test]
    fn long_episodes_keep_head_and_tail() {
        let mut e = Ep::start(0, 100, 0);
        for i in 1..20 {
            assert_eq!(e.refused(0, 100 - i, i), None);
        }
        assert_eq!(e.refusals(), 20);
        assert_eq!(
            e.sizes().collect::<Vec<_>>(),
            [100, 99, 98, 97, 96, 95, 82, 81]
        );
        assert_eq!((e.elided(), e.truncated()), (12, true));

        let mut short = Episode::<3, 1>::start(0, 9, 0);
        assert_eq!(short.sizes().collect::<Vec<_>>(), [9]);
        for b in [8, 7, 6, 5] {
            short.refused(0, b, 0);
        }
        assert_eq!(short.sizes().collect::<Vec<_>>(), [9, 8, 7, 5]);
        assert_eq!(short.elided(), 1);
    }
}
