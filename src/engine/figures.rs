//! What the caller is told: the virtualised memory figures, the devices and quotas said at the
//! first resolution, the exit summary's numbers.

use super::explain::Outcome;
use super::placement::Place;
use super::state::Engine;
use crate::config::{Limits, MAX_DEVICES};
use crate::cuda_abi::CuResult;
use crate::quota::{DeviceQuota, Usage, UNLIMITED};
use crate::spin::EXIT_LOCK_ATTEMPTS;

/// A device at exit.
pub(super) struct DeviceAtExit {
    pub device: u32,
    pub usage: Usage,
    /// Live allocations (count, bytes); `None` if a ledger stayed locked.
    pub live: Option<(u64, u64)>,
    /// In a group: its name and the most its members held on the GPU.
    pub group: Option<(String, u64)>,
}

impl Engine {
    /// At the first limit resolved (the driver now knows its devices): one warning if a
    /// per-GPU limit names an ordinal or UUID the process does not see (the classic
    /// `CUDA_VISIBLE_DEVICES` renumbering), and at info each device's quota in bytes.
    #[cold]
    pub(super) fn check_named_devices(&self, limits: &Limits) -> Result<(), CuResult> {
        use std::sync::atomic::Ordering::Relaxed;
        let verbose = self.config.as_ref().is_ok_and(|c| c.verbose());
        let per_device = matches!(limits, Limits::PerDevice(_));
        if !(verbose || per_device) || self.limits.devices_checked.load(Relaxed) {
            return Ok(());
        }
        let seen: Vec<(u32, Option<[u8; 16]>)> = self
            .queries
            .devices()
            .into_iter()
            .map(|(d, _, _)| (d, per_device.then(|| self.queries.device_uuid(d)).flatten()))
            .collect();
        // No devices yet (the driver cannot tell): check at the next resolution.
        if seen.is_empty() || self.limits.devices_checked.swap(true, Relaxed) {
            return Ok(());
        }
        let unseen = limits.unseen(&seen);
        let named = match limits {
            Limits::PerDevice(list) => list.len(),
            _ => 0,
        };
        if named > 0 && unseen.len() == named {
            // Every GPU the limit names is one this process does not see: it would run with
            // no limit at all (a typo's usual effect), so every call fails instead.
            self.limits.limits_unusable.store(true, Relaxed);
            self.explain(Outcome::NoNamedDeviceSeen { unseen, seen });
            return Err(CuResult::INVALID_VALUE);
        }
        if !unseen.is_empty() {
            let seen = seen.clone();
            self.explain(Outcome::UnseenDevices { unseen, seen });
        }
        if verbose {
            // Resolving the others here re-enters `limit`, which returns at the flag above.
            let quotas: Vec<(u32, Option<u64>)> = seen
                .iter()
                .map(|(d, _)| {
                    let limit = self.quota(*d).and_then(|q| self.limit(*d, q).ok());
                    (*d, limit)
                })
                .collect();
            self.explain(Outcome::DeviceQuotas(quotas));
        }
        Ok(())
    }
}

impl Engine {
    /// `cuMemGetInfo`: (free, total) as the caller should see them, from the real ones.
    pub fn memory_info(&self, api: &'static str, real_free: u64, real_total: u64) -> (u64, u64) {
        let Some((device, quota)) = self.virtualized_device(Place::Current) else {
            return (real_free, real_total);
        };
        // In a group, what dead members held goes back before the figure is told.
        quota.reap_dead_members();
        self.books.describe_total(device, real_total);
        // What the pools keep may have gone back since (a synchronisation): read it again;
        // so may an exported allocation (its descriptor closed).
        self.refresh_pools(api, device);
        self.reap_exports(api);
        // NVML's figure for this process corrects the context part (after the other parts
        // are settled, rate-limited).
        self.correct_context_memory(api, device);
        let told = match self.limit(device, quota) {
            Ok(limit) if limit != UNLIMITED => (
                real_free.min(limit.saturating_sub(quota.quota_in_use())),
                real_total.min(limit),
            ),
            _ => (real_free, real_total),
        };
        let real = (real_free, real_total);
        self.explain(Outcome::MemoryInfo {
            device,
            api,
            told,
            real,
            held: quota.held(),
        });
        told
    }

    /// `cuDeviceTotalMem`: the total the caller should see.
    pub fn total_memory(&self, device: u32, real_total: u64) -> u64 {
        self.books.describe_total(device, real_total);
        match self.virtualized_device(Place::Device(device)) {
            Some((d, quota)) => match self.limit(d, quota) {
                Ok(limit) => real_total.min(limit),
                Err(_) => real_total,
            },
            None => real_total,
        }
    }

    pub(super) fn virtualized_device(&self, place: Place) -> Option<(u32, &DeviceQuota)> {
        if !self.config.as_ref().is_ok_and(|c| c.virtualize) {
            return None;
        }
        let (device, _) = self.resolve_place(place).ok()??;
        Some((device, self.quota(device)?))
    }

    /// The figures of the exit summary: per device that saw an allocation or a refusal,
    /// its usage and its live allocations (count, bytes; `None` if a ledger stayed locked).
    /// It never waits for a lock.
    pub(super) fn figures_at_exit(&self) -> Vec<DeviceAtExit> {
        (0..MAX_DEVICES as u32)
            .filter_map(|d| {
                let q = self.quota(d)?;
                if !q.was_used() {
                    return None;
                }
                // The exit handler may run on a thread that holds a ledger lock (exit from a
                // signal handler inside a hook): a few tries each, never a wait.
                let pooled =
                    (self.pool_cache.try_books(EXIT_LOCK_ATTEMPTS)).map(|books| books.live_on(d));
                let live = (self.allocations.ledgers().iter())
                    .map(|l| l.try_live_on(d, EXIT_LOCK_ATTEMPTS))
                    .chain([pooled])
                    .try_fold((0, 0), |(n, b), l| l.map(|(n2, b2)| (n + n2, b + b2)));
                Some(DeviceAtExit {
                    device: d,
                    usage: q.usage(),
                    live,
                    group: q.group_peak(),
                })
            })
            .collect()
    }
}
