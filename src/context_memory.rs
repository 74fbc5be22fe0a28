//! What the driver's contexts themselves take on the GPU (the footprint's `context`
//! part), in plain Rust: how a measurement is made, what each context is charged, and
//! how NVML's figure for this process corrects it. The driver and NVML are reached through
//! [`Meter`], the engine's footprint books through [`ContextCharges`], so all of it is
//! unit-tested without FFI.
//!
//! The rules:
//! - A context creation is measured as the device's free memory just before minus just
//!   after, both from NVML (which needs no context, so it also answers before the first
//!   one): one source for both figures, so a constant difference between NVML's free figure
//!   and the driver's (`cuMemGetInfo`) cancels. A `cuCtxSetLimit` or a module/library load
//!   is measured with the driver's free figure before and after (its context is current).
//! - A measurement during which this process's own charges on the device moved (another
//!   thread's allocation or free in flight or settled) is not trusted: the driver's and
//!   cuquota's figures cannot be lined up exactly then, and a figure that took in another
//!   thread's allocation would refuse what the device would give. Such a context is charged
//!   what the last undisturbed measurement on that device gave (0 if none). Another
//!   process's activity cannot be seen, so one measurement can be off by what others
//!   allocated or freed meanwhile; it is clamped at 0, and NVML's per-process figure
//!   corrects it later (below).
//! - `CUQUOTA_CONTEXT=SIZE` charges SIZE per context instead of measuring it; `0` ignores
//!   context memory altogether (no NVML, no lock, nothing charged).
//! - Each context's charge is kept by its slot and given back when the context goes
//!   (destroy, primary reset, last release).
//! - Correction: where NVML lists this process's used memory on a device (what
//!   `nvidia-smi` shows), the context part becomes `max(0, used − others)`, others being
//!   the allocations, pool cache and graph memory charged; at most once per second per
//!   device, never on the allocation path, only where a context was measured to take
//!   memory, and only while no request of this process is in flight. It never makes the context part negative, so
//!   the quota is never looser than allocations alone would make it.
//! - One process-wide lock is held across each measured driver call (and only there), so
//!   two threads' measurements never mix.

use crate::contexts::{ContextSlot, NO_CONTEXT};
use crate::cuda_abi::CuResult;
use crate::spin::SpinLock;
use cuquota_format::settings::MAX_DEVICES;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Where measurements come from.
pub trait Meter {
    /// A device's free memory from NVML (no context needed); `None` without NVML.
    fn nvml_free(&self, device: u32) -> Option<u64>;
    /// The free memory of the current context's device, from the driver.
    fn driver_free(&self) -> Option<u64>;
    /// This process's used memory on a device, from NVML's process list.
    fn used_by_process(&self, device: u32) -> Option<u64>;
}

/// The engine's footprint books, as context memory uses them.
pub trait ContextCharges {
    /// Charges `bytes` more context memory on `device` if the quota has room (always in
    /// observe mode); refused: nothing charged.
    fn grow(&self, device: u32, bytes: u64) -> Result<(), OverQuota>;
    /// Charges `bytes` even over the quota: the driver already holds them.
    fn force(&self, device: u32, bytes: u64);
    /// Gives back `bytes` of context memory on `device`.
    fn shrink(&self, device: u32, bytes: u64);
    /// What else is held on `device` now: allocations, pool cache, graph memory.
    fn others(&self, device: u32) -> u64;
    /// Bytes reserved on `device` by requests in flight (not held yet).
    fn in_flight(&self, device: u32) -> u64;
    /// How many allocations were ever committed on `device`: a free in flight at the first
    /// moment (the driver has freed, the books not yet) and an allocation made meanwhile
    /// can leave `others` and `in_flight` as they were, but not this.
    fn commits(&self, device: u32) -> u64;
}

/// This process's own charges on a device at one moment, to tell whether they moved while
/// a figure was read.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Own {
    held: u64,
    in_flight: u64,
    commits: u64,
}

impl Own {
    fn of(device: u32, books: &dyn ContextCharges) -> Own {
        Own {
            held: books.others(device),
            in_flight: books.in_flight(device),
            commits: books.commits(device),
        }
    }

    /// Nothing in flight at either moment and nothing settled in between: the driver's
    /// figures moved only by what was measured (and other processes).
    fn still(before: Own, after: Own) -> bool {
        before == after && before.in_flight == 0
    }
}

