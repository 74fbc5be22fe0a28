//! A newcomer's first runs: what the README promises about a plain run, each with real
//! processes under LD_PRELOAD against the shim — the configuration line at `info` names the
//! trace where it will be, `cuquota plot` of a two-rank job names both traces, a process
//! ended by SIGTERM or SIGINT prints its summary (with a trace or without), a program's own
//! handler is left alone, and only a process that made a CUDA call has the watcher thread
//! and the handlers.

use crate::common::{
    artifacts, cuquota_ok, h, plot_title_path, scratch_dir, Client, Output, Run, MIB, OUT_OF_MEMORY,
};
use crate::episodes::gave_up_line;
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
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
    let path = |p: &Path| p.to_str().unwrap().to_string();
    cuquota_ok(&["plot", &path(&a), &path(&b), "-o", &path(&svg)], None);
    let clip = plot_title_path;
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
    let out = cuquota_ok(&["report", path.to_str().unwrap()], None);
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

/// The summary of GPU 0 under a 1 GiB quota with one allocation of `bytes` still live.
fn one_live(bytes: u64, refusals: u32) -> String {
    format!(
        "GPU 0 summary: peak {} ({bytes} bytes) of quota 1.00 GiB, 1 allocation, {refusals} \
         refusal{}, 1 live at exit ({})",
        h(bytes),
        if refusals == 1 { "" } else { "s" },
        h(bytes)
    )
}

/// cuquota's lines of this process, without their `cuquota[PID]: ` prefix.
fn said(out: &Output) -> Vec<String> {
    let prefix = out.prefix();
    out.stderr
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
        .collect()
}

/// The newcomer's case: `cuquota run --limit 1GiB prog` with no trace, the program ended by
/// SIGTERM (here it sends it itself) or SIGINT: the summary line is printed, and the signal
/// still ends the process (status 143 / 130 in a shell).
#[test]
fn cuquota_run_ended_by_sigterm_or_sigint_prints_its_summary() {
    let art = artifacts();
    let client = Client::Linked.path();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let out = Run::program(&art.cli)
            .no_preload()
            .env("CUQUOTA_LIB", art.interposer.to_str().unwrap())
            .ops("run --limit 1GiB --")
            .arg(client.to_str().unwrap())
            .ops(&format!("init alloc:1M signal:{sig}"))
            .run();
        assert_eq!(out.status.signal(), Some(sig), "{out}");
        out.check_rcs(&[0, 0]);
        assert_eq!(said(&out), [one_live(MIB, 0)], "{out}");
    }
}

/// SIGTERM with a back-off episode open: its outcome line (gave up) comes first, then the
/// summary, as at exit; with a trace, its `backoff` line is written before the summary line,
/// whose `end` is SIGTERM.
#[test]
fn sigterm_ends_the_open_episode_then_summarises_with_or_without_a_trace() {
    for traced in [false, true] {
        let dir = scratch_dir("sigterm-episode");
        let path = dir.join("t.jsonl");
        let mut run = Run::client(Client::Linked)
            .ops("init alloc:768M alloc:512M signal:15")
            .env("CUQUOTA_LIMIT", "1GiB");
        if traced {
            run = run.env("CUQUOTA_TRACE", path.to_str().unwrap());
        }
        let out = run.run();
        assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{out}");
        out.check_rcs(&[0, 0, OUT_OF_MEMORY]);
        let lines = said(&out);
        // The signal comes at once; on a machine so slow that 200 ms passed first, the
        // watcher ended the episode by its gap: gave up either way.
        let ended = [
            "the process ended before it asked again",
            "no request of 512.00 MiB or less followed within 200 ms",
        ]
        .map(|why| gave_up_line(&[512 * MIB], why));
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(
            lines[0],
            "GPU 0 refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: quota 1.00 GiB, \
             in use 768.00 MiB, 256.00 MiB left"
        );
        assert!(ended.contains(&lines[1]), "{out}");
        assert_eq!(lines[2], one_live(768 * MIB, 1));
        assert_eq!(path.exists(), traced);
        if traced {
            let text = std::fs::read_to_string(&path).unwrap();
            let all: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let kinds: Vec<&str> = all.iter().map(|l| l["type"].as_str().unwrap()).collect();
            assert_eq!(
                kinds,
                ["header", "alloc", "refused", "backoff", "summary"],
                "{text}"
            );
            assert_eq!(all[3]["sizes"], serde_json::json!([512 * MIB]));
            assert_eq!(all[3]["result"], "CUDA_ERROR_OUT_OF_MEMORY");
            assert_eq!(all[4]["end"], "SIGTERM");
        }
    }
}

