//! The report's data: what `cuquota report --json` prints, and what the text renders.

pub use crate::symbols::Site;
use cuquota_format::holder::Holder;
use cuquota_format::part::PerLayer;
use cuquota_format::units::human;
use serde::Serialize;

#[derive(Serialize, Debug)]
pub struct Report {
    pub processes: Vec<ProcessReport>,
    pub job: JobReport,
}

#[derive(Serialize, Debug)]
pub struct ProcessReport {
    pub file: String,
    pub host: String,
    pub rank: u32,
    pub pid: u32,
    pub argv: Vec<String>,
    pub mode: String,
    /// What the quota counted: `"footprint"` or `"allocations"`; absent for traces that do
    /// not say (written before the setting: allocations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<String>,
    /// The group whose quota the process shared; absent: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub start_unix_ns: u64,
    /// Time of the last line (ns since start).
    pub duration_ns: u64,
    /// How the trace ended: `"exit"`, `"SIGTERM"`, `"SIGINT"`, or null when it has no summary
    /// (the process is still running, or was killed).
    pub end: Option<String>,
    pub events: u64,
    pub dropped: u64,
    pub skipped_lines: u64,
    pub truncated_last_line: bool,
    pub devices: Vec<DeviceReport>,
    pub backoff_episodes: EpisodesReport,
    pub largest_allocations: Vec<AllocReport>,
    pub live_at_exit: LiveReport,
    /// Calls traced, by entry point, refused ones included; most first.
    pub api_mix: Vec<ApiCount>,
    /// What the call stacks (`CUQUOTA_STACKS`) cover; absent when the trace has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stacks: Option<StacksReport>,
    /// The first device-memory event (ns since start): where the terminal charts begin.
    #[serde(skip)]
    pub first_event_ns: u64,
    /// When its last event was (the exit summary, written later, not counted): the charts
    /// span first to last event.
    #[serde(skip)]
    pub last_event_ns: u64,
}

