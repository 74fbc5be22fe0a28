//! The report as text, for the terminal. Every text field of a trace (the command line,
//! host, group and GPU names, API and result names, holders, call sites) is shown escaped
//! ([`cuquota_format::escape`]): a trace holds what its process was given, and a viewer's
//! terminal must not obey it. (`--json` needs none of this: its encoder escapes.)

use super::model::*;
use super::{CHART_ROWS, EPISODE_HEAD};
use cuquota_format::episodes::GAP_NS;
use cuquota_format::escape::text as shown;
use cuquota_format::holder::Holder;
use cuquota_format::part::Part;
use cuquota_format::units::human;
use std::fmt::Write as _;

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

pub(super) fn render(r: &Report) -> String {
    let mut out = String::new();
    for p in &r.processes {
        render_process(&mut out, p);
        out.push('\n');
    }
    render_job(&mut out, r);
    out
}

fn render_process(out: &mut String, p: &ProcessReport) {
    render_heading(out, p);
    if p.devices.is_empty() {
        let _ = writeln!(out, "   no device-memory events");
    }
    for d in &p.devices {
        render_device(out, p, d);
    }
    render_episodes(out, &p.backoff_episodes);
    render_largest(out, p);
    render_live(out, p);
    if let Some(stacks) = &p.stacks {
        render_stacks(out, p, stacks);
    }
    render_api_mix(out, p);
}

/// The process: its command, trace file, mode, how it ended, and what the trace misses.
fn render_heading(out: &mut String, p: &ProcessReport) {
    let command = p.argv.join(" ");
    let _ = writeln!(
        out,
        "== {} · rank {} · pid {} · {}",
        shown(&p.host),
        p.rank,
        p.pid,
        shown(&command)
    );
    let ended = match &p.end {
        Some(end) if end == "exit" => "exited normally".to_string(),
        Some(end) => format!("stopped by {}", shown(end)),
        None => "no summary line: the process is still running, or was killed".to_string(),
    };
    let counting = match p.count.as_deref() {
        Some("footprint") => ", counting the footprint".to_string(),
        Some(other) => format!(", counting {}", shown(other)),
        None => String::new(),
    };
    let counting = match &p.group {
        Some(group) => format!("{counting}, sharing group {}'s quota", shown(group)),
        None => counting,
    };
    let _ = writeln!(
        out,
        "   {}: mode {}{counting}, {} over {}; {ended}",
        shown(&p.file),
        shown(&p.mode),
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
}

/// The largest allocations, with their call sites.
fn render_largest(out: &mut String, p: &ProcessReport) {
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
                shown(&a.api),
                shown(&a.ptr)
            );
            render_site(out, a);
        }
    }
}

/// What was live at the end, the largest first.
fn render_live(out: &mut String, p: &ProcessReport) {
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
            shown(&a.api),
            shown(&a.ptr),
            seconds(a.t_ns)
        );
        render_site(out, a);
    }
    if live.count > live.largest.len() as u64 {
        let _ = writeln!(
            out,
            "     … and {} more",
            live.count - live.largest.len() as u64
        );
    }
}

/// The API mix: calls by entry point, most first.
fn render_api_mix(out: &mut String, p: &ProcessReport) {
    if !p.api_mix.is_empty() {
        let mix: Vec<String> = p
            .api_mix
            .iter()
            .map(|a| format!("{} {}", shown(&a.api), a.count))
            .collect();
        let _ = writeln!(
            out,
            "   API mix (calls traced, refused ones included): {}",
            mix.join(", ")
        );
    }
}

/// Where an allocation was made, under its line (with call stacks only).
fn render_site(out: &mut String, a: &AllocReport) {
    if let Some(site) = &a.site {
        let _ = writeln!(out, "     {:>12}  in {}", "", shown(&site.words()));
    }
}

/// Sites shown per device in "by call site".
const SITES_SHOWN: usize = 10;

