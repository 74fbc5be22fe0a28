//! `cuquota report`: one pass over each trace, keeping O(devices + live allocations + top-k)
//! state, then the same [`Report`] printed as text or as one JSON document.

use crate::timeline::Timeline;
use crate::traces::{self, Seen};
use cuquota_format::episodes::{Episode, GaveUp, Outcome, GAP_NS};
use cuquota_format::hash::BuildKeyHasher;
use cuquota_format::read::{self, Options, Record};
use cuquota_format::schema::{kind, parse_ptr, part, EventLine, Header, Summary};
use cuquota_format::units::human;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Entries in the "largest" and "live at exit" lists.
const TOP: usize = 10;
/// Back-off episodes listed one by one (the rest are counted).
const EPISODES_SHOWN: usize = 20;
const CHART_COLUMNS: usize = 60;
const CHART_ROWS: usize = 5;
/// Refused sizes kept per episode: the first few and the last few.
const EPISODE_HEAD: usize = 6;
const EPISODE_TAIL: usize = 2;
/// Observe mode's would-be refusals listed one by one, per device.
const OBSERVED_SHOWN: usize = 10;

pub fn run(traces: &[PathBuf], json: bool, options: &Options) -> Result<(), String> {
    let report = build(traces, options)?;
    if json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

// ---- the report, as printed by --json -------------------------------------------------

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
    /// The first device-memory event (ns since start): where the terminal charts begin.
    #[serde(skip)]
    pub first_event_ns: u64,
}

#[derive(Serialize, Debug, Default)]
pub struct DeviceReport {
    pub dev: u32,
    pub name: Option<String>,
    pub total: Option<u64>,
    pub quota: Option<u64>,
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
    pub allocations: PartReport,
    pub pool_cache: PartReport,
    pub graph: PartReport,
    pub context: PartReport,
    /// Times cuquota trimmed this process's pools or graph memory to make room for a
    /// request (`trim` lines), and the bytes that released.
    pub trims: u64,
    pub trimmed_bytes: u64,
}