#[derive(Serialize, Debug, Default)]
pub struct DeviceReport {
    pub dev: u32,
    pub name: Option<String>,
    pub total: Option<u64>,
    pub quota: Option<u64>,
    /// Changes of the quota in force while the process ran (`cuquota set` on its group).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quota_changes: Vec<QuotaChange>,
    pub peak: u64,
    pub peak_t_ns: u64,
    pub in_use_at_end: u64,
    pub allocs: u64,
    pub frees: u64,
    pub alloc_bytes: u64,
    pub refusals: u64,
    pub refused_by_quota: u64,
    pub refused_by_driver: u64,
    /// Observe mode: refusals the quota would have made (counted in `refusals` and
    /// `refused_by_quota` too, as the log's summary counts them); the calls went ahead.
    pub refused_observed: u64,
    /// The first of them, in order.
    pub observed_shown: Vec<ObservedReport>,
    /// Refusals (enforce mode) of a new context, of context growth (`cuCtxSetLimit`, a
    /// module or library load) or of a graph launch or upload: no back-off episodes, listed
    /// apart. Counted in `refusals` too. Absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub refused_contexts_and_graphs: u64,
    /// The first of them, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused_contexts_and_graphs_shown: Vec<WholeRefusal>,
    pub meminfo_calls: u64,
    pub live: u64,
    pub live_bytes: u64,
    /// Highest in-use bytes in each of 60 equal slices of the trace: slice `i` covers
    /// `[i·w, (i+1)·w)` ns after `start_unix_ns`, with `w = (duration_ns + 1) / 60`; a value
    /// carries over quiet slices. Exact to the reader's time bucket (a quarter to a half of
    /// `w`, at least 1 µs): an event near a slice's edge may count in its neighbour.
    pub timeline: Vec<u64>,
    /// The footprint by part: present when the trace says the quota counted the footprint,
    /// or the device has `footprint` or `trim` lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub footprint: Option<FootprintReport>,
    /// With call stacks: the allocations live at the device's peak (`peak_t_ns`), summed
    /// by call site, most bytes first. Absent without stacks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_call_site: Vec<SiteLive>,
    /// The terminal chart's columns: as `timeline`, over the process's events only (from
    /// its first event to its end), so a late start leaves no blank chart.
    #[serde(skip)]
    pub chart: Vec<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A device's footprint, part by part.
#[derive(Serialize, Debug, Default, Clone, PartialEq)]
pub struct FootprintReport {
    /// The quota counted every part (`count` is `"footprint"`): `peak`, `in_use_at_end` and
    /// `timeline` are of the whole footprint. Otherwise they are of allocations only, and the
    /// other parts are what the process also held, not charged.
    pub counted: bool,
    /// Allocations, then each part of the footprint (`Part::ALL`), under their names.
    #[serde(flatten)]
    pub layers: PerLayer<PartReport>,
    /// Times cuquota trimmed this process's pools or graph memory to make room for a
    /// request (`trim` lines), and the bytes that released.
    pub trims: u64,
    pub trimmed_bytes: u64,
}

impl FootprintReport {
    /// Nothing but allocations was ever held (no context measured, no pool cache, no graph
    /// memory, no trim): the text then reads as for allocations alone.
    pub fn only_allocations(&self) -> bool {
        self.layers.parts().all(|(_, p)| p.peak == 0) && self.trims == 0
    }
}

/// One part of a device's footprint, in bytes.
#[derive(Serialize, Debug, Default, Clone, Copy, PartialEq)]
pub struct PartReport {
    pub at_end: u64,
    /// The highest it reached (at any time, not necessarily at the device's peak).
    pub peak: u64,
    /// Its value at the device's peak (`peak_t_ns`).
    pub at_peak: u64,
}

/// A refused context creation or growth, or graph launch or upload.
#[derive(Serialize, Debug, Clone)]
pub struct WholeRefusal {
    pub t_ns: u64,
    pub tid: u32,
    pub api: String,
    /// `"context"` (a new one), `"context limit"` (`cuCtxSetLimit`), `"module load"`,
    /// `"graph launch"` or `"graph upload"`.
    pub what: &'static str,
    /// What the context would take, or what the graph's allocations need beyond the graph
    /// pool's free reservation.
    pub bytes: u64,
    /// Bytes charged before it.
    pub in_use: u64,
}

/// What a refusal through `api` was of, when not an allocation (the names as
/// [`WholeRefusal::what`]).
pub fn refused_what(api: &str) -> Option<&'static str> {
    match api {
        "cuDevicePrimaryCtxRetain" => Some("context"),
        a if a.starts_with("cuCtxCreate") || a.starts_with("cuGreenCtxCreate") => Some("context"),
        "cuCtxSetLimit" => Some("context limit"),
        a if a.starts_with("cuModuleLoad") || a.starts_with("cuLibraryLoad") => Some("module load"),
        a if a.starts_with("cuGraphLaunch") => Some("graph launch"),
        a if a.starts_with("cuGraphUpload") => Some("graph upload"),
        _ => None,
    }
}

/// A refused request in words: its size, or what it was and what it took.
pub fn refused_words(api: &str, bytes: u64) -> String {
    let size = human(bytes);
    match refused_what(api) {
        Some("context") => format!("a new context ({size})"),
        Some(what) => format!("{what} needing {size}"),
        None => size,
    }
}

/// A request observe mode let through that the quota would have refused.
#[derive(Serialize, Debug, Clone)]
pub struct ObservedReport {
    pub t_ns: u64,
    pub tid: u32,
    pub api: String,
    pub bytes: u64,
    /// Bytes charged before it.
    pub in_use: u64,
    /// What it was when not an allocation (as in `refused_contexts_and_graphs_shown`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what: Option<&'static str>,
}

#[derive(Serialize, Debug, Default)]
pub struct EpisodesReport {
    /// Runs of refusals on one thread and device (the rule of `cuquota_format::episodes`,
    /// the same as the log's back-off lines).
    pub count: u64,
    /// Those that ended in a successful allocation on that thread and device (backed off or
    /// retried); the others gave up.
    pub recovered: u64,
    /// The first ones, in order of their first refusal.
    pub shown: Vec<EpisodeReport>,
}

