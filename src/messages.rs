//! The words of cuquota's log lines: a refusal, a back-off episode, the exit summary, the
//! configuration. Pure formatting; no I/O (episodes are grouped by the rule in
//! `cuquota_format::episodes`). Named apart from the CLI's `report` command, which reads traces.

use crate::config::Count;
use crate::config::{Config, DeviceId, Limits};
use crate::group::GroupShare;
use crate::quota::{Part, Usage};
use cuquota_format::episodes;
use cuquota_format::holder::Holder;
use cuquota_format::part::PerPart;
use cuquota_format::settings::format_uuid;
use cuquota_format::units::{human, Size};

/// `GPU 0 refused 4.00 GiB (4294967296 bytes) via cuMemAlloc_v2: quota 6.00 GiB, in use 3.10 GiB, 2.90 GiB left`
pub fn quota_refusal(device: u32, bytes: u64, api: &str, held: &Held) -> String {
    format!(
        "GPU {device} refused {} ({}) via {api}: {}",
        human(bytes),
        exact(bytes),
        quota_state(held)
    )
}

/// A context that does not fit: created, measured, and undone.
pub fn context_refusal(device: u32, bytes: u64, api: &str, held: &Held) -> String {
    let takes = format!("{} ({})", human(bytes), exact(bytes));
    if held.in_use == 0 && held.group.is_none() {
        return format!(
            "GPU {device} refused a new context via {api}: the context alone takes {takes} \
             of the quota {}",
            human(held.limit)
        );
    }
    format!(
        "GPU {device} refused a new context via {api}: it takes {takes}; {}",
        quota_state(held)
    )
}

/// A graph launch (or upload) whose allocations do not fit, after trimming.
pub fn graph_refusal(device: u32, bytes: u64, api: &str, held: &Held) -> String {
    format!(
        "GPU {device} refused a graph launch via {api}: its allocations need {} ({}) more \
         graph memory; {}",
        human(bytes),
        exact(bytes),
        quota_state(held)
    )
}

/// cuquota gave back this process's unused pool or graph memory to fit a request.
pub fn trimmed(device: u32, part: Part, released: u64, wanted: u64, api: &str) -> String {
    format!(
        "GPU {device}: trimmed {} of unused {} to fit {} via {api}",
        human(released),
        part.words(),
        human(wanted)
    )
}

/// The observe-mode twin of [`quota_refusal`]: the request went ahead.
pub fn would_refuse(device: u32, bytes: u64, api: &str, held: &Held) -> String {
    format!(
        "GPU {device} would refuse {} ({}) via {api}: {} (observe mode: allowed)",
        human(bytes),
        exact(bytes),
        quota_state(held)
    )
}

/// `4294967296 bytes`, `1 byte`.
fn exact(bytes: u64) -> String {
    if bytes == 1 {
        "1 byte".to_string()
    } else {
        format!("{bytes} bytes")
    }
}

/// What a quota held when it refused (or would have).
pub struct Held {
    /// The limit the request was checked against.
    pub limit: u64,
    /// What it held then, the request not included: the group's in a group.
    pub in_use: u64,
    /// This process's parts besides allocations.
    pub parts: PerPart<u64>,
    /// In a group: who holds the rest.
    pub group: Option<GroupShare>,
    /// In a group, for a refusal that is said: the other members holding it, most first.
    pub holders: Vec<Holder>,
    /// Why NVML's figure for this process could not be read, so that context memory no
    /// call announced may be missing from `in_use` (None: it was read, or is not used).
    pub unreconciled: Option<&'static str>,
}

/// How many holders a line names; the rest are counted.
const HOLDERS_NAMED: usize = 3;

/// `; held by pid 4242 (python serve.py) 700.00 MiB: allocations 200.00 MiB, pool cache
/// 500.00 MiB (cuMemPoolTrimTo in that process would return what it does not use); pid 4343
/// [abababababab] (trainer) 100.00 MiB; and 2 more (96.00 MiB)`, or nothing.
fn holders_words(holders: &[Holder]) -> String {
    if holders.is_empty() {
        return String::new();
    }
    let named: Vec<String> = holders
        .iter()
        .take(HOLDERS_NAMED)
        .map(holder_words)
        .collect();
    let rest = &holders[holders.len().min(HOLDERS_NAMED)..];
    let more = match rest.len() {
        0 => String::new(),
        n => format!(
            "; and {n} more ({})",
            human(rest.iter().map(|h| h.in_use).sum())
        ),
    };
    format!("; held by {}{more}", named.join("; "))
}

