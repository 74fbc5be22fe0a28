//! A crash hunt: the BFC client (TensorFlow's allow_growth pattern: regions doubling, refused,
//! backing off, a training loop refused, the pool freed) run many times over under a 1 GiB
//! quota with its trace on, each run able to dump core. Every tenth run holds its pool for
//! 190–209 ms before freeing it and exiting, so that the watcher thread ends the last
//! back-off episode (200 ms after its last refusal) while the program frees and exits. A run
//! that dies by a signal fails the test with its output, where its core went and, where gdb
//! is installed, every thread's backtrace. `CUQUOTA_CRASH_RUNS` sets how many runs (default
//! 500).

use crate::common::*;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn runs() -> usize {
    std::env::var("CUQUOTA_CRASH_RUNS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(500)
}

/// Where the kernel put `pid`'s core, when core_pattern names a file in the working
/// directory (`core`, `core.PID`, or a pattern with %p); None otherwise.
fn core_of(dir: &Path, pid: u32) -> Option<PathBuf> {
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let pattern = pattern.trim();
    if pattern.starts_with('|') || pattern.contains('/') {
        return None; // a helper program or another directory takes it
    }
    let named = pattern.replace("%p", &pid.to_string());
    [dir.join(&named), dir.join(format!("{named}.{pid}"))]
        .into_iter()
        .find(|p| p.exists())
}

/// Every thread's backtrace from `core`, or why there is none.
fn backtrace(program: &Path, core: Option<&Path>) -> String {
    let Some(core) = core else {
        let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
        return format!("no core file here (core_pattern: {})", pattern.trim());
    };
    match Command::new("gdb")
        .args(["-batch", "-nx", "-ex", "thread apply all bt"])
        .arg(program)
        .arg(core)
        .output()
    {
        Ok(out) => format!(
            "core {}:\n{}{}",
            core.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => format!("core kept at {} (no gdb to read it: {e})", core.display()),
    }
}

#[test]
fn the_bfc_client_never_crashes_run_after_run() {
    let program = Client::Bfc.path();
    let dir = scratch_dir("crash-hunt");
    let n = runs();
    for i in 0..n {
        let trace = dir.join(format!("trace-{i}.jsonl"));
        let hold = if i % 10 == 9 { 190 + (i / 10) % 20 } else { 0 };
        let out = Run::program(&program)
            .env("BFC_HOLD_MS", &hold.to_string())
            .env("CUQUOTA_LIMIT", "1GiB")
            .env("CUQUOTA_TRACE", trace.to_str().unwrap())
            .cwd(&dir)
            .core_dumps()
            .run();
        if let Some(sig) = out.status.signal() {
            let core = core_of(&dir, out.pid);
            panic!(
                "run {} of {n} (BFC_HOLD_MS={hold}) died by signal {sig}:\n{out}\n{}",
                i + 1,
                backtrace(&program, core.as_deref())
            );
        }
        out.check_exit(0);
        let summary = out.logs_starting("GPU 0 summary: peak 1022.00 MiB");
        assert_eq!(summary.len(), 1, "run {}:\n{out}", i + 1);
        let _ = std::fs::remove_file(&trace);
    }
    eprintln!("crash hunt: {n} runs of bfc_growth under a 1 GiB quota, none crashed");
}
