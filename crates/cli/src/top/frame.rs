//! One frame of `cuquota top`, as a pure function of a [`Snapshot`]: lines of styled spans
//! that `--once` prints as plain text and the live view draws with colour. Readable with no
//! colour at all (bars are `|` characters, every figure is written out) and laid out for a
//! given width, 80 columns and up. Every string another process wrote (command lines,
//! containers, group and GPU names, refusal lines, file names in the notes) is shown
//! escaped ([`cuquota_format::escape`]): read, never obeyed by the terminal.

use super::model::{ByPart, Gpu, GroupRow, LastRefusal, Process, Snapshot};
use cuquota_format::escape;
use cuquota_format::units::human;

/// What a span is, for the live view's colours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Plain,
    Title,
    Header,
    Gpu,
    Group,
    Dim,
    /// A bar under 75% of its room, under 90%, and from 90%.
    Ok,
    Warn,
    Full,
    Refusal,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub text: String,
    pub style: Style,
}

pub type Line = Vec<Span>;

fn span(text: impl Into<String>, style: Style) -> Span {
    Span {
        text: text.into(),
        style,
    }
}

/// The order of the rows under each GPU (groups first, then ungrouped processes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    InUse,
    Refusals,
    Pid,
    Name,
}

impl Sort {
    pub const ALL: [Sort; 4] = [Sort::InUse, Sort::Refusals, Sort::Pid, Sort::Name];

    pub fn next(self) -> Sort {
        let i = Sort::ALL.iter().position(|s| *s == self).unwrap_or(0);
        Sort::ALL[(i + 1) % Sort::ALL.len()]
    }

    pub fn words(self) -> &'static str {
        match self {
            Sort::InUse => "in use",
            Sort::Refusals => "refusals",
            Sort::Pid => "pid",
            Sort::Name => "name",
        }
    }
}

/// How to lay the frame out.
#[derive(Clone, Copy, Debug)]
pub struct View {
    pub width: usize,
    pub sort: Sort,
}

/// `512 MiB`, `7.85 GiB`, `17 B`: at most 8 characters, for the table's columns.
pub fn short(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let (mut v, mut unit) = (bytes as f64 / 1024.0, 0);
    while v >= 1023.5 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    match v {
        v if v < 9.995 => format!("{v:.2} {}", UNITS[unit]),
        v if v < 99.95 => format!("{v:.1} {}", UNITS[unit]),
        v => format!("{v:.0} {}", UNITS[unit]),
    }
}

/// `just now`, `4s ago`, `3m ago`, `2h ago`, `5d ago`.
pub fn age(now_ns: u64, then_ns: u64) -> String {
    let s = now_ns.saturating_sub(then_ns) / 1_000_000_000;
    match s {
        0 => "just now".into(),
        s if s < 60 => format!("{s}s ago"),
        s if s < 3600 => format!("{}m ago", s / 60),
        s if s < 86_400 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    }
}

