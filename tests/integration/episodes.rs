//! One rule groups refusals into back-off episodes (`cuquota_format::episodes`): the same
//! refusals, from a real client under the interposer, make the same episode in the log's
//! back-off line, in the trace's `backoff` line and in `cuquota report --json`.

use crate::common::*;
use serde_json::Value;
use std::process::Command;

const G: u64 = GIB;

/// What each of the three says about the one episode of a run: the refused sizes in order
/// and the size that then fit.
struct Seen {
    log: String,
    trace: Vec<u64>,
    report_refused: Vec<u64>,
    report_got: u64,
}

fn episode_of(ops: &str, limit: &str, rcs: &[u64]) -> Seen {
    let dir = scratch_dir("episodes");
    let path = dir.join("t.jsonl");
    let out = run(
        Client::Linked,
        ops,
        &[
            ("CUQUOTA_LIMIT", limit),
            ("CUQUOTA_TRACE", path.to_str().unwrap()),
        ],
    );
    out.check_rcs(rcs);
    let said: Vec<&str> = out
        .cuquota_lines()
        .into_iter()
        .filter(|l| l.contains("the caller backed off") || l.contains("the caller retried"))
        .collect();
    assert_eq!(said.len(), 1, "one episode, one line:\n{out}");

    let text = std::fs::read_to_string(&path).unwrap();
    let backoffs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["type"] == "backoff")
        .collect();
    assert_eq!(backoffs.len(), 1, "{text}");
    let trace = sizes(&backoffs[0]["sizes"]);

    let report = Command::new(&artifacts().cli)
        .args(["report", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(report.status.success(), "{report:?}");
    let json: Value = serde_json::from_slice(&report.stdout).unwrap();
    let episodes = &json["processes"][0]["backoff_episodes"];
    assert_eq!(
        (&episodes["count"], &episodes["recovered"]),
        (&1.into(), &1.into())
    );
    let shown = &episodes["shown"][0];
    assert_eq!(shown["refused_elided"], 0);
    Seen {
        log: said[0].to_string(),
        trace,
        report_refused: sizes(&shown["refused"]),
        report_got: shown["got"].as_u64().unwrap(),
    }
}

fn sizes(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect()
}

/// The log line a back-off episode of these sizes gets.
fn backed_off_line(refused: &[u64], got: u64) -> String {
    let steps: Vec<String> = refused.iter().map(|&b| h(b)).collect();
    format!(
        "GPU 0: the caller backed off {} and got {}; it keeps running \
         (an allocator shrinking its request, e.g. TensorFlow allow_growth)",
        steps.join(" → "),
        h(got)
    )
}

/// The same episode three ways: the report's refused sizes and got, the trace's sizes
/// (refused, then got) and the log line made from them.
fn agree(seen: &Seen, refused: &[u64], got: u64) {
    assert_eq!(seen.report_refused, refused);
    assert_eq!(seen.report_got, got);
    let mut trace = refused.to_vec();
    trace.push(got);
    assert_eq!(seen.trace, trace);
    assert!(
        seen.log.ends_with(&backed_off_line(refused, got)),
        "{}",
        seen.log
    );
}

/// The case the log and the report once grouped differently: a larger request after a
/// refusal is part of the same episode (it used to start another one in the log only).
#[test]
fn a_larger_request_stays_in_the_episode() {
    let seen = episode_of(
        "init alloc:4G alloc:8G alloc:1G",
        "2GiB",
        &[0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0],
    );
    agree(&seen, &[4 * G, 8 * G], G);
}

#[test]
fn a_shrinking_request() {
    let seen = episode_of(
        "init alloc:768M alloc:1G alloc:512M alloc:256M",
        "1GiB",
        &[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0],
    );
    agree(&seen, &[G, 512 * MIB], 256 * MIB);
}

#[test]
fn a_retry_of_the_same_size() {
    let seen = episode_of(
        "init alloc:768M alloc:512M alloc:512M free:0 alloc:512M",
        "1GiB",
        &[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0, 0],
    );
    assert_eq!(seen.report_refused, [512 * MIB, 512 * MIB]);
    assert_eq!(seen.report_got, 512 * MIB);
    assert_eq!(seen.trace, [512 * MIB; 3]);
    assert!(
        seen.log.ends_with(
            "GPU 0: the caller retried 512.00 MiB after 2 refusals and got it; it keeps \
             running (an allocator that frees its cache and retries, e.g. PyTorch or CuPy)"
        ),
        "{}",
        seen.log
    );
}
