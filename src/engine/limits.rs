//! A GPU's limit, resolved at its first use: the variable's and the policies', or in a group
//! the group's quota of that GPU, joined by UUID; and a group limit moved by `cuquota set`.

use super::explain::Outcome;
use super::state::Engine;
use crate::config::{Limits, MAX_DEVICES};
use crate::cuda_abi::CuResult;
use crate::quota::{DeviceQuota, UNLIMITED};
use std::sync::atomic::Ordering::Relaxed;

impl Engine {
    /// `device`'s limit, resolved; `None` when it is unlimited or cannot be resolved.
    pub(super) fn known_limit(&self, device: u32) -> Option<u64> {
        let quota = self.quota(device)?;
        self.limit(device, quota).ok().filter(|l| *l != UNLIMITED)
    }

    /// The limit of `device` in bytes ([`UNLIMITED`] for none), resolved on first use.
    pub(super) fn limit(&self, device: u32, quota: &DeviceQuota) -> Result<u64, CuResult> {
        let moved = |before, limit| self.group_limit_moved(device, before, limit);
        quota.limit_or_resolve(
            || {
                let limits = self.config.as_ref().map_or(&Limits::None, |c| &c.limits);
                self.check_named_devices(limits)?;
                let ceilings = self.config.as_ref().map_or(&[][..], |c| &c.ceilings[..]);
                // The smallest of the variable's limit and the policies' (which it only narrows);
                // the GPU's real memory, when a percentage needed it, is kept for the views.
                let total = std::cell::Cell::new(None);
                let own = match &self.config {
                    Ok(c) => c.own_limit(
                        device,
                        || self.queries.device_uuid(device),
                        || {
                            let got = self.queries.total_memory(device);
                            total.set(got.ok());
                            got
                        },
                    )?,
                    Err(_) => None,
                };
                self.describe_device(device, total.get());
                let (own, named) = (own.unwrap_or(UNLIMITED), own.is_some());
                // Under a policy a group's limit is bounded by this process's too.
                let cap = if ceilings.is_empty() { UNLIMITED } else { own };
                match self.books.group_name() {
                    None => Ok(own),
                    Some(_) => self.join_group(device, own, named, cap),
                }
            },
            moved,
        )
    }

    /// `cuquota set` moved the group's limit of `device` from `before` to `limit`: said once,
    /// and traced, so that the trace and the report know the quota in force at each moment.
    #[cold]
    #[inline(never)]
    fn group_limit_moved(&self, device: u32, before: u64, limit: u64) {
        let group = self.books.group_name().unwrap_or_default().to_string();
        self.explain(Outcome::GroupLimitMoved {
            device,
            group,
            before,
            limit,
        });
    }

    /// At exit (before the summary): a group limit moved since this process last asked is
    /// said and traced, so that the summary's quota is the trace's last one.
    pub fn note_group_limits(&self) {
        for device in 0..MAX_DEVICES as u32 {
            let moved = self.quota(device).and_then(|q| q.group_limit_moved());
            if let Some((before, limit)) = moved {
                self.group_limit_moved(device, before, limit);
            }
        }
    }

    /// At the first use of `device`: which GPU it is, for the views (its UUID, and its real
    /// memory when the limit needed it). Nothing more is asked of the driver: every call here
    /// would be one the program did not make.
    #[cold]
    #[inline(never)]
    fn describe_device(&self, device: u32, total: Option<u64>) {
        if self.books.is_registered() {
            let uuid = self.queries.device_uuid(device).unwrap_or([0; 16]);
            self.books.describe(device, uuid, total.unwrap_or(0), "");
        }
    }

    /// `device`'s UUID and real memory, asked of the driver once and remembered: a forked
    /// child joins its group again without a driver call (another of the parent's threads
    /// may have been inside the driver at the fork).
    fn gpu_identity(&self, device: u32) -> Option<([u8; 16], u64)> {
        let known = self.limits.gpus.get(device as usize)?;
        if let Some(id) = known.get() {
            return Some(id);
        }
        let uuid = self.queries.device_uuid(device)?;
        let total = self.queries.total_memory(device).unwrap_or(0);
        known.set(uuid, total);
        Some((uuid, total))
    }

    /// The first use of `device` in a group member: its reservations go to the group's
    /// quota of that GPU (by UUID) from now on. Returns the group's limit. A member whose
    /// own limit differs is told once; a GPU that cannot join fails closed.
    #[cold]
    #[inline(never)]
    fn join_group(&self, device: u32, own: u64, named: bool, cap: u64) -> Result<u64, CuResult> {
        let group = self.books.group_name().unwrap_or_default().to_string();
        let joined = match self.gpu_identity(device) {
            None => Err("the driver cannot name the GPU's UUID".to_string()),
            Some((uuid, total)) => self.books.join_group(device, uuid, own, total, cap),
        };
        match joined {
            Ok(limit) => {
                if named && limit != own {
                    self.explain(Outcome::GroupLimitDiffers {
                        device,
                        group,
                        own,
                        limit,
                    });
                }
                Ok(limit)
            }
            Err(why) => {
                if !self.limits.group_failure_said.swap(true, Relaxed) {
                    self.explain(Outcome::GroupUnusable { group, why });
                }
                Err(CuResult::INVALID_VALUE)
            }
        }
    }
}