/// One holder: who, how much, and its parts where not all allocations, with the call that
/// would give back what a trimmable part keeps unused.
fn holder_words(h: &Holder) -> String {
    let mut parts = Vec::new();
    for part in Part::ALL {
        let bytes = h.part(part);
        if bytes == 0 {
            continue;
        }
        let (words, bytes) = (part.words(), human(bytes));
        parts.push(match part.trim_call() {
            Some(call) => format!(
                "{words} {bytes} ({call} in that process would return what it does not use)"
            ),
            None => format!("{words} {bytes}"),
        });
    }
    let breakdown = match parts.is_empty() {
        true => String::new(),
        false => format!(
            ": allocations {}, {}",
            human(h.allocations()),
            parts.join(", ")
        ),
    };
    format!("{} {}{breakdown}", h.who(), human(h.in_use))
}

/// `quota 6.00 GiB, in use 5.99 GiB (allocations 4.90 GiB, pool cache 600.00 MiB, context
/// 512.00 MiB), 10.00 MiB left`: the parts only when more than allocations hold the quota. In
/// a group: `group svc: quota 12.00 GiB, this process 4.10 GiB, 3 other members 7.85 GiB,
/// 50.00 MiB left`, and a limit lowered below what the members hold says so.
fn quota_state(held: &Held) -> String {
    match held.unreconciled {
        None => quota_figures(held),
        Some(why) => format!(
            "{}; context memory not checked against NVML: {why}",
            quota_figures(held)
        ),
    }
}

fn quota_figures(held: &Held) -> String {
    let (limit, parts) = (held.limit, &held.parts);
    let own = held.group.as_ref().map_or(held.in_use, |g| g.this_process);
    let others = parts.total();
    let breakdown = if others == 0 {
        String::new()
    } else {
        let mut words = vec![format!("allocations {}", human(own.saturating_sub(others)))];
        for part in Part::ALL {
            if parts[part] > 0 {
                words.push(format!("{} {}", part.words(), human(parts[part])));
            }
        }
        format!(" ({})", words.join(", "))
    };
    let left = human(limit.saturating_sub(held.in_use));
    match &held.group {
        None => format!(
            "quota {}, in use {}{breakdown}, {left} left",
            human(limit),
            human(held.in_use)
        ),
        Some(g) => {
            let lowered = if held.in_use > limit {
                " (lowered below what its members hold)"
            } else {
                ""
            };
            let members = match g.others {
                0 => "no other member holds any".to_string(),
                1 => format!("1 other member {}", human(g.others_bytes)),
                n => format!("{n} other members {}", human(g.others_bytes)),
            };
            format!(
                "group {}: quota {}{lowered}, this process {}{breakdown}, {members}, {left} \
                 left{}",
                g.name,
                human(limit),
                human(g.this_process),
                holders_words(&held.holders)
            )
        }
    }
}

/// The driver itself said no (the card is full, whatever the quota).
pub fn driver_refusal(
    device: u32,
    bytes: u64,
    api: &str,
    result: &str,
    driver_free: Option<u64>,
    limit: Option<u64>,
    in_use: u64,
) -> String {
    let free = match driver_free {
        Some(f) => format!(", driver free {}", human(f)),
        None => String::new(),
    };
    let quota = match limit {
        Some(l) => format!("quota {}, in use {}", human(l), human(in_use)),
        None => format!("in use {}, no quota", human(in_use)),
    };
    format!(
        "GPU {device}: the driver refused {} ({}) via {api}: {result}{free}; {quota}",
        human(bytes),
        exact(bytes)
    )
}

/// The most refused sizes one episode remembers; a longer one is shown as `a → … → z`.
pub const EPISODE_SIZES: usize = 24;