/// The quota has no room for what [`ContextCharges::grow`] was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverQuota;

/// `CUQUOTA_CONTEXT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    /// Unset: measure each context.
    Measure,
    /// `CUQUOTA_CONTEXT=SIZE`: each context takes SIZE; `Fixed(0)` ignores context memory.
    Fixed(u64),
}

impl Setting {
    pub fn from_config(context: Option<u64>) -> Setting {
        context.map_or(Setting::Measure, Setting::Fixed)
    }

    /// Whether context memory is counted at all.
    pub fn counts(self) -> bool {
        self != Setting::Fixed(0)
    }
}

/// The least time between two corrections of one device.
pub const CORRECTION_INTERVAL_NS: u64 = 1_000_000_000;

/// A driver call measured: its result, what it returned, and how much device memory it
/// took (negative: gave back); `None` when a figure was missing or this process's own
/// charges moved meanwhile.
pub struct Measured<R> {
    pub rc: CuResult,
    pub value: R,
    pub growth: Option<i64>,
}

/// What a context was refused with: the context's bytes (the caller undoes the creation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    pub bytes: u64,
}

#[derive(Default)]
struct Book {
    /// Each live context's charge: its device and bytes (creation, limits, modules).
    contexts: HashMap<ContextSlot, (u32, u64)>,
    /// Each loaded module or library: the context it was charged to, and its growth.
    modules: HashMap<usize, (ContextSlot, u64)>,
    /// Per device: what the correction added (or took) beyond the contexts' own charges.
    residual: Vec<i64>,
    /// Per device: what is charged to the engine's context part for all of it.
    charged: Vec<u64>,
    /// Per device: the last undisturbed measurement of a context creation.
    typical: Vec<Option<u64>>,
}

impl Book {
    fn new() -> Book {
        Book {
            residual: vec![0; MAX_DEVICES],
            charged: vec![0; MAX_DEVICES],
            typical: vec![None; MAX_DEVICES],
            ..Book::default()
        }
    }

    fn sum_on(&self, device: u32) -> u64 {
        self.contexts
            .values()
            .filter(|(d, _)| *d == device)
            .map(|(_, b)| *b)
            .fold(0u64, u64::saturating_add)
    }

    fn any_on(&self, device: u32) -> bool {
        self.contexts.values().any(|(d, _)| *d == device)
    }

    /// Whether a live context on `device` was measured to take memory: only then is there
    /// a context figure to correct (a device whose contexts take nothing, like a simulated
    /// one, leaves NVML's figure to the other parts).
    fn measured_on(&self, device: u32) -> bool {
        self.contexts.values().any(|(d, b)| *d == device && *b > 0)
    }

    /// A new context's charge, already taken from the engine's books.
    fn charge(&mut self, slot: ContextSlot, device: u32, bytes: u64) {
        self.contexts.entry(slot).or_insert((device, 0)).1 += bytes;
        self.charged[device as usize] += bytes;
    }

    /// What the context part of `device` should be: the contexts' charges and the
    /// correction, never below 0.
    fn wanted(&self, device: u32) -> u64 {
        let total = self.sum_on(device) as i128 + self.residual[device as usize] as i128;
        total.clamp(0, u64::MAX as i128) as u64
    }

    /// Brings the engine's context part of `device` to what it should be (the driver holds
    /// it already: a rise is forced).
    fn sync(&mut self, device: u32, books: &dyn ContextCharges) {
        let (wanted, charged) = (self.wanted(device), self.charged[device as usize]);
        if wanted > charged {
            books.force(device, wanted - charged);
        } else if wanted < charged {
            books.shrink(device, charged - wanted);
        }
        self.charged[device as usize] = wanted;
    }
}

pub struct ContextMemory {
    pub setting: Setting,
    /// Held across each measured driver call.
    measuring: SpinLock<()>,
    book: SpinLock<Book>,
    /// Per device: when it was last corrected (ns on the caller's clock; 0: never).
    corrected_at: [AtomicU64; MAX_DEVICES],
}

impl ContextMemory {
    pub fn new(setting: Setting) -> ContextMemory {
        ContextMemory {
            setting,
            measuring: SpinLock::new(()),
            book: SpinLock::new(Book::new()),
            corrected_at: [const { AtomicU64::new(0) }; MAX_DEVICES],
        }
    }

