//! The contexts charges belong to: each driver context seen gets a small slot number, kept
//! in every charge it owns, so that destroying or resetting the context can credit exactly
//! its charges. The table also caches each context's device, so that placing an allocation
//! on the current context costs one `cuCtxGetCurrent` and a short scan, not a second
//! driver call. No FFI here.

use crate::spin::{SpinGuard, SpinLock};
use cuquota_format::settings::MAX_DEVICES;
use std::collections::HashMap;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Slots a process can have at once (slot 0 means "no context known", 255 [`POOLED`]). A
/// process with more live contexts than this charges the extra ones' allocations to no
/// context: they are then credited only by their frees (a limit the README lists).
pub const SLOTS: usize = 254;

/// A context's slot: 1..=SLOTS, or [`NO_CONTEXT`], or [`POOLED`].
pub type ContextSlot = u8;
pub const NO_CONTEXT: ContextSlot = 0;
/// The owner of a pool allocation (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`): no
/// context. cuda.h on `cuCtxDestroy`: those allocations "are not associated with any CUDA
/// context and need to be destroyed explicitly". Besides its free, only what is
/// device-wide ends one: its device's primary context reset or last release. No context's
/// end takes a charge of this slot; a primary end takes those of its device.
pub const POOLED: ContextSlot = 255;

const FREE: usize = usize::MAX;

/// The contexts part's state: the slot table, each device's primary context, `cuCtxAttach`'s
/// references, and the contexts being ended now.
pub struct Contexts {
    /// Context handle of each slot (index `slot - 1`); [`FREE`] is a free slot (not 0, so
    /// that looking up "no context" finds nothing without a check of its own).
    handles: [AtomicUsize; SLOTS],
    devices: [AtomicU32; SLOTS],
    /// Slots in use are all below this (the scan's end).
    high: AtomicUsize,
    /// Serialises adding and removing (rare); lookups take no lock.
    writers: SpinLock<()>,
    /// Each device's primary context, as `cuDevicePrimaryCtxRetain` returned it (0: none
    /// seen), for crediting its charges at a reset or its last release.
    primary: [AtomicUsize; MAX_DEVICES],
    /// `cuCtxAttach`'s extra references per context (deprecated API, rarely used).
    attached: SpinLock<HashMap<usize, u32>>,
    /// Each green context's `CUcontext` (`cuCtxFromGreenCtx`, or its streams' context), by
    /// the green context's handle.
    greens: SpinLock<HashMap<usize, usize>>,
    /// Contexts whose end is in the driver now, and the charges of theirs found stale
    /// meanwhile (see [`Ending`]).
    ending: SpinLock<Ending>,
}

impl Default for Contexts {
    fn default() -> Self {
        Self::new()
    }
}

impl Contexts {
    pub fn new() -> Self {
        Contexts {
            handles: [const { AtomicUsize::new(FREE) }; SLOTS],
            devices: [const { AtomicU32::new(0) }; SLOTS],
            high: AtomicUsize::new(0),
            writers: SpinLock::new(()),
            primary: [const { AtomicUsize::new(0) }; MAX_DEVICES],
            attached: SpinLock::new(HashMap::new()),
            greens: SpinLock::new(HashMap::new()),
            ending: SpinLock::new(Ending::default()),
        }
    }

    /// `context` is `device`'s primary context now.
    pub fn set_primary(&self, device: u32, context: usize) {
        if let Some(p) = self.primary.get(device as usize) {
            p.store(context, Relaxed);
        }
    }

    /// `device`'s primary context (0: none seen; `None`: beyond the devices kept).
    pub fn primary(&self, device: u32) -> Option<usize> {
        self.primary.get(device as usize).map(|p| p.load(Relaxed))
    }

    /// Green context `green`'s `CUcontext` is `context`.
    pub fn set_green_context(&self, green: usize, context: usize) {
        self.greens.lock().insert(green, context);
    }

    /// Green context `green` is gone: its `CUcontext`, if one was seen.
    pub fn take_green_context(&self, green: usize) -> Option<usize> {
        self.greens.lock().remove(&green)
    }

