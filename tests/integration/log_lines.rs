//! The exact lines cuquota writes: refusals, observe mode, the caller's reaction, driver
//! refusals, exit summaries, configuration errors, and where the lines go.

use crate::common::*;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "1GiB");

#[test]
fn human_size_helper() {
    assert_eq!(h(0), "0 B");
    assert_eq!(h(1023), "1023 B");
    assert_eq!(h(1024), "1.00 KiB");
    assert_eq!(h(512 * MIB), "512.00 MiB");
    assert_eq!(h(4 * GIB), "4.00 GiB");
    assert_eq!(h(3_131_031_158), "2.92 GiB");
    assert_eq!(h(2 << 40), "2.00 TiB");
}

#[test]
fn quota_refusal() {
    let out = run(Client::Linked, "init alloc:768M alloc:512M", &[LIMIT]);
    out.check_rcs(&[0, 0, OUT_OF_MEMORY]);
    out.check_log(
        "GPU 0 refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: \
         quota 1.00 GiB, in use 768.00 MiB, 256.00 MiB left",
    );
}

#[test]
fn observe_mode_allows_and_says_so() {
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M",
        &[LIMIT, ("CUQUOTA_MODE", "observe")],
    );
    out.check_rcs(&[0, 0, 0]);
    out.check_log(
        "GPU 0 would refuse 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: \
         quota 1.00 GiB, in use 768.00 MiB, 256.00 MiB left (observe mode: allowed)",
    );
    assert!(out.logs_starting("GPU 0 refused").is_empty(), "{out}");
}

#[test]
fn a_caller_that_backs_off() {
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:1G alloc:512M alloc:256M",
        &[LIMIT],
    );
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0]);
    check_outcome(
        &out,
        "GPU 0: the caller backed off 1.00 GiB → 512.00 MiB (2 refusals) and got 256.00 MiB \
         T later; it keeps running (likely an allocator shrinking its request, e.g. TensorFlow \
         allow_growth)",
    );
}

/// Asserts stderr has this outcome line once (its time replaced by `T later`).
fn check_outcome(out: &Output, want: &str) {
    let lines: Vec<String> = out
        .logs_starting("GPU 0: the caller ")
        .into_iter()
        .map(|l| crate::episodes::timeless(l.split_once("]: ").unwrap().1))
        .collect();
    assert_eq!(lines, [want], "{out}");
}

#[test]
fn a_caller_that_retries_the_same_size() {
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M free:0 alloc:512M",
        &[LIMIT],
    );
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, 0, 0]);
    check_outcome(
        &out,
        "GPU 0: the caller was refused 512.00 MiB (1 refusal); the next request of that size, \
         T later, fit; it keeps running (likely an allocator that frees its cache and retries, \
         e.g. PyTorch or CuPy)",
    );

    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M alloc:512M free:0 alloc:512M",
        &[LIMIT],
    );
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0, 0]);
    check_outcome(
        &out,
        "GPU 0: the caller was refused 512.00 MiB (2 refusals); the next request of that size, \
         T later, fit; it keeps running (likely an allocator that frees its cache and retries, \
         e.g. PyTorch or CuPy)",
    );
}