/// A run of refusals on one thread and device, grouped by the rule shared with
/// `cuquota report` (`cuquota_format::episodes`): the first sizes and the latest one kept.
pub type Episode = episodes::Episode<{ EPISODE_SIZES - 1 }, 1>;

pub use episodes::{EpisodeEnd, GaveUp};

/// The line that says how an episode ended (its first refusal has its own line). What was
/// seen is said as fact; what it likely means, as likely.
///
/// `GPU 0: the caller backed off 4.00 GiB → … → 2.08 MiB (73 refusals) and gave up; it got CUDA_ERROR_OUT_OF_MEMORY (no request of 2.08 MiB or less followed within 200 ms)`
pub fn outcome(
    device: u32,
    refused: &[u64],
    truncated: bool,
    refusals: u64,
    outcome: &EpisodeEnd,
) -> String {
    let one_size = refused.windows(2).all(|w| w[0] == w[1]);
    let count = format!("{refusals} refusal{}", if refusals == 1 { "" } else { "s" });
    let backed_off = matches!(outcome, EpisodeEnd::BackedOff { .. });
    let refused_words = if one_size && !backed_off {
        format!("was refused {} ({count})", human(refused[0]))
    } else {
        let mut steps: Vec<String> = refused.iter().map(|b| human(*b)).collect();
        if truncated {
            steps.insert(steps.len() - 1, "…".to_string());
        }
        format!("backed off {} ({count})", steps.join(" → "))
    };
    let last = refused.last().copied().unwrap_or(0);
    match outcome {
        EpisodeEnd::BackedOff { got, after_ns } => format!(
            "GPU {device}: the caller {refused_words} and got {} {} later; it keeps running \
             (likely an allocator shrinking its request, e.g. TensorFlow allow_growth)",
            human(*got),
            duration(*after_ns)
        ),
        EpisodeEnd::Retried { after_ns, .. } => format!(
            "GPU {device}: the caller {refused_words}; the next request of that size, {} later, \
             fit; it keeps running (likely an allocator that frees its cache and retries, \
             e.g. PyTorch or CuPy)",
            duration(*after_ns)
        ),
        EpisodeEnd::GaveUp(why) => {
            let why = match why {
                GaveUp::Gap => format!(
                    "no request of {} or less followed within {} ms",
                    human(last),
                    episodes::GAP_NS / 1_000_000
                ),
                GaveUp::Larger(b) => format!("its next request, {}, was larger", human(*b)),
                GaveUp::OtherDevice(d) => format!("its next refusal was on GPU {d}"),
                GaveUp::Exit => "the process ended before it asked again".to_string(),
            };
            format!(
                "GPU {device}: the caller {refused_words} and gave up; it got \
                 CUDA_ERROR_OUT_OF_MEMORY ({why})"
            )
        }
    }
}

/// `40 µs`, `1.3 ms`, `12 ms`, `15 s`.
fn duration(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{} µs", ns / 1000)
    } else if ns < 10_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else if ns < 10_000_000_000 {
        format!("{} ms", ns / 1_000_000)
    } else {
        format!("{} s", ns / 1_000_000_000)
    }
}

/// A CUDA version (1000·major + 10·minor) as `13.6`.
fn cuda_version(version: u32) -> String {
    format!("{}.{}", version / 1000, version % 1000 / 10)
}

/// `cuGetProcAddress handed out cuMemAlloc_v3, a variant of cuMemAlloc this build of cuquota does not know (driver CUDA 13.6): calls through it are not counted`
pub fn unknown_variant(
    symbol: &str,
    base: &str,
    via: &str,
    driver: Option<u32>,
    refused: bool,
) -> String {
    let driver = driver.map_or("driver version unknown".to_string(), |v| {
        format!("driver CUDA {}", cuda_version(v))
    });
    let what = format!("a variant of {base} this build of cuquota does not know ({driver})");
    if refused {
        format!(
            "{via} refused {symbol}, {what}: the policy says unknown_variants = refuse, so the \
             lookup fails as for an unknown symbol"
        )
    } else {
        format!(
            "{via} handed out {symbol}, {what}: calls through it are not counted (a policy's \
             unknown_variants = refuse closes this door)"
        )
    }
}

