//! NVML under a quota, as a client sees it through `dlopen("libnvidia-ml.so.1")` + `dlsym`
//! (the ops clients' path) against the shim's NVML: memory info shows the quota and the
//! footprint, process lists this process's footprint, a GPU without a quota passes through;
//! a process that never calls CUDA (a monitoring tool) shows its quota and its group's
//! figures, and leaves no file and no line behind.

use crate::common::*;
use cuquota_state::group::{group_path, GroupFile};
use std::path::Path;
use std::time::{Duration, Instant};

const PATHS: [Client; 2] = [Client::Linked, Client::Dlsym];
const SHIM: [(&str, &str); 3] = [
    ("CUDA_SHIM_MEMORY", "16GiB"),
    ("CUQUOTA_LIMIT", "1GiB"),
    // Contexts take nothing: the footprint is the allocations, exactly.
    ("CUQUOTA_CONTEXT", "0"),
];

#[test]
fn memory_info_and_processes_show_the_quota_and_the_footprint() {
    for client in PATHS {
        let out = run(
            client,
            "init alloc:300M nvmlinit nvmlinfo:0 nvmlinfo2:0 nvmlprocs:0 otherproc:0:4242:15872M \
             nvmlinfo:0 nvmlinfo2:0 nvmlprocs:0",
            &SHIM,
        );
        out.check_exit(0);
        assert!(out.lines.iter().all(|l| l.get("rc") == Some("0")), "{out}");
        let told = [("total", GIB), ("used", 300 * MIB), ("free", 724 * MIB)];
        out.check(3, "nvmlinfo", &told);
        out.check(4, "nvmlinfo2", &told);
        out.check(4, "nvmlinfo2", &[("reserved", 0)]);
        out.check(5, "nvmlprocs", &[("n", 1), ("mine", 300 * MIB)]);
        // Another process holds 15.5 GiB: free is what the GPU really has (212 MiB), and
        // reserved keeps total = reserved + used + free; its entry passes through.
        let told = [("total", GIB), ("used", 300 * MIB), ("free", 212 * MIB)];
        out.check(7, "nvmlinfo", &told);
        out.check(8, "nvmlinfo2", &told);
        out.check(8, "nvmlinfo2", &[("reserved", 512 * MIB)]);
        out.check(
            9,
            "nvmlprocs",
            &[("n", 2), ("mine", 300 * MIB), ("others", 15872 * MIB)],
        );
        // One line: the exit summary (the NVML calls said nothing).
        assert_eq!(out.cuquota_lines().len(), 1, "{out}");
    }
}

/// Without cuquota the same ops show the real figures (the control), and a GPU without a
/// quota, or `CUQUOTA_VIRTUALIZE=0`, passes through under cuquota.
#[test]
fn without_a_quota_nvml_is_untouched() {
    let ops = "init alloc:300M nvmlinit nvmlinfo:0 nvmlinfo:1";
    let real = [
        ("total", 16 * GIB),
        ("used", 300 * MIB),
        ("free", 16 * GIB - 300 * MIB),
    ];
    let untouched = [("total", 16 * GIB), ("used", 0), ("free", 16 * GIB)];
    let two = [("CUDA_SHIM_DEVICES", "2"), ("CUDA_SHIM_MEMORY", "16GiB")];
    let raw = run_raw(Client::Dlsym, ops, &two);
    out_check(&raw, &real, &untouched);
    // GPU 0 has no quota and passes through; GPU 1 shows its own.
    let one_quota = [two[0], two[1], ("CUQUOTA_LIMIT", "1:1GiB")];
    let quota = [("total", GIB), ("used", 0), ("free", GIB)];
    out_check(&run(Client::Dlsym, ops, &one_quota), &real, &quota);
    let off = [
        SHIM[0],
        SHIM[1],
        SHIM[2],
        ("CUQUOTA_VIRTUALIZE", "0"),
        two[0],
    ];
    out_check(&run(Client::Dlsym, ops, &off), &real, &untouched);
}

