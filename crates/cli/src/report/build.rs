//! From a trace's events to the report's model, in one pass per trace.

use super::model::*;
use super::{CHART_COLUMNS, EPISODES_SHOWN, EPISODE_HEAD, EPISODE_TAIL, OBSERVED_SHOWN, TOP};
use crate::symbols::{Stacks, Symbolizer};
use crate::timeline::Timeline;
use crate::traces;
use crate::walk::{walk, DeviceParts, Visit};
use cuquota_driver::results::names;
use cuquota_format::episodes::{Episode, EpisodeEnd, GaveUp};
use cuquota_format::hash::BuildKeyHasher;
use cuquota_format::part::PerLayer;
use cuquota_format::read::{Options, Stats};
use cuquota_format::schema::{kind, parse_ptr, EventLine, Header, Summary};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::path::PathBuf;

/// `debug_dirs`: where to look for modules (or their debug files) by build id, to
/// symbolise call stacks.
pub fn build(
    traces: &[PathBuf],
    options: &Options,
    debug_dirs: &[PathBuf],
) -> Result<Report, String> {
    for path in traces {
        traces::header(path)?;
    }
    let mut processes = Processes(Vec::new());
    walk(traces, options, &mut processes)?;
    let mut symbols = Symbolizer::new(debug_dirs);
    let mut processes: Vec<ProcessReport> = processes
        .0
        .into_iter()
        .map(|p| p.finish(&mut symbols))
        .collect();
    processes.sort_by(|a, b| {
        (&a.host, a.rank, a.start_unix_ns, a.pid).cmp(&(&b.host, b.rank, b.start_unix_ns, b.pid))
    });
    let job = job(&processes);
    Ok(Report { processes, job })
}

/// The processes read so far.
struct Processes(Vec<Process>);

impl Visit for Processes {
    type Process = Process;

    fn start(&mut self, file: &str, header: &Header) -> Process {
        Process::new(file.to_string(), header.clone())
    }

    fn event(&mut self, p: &mut Process, e: &EventLine) {
        p.event(e);
    }

    fn summary(&mut self, p: &mut Process, s: &Summary) {
        p.summary(s.clone());
    }

    fn finish(&mut self, mut p: Process, stats: Option<Stats>) {
        if let Some(stats) = stats {
            p.skipped = stats.skipped;
            p.truncated = stats.truncated;
        }
        self.0.push(p);
    }
}

#[derive(Default)]
struct Device {
    report: DeviceReport,
    timeline: Option<Timeline>,
    /// As `timeline`, from the process's first event (the terminal chart).
    chart: Option<Timeline>,
    parts: PartTally,
    /// With call stacks: live bytes by stack, now and at the peak.
    sites: SiteBooks,
}

/// A device's live allocations by call stack (`(count, bytes)` by stack id, 0: none), and
/// as they were at the device's peak. The peak's copy is taken lazily: an event that sets a
/// new peak leaves `pending` (the live set now is the peak's), and the next event that does
/// not copies the set before it changes it; so one copy per peak that is left, not per event.
#[derive(Default)]
struct SiteBooks {
    live: HashMap<u64, (u64, u64)>,
    at_peak: Option<HashMap<u64, (u64, u64)>>,
    pending: bool,
}

impl SiteBooks {
    /// Before an event of the device; `peak`: it sets the device's new peak.
    fn before(&mut self, peak: bool) {
        if self.pending && !peak {
            self.at_peak = Some(self.live.clone());
            self.pending = false;
        }
    }

    /// After the event.
    fn after(&mut self, peak: bool) {
        self.pending |= peak;
    }

    fn add(&mut self, stack: u64, bytes: u64) {
        let e = self.live.entry(stack).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(bytes);
    }

    fn remove(&mut self, stack: u64, bytes: u64) {
        if let Some(e) = self.live.get_mut(&stack) {
            e.0 = e.0.saturating_sub(1);
            e.1 = e.1.saturating_sub(bytes);
            if e.0 == 0 {
                self.live.remove(&stack);
            }
        }
    }

