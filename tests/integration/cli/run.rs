//! `cuquota run` with the interposer and the shim: the variables it sets, the status it
//! passes through, the checks before it starts the command, help on every option, a
//! recorded workload's trace through report, export and plot, and the install script.

use super::{ok, s, stderr, stdout, xml};
use crate::common::{artifacts, scratch_dir, Client, GIB, MIB};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

fn run_cmd(args: &[&str]) -> Command {
    let art = artifacts();
    let mut cmd = Command::new(&art.cli);
    cmd.arg("run").args(args);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("CUQUOTA_") || k.starts_with("CUDA_SHIM_") || k == "LD_PRELOAD" {
            cmd.env_remove(&key);
        }
    }
    cmd.env("CUQUOTA_LIB", &art.interposer)
        .env("LD_LIBRARY_PATH", &art.shim_dir);
    cmd
}

#[test]
fn run_preloads_sets_the_variables_and_passes_the_status_through() {
    let dir = scratch_dir("cli-run");
    let trace = dir.join("run.jsonl");
    let client = Client::Dlsym.path();
    let out = run_cmd(&["--limit", "1GiB", "--trace", s(&trace), "--", s(&client)])
        .args(["init", "alloc:512M", "alloc:1G", "info", "exit:3"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(3), "{text}\n{}", stderr(&out));
    assert!(
        text.contains("alloc 1073741824 rc=2"),
        "quota enforced:\n{text}"
    );
    assert!(text.contains(&format!("info rc=0 free={} total={}", 512 * MIB, GIB)));
    let lines = std::fs::read_to_string(&trace).expect("the trace was written");
    assert!(lines.contains("\"type\":\"refused\""));

    // --observe refuses nothing; --log sends the lines to a file.
    let log = dir.join("log.txt");
    let out = run_cmd(&[
        "--limit",
        "1GiB",
        "--observe",
        "--log",
        s(&log),
        "--",
        s(&client),
    ])
    .args(["init", "alloc:2G"])
    .output()
    .unwrap();
    assert!(out.status.success());
    assert!(stdout(&out).contains("alloc 2147483648 rc=0"));
    assert!(!std::fs::read_to_string(&log).unwrap().is_empty());

    // Death by a signal is the caller's to see (exec: the command is this process).
    let out = run_cmd(&["--", s(&client)])
        .args(["init", "kill"])
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL));
    let out = run_cmd(&["--", "/nonexistent/program"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(stderr(&out).contains("cannot run /nonexistent/program"));
}

#[test]
fn run_without_the_library_says_where_it_looked() {
    let out = Command::new(&artifacts().cli)
        .args(["run", "--", "true"])
        .env("CUQUOTA_LIB", "/nonexistent/libcuquota.so")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(
        stderr(&out).contains("CUQUOTA_LIB=/nonexistent/libcuquota.so"),
        "{}",
        stderr(&out)
    );
}

/// The demo workload's own trace: report, export and plot agree with what it did.
#[test]
fn report_export_and_plot_a_recorded_workload() {
    let dir = scratch_dir("cli-recorded");
    let trace = dir.join("bfc.jsonl");
    let out = run_cmd(&["--limit", "6GiB", "--trace", s(&trace), "--"])
        .arg(Client::Bfc.path())
        .env("CUDA_SHIM_MEMORY", "8GiB")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));

    let report = ok(&["report", "--json", s(&trace)]);
    let json: Value = serde_json::from_slice(&report.stdout).unwrap();
    let p = &json["processes"][0];
    assert_eq!(p["end"], "exit");
    let d = &p["devices"][0];
    assert_eq!(d["quota"], 6 * GIB);
    let peak = d["peak"].as_u64().unwrap();
    assert!(peak <= 6 * GIB && peak > 5 * GIB, "peak {peak}");
    assert!(d["refusals"].as_u64().unwrap() > 0);
    assert_eq!(d["allocs"], d["frees"], "the workload frees everything");
    assert_eq!(d["live"], 0);
    assert!(p["backoff_episodes"]["recovered"].as_u64().unwrap() >= 1);
    let text = stdout(&ok(&["report", s(&trace)]));
    assert!(text.contains("then got"), "{text}");
    assert!(text.contains("quota 6.00 GiB"), "{text}");

    let chrome = dir.join("bfc.json");
    ok(&["export", "--format", "chrome", s(&trace), "-o", s(&chrome)]);
    let doc: Value = serde_json::from_slice(&std::fs::read(&chrome).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let max_counter = events
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "GPU 0 in use")
        .filter_map(|e| e["args"]["bytes"].as_u64())
        .max();
    assert_eq!(max_counter, Some(peak));
    assert!(events.iter().any(|e| e["ph"] == "i"));

    let svg = dir.join("bfc.svg");
    ok(&["plot", s(&trace), "-o", s(&svg)]);
    let elements = xml::parse(&std::fs::read_to_string(&svg).unwrap()).unwrap();
    let series = elements
        .iter()
        .filter(|e| e.name == "polyline" && e.attr("stroke-width") == Some("2"))
        .count();
    assert_eq!(series, 1, "one device used");
}

