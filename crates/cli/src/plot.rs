//! `cuquota plot`: an SVG chart of device memory in use over time, as small multiples: one
//! panel per process and GPU, stacked on a shared time axis that spans the events (not the
//! process's idle start), each with its quota as a dark dashed line (stepping where `cuquota
//! set` changed it) and its refusals as crosses at the level the refused request would have
//! reached (in use + the request); refusals closer than one time bucket share a cross, whose
//! count (×N) stands beside it. A group member's refusals are the group's: its cross is at
//! what the group held + the request, and a ring marks what the group held then.
//!
//! Each series is summarised in a fixed number of time buckets while the trace streams by
//! (see `timeline`), so a trace of any length draws at most a few thousand points per panel.
//! The SVG is written by hand: a few elements with classes and `data-` attributes (the time
//! range, each panel's label) that tests can check without rendering it.

use crate::timeline::Timeline;
use crate::traces;
use crate::walk::{walk, DeviceParts, Visit};
use cuquota_format::part::{Layer, PerLayer, LAYERS, PARTS};
use cuquota_format::read::{Options, Stats};
use cuquota_format::schema::{kind, EventLine, Header};
use cuquota_format::units::human;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const BUCKETS: usize = 2048;

// Layout, in px. The legend sits right of the panels, outside the data.
const WIDTH: f64 = 1200.0;
const LEFT: f64 = 90.0;
const LEGEND_WIDTH: f64 = 250.0;
const PLOT_WIDTH: f64 = WIDTH - LEFT - LEGEND_WIDTH - 30.0;
const TOP: f64 = 78.0;
/// A panel's height: the full height for up to 8 panels, less for more (a job of 64 ranks ×
/// 8 GPUs would otherwise be a hundred thousand px tall), never below `MIN_PANEL_HEIGHT`.
const PANEL_HEIGHT: f64 = 200.0;
const MIN_PANEL_HEIGHT: f64 = 60.0;
/// What the panels share out, beyond 8 of them.
const PANELS_HEIGHT: f64 = 8.0 * PANEL_HEIGHT;
/// Above each panel, for its label.
const PANEL_GAP: f64 = 34.0;
const BOTTOM: f64 = 64.0;

// Colours readable on white.
const IN_USE: &str = "#1f4e9c";
const QUOTA: &str = "#222222";
const REFUSED: &str = "#c0392b";
const OBSERVED: &str = "#d35400";
const GRID: &str = "#e3e3e3";
const TEXT: &str = "#222222";
const SUBTLE: &str = "#555555";
const FRAME: &str = "#999999";
/// The fills of the footprint's layers, bottom to top (`Layer::ALL` order): allocations,
/// pool cache, graph memory, context, then spares so that a new part gets a colour too.
const FILLS: [&str; 8] = [
    "#8fb0e3", "#f0b76e", "#8cc98c", "#c2aee0", "#e39f9f", "#9fd6d6", "#d6c58f", "#b5b5b5",
];
const _: () = assert!(LAYERS <= FILLS.len(), "a colour for every layer");

/// A layer's fill.
fn fill(layer: Layer) -> &'static str {
    let i = Layer::ALL.iter().position(|l| *l == layer).unwrap_or(0);
    FILLS[i]
}
const TRIM: &str = "#6a3d9a";
/// What a member's group held at its refusals.
const GROUP_HELD: &str = "#117a65";

struct Series {
    label: String,
    quota: Option<u64>,
    /// Changes of the quota in force (`cuquota set`): job time and the quota from then on.
    quota_changes: Vec<(u64, Option<u64>)>,
    peak: u64,
    /// First event, in job time (ns since the earliest start); the timeline counts from it.
    first_ns: u64,
    /// Highest refusal mark (in use + the request).
    top_refusal: u64,
    refusals: u64,
    timeline: Timeline,
    /// Its refusals are observe mode's would-be ones (the calls went ahead).
    observed: bool,
    /// The process's last event on any device, in job time: memory stays held until then.
    end_ns: u64,
    /// The quota counted the footprint (in use is every part).
    footprint: bool,
    /// Each part now (as the last `footprint` lines said).
    parts: DeviceParts,
    /// The highest each layer reached.
    part_peaks: PerLayer<u64>,
    /// Once a part besides allocations appears: the top of each layer but the last (whose
    /// top is in use), bucketed alike with `timeline`.
    stack: Option<Box<[Timeline; PARTS]>>,
    trims: u64,
    /// A group member's: what the group held at each refusal, as the refusal recorded it.
    group_held: Option<Box<Timeline>>,
}