    /// The live set at the device's peak.
    fn peak(&self) -> &HashMap<u64, (u64, u64)> {
        match (&self.at_peak, self.pending) {
            (Some(at), false) => at,
            _ => &self.live,
        }
    }
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
struct PartTally {
    /// Each part now, and whether any `footprint` or `trim` line was seen.
    device: DeviceParts,
    /// Every layer's highest, and its value at the device's peak.
    peak: PerLayer<u64>,
    at_peak: PerLayer<u64>,
    trims: u64,
    trimmed_bytes: u64,
}

impl PartTally {
    /// After an event that left `in_use` charged; `peak`: it is the device's new peak.
    fn held(&mut self, in_use: u64, footprint: bool, peak: bool) {
        let all = self.device.layers(in_use, footprint);
        for (p, v) in self.peak.0.iter_mut().zip(all.0) {
            *p = (*p).max(v);
        }
        if peak {
            self.at_peak = all;
        }
    }

    fn report(&self, in_use_at_end: u64, footprint: bool) -> FootprintReport {
        let end = self.device.layers(in_use_at_end, footprint);
        FootprintReport {
            counted: footprint,
            layers: PerLayer::from_fn(|l| PartReport {
                at_end: end[l],
                peak: self.peak[l].max(end[l]),
                at_peak: self.at_peak[l],
            }),
            trims: self.trims,
            trimmed_bytes: self.trimmed_bytes,
        }
    }
}

struct Live {
    bytes: u64,
    t_ns: u64,
    api: u32,
    /// Its stack id (0: none); None when the trace had no stacks when it was made (it is
    /// then in no device's `SiteBooks`).
    stack: Option<u64>,
}

/// Largest allocations: a min-heap of (bytes, earlier first, dev, ptr, api, stack).
type Big = Reverse<(u64, Reverse<u64>, u32, u64, u32, u64)>;

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
    /// The first one's stack id (0: none).
    stack: u64,
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
    /// What the process held at the first refusal, by layer, and its quota.
    held: PerLayer<u64>,
    /// With stacks, for an episode that will be shown: its live allocations by stack then.
    live_by_stack: Option<HashMap<u64, (u64, u64)>>,
    quota: Option<u64>,
    group: Option<EpisodeGroup>,
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
    /// The last event's time (the summary line's not counted): where the charts end.
    last_event_t_ns: u64,
    /// The first device-memory event's time.
    first_t_ns: Option<u64>,
    summary: Option<Summary>,
    skipped: u64,
    truncated: bool,
    /// Call stacks and modules (`CUQUOTA_STACKS`).
    stacks: Stacks,
    /// Back-off episodes begun so far (those past the shown ones keep no live set).
    episodes_opened: u64,
    /// Allocations without a stack in a trace with stacks.
    without_stack: u64,
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
            last_event_t_ns: 0,
            first_t_ns: None,
            summary: None,
            skipped: 0,
            truncated: false,
            stacks: Stacks::default(),
            episodes_opened: 0,
            without_stack: 0,
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
        self.last_event_t_ns = self.last_event_t_ns.max(e.t_ns);
        match e.kind.as_ref() {
            kind::LIMIT => {
                self.events += 1;
                let dev = device(&mut self.devices, e.dev);
                let change = QuotaChange {
                    t_ns: e.t_ns,
                    quota: e.limit,
                };
                dev.report.quota_changes.push(change);
            }
            kind::ALLOC | kind::FREE | kind::REFUSED | kind::MEMINFO | kind::CONTEXT => {
                self.call(e);
            }
            kind::FOOTPRINT | kind::TRIM => {
                // The consequences of a call (one call may write several), not calls: not in
                // the API mix.
                self.events += 1;
                self.part_changed(e);
            }
            kind::BACKOFF => {
                // The core's own grouping; episodes are rebuilt from the refusals instead.
                self.events += 1;
            }
            kind::DROPPED => self.dropped += e.count,
            kind::STACK | kind::MODULE => {
                self.stacks.line(e);
            }
            _ => {} // a line type from a newer cuquota
        }
    }

    /// The line of a driver call: counted in the API mix, its device's figures, then what
    /// the call did.
    fn call(&mut self, e: &EventLine) {
        self.events += 1;
        let kind = e.kind.as_ref();
        if kind == kind::CONTEXT {
            self.context_freed(e);
        }
        let api = self.api(&e.api);
        self.api_counts[api as usize] += 1;
        let ok = e.result.is_empty() || e.result == names::CUDA_SUCCESS;
        let peak = self.held(e);
        match kind {
            kind::ALLOC if ok => self.allocated(e, api),
            kind::FREE if ok => self.freed(e),
            kind::REFUSED => self.refused(e, api),
            kind::MEMINFO => device(&mut self.devices, e.dev).report.meminfo_calls += 1,
            _ => {}
        }
        if self.stacks.any() && peak {
            device(&mut self.devices, e.dev).sites.after(true);
        }
    }

    /// A call's device after it: what it holds now, its peak, parts and charts. Returns
    /// whether this is the device's new peak.
    fn held(&mut self, e: &EventLine) -> bool {
        let footprint = self.header.counts_footprint();
        let first = *self.first_t_ns.get_or_insert(e.t_ns);
        let dev = device(&mut self.devices, e.dev);
        let r = &mut dev.report;
        r.in_use_at_end = e.in_use;
        // A refusal's figure includes requests in flight: the peak is of what was held.
        let mut peak = false;
        if e.kind != kind::REFUSED {
            peak = e.in_use > r.peak;
            if peak {
                r.peak = e.in_use;
                r.peak_t_ns = e.t_ns;
            }
            dev.parts.held(e.in_use, footprint, peak);
        }
        dev.add(e.t_ns, e.in_use, first);
        if self.stacks.any() {
            dev.sites.before(peak);
        }
        peak
    }

    /// A successful allocation: live, among the largest, by call stack; it may end its
    /// thread's back-off episode.
    fn allocated(&mut self, e: &EventLine, api: u32) {
        let t = e.t_ns;
        let with_stacks = self.stacks.any();
        let dev = device(&mut self.devices, e.dev);
        let r = &mut dev.report;
        r.allocs += 1;
        r.alloc_bytes = r.alloc_bytes.saturating_add(e.bytes);
        let sites = &mut dev.sites;
        let ptr = parse_ptr(&e.ptr).unwrap_or(0);
        let stack = with_stacks.then_some(e.stack);
        if with_stacks {
            sites.add(e.stack, e.bytes);
            self.without_stack += u64::from(e.stack == 0);
        }
        let live = Live {
            bytes: e.bytes,
            t_ns: t,
            api,
            stack,
        };
        if let Some(old) = self.live.insert((e.dev, ptr), live) {
            // The same address again without its free (a lost line): replaced.
            if let Some(s) = old.stack {
                sites.remove(s, old.bytes);
            }
        }
        self.largest.add(Distinct {
            bytes: e.bytes,
            t_ns: t,
            dev: e.dev,
            ptr,
            api,
            count: 1,
            stack: e.stack,
        });
        if let Some(open) = self.open.get(&e.tid) {
            if let Some(outcome) = open.episode.succeeded(e.dev, e.bytes, t) {
                let open = self.open.remove(&e.tid).unwrap();
                self.close_episode(e.tid, open, outcome, t);
            }
        }
    }

    /// A successful free: no longer live.
    fn freed(&mut self, e: &EventLine) {
        let dev = device(&mut self.devices, e.dev);
        dev.report.frees += 1;
        if let Some(ptr) = parse_ptr(&e.ptr) {
            if let Some(Live {
                stack: Some(s),
                bytes,
                ..
            }) = self.live.remove(&(e.dev, ptr))
            {
                dev.sites.remove(s, bytes);
            }
        }
    }

    /// A refusal: counted and charted; one that was allowed (observe mode) or of a context
    /// or graph is listed, an out-of-memory one joins or begins its thread's episode.
    fn refused(&mut self, e: &EventLine, api: u32) {
        let t = e.t_ns;
        let dev = device(&mut self.devices, e.dev);
        let r = &mut dev.report;
        r.refusals += 1;
        if e.reason.as_deref() == Some("driver") {
            r.refused_by_driver += 1;
        } else {
            r.refused_by_quota += 1;
        }
        let timeline = dev.timeline.as_mut().expect("added by `held`");
        timeline.refusal(t, e.in_use);
        let r = &mut dev.report;
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
        if e.result == names::CUDA_ERROR_OUT_OF_MEMORY {
            self.out_of_memory(e, api);
        }
    }

    /// An out-of-memory refusal: it joins its thread's open episode, or ends it and begins
    /// the next, or begins one.
    fn out_of_memory(&mut self, e: &EventLine, api: u32) {
        let (t, dev) = (e.t_ns, e.dev);
        let ended = match self.open.get_mut(&e.tid) {
            Some(open) => match open.episode.refused(dev, e.bytes, t) {
                None => return, // joined
                Some(outcome) => Some(outcome),
            },
            None => None,
        };
        let footprint = self.header.counts_footprint();
        let d = device(&mut self.devices, dev);
        let group = e.group_in_use.map(|in_use| EpisodeGroup {
            name: e.group.as_deref().unwrap_or_default().to_string(),
            in_use,
            limit: e.group_limit.unwrap_or(0),
            holders: e.holders.clone().unwrap_or_default(),
        });
        // Only the episodes that can be shown keep a copy of the live set.
        let shown = self.episodes_opened < EPISODES_SHOWN as u64;
        self.episodes_opened += 1;
        let live_by_stack = (shown && self.stacks.any()).then(|| d.sites.live.clone());
        let started = OpenEpisode {
            episode: Episode::start(dev, e.bytes, t),
            t_ns: t,
            api,
            live_by_stack,
            held: d.parts.device.layers(e.in_use, footprint),
            quota: if group.is_some() {
                None
            } else {
                d.report.quota
            },
            group,
        };
        if let (Some(old), Some(outcome)) = (self.open.insert(e.tid, started), ended) {
            self.close_episode(e.tid, old, outcome, t);
        }
    }

    /// A `footprint` line (a part's new total) or a `trim` line (cuquota released a part).
    fn part_changed(&mut self, e: &EventLine) {
        let footprint = self.header.counts_footprint();
        let first = *self.first_t_ns.get_or_insert(e.t_ns);
        let dev = device(&mut self.devices, e.dev);
        let parts = &mut dev.parts;
        parts.device.line(e);
        if e.kind == kind::TRIM {
            parts.trims += 1;
            parts.trimmed_bytes = parts.trimmed_bytes.saturating_add(e.bytes);
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
            if self.stacks.any() {
                dev.sites.before(peak);
                dev.sites.after(peak);
            }
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
                freed_on.push((dev, live.bytes, live.stack));
            }
            !freed
        });
        for (dev, bytes, stack) in freed_on {
            if let Some(d) = self.devices.get_mut(&dev) {
                if let Some(stack) = stack {
                    d.sites.before(false);
                    d.sites.remove(stack, bytes);
                }
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
    fn close_episode(&mut self, tid: u32, open: OpenEpisode, outcome: EpisodeEnd, t_ns: u64) {
        let (got, outcome_words, gave_up) = match outcome {
            EpisodeEnd::BackedOff { got, .. } => (Some((got, t_ns)), "backed off", None),
            EpisodeEnd::Retried { got, .. } => (Some((got, t_ns)), "retried", None),
            EpisodeEnd::GaveUp(why) => (
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
                held: open.held,
                quota: open.quota,
                group: open.group,
                live_by_call_site: Vec::new(),
                live_by_stack: open.live_by_stack,
            });
        }
    }

    fn summary(&mut self, s: Summary) {
        self.end_t_ns = self.end_t_ns.max(s.t_ns);
        self.summary = Some(s);
    }

    fn finish(mut self, symbols: &mut Symbolizer) -> ProcessReport {
        self.close_open_episodes();
        let mut sites = Sites {
            symbols,
            stacks: &self.stacks,
            named: HashMap::new(),
        };
        let (largest, live_at_exit, live_per_dev) = self.allocations(&mut sites);
        for ep in &mut self.episodes.shown {
            if let Some(by_stack) = ep.live_by_stack.take() {
                ep.live_by_call_site = by_site(&by_stack, &mut sites);
            }
        }
        let ends = self.ends();
        let footprint = self.header.counts_footprint();
        let devices: Vec<DeviceReport> = std::mem::take(&mut self.devices)
            .into_values()
            .filter(|d| d.timeline.is_some())
            .map(|d| {
                let live = live_per_dev.get(&d.report.dev).copied().unwrap_or_default();
                d.finish(live, &ends, footprint, &mut sites)
            })
            .collect();
        self.report(devices, largest, live_at_exit)
    }

    /// Episodes open at the end of the trace: the caller gave up (or was killed).
    fn close_open_episodes(&mut self) {
        let mut open: Vec<_> = self.open.drain().collect();
        open.sort_by_key(|(_, o)| o.t_ns);
        let end = self.end_t_ns;
        for (tid, o) in open {
            let outcome = o.episode.at_exit(end);
            self.close_episode(tid, o, outcome, end);
        }
        self.episodes.shown.sort_by_key(|e| e.t_ns);
    }

    /// The largest allocations, those live at the end, and the live ones' `(count, bytes)`
    /// by device.
    fn allocations(
        &self,
        sites: &mut Sites,
    ) -> (Vec<AllocReport>, LiveReport, BTreeMap<u32, (u64, u64)>) {
        let mut live_per_dev: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let mut live_top: BinaryHeap<Big> = BinaryHeap::new();
        for (&(dev, ptr), l) in &self.live {
            let e = live_per_dev.entry(dev).or_default();
            e.0 += 1;
            e.1 += l.bytes;
            let stack = l.stack.unwrap_or(0);
            live_top.push(Reverse((l.bytes, Reverse(l.t_ns), dev, ptr, l.api, stack)));
            if live_top.len() > TOP {
                live_top.pop();
            }
        }
        let largest: Vec<AllocReport> = (self.largest.sorted().into_iter())
            .map(|d| self.alloc_report(d, sites))
            .collect();
        let live_largest: Vec<AllocReport> = live_top
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse((bytes, Reverse(t_ns), dev, ptr, api, stack))| {
                let d = Distinct {
                    bytes,
                    t_ns,
                    dev,
                    ptr,
                    api,
                    count: 1,
                    stack,
                };
                self.alloc_report(d, sites)
            })
            .collect();
        let live = LiveReport {
            count: self.live.len() as u64,
            bytes: live_per_dev.values().map(|v| v.1).sum(),
            largest: live_largest,
        };
        (largest, live, live_per_dev)
    }

    fn alloc_report(&self, d: Distinct, sites: &mut Sites) -> AllocReport {
        AllocReport {
            site: sites.site(d.stack),
            dev: d.dev,
            ptr: format!("{:#x}", d.ptr),
            bytes: d.bytes,
            t_ns: d.t_ns,
            api: self.api_names[d.api as usize].clone(),
            count: d.count,
            live_at_exit: (self.live.get(&(d.dev, d.ptr))).is_some_and(|l| l.bytes == d.bytes),
        }
    }

    /// Where the charts end.
    fn ends(&self) -> Ends {
        let first = self.first_t_ns.unwrap_or(0);
        Ends {
            end: self.end_t_ns,
            first,
            last: self.last_event_t_ns.max(first),
        }
    }

    /// The process's report, from its devices' and allocations'.
    fn report(
        self,
        devices: Vec<DeviceReport>,
        largest: Vec<AllocReport>,
        live_at_exit: LiveReport,
    ) -> ProcessReport {
        let ends = self.ends();
        let mut api_mix: Vec<ApiCount> = self
            .api_names
            .into_iter()
            .zip(self.api_counts)
            .map(|(api, count)| ApiCount { api, count })
            .collect();
        api_mix.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.api.cmp(&b.api)));
        let stacks_report = self.stacks.any().then(|| StacksReport {
            stacks: self.stacks.count(),
            allocations_without_stack: self.without_stack,
            pool_allocations: api_mix.iter().any(|a| is_pool_api(&a.api)),
        });
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
            group: self.header.group,
            start_unix_ns: self.header.start_unix_ns,
            duration_ns: ends.end,
            end: self.summary.map(|s| s.end),
            events: self.events,
            dropped,
            skipped_lines: self.skipped,
            truncated_last_line: self.truncated,
            devices,
            backoff_episodes: self.episodes,
            largest_allocations: largest,
            live_at_exit,
            api_mix,
            stacks: stacks_report,
            first_event_ns: ends.first,
            last_event_ns: ends.last,
        }
    }
}

