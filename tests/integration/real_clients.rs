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
fn python() -> &'static Path {
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
    expect_meminfo(
        out,
        &format!("{prefix}one-freed"),
        total,
        (fits - 1) * CHUNK,
    );
    expect_meminfo(out, &format!("{prefix}empty"), total, 0);
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

fn expect_exit_summary(out: &Output, allocs: u64, refusals: u64) {
    out.check_log(&format!(
        "GPU 0 summary: peak {} ({} bytes) of quota {}, {allocs} allocations, {refusals} refusals, 0 live at exit (0 B)",
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
    expect_exit_summary(out, 3 * n, 3);
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
    // The device's default pool and a pool the resource creates and owns.
    for api in ["default", "owned"] {
        expect_fill(out, api, &format!("{api}-"), QUOTA);
    }
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
         {FIT} live at exit ({})",
        h(FIT * CHUNK),
        FIT * CHUNK,
        h(QUOTA),
        2 * n + FIT,
        h(FIT * CHUNK)
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
    expect_exit_summary(out, n, 2);
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