fn out_check(out: &Output, gpu0: &[(&str, u64)], gpu1: &[(&str, u64)]) {
    out.check_exit(0);
    out.check(3, "nvmlinfo", gpu0);
    out.check(4, "nvmlinfo", gpu1);
}

/// Waits until group `name` under `dir` has `bytes` in use on its one GPU; returns the
/// members' pids.
fn wait_for_group(dir: &Path, name: &str, bytes: u64) -> Vec<u64> {
    let start = Instant::now();
    loop {
        if let Ok(Some(f)) = GroupFile::open_read_only(dir, name) {
            let s = f.snapshot();
            if s.devices.first().is_some_and(|d| d.in_use == bytes) {
                return s.members;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the member never charged"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `CUQUOTA_GROUP=svc` on a process that calls NVML only: it shows the group's quota and
/// in-use (300 MiB allocated by the one member), the member's entry with its footprint, and
/// stays out of the group; a group that does not exist shows the process's own quota and
/// creates nothing.
#[test]
fn a_process_that_never_calls_cuda_shows_its_groups_figures() {
    let dir = scratch_dir("nvml-group");
    let state = dir.join("state");
    let go = dir.join("go");
    std::fs::write(&go, "").unwrap();
    let group_env = |name: &'static str| {
        vec![
            SHIM[0],
            SHIM[1],
            SHIM[2],
            ("CUQUOTA_GROUP", name),
            ("CUQUOTA_STATE_DIR", state.to_str().unwrap()),
        ]
    };
    let member_env: Vec<(String, String)> = group_env("svc")
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let hold = format!("init alloc:300M waitgone:{}", go.display());
    let member = std::thread::spawn(move || {
        let env: Vec<(&str, &str)> = member_env.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        run(Client::Dlsym, &hold, &env)
    });
    let pids = wait_for_group(&state, "svc", 300 * MIB);
    assert_eq!(pids.len(), 1);
    let member_pid = pids[0];
    for client in PATHS {
        let ops = format!(
            "nvmlinit nvmlinfo:0 nvmlinfo2:0 otherproc:0:{member_pid}:1G otherproc:0:4242:2G \
             nvmlprocs:0"
        );
        let out = run(client, &ops, &group_env("svc"));
        out.check_exit(0);
        let told = [("total", GIB), ("used", 300 * MIB), ("free", 724 * MIB)];
        out.check(1, "nvmlinfo", &told);
        out.check(2, "nvmlinfo2", &told);
        // The member's entry (1 GiB in the shim's list) shows its 300 MiB; 4242 is untouched.
        out.check(
            5,
            "nvmlprocs",
            &[("n", 2), ("mine", 0), ("others", 2 * GIB + 300 * MIB)],
        );
        assert!(out.stderr.is_empty(), "{out}");
        // Still one member: the reader never joined.
        assert_eq!(wait_for_group(&state, "svc", 300 * MIB), pids);
    }
    std::fs::remove_file(&go).unwrap();
    member.join().unwrap().check_exit(0);

    let out = run(Client::Dlsym, "nvmlinit nvmlinfo:0", &group_env("nobody"));
    out.check_exit(0);
    out.check(1, "nvmlinfo", &[("total", GIB), ("used", 0), ("free", GIB)]);
    assert!(out.stderr.is_empty(), "{out}");
    assert!(!group_path(&state, "nobody").exists());
}

/// A process with no group and no CUDA shows its own quota and nothing used, and its state
/// directory is never made.
#[test]
fn a_monitoring_process_shows_its_quota_and_writes_nothing() {
    let dir = scratch_dir("nvml-monitor");
    let state = dir.join("state");
    let env = [
        SHIM[0],
        SHIM[1],
        ("CUQUOTA_STATE_DIR", state.to_str().unwrap()),
    ];
    let out = run(Client::Dlsym, "nvmlinit nvmlinfo:0 nvmlprocs:0", &env);
    out.check_exit(0);
    out.check(1, "nvmlinfo", &[("total", GIB), ("used", 0), ("free", GIB)]);
    out.check(2, "nvmlprocs", &[("n", 0)]);
    assert!(out.stderr.is_empty(), "{out}");
    assert!(!state.exists());
}
