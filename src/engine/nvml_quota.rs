//! What a governed process shows through NVML (the hooks in `exports/nvml.rs`): the quota in
//! place of the GPU's memory, and what counts against it — this process's footprint, or its
//! group's in-use — as used. Plain functions of the figures, the configuration and the
//! group's file; no FFI, no engine. A process that never called CUDA has no books: its
//! figures come from its configuration and a read-only look at its group's file
//! (`quota_without_books`); one that has them asks the engine (`nvml_figures.rs`).

use crate::config::{Config, Limits};
use crate::quota::UNLIMITED;
use cuquota_format::settings::DeviceId;
use cuquota_format::units::Size;
use cuquota_state::group::{GpuReading, NO_LIMIT, UNSET};

/// A GPU's quota as NVML shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvmlQuota {
    /// Bytes (a finite limit: a GPU without one is shown as it is).
    pub limit: u64,
    /// What counts against it: this process's footprint, or its group's in-use.
    pub used: u64,
}

/// NVML's (total, free, used) under a quota, from the real total and free: total is the
/// smaller of the GPU's and the quota, used what counts against the quota, free the rest of
/// the quota, never below 0 and never above what the GPU really has free.
pub fn memory_told(real_total: u64, real_free: u64, quota: NvmlQuota) -> (u64, u64, u64) {
    let total = real_total.min(quota.limit);
    let free = total.saturating_sub(quota.used).min(real_free);
    (total, free, quota.used)
}

/// `nvmlMemory_v2_t`'s `reserved` beside told figures: what keeps total = reserved + used +
/// free (the room the quota has that the GPU has not free, when other processes fill it).
pub fn reserved_told(total: u64, free: u64, used: u64) -> u64 {
    total.saturating_sub(used).saturating_sub(free)
}

/// The CUDA ordinal of the GPU with NVML index `index` and UUID `uuid` (`GPU-…`, as NVML
/// spells it) in a process whose `CUDA_VISIBLE_DEVICES` is `visible`: its place in that list
/// (indices or UUIDs, a UUID prefix matching as CUDA matches it; the list ends at the first
/// entry that names no GPU), or its NVML index when unset. `None`: hidden from CUDA.
pub fn cuda_ordinal(index: u32, uuid: &str, visible: Option<&str>) -> Option<u32> {
    let Some(list) = visible else {
        return Some(index);
    };
    for (ordinal, entry) in list.split(',').map(str::trim).enumerate() {
        let matches = if let Ok(i) = entry.parse::<u32>() {
            i == index
        } else if entry.len() > 4 && entry[..4].eq_ignore_ascii_case("gpu-") {
            uuid.len() >= entry.len() && uuid[..entry.len()].eq_ignore_ascii_case(entry)
        } else {
            return None;
        };
        if matches {
            return u32::try_from(ordinal).ok();
        }
    }
    None
}

/// The quota of a GPU from the configuration alone: its limit in bytes (percentages of
/// `real_total`), `None` for none. A GPU hidden from CUDA (`ordinal` None) has a limit only
/// where one names its UUID.
pub fn configured_limit(
    config: &Config,
    ordinal: Option<u32>,
    uuid: [u8; 16],
    real_total: u64,
) -> Option<u64> {
    let size = match (ordinal, &config.limits) {
        (Some(o), limits) => limits.for_device(o, || Some(uuid)),
        (None, Limits::PerDevice(list)) => list
            .iter()
            .find(|(d, _)| *d == DeviceId::Uuid(uuid))
            .map(|(_, s)| *s),
        (None, _) => None,
    }?;
    Some(match size {
        Size::Bytes(b) => b,
        share => share.resolve(real_total),
    })
    .filter(|l| *l < UNLIMITED)
}