impl Series {
    /// `in_use` charged at `rel` ns: the in-use line, and the parts' tops when stacked.
    fn held(&mut self, rel: u64, in_use: u64) {
        self.timeline.add(rel, in_use);
        // Stacked only when the quota counted the footprint: the parts are inside in use.
        let layers = self.parts.layers(in_use, true);
        let mut top = 0u64;
        let tops = layers.0.map(|v| {
            top = top.saturating_add(v);
            top
        });
        if let Some(stack) = self.stack.as_mut() {
            for (t, top) in stack.iter_mut().zip(tops) {
                t.add(rel, top);
            }
        }
    }

    /// A `footprint` line: its part is now `bytes` in all.
    fn part(&mut self, e: &EventLine) {
        let Some(part) = self.parts.line(e) else {
            return;
        };
        let peak = &mut self.part_peaks[Layer::Part(part)];
        *peak = (*peak).max(e.bytes);
        if self.stack.is_none() && e.bytes > 0 && self.footprint {
            // Until now every part's top was the in-use line.
            let t = &self.timeline;
            self.stack = Some(Box::new(std::array::from_fn(|_| t.clone())));
        }
    }
}

/// The series of one process, done: each lasts until the process's last event.
fn finish(process: BTreeMap<u32, Series>, into: &mut Vec<Series>) {
    let end = process
        .values()
        .map(|s| s.first_ns + s.timeline.end_ns())
        .max()
        .unwrap_or(0);
    into.extend(process.into_values().map(|s| Series { end_ns: end, ..s }));
}

/// What the title names.
struct Sources {
    programs: Vec<String>,
    files: Vec<String>,
}

pub fn svg(traces: &[PathBuf], output: &Path, options: &Options) -> Result<(), String> {
    let mut t0 = u64::MAX;
    for path in traces {
        t0 = t0.min(traces::header(path)?.start_unix_ns);
    }
    let mut plot = Plot {
        t0,
        series: Vec::new(),
        sources: Sources {
            programs: Vec::new(),
            files: Vec::new(),
        },
        processes: 0,
    };
    walk(traces, options, &mut plot)?;
    let Plot {
        mut series,
        sources,
        processes,
        ..
    } = plot;
    if series.is_empty() {
        let names: Vec<String> = traces.iter().map(|p| p.display().to_string()).collect();
        return Err(format!(
            "{}: no device-memory events to plot (the program{} made no allocation, free, \
             refusal or memory query)",
            names.join(", "),
            if processes == 1 { "" } else { "s" }
        ));
    }
    if processes == 1 {
        // One process: the title names it, each panel only its GPU.
        for s in &mut series {
            if let Some(at) = s.label.find("GPU ") {
                s.label = s.label[at..].to_string();
            }
        }
    }
    let text = draw(&series, &sources, t0_note(&series, processes));
    if output == Path::new("-") {
        print!("{text}");
        Ok(())
    } else {
        std::fs::write(output, text).map_err(|e| format!("{}: {e}", output.display()))
    }
}

/// The walk's visitor: the series of every process, by device.
struct Plot {
    /// The earliest trace start: job time counts from it.
    t0: u64,
    series: Vec<Series>,
    sources: Sources,
    processes: usize,
}

/// One process as it is read.
struct Process {
    header: Header,
    /// Its start in job time.
    offset: u64,
    /// Its series by device.
    series: BTreeMap<u32, Series>,
}

impl Visit for Plot {
    type Process = Process;

