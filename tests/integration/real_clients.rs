//! Real clients that nobody on this project wrote: NVIDIA's cuda-bindings, cuda.core and
//! numba-cuda, pinned in a virtual environment made by `scripts/real-clients-env.sh`, each
//! running a check script from `tests/real_clients/` under the interposer against the
//! shim (a simulated 4 GiB GPU, capped at 1 GiB).
//!
//! The scripts fill the quota in 300 MiB pieces (3 fit, 124 MiB is left over) and check on
//! the client's side that the next piece raises that client's out-of-memory error, that the
//! memory info shows the quota, and that a free gives room back; they print what they saw.
//! Here the printed numbers are checked again, along with what only cuquota knows: the
//! refusal lines on stderr, the exit summary, and the trace's events, API by API (which
//! shows the `_ptsz` variants being hooked when the per-thread default stream is asked for).
//!
//! cudarc (Rust; `tests/cudarc`, pinned in the workspace's Cargo.lock and built with it) runs
//! over two simulated GPUs with a quota each, without the virtual environment.
//!
//! Without the virtual environment, and with no network and no wheels to make it from,
//! these tests fail with the script's explanation: they never pass by skipping.

use crate::common::*;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const QUOTA: u64 = GIB;
const CHUNK: u64 = 300 * MIB;
/// Pieces that fit under the quota.
const FIT: u64 = QUOTA / CHUNK;
/// The simulated device: bigger than the quota, so every refusal here is cuquota's.
const DEVICE: u64 = 4 * GIB;

/// The venv's python, made (or found) once per test binary.
pub(crate) fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let script = artifacts().workspace.join("scripts/real-clients-env.sh");
        let out = Command::new(&script)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{} failed ({}); the real-client tests cannot run:\n{stderr}",
            script.display(),
            out.status
        );
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        assert!(
            path.is_file(),
            "{} printed no python:\n{stderr}",
            script.display()
        );
        path
    })
}

/// How a check script is run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Under the interposer, default streams as the clients default to.
    Quota,
    /// Under the interposer, with the per-thread default stream asked for: cuda-bindings
    /// then looks stream-ordered functions up with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
    PerThread,
    /// Without the interposer: the shim alone (a control for the numbers).
    Raw,
}

struct ClientRun {
    out: Output,
    /// (event type, api) → count, for the events that carry the accounting.
    events: BTreeMap<(String, String), u64>,
    summary: serde_json::Value,
}

fn run_check(script: &str, mode: Mode) -> ClientRun {
    let art = artifacts();
    let dir = scratch_dir(script.trim_end_matches(".py"));
    let trace = dir.join("trace.jsonl");
    let per_thread = if mode == Mode::PerThread { "1" } else { "0" };
    let quota = if mode == Mode::Raw { DEVICE } else { QUOTA };
    let mut run = Run::program(python())
        .arg(
            art.workspace
                .join("tests/real_clients")
                .join(script)
                .to_str()
                .unwrap(),
        )
        .arg(&quota.to_string())
        .arg(&CHUNK.to_string())
        .envs(&[
            ("CUDA_SHIM_MEMORY", "4GiB"),
            // The wheels are CUDA 13; a 12.x driver would make cuda-bindings warn.
            ("CUDA_SHIM_DRIVER_VERSION", "13000"),
            ("CUQUOTA_LIMIT", "1GiB"),
            // Every refusal its line (the default prints an episode's first only): the
            // checks below count them.
            ("CUQUOTA_LOG_LEVEL", "debug"),
            ("CUQUOTA_TRACE", trace.to_str().unwrap()),
            // Also numba's switch: on the NVIDIA bindings it asks for this one instead.
            ("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", per_thread),
            // No __pycache__ in the source tree.
            ("PYTHONDONTWRITEBYTECODE", "1"),
        ])
        .cwd(&dir);
    if mode == Mode::Raw {
        run = run.no_preload();
    }
    let out = run.run();
    out.check_exit(0);
    assert_eq!(
        out.ops().last().map(|l| l.op.as_str()),
        Some("done"),
        "{out}"
    );

    let mut events = BTreeMap::new();
    let mut summary = serde_json::Value::Null;
    if mode != Mode::Raw {
        let text = fs::read_to_string(&trace)
            .unwrap_or_else(|e| panic!("read {}: {e}\n{out}", trace.display()));
        for line in text.lines() {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            let kind = event["type"].as_str().unwrap().to_string();
            match kind.as_str() {
                "alloc" | "free" | "refused" | "meminfo" => {
                    let api = event["api"].as_str().unwrap().to_string();
                    *events.entry((kind, api)).or_insert(0) += 1;
                }
                "summary" => summary = event,
                _ => {}
            }
        }
    }
    ClientRun {
        out,
        events,
        summary,
    }
}

