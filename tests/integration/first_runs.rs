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
