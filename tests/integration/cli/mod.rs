//! The `cuquota` command line: `report`, `export` and `plot` on synthetic traces written
//! here (independent of the interposer), and on traces recorded from a real workload; `run`
//! with the shim.

// `report` on synthetic traces: totals, bad lines, files that are not traces, duplicates.
mod report;
// `export` and `plot` on synthetic and golden traces.
mod export_plot;
// `run` with the interposer and the shim, recorded traces, help, the install script.
mod run;
// The SVG checker the plot tests use (and the views' tests of foreign strings).
pub(crate) mod xml;

use crate::common::{artifacts, GIB, MIB};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cuquota(args: &[&str]) -> Output {
    Command::new(&artifacts().cli)
        .args(args)
        .env_remove("CUQUOTA_LIB")
        .output()
        .expect("run cuquota")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(args: &[&str]) -> Output {
    let out = cuquota(args);
    assert!(
        out.status.success(),
        "cuquota {args:?} failed:\n{}\n{}",
        stderr(&out),
        stdout(&out)
    );
    out
}

/// A temporary directory that does not need the interposer built.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cuquota-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

// ---- synthetic traces -----------------------------------------------------------------

fn header(pid: u32, rank: u32, start_ns: u64, devices: &[(i32, Option<u64>)]) -> String {
    let devices: Vec<Value> = devices
        .iter()
        .map(|(d, q)| {
            serde_json::json!({"ordinal": d, "name": "Stand-in GPU", "total": 8 * GIB, "quota": q})
        })
        .collect();
    serde_json::json!({
        "type": "header", "schema": 1, "version": "0.1.0", "pid": pid, "host": "node1",
        "rank": rank, "argv": ["train.py"], "start_unix_ns": start_ns, "mode": "enforce",
        "devices": devices,
    })
    .to_string()
}

#[allow(clippy::too_many_arguments)]
fn event(kind: &str, t: u64, tid: u32, dev: i32, ptr: u64, bytes: u64, in_use: u64) -> String {
    let (result, extra) = match kind {
        "refused" => ("CUDA_ERROR_OUT_OF_MEMORY", r#","reason":"quota""#),
        _ => ("CUDA_SUCCESS", ""),
    };
    let api = if kind == "free" {
        "cuMemFree_v2"
    } else {
        "cuMemAlloc_v2"
    };
    format!(
        r#"{{"type":"{kind}","t_ns":{t},"tid":{tid},"dev":{dev},"api":"{api}","ptr":"{ptr:#x}","bytes":{bytes},"result":"{result}","in_use":{in_use}{extra}}}"#
    )
}

/// Two devices; GPU 0 under a 1 GiB quota with a back-off episode, GPU 1 unlimited.
fn rank0() -> Vec<String> {
    vec![
        header(100, 0, 1_000_000_000, &[(0, Some(GIB)), (1, None)]),
        event("alloc", 1_000_000, 1, 0, 0x1000, 512 * MIB, 512 * MIB),
        event("alloc", 2_000_000, 1, 1, 0x9000, 100 * MIB, 100 * MIB),
        event("refused", 3_000_000, 1, 0, 0, 800 * MIB, 512 * MIB),
        event("refused", 3_100_000, 1, 0, 0, 720 * MIB, 512 * MIB),
        event("alloc", 3_200_000, 1, 0, 0x2000, 500 * MIB, 1012 * MIB),
        r#"{"type":"backoff","t_ns":3200000,"tid":1,"dev":0,"api":"cuMemAlloc_v2","ptr":"0x2000","bytes":524288000,"result":"CUDA_SUCCESS","in_use":1061158912,"sizes":[838860800,754974720,524288000]}"#.into(),
        r#"{"type":"meminfo","t_ns":3300000,"tid":1,"dev":0,"api":"cuMemGetInfo_v2","ptr":"0x0","bytes":0,"result":"CUDA_SUCCESS","in_use":1061158912,"told_free":12582912,"told_total":1073741824,"real_free":7516192768,"real_total":8589934592}"#.into(),
        event("free", 4_000_000, 1, 0, 0x1000, 512 * MIB, 500 * MIB),
        r#"{"type":"summary","t_ns":5000000,"end":"exit","events":8,"dropped":0,"devices":[]}"#.into(),
    ]
}

/// A second rank, killed: no summary, and a torn last line.
fn rank1_killed() -> String {
    let lines = [
        header(200, 1, 1_000_500_000, &[(0, Some(GIB))]),
        event("alloc", 1_000_000, 5, 0, 0x5000, 256 * MIB, 256 * MIB),
        event("alloc", 2_000_000, 5, 0, 0x6000, 256 * MIB, 512 * MIB),
    ];
    let torn = &event("alloc", 3_000_000, 5, 0, 0x7000, 1, 1)[..50];
    format!("{}\n{torn}", lines.join("\n"))
}

fn write_traces(dir: &Path) -> (PathBuf, PathBuf) {
    let a = dir.join("rank0.jsonl");
    let b = dir.join("rank1.jsonl");
    std::fs::write(&a, rank0().join("\n") + "\n").unwrap();
    std::fs::write(&b, rank1_killed()).unwrap();
    (a, b)
}
