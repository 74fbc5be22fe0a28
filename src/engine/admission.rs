//! Reserve → call → commit or roll back: the one way a request meets the quota, shared by
//! every allocation kind and the footprint's parts.

use super::*;

/// What a reservation lets an allocation do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reserved {
    /// Too large to count: call the driver (which will refuse it), charge nothing.
    Uncharged,
    /// Charged: call the driver, then commit or roll back.
    Charged,
    /// Over the quota: refused (and explained) without calling the driver.
    Refused,
}

impl Engine {
    /// Reserves or refuses; explains refusals (and, in observe mode, what would have been).
    /// Inline: it is on the alloc path (left to the compiler, a second caller made it an
    /// out-of-line call there), and its rare branches are out of line.
    #[inline(always)]
    pub(super) fn reserve(
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
                self.refused(device, bytes, api, limit, in_use);
                Reserved::Refused
            }
            Reservation::Allowed {
                in_use_before,
                limit,
            } => {
                self.would_refuse(device, bytes, api, limit, in_use_before);
                Reserved::Charged
            }
        }
    }

    /// A refused reservation, tried once more if trimming this process's unused pool and
    /// graph memory made room. Out of line: the retry must not grow `reserve`, which is
    /// inlined on the alloc path.
    #[cold]
    #[inline(never)]
    pub(super) fn reserve_after_room(
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
}