/// A GPU's quota without the engine's books: outside a group, the configured limit (`own`)
/// and this process's footprint (`own_used`); in a group (`group`: its file read, `None`
/// where it does not exist yet), the group's limit and in-use — or, before any member used
/// the GPU, the limit its first member would set (the group's default, else `own`) and 0.
/// `None`: no limit, the figures pass through.
pub fn quota_without_books(
    own: Option<u64>,
    own_used: u64,
    group: Option<Option<&GpuReading>>,
) -> Option<NvmlQuota> {
    let (limit, used) = match group {
        None => (own?, own_used),
        Some(None) => (own?, 0),
        Some(Some(reading)) => match &reading.gpu {
            Some(gpu) => (gpu.limit, gpu.in_use),
            None if reading.default_limit != UNSET => (reading.default_limit, 0),
            None => (own?, 0),
        },
    };
    (limit < NO_LIMIT).then_some(NvmlQuota { limit, used })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuquota_state::group::GpuFigures;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn memory_under_a_quota() {
        let q = NvmlQuota {
            limit: GIB,
            used: 300 * MIB,
        };
        assert_eq!(
            memory_told(16 * GIB, 16 * GIB, q),
            (GIB, 724 * MIB, 300 * MIB)
        );
        // Never above what the GPU really has free; reserved keeps the sum.
        let (t, f, u) = memory_told(16 * GIB, 100 * MIB, q);
        assert_eq!((t, f, u), (GIB, 100 * MIB, 300 * MIB));
        assert_eq!(reserved_told(t, f, u), 624 * MIB);
        // A GPU smaller than the quota; a quota lowered below what is held.
        assert_eq!(
            memory_told(512 * MIB, 512 * MIB, q),
            (512 * MIB, 212 * MIB, 300 * MIB)
        );
        let over = NvmlQuota {
            limit: 200 * MIB,
            used: 300 * MIB,
        };
        assert_eq!(memory_told(GIB, GIB, over), (200 * MIB, 0, 300 * MIB));
        assert_eq!(reserved_told(200 * MIB, 0, 300 * MIB), 0);
    }

    #[test]
    fn ordinals_follow_cuda_visible_devices() {
        let u = "GPU-5a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
        assert_eq!(cuda_ordinal(3, u, None), Some(3));
        assert_eq!(cuda_ordinal(3, u, Some("2,3")), Some(1));
        assert_eq!(cuda_ordinal(3, u, Some("1")), None);
        assert_eq!(cuda_ordinal(3, u, Some("0,GPU-5a1b")), Some(1));
        assert_eq!(cuda_ordinal(3, u, Some("gpu-5A1B2C3D")), Some(0));
        // The list ends at an entry that names no GPU, as CUDA reads it.
        assert_eq!(cuda_ordinal(3, u, Some("0,x,3")), None);
        assert_eq!(cuda_ordinal(3, u, Some("")), None);
    }

    fn config(limit: &str) -> Config {
        Config::from_vars(|n| (n == "CUQUOTA_LIMIT").then(|| limit.to_string())).unwrap()
    }

    #[test]
    fn limits_from_the_configuration() {
        let uuid = [9u8; 16];
        let total = 16 * GIB;
        assert_eq!(
            configured_limit(&config("1GiB"), Some(0), uuid, total),
            Some(GIB)
        );
        assert_eq!(
            configured_limit(&config("25%"), Some(0), uuid, total),
            Some(4 * GIB)
        );
        assert_eq!(
            configured_limit(&config("1:1GiB"), Some(0), uuid, total),
            None
        );
        let by_uuid = format!("{}:2GiB", cuquota_format::settings::format_uuid(&uuid));
        assert_eq!(
            configured_limit(&config(&by_uuid), None, uuid, total),
            Some(2 * GIB)
        );
        assert_eq!(configured_limit(&config("1GiB"), None, uuid, total), None);
        let unset = Config::from_vars(|_| None).unwrap();
        assert_eq!(configured_limit(&unset, Some(0), uuid, total), None);
    }

    #[test]
    fn quotas_without_books() {
        let q = |limit, used| Some(NvmlQuota { limit, used });
        assert_eq!(quota_without_books(Some(GIB), 5, None), q(GIB, 5));
        assert_eq!(quota_without_books(None, 5, None), None);
        // A group whose file does not exist yet: the process's own limit, nothing used.
        assert_eq!(quota_without_books(Some(GIB), 5, Some(None)), q(GIB, 0));
        let gpu = |limit| GpuReading {
            default_limit: UNSET,
            gpu: Some(GpuFigures {
                limit,
                in_use: 300 * MIB,
                members: vec![(1, 300 * MIB)],
            }),
        };
        // The group's limit applies, whatever the process's own.
        assert_eq!(
            quota_without_books(Some(2 * GIB), 0, Some(Some(&gpu(GIB)))),
            q(GIB, 300 * MIB)
        );
        assert_eq!(
            quota_without_books(Some(GIB), 0, Some(Some(&gpu(NO_LIMIT)))),
            None
        );
        let fresh = |default_limit| GpuReading {
            default_limit,
            gpu: None,
        };
        assert_eq!(
            quota_without_books(Some(GIB), 0, Some(Some(&fresh(UNSET)))),
            q(GIB, 0)
        );
        assert_eq!(
            quota_without_books(Some(GIB), 0, Some(Some(&fresh(3 * GIB)))),
            q(3 * GIB, 0)
        );
    }
}
