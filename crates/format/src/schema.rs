//! The trace file format (JSON Lines, schema 1): the serde types the interposer's writer
//! produces and the `cuquota` CLI reads.
//!
//! One JSON object per line. The first line is a [`Header`], then one line per event
//! ([`EventLine`]), and on a clean exit (or SIGTERM/SIGINT) a [`Summary`] last. Readers must
//! ignore fields and line types they do not know: new ones may be added within schema 1.
//!
//! A new part of the footprint is a variant of [`Part`] (`crate::part`): the `part` names,
//! the CLI's figures and tracks follow from it; only the summary names each part's fields
//! (see [`SummaryDevice::part_mut`]).
//!
//! A new event type (or field) is added in all of these places:
//! - here: its name in [`kind`], its fields in [`EventLine`];
//! - the fast path of the reader (`fastline.rs`): every new key, or such lines take the slow
//!   path (still correct, three times slower);
//! - the interposer's writer: `src/trace/mod.rs` (`EventKind`) and `src/trace/encode.rs`
//!   (the line's prefix and fields, and its round-trip tests), and the code that emits it;
//! - the CLI (`crates/cli`), whose one walk (`walk.rs`) hands every line to `report`
//!   (`report/build.rs`, `Process::event`), `export.rs` (the Chrome trace) and `plot.rs`,
//!   each of which skips types it does not list;
//! - the README's trace schema section;
//! - the tests: the golden traces and their expected reports, and the line generator of
//!   `tests/integration/reliability_hostile_input.rs`.

use crate::part::{Part, PerPart};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// Bumped only for incompatible changes (a field removed or its meaning changed).
pub const SCHEMA_VERSION: u32 = 1;

/// `"type"` values of the lines.
pub mod kind {
    pub const HEADER: &str = "header";
    pub const ALLOC: &str = "alloc";
    pub const FREE: &str = "free";
    pub const REFUSED: &str = "refused";
    pub const MEMINFO: &str = "meminfo";
    pub const BACKOFF: &str = "backoff";
    /// A context destroyed or reset: the driver freed its allocations (`ptrs`, `count`,
    /// `bytes` in all) with it.
    pub const CONTEXT: &str = "context";
    /// Written by the writer when events were dropped since the previous batch.
    pub const DROPPED: &str = "dropped";
    /// A part of the footprint other than allocations changed on `dev`: `part` (one of
    /// [`super::part`]) is now `bytes` in all (absolute, not a delta).
    pub const FOOTPRINT: &str = "footprint";
    /// cuquota trimmed this process's pools or graph memory (`part`) by `bytes` to make room
    /// for a request through `api`; a `footprint` line with the part's new total follows.
    pub const TRIM: &str = "trim";
    /// The quota in force changed (a group's, by `cuquota set`): `limit` and `before`.
    pub const LIMIT: &str = "limit";
    /// A lookup (`dlsym`, `cuGetProcAddress`) gave the program a variant of a hooked driver
    /// function that this build of cuquota does not know (`api`: its symbol; `driver`: the
    /// driver's version), so its calls are not counted; `result` `CUDA_ERROR_NOT_FOUND`: the
    /// policy refused it and the lookup failed. Not a device's event (`dev` 0, `in_use` 0).
    pub const UNKNOWN_VARIANT: &str = "unknown_variant";
    pub const SUMMARY: &str = "summary";
    /// A call stack (`CUQUOTA_STACKS`), written once before the first event that names it
    /// by `id` (an `alloc` line's `stack`): see [`super::StackLine`].
    pub const STACK: &str = "stack";
    /// A module loaded in the process, written before the stacks whose frames lie in it:
    /// see [`super::ModuleLine`].
    pub const MODULE: &str = "module";
}