    fn valid(device: u32) -> bool {
        (device as usize) < MAX_DEVICES
    }

    /// Runs `call` under the measurement lock, with free memory read from `free` just
    /// before and just after; the figure counts only if this process's own charges on
    /// `device` (`books`) stood still meanwhile.
    pub fn measure<R>(
        &self,
        device: u32,
        free: impl Fn() -> Option<u64>,
        books: &dyn ContextCharges,
        call: impl FnOnce() -> (CuResult, R),
    ) -> Measured<R> {
        let _lock = self.measuring.lock();
        measure_locked(device, free, books, call)
    }

    /// Creates a context on `device` (`create` returns the result and the new context's
    /// slot, `NO_CONTEXT` if it failed or has none) and charges what it takes: measured
    /// with NVML, or `CUQUOTA_CONTEXT`. `is_new` says, under the lock, whether the call
    /// makes a context at all (a retain of an active primary context does not: nothing is
    /// charged). `Err(Refused)` with a success: the context was made but does not fit, and
    /// the caller undoes it and answers `CUDA_ERROR_OUT_OF_MEMORY`.
    pub fn create(
        &self,
        device: u32,
        meter: &dyn Meter,
        books: &dyn ContextCharges,
        is_new: impl FnOnce() -> bool,
        create: impl FnOnce() -> (CuResult, ContextSlot),
    ) -> (CuResult, ContextSlot, Result<(), Refused>) {
        if !self.setting.counts() || !Self::valid(device) {
            let (rc, slot) = create();
            return (rc, slot, Ok(()));
        }
        let _lock = self.measuring.lock();
        if !is_new() {
            let (rc, slot) = create();
            return (rc, slot, Ok(()));
        }
        if let Setting::Fixed(bytes) = self.setting {
            return self.create_fixed(device, bytes, books, create);
        }
        let free = || meter.nvml_free(device);
        let m = measure_locked(device, free, books, create);
        if !m.rc.is_ok() || m.value == NO_CONTEXT {
            return (m.rc, m.value, Ok(()));
        }
        let measured = m.growth.map(|g| g.max(0) as u64);
        let bytes = {
            let mut book = self.book.lock();
            let typical = &mut book.typical[device as usize];
            match measured {
                Some(bytes) => *typical.insert(bytes),
                None => typical.unwrap_or(0),
            }
        };
        if books.grow(device, bytes).is_err() {
            return (m.rc, m.value, Err(Refused { bytes }));
        }
        self.book.lock().charge(m.value, device, bytes);
        (m.rc, m.value, Ok(()))
    }

    /// `CUQUOTA_CONTEXT=SIZE`: known before the call, so reserved first, and a context that
    /// cannot fit is refused without being made.
    fn create_fixed(
        &self,
        device: u32,
        bytes: u64,
        books: &dyn ContextCharges,
        create: impl FnOnce() -> (CuResult, ContextSlot),
    ) -> (CuResult, ContextSlot, Result<(), Refused>) {
        if books.grow(device, bytes).is_err() {
            return (CuResult::OUT_OF_MEMORY, NO_CONTEXT, Err(Refused { bytes }));
        }
        let (rc, slot) = create();
        if !rc.is_ok() || slot == NO_CONTEXT {
            books.shrink(device, bytes);
        } else {
            self.book.lock().charge(slot, device, bytes);
        }
        (rc, slot, Ok(()))
    }

    /// Something made context `slot` (on `device`) grow or shrink by `growth` bytes: a
    /// `cuCtxSetLimit`, a module load (`module`: its handle, credited at its unload).
    /// Growth is charged if it fits (`Err`: refused, nothing charged: the caller undoes
    /// the call), or even if not with `force` (the call could not be undone); a shrink
    /// gives back at most what the context was charged.
    pub fn grew(
        &self,
        device: u32,
        slot: ContextSlot,
        growth: i64,
        module: Option<usize>,
        force: bool,
        books: &dyn ContextCharges,
    ) -> Result<(), Refused> {
        if !self.setting.counts() || !Self::valid(device) || slot == NO_CONTEXT {
            return Ok(());
        }
        let mut book = self.book.lock();
        let Some(&(_, held)) = book.contexts.get(&slot) else {
            // A context cuquota never saw made (made before it was loaded): not charged.
            return Ok(());
        };
        if growth > 0 {
            let bytes = growth as u64;
            if force {
                books.force(device, bytes);
            } else if books.grow(device, bytes).is_err() {
                return Err(Refused { bytes });
            }
            book.charged[device as usize] += bytes;
            book.contexts.insert(slot, (device, held + bytes));
            if let Some(m) = module {
                book.modules.insert(m, (slot, bytes));
            }
        } else if growth < 0 {
            let bytes = growth.unsigned_abs().min(held);
            book.contexts.insert(slot, (device, held - bytes));
            book.sync(device, books);
        }
        Ok(())
    }