/// `2 lookups of variants this build of cuquota does not know were handed out: cuMemAlloc_v3`
pub fn unknown_variants_summary(count: u64, names: &[&str], refused: bool) -> String {
    let lookups = if count == 1 { "lookup" } else { "lookups" };
    let done = if refused { "refused" } else { "handed out" };
    let were = if count == 1 { "was" } else { "were" };
    let names = if names.is_empty() {
        String::new()
    } else {
        format!(": {}", names.join(", "))
    };
    format!(
        "{count} {lookups} of variants this build of cuquota does not know {were} {done}{names}"
    )
}

/// `GPU 0 summary: peak 5.91 GiB (6345981952 bytes) of quota 6.00 GiB, 37 allocations, 5 refusals, 2 live at exit (5.91 GiB)`
/// `live` is None when the live allocations could not be counted (the exit came while a hook
/// held their table: `exit()` from a signal handler).
pub fn summary(device: u32, usage: &Usage, live: Option<(u64, u64)>) -> String {
    let quota = match usage.limit {
        Some(l) => format!(" of quota {}", human(l)),
        None => ", no quota".to_string(),
    };
    let live = match live {
        Some((n, bytes)) => format!("{n} live at exit ({})", human(bytes)),
        None => "live at exit not counted (summary incomplete: exit during a hook)".to_string(),
    };
    let mut parts = String::new();
    if usage.part_peaks.values().any(|&p| p > 0) {
        let words: Vec<String> = Part::ALL
            .into_iter()
            .filter(|&p| usage.part_peaks[p] > 0)
            .map(|p| {
                format!(
                    "{} {} (peak {})",
                    p.words(),
                    human(usage.parts[p]),
                    human(usage.part_peaks[p])
                )
            })
            .collect();
        parts = format!("; besides allocations at exit: {}", words.join(", "));
    }
    if usage.trims > 0 {
        parts += &format!(
            "; {} trim{} gave back {}",
            usage.trims,
            if usage.trims == 1 { "" } else { "s" },
            human(usage.trimmed)
        );
    }
    format!(
        "GPU {device} summary: peak {} ({}){quota}, {} allocation{}, {} refusal{}, {live}{parts}",
        human(usage.peak),
        exact(usage.peak),
        usage.allocations,
        if usage.allocations == 1 { "" } else { "s" },
        usage.refusals,
        if usage.refusals == 1 { "" } else { "s" },
    )
}

/// A per-GPU limit names devices the process does not see.
pub fn unseen_devices(unseen: &[DeviceId], seen: &[(u32, Option<[u8; 16]>)]) -> String {
    let (names, sees) = device_lists(unseen, seen);
    format!(
        "CUQUOTA_LIMIT names {names}, which this process does not see, so that limit applies to no device; \
         it sees {sees}. CUDA_VISIBLE_DEVICES renumbers the GPUs a process sees from 0: \
         name a GPU by its UUID (nvidia-smi -L) to follow it"
    )
}

/// A per-GPU limit that names no GPU the process sees would leave every GPU unlimited: it
/// fails closed instead.
pub fn no_named_device_seen(unseen: &[DeviceId], seen: &[(u32, Option<[u8; 16]>)]) -> String {
    let (names, sees) = device_lists(unseen, seen);
    format!(
        "CUQUOTA_LIMIT names only {names}, which this process does not see, so it would run with \
         no limit at all: CUDA calls fail with CUDA_ERROR_INVALID_VALUE instead. It sees {sees}; \
         CUDA_VISIBLE_DEVICES renumbers the GPUs a process sees from 0: name a GPU by its UUID \
         (nvidia-smi -L) to follow it"
    )
}