/// `HH:MM:SS UTC` of a wall-clock time.
fn clock(unix_ns: u64) -> String {
    let s = unix_ns / 1_000_000_000 % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

/// `text` cut to `width` characters (the last one `…` when cut), never inside an escape.
/// Escaped again on the way: a foreign string that was not is shown, not obeyed.
pub fn fit(text: &str, width: usize) -> String {
    escape::cut(&escape::text(text), width)
}

/// `text` in lines of at most `width` characters, broken between words (a longer word is a
/// line of its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The table's columns for a width.
struct Columns {
    name: usize,
    bar: usize,
}

const LIMIT_W: usize = 8;
const SIZE_W: usize = 8;
const PCT_W: usize = 4;
const REF_W: usize = 7;

impl Columns {
    fn new(width: usize) -> Columns {
        let width = width.max(60);
        let bar = (width / 8).clamp(10, 40);
        let fixed = 1 + LIMIT_W + 1 + SIZE_W + 1 + (bar + 2) + 1 + PCT_W + 1 + SIZE_W + 1 + REF_W;
        Columns {
            name: width - fixed,
            bar,
        }
    }
}

/// One row's figures.
struct Row<'a> {
    name: String,
    name_style: Style,
    limit: String,
    in_use: u64,
    /// What the bar and the percentage are of (0: unknown).
    room: u64,
    peak: u64,
    refusals: u64,
    parts: Option<&'a ByPart>,
    refusal: Option<(&'a LastRefusal, Option<u32>)>,
    indent: usize,
}

fn bar_style(pct: u64) -> Style {
    match pct {
        p if p >= 90 => Style::Full,
        p if p >= 75 => Style::Warn,
        _ => Style::Ok,
    }
}

fn row_lines(out: &mut Vec<Line>, r: &Row, c: &Columns, now: u64, width: usize) {
    let pct = (r.room > 0).then(|| (u128::from(r.in_use) * 100 / u128::from(r.room)) as u64);
    let filled = pct.map_or(0, |p| ((p as usize * c.bar + 50) / 100).min(c.bar));
    let name = fit(&format!("{}{}", " ".repeat(r.indent), r.name), c.name);
    out.push(vec![
        span(format!("{name:<w$}", w = c.name), r.name_style),
        span(
            format!(" {:>LIMIT_W$} {:>SIZE_W$} [", r.limit, short(r.in_use)),
            Style::Plain,
        ),
        span("|".repeat(filled), bar_style(pct.unwrap_or(0))),
        span(
            format!(
                "{}] {:>PCT_W$} {:>SIZE_W$} {:>REF_W$}",
                " ".repeat(c.bar - filled),
                pct.map_or("-".into(), |p| format!("{p}%")),
                short(r.peak),
                r.refusals
            ),
            Style::Plain,
        ),
    ]);
    let pad = " ".repeat(r.indent + 2);
    let others: Vec<String> = (r.parts.iter())
        .flat_map(|parts| parts.others.iter())
        .filter(|(_, b)| **b > 0)
        .map(|(p, b)| format!("{} {}", p.words(), short(*b)))
        .collect();
    if let (false, Some(parts)) = (others.is_empty(), r.parts) {
        let text = format!(
            "{pad}allocations {} · {}",
            short(parts.allocations),
            others.join(" · ")
        );
        out.push(vec![span(fit(&text, width), Style::Dim)]);
    }
    if let Some((refusal, pid)) = r.refusal {
        let who = pid.map_or(String::new(), |p| format!(" (pid {p})"));
        let text = format!(
            "{pad}last refusal {}{who}: {}",
            age(now, refusal.unix_ns),
            escape::text(&refusal.line)
        );
        out.push(vec![span(fit(&text, width), Style::Refusal)]);
    }
}

/// `PID [observe] COMMAND ARGS`, the command's directory left out (the JSON keeps it). PID
/// is as this viewer sees it; in another PID namespace `HOST(OWN)` (`?(OWN)` where the viewer
/// cannot tell), and the container, when there is one, in brackets before the command.
fn process_name(p: &Process) -> String {
    let mode = if p.mode == "observe" {
        " [observe]"
    } else {
        ""
    };
    let (program, args) = p.argv.split_once(' ').unwrap_or((&p.argv, ""));
    let program = program.rsplit('/').next().unwrap_or(program);
    let pid = match p.host_pid {
        Some(host) if host == p.pid => host.to_string(),
        Some(host) => format!("{host}({})", p.pid),
        None => format!("?({})", p.pid),
    };
    let container = p
        .container
        .as_ref()
        .map_or(String::new(), |c| format!(" [{c}]"));
    escape::text(format!("{pid}{mode}{container} {program} {args}").trim_end()).into_owned()
}

fn process_row<'a>(p: &'a Process, indent: usize, room: u64, member: bool) -> Row<'a> {
    Row {
        name: process_name(p),
        name_style: Style::Plain,
        limit: match (member, p.limit) {
            (true, _) => "-".into(),
            (false, Some(l)) => short(l),
            (false, None) => "none".into(),
        },
        in_use: p.in_use,
        room: p.limit.unwrap_or(room),
        peak: p.peak,
        refusals: p.refusals,
        parts: Some(&p.parts),
        refusal: p.last_refusal.as_ref().map(|r| (r, None)),
        indent,
    }
}

fn sort_processes(ps: &mut [&Process], sort: Sort) {
    match sort {
        Sort::InUse => ps.sort_by_key(|p| (std::cmp::Reverse(p.in_use), p.pid)),
        Sort::Refusals => ps.sort_by_key(|p| (std::cmp::Reverse(p.refusals), p.pid)),
        Sort::Pid => ps.sort_by_key(|p| p.pid),
        Sort::Name => ps.sort_by(|a, b| (&a.argv, a.pid).cmp(&(&b.argv, b.pid))),
    }
}

fn sort_groups(gs: &mut [&GroupRow], sort: Sort) {
    match sort {
        Sort::InUse => gs.sort_by(|a, b| b.in_use.cmp(&a.in_use).then(a.name.cmp(&b.name))),
        Sort::Refusals => gs.sort_by(|a, b| b.refusals.cmp(&a.refusals).then(a.name.cmp(&b.name))),
        Sort::Pid | Sort::Name => gs.sort_by(|a, b| a.name.cmp(&b.name)),
    }
}

