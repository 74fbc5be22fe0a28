//! `cuquota export` and `cuquota plot` on synthetic traces and on the golden footprint
//! trace: the Chrome trace's counters and refusals, the SVG's panels and series, large
//! traces in flat memory.

use super::{cuquota, event, header, ok, s, stderr, stdout, temp_dir, write_traces, xml};
use crate::common::{artifacts, plot_title_path, scratch_dir, Client, Run, GIB, MIB};
use serde_json::Value;

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
    let clip = plot_title_path;
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

/// `plot` accounts for every refusal: the demo's back-off (refusals microseconds apart, so
/// that most share a time bucket) is drawn as crosses, each with its count beside it when it
/// stands for more than one, and the crosses' counts add up to the refusals in the trace.
#[test]
fn plot_accounts_for_every_refusal() {
    let dir = scratch_dir("plot-refusals");
    let trace = dir.join("bfc.jsonl");
    let out = Run::client(Client::Bfc)
        .env("CUQUOTA_LIMIT", "6GiB")
        .env("CUQUOTA_TRACE", trace.to_str().unwrap())
        .run();
    out.check_exit(0);
    let refusals = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"type\":\"refused\""))
        .count();
    assert_eq!(refusals, 7, "the demo's back-off");
    let svg = dir.join("bfc.svg");
    Run::program(&artifacts().cli)
        .no_preload()
        .args(&["plot", trace.to_str().unwrap(), "-o", svg.to_str().unwrap()])
        .run()
        .check_exit(0);
    let svg = std::fs::read_to_string(&svg).unwrap();
    let crosses = svg.matches("class=\"refusal\"").count();
    let counted: Vec<usize> = svg
        .split("class=\"refusals\"")
        .skip(1)
        .map(|rest| {
            let text = &rest[rest.find('>').unwrap() + 1..rest.find('<').unwrap()];
            text.trim_start_matches('×').parse().unwrap()
        })
        .collect();
    // A cross without a count stands for one refusal.
    let marked = counted.iter().sum::<usize>() + (crosses - counted.len());
    assert_eq!(marked, refusals, "{crosses} crosses, counts {counted:?}");
}