/// At the default level an episode prints its first refusal (exact bytes, for grep) and its
/// outcome; the refusals in between are only counted. `CUQUOTA_LOG_LEVEL=debug` prints all.
#[test]
fn an_episode_prints_its_first_refusal_and_its_outcome() {
    let ops = "init alloc:768M alloc:1G alloc:768M alloc:512M alloc:384M";
    let rcs = [
        0,
        0,
        OUT_OF_MEMORY,
        OUT_OF_MEMORY,
        OUT_OF_MEMORY,
        OUT_OF_MEMORY,
    ];
    let out = run(Client::Linked, ops, &[LIMIT]);
    out.check_rcs(&rcs);
    let refusals = out.logs_starting("GPU 0 refused");
    assert_eq!(refusals.len(), 1, "{out}");
    out.check_log(
        "GPU 0 refused 1.00 GiB (1073741824 bytes) via cuMemAlloc_v2: quota 1.00 GiB, \
         in use 768.00 MiB, 256.00 MiB left",
    );
    let outcome = out.logs_starting("GPU 0: the caller backed off 1.00 GiB → 768.00 MiB → 512.00 MiB → 384.00 MiB (4 refusals) and gave up; it got CUDA_ERROR_OUT_OF_MEMORY (");
    assert_eq!(outcome.len(), 1, "{out}");
    // Nothing else but the summary.
    assert_eq!(out.cuquota_lines().len(), 3, "{out}");

    let out = run(
        Client::Linked,
        ops,
        &[LIMIT, ("CUQUOTA_LOG_LEVEL", "debug")],
    );
    out.check_rcs(&rcs);
    assert_eq!(out.logs_starting("GPU 0 refused").len(), 4, "{out}");
    out.check_log(
        "GPU 0 refused 384.00 MiB (402653184 bytes) via cuMemAlloc_v2: quota 1.00 GiB, \
         in use 768.00 MiB, 256.00 MiB left",
    );
    assert_eq!(
        out.logs_starting("GPU 0: the caller backed off").len(),
        1,
        "{out}"
    );
}