fn gpu_lines(out: &mut Vec<Line>, gpu: &Gpu, view: &View, now: u64) {
    let w = view.width.max(60);
    let c = Columns::new(w);
    let index = gpu.index.map_or("GPU ?".into(), |i| format!("GPU {i}"));
    let total = if gpu.total > 0 {
        human(gpu.total)
    } else {
        "memory unknown".into()
    };
    // The name, when a process's driver gave it (the interposer asks nothing to learn it).
    let name = if gpu.name.is_empty() {
        String::new()
    } else {
        format!("  {}", escape::text(&gpu.name))
    };
    let head = format!("{index}  {total}{name}");
    let uuid = escape::text(&gpu.uuid);
    if head.chars().count() + 2 + uuid.chars().count() <= w {
        out.push(vec![span(format!("{head}  {uuid}"), Style::Gpu)]);
    } else {
        out.push(vec![span(fit(&head, w), Style::Gpu)]);
        out.push(vec![span(fit(&format!("  {uuid}"), w), Style::Gpu)]);
    }
    out.push(vec![span(
        format!(
            "{:<nw$} {:>LIMIT_W$} {:>SIZE_W$} {:<bw$} {:>PCT_W$} {:>SIZE_W$} {:>REF_W$}",
            "  GROUP / PID COMMAND",
            "LIMIT",
            "IN USE",
            "",
            "%",
            "PEAK",
            "REFUSED",
            nw = c.name,
            bw = c.bar + 2
        ),
        Style::Header,
    )]);
    let mut groups: Vec<&GroupRow> = gpu.groups.iter().collect();
    sort_groups(&mut groups, view.sort);
    for g in groups {
        let room = g.limit.unwrap_or(gpu.total);
        let refusal = g.last_refusal.as_ref().map(|r| {
            let pid = g
                .processes
                .iter()
                .find(|p| p.last_refusal.as_ref() == Some(r))
                .map(|p| p.pid);
            (r, pid)
        });
        row_lines(
            out,
            &Row {
                name: format!(
                    "group {} ({})",
                    escape::text(&g.name),
                    plural(g.members, "member", "members")
                ),
                name_style: Style::Group,
                limit: g.limit.map_or("none".into(), short),
                in_use: g.in_use,
                room,
                peak: g.peak,
                refusals: g.refusals,
                parts: g.parts.as_ref(),
                refusal,
                indent: 2,
            },
            &c,
            now,
            w,
        );
        let mut members: Vec<&Process> = g.processes.iter().collect();
        sort_processes(&mut members, view.sort);
        for p in members {
            let mut row = process_row(p, 4, room, true);
            if row.refusal.map(|(r, _)| Some(r)) == Some(g.last_refusal.as_ref()) {
                row.refusal = None; // said on the group's row
            }
            row_lines(out, &row, &c, now, w);
        }
    }
    let mut processes: Vec<&Process> = gpu.processes.iter().collect();
    sort_processes(&mut processes, view.sort);
    for p in processes {
        row_lines(out, &process_row(p, 2, gpu.total, false), &c, now, w);
    }
}

/// The whole frame: a title line, a block per GPU, then processes that use no GPU yet and
/// the notes about skipped state files.
pub fn render(s: &Snapshot, view: &View) -> Vec<Line> {
    let w = view.width.max(60);
    let now = s.taken_unix_ns;
    let mut out = vec![vec![span(
        fit(
            &format!(
                "cuquota top  {}, {}, {}  {}  sorted by {}",
                plural(s.process_count, "process", "processes"),
                plural(s.group_count, "group", "groups"),
                plural(s.gpus.len(), "GPU", "GPUs"),
                clock(now),
                view.sort.words()
            ),
            w,
        ),
        Style::Title,
    )]];
    if s.gpus.is_empty() && s.idle_processes.is_empty() {
        // What to do is the point of this sentence: wrapped, never cut.
        let said = format!(
            "No governed process or group under {} (CUQUOTA_STATE_DIR or --state-dir to look \
             elsewhere).",
            escape::text(&s.state_dir)
        );
        for line in wrap(&said, w) {
            out.push(vec![span(fit(&line, w), Style::Dim)]);
        }
    }
    for gpu in &s.gpus {
        out.push(Vec::new());
        gpu_lines(&mut out, gpu, view, now);
    }
    if !s.idle_processes.is_empty() {
        out.push(Vec::new());
        let list: Vec<String> = s.idle_processes.iter().map(process_name).collect();
        let text = format!(
            "{} not using a GPU yet: {}",
            plural(s.idle_processes.len(), "process", "processes"),
            list.join(", ")
        );
        out.push(vec![span(fit(&text, w), Style::Dim)]);
    }
    if !s.idle_groups.is_empty() {
        let text = format!(
            "{} with no living member: {} (`cuquota set NAME --remove` removes one)",
            plural(s.idle_groups.len(), "group", "groups"),
            (s.idle_groups.iter())
                .map(|g| escape::text(g))
                .collect::<Vec<_>>()
                .join(", ")
        );
        out.push(vec![span(fit(&text, w), Style::Dim)]);
    }
    for note in s.notes.iter().take(5) {
        let note = escape::text(note);
        out.push(vec![span(fit(&format!("note: {note}"), w), Style::Dim)]);
    }
    if s.notes.len() > 5 {
        out.push(vec![span(
            format!("note: {} more state files skipped", s.notes.len() - 5),
            Style::Dim,
        )]);
    }
    out
}