fn expect_events(run: &ClientRun, want: &[(&str, &str, u64)]) {
    let want: BTreeMap<(String, String), u64> = want
        .iter()
        .map(|&(kind, api, n)| ((kind.to_string(), api.to_string()), n))
        .collect();
    assert_eq!(
        run.events, want,
        "trace events by (type, api):\n{}",
        run.out
    );
}

/// The trace's exit summary of GPU 0: nothing dropped, nothing left charged.
fn expect_summary(run: &ClientRun, allocs: u64, refusals: u64) {
    let s = &run.summary;
    let dev = &s["devices"][0];
    let got = (
        s["dropped"].as_u64(),
        dev["allocs"].as_u64(),
        dev["frees"].as_u64(),
        dev["refusals"].as_u64(),
        dev["peak"].as_u64(),
        dev["in_use"].as_u64(),
    );
    let want = (
        Some(0),
        Some(allocs),
        Some(allocs),
        Some(refusals),
        Some(FIT * CHUNK),
        Some(0),
    );
    assert_eq!(got, want, "trace summary {s}:\n{}", run.out);
}

/// The `meminfo when=<when>` line shows the quota, with `in_use` charged.
fn expect_meminfo(out: &Output, when: &str, total: u64, in_use: u64) {
    let line = out
        .ops()
        .into_iter()
        .find(|l| l.get("when") == Some(when))
        .unwrap_or_else(|| panic!("no meminfo when={when}:\n{out}"));
    assert_eq!(
        (line.num("total"), line.num("free")),
        (Some(total), Some(total - in_use)),
        "{}:\n{out}",
        line.raw
    );
}

/// A fill of the quota through `api`: FIT pieces, then the client's OOM; the memory info
/// after it, after one free and after all frees; the piece taken again after the free.
fn expect_fill(out: &Output, api: &str, prefix: &str, total: u64) {
    expect_fill_from(out, api, prefix, total, false)
}

/// As `expect_fill`, for a pool that keeps what its buffers freed (`kept`): the room does
/// not come back, since the quota bounds the footprint.
fn expect_fill_from(out: &Output, api: &str, prefix: &str, total: u64, kept: bool) {
    let fits = total / CHUNK;
    let fill = out
        .ops()
        .into_iter()
        .find(|l| l.op == "fill" && l.get("api") == Some(api))
        .unwrap_or_else(|| panic!("no fill api={api}:\n{out}"));
    assert_eq!(
        (fill.num("chunk"), fill.num("ok"), fill.get("err")),
        (Some(CHUNK), Some(fits), Some("CUDA_ERROR_OUT_OF_MEMORY")),
        "{}:\n{out}",
        fill.raw
    );
    expect_meminfo(out, &format!("{prefix}full"), total, fits * CHUNK);
    let (one_freed, empty) = if kept {
        (fits * CHUNK, fits * CHUNK)
    } else {
        ((fits - 1) * CHUNK, 0)
    };
    expect_meminfo(out, &format!("{prefix}one-freed"), total, one_freed);
    expect_meminfo(out, &format!("{prefix}empty"), total, empty);
    assert!(
        out.ops()
            .iter()
            .any(|l| l.op == "realloc" && l.get("api") == Some(api)),
        "no realloc api={api}:\n{out}"
    );
}