impl FootprintReport {
    /// Nothing but allocations was ever held (no context measured, no pool cache, no graph
    /// memory, no trim): the text then reads as for allocations alone.
    pub fn only_allocations(&self) -> bool {
        [&self.pool_cache, &self.graph, &self.context]
            .iter()
            .all(|p| p.peak == 0)
            && self.trims == 0
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

// ---- one pass over a trace -------------------------------------------------------------

pub fn build(traces: &[PathBuf], options: &Options) -> Result<Report, String> {
    for path in traces {
        traces::header(path)?;
    }
    let mut processes = Vec::new();
    let mut seen = Seen::default();
    for path in traces {
        let file = path.display().to_string();
        let mut current: Option<Process> = None;
        let stats = read::read(path, options, |record| {
            match record {
                Record::Header(h) => {
                    if let Some(done) = current.take() {
                        processes.push(done);
                    }
                    // A process already read (the same trace given twice): skip its records.
                    if seen.first(h, &file) {
                        current = Some(Process::new(file.clone(), h.clone()));
                    }
                }
                Record::Event(e) => {
                    if let Some(p) = current.as_mut() {
                        p.event(e);
                    }
                }
                Record::Summary(s) => {
                    if let Some(p) = current.as_mut() {
                        p.summary(s.clone());
                    }
                }
            }
            Ok(())
        })?;
        if let Some(mut p) = current {
            p.skipped = stats.skipped;
            p.truncated = stats.truncated;
            processes.push(p);
        }
    }
    let mut processes: Vec<ProcessReport> = processes.into_iter().map(Process::finish).collect();
    processes.sort_by(|a, b| {
        (&a.host, a.rank, a.start_unix_ns, a.pid).cmp(&(&b.host, b.rank, b.start_unix_ns, b.pid))
    });
    let job = job(&processes);
    Ok(Report { processes, job })
}

#[derive(Default)]
struct Device {
    report: DeviceReport,
    timeline: Option<Timeline>,
    /// As `timeline`, from the process's first event (the terminal chart).
    chart: Option<Timeline>,
    parts: Parts,
}

impl Device {
    /// `in_use` bytes held from `t_ns` on; `first_ns`: the process's first event.
    fn add(&mut self, t_ns: u64, in_use: u64, first_ns: u64) {
        self.chart
            .get_or_insert_with(|| Timeline::new(4 * CHART_COLUMNS))
            .add(t_ns.saturating_sub(first_ns), in_use);
        self.timeline
            .get_or_insert_with(|| Timeline::new(4 * CHART_COLUMNS))
            .add(t_ns, in_use);
    }
}

/// A device's footprint parts as the trace goes.
#[derive(Default)]
struct Parts {
    /// Any `footprint` or `trim` line seen.
    seen: bool,
    /// Now: pool cache, graph, context (as `footprint` lines last said).
    now: [u64; 3],
    /// Allocations, pool cache, graph, context: the highest, and at the device's peak.
    peak: [u64; 4],
    at_peak: [u64; 4],
    trims: u64,
    trimmed_bytes: u64,
}

impl Parts {
    /// Index in `now` of a `part` value.
    fn index(name: &str) -> Option<usize> {
        match name {
            part::POOL_CACHE => Some(0),
            part::GRAPH => Some(1),
            part::CONTEXT => Some(2),
            _ => None,
        }
    }

    /// All four parts, with `in_use` bytes charged: in footprint mode the allocations are
    /// what the other parts leave of it.
    fn with(&self, in_use: u64, footprint: bool) -> [u64; 4] {
        let others = self.now.iter().fold(0u64, |a, &b| a.saturating_add(b));
        let allocations = if footprint {
            in_use.saturating_sub(others)
        } else {
            in_use
        };
        [allocations, self.now[0], self.now[1], self.now[2]]
    }

    /// After an event that left `in_use` charged; `peak`: it is the device's new peak.
    fn held(&mut self, in_use: u64, footprint: bool, peak: bool) {
        let all = self.with(in_use, footprint);
        for (p, v) in self.peak.iter_mut().zip(all) {
            *p = (*p).max(v);
        }
        if peak {
            self.at_peak = all;
        }
    }

    fn report(&self, in_use_at_end: u64, footprint: bool) -> FootprintReport {
        let end = self.with(in_use_at_end, footprint);
        let part = |i: usize| PartReport {
            at_end: end[i],
            peak: self.peak[i].max(end[i]),
            at_peak: self.at_peak[i],
        };
        FootprintReport {
            counted: footprint,
            allocations: part(0),
            pool_cache: part(1),
            graph: part(2),
            context: part(3),
            trims: self.trims,
            trimmed_bytes: self.trimmed_bytes,
        }
    }
}

struct Live {
    bytes: u64,
    t_ns: u64,
    api: u32,
}

/// Largest allocations: a min-heap of (bytes, earlier first, dev, ptr, api).
type Big = Reverse<(u64, Reverse<u64>, u32, u64, u32)>;

/// The largest distinct allocations: the same (device, address, size) allocated again is
/// the same entry, counted. Exact in O(TOP) memory: the kept entries only get larger (or
/// earlier on a tie), so one that is not kept, or falls out, can never rank high enough
/// to come back.
#[derive(Default)]
struct Largest {
    entries: Vec<Distinct>,
}

#[derive(Clone, Copy)]
struct Distinct {
    bytes: u64,
    t_ns: u64,
    dev: u32,
    ptr: u64,
    api: u32,
    count: u64,
}

impl Distinct {
    /// Larger first, then earlier first.
    fn rank(&self) -> (u64, Reverse<u64>) {
        (self.bytes, Reverse(self.t_ns))
    }
}

impl Largest {
    fn add(&mut self, new: Distinct) {
        let same = |e: &&mut Distinct| e.dev == new.dev && e.ptr == new.ptr && e.bytes == new.bytes;
        if let Some(e) = self.entries.iter_mut().find(same) {
            e.count += 1;
            return;
        }
        if self.entries.len() < TOP {
            self.entries.push(new);
            return;
        }
        let smallest = (0..self.entries.len()).min_by_key(|&i| self.entries[i].rank());
        if let Some(i) = smallest.filter(|&i| new.rank() > self.entries[i].rank()) {
            self.entries[i] = new;
        }
    }

    /// Largest first.
    fn sorted(&self) -> Vec<Distinct> {
        let mut v = self.entries.clone();
        v.sort_by_key(|e| Reverse(e.rank()));
        v
    }
}

/// A thread's open episode (grouped by the interposer's rule), and where it started.
struct OpenEpisode {
    episode: Episode<EPISODE_HEAD, EPISODE_TAIL>,
    t_ns: u64,
    api: u32,
}

struct Process {
    file: String,
    header: Header,
    devices: BTreeMap<u32, Device>,
    api_names: Vec<String>,
    api_counts: Vec<u64>,
    api_ids: HashMap<String, u32>,
    live: HashMap<(u32, u64), Live, BuildKeyHasher>,
    largest: Largest,
    /// By thread id: a thread has at most one open episode.
    open: HashMap<u32, OpenEpisode>,
    episodes: EpisodesReport,
    events: u64,
    dropped: u64,
    end_t_ns: u64,
    /// The first device-memory event's time.
    first_t_ns: Option<u64>,
    summary: Option<Summary>,
    skipped: u64,
    truncated: bool,
}

impl Process {
    fn new(file: String, header: Header) -> Process {
        let mut devices = BTreeMap::new();
        for d in &header.devices {
            devices.insert(
                d.ordinal,
                Device {
                    report: DeviceReport {
                        dev: d.ordinal,
                        name: Some(d.name.clone()),
                        total: Some(d.total),
                        quota: d.quota,
                        ..DeviceReport::default()
                    },
                    ..Device::default()
                },
            );
        }
        Process {
            file,
            header,
            devices,
            api_names: Vec::new(),
            api_counts: Vec::new(),
            api_ids: HashMap::new(),
            live: HashMap::default(),
            largest: Largest::default(),
            open: HashMap::new(),
            episodes: EpisodesReport::default(),
            events: 0,
            dropped: 0,
            end_t_ns: 0,
            first_t_ns: None,
            summary: None,
            skipped: 0,
            truncated: false,
        }
    }

    fn api(&mut self, name: &str) -> u32 {
        // A process uses a handful of entry points: a scan beats hashing the name.
        if self.api_names.len() <= 16 {
            if let Some(id) = self.api_names.iter().position(|n| n == name) {
                return id as u32;
            }
        } else if let Some(&id) = self.api_ids.get(name) {
            return id;
        }
        let id = self.api_names.len() as u32;
        self.api_names.push(name.to_string());
        self.api_counts.push(0);
        self.api_ids.insert(name.to_string(), id);
        id
    }

    fn event(&mut self, e: &EventLine) {
        self.end_t_ns = self.end_t_ns.max(e.t_ns);
        let kind = e.kind.as_ref();
        match kind {
            kind::ALLOC | kind::FREE | kind::REFUSED | kind::MEMINFO | kind::CONTEXT => {}
            kind::FOOTPRINT | kind::TRIM => {
                // The consequences of a call (one call may write several), not calls: not in
                // the API mix.
                self.events += 1;
                self.part_changed(e);
                return;
            }
            kind::BACKOFF => {
                // The core's own grouping; episodes are rebuilt from the refusals instead.
                self.events += 1;
                return;
            }
            kind::DROPPED => {
                self.dropped += e.count;
                return;
            }
            _ => return, // a line type from a newer cuquota
        }
        self.events += 1;
        if kind == kind::CONTEXT {
            self.context_freed(e);
        }
        let api = self.api(&e.api);
        self.api_counts[api as usize] += 1;
        let ok = e.result.is_empty() || e.result == "CUDA_SUCCESS";
        let t = e.t_ns;
        let footprint = self.header.counts_footprint();
        let first = *self.first_t_ns.get_or_insert(t);
        let dev = device(&mut self.devices, e.dev);
        let r = &mut dev.report;
        r.in_use_at_end = e.in_use;
        // A refusal's figure includes requests in flight: the peak is of what was held.
        if kind != kind::REFUSED {
            let peak = e.in_use > r.peak;
            if peak {
                r.peak = e.in_use;
                r.peak_t_ns = t;
            }
            dev.parts.held(e.in_use, footprint, peak);
        }
        dev.add(t, e.in_use, first);
        let r = &mut dev.report;
        let timeline = dev.timeline.as_mut().expect("added above");
        match kind {
            kind::ALLOC if ok => {
                r.allocs += 1;
                r.alloc_bytes = r.alloc_bytes.saturating_add(e.bytes);
                let ptr = parse_ptr(&e.ptr).unwrap_or(0);
                let live = Live {
                    bytes: e.bytes,
                    t_ns: t,
                    api,
                };
                self.live.insert((e.dev, ptr), live);
                self.largest.add(Distinct {
                    bytes: e.bytes,
                    t_ns: t,
                    dev: e.dev,
                    ptr,
                    api,
                    count: 1,
                });
                let dev = e.dev;
                if let Some(open) = self.open.get(&e.tid) {
                    if let Some(outcome) = open.episode.succeeded(dev, e.bytes, t) {
                        let open = self.open.remove(&e.tid).unwrap();
                        self.close_episode(e.tid, open, outcome, t);
                    }
                }
            }
            kind::FREE if ok => {
                r.frees += 1;
                if let Some(ptr) = parse_ptr(&e.ptr) {
                    self.live.remove(&(e.dev, ptr));
                }
            }
            kind::REFUSED => {
                r.refusals += 1;
                if e.reason.as_deref() == Some("driver") {
                    r.refused_by_driver += 1;
                } else {
                    r.refused_by_quota += 1;
                }
                timeline.refusal(t, e.in_use);
                let what = refused_what(&e.api);
                if e.observed {
                    // Allowed: the caller got its memory, so it is no episode.
                    r.refused_observed += 1;
                    if r.observed_shown.len() < OBSERVED_SHOWN {
                        r.observed_shown.push(ObservedReport {
                            t_ns: t,
                            tid: e.tid,
                            api: self.api_names[api as usize].clone(),
                            bytes: e.bytes,
                            in_use: e.in_use,
                            what,
                        });
                    }
                    return;
                }
                if let Some(what) = what {
                    // A context or a graph is not an allocation an allocator backs off from.
                    r.refused_contexts_and_graphs += 1;
                    if r.refused_contexts_and_graphs_shown.len() < OBSERVED_SHOWN {
                        r.refused_contexts_and_graphs_shown.push(WholeRefusal {
                            t_ns: t,
                            tid: e.tid,
                            api: self.api_names[api as usize].clone(),
                            what,
                            bytes: e.bytes,
                            in_use: e.in_use,
                        });
                    }
                    return;
                }
                // The interposer's episodes are of out-of-memory refusals only.
                if e.result != "CUDA_ERROR_OUT_OF_MEMORY" {
                    return;
                }
                let dev = e.dev;
                let ended = match self.open.get_mut(&e.tid) {
                    Some(open) => match open.episode.refused(dev, e.bytes, t) {
                        None => return, // joined
                        Some(outcome) => Some(outcome),
                    },
                    None => None,
                };
                let started = OpenEpisode {
                    episode: Episode::start(dev, e.bytes, t),
                    t_ns: t,
                    api,
                };
                if let (Some(old), Some(outcome)) = (self.open.insert(e.tid, started), ended) {
                    self.close_episode(e.tid, old, outcome, t);
                }
            }
            kind::MEMINFO => r.meminfo_calls += 1,
            _ => {}
        }
    }

    /// A `footprint` line (a part's new total) or a `trim` line (cuquota released a part).
    fn part_changed(&mut self, e: &EventLine) {
        let footprint = self.header.counts_footprint();
        let first = *self.first_t_ns.get_or_insert(e.t_ns);
        let dev = device(&mut self.devices, e.dev);
        let parts = &mut dev.parts;
        parts.seen = true;
        let index = e.part.as_deref().and_then(Parts::index);
        if e.kind == kind::TRIM {
            parts.trims += 1;
            parts.trimmed_bytes = parts.trimmed_bytes.saturating_add(e.bytes);
        } else if let Some(i) = index {
            parts.now[i] = e.bytes;
        }
        let r = &mut dev.report;
        r.in_use_at_end = e.in_use;
        // A trim's part total comes on the next line: its figures are left to that one.
        if e.kind == kind::FOOTPRINT {
            let peak = e.in_use > r.peak;
            if peak {
                r.peak = e.in_use;
                r.peak_t_ns = e.t_ns;
            }
            dev.parts.held(e.in_use, footprint, peak);
        }
        dev.add(e.t_ns, e.in_use, first);
    }

    /// A context's allocations, freed with it: each is a free on the device it was charged
    /// to (a pool's may be another one than the context's, whose in-use the line's figure,
    /// of the context's device, does not say: it drops by what was freed there).
    fn context_freed(&mut self, e: &EventLine) {
        let ptrs: std::collections::HashSet<u64> = e
            .ptrs
            .iter()
            .flatten()
            .filter_map(|p| parse_ptr(p))
            .collect();
        let mut freed_on = Vec::new();
        self.live.retain(|&(dev, ptr), live| {
            let freed = ptrs.contains(&ptr);
            if freed {
                freed_on.push((dev, live.bytes));
            }
            !freed
        });
        for (dev, bytes) in freed_on {
            if let Some(d) = self.devices.get_mut(&dev) {
                d.report.frees += 1;
                if dev != e.dev {
                    let r = &mut d.report;
                    r.in_use_at_end = r.in_use_at_end.saturating_sub(bytes);
                    let in_use = r.in_use_at_end;
                    if d.timeline.is_some() {
                        d.add(e.t_ns, in_use, self.first_t_ns.unwrap_or(0));
                    }
                }
            }
        }
    }

    /// `t_ns`: when it ended (the request that ended it, or the end of the trace).
    fn close_episode(&mut self, tid: u32, open: OpenEpisode, outcome: Outcome, t_ns: u64) {
        let (got, outcome_words, gave_up) = match outcome {
            Outcome::BackedOff { got, .. } => (Some((got, t_ns)), "backed off", None),
            Outcome::Retried { got, .. } => (Some((got, t_ns)), "retried", None),
            Outcome::GaveUp(why) => (
                None,
                "gave up",
                Some(match why {
                    GaveUp::Gap => "gap",
                    GaveUp::Larger(_) => "larger",
                    GaveUp::OtherDevice(_) => "other device",
                    GaveUp::Exit => "end",
                }),
            ),
        };
        let eps = &mut self.episodes;
        eps.count += 1;
        eps.recovered += u64::from(got.is_some());
        if eps.shown.len() < EPISODES_SHOWN {
            let episode = &open.episode;
            eps.shown.push(EpisodeReport {
                dev: episode.device,
                tid,
                t_ns: open.t_ns,
                api: self.api_names[open.api as usize].clone(),
                refusals: episode.refusals(),
                refused: episode.sizes().collect(),
                refused_elided: episode.elided(),
                got: got.map(|g| g.0),
                got_t_ns: got.map(|g| g.1),
                outcome: outcome_words,
                gave_up,
            });
        }
    }

    fn summary(&mut self, s: Summary) {
        self.end_t_ns = self.end_t_ns.max(s.t_ns);
        self.summary = Some(s);
    }

    fn finish(mut self) -> ProcessReport {
        // Episodes open at the end of the trace: the caller gave up (or was killed).
        let mut open: Vec<_> = self.open.drain().collect();
        open.sort_by_key(|(_, o)| o.t_ns);
        let end = self.end_t_ns;
        for (tid, o) in open {
            let outcome = o.episode.at_exit(end);
            self.close_episode(tid, o, outcome, end);
        }
        self.episodes.shown.sort_by_key(|e| e.t_ns);

        let end = self.end_t_ns;
        let mut live_per_dev: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let mut live_top: BinaryHeap<Big> = BinaryHeap::new();
        for (&(dev, ptr), l) in &self.live {
            let e = live_per_dev.entry(dev).or_default();
            e.0 += 1;
            e.1 += l.bytes;
            live_top.push(Reverse((l.bytes, Reverse(l.t_ns), dev, ptr, l.api)));
            if live_top.len() > TOP {
                live_top.pop();
            }
        }
        let alloc = |d: Distinct, live: &HashMap<(u32, u64), Live, BuildKeyHasher>| AllocReport {
            dev: d.dev,
            ptr: format!("{:#x}", d.ptr),
            bytes: d.bytes,
            t_ns: d.t_ns,
            api: self.api_names[d.api as usize].clone(),
            count: d.count,
            live_at_exit: live
                .get(&(d.dev, d.ptr))
                .is_some_and(|l| l.bytes == d.bytes),
        };
        let largest: Vec<AllocReport> = self
            .largest
            .sorted()
            .into_iter()
            .map(|d| alloc(d, &self.live))
            .collect();
        let live_largest: Vec<AllocReport> = live_top
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse((bytes, Reverse(t_ns), dev, ptr, api))| {
                let d = Distinct {
                    bytes,
                    t_ns,
                    dev,
                    ptr,
                    api,
                    count: 1,
                };
                alloc(d, &self.live)
            })
            .collect();
        let footprint = self.header.counts_footprint();
        let first = self.first_t_ns.unwrap_or(0);
        let devices: Vec<DeviceReport> = self
            .devices
            .into_values()
            .filter(|d| d.timeline.is_some())
            .map(|mut d| {
                if footprint || d.parts.seen {
                    d.report.footprint = Some(d.parts.report(d.report.in_use_at_end, footprint));
                }
                let (live, live_bytes) =
                    live_per_dev.get(&d.report.dev).copied().unwrap_or_default();
                d.report.live = live;
                d.report.live_bytes = live_bytes;
                if let Some(t) = &d.timeline {
                    d.report.timeline = t.columns(end, CHART_COLUMNS);
                }
                if let Some(t) = &d.chart {
                    d.report.chart = t.columns(end.saturating_sub(first), CHART_COLUMNS);
                }
                d.report
            })
            .collect();
        let mut api_mix: Vec<ApiCount> = self
            .api_names
            .into_iter()
            .zip(self.api_counts)
            .map(|(api, count)| ApiCount { api, count })
            .collect();
        api_mix.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.api.cmp(&b.api)));
        let dropped = self
            .summary
            .as_ref()
            .map_or(self.dropped, |s| s.dropped.max(self.dropped));
        ProcessReport {
            file: self.file,
            host: self.header.host,
            rank: self.header.rank,
            pid: self.header.pid,
            argv: self.header.argv,
            mode: self.header.mode,
            count: self.header.count,
            start_unix_ns: self.header.start_unix_ns,
            duration_ns: end,
            end: self.summary.map(|s| s.end),
            events: self.events,
            dropped,
            skipped_lines: self.skipped,
            truncated_last_line: self.truncated,
            devices,
            backoff_episodes: self.episodes,
            largest_allocations: largest,
            live_at_exit: LiveReport {
                count: self.live.len() as u64,
                bytes: live_per_dev.values().map(|v| v.1).sum(),
                largest: live_largest,
            },
            api_mix,
            first_event_ns: first,
        }
    }
}