/// `"part"` values of `footprint` and `trim` lines: the parts of a device's footprint besides
/// the allocations (which are `in_use` minus these). The names are [`Part::name`]'s; code
/// that handles every part goes through [`Part::ALL`] and [`Part::from_name`] instead.
pub mod part {
    use crate::part::Part;
    /// What the process's contexts take on the device (measured, or `CUQUOTA_CONTEXT`).
    pub const CONTEXT: &str = Part::Context.name();
    /// Memory pools' reservation beyond their live allocations.
    pub const POOL_CACHE: &str = Part::PoolCache.name();
    /// The device's graph memory reservation.
    pub const GRAPH: &str = Part::Graph.name();
}

/// `"count"` values of the header: what the quota counts.
pub mod count {
    /// The whole footprint: allocations, pool cache, graph memory and contexts.
    pub const FOOTPRINT: &str = "footprint";
    /// Allocations only (what traces without `count` counted).
    pub const ALLOCATIONS: &str = "allocations";
}

/// First line of every trace file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    #[serde(rename = "type")]
    pub kind: String,
    pub schema: u32,
    /// cuquota's version (the crate version).
    pub version: String,
    pub pid: u32,
    pub host: String,
    pub rank: u32,
    pub argv: Vec<String>,
    /// Wall-clock start of the trace; every `t_ns` counts from here (on the monotonic clock).
    pub start_unix_ns: u64,
    /// `"enforce"` or `"observe"`.
    pub mode: String,
    pub devices: Vec<HeaderDevice>,
    /// What the quota counts: [`count::FOOTPRINT`] or [`count::ALLOCATIONS`]; absent (older
    /// traces) means allocations. Written `quota_counts`: `count` is a `dropped` and
    /// `context` line's number, and a flat reader of every line would trip on a word there.
    #[serde(
        rename = "quota_counts",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub count: Option<String>,
    /// The group whose quota the process shared (`CUQUOTA_GROUP`); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

