//! Context memory no call announces (lazy module loading and `__device__` globals, local
//! memory at a launch): the footprint is reconciled with NVML's figure for this process once
//! before a refusal is final and, on the watcher thread, at most once a second; the growth is
//! charged to the context part. Where the figure cannot be read (no NVML, another PID
//! namespace), the refusal's line and its trace event say so. The shim's
//! `cuShimContextGrowth` (the `ctxgrow` op) is the driver taking more context memory with no
//! call that says so; its NVML lists the process with its whole footprint.

use crate::common::*;
use std::path::{Path, PathBuf};

const CONTEXT: u64 = 300 * MIB;

/// A 1 GiB quota; each context takes 300 MiB on the shim.
const ENV: [(&str, &str); 2] = [
    ("CUQUOTA_LIMIT", "1GiB"),
    ("CUDA_SHIM_CONTEXT_MEMORY", "300MiB"),
];

fn with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    ENV.iter().chain(extra).copied().collect()
}

/// The trace's event lines of one type.
fn events(path: &Path, kind: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["type"] == kind)
        .collect()
}

/// The shim installed without its `libnvidia-ml.so.1` link.
fn driver_without_nvml() -> PathBuf {
    let dir = scratch_dir("growth-no-nvml");
    std::os::unix::fs::symlink(
        artifacts().shim_dir.join("libcuda.so.1"),
        dir.join("libcuda.so.1"),
    )
    .unwrap();
    dir
}

/// 400 MiB allocated beside the 300 MiB context, then the driver takes 200 MiB more for the
/// context unannounced: a 400 MiB request does not fit either way, and before its refusal
/// is final NVML's figure is read, so the refusal is at 900 MiB with the context's 500, and
/// the room left is exactly what the driver left.
#[test]
fn a_refusal_accounts_for_growth_no_call_announced() {
    for client in Client::ALL {
        let dir = scratch_dir("growth-refused");
        let path = dir.join(format!("{client:?}.jsonl"));
        let out = run(
            client,
            "init alloc:400M ctxgrow:200M alloc:400M info alloc:124M alloc:1 footprint:0",
            &with(&[("CUQUOTA_TRACE", path.to_str().unwrap())]),
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, OUT_OF_MEMORY, 0, 0, OUT_OF_MEMORY, 0]);
        out.check(4, "info", &[("free", 124 * MIB), ("total", GIB)]);
        out.check(
            7,
            "footprint",
            &[("context", CONTEXT + 200 * MIB), ("allocations", 524 * MIB)],
        );
        out.check_log(&format!(
            "GPU 0 refused 400.00 MiB ({} bytes) via cuMemAlloc_v2: quota 1.00 GiB, in use \
             900.00 MiB (allocations 400.00 MiB, context 500.00 MiB), 124.00 MiB left",
            400 * MIB
        ));
        let refused = events(&path, "refused");
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert_eq!(refused[0]["bytes"], 400 * MIB);
        assert_eq!(refused[0]["in_use"], 900 * MIB);
        assert!(refused[0].get("unreconciled").is_none(), "{refused:?}");
        let context: Vec<_> = events(&path, "footprint")
            .into_iter()
            .filter(|e| e["part"] == "context")
            .collect();
        assert_eq!(context.last().unwrap()["bytes"], 500 * MIB, "{context:?}");
    }
}

/// With no call at all, the watcher reconciles within its second: what NVML shows the
/// program (the quota's figures) takes in the growth. The wait is for that figure, bounded.
#[test]
fn the_watcher_reconciles_growth_with_no_call() {
    for client in [Client::Linked, Client::Runtime] {
        let dir = scratch_dir("growth-watcher");
        let path = dir.join(format!("{client:?}.jsonl"));
        let out = run(
            client,
            "init alloc:400M ctxgrow:200M nvmlinit nvmlwait:0:900M",
            &with(&[("CUQUOTA_TRACE", path.to_str().unwrap())]),
        );
        out.check_exit(0);
        out.check(4, "nvmlwait", &[("rc", 0), ("met", 1)]);
        let by_watcher: Vec<_> = events(&path, "footprint")
            .into_iter()
            .filter(|e| e["api"] == "nvmlDeviceGetComputeRunningProcesses")
            .collect();
        assert_eq!(by_watcher.len(), 1, "{by_watcher:?}");
        assert_eq!(by_watcher[0]["part"], "context");
        assert_eq!(by_watcher[0]["bytes"], 500 * MIB);
    }
}

/// Without NVML contexts are not measured, and growth cannot be seen: the refusal's line and
/// its event say that context memory was not checked.
#[test]
fn without_nvml_a_refusal_says_context_memory_was_not_checked() {
    let dir = driver_without_nvml();
    for client in [Client::Linked, Client::Runtime] {
        let path = dir.join(format!("{client:?}.jsonl"));
        let out = run(
            client,
            "init alloc:400M ctxgrow:200M alloc:700M",
            &with(&[
                ("LD_LIBRARY_PATH", dir.to_str().unwrap()),
                ("CUQUOTA_TRACE", path.to_str().unwrap()),
            ]),
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, OUT_OF_MEMORY]);
        out.check_log(&format!(
            "GPU 0 refused 700.00 MiB ({} bytes) via cuMemAlloc_v2: quota 1.00 GiB, in use \
             400.00 MiB, 624.00 MiB left; context memory not checked against NVML: NVML \
             cannot be used",
            700 * MIB
        ));
        let refused = events(&path, "refused");
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0]["reason"], "quota");
        assert_eq!(refused[0]["unreconciled"], "NVML cannot be used");
    }
}

/// In a PID namespace of its own (`unshare --pid`, the host's `/proc`), NVML lists the
/// process under its host PID: its figure cannot be found, and the refusal says so.
#[test]
fn in_another_pid_namespace_a_refusal_says_context_memory_was_not_checked() {
    let dir = scratch_dir("growth-pidns");
    let path = dir.join("trace.jsonl");
    let out = Run::program("unshare")
        .args(&["--pid", "--fork"])
        .arg(Client::Linked.path().to_str().unwrap())
        .ops("init alloc:400M ctxgrow:200M alloc:400M")
        .envs(&with(&[("CUQUOTA_TRACE", path.to_str().unwrap())]))
        .run();
    assert!(
        !out.stderr.iter().any(|l| l.starts_with("unshare:")),
        "unshare --pid needs CAP_SYS_ADMIN (the tests run as root): {out}"
    );
    out.check_exit(0);
    out.check_rcs(&[0, 0, 0, OUT_OF_MEMORY]);
    // The client is PID 1 in its namespace.
    let want = format!(
        "cuquota[1]: GPU 0 refused 400.00 MiB ({} bytes) via cuMemAlloc_v2: quota 1.00 GiB, \
         in use 700.00 MiB (allocations 400.00 MiB, context 300.00 MiB), 324.00 MiB left; \
         context memory not checked against NVML: NVML does not list this process, as from \
         another PID namespace",
        400 * MIB
    );
    assert_eq!(
        out.stderr.iter().filter(|l| **l == want).count(),
        1,
        "{want}\n{out}"
    );
    let refused = events(&path, "refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        refused[0]["unreconciled"],
        "NVML does not list this process, as from another PID namespace"
    );
}
