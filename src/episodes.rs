//! Back-off episodes as the calling threads live them: each thread's open run of refusals,
//! and whether its next success ends one. The rule that groups refusals (`Episode`) is
//! shared with the `report` command; this module only keeps one per thread.

use crate::messages::{self, Episode, Recovery, EPISODE_SIZES};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

thread_local! {
    /// This thread's open run of refusals (`Copy`: no thread-local destructor).
    static EPISODE: Cell<Option<Episode>> = const { Cell::new(None) };
}

/// How many threads have an open episode: while none does, a successful allocation skips the
/// thread-local look-up (a `__tls_get_addr` call in a shared library) altogether.
static OPEN_EPISODES: AtomicUsize = AtomicUsize::new(0);

/// A refusal on this thread: opens or extends its episode.
pub fn refused(device: u32, bytes: u64) {
    EPISODE.with(|cell| {
        let next = match cell.get() {
            Some(mut e) => {
                if e.refused(device, bytes) {
                    e
                } else {
                    Episode::start(device, bytes)
                }
            }
            None => {
                OPEN_EPISODES.fetch_add(1, Relaxed);
                Episode::start(device, bytes)
            }
        };
        cell.set(Some(next));
    });
}

/// How an episode ended in a success: for the log line and the trace's `backoff` event.
pub struct Ended {
    pub device: u32,
    pub recovery: Recovery,
    /// More refusals than the episode keeps sizes of.
    pub truncated: bool,
}

impl Ended {
    /// The log line that explains the recovery.
    pub fn line(&self) -> String {
        messages::recovery(self.device, &self.recovery, self.truncated)
    }

    /// The trace's sizes: those refused in order, then the one that fit.
    pub fn sizes(self) -> Box<[u64]> {
        match self.recovery {
            Recovery::BackedOff { refused, got } => refused.into_iter().chain([got]).collect(),
            Recovery::Retried { bytes, refusals } => {
                let shown = refusals.min(EPISODE_SIZES as u64) as usize;
                vec![bytes; shown + 1].into_boxed_slice()
            }
        }
    }
}

/// A success of `bytes` on `device` on this thread: closes its open episode (if on the same
/// device) and says how it ended, if that was a recovery. One relaxed load while no thread
/// has an episode open.
#[inline]
pub fn allocated(device: u32, bytes: u64) -> Option<Ended> {
    if OPEN_EPISODES.load(Relaxed) == 0 {
        return None;
    }
    end(device, bytes)
}

#[cold]
fn end(device: u32, bytes: u64) -> Option<Ended> {
    EPISODE.with(|cell| {
        let e = cell.get().filter(|e| e.device == device)?;
        cell.set(None);
        OPEN_EPISODES.fetch_sub(1, Relaxed);
        let recovery = e.succeeded(device, bytes)?;
        Some(Ended {
            device,
            recovery,
            truncated: e.truncated(),
        })
    })
}

/// In a forked child: no thread but this one has an episode; this one keeps none either.
pub fn reset_in_child() {
    OPEN_EPISODES.store(0, Relaxed);
    EPISODE.with(|e| e.set(None));
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_thread_backs_off_and_recovers() {
        // On a thread of its own: the thread-local and the count start empty for it.
        std::thread::spawn(|| {
            refused(0, 4 * GIB);
            refused(0, 2 * GIB);
            assert!(allocated(1, GIB).is_none(), "another device ends nothing");
            let ended = allocated(0, GIB).expect("a smaller success ends the episode");
            assert!(ended
                .line()
                .contains("backed off 4.00 GiB → 2.00 GiB and got 1.00 GiB"));
            assert_eq!(&*ended.sizes(), [4 * GIB, 2 * GIB, GIB]);
            assert!(allocated(0, GIB).is_none(), "and it is closed");

            refused(3, GIB);
            refused(3, GIB);
            let ended = allocated(3, GIB).unwrap();
            assert_eq!(
                &*ended.sizes(),
                [GIB; 3],
                "a retry: each refusal, then the success"
            );
        })
        .join()
        .unwrap();
    }
}