/// `dev`'s entry, added when the header did not list it.
fn device(devices: &mut BTreeMap<u32, Device>, dev: u32) -> &mut Device {
    devices.entry(dev).or_insert_with(|| Device {
        report: DeviceReport {
            dev,
            ..DeviceReport::default()
        },
        ..Device::default()
    })
}

fn job(processes: &[ProcessReport]) -> JobReport {
    let mut job = JobReport {
        processes: processes.len(),
        ..JobReport::default()
    };
    for p in processes {
        if !job.hosts.contains(&p.host) {
            job.hosts.push(p.host.clone());
        }
        job.events += p.events;
        job.dropped += p.dropped;
        job.peak_sum += p.devices.iter().map(|d| d.peak).sum::<u64>();
        job.refusals += p.devices.iter().map(|d| d.refusals).sum::<u64>();
        job.backoff_episodes += p.backoff_episodes.count;
        job.live += p.live_at_exit.count;
        job.live_bytes += p.live_at_exit.bytes;
        job.unfinished += usize::from(p.end.is_none());
    }
    job
}

// ---- text ---------------------------------------------------------------------------

/// `12.345 s`, `4.567 ms` or `890 µs`: three significant decimals for short traces too.
pub fn seconds(t_ns: u64) -> String {
    match t_ns {
        t if t >= 1_000_000_000 => format!("{}.{:03} s", t / 1_000_000_000, t / 1_000_000 % 1000),
        t if t >= 1_000_000 => format!("{}.{:03} ms", t / 1_000_000, t / 1000 % 1000),
        t => format!("{} µs", t / 1000),
    }
}

