//! The contexts charges belong to: each driver context seen gets a small slot number, kept
//! in every charge it owns, so that destroying or resetting the context can credit exactly
//! its charges. The table also caches each context's device, so that placing an allocation
//! on the current context costs one `cuCtxGetCurrent` and a short scan, not a second
//! driver call. No FFI here.

use crate::spin::SpinLock;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Slots a process can have at once (slot 0 means "no context known"). A process with more
/// live contexts than this charges the extra ones' allocations to no context: they are
/// then credited only by their frees (a limit the README lists).
pub const SLOTS: usize = 255;

/// A context's slot: 1..=SLOTS, or [`NO_CONTEXT`].
pub type ContextSlot = u8;
pub const NO_CONTEXT: ContextSlot = 0;

const FREE: usize = usize::MAX;

pub struct Contexts {
    /// Context handle of each slot (index `slot - 1`); [`FREE`] is a free slot (not 0, so
    /// that looking up "no context" finds nothing without a check of its own).
    handles: [AtomicUsize; SLOTS],
    devices: [AtomicU32; SLOTS],
    /// Slots in use are all below this (the scan's end).
    high: AtomicUsize,
    /// Serialises adding and removing (rare); lookups take no lock.
    writers: SpinLock<()>,
}

impl Default for Contexts {
    fn default() -> Self {
        Self::new()
    }
}

impl Contexts {
    pub const fn new() -> Self {
        Contexts {
            handles: [const { AtomicUsize::new(FREE) }; SLOTS],
            devices: [const { AtomicU32::new(0) }; SLOTS],
            high: AtomicUsize::new(0),
            writers: SpinLock::new(()),
        }
    }

    /// The slot and device of a known context (none for 0). The first slot is tried first: most
    /// processes have one context per device, and this is on every allocation's path.
    #[inline]
    pub fn find(&self, context: usize) -> Option<(ContextSlot, u32)> {
        if self.handles[0].load(Acquire) == context {
            return Some((1, self.devices[0].load(Relaxed)));
        }
        self.find_beyond_first(context)
    }

    fn find_beyond_first(&self, context: usize) -> Option<(ContextSlot, u32)> {
        let high = self.high.load(Acquire);
        (1..high).find_map(|i| {
            (self.handles[i].load(Acquire) == context)
                .then(|| ((i + 1) as ContextSlot, self.devices[i].load(Relaxed)))
        })
    }

    /// The slot of `context` on `device`, adding it if new; [`NO_CONTEXT`] when full.
    pub fn add(&self, context: usize, device: u32) -> ContextSlot {
        if context == 0 || context == FREE {
            return NO_CONTEXT;
        }
        let _w = self.writers.lock();
        if let Some((slot, _)) = self.find(context) {
            return slot;
        }
        let high = self.high.load(Relaxed);
        let Some(i) = (0..SLOTS).find(|&i| i >= high || self.handles[i].load(Relaxed) == FREE)
        else {
            return NO_CONTEXT;
        };
        self.devices[i].store(device, Relaxed);
        self.handles[i].store(context, Release);
        if i >= high {
            self.high.store(i + 1, Release);
        }
        (i + 1) as ContextSlot
    }

    /// Forgets a context (destroyed): its slot is free for the next one.
    pub fn remove(&self, slot: ContextSlot) {
        if slot == NO_CONTEXT {
            return;
        }
        let _w = self.writers.lock();
        self.handles[slot as usize - 1].store(FREE, Release);
    }

    /// In a forked child: the parent's contexts are not the child's.
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        // SAFETY: the caller's promise: the child of a fork, with one thread.
        unsafe { self.writers.unlock_in_child() };
        for h in &self.handles {
            h.store(FREE, Relaxed);
        }
        self.high.store(0, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_find_remove_and_reuse() {
        let c = Contexts::new();
        assert_eq!(c.find(0x10), None);
        assert_eq!(c.find(0), None, "no context is never found");
        let a = c.add(0x10, 1);
        let b = c.add(0x20, 0);
        assert_ne!(a, b);
        assert_eq!(c.add(0x10, 1), a, "added once");
        assert_eq!(c.find(0x10), Some((a, 1)));
        assert_eq!(c.find(0x20), Some((b, 0)));
        c.remove(a);
        assert_eq!(c.find(0x10), None);
        assert_eq!(c.add(0x30, 2), a, "a freed slot is reused");
        assert_eq!(c.add(0, 0), NO_CONTEXT);
        // SAFETY: this test is the table's only user.
        unsafe { c.reset_in_child() };
        assert_eq!(c.find(0x20), None);
    }

    #[test]
    fn full_table_gives_no_context() {
        let c = Contexts::new();
        for i in 1..=SLOTS {
            assert_ne!(c.add(i << 8, 0), NO_CONTEXT);
        }
        assert_eq!(c.add(0xdead_0000, 0), NO_CONTEXT);
    }
}