/// The refusal line cuquota prints for the first piece past the quota, through `via`.
fn refusal(via: &str) -> String {
    format!(
        "GPU 0 refused {} ({CHUNK} bytes) via {via}: quota {}, in use {}, {} left",
        h(CHUNK),
        h(QUOTA),
        h(FIT * CHUNK),
        h(QUOTA - FIT * CHUNK)
    )
}

fn expect_log_count(out: &Output, body: &str, n: usize) {
    let want = format!("{}{body}", out.prefix());
    let got = out.stderr.iter().filter(|l| **l == want).count();
    assert_eq!(got, n, "expected {n}× on stderr:\n  {want}\n{out}");
}

fn expect_exit_summary(out: &Output, allocs: u64, refusals: u64, parts: &str) {
    out.check_log(&format!(
        "GPU 0 summary: peak {} ({} bytes) of quota {}, {allocs} allocations, {refusals} refusals, 0 live at exit (0 B){parts}",
        h(FIT * CHUNK),
        FIT * CHUNK,
        h(QUOTA)
    ));
}

// ---- cuda-bindings ---------------------------------------------------------------------

/// The stream-ordered entry points as cuda-bindings resolves them in `mode`.
fn async_apis(mode: Mode) -> (&'static str, &'static str, &'static str) {
    match mode {
        Mode::PerThread => (
            "cuMemAllocAsync_ptsz",
            "cuMemAllocFromPoolAsync_ptsz",
            "cuMemFreeAsync_ptsz",
        ),
        _ => (
            "cuMemAllocAsync",
            "cuMemAllocFromPoolAsync",
            "cuMemFreeAsync",
        ),
    }
}

fn bindings(mode: Mode) {
    let run = run_check("bindings_check.py", mode);
    let out = &run.out;
    out.check(0, "total_mem", &[("bytes", QUOTA)]);
    expect_meminfo(out, "start", QUOTA, 0);
    for api in ["cuMemAlloc", "cuMemAllocAsync", "cuMemAllocFromPoolAsync"] {
        expect_fill(out, api, &format!("{api}-"), QUOTA);
    }

    let (alloc_async, from_pool, free_async) = async_apis(mode);
    for via in ["cuMemAlloc_v2", alloc_async, from_pool] {
        out.check_log(&refusal(via));
    }
    assert_eq!(out.logs_starting("GPU 0 refused").len(), 3, "{out}");
    // Per API: FIT pieces + the one taken again after a free.
    let n = FIT + 1;
    // The pools' allocations were the pool cache's as they were freed (until a sync).
    let parts = format!(
        "; besides allocations at exit: pool cache 0 B (peak {})",
        h(FIT * CHUNK)
    );
    expect_exit_summary(out, 3 * n, 3, &parts);
    expect_events(
        &run,
        &[
            ("alloc", "cuMemAlloc_v2", n),
            ("alloc", alloc_async, n),
            ("alloc", from_pool, n),
            ("refused", "cuMemAlloc_v2", 1),
            ("refused", alloc_async, 1),
            ("refused", from_pool, 1),
            ("free", "cuMemFree_v2", n),
            ("free", free_async, 2 * n),
            // start, then full / one-freed / empty for each of the three APIs.
            ("meminfo", "cuMemGetInfo_v2", 10),
        ],
    );
    expect_summary(&run, 3 * n, 3);
}

#[test]
fn cuda_bindings_alloc_free_and_pools_within_the_quota() {
    bindings(Mode::Quota);
}

#[test]
fn cuda_bindings_with_the_per_thread_default_stream_uses_the_ptsz_hooks() {
    bindings(Mode::PerThread);
}

