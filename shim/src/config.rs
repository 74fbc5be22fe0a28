//! The shim's settings, parsed from `CUDA_SHIM_*` environment variables.
//!
//! * `CUDA_SHIM_DEVICES`: number of simulated devices (default 1, at most 16).
//! * `CUDA_SHIM_MEMORY`: memory per device, one size for all or a comma list with one size
//!   per device (default `8GiB`).
//! * `CUDA_SHIM_DRIVER_VERSION`: what `cuDriverGetVersion` reports (default 12080); 13060 or
//!   more also gives a newer driver's `cuMemAlloc_v3` (`exports/newer.rs`).
//! * `CUDA_SHIM_FAIL`: fault injection rules, `FUNC:WHEN:CODE,...` (see [`crate::faults`]);
//!   a CODE `raiseSIG` raises signal SIG at the start of the call, which then runs as usual.
//! * `CUDA_SHIM_POOL_CHUNK`: the granularity in which memory pools and the graph memory
//!   pool reserve device memory (default `2MiB`, the VMM granularity the devices report
//!   from `cuMemGetAllocationGranularity`; not 0).
//! * `CUDA_SHIM_CONTEXT_MEMORY`: device memory each context takes from its creation to its
//!   end (default 0), a size like the others.
//! * `CUDA_SHIM_GREEN_CONTEXT_MEMORY`: device memory each green context takes itself, from
//!   its creation to its destruction, beside its primary context (default 0).
//! * `CUDA_SHIM_OTHER_PROCESS`: memory simulated other processes hold, `INDEX:PID:SIZE,...`
//!   (INDEX: the device's physical index, as NVML numbers it), as if each had called
//!   `cuShimOtherProcess`.
//! * `CUDA_VISIBLE_DEVICES`: the driver's own variable, honoured as the real driver does
//!   (see [`crate::devices::visible`]); never a bad setting.
//!
//! Parsing only: the exports read the process's settings once (`exports::settings`), report
//! a bad value once on stderr, and make `cuInit` fail on it.

pub const MAX_DEVICES: usize = 16;
const DEFAULT_MEMORY: u64 = 8 << 30;
pub const DEFAULT_DRIVER_VERSION: i32 = 12080;
/// Pools reserve in chunks of the devices' VMM allocation granularity (2 MiB).
pub const DEFAULT_POOL_CHUNK: u64 = 2 << 20;

/// When a fault rule fires, counting calls of one exported function from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Only the Nth call.
    Nth(u64),
    /// The Nth call and every later one.
    From(u64),
    /// Every call.
    Always,
}

/// What a fault rule does to the call it fires on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Return this code without doing anything.
    Fail(u32),
    /// Raise this signal in the calling thread, then run the call as usual: a signal that
    /// arrives while the driver runs (its handler interrupts whoever called the driver).
    Raise(i32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    pub func: String,
    pub when: When,
    pub fault: Fault,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Memory of each device, in bytes; its length is the device count.
    pub memory: Vec<u64>,
    pub driver_version: i32,
    pub faults: Vec<FaultRule>,
    /// `CUDA_SHIM_POOL_CHUNK`: the pool reservation granularity.
    pub pool_chunk: u64,
    /// Bytes each context takes (`CUDA_SHIM_CONTEXT_MEMORY`).
    pub context_memory: u64,
    /// Bytes each green context takes (`CUDA_SHIM_GREEN_CONTEXT_MEMORY`).
    pub green_context_memory: u64,
    /// `CUDA_SHIM_OTHER_PROCESS`: (physical index, pid, bytes).
    pub other_processes: Vec<(usize, u32, u64)>,
    /// `CUDA_VISIBLE_DEVICES` as set (`None`: unset).
    pub visible_devices: Option<String>,
}

