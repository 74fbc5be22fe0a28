//! `cuquota report` on synthetic traces: the text and JSON figures, bad lines, files that
//! are not traces, the same trace given twice, singular counts.

use super::{cuquota, event, header, ok, rank0, s, stderr, stdout, temp_dir, write_traces};
use crate::common::{GIB, MIB};
use serde_json::Value;
use std::path::Path;

#[test]
fn report_text_and_json_on_synthetic_traces() {
    let dir = temp_dir("report");
    let (a, b) = write_traces(&dir);
    let out = ok(&["report", s(&a), s(&b)]);
    let text = stdout(&out);
    for needle in [
        "== node1 · rank 0 · pid 100 · train.py",
        "GPU 0 (Stand-in GPU, 8.00 GiB): quota 1.00 GiB, peak 1012.00 MiB (98.8%) at 3.200 ms",
        "GPU 1 (Stand-in GPU, 8.00 GiB): no quota, peak 100.00 MiB at 2.000 ms",
        "refused 800.00 MiB → 720.00 MiB; backed off, then got 500.00 MiB",
        "Live at exit: 2 allocations, 600.00 MiB",
        "API mix (calls traced, refused ones included): cuMemAlloc_v2 5, cuMemFree_v2 1, cuMemGetInfo_v2 1",
        "== node1 · rank 1 · pid 200 · train.py",
        "no summary line: the process is still running, or was killed",
        "Live at the end of the trace: 2 allocations, 512.00 MiB",
        "== job: 2 processes on 1 host",
        "1 trace without a summary (still running, or killed)",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let err = stderr(&out);
    assert!(
        err.contains("rank1.jsonl:4: incomplete last line"),
        "warning for the torn line:\n{err}"
    );

    let out = ok(&["report", "--json", s(&a), s(&b)]);
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let p0 = &json["processes"][0];
    assert_eq!(p0["pid"], 100);
    assert_eq!(p0["end"], "exit");
    assert_eq!(p0["events"], 8);
    let d0 = &p0["devices"][0];
    assert_eq!(d0["peak"], 1012 * MIB);
    assert_eq!(d0["peak_t_ns"], 3_200_000);
    assert_eq!(d0["quota"], GIB);
    assert_eq!(d0["allocs"], 2);
    assert_eq!(d0["frees"], 1);
    assert_eq!(d0["refusals"], 2);
    assert_eq!(d0["live_bytes"], 500 * MIB);
    assert_eq!(d0["meminfo_calls"], 1);
    assert_eq!(d0["timeline"].as_array().unwrap().len(), 60);
    let episodes = &p0["backoff_episodes"];
    assert_eq!(episodes["count"], 1);
    assert_eq!(episodes["recovered"], 1);
    assert_eq!(
        episodes["shown"][0]["refused"],
        serde_json::json!([800 * MIB, 720 * MIB])
    );
    assert_eq!(episodes["shown"][0]["got"], 500 * MIB);
    assert_eq!(p0["largest_allocations"][0]["bytes"], 512 * MIB);
    assert_eq!(p0["largest_allocations"][0]["live_at_exit"], false);
    let p1 = &json["processes"][1];
    assert_eq!(p1["end"], Value::Null);
    assert_eq!(p1["truncated_last_line"], true);
    assert_eq!(json["job"]["processes"], 2);
    assert_eq!(json["job"]["peak_sum"], (1012 + 100 + 512) * MIB);
    assert_eq!(json["job"]["live_bytes"], (600 + 512) * MIB);
    assert_eq!(json["job"]["unfinished"], 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_lines_name_file_and_line_unless_skipped() {
    let dir = temp_dir("bad");
    let path = dir.join("trace.jsonl");
    let mut lines = rank0();
    lines.insert(3, "{\"type\":\"alloc\",".into());
    lines.insert(5, "not json".into());
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let out = cuquota(&["report", s(&path)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("trace.jsonl:4: EOF while parsing a value at column 16"),
        "{err}"
    );
    let out = ok(&["report", "--skip-bad", s(&path)]);
    let err = stderr(&out);
    assert!(err.contains("trace.jsonl:4:") && err.contains("trace.jsonl:6: expected"));
    assert!(stdout(&out).contains("refused 800.00 MiB → 720.00 MiB"));

    let out = cuquota(&["report", "/nonexistent/trace.jsonl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent/trace.jsonl: No such file"));
    let not_trace = dir.join("other.jsonl");
    std::fs::write(&not_trace, "{\"a\":1}\n").unwrap();
    let out = cuquota(&["report", s(&not_trace)]);
    assert!(
        stderr(&out).contains(&not_a_trace(&not_trace)),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn not_a_trace(path: &Path) -> String {
    format!(
        "cuquota: {}: not a cuquota trace (its first line is not a cuquota header; traces are \
         written with CUQUOTA_TRACE=PATH or cuquota run --trace PATH)\n",
        path.display()
    )
}

/// Report, export and plot say the same one line for a file that is not a trace, whatever
/// it holds instead.
#[test]
fn not_a_trace_is_one_wording_in_every_subcommand() {
    let dir = temp_dir("notrace");
    let svg = dir.join("out.svg");
    let json = dir.join("out.json");
    let an_event = event("alloc", 1, 1, 0, 0x1, 1, 1) + "\n";
    for (name, text) in [
        ("empty", ""),
        ("text", "hello\n"),
        ("json", "{\"a\":1}\n"),
        ("event", an_event.as_str()),
    ] {
        let path = dir.join(format!("{name}.jsonl"));
        std::fs::write(&path, text).unwrap();
        for args in [
            vec!["report", s(&path)],
            vec!["report", "--json", s(&path)],
            vec!["export", s(&path), "-o", s(&json)],
            vec!["plot", s(&path), "-o", s(&svg)],
        ] {
            let out = cuquota(&args);
            assert_eq!(out.status.code(), Some(1), "{args:?}");
            assert_eq!(stderr(&out), not_a_trace(&path), "{args:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same trace given twice, or a copy of it, is one process with a warning, in the
/// report (text and JSON) and the export.
#[test]
fn the_same_trace_given_twice_is_read_once() {
    let dir = temp_dir("twice");
    let (a, _) = write_traces(&dir);
    let copy = dir.join("copy.jsonl");
    std::fs::copy(&a, &copy).unwrap();
    let out = ok(&["report", s(&a), s(&copy), s(&a)]);
    let text = stdout(&out);
    assert!(text.contains("== job: 1 process on 1 host"), "{text}");
    assert_eq!(
        text.matches("== node1 · rank 0 · pid 100").count(),
        1,
        "{text}"
    );
    let warning = |file: &Path| {
        format!(
            "cuquota: warning: {}: the trace of pid 100 on node1 (started at 1000000000 ns) is \
             also in {}; read once\n",
            file.display(),
            a.display()
        )
    };
    assert_eq!(
        stderr(&out),
        warning(&copy)
            + &format!(
                "cuquota: warning: {}: given twice; read once\n",
                a.display()
            )
    );
    let out = ok(&["report", "--json", s(&a), s(&copy)]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["job"]["processes"], 1);
    assert_eq!(json["job"]["refusals"], 2);
    let chrome = dir.join("chrome.json");
    ok(&["export", s(&a), s(&copy), "-o", s(&chrome)]);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&chrome).unwrap()).unwrap();
    let names = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .count();
    assert_eq!(names, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// "1 refusal", not "1 refusals"; a block reused at one address is one "largest" line with
/// its count.
#[test]
fn report_counts_of_one_and_distinct_largest_allocations() {
    let dir = temp_dir("singular");
    let path = dir.join("t.jsonl");
    let mut lines = vec![header(7, 0, 1_000_000_000, &[(0, Some(GIB))])];
    for i in 0..3u64 {
        lines.push(event(
            "alloc",
            1000 + i * 2000,
            1,
            0,
            0xa000,
            64 * MIB,
            64 * MIB,
        ));
        lines.push(event("free", 2000 + i * 2000, 1, 0, 0xa000, 64 * MIB, 0));
    }
    lines.push(event("refused", 9000, 1, 0, 0, 2 * GIB, 0));
    lines.push(event("alloc", 10_000, 1, 0, 0xb000, MIB, MIB));
    lines.push(
        r#"{"type":"summary","t_ns":11000,"end":"exit","events":8,"dropped":0,"devices":[]}"#
            .into(),
    );
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let text = stdout(&ok(&["report", s(&path)]));
    for needle in [
        "     4 allocations (193.00 MiB in all), 3 frees, 1 refusal (1 by quota, 0 by the driver), 1 live (1.00 MiB)",
        "   Largest allocations (the same address and size again counts as one):\n        64.00 MiB  GPU 0  cuMemAlloc_v2  0xa000  3 times, first at 1 µs\n         1.00 MiB  GPU 0  cuMemAlloc_v2  0xb000  at 10 µs  (still live)\n",
        "   Live at exit: 1 allocation, 1.00 MiB",
        "total: peaks add up to 64.00 MiB; 1 refusal in 1 back-off episode; 1 allocation (1.00 MiB) live at the end; 8 events",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let json: Value = serde_json::from_slice(&ok(&["report", "--json", s(&path)]).stdout).unwrap();
    let largest = &json["processes"][0]["largest_allocations"];
    assert_eq!(largest.as_array().unwrap().len(), 2);
    assert_eq!(largest[0]["count"], 3);
    let _ = std::fs::remove_dir_all(&dir);
}
