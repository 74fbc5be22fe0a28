//! Golden schema-1 traces: `cuquota report --json` on checked-in trace files
//! (tests/golden/NAME.jsonl) must give exactly the checked-in report
//! (tests/golden/NAME.report.json), compared parsed so that key order and spacing do not
//! matter. The traces were recorded from real runs of the writer and trimmed; the tolerance
//! cases (a dropped line, unknown fields and line types, a cut-off last line) were edited by
//! hand, and the footprint ones written by hand from the schema's text, before the
//! writer wrote such lines. So the reader is tested against traces that the current writer
//! did not just write. Where tests/golden/NAME.report.txt exists, the text report must be
//! exactly it too.
//!
//! Each expected report was checked by reading it against its trace. To regenerate one
//! deliberately (after a change to the report that is meant, and only then), from the
//! repository root:
//!
//!     cargo run -q --bin cuquota -- report --json tests/golden/NAME.jsonl \
//!         > tests/golden/NAME.report.json
//!     cargo run -q --bin cuquota -- report tests/golden/NAME.jsonl \
//!         > tests/golden/NAME.report.txt
//!
//! then read the diff: every changed figure must be explained by the change. Never
//! regenerate one to make this test pass without knowing why it failed.

use crate::common::artifacts;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Every golden trace; each has a test below.
const TRACES: [&str; 9] = [
    "normal",
    "backoff",
    "two_devices",
    "cut_off",
    "tolerance",
    "context",
    "footprint",
    "footprint_observe",
    "group_stacks",
];

/// Runs `cuquota report --json` on tests/golden/NAME.jsonl (as a relative path, which the
/// report's `file` fields show) and compares with tests/golden/NAME.report.json.
fn check(name: &str) {
    let art = artifacts();
    let trace = format!("tests/golden/{name}.jsonl");
    let expected_path = art
        .workspace
        .join(format!("tests/golden/{name}.report.json"));
    let out = Command::new(&art.cli)
        .args(["report", "--json", &trace])
        .current_dir(&art.workspace)
        .env_remove("CUQUOTA_LIB")
        .output()
        .expect("run cuquota report");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cuquota report --json {trace}:\n{stderr}"
    );
    let got: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{trace}: the report is not JSON: {e}"));
    let want: Value = serde_json::from_str(&std::fs::read_to_string(&expected_path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
    assert!(
        got == want,
        "{trace}: the report differs from {}\n(see tests/integration/golden.rs to \
         regenerate it deliberately)\n--- got:\n{}",
        expected_path.display(),
        serde_json::to_string_pretty(&got).unwrap()
    );
    let text_path = art
        .workspace
        .join(format!("tests/golden/{name}.report.txt"));
    if let Ok(want) = std::fs::read_to_string(&text_path) {
        let out = Command::new(&art.cli)
            .args(["report", &trace])
            .current_dir(&art.workspace)
            .env_remove("CUQUOTA_LIB")
            .output()
            .expect("run cuquota report");
        assert!(out.status.success(), "cuquota report {trace}");
        let got = String::from_utf8_lossy(&out.stdout);
        assert!(
            got == want,
            "{trace}: the text report differs from {}\n--- got:\n{got}",
            text_path.display()
        );
    }
}

#[test]
fn every_golden_trace_has_an_expected_report_and_a_test() {
    let dir = artifacts().workspace.join("tests/golden");
    let mut traces: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".jsonl").map(str::to_string)
        })
        .collect();
    traces.sort();
    let mut listed: Vec<String> = TRACES.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(traces, listed, "the traces in {}", dir.display());
    for name in TRACES {
        let expected = dir.join(format!("{name}.report.json"));
        assert!(
            Path::new(&expected).is_file(),
            "{} is missing",
            expected.display()
        );
    }
}

/// A normal run: allocations, frees, memory queries, a summary.
#[test]
fn normal_run() {
    check("normal");
}

/// Refusals by the quota, then a smaller request that succeeds: one back-off episode.
#[test]
fn refusals_and_a_backoff_episode() {
    check("backoff");
}

/// Two devices, each with its own quota, peak and timeline.
#[test]
fn two_devices() {
    check("two_devices");
}

/// A process killed mid-run: no summary, and the last line cut off mid-write.
#[test]
fn cut_off_without_a_summary() {
    check("cut_off");
}

/// A created context destroyed with two allocations of its own on GPU 0 and one from GPU 1's
/// default pool: one `context` line frees all three, each on its own device.
#[test]
fn a_context_destroyed_with_its_allocations() {
    check("context");
}

/// Counting the footprint, under a 1 GiB quota: a 300 MiB primary context, a
/// pool that keeps 128 MiB its program freed, trimmed for a 400 MiB `cuMemAlloc`, 64 MiB of
/// graph memory trimmed for a graph launch that still does not fit (refused: "graph launch
/// needing 512.00 MiB"), and a second context refused ("a new context (300.00 MiB)").
/// Neither refusal is a back-off episode; the footprint peak is 1020 MiB (allocations
/// 656 MiB, graph 64 MiB, context 300 MiB).
#[test]
fn footprint_by_part_with_trims_and_refused_context_and_graph_launch() {
    check("footprint");
}

/// Observe mode counting the footprint, quota 512 MiB: two allocations and a second context
/// that the quota would have refused went ahead; the quota that would have held the run is
/// the footprint peak, 920 MiB (allocations 256 MiB, pool cache 64 MiB, context 600 MiB).
#[test]
fn observe_mode_sizes_the_quota_by_the_footprint() {
    check("footprint_observe");
}

/// A `dropped` line, plus fields and line types this reader does not know (a newer
/// writer's, within schema 1), which it must ignore.
#[test]
fn dropped_events_and_unknown_fields_and_line_types() {
    check("tolerance");
}

/// A member of group g, recorded with call stacks (`CUQUOTA_STACKS=8`; the module paths
/// edited to ones no machine has, so that no machine symbolises them): its `module` and
/// `stack` lines, two refusals naming the other member that held 600 MiB, and the group's
/// limit raised by `cuquota set` between them (a `limit` line).
#[test]
fn a_group_refusal_with_holders_a_limit_change_and_call_stacks() {
    check("group_stacks");
}
