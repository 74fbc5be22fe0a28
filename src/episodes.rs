//! Back-off episodes as the calling threads live them: each thread's open run of refusals,
//! and what ends it. The rule that groups refusals and names the outcome (`Episode`) is
//! shared with the `report` command; this module only keeps the open ones, one per thread, in
//! one table (so that the exit handler, the watcher thread and any thread can end those whose
//! gap has passed). A refusal that opens an episode wakes the watcher, which ends it when its
//! gap has passed if nothing else did first.

use crate::messages::{self, Episode, EpisodeEnd};
use crate::spin::SpinLock;
use crate::sys;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// A thread's open episode: (thread id, the API of its first refusal, the episode). `Copy`
/// and fixed-size entries; the table is small (one entry per thread that is being refused).
type Open = (u32, &'static str, Episode);

static OPEN: SpinLock<Vec<Open>> = SpinLock::new(Vec::new());

/// How many episodes are open: while none is, a successful allocation skips the table (one
/// relaxed load on the alloc path).
static OPEN_EPISODES: AtomicUsize = AtomicUsize::new(0);

/// How an episode ended: for its log line and the trace's `backoff` event.
pub struct Ended {
    pub device: u32,
    /// The API of its first refusal, or of the allocation that ended it.
    pub api: &'static str,
    /// The allocation that ended it (recovered), else 0.
    pub ptr: u64,
    pub outcome: EpisodeEnd,
    /// The refused sizes kept (the first ones and the last).
    pub refused: Vec<u64>,
    pub refusals: u64,
    /// More refusals than sizes kept.
    pub truncated: bool,
}

impl Ended {
    fn new(api: &'static str, ptr: u64, e: &Episode, outcome: EpisodeEnd) -> Ended {
        Ended {
            device: e.device,
            api,
            ptr,
            outcome,
            refused: e.sizes().collect(),
            refusals: e.refusals(),
            truncated: e.truncated(),
        }
    }

    /// The log line that says how it ended.
    pub fn line(&self) -> String {
        messages::outcome(
            self.device,
            &self.refused,
            self.truncated,
            self.refusals,
            &self.outcome,
        )
    }

    /// The trace's sizes: those refused in order, then the one that fit (if one did).
    pub fn sizes(&self) -> Box<[u64]> {
        let got = match self.outcome {
            EpisodeEnd::BackedOff { got, .. } | EpisodeEnd::Retried { got, .. } => Some(got),
            EpisodeEnd::GaveUp(_) => None,
        };
        self.refused.iter().copied().chain(got).collect()
    }
}

/// What a refusal did: the episodes it ended (gave up), and whether it opened one (its log
/// line is the episode's first).
pub struct EpisodeRefusal {
    pub ended: Vec<Ended>,
    pub opened: bool,
}

/// A refusal of `bytes` on `device` on this thread, by `api`.
pub fn refused(device: u32, bytes: u64, api: &'static str) -> EpisodeRefusal {
    let (tid, now) = (sys::thread_id(), sys::monotonic_ns());
    let mut open = OPEN.lock();
    let mut ended = expire(&mut open, now);
    let opened = match open.iter_mut().find(|(t, ..)| *t == tid) {
        Some((_, first_api, e)) => match e.refused(device, bytes, now) {
            None => false,
            Some(outcome) => {
                ended.push(Ended::new(first_api, 0, e, outcome));
                (*first_api, *e) = (api, Episode::start(device, bytes, now));
                true
            }
        },
        None => {
            open.push((tid, api, Episode::start(device, bytes, now)));
            true
        }
    };
    OPEN_EPISODES.store(open.len(), Relaxed);
    drop(open);
    if opened {
        crate::watcher::wake();
    }
    EpisodeRefusal { ended, opened }
}

/// This thread's refusal was said and traced: its episode's gap counts from now.
#[cold]
pub fn refusal_said() {
    let (tid, now) = (sys::thread_id(), sys::monotonic_ns());
    if let Some((.., e)) = OPEN.lock().iter_mut().find(|(t, ..)| *t == tid) {
        e.refusal_said(now);
    }
}

/// A success of `bytes` on `device` on this thread (at `ptr`, by `api`): the episodes it ends
/// (this thread's, if on the same device; any whose gap has passed). One relaxed load while
/// no episode is open.
#[inline]
pub fn allocated(device: u32, bytes: u64, ptr: u64, api: &'static str) -> Option<Vec<Ended>> {
    if OPEN_EPISODES.load(Relaxed) == 0 {
        return None;
    }
    end(device, bytes, ptr, api)
}

#[cold]
fn end(device: u32, bytes: u64, ptr: u64, api: &'static str) -> Option<Vec<Ended>> {
    let (tid, now) = (sys::thread_id(), sys::monotonic_ns());
    let mut open = OPEN.lock();
    let mut ended = expire(&mut open, now);
    if let Some(i) = open.iter().position(|(t, ..)| *t == tid) {
        let (_, first_api, e) = open[i];
        if let Some(outcome) = e.succeeded(device, bytes, now) {
            open.swap_remove(i);
            let (api, ptr) = match outcome {
                EpisodeEnd::GaveUp(_) => (first_api, 0),
                _ => (api, ptr),
            };
            ended.push(Ended::new(api, ptr, &e, outcome));
        }
    }
    OPEN_EPISODES.store(open.len(), Relaxed);
    (!ended.is_empty()).then_some(ended)
}

/// Ends the episodes whose gap has passed, this thread's too (the rule ends them whatever
/// comes next), so that no episode keeps the alloc path on its slow branch for longer than
/// the gap after its last refusal, however the threads go on.
fn expire(open: &mut Vec<Open>, now: u64) -> Vec<Ended> {
    let mut ended = Vec::new();
    open.retain(|(_, api, e)| {
        let keep = !e.expired(now);
        if !keep {
            ended.push(Ended::new(api, 0, e, e.at_exit(now)));
        }
        keep
    });
    ended
}

/// From the watcher: the episodes whose gap has passed end (gave up).
pub fn expired() -> Vec<Ended> {
    if OPEN_EPISODES.load(Relaxed) == 0 {
        return Vec::new();
    }
    let mut open = OPEN.lock();
    let ended = expire(&mut open, sys::monotonic_ns());
    OPEN_EPISODES.store(open.len(), Relaxed);
    ended
}

/// The last moment of the earliest open episode's gap (CLOCK_MONOTONIC ns), or None when
/// none is open.
pub fn next_expiry() -> Option<u64> {
    if OPEN_EPISODES.load(Relaxed) == 0 {
        return None;
    }
    OPEN.lock().iter().map(|(_, _, e)| e.gap_ends_at()).min()
}

/// At exit: every open episode ends (gave up), in the order they opened.
pub fn at_exit() -> Vec<Ended> {
    let now = sys::monotonic_ns();
    let mut open = OPEN.lock();
    OPEN_EPISODES.store(0, Relaxed);
    open.drain(..)
        .map(|(_, api, e)| Ended::new(api, 0, &e, e.at_exit(now)))
        .collect()
}

/// In a forked child: the parent's threads and their episodes are not the child's.
///
/// # Safety
/// Only in the child right after `fork()`, while it has one thread.
pub unsafe fn reset_in_child() {
    OPEN_EPISODES.store(0, Relaxed);
    // SAFETY: the caller's promise.
    unsafe { OPEN.reset_in_child(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    const API: &str = "episodes-test";

    /// The table is shared by the whole test binary (the engine's tests refuse too): only
    /// what this test's API opened counts.
    fn mine(ended: Vec<Ended>) -> Vec<Ended> {
        ended.into_iter().filter(|e| e.api == API).collect()
    }

    #[test]
    fn episodes_open_end_and_give_up() {
        let r = refused(0, 4 * GIB, API);
        assert!(r.opened && mine(r.ended).is_empty());
        let r = refused(0, 2 * GIB, API);
        assert!(!r.opened, "a smaller refusal joins");
        let elsewhere = allocated(1, GIB, 7, API).map(mine).unwrap_or_default();
        assert!(elsewhere.is_empty(), "another device ends nothing");
        let ended = mine(allocated(0, GIB, 7, API).expect("a smaller success ends it"));
        assert_eq!(ended.len(), 1);
        assert!(
            ended[0]
                .line()
                .contains("backed off 4.00 GiB → 2.00 GiB (2 refusals) and got 1.00 GiB"),
            "{}",
            ended[0].line()
        );
        assert_eq!(&*ended[0].sizes(), [4 * GIB, 2 * GIB, GIB]);
        let again = allocated(0, GIB, 8, API).map(mine).unwrap_or_default();
        assert!(again.is_empty(), "and it is closed");

        refused(3, GIB, API);
        let r = refused(3, 2 * GIB, API);
        assert!(r.opened, "a larger refusal opens the next episode");
        let ended = mine(r.ended);
        assert!(matches!(ended[0].outcome, EpisodeEnd::GaveUp(_)));
        assert_eq!(&*ended[0].sizes(), [GIB]);
        // The watcher's view: when the earliest open gap ends; nothing of ours ended yet.
        let next = next_expiry().expect("an episode is open");
        assert!(next <= sys::monotonic_ns() + cuquota_format::episodes::GAP_NS);
        assert!(mine(expired()).is_empty(), "within its gap");
        let left = mine(at_exit());
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].refused, [2 * GIB]);
    }
}
