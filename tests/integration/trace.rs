//! `CUQUOTA_TRACE`: traces of real processes under the interposer and the shim,
//! parsed back line by line and checked against what the workload did.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Every line of a trace, parsed; panics (naming the line) on one that is not JSON.
fn lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(text.ends_with('\n'), "{}: a torn last line", path.display());
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}:{}: {e}: {l}", path.display(), i + 1))
        })
        .collect()
}

fn of_type<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

fn hex(ptr: u64) -> String {
    format!("{ptr:#x}")
}

fn only_file(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.into_iter().next().unwrap()
}

#[test]
fn a_workload_is_traced_with_exact_numbers() {
    let dir = scratch_dir("trace-exact");
    let template = format!("{}/t-%p-%r.jsonl", dir.display());
    let out = run(
        Client::Linked,
        "init alloc:1G alloc:2G alloc:4G alloc:512M free:0 info",
        &[
            ("CUQUOTA_LIMIT", "4GiB"),
            ("CUQUOTA_TRACE", &template),
            ("RANK", "3"),
        ],
    );
    out.check_rcs(&[0, 0, 0, OUT_OF_MEMORY, 0, 0, 0]);
    let ptr = |i| out.value(i, "alloc", "ptr");
    let path = dir.join(format!("t-{}-3.jsonl", out.pid));
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    let all = lines(&path);

    let header = &all[0];
    assert_eq!(header["type"], "header");
    assert_eq!(header["schema"], 1);
    assert_eq!(header["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(header["pid"], out.pid);
    assert_eq!(header["rank"], 3);
    assert_eq!(header["mode"], "enforce");
    assert!(header["argv"][0].as_str().unwrap().ends_with("linked"));
    assert_eq!(header["argv"][1], "init");
    assert!(header["start_unix_ns"].as_u64().unwrap() > 1_600_000_000_000_000_000);
    let dev0 = &header["devices"][0];
    assert_eq!(dev0["ordinal"], 0);
    assert_eq!(dev0["total"], DEVICE_BYTES);
    assert_eq!(dev0["quota"], 4 * GIB);

    let events = &all[1..all.len() - 1];
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["alloc", "alloc", "refused", "alloc", "backoff", "free", "meminfo"]
    );
    let expect = |e: &Value, api: &str, ptr: String, bytes: u64, result: &str, in_use: u64| {
        assert_eq!(e["dev"], 0, "{e}");
        assert_eq!(e["api"], api, "{e}");
        assert_eq!(e["ptr"], ptr.as_str(), "{e}");
        assert_eq!(e["bytes"], bytes, "{e}");
        assert_eq!(e["result"], result, "{e}");
        assert_eq!(e["in_use"], in_use, "{e}");
    };
    let ok = "CUDA_SUCCESS";
    expect(&events[0], "cuMemAlloc_v2", hex(ptr(1)), GIB, ok, GIB);
    expect(
        &events[1],
        "cuMemAlloc_v2",
        hex(ptr(2)),
        2 * GIB,
        ok,
        3 * GIB,
    );
    let oom = "CUDA_ERROR_OUT_OF_MEMORY";
    expect(&events[2], "cuMemAlloc_v2", hex(0), 4 * GIB, oom, 3 * GIB);
    assert_eq!(events[2]["reason"], "quota");
    let got = 512 * MIB;
    expect(
        &events[3],
        "cuMemAlloc_v2",
        hex(ptr(4)),
        got,
        ok,
        3 * GIB + got,
    );
    assert_eq!(events[4]["sizes"], serde_json::json!([4 * GIB, got]));
    expect(
        &events[5],
        "cuMemFree_v2",
        hex(ptr(1)),
        GIB,
        ok,
        2 * GIB + got,
    );
    let info = &events[6];
    assert_eq!(info["api"], "cuMemGetInfo_v2");
    assert_eq!(info["told_total"], 4 * GIB);
    assert_eq!(info["told_free"], 4 * GIB - (2 * GIB + got));
    assert_eq!(info["real_total"], DEVICE_BYTES);
    assert_eq!(info["real_free"], DEVICE_BYTES - (2 * GIB + got));
    out.check(6, "info", &[("free", 4 * GIB - (2 * GIB + got))]);
    let tid = &events[0]["tid"];
    assert!(events.iter().all(|e| e["tid"] == *tid));
    let times: Vec<u64> = events.iter().map(|e| e["t_ns"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    let summary = all.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["end"], "exit");
    assert_eq!(summary["events"], 7);
    assert_eq!(summary["dropped"], 0);
    let d = &summary["devices"][0];
    assert_eq!(d["dev"], 0);
    assert_eq!(d["quota"], 4 * GIB);
    assert_eq!(d["peak"], 3 * GIB + got);
    assert_eq!(d["peak_t_ns"], events[3]["t_ns"]);
    assert_eq!(d["in_use"], 2 * GIB + got);
    assert_eq!(d["allocs"], 3);
    assert_eq!(d["frees"], 1);
    assert_eq!(d["refusals"], 1);
    assert_eq!(d["alloc_bytes"], 3 * GIB + got);
    assert_eq!(d["live"], 2);
    assert_eq!(d["live_bytes"], 2 * GIB + got);
}

#[test]
fn every_event_of_eight_threads_is_there() {
    let dir = scratch_dir("trace-threads");
    let template = format!("{}/t.jsonl", dir.display());
    let out = run(
        Client::Linked,
        "init threads:8:2000:4M",
        &[("CUQUOTA_LIMIT", "64MiB"), ("CUQUOTA_TRACE", &template)],
    );
    out.check_exit(0);
    let t = out.check(1, "threads", &[("other", 0)]);
    let (ok, oom) = (t.num("ok").unwrap(), t.num("oom").unwrap());
    let all = lines(&only_file(&dir));
    assert_eq!(of_type(&all, "alloc").len() as u64, ok);
    assert_eq!(of_type(&all, "free").len() as u64, ok);
    assert_eq!(of_type(&all, "refused").len() as u64, oom);
    let max_in_use = all.iter().filter_map(|l| l["in_use"].as_u64()).max();
    assert!(max_in_use.unwrap() <= 64 * MIB);
    // Every thread makes 2000 calls, each an alloc or a refused event with its tid. (Allocs
    // alone need not name all eight: on a loaded machine the threads that finish first hold
    // their last 16 MiB each until all are done, and a late thread may be refused every time.)
    let mut tids: Vec<u64> = of_type(&all, "alloc")
        .iter()
        .chain(of_type(&all, "refused").iter())
        .map(|e| e["tid"].as_u64().unwrap())
        .collect();
    tids.sort_unstable();
    tids.dedup();
    assert_eq!(tids.len(), 8, "one tid per thread");
    let summary = all.last().unwrap();
    assert_eq!(summary["dropped"], 0);
    let d = &summary["devices"][0];
    assert_eq!(
        (d["allocs"].as_u64(), d["frees"].as_u64()),
        (Some(ok), Some(ok))
    );
    assert_eq!(d["live"], 0);
    assert_eq!(d["in_use"], 0);
}

/// The one test that relies on timing: the writer drains every 50 ms, so what was recorded
/// 250 ms before a SIGKILL is on disk, in whole lines.
#[test]
fn sigkill_leaves_a_readable_trace() {
    let dir = scratch_dir("trace-kill");
    let template = format!("{}/t.jsonl", dir.display());
    let out = run(
        Client::Linked,
        "init alloc:1M alloc:2M alloc:3M sleep:250 kill",
        &[("CUQUOTA_TRACE", &template)],
    );
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGKILL)
    );
    let path = only_file(&dir);
    let all = lines(&path);
    assert_eq!(all[0]["type"], "header");
    let bytes: Vec<u64> = of_type(&all, "alloc")
        .iter()
        .map(|e| e["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(bytes, [MIB, 2 * MIB, 3 * MIB]);
    assert!(of_type(&all, "summary").is_empty());

    let report = cuquota_ok(&["report", path.to_str().unwrap()], None);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("the process is still running, or was killed"),
        "{text}"
    );
    assert!(text.contains("Live at the end of the trace: 3 allocations, 6.00 MiB"));
}

#[test]
fn sigterm_flushes_and_summarises_before_dying() {
    let art = artifacts();
    let dir = scratch_dir("trace-term");
    let path = dir.join("t.jsonl");
    let child = Command::new(Client::Linked.path())
        .args(["init", "alloc:1M", "sleep:60000"])
        .env_clear()
        .env("LD_LIBRARY_PATH", &art.shim_dir)
        .env("LD_PRELOAD", &art.interposer)
        .env("CUQUOTA_TRACE", &path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (without a time bound on the outcome) for the allocation to be on disk.
    let deadline = Instant::now() + TIMEOUT;
    while !std::fs::read_to_string(&path).is_ok_and(|t| t.contains("\"alloc\"")) {
        assert!(Instant::now() < deadline, "the trace never got its event");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: signals our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGTERM),
        "the default action still runs"
    );
    let all = lines(&path);
    let summary = all.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["end"], "SIGTERM");
    assert_eq!(summary["devices"][0]["live_bytes"], MIB);
    // The summary line went to stderr first (the exit handlers do not run on SIGTERM).
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("GPU 0 summary: peak 1.00 MiB (1048576 bytes), no quota, 1 allocation"),
        "{stderr}"
    );
}

