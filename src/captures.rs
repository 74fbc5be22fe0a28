//! How many stream captures may be live in this process, so that a stream-ordered call asks
//! the driver whether its stream captures (`cuStreamIsCapturing`) only while one may be.
//!
//! Why a count is enough: a stream captures only inside a capture sequence, and every
//! sequence starts with a `cuStreamBeginCapture*`, `cuStreamBeginRecaptureToGraph*` or
//! `cuStreamBeginCaptureToCig*` on its origin stream (other streams join it through events
//! recorded in a capturing stream, and leave when it ends), and ends with a
//! `cuStreamEndCapture*` (`cuStreamEndCaptureToCig*` for CIG). Every form of both is hooked
//! (`exports/captures.rs`), through exported symbols, `dlsym` and `cuGetProcAddress` alike.
//! The count errs high, never low: it rises before the driver begins, falls back only if
//! the driver refused, and falls at an end only when the stream captured before the call
//! and no longer does after it (a CIG end: when the driver ended it; a capture ended some
//! other way — a destroyed stream, a terminated recapture never ended — keeps it up, and
//! then every call asks, as without the count). No FFI here.

use std::sync::atomic::{AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether a capture may be live: when not, no stream captures.
#[inline(always)]
pub fn may_be_live() -> bool {
    // Acquire: a thread told of a capture by the thread that began it (any synchronisation
    // after the begin) sees the count that begin raised.
    LIVE.load(Acquire) != 0
}

/// A capture is about to begin (before the driver is called: from inside the call on, the
/// stream captures).
pub fn beginning() {
    LIVE.fetch_add(1, Release);
}

/// A capture begun with [`beginning`] did not begin (the driver refused), or one ended.
pub fn gone() {
    // Never below zero, whatever a program calls.
    let _ = LIVE.fetch_update(Release, Relaxed, |n| n.checked_sub(1));
}

/// The captures that may be live.
#[cfg(test)]
fn live() -> usize {
    LIVE.load(Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_up_and_down_never_below_zero() {
        // Other tests in this process may count too: only relative changes are checked,
        // and nothing else here begins a capture.
        let before = live();
        beginning();
        assert!(may_be_live());
        assert_eq!(live(), before + 1);
        gone();
        assert_eq!(live(), before);
        if before == 0 {
            gone();
            assert_eq!(live(), 0, "never below zero");
            assert!(!may_be_live());
        }
    }
}