/// Observe mode: each would-be refusal is in the trace as a `refused` line marked observed,
/// and the log summary, the trace summary and the report count the same; the report says
/// which quota would have held the run.
#[test]
fn observe_mode_traces_would_be_refusals() {
    let dir = scratch_dir("observe");
    let path = dir.join("t.jsonl");
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M alloc:256M",
        &[
            LIMIT,
            ("CUQUOTA_MODE", "observe"),
            ("CUQUOTA_TRACE", path.to_str().unwrap()),
        ],
    );
    out.check_rcs(&[0, 0, 0, 0]);
    out.check_log(
        "GPU 0 summary: peak 1.50 GiB (1610612736 bytes) of quota 1.00 GiB, 3 allocations, \
         2 refusals, 3 live at exit (1.50 GiB)",
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let refused: Vec<(u64, u64)> = lines
        .iter()
        .filter(|l| l["type"] == "refused")
        .map(|l| {
            assert_eq!(
                (&l["observed"], &l["reason"]),
                (&true.into(), &"quota".into())
            );
            (l["bytes"].as_u64().unwrap(), l["in_use"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(refused, [(512 * MIB, 768 * MIB), (256 * MIB, 1280 * MIB)]);
    assert!(
        lines.iter().all(|l| l["type"] != "backoff"),
        "no episodes: {text}"
    );
    let summary = lines.last().unwrap();
    assert_eq!(summary["devices"][0]["refusals"], 2, "{text}");

    let report = std::process::Command::new(&artifacts().cli)
        .arg("report")
        .arg(&path)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    for want in [
        "3 allocations (1.50 GiB in all), 0 frees, 2 refusals (2 by quota, 0 by the driver; 2 observed, allowed), 3 live (1.50 GiB)",
        "     observe mode: a quota of 1.50 GiB (1610612736 bytes) or more would have held this run (its peak)",
        "     2 requests would have been refused by the quota of 1.00 GiB:",
        "         512.00 MiB  at ",
    ] {
        assert!(report.contains(want), "missing {want:?} in\n{report}");
    }
    assert!(!report.contains("Back-off episodes"), "{report}");

    // The plot marks them, and says what they are.
    let svg = dir.join("t.svg");
    cuquota_ok(
        &["plot", path.to_str().unwrap(), "-o", svg.to_str().unwrap()],
        None,
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("· quota 1.00 GiB · 2 would be refused (observe mode)</text>"),
        "{svg}"
    );
}

#[test]
fn driver_refusal_without_a_quota() {
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M",
        &[("CUDA_SHIM_MEMORY", "1GiB")],
    );
    out.check_rcs(&[0, 0, OUT_OF_MEMORY]);
    out.check_log(
        "GPU 0: the driver refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: \
         CUDA_ERROR_OUT_OF_MEMORY, driver free 256.00 MiB; in use 768.00 MiB, no quota",
    );
}

#[test]
fn driver_refusal_under_a_quota_above_the_device() {
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M",
        &[("CUDA_SHIM_MEMORY", "1GiB"), ("CUQUOTA_LIMIT", "2GiB")],
    );
    out.check_rcs(&[0, 0, OUT_OF_MEMORY]);
    out.check_log(
        "GPU 0: the driver refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: \
         CUDA_ERROR_OUT_OF_MEMORY, driver free 256.00 MiB; quota 2.00 GiB, in use 768.00 MiB",
    );
}

#[test]
fn exit_summary_with_a_quota() {
    // 256M + 512M fit; 512M and 300M are refused (256 MiB left); slot 0 is freed.
    let out = run(
        Client::Linked,
        "init alloc:256M alloc:512M alloc:512M alloc:300M free:0",
        &[LIMIT],
    );
    out.check_exit(0);
    out.check_rcs(&[0, 0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0]);
    out.check_log(
        "GPU 0 summary: peak 768.00 MiB (805306368 bytes) of quota 1.00 GiB, \
         2 allocations, 2 refusals, 1 live at exit (512.00 MiB)",
    );
    assert_eq!(out.logs_starting("GPU 0 summary:").len(), 1, "{out}");
}

#[test]
fn exit_summary_without_a_quota_one_per_device() {
    let out = run(
        Client::Linked,
        "init alloc:256M alloc:256M free:1 dev:1 alloc:2M alloc:2M",
        &[("CUDA_SHIM_DEVICES", "2")],
    );
    out.check_exit(0);
    out.check_rcs(&[0, 0, 0, 0, 0, 0, 0]);
    out.check_log(
        "GPU 0 summary: peak 512.00 MiB (536870912 bytes), no quota, \
         2 allocations, 0 refusals, 1 live at exit (256.00 MiB)",
    );
    out.check_log(
        "GPU 1 summary: peak 4.00 MiB (4194304 bytes), no quota, \
         2 allocations, 0 refusals, 2 live at exit (4.00 MiB)",
    );
}

#[test]
fn exit_summary_when_the_program_calls_exit() {
    let out = run(Client::Linked, "init alloc:1M alloc:1M exit:3", &[LIMIT]);
    out.check_exit(3);
    out.check_log(
        "GPU 0 summary: peak 2.00 MiB (2097152 bytes) of quota 1.00 GiB, \
         2 allocations, 0 refusals, 2 live at exit (2.00 MiB)",
    );
}

#[test]
fn a_bad_limit_fails_cuinit_with_one_line() {
    for value in ["6GBB", "-1", "0x", "110%", "0:", "", "abc"] {
        let out = run(
            Client::Linked,
            "init info alloc:1M",
            &[("CUQUOTA_LIMIT", value)],
        );
        out.check_exit(0);
        out.check_rcs(&[INVALID_VALUE, INVALID_VALUE, INVALID_VALUE]);
        let lines = out.cuquota_lines();
        assert_eq!(lines.len(), 1, "CUQUOTA_LIMIT={value:?}:\n{out}");
        let start = format!("{}CUQUOTA_LIMIT=\"{value}\" is not valid:", out.prefix());
        assert!(
            lines[0].starts_with(&start),
            "CUQUOTA_LIMIT={value:?}:\n{out}"
        );
        assert!(lines[0].contains("6GiB"), "no example in:\n{out}");
    }
}

#[test]
fn log_off_is_silent() {
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M",
        &[LIMIT, ("CUQUOTA_LOG", "off")],
    );
    out.check_rcs(&[0, 0, OUT_OF_MEMORY]);
    assert!(out.cuquota_lines().is_empty(), "{out}");
}

#[test]
fn log_to_a_file() {
    let dir = scratch_dir("log-file");
    let file = dir.join("cuquota.log");
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M",
        &[LIMIT, ("CUQUOTA_LOG", file.to_str().unwrap())],
    );
    out.check_rcs(&[0, 0, OUT_OF_MEMORY]);
    assert!(out.cuquota_lines().is_empty(), "{out}");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    let want = format!(
        "{}GPU 0 refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: \
         quota 1.00 GiB, in use 768.00 MiB, 256.00 MiB left",
        out.prefix()
    );
    assert!(text.lines().any(|l| l == want), "{want}\nnot in:\n{text}");
}