    fn start(&mut self, file: &str, h: &Header) -> Process {
        self.processes += 1;
        let program = program(&h.argv);
        if !self.sources.programs.contains(&program) {
            self.sources.programs.push(program);
        }
        if !self.sources.files.iter().any(|f| f == file) {
            self.sources.files.push(file.to_string());
        }
        Process {
            header: h.clone(),
            offset: h.start_unix_ns.saturating_sub(self.t0),
            series: BTreeMap::new(),
        }
    }

    fn event(&mut self, p: &mut Process, e: &EventLine) {
        let kind = e.kind.as_ref();
        if !matches!(
            kind,
            kind::ALLOC
                | kind::FREE
                | kind::REFUSED
                | kind::MEMINFO
                | kind::CONTEXT
                | kind::FOOTPRINT
                | kind::TRIM
                | kind::LIMIT
        ) {
            return;
        }
        let t = p.offset + e.t_ns;
        let h = &p.header;
        let s = p
            .series
            .entry(e.dev)
            .or_insert_with(|| new_series(h, e.dev, t));
        if kind == kind::LIMIT {
            s.quota_changes.push((t, e.limit));
            return;
        }
        // The buckets start at the series' first event: all of them span events.
        let rel = t.saturating_sub(s.first_ns);
        if kind == kind::FOOTPRINT {
            s.part(e);
        }
        s.held(rel, e.in_use);
        if kind == kind::TRIM {
            s.timeline.trim(rel);
            s.trims += 1;
        }
        if kind == kind::REFUSED {
            // Refused by a group's quota: the request against what the whole group held.
            let base = match e.group_in_use {
                Some(group) => {
                    (s.group_held
                        .get_or_insert_with(|| Box::new(Timeline::new(BUCKETS))))
                    .add(rel, group);
                    group
                }
                None => e.in_use,
            };
            let reached = base.saturating_add(e.bytes);
            s.timeline.refusal(rel, reached);
            s.top_refusal = s.top_refusal.max(reached);
            s.refusals += 1;
            s.observed |= e.observed;
        } else {
            s.peak = s.peak.max(e.in_use);
            let allocations = s.parts.layers(e.in_use, s.footprint)[Layer::Allocations];
            let peak = &mut s.part_peaks[Layer::Allocations];
            *peak = (*peak).max(allocations);
        }
    }

    fn finish(&mut self, p: Process, _stats: Option<Stats>) {
        finish(p.series, &mut self.series);
    }
}

/// The command line, its program by file name (a full path would crowd the title out).
fn program(argv: &[String]) -> String {
    let mut words: Vec<&str> = argv.iter().map(String::as_str).collect();
    if let Some(first) = words.first_mut() {
        *first = first.rsplit('/').next().unwrap_or(first);
    }
    words.join(" ")
}

fn new_series(h: &Header, dev: u32, first_ns: u64) -> Series {
    let device = h.devices.iter().find(|d| d.ordinal == dev);
    let mut label = format!("rank {} · pid {} · {} · GPU {dev}", h.rank, h.pid, h.host);
    if let Some(d) = device {
        let _ = write!(label, " ({})", d.name);
    }
    Series {
        label,
        quota: device.and_then(|d| d.quota),
        quota_changes: Vec::new(),
        peak: 0,
        first_ns,
        top_refusal: 0,
        refusals: 0,
        timeline: Timeline::new(BUCKETS),
        observed: false,
        end_ns: first_ns,
        footprint: h.counts_footprint(),
        parts: DeviceParts::default(),
        part_peaks: PerLayer::default(),
        stack: None,
        trims: 0,
        group_held: None,
    }
}

/// Where t = 0 of the axis is, said in words.
fn t0_note(series: &[Series], processes: usize) -> (u64, String) {
    let first = series.iter().map(|s| s.first_ns).min().unwrap_or(0);
    let whose = if processes == 1 {
        "the process started"
    } else {
        "the first process started"
    };
    (
        first,
        format!(
            "since the first event, {} after {whose}",
            crate::report::seconds(first)
        ),
    )
}

/// Binary unit for the y axis, from the largest value shown.
fn unit(max: u64) -> (&'static str, f64) {
    match max {
        m if m >= 1 << 30 => ("GiB", (1u64 << 30) as f64),
        m if m >= 1 << 20 => ("MiB", (1u64 << 20) as f64),
        m if m >= 1 << 10 => ("KiB", 1024.0),
        _ => ("bytes", 1.0),
    }
}