#[test]
fn an_unwritable_path_warns_once_and_the_quota_still_holds() {
    let path = "/nonexistent-cuquota-dir/t.jsonl";
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M alloc:256M free:0 info",
        &[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_TRACE", path)],
    );
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, 0, 0, 0]);
    let warnings = out.logs_starting("trace:");
    assert_eq!(warnings.len(), 1, "{out}");
    assert!(warnings[0].contains(path), "{out}");
    assert!(warnings[0].contains("No such file or directory"), "{out}");
    assert_eq!(
        out.logs_starting("GPU 0 refused 512.00 MiB").len(),
        1,
        "{out}"
    );
    assert_eq!(
        out.logs_starting("GPU 0: the caller backed off").len(),
        1,
        "{out}"
    );
    assert_eq!(out.logs_starting("GPU 0 summary:").len(), 1, "{out}");
}

#[test]
fn a_full_disk_warns_once_and_loses_nothing_else() {
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M alloc:256M free:0 info",
        &[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_TRACE", "/dev/full")],
    );
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, 0, 0, 0]);
    out.check(5, "info", &[("free", GIB - 256 * MIB), ("total", GIB)]);
    let warnings = out.logs_starting("trace:");
    assert_eq!(warnings.len(), 1, "{out}");
    assert!(warnings[0].contains("No space left on device"), "{out}");
    assert_eq!(
        out.logs_starting("GPU 0 refused 512.00 MiB").len(),
        1,
        "{out}"
    );
    assert_eq!(out.logs_starting("GPU 0 summary:").len(), 1, "{out}");
}

