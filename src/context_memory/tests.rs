//! The rules of `context_memory`, against a fake meter and fake books.

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
    fn used_by_process(&self, _: u32) -> Result<u64, Unread> {
        self.calls.fetch_add(1, Relaxed);
        if !self.nvml {
            return Err(Unread::NoNvml);
        }
        Some(self.used.load(Relaxed))
            .filter(|u| *u != NONE)
            .ok_or(Unread::NotListed)
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

/// Before a refusal NVML's figure is read however soon after the last correction; why a
/// figure could not be read is kept until one is.
#[test]
fn before_a_refusal_the_figure_is_read_or_why_not_is_kept() {
    let (f, c) = (fake(4096 * MIB), ContextMemory::new(Setting::Measure));
    made(&c, &f, 1, 300 * MIB);
    f.allocations.store(1000 * MIB, Relaxed);
    f.uses(1500 * MIB);
    c.correct(0, 10 * CORRECTION_INTERVAL_NS, &f, &f);
    assert_eq!(f.parts(), 500 * MIB);
    // the driver took 100 MiB more, announced by no call
    f.uses(1600 * MIB);
    assert_eq!(c.correct_before_refusal(0, &f, &f), Reconciled::Read);
    assert_eq!((f.parts(), c.unread(0)), (600 * MIB, None));
    f.uses(NONE);
    let unread = Reconciled::Unread(Unread::NotListed);
    assert_eq!(c.correct_before_refusal(0, &f, &f), unread);
    assert_eq!(
        (f.parts(), c.unread(0)),
        (600 * MIB, Some(Unread::NotListed))
    );
    f.uses(1600 * MIB);
    assert_eq!(c.correct_before_refusal(0, &f, &f), Reconciled::Read);
    assert_eq!(c.unread(0), None);
    // a fixed context size is never reconciled
    let fixed = ContextMemory::new(Setting::Fixed(MIB));
    assert_eq!(fixed.correct_before_refusal(0, &f, &f), Reconciled::NotNow);
    // a GPU with no context measured to take memory: nothing to reconcile, NVML not asked
    let bare = ContextMemory::new(Setting::Measure);
    let calls = f.calls();
    assert_eq!(bare.correct_before_refusal(0, &f, &f), Reconciled::NotNow);
    assert_eq!((bare.unread(0), f.calls()), (None, calls));
    // without NVML the context was not measured, and a refusal says why
    let mut no_nvml = fake(4096 * MIB);
    no_nvml.nvml = false;
    made(&bare, &no_nvml, 1, 300 * MIB);
    let unread = Reconciled::Unread(Unread::NoNvml);
    assert_eq!(bare.correct_before_refusal(0, &no_nvml, &no_nvml), unread);
    assert_eq!(no_nvml.calls(), 0, "NVML's process list not asked");
}