/// Tick values from 0 to at least `max`: a step of 1, 2 or 5 times a power of ten, about
/// `target` of them. Returns (step, decimals to print).
fn ticks(max: f64, target: f64) -> (f64, usize) {
    let raw = (max / target).max(f64::MIN_POSITIVE);
    let power = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * power);
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    (step, decimals)
}

/// Text for the SVG: foreign strings (command lines, host and GPU names, file names) with
/// their control characters escaped, so that the file is well-formed XML whatever a traced
/// process was given, and `& < > " '` as entities.
fn escape(text: &str) -> String {
    cuquota_format::escape::xml(text)
}

/// At most `max` characters, with an ellipsis, control characters escaped first (the cut
/// never splits an escape).
fn clip(text: &str, max: usize) -> String {
    cuquota_format::escape::cut(&cuquota_format::escape::text(text), max)
}

/// Up to [`FILES_NAMED`] files are all named (a two-rank job names both), each clipped from
/// its start when they do not fit, since paths differ at their end (`t-0.jsonl`,
/// `t-1.jsonl`); more are the first two and a count.
const FILES_NAMED: usize = 4;

fn files_title(files: &[String]) -> String {
    const ROOM: usize = 90;
    let shown = if files.len() <= FILES_NAMED {
        files
    } else {
        &files[..2]
    };
    let each = (ROOM / shown.len().max(1)).saturating_sub(2).max(12);
    let mut text = shown
        .iter()
        .map(|f| clip_start(f, each))
        .collect::<Vec<_>>()
        .join(", ");
    if shown.len() < files.len() {
        text.push_str(&format!(" and {} more", files.len() - shown.len()));
    }
    text
}

/// `text` with its start cut off to `max` characters, behind an ellipsis.
fn clip_start(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        text.to_string()
    } else {
        let mut s = String::from('…');
        s.extend(text.chars().skip(count - (max - 1)));
        s
    }
}

fn draw(series: &[Series], sources: &Sources, (from_ns, note): (u64, String)) -> String {
    let to_ns = series
        .iter()
        .map(|s| s.end_ns)
        .max()
        .unwrap_or(0)
        .max(from_ns + 1);
    let span_ns = to_ns - from_ns;
    let (time_unit, ns_per_unit) = match span_ns {
        t if t >= 2_000_000_000 => ("s", 1e9),
        t if t >= 2_000_000 => ("ms", 1e6),
        _ => ("µs", 1e3),
    };
    let x_end = span_ns as f64 / ns_per_unit;
    let x = |t_ns: u64| LEFT + (t_ns.saturating_sub(from_ns)) as f64 / span_ns as f64 * PLOT_WIDTH;
    let panel_height = panel_height(series.len());
    let mut legend_text = String::new();
    let legend_bottom = legend(&mut legend_text, series);
    let height = (TOP + series.len() as f64 * (PANEL_GAP + panel_height) + BOTTOM)
        .max(legend_bottom + BOTTOM);

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" data-time-from-ns="{from_ns}" data-time-to-ns="{to_ns}">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    // Title: the program and the trace.
    let program = match sources.programs.as_slice() {
        [one] => clip(one, 70),
        [first, rest @ ..] => format!(
            "{} and {} other program{}",
            clip(first, 50),
            rest.len(),
            if rest.len() == 1 { "" } else { "s" }
        ),
        [] => String::new(),
    };
    let files = files_title(&sources.files);
    let _ = writeln!(
        out,
        r#"<text class="title" x="{LEFT}" y="30" font-size="18" fill="{TEXT}">Device memory in use: {}</text>"#,
        escape(&program)
    );
    let _ = writeln!(
        out,
        r#"<text class="subtitle" x="{LEFT}" y="52" font-size="13" fill="{SUBTLE}">trace: {}</text>"#,
        escape(&files)
    );

    let (x_step, x_decimals) = ticks(x_end, 8.0);
    for (i, s) in series.iter().enumerate() {
        let top = TOP + i as f64 * (PANEL_GAP + panel_height) + PANEL_GAP;
        let bottom = top + panel_height;
        panel(
            &mut out,
            s,
            top,
            bottom,
            &x,
            (x_end, x_step, x_decimals),
            i + 1 == series.len(),
        );
    }
    let axis_y = height - 18.0;
    let _ = writeln!(
        out,
        r#"<text class="x-title" x="{}" y="{axis_y}" font-size="14" text-anchor="middle" fill="{TEXT}">time ({time_unit}) {}</text>"#,
        LEFT + PLOT_WIDTH / 2.0,
        escape(&note)
    );
    out.push_str(&legend_text);
    out.push_str("</svg>\n");
    out
}

