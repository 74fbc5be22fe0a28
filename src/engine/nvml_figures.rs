//! The engine's figures for the NVML hooks (`exports/nvml.rs`): a GPU's quota as this
//! process's books have it, its footprint, and the devices the driver shows it. What NVML
//! is told from these figures, and the quota of a process without books, are plain
//! functions in `nvml_quota.rs`.

use super::nvml_quota::NvmlQuota;
use super::state::Engine;

impl Engine {
    /// For the NVML hooks: CUDA ordinal `device`'s quota as this process's books have it
    /// (a group member's: its group's limit and in-use now, after dead members gave theirs
    /// back), or `None` while they have no finite limit resolved for it.
    pub fn nvml_quota(&self, device: u32) -> Option<NvmlQuota> {
        let quota = self.quota(device)?;
        quota.reap_dead_members();
        let limit = quota.known_limit()?;
        Some(NvmlQuota {
            limit,
            used: quota.quota_in_use(),
        })
    }

    /// This process's footprint on CUDA ordinal `device` (reserved or held).
    pub fn footprint(&self, device: u32) -> u64 {
        self.quota(device).map_or(0, |q| q.in_use())
    }

    /// The devices the driver shows this process, with their UUIDs (for matching NVML's).
    pub fn device_uuids(&self) -> Vec<(u32, Option<[u8; 16]>)> {
        (self.queries.devices().into_iter())
            .map(|(d, _, _)| (d, self.queries.device_uuid(d)))
            .collect()
    }
}
