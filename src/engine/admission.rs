//! Reserve → call → commit or roll back: the one way a request meets the quota. A request is
//! one [`Ask`] (who asks, the device, its quota and limit), made once and handed to every
//! step. A plain allocation takes them all through [`Engine::admit`]; every kind goes
//! through [`Engine::reserve_and_call`] (an allocation of any kind, a pool allocation);
//! whatever the driver gave beyond what was reserved — a pitch wider than the width, an
//! array's true size, a pool's growth, a part's growth with no call of its own — goes
//! through the one [`Engine::settle`], which reserves it as a first reservation is (a trim
//! and one retry when refused, observe mode's "would refuse" said). The caller then hands
//! what it got to [`Engine::committed`] (or a part's commit).

use super::explain::{Outcome, Refusal, Request};
use super::state::Engine;
use crate::config::Mode;
use crate::contexts::ContextSlot;
use crate::cuda_abi::CuResult;
use crate::ledger::{Charge, Kind};
use crate::quota::{DeviceQuota, Reservation};

/// One request at the quota: who asks (`api`), on which `device`, against that device's
/// `quota` and the `limit` it had when the request began. Every step of admission takes it.
#[derive(Clone, Copy)]
pub(super) struct Ask<'q> {
    pub api: &'static str,
    pub device: u32,
    pub quota: &'q DeviceQuota,
    pub limit: u64,
}

impl Ask<'_> {
    /// A copy made field by field where it is passed to a call that is not inlined: handed
    /// the request itself, that call would keep the whole request in memory on the
    /// inlined path too, which costs the plain pair instructions (bench/README.md).
    #[inline(always)]
    pub(super) fn fresh(&self) -> Self {
        Ask {
            api: self.api,
            device: self.device,
            quota: self.quota,
            limit: self.limit,
        }
    }
}

/// Growth that [`Engine::settle`] could not fit (a part's, or an allocation's beyond its
/// estimate): nothing was charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartRefusal {
    /// What the quota held, the refused bytes not included.
    pub in_use: u64,
    pub limit: u64,
}

/// A request that reached the driver with its bytes reserved, and that the driver granted:
/// the caller settles what it got and commits it, or undoes it and rolls back.
pub(super) struct Granted<'q, R> {
    pub ask: Ask<'q>,
    pub rc: CuResult,
    pub got: R,
}

/// What a reservation lets an allocation do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reserved {
    /// Too large to count: call the driver (which will refuse it), charge nothing.
    Uncharged,
    /// Charged: call the driver, then commit or roll back.
    Charged,
    /// Over the quota: refused (and explained) without calling the driver.
    Refused,
}

impl Engine {
    /// An allocation of `estimate` bytes on `device`, for `owner`, from reservation to
    /// commit: reserve, run the driver's `call` (its result, the new key, and the bytes it
    /// really took), settle what it took beyond `estimate` (refused: `undo` frees the key,
    /// and the caller is refused) or give back what it took less, and commit to the ledger
    /// of `kind`. Inline: the plain allocation's whole path (bench/README.md).
    #[inline(always)]
    pub(super) fn admit(
        &self,
        api: &'static str,
        kind: Kind,
        (device, owner): (u32, ContextSlot),
        estimate: u64,
        call: impl FnOnce() -> (CuResult, u64, u64),
        undo: impl FnOnce(u64),
    ) -> CuResult {
        let call = || {
            let (rc, key, actual) = call();
            (rc, (key, actual))
        };
        let Granted {
            ask,
            rc,
            got: (key, actual),
        } = match self.reserve_and_call(api, device, estimate, call) {
            Ok(granted) => granted,
            Err(rc) => return rc,
        };
        if actual > estimate {
            if let Err(rc) = self.settle_beyond(ask.fresh(), estimate, (key, actual), undo) {
                return rc;
            }
        } else if actual < estimate {
            ask.quota.rollback(estimate - actual);
        }
        let charge = Charge {
            device,
            bytes: actual,
            context: owner,
        };
        self.committed(api, kind, key, ask.quota, charge);
        rc
    }