/// A program's own SIGTERM handler is never replaced: installed before the first CUDA call
/// (cuquota then installs none) or after it (it replaces cuquota's). The signal is the
/// program's: it runs on, and the summary comes once, at its exit.
#[test]
fn a_programs_own_sigterm_handler_is_left_alone() {
    for ops in [
        "catch:15 init alloc:1M signal:15 procinfo",
        "init alloc:1M catch:15 signal:15 procinfo",
    ] {
        let out = crate::common::run(Client::Linked, ops, &[("CUQUOTA_LIMIT", "1GiB")]);
        out.check_exit(0);
        let survived = out.ops().iter().any(|l| l.raw == "signal 15 survived");
        assert!(survived, "{out}");
        let info = out.ops().into_iter().find(|l| l.op == "procinfo").unwrap();
        assert_eq!(info.get("term"), Some("handler"), "{out}");
        assert_eq!(said(&out), [one_live(MIB, 0)], "{out}");
    }
}

/// A process that never calls CUDA is untouched: no thread, no handler. One that does has
/// one more thread than without cuquota (the watcher; the trace's writer is another) and
/// cuquota's SIGTERM and SIGINT handlers.
#[test]
fn only_a_governed_process_has_the_watcher_and_the_handlers() {
    let info = |out: &Output| {
        let line = out.ops().into_iter().find(|l| l.op == "procinfo").unwrap();
        let threads = line.num("threads").unwrap();
        let dispositions = (line.get("term").unwrap(), line.get("int").unwrap());
        (
            threads,
            dispositions.0.to_string(),
            dispositions.1.to_string(),
        )
    };
    let limit = [("CUQUOTA_LIMIT", "1GiB")];
    let untouched = crate::common::run(Client::Linked, "procinfo", &limit);
    assert_eq!(
        info(&untouched),
        (1, "default".into(), "default".into()),
        "{untouched}"
    );
    // Its one line: at unload, that this client (linked with libcuda) made no CUDA call.
    assert_eq!(
        said(&untouched),
        [
            "libcuda.so was loaded but no CUDA call reached cuquota: if this program used the \
             GPU, nothing was enforced (likely cause: an object loaded with RTLD_DEEPBIND \
             (`cuquota run` sets LD_AUDIT to cover it), or a statically linked caller)"
        ],
        "{untouched}"
    );
    let (bare, ..) = info(&crate::common::run_raw(
        Client::Linked,
        "init procinfo",
        &limit,
    ));
    let governed = crate::common::run(Client::Linked, "init procinfo", &limit);
    assert_eq!(
        info(&governed),
        (bare + 1, "handler".into(), "handler".into()),
        "{governed}"
    );
    let dir = scratch_dir("watcher-threads");
    let path = dir.join("t.jsonl");
    let traced = crate::common::run(
        Client::Linked,
        "init alloc:1M procinfo",
        &[limit[0], ("CUQUOTA_TRACE", path.to_str().unwrap())],
    );
    assert_eq!(
        info(&traced).0,
        bare + 2,
        "the trace's writer too:\n{traced}"
    );
}

/// A forked child of a governed process gets a watcher of its own: ended by SIGTERM, it
/// prints its own summary (its own allocation, not the parent's); the parent, which goes
/// on, prints its own at exit.
#[test]
fn a_forked_child_ended_by_sigterm_prints_its_own_summary() {
    let out = crate::common::run(
        Client::Linked,
        "init alloc:1M fork:2 alloc:2M signal:15 procinfo",
        &[("CUQUOTA_LIMIT", "1GiB")],
    );
    out.check_exit(0);
    let fork = out.ops().into_iter().find(|l| l.op == "fork").unwrap();
    assert_eq!(fork.num("status"), Some(128 + 15), "{out}");
    let child = fork.num("pid").unwrap();
    let child_lines: Vec<&str> = out
        .stderr
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("cuquota[{child}]: ")))
        .collect();
    assert_eq!(child_lines, [one_live(2 * MIB, 0)], "{out}");
    assert_eq!(said(&out)[..], [one_live(MIB, 0)], "{out}");
}

