//! Reserve → call → commit or roll back: the one way a request meets the quota. Every kind
//! goes through [`Engine::reserve_and_call`] (an allocation of any kind, a pool allocation)
//! or, for growth with no call of its own, [`Engine::reserve_or_trim`] (the footprint's
//! parts); the caller settles what the driver gave (an array's true size, a pool's growth)
//! and hands it to [`Engine::committed`].

use super::explain::{Outcome, Refusal, Request};
use super::*;

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
    /// out-of-line call there), and its rare branches are out of line. It spells out
    /// [`Engine::reserve_or_trim`] rather than calling it: matching that one's result again
    /// cost the plain pair 9 instructions.
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

    /// Reserves `bytes` against `limit`; refused, trims this process's unused pool and
    /// graph memory on `device` once and, if that gave anything back, tries again.
    pub(super) fn reserve_or_trim(
        &self,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        bytes: u64,
        limit: u64,
    ) -> Reservation {
        let reservation = quota.reserve(bytes, limit, self.mode() == Mode::Enforce);
        match reservation {
            Reservation::Refused { .. } => {
                self.reserve_after_room(api, device, quota, bytes, limit, reservation)
            }
            _ => reservation,
        }
    }

    /// A refused reservation, tried once more if trimming this process's unused pool and
    /// graph memory made room. Out of line: the retry must not grow `reserve`, which is
    /// inlined on the alloc path.
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
        if !self.made_room(api, device, bytes) {
            return refused;
        }
        // Not a refusal after all, if it fits now.
        quota.forgive_refusal();
        quota.reserve(bytes, limit, self.mode() == Mode::Enforce)
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
