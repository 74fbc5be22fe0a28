//! One rule groups refusals into back-off episodes (`cuquota_format::episodes`): the same
//! refusals, from a real client under the interposer, make the same episodes with the same
//! outcome in the log's outcome lines, in the trace's `backoff` lines and in
//! `cuquota report --json`. Every episode ends in exactly one outcome line.

use crate::common::*;
use serde_json::Value;

const G: u64 = GIB;

/// How an episode ended, as all three say it.
#[derive(Clone, Debug, PartialEq)]
enum End {
    /// Got this size (backed off or retried).
    Got(u64),
    /// Gave up; the report's reason.
    GaveUp(&'static str),
}

/// One episode as the three see it.
#[derive(Debug)]
struct Seen {
    log: String,
    trace: Vec<u64>,
    trace_result: String,
    report_refused: Vec<u64>,
    report_end: End,
    report_outcome: String,
}

/// Runs `ops` under `env` (and a trace), and returns every episode, checking that the log,
/// the trace and the report count the same number.
fn episodes_of(ops: &str, env: &[(&str, &str)], rcs: &[u64]) -> (Vec<Seen>, Output) {
    let dir = scratch_dir("episodes");
    let path = dir.join("t.jsonl");
    let mut env = env.to_vec();
    env.push(("CUQUOTA_TRACE", path.to_str().unwrap()));
    let out = run(Client::Linked, ops, &env);
    out.check_rcs(rcs);
    let said: Vec<String> = out
        .cuquota_lines()
        .into_iter()
        .filter(|l| l.contains(": the caller "))
        .map(|l| timeless(l.split_once("]: ").unwrap().1))
        .collect();

    let text = std::fs::read_to_string(&path).unwrap();
    let backoffs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["type"] == "backoff")
        .collect();

    let report = cuquota_ok(&["report", "--json", path.to_str().unwrap()], None);
    let json: Value = serde_json::from_slice(&report.stdout).unwrap();
    let episodes = &json["processes"][0]["backoff_episodes"];
    let shown = episodes["shown"].as_array().unwrap();
    assert_eq!(episodes["count"].as_u64().unwrap() as usize, shown.len());
    assert_eq!(
        said.len(),
        shown.len(),
        "one outcome line an episode:\n{out}"
    );
    assert_eq!(
        backoffs.len(),
        shown.len(),
        "one backoff line an episode:\n{text}"
    );
    let seen = said
        .into_iter()
        .zip(backoffs)
        .zip(shown)
        .map(|((log, b), r)| Seen {
            log,
            trace: sizes(&b["sizes"]),
            trace_result: b["result"].as_str().unwrap().to_string(),
            report_refused: sizes(&r["refused"]),
            report_end: match r["got"].as_u64() {
                Some(got) => End::Got(got),
                None => End::GaveUp(match r["gave_up"].as_str().unwrap() {
                    "gap" => "gap",
                    "larger" => "larger",
                    "other device" => "other device",
                    "end" => "end",
                    other => panic!("gave_up {other}"),
                }),
            },
            report_outcome: r["outcome"].as_str().unwrap().to_string(),
        })
        .collect();
    (seen, out)
}

/// The log line with its time (`12 µs later`, `1.3 ms later`) replaced by `T later`.
pub fn timeless(line: &str) -> String {
    match line.find(" later") {
        None => line.to_string(),
        Some(end) => {
            let before = &line[..end];
            let unit = before.rfind(' ').unwrap();
            let number = before[..unit].rfind(' ').unwrap();
            format!("{} T{}", &line[..number], &line[end..])
        }
    }
}

fn sizes(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect()
}

fn count(n: usize) -> String {
    format!("{n} refusal{}", if n == 1 { "" } else { "s" })
}

