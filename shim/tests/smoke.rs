//! Drives the built shim from C: compiles `tests/c/smoke*.c` with gcc against
//! `libcuda.so` (installed in a temp dir as `libcuda.so.1` plus a `libcuda.so` link, as users
//! install it) and runs one scenario per test, each in its own process and environment.
//! `tests/c/context_nvml.c` (context memory, NVML, `CUDA_VISIBLE_DEVICES`) likewise, with
//! the shim also installed as `libnvidia-ml.so.1` (a link to the same file).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

struct Built {
    lib_dir: PathBuf,
    smoke: PathBuf,
    preload: PathBuf,
    context_nvml: PathBuf,
}

/// The library cargo built for this test run. It is target/<profile>/deps/libcuda.so, next
/// to this test binary: cargo rebuilds that one before running the tests (the crate is also
/// an rlib for this reason), while target/<profile>/libcuda.so is only refreshed by
/// `cargo build`.
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let lib = exe.with_file_name("libcuda.so");
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}

fn gcc(args: &[&str]) {
    let out = Command::new("gcc")
        .args(args)
        .output()
        .expect("gcc must be installed");
    assert!(
        out.status.success(),
        "gcc {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The smoke program: its main and its scenarios by what they exercise (smoke.h).
const SMOKE_SOURCES: &[&str] = &[
    "smoke.c",
    "smoke_devices.c",
    "smoke_vmm_pools.c",
    "smoke_footprint.c",
];

fn build() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cuquota-shim-smoke");
        let lib_dir = dir.join("lib");
        std::fs::create_dir_all(&lib_dir).unwrap();
        let installed = lib_dir.join("libcuda.so.1");
        let _ = std::fs::remove_file(&installed);
        std::fs::copy(built_library(), &installed).unwrap();
        let link = lib_dir.join("libcuda.so");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("libcuda.so.1", &link).unwrap();
        let nvml = lib_dir.join("libnvidia-ml.so.1");
        let _ = std::fs::remove_file(&nvml);
        std::os::unix::fs::symlink("libcuda.so.1", &nvml).unwrap();

        let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
        let smoke = dir.join("smoke");
        let preload = dir.join("preload.so");
        let smoke_sources: Vec<PathBuf> = SMOKE_SOURCES.iter().map(|s| sources.join(s)).collect();
        let mut args = vec!["-std=c11", "-Wall", "-Werror", "-O1", "-pthread"];
        args.extend(smoke_sources.iter().map(|s| s.to_str().unwrap()));
        args.extend([
            "-o",
            smoke.to_str().unwrap(),
            "-L",
            lib_dir.to_str().unwrap(),
            "-lcuda",
            "-ldl",
        ]);
        gcc(&args);
        gcc(&[
            "-shared",
            "-fPIC",
            "-Wall",
            "-Werror",
            sources.join("preload.c").to_str().unwrap(),
            "-o",
            preload.to_str().unwrap(),
            "-ldl",
        ]);
        let context_nvml = dir.join("context_nvml");
        gcc(&[
            "-std=c11",
            "-Wall",
            "-Werror",
            "-O1",
            sources.join("context_nvml.c").to_str().unwrap(),
            "-o",
            context_nvml.to_str().unwrap(),
            "-L",
            lib_dir.to_str().unwrap(),
            "-lcuda",
            "-ldl",
        ]);
        Built {
            lib_dir,
            smoke,
            preload,
            context_nvml,
        }
    })
}

/// Runs one scenario with exactly these CUDA_SHIM_* variables (others removed); returns
/// its stderr.
fn run(scenario: &str, env: &[(&str, &str)], preload: bool) -> String {
    let built = build();
    run_program(&built.smoke, &[scenario], env, preload)
}