/// `1 refusal`, `2 refusals`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn render(r: &Report) -> String {
    let mut out = String::new();
    for p in &r.processes {
        render_process(&mut out, p);
        out.push('\n');
    }
    render_job(&mut out, r);
    out
}

fn render_process(out: &mut String, p: &ProcessReport) {
    let command = p.argv.join(" ");
    let _ = writeln!(
        out,
        "== {} · rank {} · pid {} · {}",
        p.host, p.rank, p.pid, command
    );
    let ended = match &p.end {
        Some(end) if end == "exit" => "exited normally".to_string(),
        Some(end) => format!("stopped by {end}"),
        None => "no summary line: the process is still running, or was killed".to_string(),
    };
    let counting = match p.count.as_deref() {
        Some("footprint") => ", counting the footprint".to_string(),
        Some(other) => format!(", counting {other}"),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "   {}: mode {}{counting}, {} over {}; {ended}",
        p.file,
        p.mode,
        count(p.events, "event", "events"),
        seconds(p.duration_ns)
    );
    if p.dropped > 0 {
        let _ = writeln!(
            out,
            "   {} (trace buffer full): the figures below miss {}",
            count(p.dropped, "event was dropped", "events were dropped"),
            if p.dropped == 1 { "it" } else { "them" }
        );
    }
    if p.truncated_last_line || p.skipped_lines > 0 {
        let _ = writeln!(
            out,
            "   lines skipped: {} malformed{}",
            p.skipped_lines,
            if p.truncated_last_line {
                ", and an incomplete last line"
            } else {
                ""
            }
        );
    }
    if p.devices.is_empty() {
        let _ = writeln!(out, "   no device-memory events");
    }
    for d in &p.devices {
        render_device(out, p, d);
    }
    render_episodes(out, &p.backoff_episodes);
    if !p.largest_allocations.is_empty() {
        let _ = writeln!(
            out,
            "   Largest allocations (the same address and size again counts as one):"
        );
        for a in &p.largest_allocations {
            let live = if a.live_at_exit { "  (still live)" } else { "" };
            let at = if a.count == 1 {
                format!("at {}", seconds(a.t_ns))
            } else {
                format!("{} times, first at {}", a.count, seconds(a.t_ns))
            };
            let _ = writeln!(
                out,
                "     {:>12}  GPU {}  {}  {}  {at}{live}",
                human(a.bytes),
                a.dev,
                a.api,
                a.ptr
            );
        }
    }
    let at = if p.end.is_some() {
        "at exit"
    } else {
        "at the end of the trace"
    };
    let live = &p.live_at_exit;
    let _ = writeln!(
        out,
        "   Live {at}: {}, {}",
        count(live.count, "allocation", "allocations"),
        human(live.bytes)
    );
    for a in &live.largest {
        let _ = writeln!(
            out,
            "     {:>12}  GPU {}  {}  {}  allocated at {}",
            human(a.bytes),
            a.dev,
            a.api,
            a.ptr,
            seconds(a.t_ns)
        );
    }
    if live.count > live.largest.len() as u64 {
        let _ = writeln!(
            out,
            "     … and {} more",
            live.count - live.largest.len() as u64
        );
    }
    if !p.api_mix.is_empty() {
        let mix: Vec<String> = p
            .api_mix
            .iter()
            .map(|a| format!("{} {}", a.api, a.count))
            .collect();
        let _ = writeln!(
            out,
            "   API mix (calls traced, refused ones included): {}",
            mix.join(", ")
        );
    }
}

fn render_device(out: &mut String, p: &ProcessReport, d: &DeviceReport) {
    let name = match (&d.name, d.total) {
        (Some(n), Some(t)) => format!(" ({n}, {})", human(t)),
        _ => String::new(),
    };
    let counted = d
        .footprint
        .as_ref()
        .is_some_and(|f| f.counted && !f.only_allocations());
    let peak_word = if counted { "footprint peak" } else { "peak" };
    let quota = match d.quota {
        Some(q) => format!(
            "quota {}, {peak_word} {} ({:.1}%)",
            human(q),
            human(d.peak),
            if q == 0 {
                0.0
            } else {
                d.peak as f64 * 100.0 / q as f64
            }
        ),
        None => format!("no quota, {peak_word} {}", human(d.peak)),
    };
    let _ = writeln!(
        out,
        "   GPU {}{name}: {quota} at {}",
        d.dev,
        seconds(d.peak_t_ns)
    );
    let _ = writeln!(
        out,
        "     {} ({} in all), {}, {} ({} by quota, {} by the driver{}), {} live ({})",
        count(d.allocs, "allocation", "allocations"),
        human(d.alloc_bytes),
        count(d.frees, "free", "frees"),
        count(d.refusals, "refusal", "refusals"),
        d.refused_by_quota,
        d.refused_by_driver,
        if d.refused_observed > 0 {
            format!("; {} observed, allowed", d.refused_observed)
        } else {
            String::new()
        },
        d.live,
        human(d.live_bytes)
    );
    if let Some(f) = d.footprint.as_ref().filter(|f| !f.only_allocations()) {
        render_footprint(out, f);
    }
    render_contexts_and_graphs(out, d);
    if d.refused_observed > 0 || p.mode == "observe" {
        render_observed(out, d);
    }
    let scale = d.quota.unwrap_or(0).max(d.peak);
    chart(
        out,
        &d.chart,
        scale,
        (p.first_event_ns, p.duration_ns),
        d.quota.is_some_and(|q| q == scale),
    );
}