/// With call stacks: what they cover, and each device's live bytes at its peak by site.
fn render_stacks(out: &mut String, p: &ProcessReport, stacks: &StacksReport) {
    let _ = writeln!(
        out,
        "   Call stacks: {}; an allocation's site is its frame nearest the program (cuquota's, \
         the driver's and the CUDA runtime's frames left out)",
        count(stacks.stacks, "distinct stack", "distinct stacks")
    );
    if stacks.allocations_without_stack > 0 {
        let _ = writeln!(
            out,
            "     {} no stack (the interposer's stack table was full or busy, or a free \
             failed and the allocation was held again)",
            count(
                stacks.allocations_without_stack,
                "allocation has",
                "allocations have"
            )
        );
    }
    if stacks.pool_allocations {
        let _ = writeln!(
            out,
            "     A pool allocation's stack is the request's; the memory a pool keeps cached \
             (pool cache) has none: it was grown by the request that first needed it"
        );
    }
    for d in p.devices.iter().filter(|d| !d.by_call_site.is_empty()) {
        let _ = writeln!(
            out,
            "   Live at GPU {}'s peak ({} at {}), by call site:",
            d.dev,
            human(d.peak),
            seconds(d.peak_t_ns)
        );
        for s in d.by_call_site.iter().take(SITES_SHOWN) {
            site_row(out, "     ", s);
        }
        if d.by_call_site.len() > SITES_SHOWN {
            let rest = &d.by_call_site[SITES_SHOWN..];
            let _ = writeln!(
                out,
                "     … and {} more ({})",
                count(rest.len() as u64, "site", "sites"),
                human(rest.iter().map(|s| s.bytes).sum())
            );
        }
    }
}