fn run_program(program: &Path, args: &[&str], env: &[(&str, &str)], preload: bool) -> String {
    let built = build();
    let scenario = args.join(" ");
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("LD_LIBRARY_PATH", &built.lib_dir)
        .env_remove("LD_PRELOAD");
    for var in [
        "CUDA_SHIM_DEVICES",
        "CUDA_SHIM_MEMORY",
        "CUDA_SHIM_DRIVER_VERSION",
        "CUDA_SHIM_FAIL",
        "CUDA_SHIM_POOL_CHUNK",
        "CUDA_SHIM_CONTEXT_MEMORY",
        "CUDA_SHIM_OTHER_PROCESS",
        "CUDA_VISIBLE_DEVICES",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    if preload {
        cmd.env("LD_PRELOAD", &built.preload);
    }
    let out = cmd.output().expect("run smoke");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "scenario {scenario} failed ({}):\n{stderr}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

#[test]
fn init_devices_allocation_and_accounting() {
    run("basic", &[], false);
}

#[test]
fn get_proc_address_versions_and_flags() {
    run("proc_address", &[], false);
}

#[test]
fn faults_from_the_environment() {
    let fail = "cuMemAlloc_v2:2:2,cuMemGetInfo_v2:3+:999,cuMemCreate:*:12345";
    run("faults_env", &[("CUDA_SHIM_FAIL", fail)], false);
}

#[test]
fn faults_from_the_helper() {
    run("faults_api", &[], false);
}

#[test]
fn virtual_memory_management_without_a_context() {
    run("vmm", &[], false);
}

#[test]
fn stream_ordered_allocation_and_pools() {
    run("pools", &[], false);
}

#[test]
fn concurrent_allocation() {
    run("threads", &[], false);
}

#[test]
fn bad_configuration_fails_init() {
    let stderr = run("bad_config", &[("CUDA_SHIM_MEMORY", "lots")], false);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        ["cuda-shim: bad CUDA_SHIM_MEMORY=lots"]
    );
}

#[test]
fn several_devices_and_context_stacks() {
    run(
        "multi",
        &[
            ("CUDA_SHIM_DEVICES", "2"),
            ("CUDA_SHIM_MEMORY", "1GiB,2GiB"),
            ("CUDA_SHIM_DRIVER_VERSION", "12040"),
        ],
        false,
    );
}

#[test]
fn proc_address_returns_the_driver_not_an_interposer() {
    run("interpose", &[], true);
}

#[test]
fn pools_keep_memory_until_synchronized_or_trimmed() {
    run("pool_cache", &[("CUDA_SHIM_MEMORY", "64MiB")], false);
}

#[test]
fn pool_chunk_setting() {
    run("pool_chunk", &[("CUDA_SHIM_POOL_CHUNK", "32MiB")], false);
}

#[test]
fn graph_memory_nodes_and_the_graph_memory_pool() {
    run("graphs", &[("CUDA_SHIM_MEMORY", "64MiB")], false);
}

// ---- Context memory, cuCtxSetLimit memory, NVML, CUDA_VISIBLE_DEVICES ----

fn run_context_nvml(args: &[&str], env: &[(&str, &str)]) -> String {
    run_program(&build().context_nvml, args, env, false)
}

#[test]
fn contexts_take_their_memory_from_creation_to_end() {
    run_context_nvml(
        &["context_memory"],
        &[
            ("CUDA_SHIM_MEMORY", "2GiB"),
            ("CUDA_SHIM_CONTEXT_MEMORY", "512MiB"),
        ],
    );
}

#[test]
fn memory_limits_take_their_growth() {
    run_context_nvml(
        &["limits"],
        &[
            ("CUDA_SHIM_MEMORY", "2GiB"),
            ("CUDA_SHIM_CONTEXT_MEMORY", "512MiB"),
        ],
    );
}

#[test]
fn nvml_and_the_driver_agree() {
    run_context_nvml(
        &["nvml"],
        &[
            ("CUDA_SHIM_DEVICES", "2"),
            ("CUDA_SHIM_MEMORY", "1GiB,2GiB"),
            ("CUDA_SHIM_CONTEXT_MEMORY", "64MiB"),
            ("CUDA_SHIM_OTHER_PROCESS", "1:4242:100MiB"),
            ("CUDA_VISIBLE_DEVICES", "1"),
        ],
    );
}

#[test]
fn visible_devices_are_renumbered_like_the_drivers() {
    let one = "GPU-63757175-6f74-412d-b368-696d00000001";
    for (visible, want) in [
        (None, "123"),
        (Some("2,0"), "31"),
        (Some("1,9,0"), "2"),
        (Some("0,2,0"), ""),
        (Some("2gpu,0"), "31"),
        (Some(""), ""),
        (Some(one), "2"),
        (Some("GPU-63757175-6f74-412d-b368-696d00000002,1"), "3"),
        (
            Some("GPU-63757175-6f74-412d-b368-696d00000002,GPU-63757175-6f74-412d-b368-696d0000"),
            "3",
        ),
        (
            Some(
                "GPU-63757175-6f74-412d-b368-696d00000002,GPU-63757175-6f74-412d-b368-696d00000000",
            ),
            "31",
        ),
        (Some("GPU-63757175,1"), ""),
    ] {
        let mut env = vec![
            ("CUDA_SHIM_DEVICES", "3"),
            ("CUDA_SHIM_MEMORY", "1GiB,2GiB,3GiB"),
        ];
        if let Some(v) = visible {
            env.push(("CUDA_VISIBLE_DEVICES", v));
        }
        run_context_nvml(&["visible", want], &env);
    }
}

#[test]
fn a_bad_setting_stops_nvml_too() {
    let stderr = run_context_nvml(&["bad_config"], &[("CUDA_SHIM_CONTEXT_MEMORY", "lots")]);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        ["cuda-shim: bad CUDA_SHIM_CONTEXT_MEMORY=lots"]
    );
}