    /// `cuCtxAttach` added a reference to `context`.
    pub fn attach(&self, context: usize) {
        *self.attached.lock().entry(context).or_insert(0) += 1;
    }

    /// `cuCtxDetach` took a reference of `context`: false when none was left of attaches
    /// (the detach destroyed the context).
    pub fn detach(&self, context: usize) -> bool {
        let mut attached = self.attached.lock();
        let Some(n) = attached.get_mut(&context) else {
            return false;
        };
        *n -= 1;
        if *n == 0 {
            attached.remove(&context);
        }
        true
    }

    /// The contexts being ended now.
    pub fn ending(&self) -> SpinGuard<'_, Ending> {
        self.ending.lock()
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
        for p in &self.primary {
            p.store(0, Relaxed);
        }
        // SAFETY (both): as above.
        unsafe {
            self.attached.reset_in_child(HashMap::new());
            self.greens.reset_in_child(HashMap::new());
            self.ending.reset_in_child(Ending::default());
        }
    }
}

/// Contexts being ended in the driver now (each with the call that ends it), and the stale
/// entries of theirs found meanwhile: (slot, key, bytes), already given back.
#[derive(Default)]
pub struct Ending {
    slots: Vec<(ContextSlot, &'static str)>,
    stolen: Vec<(ContextSlot, u64, u64)>,
}

impl Ending {
    /// `api` may end the context of `slot`, in the driver from now on.
    pub fn begin(&mut self, slot: ContextSlot, api: &'static str) {
        self.slots.push((slot, api));
    }

    /// One call that might have ended `slot` is over; with none left, what was stolen from
    /// it is forgotten.
    pub fn done(&mut self, slot: ContextSlot) {
        if let Some(i) = self.slots.iter().position(|(s, _)| *s == slot) {
            self.slots.swap_remove(i);
        }
        if !self.slots.iter().any(|(s, _)| *s == slot) {
            self.take_stolen(slot);
        }
    }

    /// A stale entry of `slot` (`key`, `bytes`) was given back: if its context is ending,
    /// it is remembered for the context's own line, and the call ending it is returned.
    pub fn stolen(&mut self, slot: ContextSlot, key: u64, bytes: u64) -> Option<&'static str> {
        let api = self
            .slots
            .iter()
            .find(|(s, _)| *s == slot)
            .map(|(_, a)| *a)?;
        self.stolen.push((slot, key, bytes));
        Some(api)
    }

    /// Nothing ending, nothing remembered.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.stolen.is_empty()
    }

    #[cfg(test)]
    pub fn stolen_entries(&self) -> &[(ContextSlot, u64, u64)] {
        &self.stolen
    }

    /// What was stolen from `slot`'s charges while it ended: (key, bytes).
    pub fn take_stolen(&mut self, slot: ContextSlot) -> Vec<(u64, u64)> {
        let mut taken = Vec::new();
        self.stolen.retain(|&(s, key, bytes)| {
            if s == slot {
                taken.push((key, bytes));
            }
            s != slot
        });
        taken
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

    #[test]
    fn primary_attach_and_ending() {
        let c = Contexts::new();
        c.set_primary(1, 0x10);
        assert_eq!((c.primary(1), c.primary(0)), (Some(0x10), Some(0)));
        assert_eq!(c.primary(999), None);
        c.attach(0x20);
        c.attach(0x20);
        assert!(c.detach(0x20) && c.detach(0x20));
        assert!(!c.detach(0x20), "the last detach destroys");
        let mut e = c.ending();
        assert_eq!(e.stolen(3, 0x100, 5), None, "not ending: nothing kept");
        e.begin(3, "cuCtxDestroy_v2");
        e.begin(3, "cuCtxDetach");
        assert_eq!(e.stolen(3, 0x100, 5), Some("cuCtxDestroy_v2"));
        e.done(3);
        assert_eq!(e.stolen(3, 0x200, 7), Some("cuCtxDetach"));
        e.done(3);
        assert_eq!(e.take_stolen(3), vec![], "forgotten with the last call");
        drop(e);
        // SAFETY: this test is the table's only user.
        unsafe { c.reset_in_child() };
        assert_eq!(c.primary(1), Some(0));
    }
}