    /// The driver took `actual` bytes for `key` where `estimate` were reserved: the rest
    /// settled as growth of the same request. Refused (or beyond any counter: nothing
    /// reserved), `undo` frees `key`, the estimate's reservation is rolled back, and the
    /// whole request is said refused. Out of line: rare (a pitch wider than the width, an
    /// array larger than its estimate), it must not grow the plain allocation's path.
    #[inline(never)]
    fn settle_beyond(
        &self,
        ask: Ask<'_>,
        estimate: u64,
        (key, actual): (u64, u64),
        undo: impl FnOnce(u64),
    ) -> Result<(), CuResult> {
        let extra = actual - estimate;
        let (api, device) = (ask.api, ask.device);
        let make_room = || self.made_room(api, device, extra).then_some(extra);
        let limit = match self.settle(ask.fresh(), estimate, extra, make_room) {
            Ok(settled) if settled == extra => return Ok(()),
            Ok(_) => ask.limit,
            Err((refusal, _)) => refusal.limit,
        };
        undo(key);
        let in_use = ask.quota.rollback(estimate);
        let refusal = Refusal::new(api, device, actual, in_use, limit, Request::Memory);
        self.explain(Outcome::Refused(refusal));
        Err(CuResult::OUT_OF_MEMORY)
    }