/// One process and GPU: its frame, grid, axes, in-use line, quota and refusals.
fn panel(
    out: &mut String,
    s: &Series,
    top: f64,
    bottom: f64,
    x: &dyn Fn(u64) -> f64,
    x_ticks: (f64, f64, usize),
    last: bool,
) {
    let scale = YScale::new(s, bottom - top);
    let y = |bytes: u64| scale.y(bytes, bottom);
    let _ = writeln!(
        out,
        r#"<g class="panel" data-label="{}" data-y-max="{}" data-unit="{}">"#,
        escape(&s.label),
        scale.end,
        scale.unit_name
    );
    panel_title(out, s, top);
    grid(out, (top, bottom), &scale, x_ticks, last);
    // Memory stays as the process's last event left it, to that event.
    let end = x(s.end_ns);
    parts(out, s, bottom, (x, &y), end);
    // In use: a step line, each bucket's highest value shown.
    let points = step_points(&s.timeline, s.first_ns, x, &y, end);
    let _ = writeln!(
        out,
        r#"<polyline class="in-use" points="{points}" fill="none" stroke="{IN_USE}" stroke-width="2"/>"#
    );
    quota_line(out, s, x, &y);
    marks(out, s, top, x, &y);
    out.push_str("</g>\n");
}

/// A panel's y axis: bytes shown in `unit`s, from 0 to `end` in steps of `step` (labels
/// with `decimals`), over the panel's `height`.
struct YScale {
    unit_name: &'static str,
    unit: f64,
    end: f64,
    step: f64,
    decimals: usize,
    height: f64,
}

impl YScale {
    fn new(s: &Series, height: f64) -> YScale {
        // The y range holds the line and the quota; refusal marks beyond twice that sit at
        // the top edge (a huge request would flatten everything else).
        let quotas = s.quota_changes.iter().filter_map(|(_, q)| *q);
        let group = s
            .group_held
            .iter()
            .flat_map(|g| g.buckets().map(|(_, b)| b.max));
        let held = s
            .peak
            .max(group.max().unwrap_or(0))
            .max(s.quota.unwrap_or(0))
            .max(quotas.max().unwrap_or(0))
            .max(1);
        let y_max_bytes = held.max(s.top_refusal.min(held.saturating_mul(2)));
        let (unit_name, unit) = unit(y_max_bytes);
        // Fewer y labels in low panels (fewer than three would leave much of one empty).
        let y_labels = (height / 40.0).clamp(3.0, 4.0);
        let (step, decimals) = ticks(y_max_bytes as f64 / unit * 1.05, y_labels);
        let end = (y_max_bytes as f64 / unit * 1.05 / step).ceil() * step;
        YScale {
            unit_name,
            unit,
            end,
            step,
            decimals,
            height,
        }
    }

    /// Where `bytes` is, in a panel whose bottom is at `bottom`.
    fn y(&self, bytes: u64, bottom: f64) -> f64 {
        bottom - (bytes as f64 / self.unit / self.end).min(1.0) * self.height
    }
}

