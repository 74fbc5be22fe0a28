//! A newcomer's first runs: what the README promises about a plain run, each with real
//! processes under LD_PRELOAD against the shim — the configuration line at `info` names the
//! trace where it will be, `cuquota plot` of a two-rank job names both traces.

use crate::common::{artifacts, scratch_dir, Client, Run};
use std::path::Path;
use std::process::Command;

/// The configuration line at the first CUDA call shows the trace's path expanded, as the
/// line at exit does (`%p` is the process's pid, `%r` its rank).
#[test]
fn the_info_configuration_line_shows_the_expanded_trace_path() {
    let dir = scratch_dir("config-trace");
    let template = format!("{}/t-%r-%p.jsonl", dir.display());
    let out = Run::client(Client::Linked)
        .ops("init alloc:1M")
        .env("CUQUOTA_TRACE", &template)
        .env("CUQUOTA_LOG_LEVEL", "info")
        .env("RANK", "3")
        .run();
    let path = format!("{}/t-3-{}.jsonl", dir.display(), out.pid);
    assert!(Path::new(&path).is_file(), "{out}");
    out.check_log(&format!(
        "config: limit none (observing only); mode enforce; count footprint (context memory \
         measured); virtualize on; trace {path} (CUQUOTA_TRACE={template})"
    ));
    out.check_log(&format!("trace written to {path}"));
}

/// The subtitle of the title names both files of a two-rank job (each clipped from its
/// start to 43 characters, since ranks' paths differ at their end).
#[test]
fn plot_of_a_two_rank_job_names_both_traces() {
    let dir = scratch_dir("plot-ranks");
    let template = format!("{}/t-%r.jsonl", dir.display());
    for rank in ["0", "1"] {
        Run::client(Client::Linked)
            .ops("init alloc:1M")
            .env("CUQUOTA_TRACE", &template)
            .env("RANK", rank)
            .run()
            .check_rcs(&[0, 0]);
    }
    let (a, b) = (dir.join("t-0.jsonl"), dir.join("t-1.jsonl"));
    let svg = dir.join("memory.svg");
    let out = Command::new(&artifacts().cli)
        .arg("plot")
        .args([&a, &b])
        .arg("-o")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let clip = |p: &Path| {
        let p = p.display().to_string();
        let n = p.chars().count();
        if n <= 43 {
            p
        } else {
            format!("…{}", p.chars().skip(n - 42).collect::<String>())
        }
    };
    let text = std::fs::read_to_string(&svg).unwrap();
    let want = format!(">trace: {}, {}</text>", clip(&a), clip(&b));
    assert!(text.contains(&want), "no {want} in:\n{text}");
    assert!(clip(&a).ends_with("/t-0.jsonl") && clip(&b).ends_with("/t-1.jsonl"));
}

/// `cuquota report` of an observe-mode run lists each would-be refusal with its size, the
/// request and what was in use, as it lists real refusals' episodes.
#[test]
fn report_of_an_observe_run_lists_each_would_be_refusal() {
    let dir = scratch_dir("observe-report");
    let path = dir.join("t.jsonl");
    Run::client(Client::Linked)
        .ops("init alloc:2M alloc:3M")
        .env("CUQUOTA_MODE", "observe")
        .env("CUQUOTA_LIMIT", "1MiB")
        .env("CUQUOTA_TRACE", path.to_str().unwrap())
        .run()
        .check_rcs(&[0, 0, 0]);
    let out = Command::new(&artifacts().cli)
        .arg("report")
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| *l == "2 requests would have been refused by the quota of 1.00 MiB:")
        .unwrap_or_else(|| panic!("no would-be refusals in:\n{text}"));
    // Each: its size, when (µs: not fixed), the call and what was in use.
    let refusal = |line: &str, size: &str, in_use: &str| {
        line.starts_with(&format!("{size}  at "))
            && line.ends_with(&format!(" via cuMemAlloc_v2 (in use {in_use})"))
    };
    assert!(refusal(lines[at + 1], "2.00 MiB", "0 B"), "{text}");
    assert!(refusal(lines[at + 2], "3.00 MiB", "2.00 MiB"), "{text}");
    assert!(
        lines.contains(&"observe mode: a quota of 5.00 MiB (5242880 bytes) or more would have held this run (its peak)"),
        "{text}"
    );
}