#[test]
fn run_checks_its_values_before_starting_the_command() {
    let dir = scratch_dir("cli-run-checks");
    let marker = dir.join("ran");
    let touch = ["sh", "-c", &format!("touch {}", s(&marker))].map(String::from);
    for (args, line) in [
        (vec!["--limit", "6GBB"], "cuquota: --limit \"6GBB\" is not valid: unknown unit \"GBB\"; use e.g. --limit 6GiB, 6144MiB, 75%, 0:6GiB,1:50% or none"),
        (vec!["--limit", "1.5"], "cuquota: --limit \"1.5\" is not valid: \"1.5\" has no unit, so it would be a count of bytes, which is whole; did you mean 1.5GiB?; use e.g. --limit 6GiB, 6144MiB, 75%, 0:6GiB,1:50% or none"),
        (vec!["--trace", "t-%x"], "cuquota: --trace \"t-%x\": unknown \"%x\" (use %p, %h, %r, %t or %%)"),
        (vec!["--log", "/nonexistent/dir/log"], "cuquota: --log \"/nonexistent/dir/log\": there is no directory /nonexistent/dir"),
    ] {
        let out = run_cmd(&args).args(&touch).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), format!("{line}\n"));
        assert!(!marker.exists(), "{args:?}: the command ran");
    }
}