/// The panel's title: what it shows, its peak, quota and refusals.
fn panel_title(out: &mut String, s: &Series, top: f64) {
    let refused = match (s.refusals, s.observed) {
        (0, _) => String::new(),
        (n, false) => format!(" · {n} refused"),
        (n, true) => format!(" · {n} would be refused (observe mode)"),
    };
    let peak = format!(
        "{} · {} {}{}{refused}",
        s.label,
        if s.stack.is_some() {
            "footprint peak"
        } else {
            "peak"
        },
        human(s.peak),
        s.quota.map_or(String::from(" · no quota"), |q| format!(
            " · quota {}",
            human(q)
        ))
    );
    let _ = writeln!(
        out,
        r#"<text class="panel-title" x="{LEFT}" y="{}" font-size="14" fill="{TEXT}">{}</text>"#,
        top - 10.0,
        escape(&clip(&peak, 110))
    );
}

/// The panel's frame, its grid and y labels, and the time labels under the last panel
/// only (the axis is shared).
fn grid(
    out: &mut String,
    (top, bottom): (f64, f64),
    scale: &YScale,
    (x_end, x_step, x_decimals): (f64, f64, usize),
    last: bool,
) {
    let panel_height = bottom - top;
    let _ = writeln!(
        out,
        r#"<rect class="plot-area" x="{LEFT}" y="{top}" width="{PLOT_WIDTH}" height="{panel_height}" fill="none" stroke="{FRAME}"/>"#
    );
    // Horizontal grid and y labels.
    let (y_end, y_step, y_decimals, unit_name) =
        (scale.end, scale.step, scale.decimals, scale.unit_name);
    let mut v = 0.0;
    while v <= y_end + y_step / 2.0 {
        let py = bottom - v / y_end * panel_height;
        let _ = writeln!(
            out,
            r#"<line x1="{LEFT}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="{GRID}"/><text class="y-tick" x="{}" y="{:.1}" font-size="12" text-anchor="end" fill="{TEXT}">{v:.y_decimals$}</text>"#,
            LEFT + PLOT_WIDTH,
            LEFT - 6.0,
            py + 4.0
        );
        v += y_step;
    }
    let _ = writeln!(
        out,
        r#"<text class="y-title" x="18" y="{:.1}" font-size="13" text-anchor="middle" fill="{TEXT}" transform="rotate(-90 18 {:.1})">in use ({unit_name})</text>"#,
        (top + bottom) / 2.0,
        (top + bottom) / 2.0
    );
    // Vertical grid.
    let mut t = 0.0;
    while t <= x_end * (1.0 + 1e-9) {
        let px = LEFT + t / x_end * PLOT_WIDTH;
        let _ = write!(
            out,
            r#"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{bottom}" stroke="{GRID}"/>"#
        );
        if last {
            let _ = write!(
                out,
                r#"<text class="x-tick" x="{px:.1}" y="{}" font-size="12" text-anchor="middle" fill="{TEXT}">{t:.x_decimals$}</text>"#,
                bottom + 18.0
            );
        }
        out.push('\n');
        t += x_step;
    }
}

/// The parts, stacked: each an area from the baseline to its top, the highest first, so
/// that each shows between its top and the one below.
fn parts(
    out: &mut String,
    s: &Series,
    bottom: f64,
    (x, y): (&dyn Fn(u64) -> f64, &dyn Fn(u64) -> f64),
    end: f64,
) {
    let Some(stack) = &s.stack else {
        return;
    };
    let tops: Vec<&Timeline> = stack.iter().chain([&s.timeline]).collect();
    for (i, (layer, &peak)) in s.part_peaks.iter().enumerate().rev() {
        if peak == 0 {
            continue;
        }
        let (name, fill) = (layer.name(), fill(layer));
        let points = step_points(tops[i], s.first_ns, x, y, end);
        let first = tops[i]
            .buckets()
            .find(|(_, b)| b.used)
            .map_or(end, |(start, _)| x(s.first_ns + start));
        let _ = writeln!(
            out,
            r#"<polygon class="part" data-part="{name}" points="{points} {end:.1},{bottom:.1} {first:.1},{bottom:.1}" fill="{fill}" stroke="none"/>"#
        );
    }
}