#[test]
fn cuda_bindings_without_the_interposer_sees_the_whole_device() {
    // The control: the same script and numbers with the shim alone, so the limits
    // above are cuquota's and not the shim's.
    let run = run_check("bindings_check.py", Mode::Raw);
    let out = &run.out;
    out.check(0, "total_mem", &[("bytes", DEVICE)]);
    for api in ["cuMemAlloc", "cuMemAllocAsync", "cuMemAllocFromPoolAsync"] {
        expect_fill(out, api, &format!("{api}-"), DEVICE);
    }
    assert_eq!(out.cuquota_lines(), Vec::<&str>::new(), "{out}");
}

// ---- cuda.core ---------------------------------------------------------------------------

fn core(mode: Mode) {
    let run = run_check("core_check.py", mode);
    let out = &run.out;
    expect_meminfo(out, "start", QUOTA, 0);
    // The device's default pool and a pool the resource creates and owns. cuda.core sets
    // the default pool's release threshold to the maximum: what its buffers freed stays in
    // the pool, and in the footprint, until cuquota trims it for a request that needs the
    // room (the realloc, then the owned pool's first buffer).
    expect_fill_from(out, "default", "default-", QUOTA, true);
    expect_fill(out, "owned", "owned-", QUOTA);
    // Virtual memory (cuMemCreate, which has no per-thread variant): cuda.core 1.2 never
    // releases the reference cuMemCreate gave (NVIDIA/cuda-python#2882), so the driver keeps
    // every buffer after close, and so does the quota: the room does not come back.
    let fill = out
        .ops()
        .into_iter()
        .find(|l| l.op == "fill" && l.get("api") == Some("vmm"));
    let fill = fill.unwrap_or_else(|| panic!("no fill api=vmm:\n{out}"));
    assert_eq!(fill.num("ok"), Some(FIT), "{out}");
    for when in ["vmm-full", "vmm-one-closed", "vmm-all-closed"] {
        expect_meminfo(out, when, QUOTA, FIT * CHUNK);
    }
    let (_, from_pool, free_async) = async_apis(mode);
    expect_log_count(out, &refusal(from_pool), 2);
    expect_log_count(out, &refusal("cuMemCreate"), 2);
    assert_eq!(out.logs_starting("GPU 0 refused").len(), 4, "{out}");
    let n = FIT + 1;
    out.check_log(&format!(
        "GPU 0 summary: peak {} ({} bytes) of quota {}, {} allocations, 4 refusals, \
         {FIT} live at exit ({}); besides allocations at exit: pool cache 0 B (peak {}); \
         2 trims gave back {}",
        h(FIT * CHUNK),
        FIT * CHUNK,
        h(QUOTA),
        2 * n + FIT,
        h(FIT * CHUNK),
        h(FIT * CHUNK),
        h(FIT * CHUNK + CHUNK)
    ));
    expect_events(
        &run,
        &[
            ("alloc", from_pool, 2 * n),
            ("alloc", "cuMemCreate", FIT),
            ("refused", from_pool, 2),
            ("refused", "cuMemCreate", 2),
            ("free", free_async, 2 * n),
            ("meminfo", "cuMemGetInfo_v2", 10),
        ],
    );
    let dev = &run.summary["devices"][0];
    let got = (
        dev["allocs"].as_u64(),
        dev["frees"].as_u64(),
        dev["refusals"].as_u64(),
        dev["in_use"].as_u64(),
    );
    let want = (Some(2 * n + FIT), Some(2 * n), Some(4), Some(FIT * CHUNK));
    assert_eq!(got, want, "trace summary {}:\n{out}", run.summary);
}

#[test]
fn cuda_core_memory_resources_within_the_quota() {
    core(Mode::Quota);
}

#[test]
fn cuda_core_with_the_per_thread_default_stream_uses_the_ptsz_hooks() {
    core(Mode::PerThread);
}

// ---- numba-cuda ----------------------------------------------------------------------------