/// (`GPU 3, GPU 5`, `GPU 0 (GPU-…), GPU 1 (GPU-…)`): the GPUs a limit names, those seen.
fn device_lists(unseen: &[DeviceId], seen: &[(u32, Option<[u8; 16]>)]) -> (String, String) {
    let names = unseen
        .iter()
        .map(|d| format!("GPU {d}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sees = seen
        .iter()
        .map(|(d, u)| match u {
            Some(u) => format!("GPU {d} ({})", format_uuid(u)),
            None => format!("GPU {d}"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    (names, sees)
}

/// `CUQUOTA_LOG_LEVEL=info`, once the driver knows its devices: each one's quota, resolved.
pub fn device_quotas(quotas: &[(u32, Option<u64>)]) -> String {
    let each = quotas
        .iter()
        .map(|(d, q)| match q {
            Some(crate::quota::UNLIMITED) => format!("GPU {d} unlimited"),
            Some(b) => format!("GPU {d} {} ({b} bytes)", human(*b)),
            None => format!("GPU {d} unknown (the driver did not say its memory)"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!("quotas: {each}")
}

/// `CUQUOTA_LOG_LEVEL=info`: the effective configuration.
/// `trace_path`: the trace template expanded as the trace will expand it (`%t` as of now; the
/// file is made at the first event, with `.1`… if the name is taken: the line at exit says
/// where it went).
pub fn config_line(c: &Config, trace_path: Option<&str>) -> String {
    let describe = |s: Size| match s {
        Size::Bytes(b) => format!("{} ({b} bytes)", human(b)),
        Size::Fraction {
            numerator,
            denominator,
        } => format!(
            "{}% of the device's memory",
            numerator as f64 * 100.0 / denominator as f64
        ),
    };
    let limits = match &c.limits {
        Limits::None => "none (observing only)".to_string(),
        Limits::All(s) => format!("{} on every device", describe(*s)),
        Limits::PerDevice(list) => {
            list.iter()
                .map(|(d, s)| format!("GPU {d} {}", describe(*s)))
                .collect::<Vec<_>>()
                .join(", ")
                + ", other devices unlimited"
        }
    };
    let count = match (c.count, c.context) {
        (Count::Allocations, _) => "allocations".to_string(),
        (Count::Footprint, None) => "footprint (context memory measured)".to_string(),
        (Count::Footprint, Some(0)) => "footprint (context memory not counted)".to_string(),
        (Count::Footprint, Some(b)) => format!("footprint (context memory {} each)", human(b)),
    };
    // Said only when on: the line is otherwise as it always was.
    let stacks = match (c.stacks, &c.trace) {
        (0, _) | (_, None) => String::new(),
        (n, Some(_)) => format!(" with call stacks ({n} frames)"),
    };
    format!(
        "config: limit {limits}; mode {}; count {count}; virtualize {}; trace {}{stacks}",
        c.mode.name(),
        if c.virtualize { "on" } else { "off" },
        match (c.trace.as_deref().map(|t| t.to_string_lossy()), trace_path) {
            (None, _) => "off".to_string(),
            (Some(t), Some(path)) if *t != *path => format!("{path} (CUQUOTA_TRACE={t})"),
            (Some(t), _) => t.into_owned(),
        },
    )
}

// ---- groups ------------------------------------------------------------------------------

/// A member's own limit differs from its group's: the group's applies.
pub fn group_limit_differs(device: u32, group: &str, own: u64, limit: u64) -> String {
    format!(
        "GPU {device}: this process's limit {} differs from group {group}'s {}; the group's \
         applies (`cuquota set {group} --limit …` changes it)",
        limit_words(own),
        limit_words(limit)
    )
}

/// `cuquota set` moved a group's limit while this process ran.
pub fn group_limit_moved(device: u32, group: &str, before: u64, limit: u64) -> String {
    format!(
        "GPU {device}: group {group}'s quota is now {} (was {}): changed by `cuquota set`",
        limit_words(limit),
        limit_words(before)
    )
}

/// The exit summary's tail in a group: `; group svc: peak 7.90 GiB`.
pub fn group_summary(group: &str, peak: u64) -> String {
    format!("; group {group}: peak {} of all its members", human(peak))
}

/// A memory location this build cannot place on a GPU or the host: the call is refused
/// rather than its memory passed as host memory, uncharged.
pub fn unknown_location(api: &str, kind: i32, id: i32) -> String {
    format!(
        "refused {api}: memory location type {kind} (id {id}) is not one cuquota knows \
         (DEVICE, DEVICE_LOCALITY_DOMAIN, HOST, HOST_NUMA, HOST_NUMA_CURRENT), so its memory \
         cannot be charged; the call fails with CUDA_ERROR_NOT_SUPPORTED"
    )
}

/// At info: the process cannot be listed by `cuquota top` (its quota works all the same).
pub fn not_registered(why: &str) -> String {
    format!("this process is not listed for cuquota top and metrics ({why})")
}

/// The group's state cannot be used: every CUDA call fails.
pub fn group_unusable(group: &str, why: &str) -> String {
    format!(
        "CUQUOTA_GROUP={group}: its quota cannot be used ({why}). CUDA calls fail with \
         CUDA_ERROR_INVALID_VALUE until it is fixed"
    )
}

fn limit_words(limit: u64) -> String {
    match limit {
        crate::quota::UNLIMITED => "none".to_string(),
        l => format!("{} ({})", human(l), exact(l)),
    }
}

// ---- context memory ---------------------------------------------------------------------

/// At `info`, once: NVML could not be used, so contexts are not measured.
pub fn nvml_absent(why: &str) -> String {
    format!(
        "NVML is not available ({why}): the memory of contexts is not measured \
         (CUQUOTA_CONTEXT=SIZE counts SIZE per context)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuquota_format::part::PerPart;

    fn held(limit: u64, in_use: u64, parts: [u64; Part::ALL.len()]) -> Held {
        Held {
            limit,
            in_use,
            parts: PerPart(parts),
            group: None,
            holders: Vec::new(),
            unreconciled: None,
        }
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn unknown_variant_lines() {
        assert_eq!(
            unknown_variant(
                "cuMemAlloc_v3",
                "cuMemAlloc",
                "cuGetProcAddress",
                Some(13060),
                false
            ),
            "cuGetProcAddress handed out cuMemAlloc_v3, a variant of cuMemAlloc this build of \
             cuquota does not know (driver CUDA 13.6): calls through it are not counted (a \
             policy's unknown_variants = refuse closes this door)"
        );
        assert_eq!(
            unknown_variant("cuMemAlloc_v3", "cuMemAlloc", "dlsym", None, true),
            "dlsym refused cuMemAlloc_v3, a variant of cuMemAlloc this build of cuquota does \
             not know (driver version unknown): the policy says unknown_variants = refuse, so \
             the lookup fails as for an unknown symbol"
        );
        assert_eq!(
            unknown_variants_summary(1, &[], true),
            "1 lookup of variants this build of cuquota does not know was refused"
        );
    }

    #[test]
    fn refusal_lines() {
        assert_eq!(
            quota_refusal(0, 4 * GIB, "cuMemAlloc_v2", &held(6 * GIB, 3_328_599_654, [0; Part::ALL.len()])),
            "GPU 0 refused 4.00 GiB (4294967296 bytes) via cuMemAlloc_v2: quota 6.00 GiB, in use 3.10 GiB, 2.90 GiB left"
        );
        assert_eq!(
            would_refuse(1, 2048, "cuMemCreate", &held(1024, 0, [0; Part::ALL.len()])),
            "GPU 1 would refuse 2.00 KiB (2048 bytes) via cuMemCreate: quota 1.00 KiB, in use 0 B, 1.00 KiB left (observe mode: allowed)"
        );
        assert_eq!(
            driver_refusal(0, GIB, "cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY", Some(512 << 20), None, 7 * GIB),
            "GPU 0: the driver refused 1.00 GiB (1073741824 bytes) via cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY, driver free 512.00 MiB; in use 7.00 GiB, no quota"
        );
    }

    #[test]
    fn episode_outcomes() {
        const MS: u64 = 1_000_000;
        let mut e = Episode::start(0, 4 * GIB, 0);
        assert_eq!(e.refused(0, 3_865_470_566, MS), None);
        assert_eq!(e.refused(0, 3_478_923_509, 2 * MS), None);
        let sizes: Vec<u64> = e.sizes().collect();
        let o = e.succeeded(0, 3_131_031_158, 3 * MS).unwrap();
        assert_eq!(
            outcome(0, &sizes, false, 3, &o),
            "GPU 0: the caller backed off 4.00 GiB → 3.60 GiB → 3.24 GiB (3 refusals) and got 2.92 GiB 1.0 ms later; it keeps running (likely an allocator shrinking its request, e.g. TensorFlow allow_growth)"
        );
        let retried = EpisodeEnd::Retried {
            got: GIB,
            after_ns: 25 * MS,
        };
        assert_eq!(
            outcome(2, &[GIB, GIB], false, 2, &retried),
            "GPU 2: the caller was refused 1.00 GiB (2 refusals); the next request of that size, 25 ms later, fit; it keeps running (likely an allocator that frees its cache and retries, e.g. PyTorch or CuPy)"
        );
        let mut long = Episode::start(0, 4 * GIB, 0);
        for i in 1..73 {
            long.refused(0, (4 * GIB) >> (i / 6), i);
        }
        let sizes: Vec<u64> = long.sizes().collect();
        assert_eq!(
            outcome(0, &sizes, long.truncated(), long.refusals(), &long.at_exit(GIB)),
            "GPU 0: the caller backed off 4.00 GiB → 4.00 GiB → 4.00 GiB → 4.00 GiB → 4.00 GiB → 4.00 GiB → 2.00 GiB → 2.00 GiB → 2.00 GiB → 2.00 GiB → 2.00 GiB → 2.00 GiB → 1.00 GiB → 1.00 GiB → 1.00 GiB → 1.00 GiB → 1.00 GiB → 1.00 GiB → 512.00 MiB → 512.00 MiB → 512.00 MiB → 512.00 MiB → 512.00 MiB → … → 1.00 MiB (73 refusals) and gave up; it got CUDA_ERROR_OUT_OF_MEMORY (no request of 1.00 MiB or less followed within 200 ms)"
        );
        for (why, words) in [
            (
                GaveUp::Larger(8 * GIB),
                "(its next request, 8.00 GiB, was larger)",
            ),
            (GaveUp::OtherDevice(1), "(its next refusal was on GPU 1)"),
            (GaveUp::Exit, "(the process ended before it asked again)"),
        ] {
            assert_eq!(
                outcome(0, &[4 * GIB], false, 1, &EpisodeEnd::GaveUp(why)),
                format!("GPU 0: the caller was refused 4.00 GiB (1 refusal) and gave up; it got CUDA_ERROR_OUT_OF_MEMORY {words}")
            );
        }
    }

    #[test]
    fn a_holders_trimmable_parts_name_their_trim_call() {
        const MIB: u64 = 1 << 20;
        let holder = Holder {
            pid: 4242,
            command: "serve".into(),
            in_use: 700 * MIB,
            parts: [
                ("pool_cache", 300 * MIB),
                ("graph", 100 * MIB),
                ("context", 50 * MIB),
            ]
            .map(|(name, bytes)| (name.to_string(), bytes))
            .into(),
            ..Holder::default()
        };
        assert_eq!(
            holder_words(&holder),
            "pid 4242 (serve) 700.00 MiB: allocations 250.00 MiB, pool cache 300.00 MiB \
             (cuMemPoolTrimTo in that process would return what it does not use), graph \
             memory 100.00 MiB (cuDeviceGraphMemTrim in that process would return what it does \
             not use), context 50.00 MiB"
        );
    }

    #[test]
    fn footprint_lines_name_the_parts() {
        const MIB: u64 = 1 << 20;
        let parts = [600 * MIB, 0, 512 * MIB];
        let in_use = 6 * GIB - 10 * MIB;
        assert_eq!(
            quota_refusal(0, GIB, "cuMemAlloc_v2", &held(6 * GIB, in_use, parts)),
            "GPU 0 refused 1.00 GiB (1073741824 bytes) via cuMemAlloc_v2: quota 6.00 GiB, \
             in use 5.99 GiB (allocations 4.90 GiB, pool cache 600.00 MiB, context 512.00 MiB), \
             10.00 MiB left"
        );
        assert_eq!(
            context_refusal(
                1,
                512 * MIB,
                "cuDevicePrimaryCtxRetain",
                &held(256 * MIB, 0, [0; Part::ALL.len()])
            ),
            "GPU 1 refused a new context via cuDevicePrimaryCtxRetain: the context alone takes \
             512.00 MiB (536870912 bytes) of the quota 256.00 MiB"
        );
        assert_eq!(
            context_refusal(
                0,
                512 * MIB,
                "cuCtxCreate_v2",
                &held(GIB, 768 * MIB, [0, 0, 256 * MIB])
            ),
            "GPU 0 refused a new context via cuCtxCreate_v2: it takes 512.00 MiB (536870912 \
             bytes); quota 1.00 GiB, in use 768.00 MiB (allocations 512.00 MiB, context \
             256.00 MiB), 256.00 MiB left"
        );
        assert_eq!(
            graph_refusal(
                0,
                2 * GIB,
                "cuGraphLaunch",
                &held(6 * GIB, 5 * GIB, [0, 2 * GIB, 0])
            ),
            "GPU 0 refused a graph launch via cuGraphLaunch: its allocations need 2.00 GiB \
             (2147483648 bytes) more graph memory; quota 6.00 GiB, in use 5.00 GiB (allocations \
             3.00 GiB, graph memory 2.00 GiB), 1.00 GiB left"
        );
        assert_eq!(
            trimmed(0, Part::PoolCache, 600 * MIB, GIB, "cuMemAlloc_v2"),
            "GPU 0: trimmed 600.00 MiB of unused pool cache to fit 1.00 GiB via cuMemAlloc_v2"
        );
        let usage = Usage {
            limit: Some(GIB),
            peak: GIB,
            allocations: 2,
            parts: PerPart([0, 0, 256 * MIB]),
            part_peaks: PerPart([600 * MIB, 0, 256 * MIB]),
            trims: 1,
            trimmed: 600 * MIB,
            ..Usage::default()
        };
        assert!(summary(0, &usage, Some((0, 0))).ends_with(
            "0 live at exit (0 B); besides allocations at exit: pool cache 0 B (peak 600.00 MiB), \
             context 256.00 MiB (peak 256.00 MiB); 1 trim gave back 600.00 MiB"
        ));
    }

    #[test]
    fn config_line_words() {
        let config = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Config::from_vars(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
                .unwrap()
        };
        assert_eq!(
            config_line(&config(&[("CUQUOTA_LIMIT", "0:1GiB,1:25%")]), None),
            "config: limit GPU 0 1.00 GiB (1073741824 bytes), GPU 1 25% of the device's memory, \
             other devices unlimited; mode enforce; count footprint (context memory measured); \
             virtualize on; trace off"
        );
        assert_eq!(
            config_line(&config(&[
                ("CUQUOTA_MODE", "observe"),
                ("CUQUOTA_VIRTUALIZE", "0"),
                ("CUQUOTA_TRACE", "t-%p.jsonl"),
                ("CUQUOTA_COUNT", "allocations"),
            ]), Some("/tmp/t-42.jsonl")),
            "config: limit none (observing only); mode observe; count allocations; virtualize off; \
             trace /tmp/t-42.jsonl (CUQUOTA_TRACE=t-%p.jsonl)"
        );
        assert_eq!(
            config_line(
                &config(&[("CUQUOTA_TRACE", "/tmp/t.jsonl")]),
                Some("/tmp/t.jsonl")
            ),
            "config: limit none (observing only); mode enforce; count footprint (context memory \
             measured); virtualize on; trace /tmp/t.jsonl"
        );
    }

    #[test]
    fn summary_line() {
        let usage = Usage {
            limit: Some(6 * GIB),
            in_use: 0,
            peak: 6_345_981_952,
            allocations: 37,
            refusals: 5,
            ..Usage::default()
        };
        assert_eq!(
            summary(0, &usage, Some((2, 6_345_981_952))),
            "GPU 0 summary: peak 5.91 GiB (6345981952 bytes) of quota 6.00 GiB, 37 allocations, 5 refusals, 2 live at exit (5.91 GiB)"
        );
        let none = Usage {
            limit: None,
            allocations: 1,
            refusals: 1,
            ..usage
        };
        assert!(summary(0, &none, Some((0, 0))).contains(
            "(6345981952 bytes), no quota, 1 allocation, 1 refusal, 0 live at exit (0 B)"
        ));
        assert!(summary(0, &none, None).ends_with(
            ", 1 refusal, live at exit not counted (summary incomplete: exit during a hook)"
        ));
    }
}