#[test]
fn run_needs_no_double_dash() {
    let client = Client::Linked.path();
    let out = run_cmd(&["--limit", "1GiB", s(&client), "init", "alloc:2G"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("alloc 2147483648 rc=2"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn every_option_of_every_subcommand_has_a_help_line() {
    for (sub, options) in [
        (
            "run",
            &[
                "--limit",
                "--trace",
                "--observe",
                "--log",
                "--group",
                "--state-dir",
                "<COMMAND>",
                "CUQUOTA_LIB",
                "libcuda.so.1",
            ][..],
        ),
        ("report", &["<TRACE>", "--json", "--skip-bad"][..]),
        (
            "export",
            &["<TRACE>", "--format", "--output", "--skip-bad"][..],
        ),
        ("plot", &["<TRACE>", "--output", "--skip-bad"][..]),
    ] {
        let out = Command::new(&artifacts().cli)
            .args([sub, "--help"])
            .output()
            .unwrap();
        let help = stdout(&out);
        for option in options {
            // The option's own line, and a description under it (clap's long help).
            let at = help.lines().position(|l| l.contains(option));
            let at = at.unwrap_or_else(|| panic!("{sub}: no {option} in\n{help}"));
            if option.starts_with('-') || option.starts_with('<') {
                let next = help.lines().nth(at + 1).unwrap_or("");
                let same = help.lines().nth(at).unwrap();
                let described = !next.trim().is_empty() && !next.trim_start().starts_with('-')
                    || same.split_whitespace().count() > 2;
                assert!(described, "{sub}: {option} has no description in\n{help}");
            }
        }
    }
}

/// scripts/install.sh PREFIX: the installed `cuquota run` finds the installed library by
/// itself (no CUQUOTA_LIB) and, with --stand-in, the installed stand-in, and enforces.
#[test]
fn the_install_script_installs_a_cuquota_that_finds_its_library() {
    let art = artifacts();
    let prefix = scratch_dir("install").join("prefix");
    let built = art.cli.parent().unwrap();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(workspace.join("scripts/install.sh"))
        .arg(&prefix)
        .env("CUQUOTA_INSTALL_FROM", built)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    for file in [
        "bin/cuquota",
        "lib/libcuquota.so",
        "lib/libcuquota_audit.so",
    ] {
        assert!(prefix.join(file).is_file(), "{file} is not installed");
    }
    let mut cmd = Command::new(prefix.join("bin/cuquota"));
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("CUQUOTA_") || k.starts_with("CUDA_SHIM_") || k == "LD_PRELOAD" {
            cmd.env_remove(&key);
        }
    }
    // --stand-in: the installed stand-in, for the command alone (nothing on this
    // process's LD_LIBRARY_PATH).
    let out = cmd
        .env_remove("LD_LIBRARY_PATH")
        .args([
            "run",
            "--stand-in",
            "--limit",
            "1GiB",
            s(&Client::Dlsym.path()),
            "init",
            "alloc:2G",
            "info",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("alloc 2147483648 rc=2"), "{text}");
    assert!(
        text.contains(&format!("info rc=0 free={GIB} total={GIB}")),
        "{text}"
    );
}

/// scripts/install.sh PREFIX --state-dir DIR, as root (in a mount namespace with an overlay on
/// /etc holding a tmpfiles.d directory): DIR, DIR/groups and DIR/processes are root's, mode
/// 1777, and /etc/tmpfiles.d/cuquota.conf makes them again at boot. A DIR another user made
/// first is refused, not taken over; a relative one is a usage error.
#[test]
fn the_install_script_makes_a_root_state_directory_and_refuses_another_users() {
    crate::policy::needs_root();
    let art = artifacts();
    let dir = scratch_dir("install-state");
    let over = dir.join("etc");
    fs::create_dir_all(over.join("upper/tmpfiles.d")).unwrap();
    let state = dir.join("state");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let install = |state: &Path| {
        let command = format!(
            "env CUQUOTA_INSTALL_FROM={built} {script} {prefix} --state-dir {state}",
            built = art.cli.parent().unwrap().display(),
            script = workspace.join("scripts/install.sh").display(),
            prefix = dir.join("prefix").display(),
            state = state.display(),
        );
        crate::policy::with_etc_overlay(&over, &command)
    };
    let out = install(&state);
    assert_eq!(out.status.code(), Some(0), "{out}");
    for d in [state.clone(), state.join("groups"), state.join("processes")] {
        let meta = fs::symlink_metadata(&d).unwrap();
        assert!(meta.is_dir(), "{}", d.display());
        assert_eq!(
            (meta.uid(), meta.mode() & 0o7777),
            (0, 0o1777),
            "{}",
            d.display()
        );
    }
    let s = state.display();
    assert_eq!(
        fs::read_to_string(over.join("upper/tmpfiles.d/cuquota.conf")).unwrap(),
        format!(
            "# cuquota's shared state directory, made by root at boot (scripts/install.sh \
             --state-dir)\nd {s} 1777 root root -\nd {s}/groups 1777 root root -\n\
             d {s}/processes 1777 root root -\n"
        )
    );

    // One another user (daemon) made first is refused, named with its owner and mode.
    let theirs = dir.join("theirs");
    fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(1), Some(1)).unwrap();
    let out = install(&theirs);
    assert_eq!(out.status.code(), Some(1), "{out}");
    assert!(
        out.stderr.iter().any(|l| l
            == &format!(
                "install.sh: {} exists and is not a directory of root's (owner uid 1, mode 755, \
                 directory): remove it, then run this again",
                theirs.display()
            )),
        "{out}"
    );
    assert!(!theirs.join("groups").exists());
    let out = install(Path::new("relative/state"));
    assert_eq!(out.status.code(), Some(2), "{out}");
    let _ = fs::remove_dir_all(&dir);
}