impl Header {
    /// Whether the quota counted the whole footprint (`in_use` includes every part).
    pub fn counts_footprint(&self) -> bool {
        self.count.as_deref() == Some(count::FOOTPRINT)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeaderDevice {
    pub ordinal: u32,
    pub name: String,
    /// The device's real total memory in bytes.
    pub total: u64,
    /// The effective quota in bytes; null when the device is unlimited.
    pub quota: Option<u64>,
}

/// Every event line, read flat: the fields of all event types, absent ones defaulted.
/// Borrowed from the line so that reading allocates nothing per event.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct EventLine<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Cow<'a, str>,
    /// Nanoseconds since `start_unix_ns` (monotonic clock).
    #[serde(default)]
    pub t_ns: u64,
    /// OS thread id (gettid) of the calling thread.
    #[serde(default)]
    pub tid: u32,
    #[serde(default)]
    pub dev: u32,
    #[serde(default, borrow)]
    pub api: Cow<'a, str>,
    /// Device pointer or `cuMemCreate` handle as a hex string (`"0x7f0000000000"`).
    #[serde(default, borrow)]
    pub ptr: Cow<'a, str>,
    #[serde(default)]
    pub bytes: u64,
    /// `CUresult` name returned to the caller (`"CUDA_SUCCESS"`, or `"CUresult 12345"`).
    #[serde(default, borrow)]
    pub result: Cow<'a, str>,
    /// Bytes charged on `dev` after the event.
    #[serde(default)]
    pub in_use: u64,
    /// refused: `"quota"` or `"driver"`.
    #[serde(default, borrow)]
    pub reason: Option<Cow<'a, str>>,
    /// refused, observe mode: the quota would have refused it, and the call went ahead
    /// (`result` is what enforce mode would have returned).
    #[serde(default)]
    pub observed: bool,
    /// refused by the quota where NVML's figure for this process could not be read, so that
    /// context memory no call announced may be missing from `in_use`: why.
    #[serde(default, borrow)]
    pub unreconciled: Option<Cow<'a, str>>,
    #[serde(default)]
    pub told_free: u64,
    #[serde(default)]
    pub told_total: u64,
    #[serde(default)]
    pub real_free: u64,
    #[serde(default)]
    pub real_total: u64,
    /// backoff: the refused sizes in order, then the size that succeeded (none when the caller
    /// gave up: then `result` is what it got).
    #[serde(default)]
    pub sizes: Option<Vec<u64>>,
    /// dropped: events lost since the previous batch because the buffer was full;
    /// context: allocations freed with the context.
    #[serde(default)]
    pub count: u64,
    /// context: the pointers and handles freed with the context, hex strings as `ptr`.
    #[serde(default, borrow)]
    pub ptrs: Option<Vec<Cow<'a, str>>>,
    /// footprint, trim: which part (one of [`part`]).
    #[serde(default, borrow)]
    pub part: Option<Cow<'a, str>>,
    /// refused by a group's quota: the group, what it held then (the request not included;
    /// `in_use` is this process's own) and its limit.
    #[serde(default, borrow)]
    pub group: Option<Cow<'a, str>>,
    #[serde(default)]
    pub group_in_use: Option<u64>,
    #[serde(default)]
    pub group_limit: Option<u64>,
    /// refused by a group's quota, when its line was printed: the other members holding the
    /// group's quota on the GPU, most first.
    #[serde(default)]
    pub holders: Option<Vec<crate::holder::Holder>>,
    /// limit: the quota from now on and the one before (null: none).
    #[serde(default)]
    pub limit: Option<u64>,
    #[serde(default)]
    pub before: Option<u64>,
    /// alloc: the id of its call stack (a `stack` line's `id`); 0: none recorded.
    #[serde(default)]
    pub stack: u64,
    /// stack: its id.
    #[serde(default)]
    pub id: u64,
    /// stack: return addresses, innermost first, hex strings as `ptr`.
    #[serde(default, borrow)]
    pub frames: Option<Vec<Cow<'a, str>>>,
    /// module: its file, as the process saw it.
    #[serde(default, borrow)]
    pub path: Option<Cow<'a, str>>,
    /// module: the load bias, hex (an address minus the same address in the file).
    #[serde(default, borrow)]
    pub base: Option<Cow<'a, str>>,
    /// module: where its loaded segments lay, `[lo, hi)`, hex.
    #[serde(default, borrow)]
    pub lo: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub hi: Option<Cow<'a, str>>,
    /// module: its GNU build id, lowercase hex (empty: none).
    #[serde(default, borrow)]
    pub build_id: Option<Cow<'a, str>>,
    /// unknown_variant: the driver's version (`cuDriverGetVersion`; 0: it could not say).
    #[serde(default)]
    pub driver: Option<u32>,
}

/// A `stack` line: one distinct call stack of the allocations (`CUQUOTA_STACKS=N`, at most N
/// frames), innermost first, cuquota's own frames left out. Return addresses: a symboliser
/// looks up `address - 1` (the call instruction).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StackLine {
    #[serde(rename = "type")]
    pub kind: String,
    /// The time of the first event after it, so that lines stay in time order.
    pub t_ns: u64,
    pub id: u64,
    pub frames: Vec<String>,
}

/// A `module` line: a module loaded in the process when its stacks were written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModuleLine {
    #[serde(rename = "type")]
    pub kind: String,
    /// As a stack line's.
    pub t_ns: u64,
    pub path: String,
    /// The load bias (hex): a frame's address in the file is `address - base`.
    pub base: String,
    pub lo: String,
    pub hi: String,
    /// GNU build id (hex, empty: none): finds the file, or its debug file, when the path
    /// is gone or holds another build.
    pub build_id: String,
}