fn numba(mode: Mode) {
    let run = run_check("numba_check.py", mode);
    let out = &run.out;
    let libs = out.op(0, "libs");
    let driver = artifacts().shim_dir.join("libcuda.so.1");
    assert_eq!(libs.get("driver"), driver.to_str(), "{out}");
    let venv = python().parent().unwrap().parent().unwrap();
    assert!(
        libs.get("cudart")
            .is_some_and(|p| Path::new(p).starts_with(venv)),
        "libcudart is not the venv's wheel:\n{out}"
    );
    expect_meminfo(out, "start", QUOTA, 0);
    expect_fill(out, "device_array", "", QUOTA);

    // numba flushes its deferred frees and retries once on CUDA_ERROR_OUT_OF_MEMORY, so the
    // one array too many is refused twice. cuMemAlloc_v2 has no per-thread variant: the
    // per-thread mode must change nothing here.
    expect_log_count(out, &refusal("cuMemAlloc_v2"), 2);
    assert_eq!(out.logs_starting("GPU 0 refused").len(), 2, "{out}");
    let n = FIT + 1;
    expect_exit_summary(out, n, 2, "");
    expect_events(
        &run,
        &[
            ("alloc", "cuMemAlloc_v2", n),
            ("refused", "cuMemAlloc_v2", 2),
            ("free", "cuMemFree_v2", n),
            ("meminfo", "cuMemGetInfo_v2", 5),
        ],
    );
    expect_summary(&run, n, 2);
}

#[test]
fn numba_device_arrays_within_the_quota() {
    numba(Mode::Quota);
}

#[test]
fn numba_with_the_per_thread_default_stream() {
    numba(Mode::PerThread);
}

// ---- cudarc ------------------------------------------------------------------------------

/// cudarc's per-GPU quotas: two simulated 4 GiB GPUs, capped at 1 GiB and 512 MiB.
const CUDARC_QUOTAS: [u64; 2] = [GIB, 512 * MIB];

/// Runs `tests/cudarc` (cudarc 0.19, `libloading` + a `dlsym` per function) over both GPUs;
/// with `quota`, under the interposer, else on the shim alone.
fn run_cudarc(quota: bool) -> (Output, Vec<serde_json::Value>) {
    let art = artifacts();
    // Built with the workspace, next to the interposer.
    let program = art.interposer.with_file_name("cudarc-check");
    assert!(
        program.is_file(),
        "{} is missing: build the workspace first",
        program.display()
    );
    let dir = scratch_dir("cudarc");
    let trace = dir.join("trace.jsonl");
    let mut run = Run::program(program)
        .arg(&CHUNK.to_string())
        .arg("0")
        .arg("1")
        .envs(&[
            ("CUDA_SHIM_DEVICES", "2"),
            ("CUDA_SHIM_MEMORY", "4GiB"),
            // The bindings are cudarc's `cuda-13000`.
            ("CUDA_SHIM_DRIVER_VERSION", "13000"),
            ("CUQUOTA_LIMIT", "0:1GiB,1:512MiB"),
            ("CUQUOTA_TRACE", trace.to_str().unwrap()),
        ])
        .cwd(&dir);
    if !quota {
        run = run.no_preload();
    }
    let out = run.run();
    out.check_exit(0);
    assert_eq!(
        out.ops().last().map(|l| l.op.as_str()),
        Some("done"),
        "{out}"
    );
    let events = if quota {
        fs::read_to_string(&trace)
            .unwrap_or_else(|e| panic!("read {}: {e}\n{out}", trace.display()))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    } else {
        Vec::new()
    };
    (out, events)
}

/// The line `op gpu=<gpu> <key>=<value>`.
fn gpu_line<'a>(out: &'a Output, op: &str, gpu: usize, key: &str, value: &str) -> &'a Line {
    let gpu = gpu.to_string();
    out.ops()
        .into_iter()
        .find(|l| l.op == op && l.get("gpu") == Some(&gpu) && l.get(key) == Some(value))
        .unwrap_or_else(|| panic!("no {op} gpu={gpu} {key}={value}:\n{out}"))
}