/// Where a process's charts end: `end` the trace's (its summary line's time counted),
/// `first` and `last` its first device-memory event's and its last event's time.
struct Ends {
    end: u64,
    first: u64,
    last: u64,
}

impl Device {
    /// The device's report at the end of the trace; `live`: its live `(count, bytes)`.
    fn finish(
        mut self,
        (live, live_bytes): (u64, u64),
        ends: &Ends,
        footprint: bool,
        sites: &mut Sites,
    ) -> DeviceReport {
        if footprint || self.parts.device.seen {
            let parts = self.parts.report(self.report.in_use_at_end, footprint);
            self.report.footprint = Some(parts);
        }
        self.report.live = live;
        self.report.live_bytes = live_bytes;
        if let Some(t) = &self.timeline {
            self.report.timeline = t.columns(ends.end, CHART_COLUMNS);
        }
        if let Some(t) = &self.chart {
            self.report.chart = t.columns(ends.last.saturating_sub(ends.first), CHART_COLUMNS);
        }
        if sites.stacks.any() {
            self.report.by_call_site = by_site(self.sites.peak(), sites);
        }
        self.report
    }
}

/// Call sites by stack id, each stack symbolised once.
struct Sites<'a> {
    symbols: &'a mut Symbolizer,
    stacks: &'a Stacks,
    named: HashMap<u64, Option<Site>>,
}

