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
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// Where measurements come from.
pub trait Meter {
    /// A device's free memory from NVML (no context needed); `None` without NVML.
    fn nvml_free(&self, device: u32) -> Option<u64>;
    /// The free memory of the current context's device, from the driver.
    fn driver_free(&self) -> Option<u64>;
    /// This process's used memory on a device, from NVML's process list, or why it cannot
    /// be read.
    fn used_by_process(&self, device: u32) -> Result<u64, Unread>;
}

/// Why NVML's figure for this process cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unread {
    /// No NVML (not loaded, not initialised, or no NVML device for the GPU).
    NoNvml,
    /// NVML does not list this pid on the GPU: it sees the process under another PID (a
    /// PID namespace of its own, as in a container).
    NotListed,
    /// NVML lists it without a figure (`NVML_VALUE_NOT_AVAILABLE`).
    NoFigure,
}

impl Unread {
    /// Why, in the words of a log line and a trace field.
    pub fn words(self) -> &'static str {
        match self {
            Unread::NoNvml => "NVML cannot be used",
            Unread::NotListed => "NVML does not list this process, as from another PID namespace",
            Unread::NoFigure => "NVML gives no figure for this process",
        }
    }

    fn code(self) -> u8 {
        match self {
            Unread::NoNvml => 1,
            Unread::NotListed => 2,
            Unread::NoFigure => 3,
        }
    }

    fn from_code(code: u8) -> Option<Unread> {
        [Unread::NoNvml, Unread::NotListed, Unread::NoFigure]
            .into_iter()
            .find(|u| u.code() == code)
    }
}

/// What a reconciliation with NVML's figure did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconciled {
    /// Not now: too soon after the last, no context measured to take memory on the GPU,
    /// a request of this process in flight, or context memory not measured at all.
    NotNow,
    /// NVML's figure was read: the context part follows it.
    Read,
    /// NVML's figure could not be read.
    Unread(Unread),
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
    /// A free figure could not be read (without NVML, a creation's never can).
    pub unread: bool,
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
    /// Per device: why NVML's figure could not be read the last time it was asked
    /// ([`Unread`]'s code; 0: it was read, or never asked).
    unread: [AtomicU8; MAX_DEVICES],
}

impl ContextMemory {
    pub fn new(setting: Setting) -> ContextMemory {
        ContextMemory {
            setting,
            measuring: SpinLock::new(()),
            book: SpinLock::new(Book::new()),
            corrected_at: [const { AtomicU64::new(0) }; MAX_DEVICES],
            unread: [const { AtomicU8::new(0) }; MAX_DEVICES],
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
        if m.unread {
            // No NVML figure for the GPU: none for this process either, which a refusal
            // says without asking again.
            self.unread[device as usize].store(Unread::NoNvml.code(), Relaxed);
        }
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
    pub fn correct(
        &self,
        device: u32,
        now_ns: u64,
        meter: &dyn Meter,
        books: &dyn ContextCharges,
    ) -> Reconciled {
        if self.setting != Setting::Measure || !Self::valid(device) {
            return Reconciled::NotNow;
        }
        // 0 in `corrected_at` means never corrected: no correction is stamped 0.
        let now_ns = now_ns.max(1);
        let last = &self.corrected_at[device as usize];
        let then = last.load(Relaxed);
        if then != 0 && now_ns.saturating_sub(then) < CORRECTION_INTERVAL_NS {
            return Reconciled::NotNow;
        }
        if last
            .compare_exchange(then, now_ns, Relaxed, Relaxed)
            .is_err()
        {
            return Reconciled::NotNow; // another thread is correcting it
        }
        if !self.book.lock().measured_on(device) {
            return Reconciled::NotNow;
        }
        let done = self.reconcile(device, meter, books);
        if done != Reconciled::Read {
            // Not now (another thread's request in flight, no figure): at the next chance.
            last.store(then, Relaxed);
        }
        done
    }

    /// Before a refusal is final: NVML's figure once, whenever the last correction was.
    /// Where it cannot be read, says why (also when no context was measured: without NVML
    /// none is).
    pub fn correct_before_refusal(
        &self,
        device: u32,
        meter: &dyn Meter,
        books: &dyn ContextCharges,
    ) -> Reconciled {
        if self.setting != Setting::Measure || !Self::valid(device) {
            return Reconciled::NotNow;
        }
        // Nothing measured on the GPU (none of its contexts takes memory, or NVML could
        // not measure them): nothing to reconcile, and NVML is not asked — a forked child,
        // whose books start empty, must not call into NVML, whose locks a parent's thread
        // may have held at the fork.
        if !self.book.lock().measured_on(device) {
            return self
                .unread(device)
                .map_or(Reconciled::NotNow, Reconciled::Unread);
        }
        self.reconcile(device, meter, books)
    }

    /// Reads NVML's figure (the caller saw a context measured to take memory on `device`)
    /// and, where one still lives there and this process's own charges stood still
    /// meanwhile, makes the context part `max(0, used - others)`.
    fn reconcile(&self, device: u32, meter: &dyn Meter, books: &dyn ContextCharges) -> Reconciled {
        let own = Own::of(device, books);
        let used = meter.used_by_process(device);
        let still = Own::still(own, Own::of(device, books));
        let flag = &self.unread[device as usize];
        let used = match used {
            Ok(used) => {
                flag.store(0, Relaxed);
                used
            }
            Err(why) => {
                flag.store(why.code(), Relaxed);
                return Reconciled::Unread(why);
            }
        };
        let mut book = self.book.lock();
        if !still || !book.measured_on(device) {
            return Reconciled::NotNow;
        }
        let target = used.saturating_sub(own.held);
        let residual = target as i128 - book.sum_on(device) as i128;
        book.residual[device as usize] = residual.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        book.sync(device, books);
        Reconciled::Read
    }

    /// Why NVML's figure could not be read the last time it was asked for `device` (None:
    /// it was read, or never asked).
    pub fn unread(&self, device: u32) -> Option<Unread> {
        let code = self.unread.get(device as usize)?.load(Relaxed);
        Unread::from_code(code)
    }

    /// Whether a context measured to take memory lives on `device` (what the watcher
    /// reconciles).
    pub fn measured_on(&self, device: u32) -> bool {
        Self::valid(device)
            && self.setting == Setting::Measure
            && self.book.lock().measured_on(device)
    }

    /// The context part this module has charged on `device`.
    #[cfg(test)]
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
        for u in &self.unread {
            u.store(0, Relaxed);
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
    let unread = before.is_none() || after.is_none();
    Measured {
        rc,
        value,
        growth,
        unread,
    }
}

#[cfg(test)]
mod tests;