#[test]
fn pid_templates_give_distinct_files_and_nothing_is_overwritten() {
    let dir = scratch_dir("trace-pid");
    let template = format!("{}/t-%p.jsonl", dir.display());
    let a = run(
        Client::Dlsym,
        "init alloc:1M",
        &[("CUQUOTA_TRACE", &template)],
    );
    let b = run(
        Client::Dlsym,
        "init alloc:2M",
        &[("CUQUOTA_TRACE", &template)],
    );
    assert_ne!(a.pid, b.pid);
    for (out, bytes) in [(&a, MIB), (&b, 2 * MIB)] {
        let all = lines(&dir.join(format!("t-{}.jsonl", out.pid)));
        assert_eq!(all[0]["pid"], out.pid);
        assert_eq!(of_type(&all, "alloc")[0]["bytes"], bytes);
    }

    // The same name twice: the second process writes t.jsonl.1, the first file is kept.
    let fixed = dir.join("same.jsonl");
    let fixed_s = fixed.to_str().unwrap();
    let first = run(
        Client::Dlsym,
        "init alloc:1M",
        &[("CUQUOTA_TRACE", fixed_s)],
    );
    let before = std::fs::read(&fixed).unwrap();
    let second = run(
        Client::Dlsym,
        "init alloc:2M",
        &[("CUQUOTA_TRACE", fixed_s)],
    );
    assert_eq!(std::fs::read(&fixed).unwrap(), before);
    assert_eq!(lines(&fixed)[0]["pid"], first.pid);
    let suffixed = dir.join("same.jsonl.1");
    assert_eq!(lines(&suffixed)[0]["pid"], second.pid);

    // A symbolic link at the name is not followed.
    let victim = dir.join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let link = dir.join("link.jsonl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    run(
        Client::Dlsym,
        "init alloc:1M",
        &[("CUQUOTA_TRACE", link.to_str().unwrap())],
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert!(dir.join("link.jsonl.1").is_file());
}

#[test]
fn no_cuda_no_trace_file() {
    let dir = scratch_dir("trace-none");
    let template = format!("{}/t-%p.jsonl", dir.display());
    // Device queries only: no memory event, so no trace is started.
    let out = run(
        Client::Linked,
        "init count",
        &[("CUQUOTA_TRACE", &template)],
    );
    out.check_exit(0);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}