/// Last line, written at exit (or on SIGTERM/SIGINT) after the final flush.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    #[serde(rename = "type")]
    pub kind: String,
    /// When the summary was written (ns since start).
    pub t_ns: u64,
    /// `"exit"`, `"SIGTERM"` or `"SIGINT"`.
    pub end: String,
    /// Event lines written to this file.
    pub events: u64,
    /// Events dropped because the buffer was full.
    pub dropped: u64,
    pub devices: Vec<SummaryDevice>,
    /// Lookups that gave (or, refused, would have given) the program a variant of a hooked
    /// function this build does not know (`unknown_variant` lines); absent: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unknown_variants: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SummaryDevice {
    pub dev: u32,
    pub quota: Option<u64>,
    /// Highest `in_use` seen, and when.
    pub peak: u64,
    pub peak_t_ns: u64,
    /// `in_use` after the last event.
    pub in_use: u64,
    pub allocs: u64,
    pub frees: u64,
    pub refusals: u64,
    /// Sum of the bytes of every successful allocation.
    pub alloc_bytes: u64,
    /// Allocations never freed (seen in the trace): count and bytes.
    pub live: u64,
    pub live_bytes: u64,
    /// The parts of the footprint besides allocations at the end, and the highest each
    /// reached (`peak` and `in_use` above are of the whole footprint in footprint mode).
    #[serde(default)]
    pub context: u64,
    #[serde(default)]
    pub pool_cache: u64,
    #[serde(default)]
    pub graph: u64,
    #[serde(default)]
    pub context_peak: u64,
    #[serde(default)]
    pub pool_cache_peak: u64,
    #[serde(default)]
    pub graph_peak: u64,
    /// Times cuquota trimmed this process's pools or graph memory, and the bytes released.
    #[serde(default)]
    pub trims: u64,
    #[serde(default)]
    pub trimmed_bytes: u64,
}

impl SummaryDevice {
    /// The fields of `part`: its bytes at the end and its peak. The summary names each
    /// part's fields (the trace's JSON keys, `<name>` and `<name>_peak`); this is the one
    /// place that maps a [`Part`] to them.
    pub fn part_mut(&mut self, part: Part) -> (&mut u64, &mut u64) {
        match part {
            Part::Context => (&mut self.context, &mut self.context_peak),
            Part::PoolCache => (&mut self.pool_cache, &mut self.pool_cache_peak),
            Part::Graph => (&mut self.graph, &mut self.graph_peak),
        }
    }

    /// Every part's bytes at the end, and each one's peak.
    pub fn parts(&self) -> (PerPart<u64>, PerPart<u64>) {
        let mut copy = self.clone();
        let at_end = PerPart::from_fn(|p| *copy.part_mut(p).0);
        let peaks = PerPart::from_fn(|p| *copy.part_mut(p).1);
        (at_end, peaks)
    }
}