/// The frame as plain text, one line each, trailing spaces trimmed.
pub fn plain(lines: &[Line]) -> String {
    let mut s = String::new();
    for line in lines {
        let text: String = line.iter().map(|sp| sp.text.as_str()).collect();
        s.push_str(text.trim_end());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::model::tests::{device, proc, sample};
    use super::super::model::{build, Snapshot};
    use super::*;
    use std::path::Path;

    fn text(s: &Snapshot, width: usize) -> String {
        plain(&render(
            s,
            &View {
                width,
                sort: Sort::InUse,
            },
        ))
    }

    #[test]
    fn sizes_ages_and_cuts() {
        assert_eq!(short(0), "0 B");
        assert_eq!(short(512 << 20), "512 MiB");
        assert_eq!(short(1023 << 20), "1023 MiB");
        assert_eq!(short((78 << 30) / 10), "7.80 GiB");
        assert_eq!(short(80 << 30), "80.0 GiB");
        assert_eq!(age(10_000_000_000, 7_000_000_000), "3s ago");
        assert_eq!(age(0, 7), "just now");
        assert_eq!(age(7_200_000_000_000, 0), "2h ago");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(clock(3_723_000_000_000), "01:02:03 UTC");
    }

    #[test]
    fn a_frame_fits_80_columns_and_says_everything() {
        let t = text(&sample(), 80);
        println!("{t}");
        for line in t.lines() {
            assert!(line.chars().count() <= 80, "{line:?}");
        }
        assert!(t.contains("4 processes, 1 group, 2 GPUs"), "{t}");
        assert!(
            t.contains("GPU 0  8.00 GiB  Stand-in GPU  GPU-01010101-"),
            "{t}"
        );
        let group = t.lines().find(|l| l.contains("group svc")).unwrap();
        assert!(group.contains("(2 members)"), "{group}");
        assert!(group.contains("1.00 GiB"), "{group}");
        assert!(group.contains("500 MiB"), "{group}");
        assert!(group.contains("48%"), "{group}");
        assert!(t.contains("allocations 400 MiB · context 100 MiB"), "{t}");
        assert!(
            t.contains("last refusal 3s ago (pid 101): GPU 0 refused 1.00 GiB"),
            "{t}"
        );
        // Members under their group, the member with most first; the refusal said once.
        let lines: Vec<&str> = t.lines().collect();
        let at = |needle: &str| lines.iter().position(|l| l.contains(needle)).unwrap();
        assert!(
            at("group svc") < at("    101 python") && at("    101 python") < at("    102 python")
        );
        assert_eq!(t.matches("GPU 0 refused 1.00 GiB").count(), 1, "{t}");
        assert!(
            t.contains("1 process not using a GPU yet: 104 python"),
            "{t}"
        );
        assert!(t.contains("note: x: skipped (layout 9)"), "{t}");
    }

    #[test]
    fn sorting_reorders_rows() {
        let s = sample();
        let by = |sort| plain(&render(&s, &View { width: 100, sort }));
        let t = by(Sort::Pid);
        assert!(t.find("    101 ").unwrap() < t.find("    102 ").unwrap());
        assert!(t.contains("sorted by pid"));
        assert_eq!(Sort::InUse.next().next().next().next(), Sort::InUse);
    }

    #[test]
    fn hundreds_of_processes_render_in_one_frame() {
        let procs = (0..400)
            .map(|i| proc(1000 + i, None, vec![device(0, 1, u64::from(i) << 20)]))
            .collect();
        let s = build(Path::new("/s"), procs, vec![], vec![], 0);
        let started = std::time::Instant::now();
        let t = text(&s, 80);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(t.lines().filter(|l| l.starts_with("  1")).count(), 400);
        // The most memory first.
        let first = t.lines().find(|l| l.starts_with("  1")).unwrap();
        assert!(first.starts_with("  1399 "), "{first}");
    }

    #[test]
    fn a_long_gpu_name_puts_the_uuid_on_a_line_of_its_own() {
        let mut s = sample();
        s.gpus[0].name = "NVIDIA H100 80GB HBM3 with a long board name".into();
        let t = text(&s, 80);
        let lines: Vec<&str> = t.lines().collect();
        let at = lines.iter().position(|l| l.starts_with("GPU 0")).unwrap();
        assert!(lines[at].contains("NVIDIA H100"), "{t}");
        assert_eq!(lines[at + 1].trim(), s.gpus[0].uuid, "{t}");
        for line in lines {
            assert!(line.chars().count() <= 80, "{line:?}");
        }
    }

    /// Every string another process wrote, hostile: escapes that clear the screen and set
    /// the window title, a C1 CSI, and a newline before a forged log line. The frame is
    /// the one of the same strings already escaped: shown, not obeyed.
    #[test]
    fn foreign_strings_are_shown_escaped_on_their_own_lines() {
        const HOSTILE: &str =
            "evil\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}1m\ncuquota[1]: GPU 0 summary: all fine";
        let with = |text: &str| {
            let set = |p: &mut super::super::model::Process| {
                p.argv = text.into();
                p.container = Some(text.into());
                if let Some(r) = &mut p.last_refusal {
                    r.line = text.into();
                }
            };
            let mut s = sample();
            s.state_dir = text.into();
            for gpu in &mut s.gpus {
                gpu.name = text.into();
                for g in &mut gpu.groups {
                    g.name = text.into();
                    g.last_refusal.iter_mut().for_each(|r| r.line = text.into());
                    g.processes.iter_mut().for_each(set);
                }
                gpu.processes.iter_mut().for_each(set);
            }
            s.idle_processes.iter_mut().for_each(set);
            s.idle_groups = vec![text.into()];
            s.notes = vec![text.into()];
            s
        };
        let shown = escape::text(HOSTILE);
        assert_eq!(
            shown,
            "evil\\x1b[2J\\x1b]0;owned\\x07\\u{9b}1m\\ncuquota[1]: GPU 0 summary: all fine"
        );
        for width in [80, 200] {
            let t = text(&with(HOSTILE), width);
            assert_eq!(t, text(&with(&shown), width));
            for line in t.lines() {
                assert!(!line.chars().any(char::is_control), "{line:?}");
                assert!(line.chars().count() <= width, "{line:?}");
                assert!(!line.starts_with("cuquota["), "{line:?}");
            }
        }
        let t = text(&with(HOSTILE), 200);
        assert!(t.contains(&format!("group {shown} (2 members)")), "{t}");
        assert!(t.contains(&format!("[{shown}] {shown}")), "{t}");
        assert!(t.contains(&format!("GPU 0  8.00 GiB  {shown}")), "{t}");
        assert!(t.contains(&format!("(pid 101): {shown}")), "{t}");
        assert!(t.contains(&format!("note: {shown}")), "{t}");
        // Cut at 80 columns between escapes, never inside one.
        let t = text(&with(HOSTILE), 80);
        let cut = t.lines().find(|l| l.contains("  group evil")).unwrap();
        assert!(cut.starts_with("  group evil\\x1b[2J\\x1b]0;… "), "{cut:?}");
    }

    #[test]
    fn nothing_to_show_says_where_it_looked() {
        let s = build(Path::new("/nowhere"), vec![], vec![], vec![], 0);
        assert!(text(&s, 80).contains("No governed process or group under /nowhere"));
        // The whole sentence at 80 and 100 columns, in lines that fit.
        let s = build(Path::new("/dev/shm/cuquota"), vec![], vec![], vec![], 0);
        for width in [60, 80, 100] {
            let t = text(&s, width);
            let said: Vec<&str> = t.lines().skip(1).collect();
            assert!(said.iter().all(|l| l.chars().count() <= width), "{t}");
            assert_eq!(
                said.join(" "),
                "No governed process or group under /dev/shm/cuquota (CUQUOTA_STATE_DIR or \
                 --state-dir to look elsewhere).",
                "{width}"
            );
        }
    }
}