/// What cudarc saw on GPU `gpu` with `total` bytes to fill.
fn expect_cudarc_gpu(out: &Output, gpu: usize, total: u64) {
    let fits = total / CHUNK;
    let line = gpu_line(out, "total_mem", gpu, "async_alloc", "1");
    assert_eq!(line.num("bytes"), Some(total), "{out}");
    let meminfo = |when: &str, in_use: u64| {
        let line = gpu_line(out, "meminfo", gpu, "when", when);
        assert_eq!(
            (line.num("total"), line.num("free")),
            (Some(total), Some(total - in_use)),
            "{}:\n{out}",
            line.raw
        );
    };
    meminfo("start", 0);
    for api in ["alloc_zeros", "malloc_sync"] {
        let fill = gpu_line(out, "fill", gpu, "api", api);
        assert_eq!(
            (fill.num("chunk"), fill.num("ok"), fill.get("err")),
            (Some(CHUNK), Some(fits), Some("CUDA_ERROR_OUT_OF_MEMORY")),
            "{}:\n{out}",
            fill.raw
        );
        meminfo(&format!("{api}-full"), fits * CHUNK);
        meminfo(&format!("{api}-one-freed"), (fits - 1) * CHUNK);
        meminfo(&format!("{api}-empty"), 0);
        gpu_line(out, "realloc", gpu, "api", api);
    }
}

#[test]
fn cudarc_fills_each_gpus_quota_through_alloc_zeros_and_malloc_sync() {
    let (out, events) = run_cudarc(true);
    out.check(0, "devices", &[("count", 2)]);
    for (gpu, quota) in CUDARC_QUOTAS.into_iter().enumerate() {
        expect_cudarc_gpu(&out, gpu, quota);
        let fits = quota / CHUNK;
        for via in ["cuMemAllocAsync", "cuMemAlloc_v2"] {
            let line = format!(
                "GPU {gpu} refused {} ({CHUNK} bytes) via {via}: quota {}, in use {}, {} left",
                h(CHUNK),
                h(quota),
                h(fits * CHUNK),
                h(quota - fits * CHUNK)
            );
            expect_log_count(&out, &line, 1);
        }
    }
    assert_eq!(out.logs_starting("GPU 0 refused").len(), 2, "{out}");
    assert_eq!(out.logs_starting("GPU 1 refused").len(), 2, "{out}");

    // (type, api, GPU) → count.
    let mut counts = BTreeMap::new();
    let mut summary = serde_json::Value::Null;
    for e in &events {
        let kind = e["type"].as_str().unwrap();
        match kind {
            "summary" => summary = e.clone(),
            // (what the pools keep: the footprint lines, not calls)
            "header" | "footprint" | "trim" => {}
            _ => {
                let key = (
                    kind.to_string(),
                    e["api"].as_str().unwrap().to_string(),
                    e["dev"].as_u64().unwrap(),
                );
                *counts.entry(key).or_insert(0u64) += 1;
            }
        }
    }
    let mut want = BTreeMap::new();
    for (gpu, quota) in CUDARC_QUOTAS.into_iter().enumerate() {
        let gpu = gpu as u64;
        // Per API: the pieces that fit, plus the one taken again after a free.
        let n = quota / CHUNK + 1;
        for (kind, api, count) in [
            ("alloc", "cuMemAllocAsync", n),
            ("free", "cuMemFreeAsync", n),
            ("refused", "cuMemAllocAsync", 1),
            // The piece taken again after a free is, to cuquota, a retry after a refusal.
            ("backoff", "cuMemAllocAsync", 1),
            ("alloc", "cuMemAlloc_v2", n),
            ("free", "cuMemFree_v2", n),
            ("refused", "cuMemAlloc_v2", 1),
            ("backoff", "cuMemAlloc_v2", 1),
            // start, then full / one-freed / empty for each of the two APIs.
            ("meminfo", "cuMemGetInfo_v2", 7),
        ] {
            want.insert((kind.to_string(), api.to_string(), gpu), count);
        }
    }
    assert_eq!(counts, want, "trace events by (type, api, GPU):\n{out}");

    assert_eq!(summary["dropped"].as_u64(), Some(0), "{summary}");
    for (gpu, quota) in CUDARC_QUOTAS.into_iter().enumerate() {
        let fits = quota / CHUNK;
        let dev = &summary["devices"][gpu];
        let got = (
            dev["quota"].as_u64(),
            dev["allocs"].as_u64(),
            dev["frees"].as_u64(),
            dev["refusals"].as_u64(),
            dev["peak"].as_u64(),
            dev["in_use"].as_u64(),
        );
        let n = 2 * (fits + 1);
        let want = (
            Some(quota),
            Some(n),
            Some(n),
            Some(2),
            Some(fits * CHUNK),
            Some(0),
        );
        assert_eq!(
            got, want,
            "GPU {gpu} in the trace summary {summary}:\n{out}"
        );
    }
}