impl Sites<'_> {
    /// Stack 0 (none) has no site.
    fn site(&mut self, stack: u64) -> Option<Site> {
        if stack == 0 {
            return None;
        }
        let (symbols, stacks) = (&mut *self.symbols, self.stacks);
        (self.named.entry(stack))
            .or_insert_with(|| symbols.site(stacks, stack))
            .clone()
    }
}

/// Live allocations by call stack, grouped by the site each stack symbolises to (stacks
/// that differ only above the allocating frame are one site); most bytes first.
fn by_site(by_stack: &HashMap<u64, (u64, u64)>, sites: &mut Sites) -> Vec<SiteLive> {
    let mut sums: HashMap<Option<Site>, (u64, u64)> = HashMap::new();
    for (&stack, &(count, bytes)) in by_stack {
        let e = sums.entry(sites.site(stack)).or_default();
        e.0 += count;
        e.1 = e.1.saturating_add(bytes);
    }
    let mut v: Vec<SiteLive> = sums
        .into_iter()
        .map(|(site, (allocations, bytes))| SiteLive {
            site,
            allocations,
            bytes,
        })
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    v
}

/// Allocations from a memory pool.
fn is_pool_api(api: &str) -> bool {
    api.starts_with("cuMemAllocAsync") || api.starts_with("cuMemAllocFromPoolAsync")
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

#[cfg(test)]
mod tests;