    /// A module or library was unloaded: what its load was charged goes back.
    pub fn unloaded(&self, module: usize, books: &dyn ContextCharges) {
        let mut book = self.book.lock();
        let Some((slot, bytes)) = book.modules.remove(&module) else {
            return;
        };
        let Some(&(device, held)) = book.contexts.get(&slot) else {
            return;
        };
        book.contexts
            .insert(slot, (device, held.saturating_sub(bytes)));
        book.sync(device, books);
    }

    /// Context `slot` is gone (destroyed, reset, last release): its charge goes back; with
    /// the last context of its device, the correction goes too.
    pub fn gone(&self, slot: ContextSlot, books: &dyn ContextCharges) {
        let mut book = self.book.lock();
        let Some((device, _)) = book.contexts.remove(&slot) else {
            return;
        };
        book.modules.retain(|_, (owner, _)| *owner != slot);
        if !book.any_on(device) {
            book.residual[device as usize] = 0;
        }
        book.sync(device, books);
    }

    /// Corrects `device`'s context part from NVML's figure for this process, if the last
    /// correction is at least [`CORRECTION_INTERVAL_NS`] old (`now_ns`: a monotonic clock,
    /// such as `sys::monotonic_ns`). Only while a context measured to take memory lives
    /// there, and only if this process's own charges stood still while NVML was asked (else
    /// at the next chance).
    pub fn correct(&self, device: u32, now_ns: u64, meter: &dyn Meter, books: &dyn ContextCharges) {
        if self.setting != Setting::Measure || !Self::valid(device) {
            return;
        }
        // 0 in `corrected_at` means never corrected: no correction is stamped 0.
        let now_ns = now_ns.max(1);
        let last = &self.corrected_at[device as usize];
        let then = last.load(Relaxed);
        if then != 0 && now_ns.saturating_sub(then) < CORRECTION_INTERVAL_NS {
            return;
        }
        if last
            .compare_exchange(then, now_ns, Relaxed, Relaxed)
            .is_err()
        {
            return; // another thread is correcting it
        }
        if !self.book.lock().measured_on(device) {
            return;
        }
        let own = Own::of(device, books);
        let used = meter.used_by_process(device);
        let still = Own::still(own, Own::of(device, books));
        let (Some(used), true) = (used, still) else {
            // Not now (another thread's request in flight): at the next chance.
            last.store(then, Relaxed);
            return;
        };
        let mut book = self.book.lock();
        if !book.measured_on(device) {
            return;
        }
        let target = used.saturating_sub(own.held);
        let residual = target as i128 - book.sum_on(device) as i128;
        book.residual[device as usize] = residual.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        book.sync(device, books);
    }

    /// The context part this module has charged on `device`.
    pub fn charged(&self, device: u32) -> u64 {
        if !Self::valid(device) {
            return 0;
        }
        self.book.lock().charged[device as usize]
    }

    /// In a forked child: nothing of the parent's is the child's.
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        // SAFETY: the caller's promise.
        unsafe {
            self.measuring.reset_in_child(());
            self.book.reset_in_child(Book::new());
        }
        for c in &self.corrected_at {
            c.store(0, Relaxed);
        }
    }
}

