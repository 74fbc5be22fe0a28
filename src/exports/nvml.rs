//! NVML's memory figures under the quota: `nvmlDeviceGetMemoryInfo` (and `_v2`) and the
//! running-process lists (compute, graphics and MPS; each version), hooked as the driver's
//! functions are — exported for linked tools and handed out by `dlsym` on NVML's handle —
//! with their own table, [`NVML_HOOKS`], against `crate::nvml`'s declarations.
//!
//! Each hook calls the real function with the caller's arguments; on success, for a GPU with
//! a quota, it rewrites what NVML wrote: total = min(real total, quota), used = this
//! process's footprint or its group's in-use, free = the rest (never above the real free);
//! the entries of this process and of its group's living members carry their footprints. A
//! GPU without a quota, a process with `CUQUOTA_VIRTUALIZE=0` or a bad configuration, and
//! every other entry and function pass through untouched.
//!
//! Devices are matched by UUID (NVML ignores `CUDA_VISIBLE_DEVICES`). A process that has used
//! CUDA answers from its books; one that never has (nvidia-smi, nvitop, a monitoring script)
//! from its configuration and a read-only look at its group's file: it makes no engine, joins
//! nothing, creates no file and prints nothing.

use super::{frame, hooked, table};
use crate::engine::{
    configured_limit, cuda_ordinal, memory_told, quota_without_books, reserved_told, NvmlQuota,
};
use crate::ffi::{outs, Out};
use crate::in_hook;
use crate::lookup::Real;
use crate::nvml::{
    self as real, NvmlDevice, NvmlMemoryV1, NvmlMemoryV2, NvmlProcessInfoV1, NvmlProcessInfoV2,
    NvmlReturn, NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_MEMORY_V2, NVML_SUCCESS,
    UUID_BUFFER_SIZE,
};
use crate::process;
use cuquota_state::group::GroupFile;
use std::ffi::{c_char, c_uint};

/// A GPU this process governs with a quota, as NVML should show it.
struct Governed {
    quota: NvmlQuota,
    /// (pid, footprint) of this process and, in a group, of every living member.
    footprints: Vec<(u32, u64)>,
}

/// The real UUID text of an NVML device (`GPU-…`).
fn uuid_of(device: NvmlDevice) -> Option<String> {
    let f = real::nvmlDeviceGetUUID.get()?;
    let mut buf = [0 as c_char; UUID_BUFFER_SIZE];
    // SAFETY: a buffer of the length passed; NVML writes a NUL-terminated UUID there.
    if unsafe { f(device, buf.as_mut_ptr(), buf.len() as c_uint) } != NVML_SUCCESS {
        return None;
    }
    buf[UUID_BUFFER_SIZE - 1] = 0;
    // SAFETY: NUL-terminated just above.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    text.to_str().ok().map(str::to_string)
}

/// NVML's index of a device.
fn index_of(device: NvmlDevice) -> Option<u32> {
    let f = real::nvmlDeviceGetIndex.get()?;
    let mut index: c_uint = 0;
    // SAFETY: a valid out-pointer.
    (unsafe { f(device, &mut index) } == NVML_SUCCESS).then_some(index)
}

/// The device's real total memory (for a percentage limit).
fn real_total(device: NvmlDevice) -> Option<u64> {
    let f = real::nvmlDeviceGetMemoryInfo.get()?;
    let mut info = NvmlMemoryV1::default();
    // SAFETY: a handle the caller got from NVML and a valid out-struct.
    (unsafe { f(device, &mut info) } == NVML_SUCCESS).then_some(info.total)
}

