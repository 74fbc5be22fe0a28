//! The `cuquota` command line: `report`, `export` and `plot` on synthetic traces written
//! here (independent of the interposer), and on traces recorded from a real workload; `run`
//! with the shim.

use crate::common::{artifacts, scratch_dir, Client, GIB, MIB};
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
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

#[test]
fn report_text_and_json_on_synthetic_traces() {
    let dir = temp_dir("report");
    let (a, b) = write_traces(&dir);
    let out = ok(&["report", s(&a), s(&b)]);
    let text = stdout(&out);
    for needle in [
        "== node1 · rank 0 · pid 100 · train.py",
        "GPU 0 (Stand-in GPU, 8.00 GiB): quota 1.00 GiB, peak 1012.00 MiB (98.8%) at 3.200 ms",
        "GPU 1 (Stand-in GPU, 8.00 GiB): no quota, peak 100.00 MiB at 2.000 ms",
        "refused 800.00 MiB → 720.00 MiB; backed off, then got 500.00 MiB",
        "Live at exit: 2 allocations, 600.00 MiB",
        "API mix (calls traced, refused ones included): cuMemAlloc_v2 5, cuMemFree_v2 1, cuMemGetInfo_v2 1",
        "== node1 · rank 1 · pid 200 · train.py",
        "no summary line: the process is still running, or was killed",
        "Live at the end of the trace: 2 allocations, 512.00 MiB",
        "== job: 2 processes on 1 host",
        "1 trace without a summary (still running, or killed)",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let err = stderr(&out);
    assert!(
        err.contains("rank1.jsonl:4: incomplete last line"),
        "warning for the torn line:\n{err}"
    );

    let out = ok(&["report", "--json", s(&a), s(&b)]);
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let p0 = &json["processes"][0];
    assert_eq!(p0["pid"], 100);
    assert_eq!(p0["end"], "exit");
    assert_eq!(p0["events"], 8);
    let d0 = &p0["devices"][0];
    assert_eq!(d0["peak"], 1012 * MIB);
    assert_eq!(d0["peak_t_ns"], 3_200_000);
    assert_eq!(d0["quota"], GIB);
    assert_eq!(d0["allocs"], 2);
    assert_eq!(d0["frees"], 1);
    assert_eq!(d0["refusals"], 2);
    assert_eq!(d0["live_bytes"], 500 * MIB);
    assert_eq!(d0["meminfo_calls"], 1);
    assert_eq!(d0["timeline"].as_array().unwrap().len(), 60);
    let episodes = &p0["backoff_episodes"];
    assert_eq!(episodes["count"], 1);
    assert_eq!(episodes["recovered"], 1);
    assert_eq!(
        episodes["shown"][0]["refused"],
        serde_json::json!([800 * MIB, 720 * MIB])
    );
    assert_eq!(episodes["shown"][0]["got"], 500 * MIB);
    assert_eq!(p0["largest_allocations"][0]["bytes"], 512 * MIB);
    assert_eq!(p0["largest_allocations"][0]["live_at_exit"], false);
    let p1 = &json["processes"][1];
    assert_eq!(p1["end"], Value::Null);
    assert_eq!(p1["truncated_last_line"], true);
    assert_eq!(json["job"]["processes"], 2);
    assert_eq!(json["job"]["peak_sum"], (1012 + 100 + 512) * MIB);
    assert_eq!(json["job"]["live_bytes"], (600 + 512) * MIB);
    assert_eq!(json["job"]["unfinished"], 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_lines_name_file_and_line_unless_skipped() {
    let dir = temp_dir("bad");
    let path = dir.join("trace.jsonl");
    let mut lines = rank0();
    lines.insert(3, "{\"type\":\"alloc\",".into());
    lines.insert(5, "not json".into());
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let out = cuquota(&["report", s(&path)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("trace.jsonl:4: EOF while parsing a value at column 16"),
        "{err}"
    );
    let out = ok(&["report", "--skip-bad", s(&path)]);
    let err = stderr(&out);
    assert!(err.contains("trace.jsonl:4:") && err.contains("trace.jsonl:6: expected"));
    assert!(stdout(&out).contains("refused 800.00 MiB → 720.00 MiB"));

    let out = cuquota(&["report", "/nonexistent/trace.jsonl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent/trace.jsonl: No such file"));
    let not_trace = dir.join("other.jsonl");
    std::fs::write(&not_trace, "{\"a\":1}\n").unwrap();
    let out = cuquota(&["report", s(&not_trace)]);
    assert!(
        stderr(&out).contains(&not_a_trace(&not_trace)),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn not_a_trace(path: &Path) -> String {
    format!(
        "cuquota: {}: not a cuquota trace (its first line is not a cuquota header; traces are \
         written with CUQUOTA_TRACE=PATH or cuquota run --trace PATH)\n",
        path.display()
    )
}

/// Report, export and plot say the same one line for a file that is not a trace, whatever
/// it holds instead.
#[test]
fn not_a_trace_is_one_wording_in_every_subcommand() {
    let dir = temp_dir("notrace");
    let svg = dir.join("out.svg");
    let json = dir.join("out.json");
    let an_event = event("alloc", 1, 1, 0, 0x1, 1, 1) + "\n";
    for (name, text) in [
        ("empty", ""),
        ("text", "hello\n"),
        ("json", "{\"a\":1}\n"),
        ("event", an_event.as_str()),
    ] {
        let path = dir.join(format!("{name}.jsonl"));
        std::fs::write(&path, text).unwrap();
        for args in [
            vec!["report", s(&path)],
            vec!["report", "--json", s(&path)],
            vec!["export", s(&path), "-o", s(&json)],
            vec!["plot", s(&path), "-o", s(&svg)],
        ] {
            let out = cuquota(&args);
            assert_eq!(out.status.code(), Some(1), "{args:?}");
            assert_eq!(stderr(&out), not_a_trace(&path), "{args:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same trace given twice, or a copy of it, is one process with a warning, in the
/// report (text and JSON) and the export.
#[test]
fn the_same_trace_given_twice_is_read_once() {
    let dir = temp_dir("twice");
    let (a, _) = write_traces(&dir);
    let copy = dir.join("copy.jsonl");
    std::fs::copy(&a, &copy).unwrap();
    let out = ok(&["report", s(&a), s(&copy), s(&a)]);
    let text = stdout(&out);
    assert!(text.contains("== job: 1 process on 1 host"), "{text}");
    assert_eq!(
        text.matches("== node1 · rank 0 · pid 100").count(),
        1,
        "{text}"
    );
    let warning = |file: &Path| {
        format!(
            "cuquota: warning: {}: the trace of pid 100 on node1 (started at 1000000000 ns) is \
             also in {}; read once\n",
            file.display(),
            a.display()
        )
    };
    assert_eq!(
        stderr(&out),
        warning(&copy)
            + &format!(
                "cuquota: warning: {}: given twice; read once\n",
                a.display()
            )
    );
    let out = ok(&["report", "--json", s(&a), s(&copy)]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["job"]["processes"], 1);
    assert_eq!(json["job"]["refusals"], 2);
    let chrome = dir.join("chrome.json");
    ok(&["export", s(&a), s(&copy), "-o", s(&chrome)]);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&chrome).unwrap()).unwrap();
    let names = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .count();
    assert_eq!(names, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn export_chrome_has_counters_and_refusals() {
    let dir = temp_dir("export");
    let (a, b) = write_traces(&dir);
    let json_path = dir.join("trace.json");
    ok(&[
        "export",
        "--format",
        "chrome",
        s(&a),
        s(&b),
        "-o",
        s(&json_path),
    ]);
    let doc: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let of = |ph: &str, name: &str, pid: u64| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["ph"] == ph && e["name"] == name && e["pid"] == pid)
            .collect()
    };
    let names = of("M", "process_name", 100);
    assert_eq!(names.len(), 1);
    assert_eq!(
        names[0]["args"]["name"],
        "rank 0 · node1 pid 100 · train.py"
    );
    assert_eq!(of("M", "process_name", 200).len(), 1);

    let in_use: Vec<(f64, u64)> = of("C", "GPU 0 in use", 100)
        .iter()
        .map(|e| {
            (
                e["ts"].as_f64().unwrap(),
                e["args"]["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let values: Vec<u64> = in_use.iter().map(|v| v.1).collect();
    assert_eq!(
        values,
        [512 * MIB, 1012 * MIB, 500 * MIB, 500 * MIB],
        "one counter per change, and one at the end"
    );
    assert_eq!(in_use[0].0, 1000.0, "µs since the earliest start");
    assert!(in_use.windows(2).all(|w| w[0].0 <= w[1].0));
    let quota = of("C", "GPU 0 quota", 100);
    assert!(!quota.is_empty() && quota.iter().all(|e| e["args"]["bytes"] == GIB));
    assert!(of("C", "GPU 1 quota", 100).is_empty(), "GPU 1 is unlimited");
    // Rank 1 started 0.5 ms later: its clock is shifted onto the job's.
    let r1 = of("C", "GPU 0 in use", 200);
    assert_eq!(r1[0]["ts"].as_f64().unwrap(), 1500.0);

    let refusals: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "i" && e["args"]["reason"] == "quota")
        .collect();
    assert_eq!(refusals.len(), 2);
    assert_eq!(refusals[0]["name"], "GPU 0 refused 800.00 MiB (quota)");
    assert_eq!(refusals[0]["tid"], 1);
    assert_eq!(refusals[0]["ts"].as_f64().unwrap(), 3000.0);
    assert!(events
        .iter()
        .any(|e| e["ph"] == "i" && e["args"]["sizes"].as_array().is_some_and(|s| s.len() == 3)));

    // To stdout with `-o -`.
    let out = ok(&["export", "--format", "chrome", s(&a), "-o", "-"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!doc["traceEvents"].as_array().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plot_draws_one_panel_per_process_and_device() {
    let dir = temp_dir("plot");
    let (a, b) = write_traces(&dir);
    let svg_path = dir.join("memory.svg");
    ok(&["plot", s(&a), s(&b), "-o", s(&svg_path)]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let elements = xml::parse(&svg).unwrap_or_else(|e| panic!("not XML: {e}"));
    let root = &elements[0];
    assert_eq!(root.name, "svg");
    // The time axis spans the events (rank 0's first at 1 ms of the job, its last at 4 ms),
    // not the processes' quiet starts, and says where its zero is.
    assert_eq!(root.attr("data-time-from-ns"), Some("1000000"));
    assert_eq!(root.attr("data-time-to-ns"), Some("4000000"));
    let texts = xml::texts(&svg);
    let has = |t: &str| texts.iter().any(|x| x == t);
    assert!(
        has("rank 0 · pid 100 · node1 · GPU 0 (Stand-in GPU) · peak 1012.00 MiB · quota 1.00 GiB · 2 refused"),
        "{texts:?}"
    );
    assert!(
        has("time (ms) since the first event, 1.000 ms after the first process started"),
        "{texts:?}"
    );
    // The title names the program and the traces.
    assert!(has("Device memory in use: train.py"), "{texts:?}");
    // Both traces, each clipped from its start to 43 characters.
    let clip = |p: &Path| {
        let p = p.display().to_string();
        let n = p.chars().count();
        if n <= 43 {
            p
        } else {
            format!("…{}", p.chars().skip(n - 42).collect::<String>())
        }
    };
    assert!(
        has(&format!("trace: {}, {}", clip(&a), clip(&b))),
        "{texts:?}"
    );
    // Small multiples: one panel per process and GPU, in order, each with one in-use line.
    let with = |name: &str, class: &str| -> Vec<&xml::Element> {
        elements
            .iter()
            .filter(|e| e.name == name && e.attr("class") == Some(class))
            .collect()
    };
    let panels: Vec<&str> = with("g", "panel")
        .iter()
        .filter_map(|e| e.attr("data-label"))
        .collect();
    assert_eq!(
        panels,
        [
            "rank 0 · pid 100 · node1 · GPU 0 (Stand-in GPU)",
            "rank 0 · pid 100 · node1 · GPU 1 (Stand-in GPU)",
            "rank 1 · pid 200 · node1 · GPU 0 (Stand-in GPU)",
        ]
    );
    assert_eq!(with("polyline", "in-use").len(), 3);
    let areas = with("rect", "plot-area");
    assert_eq!(areas.len(), 3);
    let num = |e: &xml::Element, k: &str| -> f64 { e.attr(k).unwrap().parse().unwrap() };
    // A shared time axis: the same x extent in every panel, time labels under the last only.
    assert!(areas
        .iter()
        .all(|r| num(r, "x") == num(areas[0], "x") && num(r, "width") == num(areas[0], "width")));
    let last_top = num(areas[2], "y");
    let x_ticks = with("text", "x-tick");
    assert!(!x_ticks.is_empty());
    assert!(x_ticks
        .iter()
        .all(|t| num(t, "y") > last_top + num(areas[2], "height")));
    // The legend lies right of the data, inside the picture.
    let legend = with("rect", "legend-box")[0];
    let right_of_data = num(areas[0], "x") + num(areas[0], "width");
    assert!(num(legend, "x") > right_of_data, "legend over the data");
    assert!(num(legend, "x") + num(legend, "width") <= num(root, "width"));
    for label in [
        "in use",
        "quota",
        "refused (marked at",
        "in use + the request)",
    ] {
        assert!(has(label), "no {label:?} in {texts:?}");
    }
    // Quotas: dark and dashed, for the two limited GPUs only.
    let quotas = with("line", "quota");
    assert_eq!(quotas.len(), 2);
    assert!(quotas
        .iter()
        .all(|q| q.attr("stroke") == Some("#222222") && q.attr("stroke-dasharray").is_some()));
    // Rank 0 GPU 0: y to 1.5 GiB (the refusal of 800 MiB at 512 MiB in use reaches 1.28 GiB);
    // the quota of 1 GiB two thirds up, the first refusal mark at 1312 MiB.
    let p0 = with("g", "panel")[0];
    assert_eq!(
        (p0.attr("data-y-max"), p0.attr("data-unit")),
        (Some("1.5"), Some("GiB"))
    );
    let (top, height) = (num(areas[0], "y"), num(areas[0], "height"));
    let level = |y: f64| (top + height - y) / height * 1.5;
    assert!((level(num(quotas[0], "y1")) - 1.0).abs() < 0.01);
    let marks = with("path", "refusal");
    assert_eq!(marks.len(), 2);
    let d = marks[0].attr("d").unwrap();
    let centre: f64 = d
        .split(['L', 'M', ','])
        .nth(2)
        .unwrap()
        .parse::<f64>()
        .unwrap()
        + 5.0;
    assert!((level(centre) - 1312.0 / 1024.0).abs() < 0.01, "{d}");
    // Nothing runs off the picture: every text starts inside it.
    let (w, h) = (num(root, "width"), num(root, "height"));
    for t in elements
        .iter()
        .filter(|e| e.name == "text" && e.attr("x").is_some())
    {
        assert!((0.0..w).contains(&num(t, "x")) && (0.0..h).contains(&num(t, "y")));
    }

    // One process: panels name just the device.
    ok(&["plot", s(&a), "-o", s(&svg_path)]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let elements = xml::parse(&svg).unwrap();
    assert!(elements
        .iter()
        .any(|e| e.attr("data-label") == Some("GPU 1 (Stand-in GPU)")));
    let texts = xml::texts(&svg);
    assert!(texts
        .iter()
        .any(|t| t == "time (ms) since the first event, 1.000 ms after the process started"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace without a single device-memory event has nothing to plot: an error, not an
/// empty chart.
#[test]
fn plot_of_a_trace_without_events_fails() {
    let dir = temp_dir("plot-empty");
    let path = dir.join("quiet.jsonl");
    std::fs::write(&path, header(9, 0, 0, &[(0, Some(GIB))]) + "\n").unwrap();
    let svg = dir.join("quiet.svg");
    let out = cuquota(&["plot", s(&path), "-o", s(&svg)]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "cuquota: {}: no device-memory events to plot (the program made no allocation, \
             free, refusal or memory query)\n",
            path.display()
        )
    );
    assert!(!svg.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn large_traces_stream_in_flat_memory() {
    let dir = temp_dir("large");
    let path = dir.join("big.jsonl");
    let mut text = header(7, 0, 0, &[(0, Some(GIB))]);
    text.push('\n');
    for i in 0..128 * 1500u64 {
        let ptr = 0x1000 + (i % 64) * 0x1000;
        if i % 128 < 64 {
            text.push_str(&event(
                "alloc",
                i * 1000,
                1,
                0,
                ptr,
                MIB,
                (i % 64 + 1) * MIB,
            ));
        } else {
            text.push_str(&event(
                "free",
                i * 1000,
                1,
                0,
                ptr,
                MIB,
                (63 - i % 64) * MIB,
            ));
        }
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    let out = ok(&["report", "--json", s(&path)]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &json["processes"][0]["devices"][0];
    assert_eq!(d["allocs"], 96_000);
    assert_eq!(d["frees"], 96_000);
    assert_eq!(d["peak"], 64 * MIB);
    assert_eq!(d["live"], 0);
    assert_eq!(
        json["processes"][0]["largest_allocations"]
            .as_array()
            .unwrap()
            .len(),
        10
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- `run` and recorded traces (need the interposer and the shim) ------------

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

/// A small XML well-formedness checker, enough for the SVG plotters writes: nested,
/// matching tags, quoted attributes, known entities, one root.
mod xml {
    pub struct Element {
        pub name: String,
        pub attrs: Vec<(String, String)>,
    }

    impl Element {
        pub fn attr(&self, name: &str) -> Option<&str> {
            self.attrs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        }
    }

    fn check_text(text: &str) -> Result<(), String> {
        let mut rest = text;
        while let Some(at) = rest.find('&') {
            let end = rest[at..].find(';').ok_or("unterminated entity")? + at;
            let entity = &rest[at + 1..end];
            let known = ["amp", "lt", "gt", "quot", "apos"].contains(&entity)
                || entity.strip_prefix('#').is_some_and(|n| {
                    n.parse::<u32>().is_ok()
                        || n.strip_prefix('x')
                            .is_some_and(|h| u32::from_str_radix(h, 16).is_ok())
                });
            if !known {
                return Err(format!("unknown entity &{entity};"));
            }
            rest = &rest[end + 1..];
        }
        Ok(())
    }

    /// Every element, in document order.
    pub fn parse(doc: &str) -> Result<Vec<Element>, String> {
        let mut elements = Vec::new();
        let mut open: Vec<String> = Vec::new();
        let mut roots = 0;
        let mut rest = doc;
        while let Some(lt) = rest.find('<') {
            let text = &rest[..lt];
            if open.is_empty() && !text.trim().is_empty() {
                return Err(format!("text outside the root: {text:?}"));
            }
            check_text(text)?;
            rest = &rest[lt..];
            if let Some(body) = rest.strip_prefix("<?") {
                rest = &body[body.find("?>").ok_or("unterminated <?")? + 2..];
                continue;
            }
            if let Some(body) = rest.strip_prefix("<!--") {
                rest = &body[body.find("-->").ok_or("unterminated comment")? + 3..];
                continue;
            }
            let gt = rest.find('>').ok_or("unterminated tag")?;
            let tag = &rest[1..gt];
            rest = &rest[gt + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                match open.pop() {
                    Some(o) if o == name.trim() => continue,
                    o => return Err(format!("</{name}> closes {o:?}")),
                }
            }
            let (tag, empty) = match tag.strip_suffix('/') {
                Some(t) => (t, true),
                None => (tag, false),
            };
            let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
            let name = &tag[..name_end];
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_alphanumeric() || "-_:".contains(c))
            {
                return Err(format!("bad tag name {name:?}"));
            }
            let mut attrs = Vec::new();
            let mut a = tag[name_end..].trim_start();
            while !a.is_empty() {
                let eq = a
                    .find('=')
                    .ok_or(format!("attribute without value in <{name}"))?;
                let key = a[..eq].trim().to_string();
                let quoted = a[eq + 1..].trim_start();
                let q = quoted.chars().next().filter(|c| *c == '"' || *c == '\'');
                let q = q.ok_or(format!("unquoted attribute {key} in <{name}"))?;
                let close = quoted[1..].find(q).ok_or("unterminated attribute")? + 1;
                let value = &quoted[1..close];
                if value.contains('<') {
                    return Err(format!("< in attribute {key}"));
                }
                check_text(value)?;
                if attrs.iter().any(|(k, _)| *k == key) {
                    return Err(format!("duplicate attribute {key} in <{name}"));
                }
                attrs.push((key, value.to_string()));
                a = quoted[close + 1..].trim_start();
            }
            if open.is_empty() {
                roots += 1;
            }
            elements.push(Element {
                name: name.to_string(),
                attrs,
            });
            if !empty {
                open.push(name.to_string());
            }
        }
        if !open.is_empty() || roots != 1 || !rest.trim().is_empty() {
            return Err(format!("{} unclosed, {roots} roots", open.len()));
        }
        Ok(elements)
    }

    /// The text content of every `<text>` element, unescaped.
    pub fn texts(doc: &str) -> Vec<String> {
        doc.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = &t[t.find('>')? + 1..t.find("</text>")?];
                Some(
                    body.trim()
                        .replace("&lt;", "<")
                        .replace("&gt;", ">")
                        .replace("&quot;", "\"")
                        .replace("&apos;", "'")
                        .replace("&amp;", "&"),
                )
            })
            .collect()
    }

    #[test]
    fn the_checker_rejects_what_it_should() {
        assert!(parse("<a><b x=\"1\"/></a>").is_ok());
        assert!(parse("<a><b></a>").is_err());
        assert!(parse("<a x=1/>").is_err());
        assert!(parse("<a/><b/>").is_err());
        assert!(parse("<a>&nbsp;</a>").is_err());
        assert!(parse("<a>&amp;&#32;&#x20;</a>").is_ok());
    }
}

// ---- `cuquota run` checks its values first, needs no `--`; help on every argument

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
/// itself (no CUQUOTA_LIB) and enforces against the installed stand-in.
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
    let out = cmd
        .env("LD_LIBRARY_PATH", prefix.join("share/cuquota/shim"))
        .args([
            "run",
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

/// "1 refusal", not "1 refusals"; a block reused at one address is one "largest" line with
/// its count.
#[test]
fn report_counts_of_one_and_distinct_largest_allocations() {
    let dir = temp_dir("singular");
    let path = dir.join("t.jsonl");
    let mut lines = vec![header(7, 0, 1_000_000_000, &[(0, Some(GIB))])];
    for i in 0..3u64 {
        lines.push(event(
            "alloc",
            1000 + i * 2000,
            1,
            0,
            0xa000,
            64 * MIB,
            64 * MIB,
        ));
        lines.push(event("free", 2000 + i * 2000, 1, 0, 0xa000, 64 * MIB, 0));
    }
    lines.push(event("refused", 9000, 1, 0, 0, 2 * GIB, 0));
    lines.push(event("alloc", 10_000, 1, 0, 0xb000, MIB, MIB));
    lines.push(
        r#"{"type":"summary","t_ns":11000,"end":"exit","events":8,"dropped":0,"devices":[]}"#
            .into(),
    );
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let text = stdout(&ok(&["report", s(&path)]));
    for needle in [
        "     4 allocations (193.00 MiB in all), 3 frees, 1 refusal (1 by quota, 0 by the driver), 1 live (1.00 MiB)",
        "   Largest allocations (the same address and size again counts as one):\n        64.00 MiB  GPU 0  cuMemAlloc_v2  0xa000  3 times, first at 1 µs\n         1.00 MiB  GPU 0  cuMemAlloc_v2  0xb000  at 10 µs  (still live)\n",
        "   Live at exit: 1 allocation, 1.00 MiB",
        "total: peaks add up to 64.00 MiB; 1 refusal in 1 back-off episode; 1 allocation (1.00 MiB) live at the end; 8 events",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let json: Value = serde_json::from_slice(&ok(&["report", "--json", s(&path)]).stdout).unwrap();
    let largest = &json["processes"][0]["largest_allocations"];
    assert_eq!(largest.as_array().unwrap().len(), 2);
    assert_eq!(largest[0]["count"], 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Counting the footprint (tests/golden/footprint.jsonl, its golden trace):
/// `plot` stacks the parts under the in-use line with a legend entry each and marks the
/// trims; `export` writes a counter track per part with the exact figures, and names the
/// refused graph launch and context.
#[test]
fn plot_and_export_show_the_footprint_by_part() {
    let dir = temp_dir("footprint");
    let trace = artifacts().workspace.join("tests/golden/footprint.jsonl");
    let svg_path = dir.join("memory.svg");
    ok(&["plot", s(&trace), "-o", s(&svg_path)]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let elements = xml::parse(&svg).unwrap_or_else(|e| panic!("not XML: {e}"));
    let parts: Vec<&str> = elements
        .iter()
        .filter(|e| e.name == "polygon" && e.attr("class") == Some("part"))
        .filter_map(|e| e.attr("data-part"))
        .collect();
    // Drawn top of the stack first, each covering the ones above it from the baseline.
    assert_eq!(parts, ["context", "graph", "pool_cache", "allocations"]);
    let trims = elements
        .iter()
        .filter(|e| e.name == "path" && e.attr("class") == Some("trim"))
        .count();
    assert_eq!(trims, 2);
    let texts = xml::texts(&svg);
    for label in [
        "in use: the footprint",
        "context",
        "graph memory",
        "pool cache",
        "allocations",
        "cuquota trimmed pools",
        "GPU 0 (cuquota stand-in GPU 0) · footprint peak 1020.00 MiB · quota 1.00 GiB · 2 refused",
    ] {
        assert!(
            texts.iter().any(|t| t == label),
            "no {label:?} in {texts:?}"
        );
    }
    let legend: Vec<&str> = elements
        .iter()
        .filter_map(|e| e.attr("class"))
        .filter(|c| c.starts_with("legend-") && *c != "legend-box")
        .collect();
    assert_eq!(
        legend,
        [
            "legend-in-use",
            "legend-context",
            "legend-graph",
            "legend-pool_cache",
            "legend-allocations",
            "legend-trim",
            "legend-quota",
            "legend-refused"
        ]
    );
    // An older trace draws no parts.
    let older = artifacts().workspace.join("tests/golden/normal.jsonl");
    ok(&["plot", s(&older), "-o", s(&svg_path)]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(!svg.contains("class=\"part\"") && !svg.contains("class=\"trim\""));
    assert!(!svg.contains("footprint"));

    let out = ok(&["export", "--format", "chrome", s(&trace), "-o", "-"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let track = |name: &str| -> Vec<(f64, u64)> {
        events
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == name)
            .map(|e| {
                (
                    e["ts"].as_f64().unwrap(),
                    e["args"]["bytes"].as_u64().unwrap() / MIB,
                )
            })
            .collect()
    };
    assert_eq!(
        track("GPU 0 context"),
        [(100.0, 300), (950.0, 300)],
        "set once, and held to the end"
    );
    assert_eq!(
        track("GPU 0 pool cache"),
        [(100.0, 0), (400.5, 128), (600.0, 0), (950.0, 0)]
    );
    assert_eq!(
        track("GPU 0 graph memory"),
        [(100.0, 0), (700.0, 64), (800.0, 0), (950.0, 0)]
    );
    assert_eq!(
        track("GPU 0 allocations"),
        [
            (100.0, 0),
            (200.0, 256),
            (300.0, 384),
            (400.0, 256),
            (600.5, 656),
            (900.0, 400),
            (950.0, 400)
        ]
    );
    let instants: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "i")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        instants,
        [
            "GPU 0 trimmed 128.00 MiB of pool cache",
            "GPU 0 trimmed 64.00 MiB of graph memory",
            "GPU 0 refused graph launch needing 512.00 MiB (quota)",
            "GPU 0 refused a new context (300.00 MiB) (quota)",
        ]
    );
    // An older trace has no part tracks.
    let out = ok(&["export", "--format", "chrome", s(&older), "-o", "-"]);
    let text = stdout(&out);
    assert!(!text.contains("allocations\"") && !text.contains("context\""));
    let _ = std::fs::remove_dir_all(&dir);
}