fn steps(refused: &[u64]) -> String {
    refused
        .iter()
        .map(|&b| h(b))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// The outcome line (timeless) of a back-off episode of these sizes.
pub fn backed_off_line(refused: &[u64], got: u64) -> String {
    format!(
        "GPU 0: the caller backed off {} ({}) and got {} T later; it keeps running \
         (likely an allocator shrinking its request, e.g. TensorFlow allow_growth)",
        steps(refused),
        count(refused.len()),
        h(got)
    )
}

pub fn retried_line(bytes: u64, refusals: usize) -> String {
    format!(
        "GPU 0: the caller was refused {} ({}); the next request of that size, T later, fit; \
         it keeps running (likely an allocator that frees its cache and retries, e.g. PyTorch \
         or CuPy)",
        h(bytes),
        count(refusals)
    )
}

pub fn gave_up_line(refused: &[u64], why: &str) -> String {
    let one_size = refused.windows(2).all(|w| w[0] == w[1]);
    let words = if one_size {
        format!("was refused {}", h(refused[0]))
    } else {
        format!("backed off {}", steps(refused))
    };
    format!(
        "GPU 0: the caller {words} ({}) and gave up; it got CUDA_ERROR_OUT_OF_MEMORY ({why})",
        count(refused.len())
    )
}

/// The same episode three ways: the report's refused sizes and end, the trace's sizes
/// (refused, then what fit) and the log line.
fn agree(seen: &Seen, refused: &[u64], end: End, line: &str) {
    assert_eq!(seen.report_refused, refused, "{seen:?}");
    assert_eq!(seen.report_end, end, "{seen:?}");
    let mut trace = refused.to_vec();
    match end {
        End::Got(got) => {
            trace.push(got);
            assert_eq!(seen.trace_result, "CUDA_SUCCESS");
        }
        End::GaveUp(_) => {
            assert_eq!(seen.trace_result, "CUDA_ERROR_OUT_OF_MEMORY");
            assert_eq!(seen.report_outcome, "gave up");
        }
    }
    assert_eq!(seen.trace, trace, "{seen:?}");
    assert_eq!(seen.log, line);
}

#[test]
fn a_shrinking_request_backs_off() {
    let (seen, _) = episodes_of(
        "init alloc:768M alloc:1G alloc:512M alloc:256M",
        &[("CUQUOTA_LIMIT", "1GiB")],
        &[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0],
    );
    let refused = [G, 512 * MIB];
    agree(
        &seen[0],
        &refused,
        End::Got(256 * MIB),
        &backed_off_line(&refused, 256 * MIB),
    );
    assert_eq!(seen[0].report_outcome, "backed off");
}

/// A free in between does not end it: PyTorch and CuPy free their caches, then retry.
#[test]
fn a_retry_of_the_same_size_after_a_free() {
    let (seen, _) = episodes_of(
        "init alloc:768M alloc:512M alloc:512M free:0 alloc:512M",
        &[("CUQUOTA_LIMIT", "1GiB")],
        &[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0, 0],
    );
    let refused = [512 * MIB; 2];
    agree(
        &seen[0],
        &refused,
        End::Got(512 * MIB),
        &retried_line(512 * MIB, 2),
    );
    assert_eq!(seen[0].report_outcome, "retried");
}

/// A larger request is not a back-off: the episode ends given up, and the larger refusal
/// starts the next one (the log and the report once grouped these differently).
#[test]
fn a_larger_request_ends_the_episode_and_starts_the_next() {
    let (seen, out) = episodes_of(
        "init alloc:4G alloc:8G alloc:1G",
        &[("CUQUOTA_LIMIT", "2GiB")],
        &[0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0],
    );
    agree(
        &seen[0],
        &[4 * G],
        End::GaveUp("larger"),
        &gave_up_line(&[4 * G], "its next request, 8.00 GiB, was larger"),
    );
    agree(
        &seen[1],
        &[8 * G],
        End::Got(G),
        &backed_off_line(&[8 * G], G),
    );
    // Each episode's first refusal has its line.
    assert_eq!(out.logs_starting("GPU 0 refused").len(), 2, "{out}");
}

/// The case: a program that gave up and, later than the gap, asked for that size
/// again for another reason has not "retried".
#[test]
fn a_request_after_the_gap_is_not_a_retry() {
    let (seen, _) = episodes_of(
        "init alloc:768M alloc:512M free:0 sleep:300 alloc:512M",
        &[("CUQUOTA_LIMIT", "1GiB")],
        &[0, 0, OUT_OF_MEMORY, 0, 0],
    );
    agree(
        &seen[0],
        &[512 * MIB],
        End::GaveUp("gap"),
        &gave_up_line(
            &[512 * MIB],
            "no request of 512.00 MiB or less followed within 200 ms",
        ),
    );
}

/// An episode open at exit ends there ("end"), or, on a machine so slow that the gap passed
/// before the exit handler ran, as the gap ("gap"): both are given up.
fn gave_up_at_exit(seen: &Seen, refused: &[u64]) {
    let (why, words) = if seen.report_end == End::GaveUp("gap") {
        let last = h(*refused.last().unwrap());
        (
            "gap",
            format!("no request of {last} or less followed within 200 ms"),
        )
    } else {
        ("end", "the process ended before it asked again".to_string())
    };
    agree(
        seen,
        refused,
        End::GaveUp(why),
        &gave_up_line(refused, &words),
    );
}

/// A caller that gives up and exits: its outcome line is written at exit, before the
/// summary, with the answer it got.
#[test]
fn giving_up_gets_its_line_at_exit() {
    let (seen, out) = episodes_of(
        "init alloc:768M alloc:1G alloc:768M alloc:512M",
        &[("CUQUOTA_LIMIT", "1GiB")],
        &[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, OUT_OF_MEMORY],
    );
    gave_up_at_exit(&seen[0], &[G, 768 * MIB, 512 * MIB]);
    let lines = out.cuquota_lines();
    let outcome = lines.iter().position(|l| l.contains("gave up")).unwrap();
    let summary = lines.iter().position(|l| l.contains("summary:")).unwrap();
    assert!(outcome < summary, "{out}");
}

/// Two threads, each refused on its own: two episodes, each with its own outcome.
#[test]
fn episodes_are_per_thread() {
    let (seen, _) = episodes_of(
        "init alloc:768M tc-alloc:512M alloc:512M",
        &[("CUQUOTA_LIMIT", "1GiB")],
        &[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY],
    );
    assert_eq!(seen.len(), 2);
    for s in &seen {
        gave_up_at_exit(s, &[512 * MIB]);
    }
}

/// An episode whose gap passes while the program makes no CUDA call ends then, on the
/// watcher thread: its outcome line comes before what the program prints after its sleep
/// (stdout and stderr in one pipe, in the order written), with or without a trace; the
/// trace's `backoff` line comes before the next call's line, 200 ms after the refusal.
/// Here the refused thread is not the main one, and it is gone by then.
#[test]
fn an_episode_ends_when_its_gap_passes() {
    for traced in [false, true] {
        let dir = scratch_dir("episodes-gap");
        let path = dir.join("t.jsonl");
        let mut run = Run::client(Client::Linked)
            .ops("init alloc:768M tc-alloc:512M sleep:1000 alloc:128M info")
            .env("CUQUOTA_LIMIT", "1GiB")
            .merged();
        if traced {
            run = run.env("CUQUOTA_TRACE", path.to_str().unwrap());
        }
        let out = run.run();
        out.check_exit(0);
        out.check_rcs(&[0, 0, OUT_OF_MEMORY, 0, 0]);
        let prefix = out.prefix();
        let lines: Vec<&str> = out.stdout.lines().collect();
        let at = |want: &str| {
            let found: Vec<usize> = (0..lines.len()).filter(|&i| lines[i] == want).collect();
            assert_eq!(found.len(), 1, "once: {want}\n{}", out.stdout);
            found[0]
        };
        let refused = at(&format!(
            "{prefix}GPU 0 refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: quota \
             1.00 GiB, in use 768.00 MiB, 256.00 MiB left"
        ));
        let outcome = at(&format!(
            "{prefix}{}",
            gave_up_line(
                &[512 * MIB],
                "no request of 512.00 MiB or less followed within 200 ms"
            )
        ));
        let slept = at("sleep 1000");
        assert!(refused < outcome && outcome < slept, "{}", out.stdout);
        if !traced {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let all: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let kinds: Vec<&str> = all.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["header", "alloc", "refused", "backoff", "alloc", "meminfo", "summary"],
            "ended before the 128M allocation:\n{text}"
        );
        assert_eq!(all[3]["sizes"], serde_json::json!([512 * MIB]));
        let after = all[3]["t_ns"].as_u64().unwrap() - all[2]["t_ns"].as_u64().unwrap();
        assert!(
            after >= 199_000_000,
            "{after} ns after the refusal:\n{text}"
        );
    }
}