/// What this process shows of `device` (real total memory `total`), or `None` to pass the
/// figures through: no quota there, virtualisation off, or a configuration that is not good.
fn governed(device: NvmlDevice, total: u64) -> Option<Governed> {
    let uuid_text = uuid_of(device)?;
    let uuid = cuquota_format::settings::parse_uuid(&uuid_text)?;
    let engine = process::made_engine();
    let read;
    let config = match engine {
        Some(e) => e.config.as_ref().ok()?,
        None => {
            read = process::read_config().ok()?;
            &read
        }
    };
    if !config.virtualize {
        return None;
    }
    // The CUDA ordinal: by UUID among the driver's devices when this process has used CUDA,
    // else from NVML's index and CUDA_VISIBLE_DEVICES (the driver is never started here).
    let known = engine.map(|e| e.device_uuids()).unwrap_or_default();
    let ordinal = match known.is_empty() {
        false => known
            .iter()
            .find(|(_, u)| *u == Some(uuid))
            .map(|(d, _)| *d),
        true => {
            let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
            cuda_ordinal(index_of(device)?, &uuid_text, visible.as_deref())
        }
    };
    let books = engine.zip(ordinal);
    let own_used = books.map(|(e, d)| e.footprint(d));
    let file = config.group_spec().map(|(dir, name)| {
        // A group file that cannot be read is no group yet, and one this process may not
        // trust decides nothing (its CUDA calls are refused): the process's own figures.
        (GroupFile::open_read_only(&dir, &name).ok().flatten()).filter(|f| f.trusted().is_ok())
    });
    let reading = file.as_ref().map(|f| f.as_ref().map(|f| f.read_gpu(uuid)));
    let quota = match books.and_then(|(e, d)| e.nvml_quota(d)) {
        Some(q) => q,
        None => {
            let own = configured_limit(config, ordinal, uuid, total);
            quota_without_books(
                own,
                own_used.unwrap_or(0),
                reading.as_ref().map(Option::as_ref),
            )?
        }
    };
    let mut footprints: Vec<(u32, u64)> = (reading.iter().flatten())
        .flat_map(|r| r.gpu.iter().flat_map(|g| g.members.iter()))
        .filter_map(|&(pid, bytes)| Some((u32::try_from(pid).ok()?, bytes)))
        .collect();
    if let Some(bytes) = own_used {
        // As NVML lists it: the outermost PID (in a PID namespace, not the one getpid gives).
        let pid = cuquota_state::identity::outer_pid();
        footprints.retain(|(p, _)| *p != pid);
        footprints.push((pid, bytes));
    }
    Some(Governed { quota, footprints })
}

hooked!(
    nvml nvmlDeviceGetMemoryInfo,
    |device: NvmlDevice, memory: *mut NvmlMemoryV1| {
        // SAFETY: the caller's arguments, passed on (a call from inside a hook).
        let nested = |f: real::nvmlDeviceGetMemoryInfo| unsafe { f(device, memory) };
        frame(&real::nvmlDeviceGetMemoryInfo, nested, |f| {
            // SAFETY: the caller's arguments, passed on; `memory` is its out-pointer.
            let (rc, out) = unsafe { (f(device, memory), Out::new(memory)) };
            if let (NVML_SUCCESS, Some(out)) = (rc, out) {
                let m = out.get();
                if let Some(g) = governed(device, m.total) {
                    let (total, free, used) = memory_told(m.total, m.free, g.quota);
                    out.set(NvmlMemoryV1 { total, free, used });
                }
            }
            rc
        })
    }
);

hooked!(
    nvml nvmlDeviceGetMemoryInfo_v2,
    |device: NvmlDevice, memory: *mut NvmlMemoryV2| {
        // SAFETY: the caller's arguments, passed on (a call from inside a hook).
        let nested = |f: real::nvmlDeviceGetMemoryInfo_v2| unsafe { f(device, memory) };
        frame(&real::nvmlDeviceGetMemoryInfo_v2, nested, |f| {
            // SAFETY: the caller's out-pointer (null is passed on for NVML to answer).
            let out = unsafe { Out::new(memory) };
            if out
                .as_ref()
                .is_some_and(|o| o.get().version != NVML_MEMORY_V2)
            {
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
            }
            // SAFETY: the caller's arguments, passed on.
            let rc = unsafe { f(device, memory) };
            if let (NVML_SUCCESS, Some(out)) = (rc, out) {
                let m = out.get();
                if let Some(g) = governed(device, m.total) {
                    let (total, free, used) = memory_told(m.total, m.free, g.quota);
                    let reserved = reserved_told(total, free, used);
                    out.set(NvmlMemoryV2 {
                        total,
                        reserved,
                        free,
                        used,
                        ..m
                    });
                }
            }
            rc
        })
    }
);

/// An entry of a running-process list.
trait Entry: Copy {
    fn pid(&self) -> u32;
    fn with_used(self, bytes: u64) -> Self;
}

impl Entry for NvmlProcessInfoV1 {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn with_used(self, used_gpu_memory: u64) -> Self {
        Self {
            used_gpu_memory,
            ..self
        }
    }
}