#[test]
fn a_log_file_that_cannot_be_written_falls_back_to_stderr_and_says_so_once() {
    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M alloc:512M",
        &[LIMIT, ("CUQUOTA_LOG", "/dev/full")],
    );
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY]);
    let lines = out.cuquota_lines();
    let notes: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("cannot write CUQUOTA_LOG file \"/dev/full\""))
        .collect();
    assert_eq!(notes.len(), 1, "{out}");
    let refusals = lines
        .iter()
        .filter(|l| l.contains(" refused 512.00 MiB"))
        .count();
    assert_eq!(refusals, 2, "no line is lost:\n{out}");
    assert!(lines.iter().any(|l| l.contains(" summary: ")), "{out}");
}

#[test]
fn info_level_prints_the_config_once() {
    let out = run(
        Client::Linked,
        "init info alloc:1M",
        &[LIMIT, ("CUQUOTA_LOG_LEVEL", "info")],
    );
    out.check_rcs(&[0, 0, 0]);
    let configs = out.logs_starting("config:");
    assert_eq!(configs.len(), 1, "{out}");
    assert_eq!(
        out.cuquota_lines()[0],
        configs[0],
        "config comes first:\n{out}"
    );
}

#[test]
fn a_process_that_never_touches_cuda_is_left_alone() {
    for (program, args, stdout) in [("/bin/true", "", ""), ("/bin/sh", "-c", "hi\n")] {
        let dir = scratch_dir("untouched");
        let log = dir.join("cuquota.log");
        for log_env in [None, Some(log.to_str().unwrap())] {
            let mut r = Run::program(program)
                .ops(args)
                .cwd(&dir)
                .envs(&[LIMIT, ("CUQUOTA_LOG_LEVEL", "info")]);
            if args == "-c" {
                r = r.arg("echo hi");
            }
            if let Some(path) = log_env {
                r = r.env("CUQUOTA_LOG", path);
            }
            let out = r.run();
            out.check_exit(0);
            assert_eq!(out.stdout, stdout, "{out}");
            assert!(out.stderr.is_empty(), "{out}");
            let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
            assert!(files.is_empty(), "files created: {files:?}\n{out}");
        }
    }
}

/// The demo: a TensorFlow-style allow_growth allocator on the 8 GiB shim under a
/// 6 GiB quota grows 2, 4, ... 2048 MiB (4094 MiB), is refused 4 GiB and shrinks by 9/10
/// until it fits the 2050 MiB left.
#[test]
fn bfc_growth_demo_backs_off_and_keeps_running() {
    let left = 6 * GIB - 4094 * MIB;
    let mut refused = Vec::new();
    let mut ask = 4 * GIB;
    while ask > left {
        refused.push(ask);
        ask = ask * 9 / 10;
    }
    let out = Run::client(Client::Bfc).env("CUQUOTA_LIMIT", "6GiB").run();
    out.check_exit(0);
    let said = format!(
        "bfc: region 12: asked 4.00 GiB, got {} after {} refusals",
        h(ask),
        refused.len()
    );
    assert!(out.stdout.lines().any(|l| l == said), "{said}\n{out}");
    assert!(
        out.stdout
            .contains("bfc: training: 5 steps with 64.00 MiB of scratch each, 5 ok, 0 refused"),
        "{out}"
    );
    let chain: Vec<String> = refused.iter().map(|&r| h(r)).collect();
    check_outcome(
        &out,
        &format!(
            "GPU 0: the caller backed off {} ({} refusals) and got {} T later; it keeps running \
             (likely an allocator shrinking its request, e.g. TensorFlow allow_growth)",
            chain.join(" → "),
            refused.len(),
            h(ask)
        ),
    );
    assert_eq!(out.logs_starting("GPU 0 refused").len(), 1, "{out}");
}
