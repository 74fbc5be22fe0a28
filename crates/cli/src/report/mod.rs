//! `cuquota report`: one pass over each trace, keeping O(devices + live allocations + top-k)
//! state, then the same [`Report`] printed as text or as one JSON document.
//!
//! - [`model`]: the report's data (also what `--json` prints);
//! - [`build`]: from events to the model;
//! - [`text`]: the terminal rendering.

mod build;
mod model;
mod text;

pub use build::build;
pub use model::*;
use text::render;
pub use text::seconds;

use cuquota_format::read::Options;
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

pub fn run(
    traces: &[PathBuf],
    json: bool,
    options: &Options,
    debug_dirs: &[PathBuf],
) -> Result<(), String> {
    let report = build(traces, options, debug_dirs)?;
    if json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuquota_format::part::{Layer, Part, PerLayer};

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
        let report = build(&paths, &options(), &[]);
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

    /// A trace whose every text field holds what a hostile program could put in its
    /// command line, host name or registry file: the text report is that of the same trace
    /// with those fields already escaped, one line each, nothing for a terminal to obey.
    #[test]
    fn foreign_text_in_a_trace_is_shown_escaped() {
        const HOSTILE: &str =
            "evil\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}1m\ncuquota[1]: GPU 0 summary: all fine";
        let trace = |text: &str| {
            let t = serde_json::to_string(text).unwrap();
            vec![
                format!(
                    r#"{{"type":"header","schema":1,"version":"0.1.0","pid":9,"host":{t},"rank":0,"argv":[{t},{t}],"start_unix_ns":1,"mode":"enforce","group":{t},"devices":[{{"ordinal":0,"name":{t},"total":8589934592,"quota":{q}}}]}}"#,
                    q = 100 * MIB
                ),
                format!(
                    r#"{{"type":"alloc","t_ns":1000,"tid":7,"dev":0,"api":{t},"ptr":{t},"bytes":{b},"result":"CUDA_SUCCESS","in_use":{b}}}"#,
                    b = 60 * MIB
                ),
                format!(
                    r#"{{"type":"refused","t_ns":2000,"tid":7,"dev":0,"api":{t},"ptr":"0x0","bytes":{b},"result":"CUDA_ERROR_OUT_OF_MEMORY","in_use":{b},"reason":"quota","group":{t},"group_in_use":{g},"group_limit":{q},"holders":[{{"pid":5,"outer_pid":5,"command":{t},"container":{t},"in_use":{h}}}]}}"#,
                    b = 60 * MIB,
                    g = 90 * MIB,
                    q = 100 * MIB,
                    h = 30 * MIB
                ),
                format!(
                    r#"{{"type":"summary","t_ns":3000,"end":{t},"events":2,"dropped":0,"devices":[]}}"#
                ),
            ]
        };
        let shown = cuquota_format::escape::text(HOSTILE);
        let hostile = render(&report(&[("hostile", trace(HOSTILE))]));
        assert_eq!(hostile, render(&report(&[("hostile", trace(&shown))])));
        for line in hostile.lines() {
            assert!(!line.chars().any(char::is_control), "{line:?}");
            assert!(!line.starts_with("cuquota["), "{line:?}");
        }
        for needle in [
            format!("== {shown} · rank 0 · pid 9 · {shown} {shown}"),
            format!("sharing group {shown}'s quota"),
            format!("stopped by {shown}"),
            format!("GPU 0 ({shown}, 8.00 GiB)"),
            format!("group {shown} 90.00 MiB of 100.00 MiB"),
            format!("pid 5 [{shown}] ({shown}) 30.00 MiB"),
            format!("API mix (calls traced, refused ones included): {shown} 2"),
        ] {
            assert!(
                hostile.contains(&needle),
                "missing {needle:?} in\n{hostile}"
            );
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
            let err = build(std::slice::from_ref(&path), &options(), &[]).unwrap_err();
            let _ = std::fs::remove_file(&path);
            assert_eq!(err, crate::traces::not_a_trace(&path), "{name}");
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
                // Allocations, pool cache, graph, context.
                layers: PerLayer([
                    part(12, 52, 52),
                    part(0, 8, 0),
                    part(10, 10, 10),
                    part(30, 30, 30)
                ]),
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
            (
                f.layers[Layer::Allocations].at_end,
                f.layers[Layer::Allocations].peak
            ),
            (40 * MIB, 40 * MIB)
        );
        assert_eq!(
            (
                f.layers[Layer::Part(Part::Context)].at_end,
                f.layers[Layer::Part(Part::Context)].at_peak
            ),
            (30 * MIB, 30 * MIB)
        );
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
            (
                f.counted,
                f.layers[Layer::Allocations].peak,
                f.layers[Layer::Part(Part::Context)].peak
            ),
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