/// Output into a pipe whose reader has gone (`cuquota metrics | head` after head quit) ends
/// as other Unix tools end there, by SIGPIPE: no panic, no message.
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 returns.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the reading end is ours and closed once; the writing end goes to the child.
    let stdout = unsafe {
        libc::close(fds[0]);
        std::process::Stdio::from(
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1]),
        )
    };
    // `cdi` prints a spec of host paths that are there.
    let dir = scratch_dir("closed-pipe");
    let policy = dir.join("cuquota.conf");
    std::fs::write(&policy, "limit = 1GiB\n").unwrap();
    let out = Command::new(&artifacts().cli)
        .arg("cdi")
        .arg("--policy")
        .arg(&policy)
        .arg("--state-dir")
        .arg(&dir)
        .stdout(stdout)
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{out:?}");
}

/// The README's group try-it: two `bfc_growth` members of group `svc` sharing 4 GiB, kept
/// alive by `BFC_HOLD_MS`, through `cuquota run --group --driver` (the stand-in for the
/// command alone). The second member's refusal names the first as the holder, and
/// `cuquota top --once` shows the group with both.
#[test]
fn the_readmes_group_try_it_shows_two_members_in_top() {
    let art = artifacts();
    let dir = scratch_dir("readme-group");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("cq");
    let state = state.to_str().unwrap();
    cuquota_ok(
        &["set", "svc", "--limit", "4GiB", "--state-dir", state],
        None,
    );
    let bfc = Client::Bfc.path();
    let member = |target: &str| {
        Run::program(&art.cli)
            .no_preload()
            .env_os("CUQUOTA_LIB", &art.interposer)
            .env("BFC_HOLD_MS", "30000")
            .env("LD_LIBRARY_PATH", "/nonexistent-cuquota-dir")
            .arg("run")
            .args(&["--driver", art.shim_dir.to_str().unwrap()])
            .args(&["--group", "svc", "--state-dir", state, "--"])
            .args(&[bfc.to_str().unwrap(), target])
            .start()
    };
    let holding = |l: &crate::common::Line| l.raw.starts_with("bfc: holding the pool");
    let mut first = member("1G");
    first.wait_for(holding);
    let mut second = member("3G");
    second.wait_for(holding);
    let frame = cuquota_ok(&["top", "--once", "--state-dir", state], None);
    let frame = String::from_utf8_lossy(&frame.stdout).into_owned();
    first.kill();
    second.kill();
    let (first, second) = (first.wait(), second.wait());
    assert!(frame.contains("group svc (2 members)"), "{frame}");
    for pid in [first.pid, second.pid] {
        assert!(
            frame
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{pid} bfc"))),
            "{pid} in\n{frame}"
        );
    }
    // The first grew to 2 GiB (regions doubling from 2 MiB past 1 GiB); the second's
    // 2 GiB region found 4 MiB left, held by the first.
    second.check_log(&format!(
        "GPU 0 refused 2.00 GiB (2147483648 bytes) via cuMemAlloc_v2: group svc: quota 4.00 \
         GiB, this process 2.00 GiB, 1 other member 2.00 GiB, 4.00 MiB left; held by pid {} \
         (bfc_growth 1G) 2.00 GiB",
        first.pid
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A GPU whose memory no governed process recorded (a byte limit, no memory query) has it in
/// `cuquota top` from NVML on the viewer's machine (here the stand-in's, 8 GiB), by UUID;
/// without NVML it stays unknown (0), never a guess.
#[test]
fn top_asks_nvml_for_a_gpus_memory_no_process_recorded() {
    let art = artifacts();
    let dir = scratch_dir("top-gpu-memory");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let gate = dir.join("gate");
    std::fs::write(&gate, "").unwrap();
    let mut held = Run::client(Client::Linked)
        .ops(&format!("init alloc:1M waitgone:{}", gate.display()))
        .env("CUQUOTA_LIMIT", "1GiB")
        .env_os("CUQUOTA_STATE_DIR", &state)
        .start();
    held.wait_for(|l| l.raw.starts_with("alloc "));
    let total = |driver_dir: &Path| -> u64 {
        let out = Command::new(&art.cli)
            .args(["top", "--json", "--state-dir"])
            .arg(&state)
            .env("LD_LIBRARY_PATH", driver_dir)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let snap: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(snap["gpus"].as_array().map(Vec::len), Some(1), "{snap}");
        snap["gpus"][0]["total"].as_u64().unwrap()
    };
    let with_nvml = total(&art.shim_dir);
    let without = total(Path::new("/nonexistent-cuquota-dir"));
    std::fs::remove_file(&gate).unwrap();
    held.wait().check_exit(0);
    assert_eq!((with_nvml, without), (8 << 30, 0));
    let _ = std::fs::remove_dir_all(&dir);
}