fn render_device(out: &mut String, p: &ProcessReport, d: &DeviceReport) {
    let name = match (&d.name, d.total) {
        (Some(n), Some(t)) => format!(" ({}, {})", shown(n), human(t)),
        _ => String::new(),
    };
    let counted = d
        .footprint
        .as_ref()
        .is_some_and(|f| f.counted && !f.only_allocations());
    let peak_word = if counted { "footprint peak" } else { "peak" };
    let quota = match quota_at_peak(d) {
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
    for c in &d.quota_changes {
        let _ = writeln!(
            out,
            "     the quota became {} at {} (`cuquota set` on the group)",
            c.quota.map_or("none".to_string(), human),
            seconds(c.t_ns)
        );
    }
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
    let highest_quota = (d.quota_changes.iter().filter_map(|c| c.quota))
        .chain(d.quota)
        .max();
    let scale = highest_quota.unwrap_or(0).max(d.peak);
    chart(
        out,
        &d.chart,
        scale,
        (p.first_event_ns, p.last_event_ns),
        highest_quota.is_some_and(|q| q == scale),
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
    for (layer, part) in f.layers.iter() {
        let name = layer.label();
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
            shown(&w.api),
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
            let parts: Vec<String> = f
                .layers
                .iter()
                .filter(|(_, p)| p.at_peak > 0)
                .map(|(layer, p)| format!("{} {}", layer.label(), human(p.at_peak)))
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
            shown(&o.api),
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
            shown(&ep.api),
            sizes.join(" → ")
        );
        render_held(out, ep);
        render_episode_sites(out, ep);
    }
    if e.count > e.shown.len() as u64 {
        let _ = writeln!(out, "     … and {} more", e.count - e.shown.len() as u64);
    }
}

/// What was held at an episode's first refusal — by part, and in a group by member — and
/// what would have made that request fit.
fn render_held(out: &mut String, ep: &EpisodeReport) {
    let asked = ep.refused.first().copied().unwrap_or(0);
    let own: u64 = ep.held.0.iter().sum();
    let mut parts: Vec<String> = Vec::new();
    for (layer, bytes) in ep.held.iter() {
        if *bytes > 0 {
            parts.push(format!("{} {}", layer.words(), human(*bytes)));
        }
    }
    let by_part = match parts.len() {
        0 | 1 => String::new(),
        _ => format!(" ({})", parts.join(", ")),
    };
    let (held, limit) = match &ep.group {
        Some(g) => {
            let _ = writeln!(
                out,
                "       held then: this process {}{by_part}; group {} {} of {}",
                human(own),
                shown(&g.name),
                human(g.in_use),
                human(g.limit)
            );
            for h in &g.holders {
                let _ = writeln!(out, "         {}", holder_row(h));
            }
            (g.in_use, g.limit)
        }
        None => match ep.quota {
            Some(q) if !by_part.is_empty() => {
                let _ = writeln!(
                    out,
                    "       held then: {} of {}{by_part}",
                    human(own),
                    human(q)
                );
                (own, q)
            }
            Some(q) => (own, q),
            None => return,
        },
    };
    let short = (held + asked).saturating_sub(limit);
    if short == 0 {
        return;
    }
    let mut ways = Vec::new();
    if let Some(g) = &ep.group {
        let trimmable = || Part::ALL.into_iter().filter(|p| p.trimmable());
        let trimmed = |h: &Holder| trimmable().map(|p| h.part(p)).sum::<u64>();
        let unused: Vec<&Holder> = (g.holders.iter()).filter(|h| trimmed(h) > 0).collect();
        let freed: u64 = unused.iter().map(|h| trimmed(h)).sum();
        if freed >= short {
            let who: Vec<String> = unused
                .iter()
                .map(|h| format!("pid {}", h.shown_pid()))
                .collect();
            let words: Vec<&str> = trimmable().map(|p| p.words()).collect();
            let calls: Vec<&str> = trimmable().filter_map(|p| p.trim_call()).collect();
            ways.push(format!(
                "trimming the unused {} of {} ({}: {} in those processes)",
                words.join(" and "),
                who.join(", "),
                human(freed),
                calls.join(", ")
            ));
        }
        let mut covered = 0;
        let mut who = Vec::new();
        for h in &g.holders {
            if covered >= short {
                break;
            }
            covered += h.in_use;
            who.push(format!("pid {} holds {}", h.shown_pid(), human(h.in_use)));
        }
        if covered >= short {
            ways.push(format!(
                "memory given back by other members ({})",
                who.join(", ")
            ));
        }
    }
    ways.push(format!("a quota of {}", human(held + asked)));
    let _ = writeln!(
        out,
        "       to fit {}: {} more had to be free; it would have fit with {}",
        human(asked),
        human(short),
        ways.join(", or ")
    );
}

/// `   64.00 MiB  1 allocation    load_weights (stacks_client.c:24)`, after `indent`.
fn site_row(out: &mut String, indent: &str, s: &SiteLive) {
    let site = s
        .site
        .as_ref()
        .map_or_else(|| "(no stack)".to_string(), Site::words);
    let _ = writeln!(
        out,
        "{indent}{:>12}  {:<14}  {}",
        human(s.bytes),
        count(s.allocations, "allocation", "allocations"),
        shown(&site)
    );
}

/// Sites shown per episode.
const EPISODE_SITES_SHOWN: usize = 5;

/// With call stacks: what this process had live at the episode's first refusal, by call site.
fn render_episode_sites(out: &mut String, ep: &EpisodeReport) {
    if ep.live_by_call_site.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "       this process's live allocations then, by call site:"
    );
    for s in ep.live_by_call_site.iter().take(EPISODE_SITES_SHOWN) {
        site_row(out, "         ", s);
    }
    let rest = ep
        .live_by_call_site
        .len()
        .saturating_sub(EPISODE_SITES_SHOWN);
    if rest > 0 {
        let _ = writeln!(out, "         … and {rest} more sites");
    }
}

/// `pid 4242 [container] (python serve.py) 700.00 MiB: allocations …, pool cache …`.
fn holder_row(h: &Holder) -> String {
    let mut row = h.who();
    row += &format!(" {}", human(h.in_use));
    let parts: Vec<String> = (Part::ALL.iter())
        .filter(|p| h.part(**p) > 0)
        .map(|p| format!("{} {}", p.words(), human(h.part(*p))))
        .collect();
    if !parts.is_empty() {
        row += &format!(
            ": allocations {}, {}",
            human(h.allocations()),
            parts.join(", ")
        );
    }
    row
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
                shown(&p.host),
                p.rank,
                p.pid,
                d.dev,
                human(d.peak),
                quota_at_peak(d).map_or("-".into(), human),
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

/// The quota in force at the device's peak (`cuquota set` may have changed it before), the
/// one its peak is read against.
fn quota_at_peak(d: &DeviceReport) -> Option<u64> {
    (d.quota_changes.iter())
        .take_while(|c| c.t_ns <= d.peak_t_ns)
        .last()
        .map_or(d.quota, |c| c.quota)
}
