//! Processes named as the host sees them: two members of one group that are both PID 1, each
//! in a PID namespace of its own (`unshare --pid --fork`, the host's /proc left in place as a
//! container runtime's rootfs overlay would not, so the stand-in can tell NVML's PID).
//! NVML's process list, which reports host PIDs as the real driver does, still finds both
//! members; `top --json`, `top --once` and `metrics` show each one's host PID beside the PID
//! it sees.

use super::*;
use cuquota_state::group::GroupFile;
use std::sync::atomic::Ordering::Relaxed;

/// A member in a PID namespace of its own, running `ops`.
fn in_namespace(state: &Path, ops: &str) -> Running {
    Run::program("unshare")
        .args(&["--pid", "--fork", Client::Dlsym.path().to_str().unwrap()])
        .ops(ops)
        .env("CUQUOTA_STATE_DIR", state.to_str().unwrap())
        .env("CUQUOTA_GROUP", "ns")
        .env("CUQUOTA_LIMIT", "1GiB")
        // Contexts take nothing: the footprint is the allocations, exactly.
        .env("CUQUOTA_CONTEXT", "0")
        .timeout(Duration::from_secs(30))
        .start()
}

/// The one child unshare forked: the member, as the host sees it.
fn member_pid(unshare: &Running) -> u32 {
    let outer = unshare.pid();
    let children = std::fs::read_to_string(format!("/proc/{outer}/task/{outer}/children")).unwrap();
    children
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("unshare {outer} should have one child, has {children:?}"))
}

#[test]
fn members_in_pid_namespaces_are_found_by_nvml_and_shown_by_host_pid() {
    let probe = Run::program("unshare")
        .no_preload()
        .args(&["--pid", "--fork", "true"])
        .timeout(Duration::from_secs(30))
        .run_allowing_timeout();
    assert!(
        probe.status.success(),
        "PID namespaces are refused here (`unshare --pid --fork true`): {probe}"
    );
    let state = scratch_dir("top-pidns");
    let gate = state.join("gate");
    std::fs::write(&gate, "").unwrap();
    let wait = format!("waitgone:{}", gate.display());
    let mut a = in_namespace(&state, &format!("init alloc:256M {wait}"));
    a.wait_for(|l| l.op == "alloc");
    let a_host = member_pid(&a);
    // B: the shim lists A as another process holding 1 GiB (the driver's figure, context and
    // all); cuquota shows A's footprint there instead, found by A's host PID.
    let mut b = in_namespace(
        &state,
        &format!("init alloc:128M otherproc:0:{a_host}:1G nvmlinit nvmlprocs:0 {wait}"),
    );
    let procs = b.wait_for(|l| l.op == "nvmlprocs");
    let b_host = member_pid(&b);
    assert_ne!(a_host, b_host);
    let f = GroupFile::open_read_only(&state, "ns").unwrap().unwrap();
    let pids: Vec<(u64, u64)> = (f.layout().slots.iter())
        .filter(|s| s.is_member())
        .map(|s| (s.pid.load(Relaxed), s.outer_pid.load(Relaxed)))
        .collect();
    assert_eq!(pids, [(1, a_host.into()), (1, b_host.into())]);
    // Neither entry is the client's getpid() (1): both count as "others".
    assert_eq!(
        (
            procs.num("rc"),
            procs.num("n"),
            procs.num("listed"),
            procs.num("others")
        ),
        (Some(0), Some(2), Some(0), Some(384 * MIB)),
        "{procs:?}"
    );

    let g = group_json(&state, "ns").unwrap();
    let mut seen: Vec<(u64, u64)> = (g["processes"].as_array().unwrap().iter())
        .map(|p| (p["pid"].as_u64().unwrap(), p["host_pid"].as_u64().unwrap()))
        .collect();
    seen.sort();
    let mut want = vec![(1, u64::from(a_host)), (1, u64::from(b_host))];
    want.sort();
    assert_eq!(seen, want);
    let frame = cli(&["top", "--once"], &state);
    assert!(
        frame.contains(&format!("    {a_host}(1) dlsym init")),
        "{frame}"
    );
    let text = cli(&["metrics"], &state);
    let b_series =
        format!("cuquota_member_in_use_bytes{{group=\"ns\",pid=\"{b_host}\",ns_pid=\"1\",");
    let b_line = (text.lines())
        .find(|l| l.starts_with(&b_series))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(b_line.ends_with(&format!(" {}", 128 * MIB)), "{b_line}");
    std::fs::remove_file(&gate).unwrap();
    for member in [a, b] {
        let out = member.wait();
        assert!(!out.timed_out && out.status.success(), "{out}");
    }
}