/// A few rows of block characters: each column is the highest in-use in its time slice,
/// from `from_ns` (the first event) to `to_ns`.
fn chart(
    out: &mut String,
    columns: &[u64],
    scale: u64,
    (from_ns, to_ns): (u64, u64),
    scale_is_quota: bool,
) {
    if columns.is_empty() || scale == 0 {
        return;
    }
    const BLOCKS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let levels = (CHART_ROWS * 8) as u128;
    let top = if scale_is_quota {
        format!("quota {}", human(scale))
    } else {
        human(scale)
    };
    let label_width = top.len().max(4);
    for row in 0..CHART_ROWS {
        let label = match row {
            0 => top.clone(),
            r if r == CHART_ROWS - 1 => "0".into(),
            _ => String::new(),
        };
        let mut line = format!("     {label:>label_width$} ┤");
        for &v in columns {
            // Round up, so that any memory in use shows.
            let level = (u128::from(v) * levels).div_ceil(u128::from(scale)) as usize;
            let floor = (CHART_ROWS - 1 - row) * 8;
            line.push(BLOCKS[level.saturating_sub(floor).min(8)]);
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let axis = "─".repeat(columns.len());
    let _ = writeln!(out, "     {:>label_width$} └{axis}", "");
    let (start, end) = (seconds(from_ns), seconds(to_ns));
    let pad = columns
        .len()
        .saturating_sub(start.chars().count() + end.chars().count());
    let _ = writeln!(out, "     {:>label_width$}  {start}{:pad$}{end}", "", "");
}

/// The footprint's parts: at the end, their highest, and at the device's peak.
fn render_footprint(out: &mut String, f: &FootprintReport) {
    let _ = writeln!(
        out,
        "     {:<24}{:>12} {:>12} {:>12}",
        if f.counted {
            "Footprint by part:"
        } else {
            "Also held (not counted):"
        },
        "at end",
        "highest",
        "at the peak"
    );
    for (name, part) in [
        ("allocations", &f.allocations),
        ("pool cache", &f.pool_cache),
        ("graph", &f.graph),
        ("context", &f.context),
    ] {
        let _ = writeln!(
            out,
            "       {name:<22}{:>12} {:>12} {:>12}",
            human(part.at_end),
            human(part.peak),
            human(part.at_peak)
        );
    }
    if f.trims > 0 {
        let _ = writeln!(
            out,
            "     cuquota trimmed pools or graph memory {} to make room, releasing {}",
            count(f.trims, "time", "times"),
            human(f.trimmed_bytes)
        );
    }
}

/// Refused contexts and graph launches, which are no back-off episodes.
fn render_contexts_and_graphs(out: &mut String, d: &DeviceReport) {
    for w in &d.refused_contexts_and_graphs_shown {
        let _ = writeln!(
            out,
            "     refused at {} via {}: {}, with {} in use",
            seconds(w.t_ns),
            w.api,
            refused_words(&w.api, w.bytes),
            human(w.in_use)
        );
    }
    let more = d.refused_contexts_and_graphs - d.refused_contexts_and_graphs_shown.len() as u64;
    if more > 0 {
        let _ = writeln!(
            out,
            "     … and {more} more refused contexts or graph launches"
        );
    }
}

/// Observe mode: what the quota would have refused, and the quota that would have held.
fn render_observed(out: &mut String, d: &DeviceReport) {
    let its_peak = match &d.footprint {
        Some(f) if f.counted && !f.only_allocations() => {
            let parts: Vec<String> = [
                ("allocations", f.allocations.at_peak),
                ("pool cache", f.pool_cache.at_peak),
                ("graph", f.graph.at_peak),
                ("context", f.context.at_peak),
            ]
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(name, v)| format!("{name} {}", human(*v)))
            .collect();
            if parts.is_empty() {
                "its footprint peak".to_string()
            } else {
                format!("its footprint peak: {}", parts.join(", "))
            }
        }
        _ => "its peak".to_string(),
    };
    let _ = writeln!(
        out,
        "     observe mode: a quota of {} ({} bytes) or more would have held this run ({its_peak})",
        human(d.peak),
        d.peak
    );
    if d.refused_observed == 0 {
        return;
    }
    let _ = writeln!(
        out,
        "     {} request{} would have been refused{}:",
        d.refused_observed,
        if d.refused_observed == 1 { "" } else { "s" },
        d.quota
            .map_or(String::new(), |q| format!(" by the quota of {}", human(q)))
    );
    for o in &d.observed_shown {
        let _ = writeln!(
            out,
            "       {:>12}  at {} via {} (in use {})",
            refused_words(&o.api, o.bytes),
            seconds(o.t_ns),
            o.api,
            human(o.in_use)
        );
    }
    let more = d.refused_observed - d.observed_shown.len() as u64;
    if more > 0 {
        let _ = writeln!(out, "       … and {more} more");
    }
}

fn render_episodes(out: &mut String, e: &EpisodesReport) {
    if e.count == 0 {
        return;
    }
    let _ = writeln!(
        out,
        "   Back-off episodes: {} ({} then succeeded, {} gave up; episodes end after {} ms without a request)",
        e.count,
        e.recovered,
        e.count - e.recovered,
        GAP_NS / 1_000_000
    );
    for ep in &e.shown {
        let mut sizes: Vec<String> = ep.refused.iter().map(|&b| human(b)).collect();
        if ep.refused_elided > 0 {
            sizes.insert(EPISODE_HEAD, format!("… {} more …", ep.refused_elided));
        }
        let outcome = match (ep.got, ep.gave_up) {
            (Some(got), _) => format!("{}, then got {}", ep.outcome, human(got)),
            (None, Some("gap")) => "gave up (no request within the gap)".to_string(),
            (None, Some("larger")) => "gave up (asked for more next)".to_string(),
            (None, Some("other device")) => "gave up (went on to another GPU)".to_string(),
            (None, _) => "gave up (the trace ended)".to_string(),
        };
        let _ = writeln!(
            out,
            "     GPU {} tid {} at {} via {}: refused {}; {outcome}",
            ep.dev,
            ep.tid,
            seconds(ep.t_ns),
            ep.api,
            sizes.join(" → ")
        );
    }
    if e.count > e.shown.len() as u64 {
        let _ = writeln!(out, "     … and {} more", e.count - e.shown.len() as u64);
    }
}

fn render_job(out: &mut String, r: &Report) {
    let j = &r.job;
    let _ = writeln!(
        out,
        "== job: {} process{} on {} host{}",
        j.processes,
        if j.processes == 1 { "" } else { "es" },
        j.hosts.len(),
        if j.hosts.len() == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        out,
        "   {:<16} {:>5} {:>8} {:>4} {:>12} {:>12} {:>9} {:>12}",
        "host", "rank", "pid", "GPU", "peak", "quota", "refusals", "live at end"
    );
    for p in &r.processes {
        for d in &p.devices {
            let _ = writeln!(
                out,
                "   {:<16} {:>5} {:>8} {:>4} {:>12} {:>12} {:>9} {:>12}",
                p.host,
                p.rank,
                p.pid,
                d.dev,
                human(d.peak),
                d.quota.map_or("-".into(), human),
                d.refusals,
                human(d.live_bytes)
            );
        }
    }
    let _ = writeln!(
        out,
        "   total: peaks add up to {}; {} in {}; {} ({}) live at the end; {}",
        human(j.peak_sum),
        count(j.refusals, "refusal", "refusals"),
        count(j.backoff_episodes, "back-off episode", "back-off episodes"),
        count(j.live, "allocation", "allocations"),
        human(j.live_bytes),
        count(j.events, "event", "events")
    );
    if j.dropped > 0 {
        let _ = writeln!(out, "   {} dropped", count(j.dropped, "event", "events"));
    }
    if j.unfinished > 0 {
        let _ = writeln!(
            out,
            "   {} trace{} without a summary (still running, or killed)",
            j.unfinished,
            if j.unfinished == 1 { "" } else { "s" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const MIB: u64 = 1 << 20;

    fn header(pid: u32, rank: u32) -> String {
        format!(
            r#"{{"type":"header","schema":1,"version":"0.1.0","pid":{pid},"host":"node1","rank":{rank},"argv":["train","--x"],"start_unix_ns":1700000000000000000,"mode":"enforce","devices":[{{"ordinal":0,"name":"GPU A","total":8589934592,"quota":{q}}}]}}"#,
            q = 100 * MIB
        )
    }

    fn ev(kind: &str, t: u64, tid: u32, ptr: u64, bytes: u64, in_use: u64) -> String {
        let result = if kind == "refused" {
            "CUDA_ERROR_OUT_OF_MEMORY"
        } else {
            "CUDA_SUCCESS"
        };
        let reason = if kind == "refused" {
            r#","reason":"quota""#
        } else {
            ""
        };
        format!(
            r#"{{"type":"{kind}","t_ns":{t},"tid":{tid},"dev":0,"api":"cuMemAlloc_v2","ptr":"{ptr:#x}","bytes":{bytes},"result":"{result}","in_use":{in_use}{reason}}}"#
        )
    }

    /// Writes the lines to a file, builds the report of `files` and removes them.
    fn report(files: &[(&str, Vec<String>)]) -> Report {
        let paths: Vec<PathBuf> = files
            .iter()
            .map(|(name, lines)| {
                let path = std::env::temp_dir()
                    .join(format!("cuquota-report-{}-{name}", std::process::id()));
                std::fs::write(&path, lines.join("\n") + "\n").unwrap();
                path
            })
            .collect();
        let report = build(&paths, &options());
        for path in &paths {
            let _ = std::fs::remove_file(path);
        }
        report.unwrap()
    }

    fn options() -> Options {
        Options {
            skip_bad: false,
            progress: false,
        }
    }

    /// A BFC-like workload: grow, get refused, back off ×0.9 until it fits, leak one block.
    fn workload() -> Vec<String> {
        let mut lines = vec![header(100, 0)];
        lines.push(ev("alloc", 1_000, 7, 0x1000, 40 * MIB, 40 * MIB));
        lines.push(ev("alloc", 2_000, 7, 0x2000, 40 * MIB, 80 * MIB));
        lines.push(ev("refused", 3_000, 7, 0, 40 * MIB, 80 * MIB));
        lines.push(ev("refused", 4_000, 7, 0, 36 * MIB, 80 * MIB));
        lines.push(ev("refused", 5_000, 8, 0, 50 * MIB, 80 * MIB)); // another thread
        lines.push(ev("alloc", 6_000, 7, 0x3000, 20 * MIB, 100 * MIB));
        lines.push(ev("free", 7_000, 7, 0x1000, 40 * MIB, 60 * MIB));
        lines.push(ev("free", 8_000, 7, 0x2000, 40 * MIB, 20 * MIB));
        lines.push(
            r#"{"type":"summary","t_ns":9000,"end":"exit","events":8,"dropped":0,"devices":[]}"#
                .into(),
        );
        lines
    }

    #[test]
    fn aggregates_one_process() {
        let r = report(&[("one", workload())]);
        assert_eq!(r.processes.len(), 1);
        let p = &r.processes[0];
        assert_eq!((p.pid, p.events, p.end.as_deref()), (100, 8, Some("exit")));
        assert_eq!(p.duration_ns, 9000);
        let d = &p.devices[0];
        assert_eq!(
            (d.peak, d.peak_t_ns, d.quota),
            (100 * MIB, 6_000, Some(100 * MIB))
        );
        assert_eq!(
            (d.allocs, d.frees, d.refusals, d.refused_by_quota),
            (3, 2, 3, 3)
        );
        assert_eq!(
            (d.alloc_bytes, d.live, d.live_bytes),
            (100 * MIB, 1, 20 * MIB)
        );
        assert_eq!(d.timeline.len(), CHART_COLUMNS);
        assert_eq!(*d.timeline.iter().max().unwrap(), 100 * MIB);

        let e = &p.backoff_episodes;
        assert_eq!((e.count, e.recovered), (2, 1));
        assert_eq!(e.shown[0].refused, [40 * MIB, 36 * MIB]);
        assert_eq!((e.shown[0].got, e.shown[0].tid), (Some(20 * MIB), 7));
        assert_eq!((e.shown[1].got, e.shown[1].tid), (None, 8));

        let sizes: Vec<u64> = p.largest_allocations.iter().map(|a| a.bytes).collect();
        assert_eq!(sizes, [40 * MIB, 40 * MIB, 20 * MIB]);
        assert_eq!(p.largest_allocations[0].ptr, "0x1000"); // earlier first on a tie
        assert!(p.largest_allocations[2].live_at_exit);
        assert_eq!((p.live_at_exit.count, p.live_at_exit.bytes), (1, 20 * MIB));
        assert_eq!(p.live_at_exit.largest[0].ptr, "0x3000");
        assert_eq!(p.api_mix[0].api, "cuMemAlloc_v2");
        assert_eq!(p.api_mix[0].count, 8);

        let text = render(&r);
        for needle in [
            "== node1 · rank 0 · pid 100 · train --x",
            "quota 100.00 MiB, peak 100.00 MiB (100.0%) at 6 µs",
            "refused 40.00 MiB → 36.00 MiB; backed off, then got 20.00 MiB",
            "refused 50.00 MiB; gave up (the trace ended)",
            "Live at exit: 1 allocation, 20.00 MiB",
            "API mix (calls traced, refused ones included): cuMemAlloc_v2 8",
            "█",
            "== job: 1 process on 1 host",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn merges_files_into_a_job_and_notes_killed_processes() {
        let mut killed = vec![header(200, 1)];
        killed.push(ev("alloc", 1_000, 9, 0x1, 10 * MIB, 10 * MIB));
        killed.push(r#"{"type":"dropped","t_ns":2000,"count":5}"#.into());
        let r = report(&[("job-b", killed), ("job-a", workload())]);
        let ranks: Vec<u32> = r.processes.iter().map(|p| p.rank).collect();
        assert_eq!(ranks, [0, 1]);
        let j = &r.job;
        assert_eq!((j.processes, j.hosts.len(), j.unfinished), (2, 1, 1));
        assert_eq!(j.peak_sum, 110 * MIB);
        assert_eq!(
            (j.refusals, j.live, j.live_bytes, j.dropped),
            (3, 2, 30 * MIB, 5)
        );
        let text = render(&r);
        assert!(text.contains("no summary line: the process is still running, or was killed"));
        assert!(text.contains("1 trace without a summary (still running, or killed)"));
        assert!(text.contains("Live at the end of the trace: 1 allocation, 10.00 MiB"));
        assert!(text.contains("5 events were dropped"));
        assert!(text.contains("== job: 2 processes on 1 host"));
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(json["job"]["processes"], 2);
        assert_eq!(json["processes"][1]["end"], serde_json::Value::Null);
    }

    /// Counts of one are singular: "1 refusal", "1 event", "1 free".
    #[test]
    fn counts_of_one_are_singular() {
        let mut lines = vec![header(5, 0)];
        lines.push(ev("alloc", 1_000, 1, 0x1000, 10 * MIB, 10 * MIB));
        lines.push(ev("refused", 2_000, 1, 0, 200 * MIB, 10 * MIB));
        lines.push(ev("free", 3_000, 1, 0x1000, 10 * MIB, 0));
        lines.push(r#"{"type":"dropped","t_ns":3500,"count":1}"#.into());
        lines.push(
            r#"{"type":"summary","t_ns":4000,"end":"exit","events":3,"dropped":1,"devices":[]}"#
                .into(),
        );
        let text = render(&report(&[("singular", lines)]));
        for needle in [
            "mode enforce, 3 events over 4 µs",
            "1 event was dropped (trace buffer full): the figures below miss it",
            "     1 allocation (10.00 MiB in all), 1 free, 1 refusal (1 by quota, 0 by the driver), 0 live (0 B)",
            "Live at exit: 0 allocations, 0 B",
            "total: peaks add up to 10.00 MiB; 1 refusal in 1 back-off episode; 0 allocations (0 B) live at the end; 3 events",
            "   1 event dropped",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        assert!(
            !text.contains(" 1 refusals") && !text.contains(" 1 allocations"),
            "{text}"
        );
    }

    /// A caching allocator's block, allocated and freed again and again at one address, is
    /// one line with a count, not ten lines crowding out the others.
    #[test]
    fn largest_allocations_are_distinct() {
        let mut lines = vec![header(6, 0)];
        let mut t = 0;
        for _ in 0..12 {
            t += 1000;
            lines.push(ev("alloc", t, 1, 0xa000, 64 * MIB, 64 * MIB));
            t += 1000;
            lines.push(ev("free", t, 1, 0xa000, 64 * MIB, 0));
        }
        t += 1000;
        lines.push(ev("alloc", t, 1, 0xa000, 64 * MIB, 64 * MIB)); // the 13th, kept
        lines.push(ev("alloc", t + 1000, 1, 0xb000, 2 * MIB, 66 * MIB));
        lines.push(ev("alloc", t + 2000, 1, 0xa000 + 64 * MIB, MIB, 67 * MIB));
        let r = report(&[("distinct", lines)]);
        let got: Vec<(String, u64, u64, u64, bool)> = r.processes[0]
            .largest_allocations
            .iter()
            .map(|a| (a.ptr.clone(), a.bytes, a.count, a.t_ns, a.live_at_exit))
            .collect();
        assert_eq!(
            got,
            [
                ("0xa000".into(), 64 * MIB, 13, 1000, true),
                ("0xb000".into(), 2 * MIB, 1, t + 1000, true),
                (format!("{:#x}", 0xa000 + 64 * MIB), MIB, 1, t + 2000, true),
            ]
        );
        let text = render(&r);
        assert!(
            text.contains(
                "64.00 MiB  GPU 0  cuMemAlloc_v2  0xa000  13 times, first at 1 µs  (still live)"
            ),
            "{text}"
        );
    }

    /// The kept entries stay exact when more distinct allocations than TOP go by.
    #[test]
    fn largest_keeps_the_top_distinct_ones_exactly() {
        let mut top = Largest::default();
        let d = |bytes, t_ns, ptr| Distinct {
            bytes,
            t_ns,
            dev: 0,
            ptr,
            api: 0,
            count: 1,
        };
        for i in 0..100u64 {
            top.add(d(i % 25, i, i % 25)); // 25 distinct, each 4 times
        }
        let got: Vec<(u64, u64, u64)> = top
            .sorted()
            .iter()
            .map(|e| (e.bytes, e.count, e.t_ns))
            .collect();
        let want: Vec<(u64, u64, u64)> = (15..25).rev().map(|b| (b, 4, b)).collect();
        assert_eq!(got, want);
    }

    /// The same trace given twice (or two copies of it) is one process, with a warning.
    #[test]
    fn the_same_trace_twice_is_read_once() {
        let r = report(&[("twice-a", workload()), ("twice-b", workload())]);
        assert_eq!(r.processes.len(), 1);
        assert_eq!(r.job.processes, 1);
        assert_eq!(r.job.refusals, 3);
        assert!(r.processes[0].file.ends_with("twice-a"));
    }

    #[test]
    fn a_file_that_is_no_trace_gets_one_wording() {
        for (name, text) in [
            ("empty", ""),
            ("text", "hello\n"),
            ("json", "{\"a\":1}\n"),
            ("event", "{\"type\":\"alloc\"}\n"),
        ] {
            let path = std::env::temp_dir().join(format!(
                "cuquota-report-{}-notrace-{name}",
                std::process::id()
            ));
            std::fs::write(&path, text).unwrap();
            let err = build(std::slice::from_ref(&path), &options()).unwrap_err();
            let _ = std::fs::remove_file(&path);
            assert_eq!(err, traces::not_a_trace(&path), "{name}");
        }
    }

    #[test]
    fn times_keep_three_decimals_at_any_scale() {
        assert_eq!(seconds(0), "0 µs");
        assert_eq!(seconds(890_123), "890 µs");
        assert_eq!(seconds(4_567_890), "4.567 ms");
        assert_eq!(seconds(12_345_678_901), "12.345 s");
    }

    /// A header of a writer that names what the quota counts.
    fn header_counting(pid: u32, mode: &str, count: &str) -> String {
        header(pid, 0)
            .replace(r#""mode":"enforce""#, &format!(r#""mode":"{mode}""#))
            .replace("]}", &format!(r#"],"quota_counts":"{count}"}}"#))
    }

    fn part(kind: &str, t: u64, api: &str, part: &str, bytes: u64, in_use: u64) -> String {
        format!(
            r#"{{"type":"{kind}","t_ns":{t},"tid":1,"dev":0,"api":"{api}","part":"{part}","bytes":{bytes},"in_use":{in_use}}}"#
        )
    }

    fn refused(t: u64, api: &str, bytes: u64, in_use: u64, observed: bool) -> String {
        let observed = if observed { r#","observed":true"# } else { "" };
        format!(
            r#"{{"type":"refused","t_ns":{t},"tid":1,"dev":0,"api":"{api}","ptr":"0x0","bytes":{bytes},"result":"CUDA_ERROR_OUT_OF_MEMORY","in_use":{in_use},"reason":"quota"{observed}}}"#
        )
    }

    /// Under a 100 MiB quota: a 30 MiB context, 40 MiB allocated, 8 MiB left in a pool's
    /// cache, 10 MiB of graph memory, a trim of the cache, then a graph launch and a second
    /// context refused.
    fn footprint_run(count: &str) -> Vec<String> {
        vec![
            header_counting(9, "enforce", count),
            part(
                "footprint",
                1_000,
                "cuDevicePrimaryCtxRetain",
                "context",
                30 * MIB,
                30 * MIB,
            ),
            ev("alloc", 2_000, 1, 0x1000, 40 * MIB, 70 * MIB),
            ev("alloc", 3_000, 1, 0x2000, 8 * MIB, 78 * MIB),
            ev("free", 4_000, 1, 0x2000, 8 * MIB, 70 * MIB),
            part(
                "footprint",
                4_000,
                "cuMemFreeAsync",
                "pool_cache",
                8 * MIB,
                78 * MIB,
            ),
            part(
                "footprint",
                5_000,
                "cuGraphUpload",
                "graph",
                10 * MIB,
                88 * MIB,
            ),
            part(
                "trim",
                6_000,
                "cuMemAlloc_v2",
                "pool_cache",
                8 * MIB,
                80 * MIB,
            ),
            part(
                "footprint",
                6_000,
                "cuMemAlloc_v2",
                "pool_cache",
                0,
                80 * MIB,
            ),
            ev("alloc", 6_500, 1, 0x3000, 12 * MIB, 92 * MIB),
            refused(7_000, "cuGraphLaunch", 20 * MIB, 92 * MIB, false),
            refused(8_000, "cuCtxCreate_v2", 30 * MIB, 92 * MIB, false),
            ev("free", 9_000, 1, 0x1000, 40 * MIB, 52 * MIB),
        ]
    }

    #[test]
    fn the_footprint_is_tallied_by_part() {
        let r = report(&[("footprint", footprint_run("footprint"))]);
        let p = &r.processes[0];
        assert_eq!(p.count.as_deref(), Some("footprint"));
        // Every line is an event; the footprint and trim lines are no calls.
        assert_eq!(p.events, 12);
        let calls: u64 = p.api_mix.iter().map(|a| a.count).sum();
        assert_eq!(calls, 7);
        assert!(!p.api_mix.iter().any(|a| a.api == "cuGraphUpload"));
        let d = &p.devices[0];
        assert_eq!(
            (d.peak, d.peak_t_ns, d.in_use_at_end),
            (92 * MIB, 6_500, 52 * MIB)
        );
        let part = |at_end, peak, at_peak| PartReport {
            at_end: at_end * MIB,
            peak: peak * MIB,
            at_peak: at_peak * MIB,
        };
        assert_eq!(
            d.footprint,
            Some(FootprintReport {
                counted: true,
                allocations: part(12, 52, 52),
                pool_cache: part(0, 8, 0),
                graph: part(10, 10, 10),
                context: part(30, 30, 30),
                trims: 1,
                trimmed_bytes: 8 * MIB,
            })
        );
        // A context or a graph refused is listed apart, and no back-off episode.
        assert_eq!((d.refusals, d.refused_by_quota), (2, 2));
        assert_eq!(d.refused_contexts_and_graphs, 2);
        let shown: Vec<(&str, &str, u64)> = d
            .refused_contexts_and_graphs_shown
            .iter()
            .map(|w| (w.api.as_str(), w.what, w.bytes))
            .collect();
        assert_eq!(
            shown,
            [
                ("cuGraphLaunch", "graph launch", 20 * MIB),
                ("cuCtxCreate_v2", "context", 30 * MIB)
            ]
        );
        assert_eq!(p.backoff_episodes.count, 0);

        let text = render(&r);
        for needle in [
            "mode enforce, counting the footprint, 12 events over 9 µs",
            "quota 100.00 MiB, footprint peak 92.00 MiB (92.0%) at 6 µs",
            "     Footprint by part:            at end      highest  at the peak",
            "       allocations              12.00 MiB    52.00 MiB    52.00 MiB",
            "       pool cache                     0 B     8.00 MiB          0 B",
            "       graph                    10.00 MiB    10.00 MiB    10.00 MiB",
            "       context                  30.00 MiB    30.00 MiB    30.00 MiB",
            "     cuquota trimmed pools or graph memory 1 time to make room, releasing 8.00 MiB",
            "     refused at 7 µs via cuGraphLaunch: graph launch needing 20.00 MiB, with 92.00 MiB in use",
            "     refused at 8 µs via cuCtxCreate_v2: a new context (30.00 MiB), with 92.00 MiB in use",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["processes"][0]["count"], "footprint");
        assert_eq!(
            json["processes"][0]["devices"][0]["footprint"]["context"]["at_end"],
            30 * MIB
        );
    }

    /// Counting allocations, the parts a newer writer still reports are what the process also
    /// held: `in_use` is of allocations alone.
    #[test]
    fn counting_allocations_the_parts_are_not_counted() {
        let mut lines = vec![header_counting(9, "enforce", "allocations")];
        lines.push(part(
            "footprint",
            1_000,
            "cuDevicePrimaryCtxRetain",
            "context",
            30 * MIB,
            0,
        ));
        lines.push(ev("alloc", 2_000, 1, 0x1000, 40 * MIB, 40 * MIB));
        let r = report(&[("allocations", lines)]);
        let d = &r.processes[0].devices[0];
        let f = d.footprint.as_ref().unwrap();
        assert!(!f.counted);
        assert_eq!(
            (f.allocations.at_end, f.allocations.peak),
            (40 * MIB, 40 * MIB)
        );
        assert_eq!((f.context.at_end, f.context.at_peak), (30 * MIB, 30 * MIB));
        let text = render(&r);
        assert!(text.contains("counting allocations, 2 events"), "{text}");
        assert!(text.contains("quota 100.00 MiB, peak 40.00 MiB"), "{text}");
        assert!(text.contains("     Also held (not counted):"), "{text}");

        // A footprint-mode trace with no part but allocations still shows its parts.
        let lines = vec![
            header_counting(9, "enforce", "footprint"),
            ev("alloc", 2_000, 1, 0x1000, 40 * MIB, 40 * MIB),
        ];
        let r = report(&[("only-allocations", lines)]);
        let f = r.processes[0].devices[0].footprint.clone().unwrap();
        assert_eq!(
            (f.counted, f.allocations.peak, f.context.peak),
            (true, 40 * MIB, 0)
        );
    }

    /// A trace that does not say what it counted (older writers) has no footprint figures:
    /// its report is what it was.
    #[test]
    fn older_traces_have_no_footprint_figures() {
        let r = report(&[("older", workload())]);
        let json = serde_json::to_value(&r).unwrap();
        let p = &json["processes"][0];
        assert!(p.get("count").is_none());
        for key in [
            "footprint",
            "refused_contexts_and_graphs",
            "refused_contexts_and_graphs_shown",
        ] {
            assert!(p["devices"][0].get(key).is_none(), "{key}");
        }
        let text = render(&r);
        assert!(
            !text.contains("counting") && !text.contains("Footprint"),
            "{text}"
        );
    }

    /// Observe mode counting the footprint: the quota that would have held is the footprint
    /// peak, said by part; a would-be refused context is worded as one.
    #[test]
    fn observe_mode_sizes_the_quota_by_the_footprint() {
        let lines = vec![
            header_counting(9, "observe", "footprint"),
            part(
                "footprint",
                1_000,
                "cuDevicePrimaryCtxRetain",
                "context",
                60 * MIB,
                60 * MIB,
            ),
            refused(2_000, "cuMemAlloc_v2", 50 * MIB, 60 * MIB, true),
            ev("alloc", 2_000, 1, 0x1000, 50 * MIB, 110 * MIB),
            refused(3_000, "cuCtxCreate_v2", 60 * MIB, 110 * MIB, true),
            part(
                "footprint",
                3_000,
                "cuCtxCreate_v2",
                "context",
                120 * MIB,
                170 * MIB,
            ),
        ];
        let r = report(&[("observe", lines)]);
        let d = &r.processes[0].devices[0];
        assert_eq!(
            (d.peak, d.refused_observed, d.refused_contexts_and_graphs),
            (170 * MIB, 2, 0)
        );
        assert_eq!(d.observed_shown[1].what, Some("context"));
        assert_eq!(d.observed_shown[0].what, None);
        let text = render(&r);
        for needle in [
            "observe mode: a quota of 170.00 MiB (178257920 bytes) or more would have held this run (its footprint peak: allocations 50.00 MiB, context 120.00 MiB)",
            "        50.00 MiB  at 2 µs via cuMemAlloc_v2 (in use 60.00 MiB)",
            "       a new context (60.00 MiB)  at 3 µs via cuCtxCreate_v2 (in use 110.00 MiB)",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn refusals_of_contexts_and_graphs_are_named() {
        for (api, what) in [
            ("cuDevicePrimaryCtxRetain", Some("context")),
            ("cuCtxCreate", Some("context")),
            ("cuCtxCreate_v4", Some("context")),
            ("cuGreenCtxCreate", Some("context")),
            ("cuCtxSetLimit", Some("context limit")),
            ("cuModuleLoadDataEx", Some("module load")),
            ("cuLibraryLoadFromFile", Some("module load")),
            ("cuGraphLaunch", Some("graph launch")),
            ("cuGraphLaunch_ptsz", Some("graph launch")),
            ("cuGraphUpload", Some("graph upload")),
            ("cuMemAlloc_v2", None),
            ("cuMemAllocAsync", None),
            ("cuMemCreate", None),
        ] {
            assert_eq!(refused_what(api), what, "{api}");
        }
        assert_eq!(
            refused_words("cuCtxCreate_v2", 512 * MIB),
            "a new context (512.00 MiB)"
        );
        assert_eq!(
            refused_words("cuGraphLaunch", 2 << 30),
            "graph launch needing 2.00 GiB"
        );
        assert_eq!(refused_words("cuMemAlloc_v2", MIB), "1.00 MiB");
    }

    /// A process that starts its GPU work late: the terminal chart spans its events (the
    /// first one at 9 s), not the quiet start; the JSON timeline still counts from start.
    #[test]
    fn the_terminal_chart_starts_at_the_first_event() {
        let s = 1_000_000_000;
        let lines = vec![
            header(3, 0),
            ev("alloc", 9 * s, 1, 0x1000, 50 * MIB, 50 * MIB),
            ev("alloc", 9 * s + s / 2, 1, 0x2000, 50 * MIB, 100 * MIB),
            ev("free", 10 * s, 1, 0x1000, 50 * MIB, 50 * MIB),
        ];
        let r = report(&[("late", lines)]);
        let d = &r.processes[0].devices[0];
        assert_eq!(r.processes[0].first_event_ns, 9 * s);
        // The first half of the chart at 50 MiB, the second at 100 MiB, the last at 100 too
        // (the free is the last event: its slice held 100 MiB before it).
        assert_eq!(d.chart.len(), CHART_COLUMNS);
        assert!(
            d.chart[..29].iter().all(|&v| v == 50 * MIB),
            "{:?}",
            d.chart
        );
        assert!(
            d.chart[31..].iter().all(|&v| v == 100 * MIB),
            "{:?}",
            d.chart
        );
        assert_eq!(d.timeline[..53], [0; 53], "from the process's start");
        let text = render(&r);
        let bottom = format!("                  0 ┤{}", "█".repeat(CHART_COLUMNS));
        assert!(text.contains(&bottom), "{text}");
        let axis = format!("                     9.000 s{}10.000 s", " ".repeat(45));
        assert!(text.contains(&axis), "{text}");
    }

    #[test]
    fn long_episodes_keep_head_and_tail() {
        let mut lines = vec![header(1, 0)];
        for i in 0..20u64 {
            lines.push(ev("refused", i, 1, 0, 100 - i, 0));
        }
        lines.push(ev("alloc", 30, 1, 0x9, 70, 70));
        let r = report(&[("long", lines)]);
        let ep = &r.processes[0].backoff_episodes.shown[0];
        assert_eq!(ep.refusals, 20);
        assert_eq!(ep.refused, [100, 99, 98, 97, 96, 95, 82, 81]);
        assert_eq!(ep.refused_elided, 12);
        assert!(render(&r).contains("… 12 more …"));
    }
}