#[test]
fn cudarc_without_the_interposer_sees_the_whole_devices() {
    // The control: the same program with the shim alone, so the limits above are cuquota's.
    let (out, _) = run_cudarc(false);
    for gpu in 0..2 {
        expect_cudarc_gpu(&out, gpu, 4 * GIB);
    }
    assert_eq!(out.cuquota_lines(), Vec::<&str>::new(), "{out}");
}

// ---- tinygrad ----------------------------------------------------------------------------

#[test]
fn tinygrad_fills_a_gpus_quota_and_a_cross_gpu_copy_is_refused() {
    const QUOTA1: u64 = 256 * MIB;
    let art = artifacts();
    let dir = scratch_dir("tinygrad");
    let trace = dir.join("trace.jsonl");
    let script = art.workspace.join("tests/real_clients/tinygrad_check.py");
    let out = Run::program(python())
        .arg(script.to_str().unwrap())
        .arg(&QUOTA.to_string())
        .arg(&QUOTA1.to_string())
        .arg(&CHUNK.to_string())
        .envs(&[
            ("DEV", "CUDA"),
            ("CUDA_SHIM_DEVICES", "2"),
            ("CUDA_SHIM_MEMORY", "4GiB"),
            ("CUDA_SHIM_DRIVER_VERSION", "13000"),
            ("CUQUOTA_LIMIT", "0:1GiB,1:256MiB"),
            // every refusal its own line (the default prints an episode's first and its outcome)
            ("CUQUOTA_LOG_LEVEL", "debug"),
            ("CUQUOTA_TRACE", trace.to_str().unwrap()),
            ("PYTHONDONTWRITEBYTECODE", "1"),
            // tinygrad's caches (compiled kernels, downloads) stay in the scratch dir.
            ("HOME", dir.to_str().unwrap()),
            ("XDG_CACHE_HOME", dir.to_str().unwrap()),
        ])
        .cwd(&dir)
        .run();
    out.check_exit(0);
    assert_eq!(
        out.ops().last().map(|l| l.op.as_str()),
        Some("done"),
        "{out}"
    );

    let meminfo = |when: &str, in_use: u64| {
        let line = gpu_line(&out, "meminfo", 0, "when", when);
        assert_eq!(
            (line.num("total"), line.num("free")),
            (Some(QUOTA), Some(QUOTA - in_use)),
            "{}:\n{out}",
            line.raw
        );
    };
    meminfo("start", 0);
    let fill = gpu_line(&out, "fill", 0, "chunk", &CHUNK.to_string());
    assert_eq!(fill.num("ok"), Some(FIT), "{out}");
    meminfo("full", FIT * CHUNK);
    // tinygrad keeps a dropped buffer in its cache: still charged until the cache is emptied.
    meminfo("one-dropped", FIT * CHUNK);
    meminfo("one-freed", (FIT - 1) * CHUNK);
    meminfo("full-again", FIT * CHUNK);
    meminfo("empty", 0);
    let to = out.ops().into_iter().find(|l| l.op == "to");
    let to = to.unwrap_or_else(|| panic!("no `to` line:\n{out}"));
    assert_eq!(to.num("same"), Some(1), "{out}");

    // tinygrad's own error, the driver's out-of-memory as its cause.
    let text: Vec<&str> = out.stdout.lines().collect();
    let after = |what: &str| {
        let i = text
            .iter()
            .position(|l| *l == format!("refused what={what}"))
            .unwrap_or_else(|| panic!("no refused what={what}:\n{out}"));
        (text[i + 1], text[i + 2])
    };
    let cause = "cause RuntimeError: CUDA Error 2, out of memory";
    assert_eq!(
        after("fill"),
        (
            "message Allocation of 300.00 MB failed on CUDA. Used: 900.00 MB",
            cause
        ),
        "{out}"
    );
    assert_eq!(
        after("to"),
        (
            "message Allocation of 300.00 MB failed on CUDA:1. Used: 0 B",
            cause
        ),
        "{out}"
    );

    // tinygrad retries a refused allocation once after emptying its cache: two refusals
    // each time. On GPU 1 the first one still finds the small tensor's buffer in the cache.
    let full = refusal("cuMemAlloc_v2");
    expect_log_count(&out, &full, 2);
    for in_use in [256 * KIB, 0] {
        let line = format!(
            "GPU 1 refused {} ({CHUNK} bytes) via cuMemAlloc_v2: quota {}, in use {}, {} left",
            h(CHUNK),
            h(QUOTA1),
            h(in_use),
            h(QUOTA1 - in_use)
        );
        expect_log_count(&out, &line, 1);
    }

    let mut counts = BTreeMap::new();
    let mut summary = serde_json::Value::Null;
    let text = fs::read_to_string(&trace).unwrap_or_else(|e| panic!("read trace: {e}\n{out}"));
    for line in text.lines() {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        match e["type"].as_str().unwrap() {
            "summary" => summary = e,
            "header" => {}
            kind => {
                let key = (
                    kind.to_string(),
                    e["api"].as_str().unwrap().to_string(),
                    e["dev"].as_u64().unwrap(),
                );
                *counts.entry(key).or_insert(0u64) += 1;
            }
        }
    }
    let mut want = BTreeMap::new();
    for (kind, api, dev, n) in [
        // FIT, the one taken again, the small tensor, the big one moved to GPU 1.
        ("alloc", "cuMemAlloc_v2", 0, FIT + 3),
        // The cache emptied twice: of the one dropped, then of all FIT.
        ("free", "cuMemFree_v2", 0, FIT + 1),
        ("refused", "cuMemAlloc_v2", 0, 2),
        // The piece taken again after the cache was emptied.
        ("backoff", "cuMemAlloc_v2", 0, 1),
        ("meminfo", "cuMemGetInfo_v2", 0, 6),
        ("alloc", "cuMemAlloc_v2", 1, 1),
        ("free", "cuMemFree_v2", 1, 1),
        ("refused", "cuMemAlloc_v2", 1, 2),
        // GPU 1's episode: the caller gave up (its outcome line carries the out-of-memory).
        ("backoff", "cuMemAlloc_v2", 1, 1),
    ] {
        want.insert((kind.to_string(), api.to_string(), dev), n);
    }
    assert_eq!(counts, want, "trace events by (type, api, GPU):\n{out}");
    // At exit tinygrad's cache still holds the big tensor and the small one on GPU 0.
    let small = 256 * KIB;
    let devs = &summary["devices"];
    let got = |d: usize| {
        let dev = &devs[d];
        (
            dev["peak"].as_u64(),
            dev["refusals"].as_u64(),
            dev["live"].as_u64(),
            dev["in_use"].as_u64(),
        )
    };
    assert_eq!(
        got(0),
        (Some(FIT * CHUNK), Some(2), Some(2), Some(CHUNK + small)),
        "{summary}\n{out}"
    );
    assert_eq!(
        got(1),
        (Some(small), Some(2), Some(0), Some(0)),
        "{summary}\n{out}"
    );
    assert_eq!(summary["dropped"].as_u64(), Some(0), "{summary}");
}
