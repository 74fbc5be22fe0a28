//! The trace file format (JSON Lines, schema 1): the serde types the interposer's writer
//! produces and the `cuquota` CLI reads.
//!
//! One JSON object per line. The first line is a [`Header`], then one line per event
//! ([`EventLine`]), and on a clean exit (or SIGTERM/SIGINT) a [`Summary`] last. Readers must
//! ignore fields and line types they do not know: new ones may be added within schema 1.
//!
//! A new event type (or field) is added in all of these places:
//! - here: its name in [`kind`], its fields in [`EventLine`];
//! - the fast path of the reader (`fastline.rs`): every new key, or such lines take the slow
//!   path (still correct, three times slower);
//! - the interposer's writer: `src/trace/mod.rs` (`EventKind`) and `src/trace/encode.rs`
//!   (the line's prefix and fields, and its round-trip tests), and the code that emits it;
//! - the CLI (`crates/cli`): `report.rs` (`Process::event`), `export.rs` (the Chrome trace)
//!   and `plot.rs`, each of which skips types it does not list;
//! - the README's trace schema section;
//! - the tests: the golden traces and their expected reports, and the line generator of
//!   `tests/reliability_hostile_input.rs`.

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
    /// A part of the footprint other than allocations changed: `part` (`"context"`,
    /// `"pool_cache"`, `"graph"`) is now `bytes` on `dev`.
    pub const FOOTPRINT: &str = "footprint";
    /// cuquota trimmed this process's pools (`part` `"pool_cache"`) or graph memory
    /// (`"graph"`) and got `bytes` back, to make room for a request through `api`.
    pub const TRIM: &str = "trim";
    /// Written by the writer when events were dropped since the previous batch.
    pub const DROPPED: &str = "dropped";
    pub const SUMMARY: &str = "summary";
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
    /// What the quota bounds: `"footprint"` or `"allocations"` (absent in traces written
    /// before it existed: allocations).
    /// (Not `count`: that key is a `dropped` and `context` line's number.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_counts: Option<String>,
    pub devices: Vec<HeaderDevice>,
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
    /// footprint, trim: `"context"`, `"pool_cache"` or `"graph"`.
    #[serde(default, borrow)]
    pub part: Option<Cow<'a, str>>,
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
    /// Footprint parts besides allocations: bytes at the end, and each one's peak.
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
    /// cuquota's own trims of this process's pools and graph memory, and what they gave back.
    #[serde(default)]
    pub trims: u64,
    #[serde(default)]
    pub trimmed_bytes: u64,
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
    fn ptr_parsing() {
        assert_eq!(parse_ptr("0x0"), Some(0));
        assert_eq!(parse_ptr("0xffffffffffffffff"), Some(u64::MAX));
        assert_eq!(parse_ptr("12"), None);
        assert_eq!(parse_ptr("0xzz"), None);
    }
}