/// `"0x7f00"` → 0x7f00.
pub fn parse_ptr(text: &str) -> Option<u64> {
    let hex = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))?;
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_line_reads_every_type_and_ignores_unknown_fields() {
        let line = r#"{"type":"alloc","t_ns":5,"tid":7,"dev":1,"api":"cuMemAlloc_v2","ptr":"0x10","bytes":32,"result":"CUDA_SUCCESS","in_use":32,"new_field":[1,{"a":2}]}"#;
        let ev: EventLine = serde_json::from_str(line).unwrap();
        assert_eq!(ev.kind, "alloc");
        assert_eq!(
            (ev.t_ns, ev.tid, ev.dev, ev.bytes, ev.in_use),
            (5, 7, 1, 32, 32)
        );
        assert_eq!(parse_ptr(&ev.ptr), Some(0x10));
        assert!(matches!(ev.api, Cow::Borrowed(_)));
        let backoff: EventLine =
            serde_json::from_str(r#"{"type":"backoff","sizes":[4,3,2]}"#).unwrap();
        assert_eq!(backoff.sizes.as_deref(), Some(&[4u64, 3, 2][..]));
    }

    #[test]
    fn footprint_and_trim_lines_read_their_part() {
        let line = r#"{"type":"footprint","t_ns":5,"tid":7,"dev":0,"api":"cuDevicePrimaryCtxRetain","part":"context","bytes":536870912,"in_use":536870912}"#;
        let ev: EventLine = serde_json::from_str(line).unwrap();
        assert_eq!(ev.kind, kind::FOOTPRINT);
        assert_eq!(ev.part.as_deref(), Some(part::CONTEXT));
        assert_eq!((ev.bytes, ev.in_use), (512 << 20, 512 << 20));
        let trim: EventLine =
            serde_json::from_str(r#"{"type":"trim","part":"pool_cache","bytes":4}"#).unwrap();
        assert_eq!(
            (trim.kind.as_ref(), trim.part.as_deref(), trim.bytes),
            (kind::TRIM, Some(part::POOL_CACHE), 4)
        );
        // Older lines have no part.
        let alloc: EventLine = serde_json::from_str(r#"{"type":"alloc"}"#).unwrap();
        assert_eq!(alloc.part, None);
    }

    const OLD_HEADER: &str = r#"{"type":"header","schema":1,"version":"0.1.0","pid":7,"host":"h","rank":0,"argv":["a"],"start_unix_ns":1,"mode":"enforce","devices":[{"ordinal":0,"name":"g","total":8,"quota":null}]}"#;

    /// A header without `count` (older writers) reads as allocations and writes back the
    /// same bytes; one with it round-trips.
    #[test]
    fn header_count_round_trips_and_defaults_to_allocations() {
        let old: Header = serde_json::from_str(OLD_HEADER).unwrap();
        assert_eq!(old.count, None);
        assert!(!old.counts_footprint());
        assert_eq!(serde_json::to_string(&old).unwrap(), OLD_HEADER);
        for mode in [count::FOOTPRINT, count::ALLOCATIONS] {
            let new = Header {
                count: Some(mode.into()),
                ..old.clone()
            };
            let text = serde_json::to_string(&new).unwrap();
            assert!(
                text.ends_with(&format!(r#","quota_counts":"{mode}"}}"#)),
                "{text}"
            );
            let back: Header = serde_json::from_str(&text).unwrap();
            assert_eq!(back, new);
            assert_eq!(back.counts_footprint(), mode == count::FOOTPRINT);
        }
    }

    /// The summary's footprint fields default to 0 in older summaries and round-trip.
    #[test]
    fn summary_footprint_fields_default_and_round_trip() {
        let old = r#"{"dev":0,"quota":null,"peak":1,"peak_t_ns":2,"in_use":1,"allocs":1,"frees":0,"refusals":0,"alloc_bytes":1,"live":1,"live_bytes":1}"#;
        let d: SummaryDevice = serde_json::from_str(old).unwrap();
        assert_eq!((d.peak, d.live_bytes), (1, 1));
        assert_eq!(
            (d.context, d.pool_cache, d.graph, d.trims, d.trimmed_bytes),
            (0, 0, 0, 0, 0)
        );
        assert_eq!((d.context_peak, d.pool_cache_peak, d.graph_peak), (0, 0, 0));
        let full = SummaryDevice {
            context: 1,
            pool_cache: 2,
            graph: 3,
            context_peak: 4,
            pool_cache_peak: 5,
            graph_peak: 6,
            trims: 7,
            trimmed_bytes: 8,
            ..d
        };
        let text = serde_json::to_string(&full).unwrap();
        assert!(
            text.ends_with(r#""context":1,"pool_cache":2,"graph":3,"context_peak":4,"pool_cache_peak":5,"graph_peak":6,"trims":7,"trimmed_bytes":8}"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<SummaryDevice>(&text).unwrap(), full);
        let (at_end, peaks) = full.parts();
        assert_eq!(
            (
                at_end[Part::Context],
                at_end[Part::PoolCache],
                at_end[Part::Graph]
            ),
            (1, 2, 3)
        );
        assert_eq!(peaks, PerPart([5, 6, 4]), "in Part::ALL order");
    }

    #[test]
    fn ptr_parsing() {
        assert_eq!(parse_ptr("0x0"), Some(0));
        assert_eq!(parse_ptr("0xffffffffffffffff"), Some(u64::MAX));
        assert_eq!(parse_ptr("12"), None);
        assert_eq!(parse_ptr("0xzz"), None);
    }
}