    /// Reserves `bytes` on `device` and runs the driver's `call`. `Ok`: both went through,
    /// and the caller commits. `Err(rc)`: it is over and `rc` is the caller's answer —
    /// refused over the quota (said, the driver never called), too large to count (the
    /// driver called uncharged), failed by the driver (rolled back, said), or on a device
    /// beyond the books (the driver's answer, uncharged).
    #[inline(always)]
    pub(super) fn reserve_and_call<R>(
        &self,
        api: &'static str,
        device: u32,
        bytes: u64,
        call: impl FnOnce() -> (CuResult, R),
    ) -> Result<Granted<'_, R>, CuResult> {
        let Some(quota) = self.quota(device) else {
            return Err(call().0); // an ordinal beyond any quota cuquota keeps
        };
        let limit = self.limit(device, quota)?;
        let ask = Ask {
            api,
            device,
            quota,
            limit,
        };
        match self.reserve(&ask, bytes) {
            Reserved::Refused => return Err(CuResult::OUT_OF_MEMORY),
            Reserved::Charged => {}
            Reserved::Uncharged => {
                let rc = call().0;
                if !rc.is_ok() {
                    self.driver_failed(ask.fresh(), bytes, quota.quota_in_use(), rc);
                }
                return Err(rc);
            }
        }
        let (rc, got) = call();
        if !rc.is_ok() {
            let in_use = quota.rollback(bytes);
            self.driver_failed(ask.fresh(), bytes, in_use, rc);
            return Err(rc);
        }
        Ok(Granted { ask, rc, got })
    }

    /// Reserves or refuses; refusals are said (and, in observe mode, what would have been).
    /// Inline: it is on the alloc path (left to the compiler, a second caller made it an
    /// out-of-line call there), and its rare branches are out of line. It takes the steps of
    /// [`Engine::settle`] (reserve; refused, make room once and retry; observe mode said)
    /// rather than calling it: matching that one's result again costs the plain pair
    /// instructions (bench/README.md).
    #[inline(always)]
    fn reserve(&self, ask: &Ask<'_>, bytes: u64) -> Reserved {
        let enforce = self.mode() == Mode::Enforce;
        let mut reservation = ask.quota.reserve(bytes, ask.limit, enforce);
        if matches!(reservation, Reservation::Refused { .. }) {
            reservation = self.reserve_after_room(ask.fresh(), bytes, reservation);
        }
        match reservation {
            Reservation::Granted { .. } => Reserved::Charged,
            Reservation::Uncharged => Reserved::Uncharged,
            Reservation::Refused { in_use, limit } => {
                self.refused(ask.api, ask.device, bytes, in_use, limit);
                Reserved::Refused
            }
            Reservation::Allowed {
                in_use_before,
                limit,
            } => {
                self.would_refuse(ask.fresh(), bytes, limit, in_use_before);
                Reserved::Charged
            }
        }
    }

    /// Settles growth the driver made beyond what was reserved: reserves `bytes` more for
    /// `ask` as a first reservation is (`reserved`: bytes of the same request reserved
    /// already, such as a pitched allocation's estimate, so that what is said names the
    /// whole request, as a refusal of it would). Refused, `make_room` is asked once to make
    /// room (this process's unused pool and graph memory trimmed) and returns the bytes
    /// still to charge (read again: a trim may have taken the growth back too), or None when
    /// it gave nothing back; then it is tried again. Observe mode charges what the quota
    /// would have refused and says so. Ok: the bytes reserved, for the caller to commit (0:
    /// nothing to charge). Err: refused and counted, nothing charged, with the bytes that
    /// did not fit; the caller undoes what the driver did and says so.
    pub(super) fn settle(
        &self,
        ask: Ask<'_>,
        reserved: u64,
        mut bytes: u64,
        make_room: impl FnOnce() -> Option<u64>,
    ) -> Result<u64, (PartRefusal, u64)> {
        let (quota, limit) = (ask.quota, ask.limit);
        let enforce = self.mode() == Mode::Enforce;
        let mut reservation = quota.reserve(bytes, limit, enforce);
        if matches!(reservation, Reservation::Refused { .. }) {
            if let Some(left) = make_room() {
                // Not a refusal after all, if it fits now.
                quota.forgive_refusal();
                if left == 0 {
                    return Ok(0);
                }
                bytes = left;
                reservation = quota.reserve(bytes, limit, enforce);
            }
        }
        match reservation {
            Reservation::Refused { in_use, limit } => Err((PartRefusal { in_use, limit }, bytes)),
            // Beyond any counter: the driver would not have it; nothing to charge.
            Reservation::Uncharged => Ok(0),
            Reservation::Granted { .. } => Ok(bytes),
            Reservation::Allowed {
                in_use_before,
                limit,
            } => {
                let in_use = in_use_before.saturating_sub(reserved);
                self.would_refuse(ask, reserved + bytes, limit, in_use);
                Ok(bytes)
            }
        }
    }

    /// A refused reservation, tried once more if trimming this process's unused pool and
    /// graph memory made room, and once more after NVML's figure reconciled the context
    /// part. Out of line: the retry must not grow `reserve`, which is inlined on the alloc
    /// path.
    #[cold]
    #[inline(never)]
    fn reserve_after_room(&self, ask: Ask<'_>, bytes: u64, refused: Reservation) -> Reservation {
        let (quota, limit) = (ask.quota, ask.limit);
        let enforce = self.mode() == Mode::Enforce;
        let mut reservation = refused;
        if self.made_room(ask.api, ask.device, bytes) {
            // Not a refusal after all, if it fits now.
            quota.forgive_refusal();
            reservation = quota.reserve(bytes, limit, enforce);
            if !matches!(reservation, Reservation::Refused { .. }) {
                return reservation;
            }
        }
        // Before the refusal is final: what the driver took that no call announced (lazy
        // module loading, local memory at a launch), from NVML's figure for this process.
        if self.reconcile_before_refusal(ask.api, ask.device) {
            quota.forgive_refusal();
            reservation = quota.reserve(bytes, limit, enforce);
        }
        reservation
    }

    /// Over the quota: `bytes` refused at `in_use` of `limit`, said. Out of line but not
    /// `#[cold]`: marked cold, the inlined path around it was laid out so that the plain
    /// pair cost two instructions more (bench/README.md).
    #[inline(never)]
    fn refused(&self, api: &'static str, device: u32, bytes: u64, in_use: u64, limit: u64) {
        let refusal = Refusal::new(api, device, bytes, in_use, limit, Request::Memory);
        self.explain(Outcome::Refused(refusal));
    }

    /// Observe mode charged what the quota would have refused: said.
    #[cold]
    #[inline(never)]
    fn would_refuse(&self, ask: Ask<'_>, bytes: u64, limit: u64, in_use: u64) {
        let refusal = Refusal::new(ask.api, ask.device, bytes, in_use, limit, Request::Memory);
        self.explain(Outcome::WouldRefuse(refusal));
    }

    /// The driver failed a call the quota had room for: an out-of-memory counts as a
    /// refusal, and each is said.
    #[cold]
    #[inline(never)]
    fn driver_failed(&self, ask: Ask<'_>, bytes: u64, in_use: u64, rc: CuResult) {
        if rc == CuResult::OUT_OF_MEMORY {
            ask.quota.count_driver_refusal();
        }
        self.explain(Outcome::DriverFailed {
            device: ask.device,
            api: ask.api,
            bytes,
            limit: ask.limit,
            in_use,
            rc,
        });
    }

    /// The driver gave `key` the charge's bytes: held, in the ledger of `kind`, and said.
    /// Inline: its frame cost more than its work on the plain allocation's path.
    #[inline(always)]
    pub(super) fn committed(
        &self,
        api: &'static str,
        kind: Kind,
        key: u64,
        quota: &DeviceQuota,
        charge: Charge,
    ) {
        let (device, bytes) = (charge.device, charge.bytes);
        let held = quota.commit(bytes);
        if let Some(stale) = self.ledger(kind).insert(key, charge) {
            self.released_stale(key, stale);
        }
        self.explain(Outcome::Admitted {
            device,
            api,
            key,
            bytes,
            held,
        });
    }
}