/// The quota in force at each moment: a dashed segment per stretch (none where there was
/// no quota).
fn quota_line(out: &mut String, s: &Series, x: &dyn Fn(u64) -> f64, y: &dyn Fn(u64) -> f64) {
    let mut from = (LEFT, s.quota);
    let stretches = (s.quota_changes.iter())
        .map(|(t, q)| (x(*t).clamp(LEFT, LEFT + PLOT_WIDTH), *q))
        .chain(std::iter::once((LEFT + PLOT_WIDTH, None)));
    for (to_x, next) in stretches {
        if let Some(q) = from.1 {
            let _ = writeln!(
                out,
                r#"<line class="quota" x1="{:.1}" y1="{:.1}" x2="{to_x:.1}" y2="{:.1}" stroke="{QUOTA}" stroke-width="1.5" stroke-dasharray="7 4"/>"#,
                from.0,
                y(q),
                y(q)
            );
        }
        from = (to_x, next);
    }
}

/// Trims (a small triangle pointing down at the top edge), the group's holdings, and the
/// refusals (a cross at in use + the request).
fn marks(out: &mut String, s: &Series, top: f64, x: &dyn Fn(u64) -> f64, y: &dyn Fn(u64) -> f64) {
    for (start, b) in s.timeline.buckets() {
        if b.trimmed {
            let cx = x(s.first_ns + start);
            let _ = writeln!(
                out,
                r#"<path class="trim" d="M{:.1},{top:.1}L{:.1},{top:.1}L{cx:.1},{:.1}Z" fill="{TRIM}"/>"#,
                cx - 5.0,
                cx + 5.0,
                top + 9.0
            );
        }
    }
    for (start, b) in s.group_held.iter().flat_map(|g| g.buckets()) {
        let _ = writeln!(
            out,
            r#"<circle class="group-held" cx="{:.1}" cy="{:.1}" r="4" fill="none" stroke="{GROUP_HELD}" stroke-width="1.5"/>"#,
            x(s.first_ns + start),
            y(b.max)
        );
    }
    let colour = if s.observed { OBSERVED } else { REFUSED };
    for (start, b) in s.timeline.buckets() {
        if let Some(reached) = b.refusal {
            let (cx, cy) = (x(s.first_ns + start), y(reached));
            let _ = writeln!(
                out,
                r#"<path class="refusal" d="M{:.1},{:.1}L{:.1},{:.1}M{:.1},{:.1}L{:.1},{:.1}" stroke="{colour}" stroke-width="2"/>"#,
                cx - 5.0,
                cy - 5.0,
                cx + 5.0,
                cy + 5.0,
                cx - 5.0,
                cy + 5.0,
                cx + 5.0,
                cy - 5.0
            );
            // Refusals closer than a bucket share its cross: their count beside it.
            if b.refusals > 1 {
                let _ = writeln!(
                    out,
                    r#"<text class="refusals" x="{:.1}" y="{:.1}" font-size="10" fill="{colour}">×{}</text>"#,
                    cx + 7.0,
                    cy - 3.0,
                    b.refusals
                );
            }
        }
    }
}

/// A step line through `timeline`'s buckets (starting `first_ns`), each bucket's highest
/// value shown, held to `end`.
fn step_points(
    timeline: &Timeline,
    first_ns: u64,
    x: &dyn Fn(u64) -> f64,
    y: &dyn Fn(u64) -> f64,
    end: f64,
) -> String {
    let width = timeline.width_ns();
    let mut points = String::new();
    let mut last_v = 0u64;
    for (start, b) in timeline.buckets().filter(|(_, b)| b.used) {
        let start = first_ns + start;
        let _ = write!(
            points,
            "{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} ",
            x(start),
            y(last_v),
            x(start),
            y(b.max),
            x(start + width).min(end),
            y(b.last)
        );
        last_v = b.last;
    }
    let _ = write!(points, "{end:.1},{:.1}", y(last_v));
    points
}

/// The height of each of `panels` panels.
fn panel_height(panels: usize) -> f64 {
    (PANELS_HEIGHT / panels.max(1) as f64).clamp(MIN_PANEL_HEIGHT, PANEL_HEIGHT)
}