impl Entry for NvmlProcessInfoV2 {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn with_used(self, used_gpu_memory: u64) -> Self {
        Self {
            used_gpu_memory,
            ..self
        }
    }
}

/// A running-process query: the real call (its two-call size protocol untouched), then on
/// success the governed processes' entries get their footprints. Entries are read with
/// nvml.h's layout of the version called (16 bytes for v1, 24 for v2 and v3).
fn processes<T: Entry>(
    real: &'static Real<unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut T) -> NvmlReturn>,
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut T,
) -> NvmlReturn {
    // SAFETY (both calls): the caller's arguments, passed on.
    let call = |f: unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut T) -> NvmlReturn| unsafe {
        f(device, count, infos)
    };
    frame(real, call, |f| {
        let rc = in_hook::driver(|| call(f));
        // SAFETY: the caller's count pointer (null or valid, as NVML asks).
        let listed = unsafe { Out::new(count) }.map_or(0, |c| c.get() as usize);
        if rc != NVML_SUCCESS || listed == 0 || infos.is_null() {
            return rc;
        }
        let Some(g) = real_total(device).and_then(|t| governed(device, t)) else {
            return rc;
        };
        // SAFETY: on success NVML wrote `listed` entries into the caller's buffer.
        for entry in unsafe { outs(infos, listed) } {
            let e = entry.get();
            if let Some((_, bytes)) = g.footprints.iter().find(|(p, _)| *p == e.pid()) {
                entry.set(e.with_used(*bytes));
            }
        }
        rc
    })
}

/// The nine process-list hooks: (symbol, entry type).
macro_rules! process_hooks {
    ($($symbol:ident: $entry:ty;)*) => {$(
        hooked!(nvml $symbol, |device: NvmlDevice, count: *mut c_uint, infos: *mut $entry| {
            processes(&real::$symbol, device, count, infos)
        });
    )*};
}

process_hooks! {
    nvmlDeviceGetComputeRunningProcesses_v3: NvmlProcessInfoV2;
    nvmlDeviceGetComputeRunningProcesses_v2: NvmlProcessInfoV2;
    nvmlDeviceGetComputeRunningProcesses: NvmlProcessInfoV1;
    nvmlDeviceGetGraphicsRunningProcesses_v3: NvmlProcessInfoV2;
    nvmlDeviceGetGraphicsRunningProcesses_v2: NvmlProcessInfoV2;
    nvmlDeviceGetGraphicsRunningProcesses: NvmlProcessInfoV1;
    nvmlDeviceGetMPSComputeRunningProcesses_v3: NvmlProcessInfoV2;
    nvmlDeviceGetMPSComputeRunningProcesses_v2: NvmlProcessInfoV2;
    nvmlDeviceGetMPSComputeRunningProcesses: NvmlProcessInfoV1;
}

table!(
    nvml: nvmlDeviceGetMemoryInfo,
    nvmlDeviceGetMemoryInfo_v2,
    nvmlDeviceGetComputeRunningProcesses_v3,
    nvmlDeviceGetComputeRunningProcesses_v2,
    nvmlDeviceGetComputeRunningProcesses,
    nvmlDeviceGetGraphicsRunningProcesses_v3,
    nvmlDeviceGetGraphicsRunningProcesses_v2,
    nvmlDeviceGetGraphicsRunningProcesses,
    nvmlDeviceGetMPSComputeRunningProcesses_v3,
    nvmlDeviceGetMPSComputeRunningProcesses_v2,
    nvmlDeviceGetMPSComputeRunningProcesses,
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lookup::hooked_symbol;

    #[test]
    fn the_nvml_hooks_are_routed_by_name_only() {
        let names: Vec<_> = NVML_HOOKS.hooks.iter().map(|h| h.real.name()).collect();
        assert_eq!(names.len(), HOOKED.len());
        for name in [
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetComputeRunningProcesses",
        ] {
            let hook = hooked_symbol(name.as_bytes(), &NVML_HOOKS).expect(name);
            assert_eq!(hook.real.name(), name);
        }
        // Called by cuquota, never hooked: its own lookups stay the real functions.
        for name in ["nvmlInit_v2", "nvmlDeviceGetUUID", "nvmlDeviceGetIndex"] {
            assert!(
                hooked_symbol(name.as_bytes(), &NVML_HOOKS).is_none(),
                "{name}"
            );
        }
    }
}
