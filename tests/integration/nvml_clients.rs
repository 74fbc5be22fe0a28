//! Real NVML clients under a quota, against the shim's NVML (a 16 GiB stand-in GPU):
//! nvidia-ml-py 13.615.71 (`pynvml`), nvitop 1.7.2 (its Python API and `nvitop -1`) and
//! gpustat 1.1.1 (`gpustat --json`), pinned in the real-client venv. Each runs in a process
//! that never calls CUDA, in group `svc` (1 GiB per GPU) where another member holds 300 MiB:
//! each shows total 1 GiB and the group's 300 MiB, exactly; without cuquota, the real
//! figures. A PyTorch-style reader (ctypes, the unversioned v1 process list) sees this
//! process's footprint.

use crate::common::*;
use crate::real_clients::python;
use cuquota_state::group::GroupFile;
use std::time::{Duration, Instant};

fn script() -> String {
    let path = artifacts()
        .workspace
        .join("tests/real_clients/nvml_check.py");
    path.to_str().unwrap().to_string()
}

fn line<'a>(out: &'a Output, name: &str) -> &'a Line {
    let found = out.ops().into_iter().find(|l| l.op == name);
    found.unwrap_or_else(|| panic!("no {name} line:\n{out}"))
}

fn check(out: &Output, name: &str, expected: &[(&str, u64)]) {
    let l = line(out, name);
    for &(key, want) in expected {
        assert_eq!(l.num(key), Some(want), "{name} {key}:\n{out}");
    }
}

fn check_clients(out: &Output, total: u64, used: u64, reserved: u64) {
    out.check_exit(0);
    assert_eq!(
        out.ops().last().map(|l| l.op.as_str()),
        Some("done"),
        "{out}"
    );
    let figures = [("total", total), ("used", used), ("free", total - used)];
    check(out, "pynvml_v1", &figures);
    check(out, "pynvml_v2", &figures);
    check(out, "pynvml_v2", &[("reserved", reserved)]);
    check(out, "nvitop_api", &figures);
    check(
        out,
        "gpustat",
        &[("total_mib", total / MIB), ("used_mib", used / MIB)],
    );
    let shown_used = match used {
        0 => "0B".to_string(),
        u => format!("{:.1}MiB", u as f64 / MIB as f64),
    };
    let cell = format!("{shown_used}/{}MiB", total / MIB);
    assert_eq!(
        line(out, "nvitop_cli").get("memory"),
        Some(&cell[..]),
        "{out}"
    );
}

#[test]
fn pynvml_nvitop_and_gpustat_show_the_groups_quota() {
    let dir = scratch_dir("nvml-clients");
    let state = dir.join("state");
    let go = dir.join("go");
    std::fs::write(&go, "").unwrap();
    let env = vec![
        ("CUDA_SHIM_MEMORY".to_string(), "16GiB".to_string()),
        ("CUDA_SHIM_DRIVER_VERSION".into(), "13000".into()),
        ("CUQUOTA_LIMIT".into(), "1GiB".into()),
        ("CUQUOTA_CONTEXT".into(), "0".into()),
        ("CUQUOTA_GROUP".into(), "svc".into()),
        ("CUQUOTA_STATE_DIR".into(), state.to_str().unwrap().into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
    ];
    let member_env = env.clone();
    // The member holds its memory until the test is done with the monitors, which start
    // Python three times each (slow on a loaded machine): up to 6 × 30 s.
    let wait = format!(" waitgone:{}", go.display());
    let hold = format!("init alloc:300M{}", wait.repeat(6));
    let member = std::thread::spawn(move || {
        let env: Vec<(&str, &str)> = member_env.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        Run::client(Client::Dlsym)
            .ops(&hold)
            .envs(&env)
            .timeout(Duration::from_secs(200))
            .run()
    });
    let start = Instant::now();
    while !GroupFile::open_read_only(&state, "svc")
        .ok()
        .flatten()
        .is_some_and(|f| {
            f.snapshot()
                .devices
                .first()
                .is_some_and(|d| d.in_use == 300 * MIB)
        })
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the member never charged"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    let monitor = |preload: bool| {
        let mut r = Run::program(python())
            .arg(&script())
            .arg("monitor")
            .envs(&env_ref);
        if !preload {
            r = r.no_preload();
        }
        r.run()
    };
    let governed = monitor(true);
    check_clients(&governed, GIB, 300 * MIB, 0);
    // The monitoring process wrote nothing of cuquota's.
    assert!(governed.cuquota_lines().is_empty(), "{governed}");
    // The shim alone: the member's memory is in its own process's stand-in, not here.
    let raw = monitor(false);
    check_clients(&raw, 16 * GIB, 0, 0);
    std::fs::remove_file(&go).unwrap();
    member.join().unwrap().check_exit(0);
}

#[test]
fn a_pytorch_style_reader_sees_this_processs_footprint() {
    let env = [
        ("CUDA_SHIM_MEMORY", "16GiB"),
        ("CUDA_SHIM_DRIVER_VERSION", "13000"),
        // The stand-in's context takes 64 MiB that cuquota is told to leave out: NVML's own
        // figure for the process (264 MiB) differs from the footprint cuquota counts.
        ("CUDA_SHIM_CONTEXT_MEMORY", "64MiB"),
        ("CUQUOTA_CONTEXT", "0"),
        ("CUQUOTA_LIMIT", "1GiB"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
    ];
    let bytes = (200 * MIB).to_string();
    let reader = |preload: bool| {
        let mut r = Run::program(python())
            .arg(&script())
            .arg("torch")
            .arg(&bytes)
            .envs(&env);
        if !preload {
            r = r.no_preload();
        }
        let out = r.run();
        out.check_exit(0);
        out
    };
    check(
        &reader(true),
        "torch_procs",
        &[("rc", 0), ("n", 1), ("mine", 200 * MIB)],
    );
    check(
        &reader(false),
        "torch_procs",
        &[("rc", 0), ("n", 1), ("mine", 264 * MIB)],
    );
}