#[derive(Serialize, Debug, Clone)]
pub struct EpisodeReport {
    pub dev: u32,
    pub tid: u32,
    pub t_ns: u64,
    pub api: String,
    pub refusals: u64,
    /// The refused sizes in order (the first and last few when there are many).
    pub refused: Vec<u64>,
    /// Sizes left out of `refused`, between its head and tail.
    pub refused_elided: u64,
    /// The size that then succeeded; null if none did (the caller gave up).
    pub got: Option<u64>,
    pub got_t_ns: Option<u64>,
    /// `"backed off"`, `"retried"` or `"gave up"`.
    pub outcome: &'static str,
    /// Why it counts as given up: `"gap"` (no request within the gap), `"larger"` (the next
    /// request was larger), `"other device"`, `"end"` (the trace ended); null otherwise.
    pub gave_up: Option<&'static str>,
    /// What this process held at its first refusal, by layer (allocations, then each part).
    pub held: PerLayer<u64>,
    /// This process's quota then (null: none, or its group's applies).
    pub quota: Option<u64>,
    /// In a group: the group's figures and who held its quota at the first refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<EpisodeGroup>,
    /// With call stacks: this process's live allocations at the first refusal by call site,
    /// most first (empty without stacks).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub live_by_call_site: Vec<SiteLive>,
    /// The same by stack id, until the stacks are symbolised.
    #[serde(skip)]
    pub live_by_stack: Option<std::collections::HashMap<u64, (u64, u64)>>,
}

/// The quota in force from `t_ns` on (null: none).
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaChange {
    pub t_ns: u64,
    pub quota: Option<u64>,
}

/// A group's quota at a refusal: what the members held, and who.
#[derive(Serialize, Debug, Clone)]
pub struct EpisodeGroup {
    pub name: String,
    pub in_use: u64,
    pub limit: u64,
    /// The other members holding it, most first (empty in traces that do not name them).
    pub holders: Vec<Holder>,
}

#[derive(Serialize, Debug, Clone)]
pub struct AllocReport {
    pub dev: u32,
    pub ptr: String,
    pub bytes: u64,
    /// When it was first allocated.
    pub t_ns: u64,
    pub api: String,
    /// Times this address was allocated with this size (a caching allocator's reused
    /// block is one entry); 1 in `live_at_exit.largest`.
    pub count: u64,
    /// The last of them was never freed.
    pub live_at_exit: bool,
    /// Where it was allocated (the first time): the frame of its call stack nearest the
    /// program. Absent without a stack, or when every frame was cuquota's, the driver's or
    /// the CUDA runtime's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<Site>,
}

/// Allocations live at a device's peak that were made at one call site.
#[derive(Serialize, Debug, Clone)]
pub struct SiteLive {
    /// None: allocations without a stack (or whose frames were all cuquota's, the driver's
    /// or the CUDA runtime's).
    pub site: Option<Site>,
    pub allocations: u64,
    pub bytes: u64,
}

/// What a trace's call stacks cover.
#[derive(Serialize, Debug, Default)]
pub struct StacksReport {
    /// Distinct stacks recorded.
    pub stacks: u64,
    /// Successful allocations that carry no stack (the interposer's table was full or busy,
    /// or a free failed and the allocation was held again: its `alloc` line has none).
    pub allocations_without_stack: u64,
    /// Allocations from a memory pool (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`) were
    /// traced: each one's stack is the request's; the memory a pool keeps cached between
    /// them has no stack of its own (it grew with the request that first needed it).
    pub pool_allocations: bool,
}

#[derive(Serialize, Debug, Default)]
pub struct LiveReport {
    pub count: u64,
    pub bytes: u64,
    pub largest: Vec<AllocReport>,
}

#[derive(Serialize, Debug)]
pub struct ApiCount {
    pub api: String,
    pub count: u64,
}

#[derive(Serialize, Debug, Default)]
pub struct JobReport {
    pub processes: usize,
    pub hosts: Vec<String>,
    pub events: u64,
    pub dropped: u64,
    /// Sum over processes and devices of each one's peak (an upper bound of the job's).
    pub peak_sum: u64,
    pub refusals: u64,
    pub backoff_episodes: u64,
    pub live: u64,
    pub live_bytes: u64,
    /// Processes whose trace has no summary line (still running, or killed).
    pub unfinished: usize,
}