/// One legend for all panels (they draw alike), right of the panels. Returns its bottom.
fn legend(out: &mut String, series: &[Series]) -> f64 {
    let mut entries: Vec<(&str, String)> = vec![(
        "in-use",
        format!(r#"<line x1="0" y1="0" x2="24" y2="0" stroke="{IN_USE}" stroke-width="2"/>"#),
    )];
    let stacked = series.iter().any(|s| s.stack.is_some());
    // Top of the stack first, as they lie in the panels.
    for layer in Layer::ALL.into_iter().rev() {
        if series
            .iter()
            .any(|s| s.stack.is_some() && s.part_peaks[layer] > 0)
        {
            let fill = fill(layer);
            entries.push((
                layer.name(),
                format!(r#"<rect x="4" y="-7" width="16" height="14" fill="{fill}"/>"#),
            ));
        }
    }
    if series.iter().any(|s| s.trims > 0) {
        entries.push((
            "trim",
            format!(r#"<path d="M7,-5L17,-5L12,4Z" fill="{TRIM}"/>"#),
        ));
    }
    if series.iter().any(|s| s.quota.is_some()) {
        entries.push((
            "quota",
            format!(
                r#"<line x1="0" y1="0" x2="24" y2="0" stroke="{QUOTA}" stroke-width="1.5" stroke-dasharray="7 4"/>"#
            ),
        ));
    }
    let cross =
        |c: &str| format!(r#"<path d="M7,-5L17,5M7,5L17,-5" stroke="{c}" stroke-width="2"/>"#);
    let refused = series.iter().any(|s| s.top_refusal > 0 && !s.observed);
    let observed = series.iter().any(|s| s.top_refusal > 0 && s.observed);
    if refused {
        entries.push(("refused", cross(REFUSED)));
    }
    if series.iter().any(|s| s.group_held.is_some()) {
        entries.push((
            "group-held",
            format!(
                r#"<circle cx="12" cy="0" r="4" fill="none" stroke="{GROUP_HELD}" stroke-width="1.5"/>"#
            ),
        ));
    }
    if observed {
        entries.push(("observed", cross(OBSERVED)));
    }
    let labels = |class: &str| match class {
        "in-use" if stacked && series.iter().all(|s| s.stack.is_some()) => {
            vec!["in use: the footprint"]
        }
        "in-use" if stacked => vec!["in use (the footprint", "where its parts show)"],
        "in-use" => vec!["in use"],
        "quota" => vec!["quota"],
        "trim" => vec!["cuquota trimmed pools", "or graph memory"],
        name if Layer::from_name(name).is_some() => {
            vec![Layer::from_name(name).map_or("", Layer::words)]
        }
        "refused" => vec!["refused (marked at", "in use + the request)"],
        "group-held" => vec![
            "its group's in use at",
            "a refusal (a member's",
            "cross: the group's in",
            "use + the request)",
        ],
        _ => vec![
            "would be refused",
            "(observe mode; marked at",
            "in use + the request)",
        ],
    };
    let x0 = LEFT + PLOT_WIDTH + 20.0;
    let lines: usize = entries.iter().map(|(c, _)| labels(c).len()).sum();
    let box_height = 16.0 + lines as f64 * 20.0;
    let _ = writeln!(
        out,
        r#"<g class="legend"><rect class="legend-box" x="{x0}" y="{}" width="{}" height="{box_height}" fill="white" stroke="{FRAME}"/>"#,
        TOP + PANEL_GAP,
        LEGEND_WIDTH - 10.0
    );
    let mut row = TOP + PANEL_GAP + 18.0;
    for (class, mark) in &entries {
        let _ = write!(
            out,
            r#"<g class="legend-{class}" transform="translate({},{row})">{mark}</g>"#,
            x0 + 10.0
        );
        for text in labels(class) {
            let _ = write!(
                out,
                r#"<text x="{}" y="{}" font-size="13" fill="{TEXT}">{text}</text>"#,
                x0 + 42.0,
                row + 4.0
            );
            row += 20.0;
        }
        out.push('\n');
    }
    out.push_str("</g>\n");
    TOP + PANEL_GAP + box_height
}

#[cfg(test)]
mod tests;