/// Parses the settings that `lookup` returns; a fault rule may only name a function for
/// which `is_exported` holds. An error names the bad setting as `NAME=value`.
pub fn parse(
    lookup: impl Fn(&str) -> Option<std::ffi::OsString>,
    is_exported: impl Fn(&str) -> bool,
) -> Result<Config, String> {
    let var = |name: &str| -> Result<Option<String>, String> {
        match lookup(name) {
            None => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|v| format!("{name}={}", v.to_string_lossy())),
        }
    };
    let bad = |name: &str, value: &str| format!("{name}={value}");

    let devices = match var("CUDA_SHIM_DEVICES")? {
        None => 1,
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if n <= MAX_DEVICES => n,
            _ => return Err(bad("CUDA_SHIM_DEVICES", &v)),
        },
    };

    let memory = match var("CUDA_SHIM_MEMORY")? {
        None => vec![DEFAULT_MEMORY; devices],
        Some(v) => {
            let sizes: Option<Vec<u64>> = v.split(',').map(parse_size).collect();
            match sizes {
                Some(s) if s.contains(&0) => return Err(bad("CUDA_SHIM_MEMORY", &v)),
                Some(s) if s.len() == 1 => vec![s[0]; devices],
                Some(s) if s.len() == devices => s,
                _ => return Err(bad("CUDA_SHIM_MEMORY", &v)),
            }
        }
    };

    let driver_version = match var("CUDA_SHIM_DRIVER_VERSION")? {
        None => DEFAULT_DRIVER_VERSION,
        Some(v) => match v.trim().parse::<i32>() {
            Ok(n) if n > 0 => n,
            _ => return Err(bad("CUDA_SHIM_DRIVER_VERSION", &v)),
        },
    };

    let faults = match var("CUDA_SHIM_FAIL")? {
        None => Vec::new(),
        Some(v) => parse_faults(&v, is_exported).ok_or_else(|| bad("CUDA_SHIM_FAIL", &v))?,
    };

    // -- pool reservation granularity
    let pool_chunk = match var("CUDA_SHIM_POOL_CHUNK")? {
        None => DEFAULT_POOL_CHUNK,
        Some(v) => match parse_size(&v) {
            Some(n) if n > 0 => n,
            _ => return Err(bad("CUDA_SHIM_POOL_CHUNK", &v)),
        },
    };

    let context_memory = match var("CUDA_SHIM_CONTEXT_MEMORY")? {
        None => 0,
        Some(v) => parse_size(&v).ok_or_else(|| bad("CUDA_SHIM_CONTEXT_MEMORY", &v))?,
    };

    let green_context_memory = match var("CUDA_SHIM_GREEN_CONTEXT_MEMORY")? {
        None => 0,
        Some(v) => parse_size(&v).ok_or_else(|| bad("CUDA_SHIM_GREEN_CONTEXT_MEMORY", &v))?,
    };

    let other_processes = match var("CUDA_SHIM_OTHER_PROCESS")? {
        None => Vec::new(),
        Some(v) => parse_other_processes(&v, memory.len())
            .ok_or_else(|| bad("CUDA_SHIM_OTHER_PROCESS", &v))?,
    };

    // Not the shim's own setting: a value the driver cannot use hides devices, no more.
    let visible_devices = lookup("CUDA_VISIBLE_DEVICES").map(|v| v.to_string_lossy().into_owned());

    Ok(Config {
        memory,
        driver_version,
        faults,
        pool_chunk,
        context_memory,
        green_context_memory,
        other_processes,
        visible_devices,
    })
}

/// Parses `INDEX:PID:SIZE,...` (an empty list: none); INDEX must be below `devices`.
fn parse_other_processes(text: &str, devices: usize) -> Option<Vec<(usize, u32, u64)>> {
    if text.trim().is_empty() {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|entry| {
            let mut parts = entry.trim().split(':');
            let (index, pid, size) = (parts.next()?, parts.next()?, parts.next()?);
            if parts.next().is_some() {
                return None;
            }
            let index: usize = index.trim().parse().ok().filter(|&i| i < devices)?;
            Some((index, pid.trim().parse().ok()?, parse_size(size)?))
        })
        .collect()
}

/// Parses a size: an integer with an optional unit, case-insensitive. `K`, `M`, `G`, `T` and
/// `KiB` ... `TiB` are binary; `KB`, `MB`, `GB`, `TB` are decimal; no unit (or `B`) is bytes.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return None;
    }
    let number: u64 = digits.parse().ok()?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    number.checked_mul(multiplier)
}

