//! Reserve → call → commit or roll back: the one way a request meets the quota. Every kind
//! goes through [`Engine::reserve_and_call`] (an allocation of any kind, a pool allocation);
//! whatever the driver gave beyond what was reserved — a pitch wider than the width, an
//! array's true size, a pool's growth, a part's growth with no call of its own — goes
//! through the one [`Engine::settle`], which reserves it as a first reservation is (a trim
//! and one retry when refused, observe mode's "would refuse" said). The caller then hands
//! what it got to [`Engine::committed`] (or a part's commit).

use super::explain::{Outcome, Refusal, Request};
use super::parts::PartRefusal;
use super::state::Engine;
use crate::config::Mode;
use crate::cuda_abi::CuResult;
use crate::ledger::{Charge, Kind};
use crate::quota::{DeviceQuota, Reservation};

/// A request that reached the driver with its bytes reserved, and that the driver granted:
/// the caller settles what it got and commits it, or undoes it and rolls back.
pub(super) struct Granted<'q, R> {
    pub quota: &'q DeviceQuota,
    pub limit: u64,
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
        match self.reserve(api, device, quota, bytes, limit) {
            Reserved::Refused => return Err(CuResult::OUT_OF_MEMORY),
            Reserved::Charged => {}
            Reserved::Uncharged => {
                let rc = call().0;
                if !rc.is_ok() {
                    self.driver_failed(api, device, quota, bytes, limit, quota.quota_in_use(), rc);
                }
                return Err(rc);
            }
        }
        let (rc, got) = call();
        if !rc.is_ok() {
            let in_use = quota.rollback(bytes);
            self.driver_failed(api, device, quota, bytes, limit, in_use, rc);
            return Err(rc);
        }
        Ok(Granted {
            quota,
            limit,
            rc,
            got,
        })
    }

    /// Reserves or refuses; refusals are said (and, in observe mode, what would have been).
    /// Inline: it is on the alloc path (left to the compiler, a second caller made it an
    /// out-of-line call there), and its rare branches are out of line. It takes the steps of
    /// [`Engine::settle`] (reserve; refused, make room once and retry; observe mode said)
    /// rather than calling it: matching that one's result again costs the plain pair
    /// instructions (bench/README.md).
    #[inline(always)]
    fn reserve(
        &self,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        bytes: u64,
        limit: u64,
    ) -> Reserved {
        let enforce = self.mode() == Mode::Enforce;
        let mut reservation = quota.reserve(bytes, limit, enforce);
        if matches!(reservation, Reservation::Refused { .. }) {
            reservation = self.reserve_after_room(api, device, quota, bytes, limit, reservation);
        }
        match reservation {
            Reservation::Granted { .. } => Reserved::Charged,
            Reservation::Uncharged => Reserved::Uncharged,
            Reservation::Refused { in_use, limit } => {
                self.explain(Outcome::Refused(Refusal {
                    device,
                    api,
                    bytes,
                    limit,
                    in_use,
                    what: Request::Memory,
                }));
                Reserved::Refused
            }
            Reservation::Allowed {
                in_use_before,
                limit,
            } => {
                self.would_refuse(device, api, bytes, limit, in_use_before);
                Reserved::Charged
            }
        }
    }

    /// Settles growth the driver made beyond what was reserved: reserves `bytes` more on
    /// `device` against `limit` as a first reservation is (`reserved`: bytes of the same
    /// request reserved already, such as a pitched allocation's estimate, so that what is
    /// said names the whole request, as a refusal of it would). Refused, `make_room` is asked
    /// once to make room (this process's unused pool and graph memory trimmed) and returns
    /// the bytes still to charge (read again: a trim may have taken the growth back too), or
    /// None when it gave nothing back; then it is tried again. Observe mode charges what the
    /// quota would have refused and says so. Ok: the bytes reserved, for the caller to commit
    /// (0: nothing to charge). Err: refused and counted, nothing charged, with the bytes
    /// that did not fit; the caller undoes what the driver did and says so.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn settle(
        &self,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        reserved: u64,
        mut bytes: u64,
        limit: u64,
        make_room: impl FnOnce() -> Option<u64>,
    ) -> Result<u64, (PartRefusal, u64)> {
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
                self.would_refuse(device, api, reserved + bytes, limit, in_use);
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
    fn reserve_after_room(
        &self,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        bytes: u64,
        limit: u64,
        refused: Reservation,
    ) -> Reservation {
        let enforce = self.mode() == Mode::Enforce;
        let mut reservation = refused;
        if self.made_room(api, device, bytes) {
            // Not a refusal after all, if it fits now.
            quota.forgive_refusal();
            reservation = quota.reserve(bytes, limit, enforce);
            if !matches!(reservation, Reservation::Refused { .. }) {
                return reservation;
            }
        }
        // Before the refusal is final: what the driver took that no call announced (lazy
        // module loading, local memory at a launch), from NVML's figure for this process.
        if self.reconcile_before_refusal(api, device) {
            quota.forgive_refusal();
            reservation = quota.reserve(bytes, limit, enforce);
        }
        reservation
    }

    /// Observe mode charged what the quota would have refused: said.
    #[cold]
    #[inline(never)]
    pub(super) fn would_refuse(
        &self,
        device: u32,
        api: &'static str,
        bytes: u64,
        limit: u64,
        in_use: u64,
    ) {
        self.explain(Outcome::WouldRefuse(Refusal {
            device,
            api,
            bytes,
            limit,
            in_use,
            what: Request::Memory,
        }));
    }

    /// The driver failed a call the quota had room for: an out-of-memory counts as a
    /// refusal, and each is said.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn driver_failed(
        &self,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        bytes: u64,
        limit: u64,
        in_use: u64,
        rc: CuResult,
    ) {
        if rc == CuResult::OUT_OF_MEMORY {
            quota.count_driver_refusal();
        }
        self.explain(Outcome::DriverFailed {
            device,
            api,
            bytes,
            limit,
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