/// [`ContextMemory::measure`], the lock held by the caller.
fn measure_locked<R>(
    device: u32,
    free: impl Fn() -> Option<u64>,
    books: &dyn ContextCharges,
    call: impl FnOnce() -> (CuResult, R),
) -> Measured<R> {
    // This process's charges are read outside the two free figures (first before, last
    // after): whatever of its own moved the driver's figure between them shows as a change.
    let own_before = Own::of(device, books);
    let before = free();
    let (rc, value) = call();
    let after = free();
    let own_after = Own::of(device, books);
    let growth = match (before, after, Own::still(own_before, own_after)) {
        (Some(b), Some(a), true) => {
            Some((b as i128 - a as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64)
        }
        _ => None,
    };
    Measured { rc, value, growth }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU32, AtomicU64 as A};

    const MIB: u64 = 1 << 20;

    /// A device with a quota: NVML and the driver read the same free figure
    /// (`driver_bias` apart), `used` is this process's NVML figure (`NONE`: not listed).
    struct Fake {
        free: A,
        driver_bias: u64,
        used: A,
        nvml: bool,
        quota: u64,
        parts: A,
        allocations: A,
        flight: A,
        commits: A,
        calls: AtomicU32,
    }

    const NONE: u64 = u64::MAX;

    fn fake(quota: u64) -> Fake {
        Fake {
            free: A::new(1024 * MIB),
            driver_bias: 3 * MIB,
            used: A::new(NONE),
            nvml: true,
            quota,
            parts: A::new(0),
            allocations: A::new(0),
            flight: A::new(0),
            commits: A::new(0),
            calls: AtomicU32::new(0),
        }
    }

    impl Meter for Fake {
        fn nvml_free(&self, _: u32) -> Option<u64> {
            self.nvml.then(|| self.free.load(Relaxed))
        }
        fn driver_free(&self) -> Option<u64> {
            Some(self.free.load(Relaxed) - self.driver_bias)
        }
        fn used_by_process(&self, _: u32) -> Option<u64> {
            self.calls.fetch_add(1, Relaxed);
            Some(self.used.load(Relaxed)).filter(|u| *u != NONE)
        }
    }

    impl ContextCharges for Fake {
        fn grow(&self, _: u32, bytes: u64) -> Result<(), OverQuota> {
            let held = self.parts.load(Relaxed) + self.allocations.load(Relaxed);
            if held + bytes > self.quota {
                return Err(OverQuota);
            }
            self.parts.fetch_add(bytes, Relaxed);
            Ok(())
        }
        fn force(&self, _: u32, bytes: u64) {
            self.parts.fetch_add(bytes, Relaxed);
        }
        fn shrink(&self, _: u32, bytes: u64) {
            self.parts.fetch_sub(bytes, Relaxed);
        }
        fn others(&self, _: u32) -> u64 {
            self.allocations.load(Relaxed)
        }
        fn in_flight(&self, _: u32) -> u64 {
            self.flight.load(Relaxed)
        }
        fn commits(&self, _: u32) -> u64 {
            self.commits.load(Relaxed)
        }
    }

    impl Fake {
        /// The driver takes `bytes` of the device.
        fn take(&self, bytes: u64) {
            self.free.fetch_sub(bytes, Relaxed);
        }
        fn give(&self, bytes: u64) {
            self.free.fetch_add(bytes, Relaxed);
        }
        fn parts(&self) -> u64 {
            self.parts.load(Relaxed)
        }
        fn uses(&self, bytes: u64) {
            self.used.store(bytes, Relaxed);
        }
        fn calls(&self) -> u32 {
            self.calls.load(Relaxed)
        }
    }

    fn ok(slot: ContextSlot) -> (CuResult, ContextSlot) {
        (CuResult::SUCCESS, slot)
    }

    /// A context `slot` whose creation takes `bytes` of the device, and fits.
    fn made(c: &ContextMemory, f: &Fake, slot: ContextSlot, bytes: u64) {
        let made = c.create(
            0,
            f,
            f,
            || true,
            || {
                f.take(bytes);
                ok(slot)
            },
        );
        assert_eq!(made, (CuResult::SUCCESS, slot, Ok(())));
    }

    #[test]
    fn a_context_is_charged_what_it_took_and_given_back_when_it_goes() {
        let (f, c) = (fake(1024 * MIB), ContextMemory::new(Setting::Measure));
        let (rc, slot, fits) = c.create(
            0,
            &f,
            &f,
            || true,
            || {
                f.take(300 * MIB);
                ok(1)
            },
        );
        assert_eq!((rc, slot, fits), (CuResult::SUCCESS, 1, Ok(())));
        assert_eq!((f.parts(), c.charged(0)), (300 * MIB, 300 * MIB));
        // a second context on the device is measured on its own
        made(&c, &f, 2, 200 * MIB);
        assert_eq!(f.parts(), 500 * MIB);
        c.gone(1, &f);
        assert_eq!(f.parts(), 200 * MIB);
        c.gone(1, &f);
        assert_eq!(f.parts(), 200 * MIB, "given back once");
        c.gone(2, &f);
        assert_eq!((f.parts(), c.charged(0)), (0, 0));
    }

    /// A creation during which this process's own charges moved is charged the last
    /// undisturbed measurement (0 before any); another process freeing memory meanwhile can
    /// only make the figure smaller, never negative.
    #[test]
    fn a_disturbed_measurement_is_not_trusted_and_the_figure_is_clamped() {
        let (f, c) = (fake(4096 * MIB), ContextMemory::new(Setting::Measure));
        // another thread's allocation in flight: the 400 MiB are not all the context's
        let disturbed = |slot| {
            let _ = c.create(
                0,
                &f,
                &f,
                || true,
                || {
                    f.take(300 * MIB);
                    f.flight.store(100 * MIB, Relaxed);
                    f.take(100 * MIB);
                    ok(slot)
                },
            );
            f.flight.store(0, Relaxed);
        };
        disturbed(1);
        assert_eq!(f.parts(), 0, "nothing measured undisturbed yet");
        made(&c, &f, 2, 300 * MIB);
        assert_eq!(f.parts(), 300 * MIB);
        disturbed(3);
        assert_eq!(f.parts(), 600 * MIB, "as the last undisturbed one");
        // a free the driver had made before (its books not yet) and an allocation of the
        // same size made meanwhile leave the held bytes as they were: the commit tells
        let _ = c.create(
            0,
            &f,
            &f,
            || true,
            || {
                f.take(300 * MIB + 64 * MIB);
                f.commits.fetch_add(1, Relaxed);
                ok(6)
            },
        );
        assert_eq!(f.parts(), 900 * MIB, "as the last undisturbed one again");
        // an allocation settled meanwhile disturbs it too
        let _ = c.create(
            0,
            &f,
            &f,
            || true,
            || {
                f.take(350 * MIB);
                f.allocations.fetch_add(50 * MIB, Relaxed);
                ok(4)
            },
        );
        assert_eq!(f.parts(), 1200 * MIB);
        let _ = c.create(
            0,
            &f,
            &f,
            || true,
            || {
                f.take(50 * MIB);
                f.give(400 * MIB); // another process frees
                ok(5)
            },
        );
        assert_eq!(f.parts(), 1200 * MIB, "clamped at 0");
    }

    #[test]
    fn a_context_that_does_not_fit_is_refused_and_nothing_is_charged() {
        let (f, c) = (fake(256 * MIB), ContextMemory::new(Setting::Measure));
        let (rc, slot, fits) = c.create(
            0,
            &f,
            &f,
            || true,
            || {
                f.take(300 * MIB);
                ok(1)
            },
        );
        assert_eq!(rc, CuResult::SUCCESS, "made: the caller destroys it");
        assert_eq!((slot, fits), (1, Err(Refused { bytes: 300 * MIB })));
        assert_eq!((f.parts(), c.charged(0)), (0, 0));
        c.gone(1, &f); // its destruction gives back nothing
        assert_eq!(f.parts(), 0);
        // a failed creation charges nothing either
        let (rc, _, fits) = c.create(0, &f, &f, || true, || (CuResult::OUT_OF_MEMORY, NO_CONTEXT));
        assert_eq!((rc, fits), (CuResult::OUT_OF_MEMORY, Ok(())));
        assert_eq!(f.parts(), 0);
    }

    #[test]
    fn cuquota_context_overrides_and_zero_ignores() {
        let f = fake(512 * MIB);
        let c = ContextMemory::new(Setting::from_config(Some(128 * MIB)));
        let (_, _, fits) = c.create(
            0,
            &f,
            &f,
            || true,
            || {
                f.take(300 * MIB);
                ok(1)
            },
        );
        assert_eq!((fits, f.parts()), (Ok(()), 128 * MIB), "not measured");
        // reserved before the call: one that cannot fit is never made
        f.allocations.store(400 * MIB, Relaxed);
        let called = Cell::new(false);
        let (rc, _, fits) = c.create(
            0,
            &f,
            &f,
            || true,
            || {
                called.set(true);
                ok(2)
            },
        );
        assert_eq!(rc, CuResult::OUT_OF_MEMORY);
        assert_eq!(
            (fits, called.get()),
            (Err(Refused { bytes: 128 * MIB }), false)
        );
        // a failed creation rolls the reservation back
        f.allocations.store(0, Relaxed);
        let _ = c.create(0, &f, &f, || true, || (CuResult::INVALID_VALUE, NO_CONTEXT));
        assert_eq!(f.parts(), 128 * MIB);
        // no correction with a fixed size
        f.uses(900 * MIB);
        c.correct(0, 5, &f, &f);
        assert_eq!((f.parts(), f.calls()), (128 * MIB, 0));

        let zero = ContextMemory::new(Setting::from_config(Some(0)));
        assert!(!zero.setting.counts());
        made(&zero, &f, 1, 300 * MIB);
        assert_eq!(zero.grew(0, 1, 50 * MIB as i64, None, false, &f), Ok(()));
        zero.correct(0, 5, &f, &f);
        assert_eq!((zero.charged(0), f.calls()), (0, 0));
    }

    #[test]
    fn without_nvml_a_context_is_not_measured() {
        let mut f = fake(1024 * MIB);
        f.nvml = false;
        let c = ContextMemory::new(Setting::Measure);
        let (rc, _, fits) = c.create(
            0,
            &f,
            &f,
            || true,
            || {
                f.take(300 * MIB);
                ok(1)
            },
        );
        assert_eq!((rc, fits, f.parts()), (CuResult::SUCCESS, Ok(()), 0));
    }

    /// `cuCtxSetLimit` and module loads: measured with the driver's figure (its bias
    /// cancels), charged to the context, given back by a shrink or an unload.
    #[test]
    fn limits_and_modules_grow_the_context() {
        let (f, c) = (fake(1024 * MIB), ContextMemory::new(Setting::Measure));
        made(&c, &f, 1, 100 * MIB);
        let m = c.measure(
            0,
            || f.driver_free(),
            &f,
            || {
                f.take(64 * MIB);
                ok(0)
            },
        );
        assert_eq!(m.growth, Some(64 * MIB as i64));
        assert_eq!(c.grew(0, 1, m.growth.unwrap(), None, false, &f), Ok(()));
        assert_eq!(f.parts(), 164 * MIB);
        assert_eq!(
            c.grew(0, 1, 10 * MIB as i64, Some(0xabc), false, &f),
            Ok(())
        );
        assert_eq!(f.parts(), 174 * MIB);
        c.unloaded(0xabc, &f);
        c.unloaded(0xabc, &f);
        assert_eq!(f.parts(), 164 * MIB, "credited once");
        // a smaller limit gives back, never more than the context holds
        assert_eq!(c.grew(0, 1, -(32 * MIB as i64), None, false, &f), Ok(()));
        assert_eq!(f.parts(), 132 * MIB);
        assert_eq!(c.grew(0, 1, -(4096 * MIB as i64), None, false, &f), Ok(()));
        assert_eq!(f.parts(), 0);
        // growth that does not fit is refused, nothing charged
        assert_eq!(
            c.grew(0, 1, 2048 * MIB as i64, None, false, &f),
            Err(Refused { bytes: 2048 * MIB })
        );
        assert_eq!(f.parts(), 0);
        // a context cuquota never saw made, or none: nothing
        assert_eq!(c.grew(0, 9, 10 * MIB as i64, None, false, &f), Ok(()));
        assert_eq!(
            c.grew(0, NO_CONTEXT, 10 * MIB as i64, None, false, &f),
            Ok(())
        );
        assert_eq!(f.parts(), 0);
        // a module's charge goes with its context
        c.grew(0, 1, 8 * MIB as i64, Some(0xdef), false, &f)
            .unwrap();
        c.gone(1, &f);
        c.unloaded(0xdef, &f);
        assert_eq!(f.parts(), 0);
    }

    /// NVML's per-process figure corrects the context part: up (lazy loading grew it) or
    /// down (a distorted measurement), never below 0, at most once a second.
    #[test]
    fn the_correction_follows_nvml_rate_limited() {
        let (f, c) = (fake(4096 * MIB), ContextMemory::new(Setting::Measure));
        c.correct(0, 1, &f, &f);
        assert_eq!(f.calls(), 0, "no context on the device: not asked");
        made(&c, &f, 1, 300 * MIB);
        f.allocations.store(1000 * MIB, Relaxed);
        // the first kernel launch loaded modules: NVML says 1500 MiB in all
        f.uses(1500 * MIB);
        let t0 = 10 * CORRECTION_INTERVAL_NS;
        c.correct(0, t0, &f, &f);
        assert_eq!((f.parts(), c.charged(0)), (500 * MIB, 500 * MIB));
        // within the second: not asked again
        f.uses(1100 * MIB);
        c.correct(0, t0 + CORRECTION_INTERVAL_NS / 2, &f, &f);
        assert_eq!((f.calls(), f.parts()), (1, 500 * MIB));
        // later: down to what NVML says beyond the allocations
        c.correct(0, t0 + CORRECTION_INTERVAL_NS, &f, &f);
        assert_eq!(f.parts(), 100 * MIB);
        // NVML below the allocations (rounding, timing): 0, never negative
        f.uses(800 * MIB);
        c.correct(0, t0 + 3 * CORRECTION_INTERVAL_NS, &f, &f);
        assert_eq!(f.parts(), 0);
        // a request in flight: not corrected now, but at the next chance
        f.uses(1500 * MIB);
        f.flight.store(MIB, Relaxed);
        c.correct(0, t0 + 4 * CORRECTION_INTERVAL_NS, &f, &f);
        assert_eq!(f.parts(), 0);
        f.flight.store(0, Relaxed);
        c.correct(0, t0 + 4 * CORRECTION_INTERVAL_NS + 1, &f, &f);
        assert_eq!(f.parts(), 500 * MIB);
        f.uses(1000 * MIB);
        c.correct(0, t0 + 5 * CORRECTION_INTERVAL_NS + 1, &f, &f);
        assert_eq!(f.parts(), 0);
        // no figure (pid not listed): left alone
        f.uses(NONE);
        c.correct(0, t0 + 5 * CORRECTION_INTERVAL_NS, &f, &f);
        assert_eq!(f.parts(), 0);
        // a new context adds its measurement to the corrected figure; the last one gone
        // takes the correction with it
        f.uses(1500 * MIB);
        c.correct(0, t0 + 7 * CORRECTION_INTERVAL_NS, &f, &f);
        assert_eq!(f.parts(), 500 * MIB);
        made(&c, &f, 2, 200 * MIB);
        assert_eq!(f.parts(), 700 * MIB);
        c.gone(1, &f);
        assert_eq!(
            f.parts(),
            400 * MIB,
            "the correction stays with the live context"
        );
        c.gone(2, &f);
        assert_eq!((f.parts(), c.charged(0)), (0, 0));
    }

    /// Every change of free memory happens inside a measured call: with the lock, each
    /// context measures exactly its own 2 MiB however the threads interleave.
    /// Contexts measured to take nothing (a simulated device) leave NVML's figure alone.
    #[test]
    fn no_correction_where_contexts_take_nothing() {
        let (f, c) = (fake(4096 * MIB), ContextMemory::new(Setting::Measure));
        made(&c, &f, 1, 0);
        f.uses(500 * MIB);
        c.correct(0, CORRECTION_INTERVAL_NS, &f, &f);
        assert_eq!((f.parts(), f.calls()), (0, 0));
    }

    #[test]
    fn threads_do_not_mix() {
        use std::sync::Arc;
        let f = Arc::new(fake(u64::MAX));
        f.free.store(1 << 50, Relaxed);
        let c = Arc::new(ContextMemory::new(Setting::Measure));
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let (f, c) = (f.clone(), c.clone());
                std::thread::spawn(move || {
                    for i in 0..50u8 {
                        let _ = c.create(
                            0,
                            &*f,
                            &*f,
                            || true,
                            || {
                                f.take(MIB);
                                std::thread::yield_now();
                                f.take(MIB);
                                ok(t * 50 + i + 1)
                            },
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(f.parts(), 200 * 2 * MIB);
        for slot in 1..=200 {
            c.gone(slot, &*f);
        }
        assert_eq!((f.parts(), c.charged(0)), (0, 0));
    }
}