/// Parses `FUNC:WHEN:CODE,...`; an empty list means no rules. FUNC must be a symbol the
/// shim exports, so that a misspelt name is reported instead of silently never firing.
fn parse_faults(text: &str, is_exported: impl Fn(&str) -> bool) -> Option<Vec<FaultRule>> {
    if text.trim().is_empty() {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|rule| {
            let mut parts = rule.trim().split(':');
            let (func, when, code) = (parts.next()?, parts.next()?, parts.next()?);
            if parts.next().is_some() || !is_exported(func) {
                return None;
            }
            Some(FaultRule {
                func: func.to_string(),
                when: parse_when(when)?,
                fault: parse_fault(code.trim())?,
            })
        })
        .collect()
}

/// A code (`2`) or a signal to raise (`raise10`).
fn parse_fault(text: &str) -> Option<Fault> {
    match text.strip_prefix("raise") {
        Some(sig) => Some(Fault::Raise(
            sig.parse().ok().filter(|s| (1..65).contains(s))?,
        )),
        None => Some(Fault::Fail(text.parse().ok()?)),
    }
}

fn parse_when(text: &str) -> Option<When> {
    let text = text.trim();
    if text == "*" {
        return Some(When::Always);
    }
    let (number, from) = match text.strip_suffix('+') {
        Some(n) => (n, true),
        None => (text, false),
    };
    let n: u64 = number.parse().ok().filter(|&n| n >= 1)?;
    Some(if from { When::From(n) } else { When::Nth(n) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;

    /// The exported functions these tests name in fault rules.
    const EXPORTED: &[&str] = &["cuMemAlloc_v2", "cuMemGetInfo_v2", "cuMemCreate"];

    fn parse_with(vars: &[(&str, &str)]) -> Result<Config, String> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        parse(|name| map.get(name).cloned(), |f| EXPORTED.contains(&f))
    }

    #[test]
    fn defaults() {
        let c = parse_with(&[]).unwrap();
        assert_eq!(c.memory, vec![8 << 30]);
        assert_eq!(c.driver_version, 12080);
        assert!(c.faults.is_empty());
        assert_eq!(c.pool_chunk, 2 << 20);
    }

    #[test]
    fn pool_chunk_setting() {
        let c = parse_with(&[("CUDA_SHIM_POOL_CHUNK", "32MiB")]).unwrap();
        assert_eq!(c.pool_chunk, 32 << 20);
        assert_eq!(
            parse_with(&[("CUDA_SHIM_POOL_CHUNK", "0")]),
            Err("CUDA_SHIM_POOL_CHUNK=0".to_string())
        );
        assert!(parse_with(&[("CUDA_SHIM_POOL_CHUNK", "big")]).is_err());
        assert_eq!(c.context_memory, 0);
        assert!(c.other_processes.is_empty());
        assert_eq!(c.visible_devices, None);
    }

    #[test]
    fn context_memory_other_processes_and_visible_devices() {
        let c = parse_with(&[
            ("CUDA_SHIM_DEVICES", "2"),
            ("CUDA_SHIM_CONTEXT_MEMORY", "512MiB"),
            ("CUDA_SHIM_GREEN_CONTEXT_MEMORY", "64MiB"),
            ("CUDA_SHIM_OTHER_PROCESS", "1:4242:1GiB, 0:7:100"),
            ("CUDA_VISIBLE_DEVICES", "1,nonsense"),
        ])
        .unwrap();
        assert_eq!(c.context_memory, 512 << 20);
        assert_eq!(c.green_context_memory, 64 << 20);
        assert_eq!(c.other_processes, vec![(1, 4242, 1 << 30), (0, 7, 100)]);
        assert_eq!(c.visible_devices.as_deref(), Some("1,nonsense"));
        for bad in ["2:1:1G", "0:1", "0:x:1G", "0:1:lots", "0:1:1G:2"] {
            assert_eq!(
                parse_with(&[("CUDA_SHIM_DEVICES", "2"), ("CUDA_SHIM_OTHER_PROCESS", bad)]),
                Err(format!("CUDA_SHIM_OTHER_PROCESS={bad}"))
            );
        }
        assert_eq!(
            parse_with(&[("CUDA_SHIM_CONTEXT_MEMORY", "big")]),
            Err("CUDA_SHIM_CONTEXT_MEMORY=big".to_string())
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("8GiB"), Some(8 << 30));
        assert_eq!(parse_size("8gib"), Some(8 << 30));
        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size(" 16 MiB "), Some(16 << 20));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("2KB"), Some(2000));
        assert_eq!(parse_size("3mb"), Some(3_000_000));
        assert_eq!(parse_size("1GB"), Some(1_000_000_000));
        assert_eq!(parse_size("1T"), Some(1 << 40));
        assert_eq!(parse_size("5b"), Some(5));
        for bad in [
            "",
            "G",
            "1.5G",
            "-1",
            "8XB",
            "99999999999999999999",
            "20000000T",
        ] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn device_count_and_memory_lists() {
        let c = parse_with(&[("CUDA_SHIM_DEVICES", "3"), ("CUDA_SHIM_MEMORY", "1GiB")]).unwrap();
        assert_eq!(c.memory, vec![1 << 30; 3]);
        let c = parse_with(&[
            ("CUDA_SHIM_DEVICES", "2"),
            ("CUDA_SHIM_MEMORY", "8GiB,16GiB"),
        ])
        .unwrap();
        assert_eq!(c.memory, vec![8 << 30, 16 << 30]);
        assert_eq!(
            parse_with(&[("CUDA_SHIM_DEVICES", "17")]),
            Err("CUDA_SHIM_DEVICES=17".to_string())
        );
        assert!(parse_with(&[("CUDA_SHIM_DEVICES", "x")]).is_err());
        assert!(
            parse_with(&[("CUDA_SHIM_DEVICES", "2"), ("CUDA_SHIM_MEMORY", "1G,2G,3G")]).is_err()
        );
        assert!(parse_with(&[("CUDA_SHIM_MEMORY", "0")]).is_err());
        assert_eq!(
            parse_with(&[("CUDA_SHIM_MEMORY", "lots")]),
            Err("CUDA_SHIM_MEMORY=lots".to_string())
        );
    }

    #[test]
    fn driver_version_setting() {
        let c = parse_with(&[("CUDA_SHIM_DRIVER_VERSION", "11040")]).unwrap();
        assert_eq!(c.driver_version, 11040);
        assert!(parse_with(&[("CUDA_SHIM_DRIVER_VERSION", "12.8")]).is_err());
        assert!(parse_with(&[("CUDA_SHIM_DRIVER_VERSION", "0")]).is_err());
    }

    #[test]
    fn fault_rules() {
        let c = parse_with(&[(
            "CUDA_SHIM_FAIL",
            "cuMemAlloc_v2:3:2, cuMemGetInfo_v2:2+:1,cuMemCreate:*:12345,cuMemCreate:2:raise10",
        )])
        .unwrap();
        assert_eq!(
            c.faults,
            vec![
                FaultRule {
                    func: "cuMemAlloc_v2".into(),
                    when: When::Nth(3),
                    fault: Fault::Fail(2)
                },
                FaultRule {
                    func: "cuMemGetInfo_v2".into(),
                    when: When::From(2),
                    fault: Fault::Fail(1)
                },
                FaultRule {
                    func: "cuMemCreate".into(),
                    when: When::Always,
                    fault: Fault::Fail(12345)
                },
                FaultRule {
                    func: "cuMemCreate".into(),
                    when: When::Nth(2),
                    fault: Fault::Raise(10)
                },
            ]
        );
        assert!(parse_with(&[("CUDA_SHIM_FAIL", "")])
            .unwrap()
            .faults
            .is_empty());
        for bad in [
            "cuMemAlloc_v2:0:2",
            "cuMemAlloc_v2:1",
            "cuMemAlloc_v2:1:2:3",
            "cuMemAlloc_v2:x:2",
            "cuMemAlloc_v2:1:-2",
            "cuMemAloc_v2:1:2",
            "cuMemAlloc_v2:1:2,",
            "cuMemAlloc_v2:1:raise",
            "cuMemAlloc_v2:1:raise0",
            "cuMemAlloc_v2:1:raise65",
        ] {
            assert!(parse_with(&[("CUDA_SHIM_FAIL", bad)]).is_err(), "{bad}");
        }
    }
}
