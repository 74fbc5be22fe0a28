//! `CUQUOTA_STACKS`: the call stack of each allocation, recorded by the interposer and
//! symbolised by `cuquota report`. The client (tests/clients/stacks_client.c) makes one
//! allocation of each kind from a function of its own name; built with and without frame
//! pointers, and without debug info.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Each allocation of the client: its entry point, the function that makes it, and the text
/// of its call (to find the line in the source).
const SITES: [(&str, &str, &str); 6] = [
    ("cuMemAlloc_v2", "load_weights", "cuMemAlloc_v2(out"),
    (
        "cuMemAllocPitch_v2",
        "make_scratch",
        "cuMemAllocPitch_v2(out",
    ),
    ("cuMemAllocManaged", "share_table", "cuMemAllocManaged(out"),
    ("cuMemAllocAsync", "pool_request", "cuMemAllocAsync(out"),
    ("cuMemCreate", "map_chunk", "cuMemCreate(out"),
    ("cuArrayCreate_v2", "make_texture", "cuArrayCreate_v2(out"),
];

/// The line of `call` in the client's source.
fn source_line(call: &str) -> u64 {
    let src = artifacts().workspace.join("tests/clients/stacks_client.c");
    let text = std::fs::read_to_string(src).unwrap();
    let at = text.lines().position(|l| l.contains(call)).unwrap();
    at as u64 + 1
}

/// Runs `program` in `cwd` with a trace (relative to `cwd`) and `env`; returns the trace.
fn traced(program: &Path, cwd: &Path, env: &[(&str, &str)]) -> PathBuf {
    let out = Run::program(program)
        .cwd(cwd)
        .env("CUQUOTA_TRACE", "t.jsonl")
        .env("CUQUOTA_COUNT", "allocations")
        .env("CUQUOTA_LIMIT", "4GiB")
        .envs(env)
        .run();
    assert!(out.status.success() && out.stdout.trim() == "ok", "{out}");
    cwd.join("t.jsonl")
}

/// `cuquota report --json TRACE ARGS…` run in `cwd`: the report and stderr.
fn report(trace: &Path, cwd: &Path, args: &[&str]) -> (Value, String) {
    let mut all = vec!["report", "--json", trace.to_str().unwrap()];
    all.extend(args);
    let out = cuquota_ok(&all, Some(cwd));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

fn text_report(trace: &Path, cwd: &Path) -> String {
    let out = cuquota_ok(&["report", trace.to_str().unwrap()], Some(cwd));
    String::from_utf8(out.stdout).unwrap()
}

fn trace_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The successful allocations of the trace by entry point: (bytes, stack id).
fn allocations(lines: &[Value]) -> Vec<(String, u64, u64)> {
    lines
        .iter()
        .filter(|l| l["type"] == "alloc")
        .map(|l| {
            (
                l["api"].as_str().unwrap().to_string(),
                l["bytes"].as_u64().unwrap(),
                l["stack"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The report's largest allocations: entry point → its site (null if none).
fn sites(report: &Value) -> Vec<(String, Value)> {
    report["processes"][0]["largest_allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["api"].as_str().unwrap().to_string(), a["site"].clone()))
        .collect()
}

/// Every allocation names the function that made it, with its file and line when built
/// with -g; the live bytes at the peak by call site are the allocations' own; a report run
/// from another directory than the traced program's finds it all.
fn names_every_site(binary: &str, with_lines: bool) {
    let run_dir = scratch_dir(&format!("stacks-{binary}"));
    let trace = traced(
        &artifacts().clients_dir.join(binary),
        &run_dir,
        &[("CUQUOTA_STACKS", "16")],
    );
    let lines = trace_lines(&trace);
    let allocs = allocations(&lines);
    assert_eq!(allocs.len(), SITES.len(), "{allocs:?}");
    // Six call sites, six stacks, each written once before its first use.
    let stack_lines: Vec<&Value> = lines.iter().filter(|l| l["type"] == "stack").collect();
    assert_eq!(stack_lines.len(), SITES.len());
    for (_, _, stack) in &allocs {
        let pos = |f: &dyn Fn(&Value) -> bool| lines.iter().position(f).unwrap();
        let defined = pos(&|l| l["type"] == "stack" && l["id"].as_u64() == Some(*stack));
        let used = pos(&|l| l["type"] == "alloc" && l["stack"].as_u64() == Some(*stack));
        assert!(defined < used, "stack {stack}");
    }
    // Stack and module lines keep the file in time order.
    let times: Vec<u64> = lines.iter().filter_map(|l| l["t_ns"].as_u64()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(
        times.len(),
        lines.len() - 1,
        "every line but the header has t_ns"
    );
    let program = std::fs::canonicalize(artifacts().clients_dir.join(binary)).unwrap();
    let module = lines
        .iter()
        .find(|l| l["type"] == "module" && l["path"] == program.to_str().unwrap())
        .unwrap_or_else(|| panic!("no module line for {}", program.display()));
    assert_eq!(module["build_id"].as_str().unwrap().len(), 40, "{module}");

    let elsewhere = scratch_dir(&format!("stacks-{binary}-report"));
    let (report, _) = report(&trace, &elsewhere, &[]);
    let got = sites(&report);
    assert_eq!(got.len(), SITES.len());
    for (api, function, call) in SITES {
        let site = &got.iter().find(|(a, _)| a == api).unwrap().1;
        assert_eq!(site["function"], function, "{api}: {site}");
        assert_eq!(site["module"], program.to_str().unwrap(), "{api}: {site}");
        if with_lines {
            let file = site["file"].as_str().unwrap_or_default();
            assert!(file.ends_with("stacks_client.c"), "{api}: {site}");
            assert_eq!(
                site["line"].as_u64(),
                Some(source_line(call)),
                "{api}: {site}"
            );
        } else {
            assert!(
                site.get("file").is_none() && site.get("line").is_none(),
                "{site}"
            );
        }
    }
    // At the peak all six were live (the scratch buffer is freed last): each site holds
    // exactly its allocation's bytes, and together the peak.
    let p = &report["processes"][0];
    let dev = &p["devices"][0];
    let by_site = dev["by_call_site"].as_array().unwrap();
    assert_eq!(by_site.len(), SITES.len(), "{by_site:?}");
    for (api, function, _) in SITES {
        let bytes = allocs.iter().find(|(a, _, _)| a == api).unwrap().1;
        let entry = by_site
            .iter()
            .find(|s| s["site"]["function"] == function)
            .unwrap_or_else(|| panic!("{function} in {by_site:?}"));
        assert_eq!(
            (entry["bytes"].as_u64(), entry["allocations"].as_u64()),
            (Some(bytes), Some(1))
        );
    }
    let sum: u64 = allocs.iter().map(|a| a.1).sum();
    assert_eq!(dev["peak"].as_u64(), Some(sum));
    assert_eq!(p["stacks"]["stacks"].as_u64(), Some(6));
    assert_eq!(p["stacks"]["allocations_without_stack"].as_u64(), Some(0));
    assert_eq!(p["stacks"]["pool_allocations"], true);
    // Live at exit: all but the scratch buffer, with their sites.
    let live = p["live_at_exit"]["largest"].as_array().unwrap();
    assert_eq!(live.len(), SITES.len() - 1);
    assert!(live
        .iter()
        .all(|a| a["site"]["function"] != "make_scratch" && a["site"]["function"].is_string()));

    // The text says the same.
    let text = text_report(&trace, &elsewhere);
    let want = if with_lines {
        format!(
            "in load_weights (stacks_client.c:{})",
            source_line("cuMemAlloc_v2(out")
        )
    } else {
        // No line: the offset in the module tells two calls in one function apart.
        format!("in load_weights ({binary}+0x")
    };
    assert!(text.contains(&want), "{want}\n{text}");
    assert!(text.contains("Live at GPU 0's peak"), "{text}");
    assert!(
        text.contains("A pool allocation's stack is the request's"),
        "{text}"
    );
}

#[test]
fn sites_are_named_with_frame_pointers() {
    names_every_site("stacks_fp", true);
}

#[test]
fn sites_are_named_without_frame_pointers() {
    names_every_site("stacks_nofp", true);
}

#[test]
fn sites_are_named_from_the_symbol_table_without_debug_info() {
    names_every_site("stacks_nodebug", false);
}

/// The program moved after the run, and another build took its place: its frames are not
/// symbolised from the wrong file, and are found by build id in a `--debug-dir`.
#[test]
fn a_moved_program_is_found_by_build_id() {
    let run_dir = scratch_dir("stacks-moved-run");
    let program = run_dir.join("app");
    // Hard links, not copies: a copy's write descriptor, inherited by a process another test
    // forks meanwhile, would make the exec fail (ETXTBSY).
    std::fs::hard_link(artifacts().clients_dir.join("stacks_nofp"), &program).unwrap();
    let trace = traced(&program, &run_dir, &[("CUQUOTA_STACKS", "8")]);
    let kept = scratch_dir("stacks-moved-kept");
    std::fs::rename(&program, kept.join("app")).unwrap();
    // Another build at the old path (different flags: a different build id).
    std::fs::hard_link(artifacts().clients_dir.join("stacks_fp"), &program).unwrap();

    let (lost, stderr) = report(&trace, &kept, &[]);
    for (api, site) in sites(&lost) {
        assert!(site.get("function").is_none(), "{api}: {site}");
        assert_eq!(site["module"], program.to_str().unwrap(), "{api}: {site}");
    }
    assert!(
        stderr.contains(&format!(
            "cannot symbolise frames in {}: it is another build",
            program.display()
        )),
        "{stderr}"
    );

    let (found, stderr) = report(&trace, &run_dir, &["--debug-dir", kept.to_str().unwrap()]);
    assert!(!stderr.contains("cannot symbolise"), "{stderr}");
    for (api, function, _) in SITES {
        let site = &sites(&found).into_iter().find(|(a, _)| a == api).unwrap().1;
        assert_eq!(site["function"], function, "{api}: {site}");
    }
}

/// Off by default: no stack or module lines, and the report has no stack fields or lines.
#[test]
fn without_the_setting_nothing_changes() {
    let dir = scratch_dir("stacks-off");
    let trace = traced(&artifacts().clients_dir.join("stacks_fp"), &dir, &[]);
    let lines = trace_lines(&trace);
    assert!(lines
        .iter()
        .all(|l| l["type"] != "stack" && l["type"] != "module"));
    assert!(allocations(&lines).iter().all(|a| a.2 == 0));
    let raw = std::fs::read_to_string(&trace).unwrap();
    assert!(!raw.contains("\"stack\""), "{raw}");
    let (report, _) = report(&trace, &dir, &[]);
    let p = &report["processes"][0];
    assert!(p.get("stacks").is_none());
    assert!(p["devices"][0].get("by_call_site").is_none());
    assert!(sites(&report).iter().all(|(_, s)| s.is_null()));
    let text = text_report(&trace, &dir);
    assert!(
        !text.contains("Call stacks") && !text.contains("by call site"),
        "{text}"
    );
}

/// The same call site, many times: one stack, written once; a forked child writes its own.
#[test]
fn a_stack_is_written_once_and_a_child_writes_its_own() {
    let dir = scratch_dir("stacks-once");
    let template = format!("{}/t-%p.jsonl", dir.display());
    let mut ops = vec!["init".to_string()];
    for slot in 0..20 {
        ops.push("alloc:1M".into());
        ops.push(format!("free:{slot}"));
    }
    // The child runs the next two ops, the parent skips them.
    ops.push("fork:2".into());
    ops.push("alloc:2M".into());
    ops.push("free:20".into());
    let out = run(
        Client::Linked,
        &ops.join(" "),
        &[("CUQUOTA_TRACE", &template), ("CUQUOTA_STACKS", "32")],
    );
    assert!(out.status.success(), "{out}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    for file in files {
        let lines = trace_lines(&file);
        let allocs = allocations(&lines);
        assert!(!allocs.is_empty());
        assert!(allocs.iter().all(|a| a.2 != 0), "{allocs:?}");
        let mut ids: Vec<u64> = lines
            .iter()
            .filter(|l| l["type"] == "stack")
            .map(|l| l["id"].as_u64().unwrap())
            .collect();
        let written = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), written, "each stack once: {ids:?}");
        let mut used: Vec<u64> = allocs.iter().map(|a| a.2).collect();
        used.sort();
        used.dedup();
        assert!(used.iter().all(|u| ids.contains(u)), "{used:?} {ids:?}");
        assert!(
            written <= 2,
            "one call site per op: {written} stacks in {}",
            file.display()
        );
    }
}

/// A real client nobody here wrote: NVIDIA's cuda-bindings from Python. The allocation's
/// site is the binding's own native frame (its Cython module), named by module.
#[test]
fn cuda_bindings_allocations_are_placed_in_the_binding() {
    let python = crate::real_clients::python();
    let dir = scratch_dir("stacks-bindings");
    let script = artifacts()
        .workspace
        .join("tests/real_clients/stacks_check.py");
    let out = Run::program(python)
        .arg(script.to_str().unwrap())
        .cwd(&dir)
        .envs(&[
            ("CUDA_SHIM_MEMORY", "4GiB"),
            ("CUDA_SHIM_DRIVER_VERSION", "13000"),
            ("CUQUOTA_LIMIT", "1GiB"),
            ("CUQUOTA_COUNT", "allocations"),
            ("CUQUOTA_TRACE", "t.jsonl"),
            ("CUQUOTA_STACKS", "48"),
            ("PYTHONDONTWRITEBYTECODE", "1"),
        ])
        .run();
    out.check_exit(0);
    assert!(out.stdout.contains("done"), "{out}");
    let trace = dir.join("t.jsonl");
    let (report, _) = report(&trace, &dir, &[]);
    let largest = &report["processes"][0]["largest_allocations"][0];
    assert_eq!(
        (largest["api"].as_str(), largest["bytes"].as_u64()),
        (Some("cuMemAlloc_v2"), Some(64 << 20)),
        "{largest}"
    );
    let module = largest["site"]["module"].as_str().unwrap_or_default();
    assert!(
        module.contains("/cuda/bindings/") && module.ends_with(".so"),
        "the site is not the binding's: {largest}"
    );
    // The wheel's module is stripped to its exported symbols: the frame is in a local
    // function, so it has no name, and certainly not the export that precedes it.
    let function = largest["site"]["function"].as_str().unwrap_or_default();
    assert!(!function.starts_with("PyInit_"), "a wrong name: {largest}");
}

/// The report answers a refusal with call sites: a group member that holds 900 MiB of a 1 GiB
/// quota leaves too little for the client's last allocation (its array); the episode names
/// the holder and lists what the client itself had live then, by the functions that
/// allocated it.
#[test]
fn a_refusal_lists_what_was_live_by_call_site() {
    let dir = scratch_dir("stacks-refusal");
    let gate = dir.join("gate");
    std::fs::write(&gate, "").unwrap();
    let group = [
        ("CUQUOTA_STATE_DIR", dir.join("state").display().to_string()),
        ("CUQUOTA_GROUP", "svc".to_string()),
        ("CUQUOTA_LIMIT", "1GiB".to_string()),
    ];
    let group: Vec<(&str, &str)> = group.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let holder_ops = format!("init alloc:900M waitgone:{}", gate.display());
    let mut holder = Run::client(Client::Dlsym)
        .ops(&holder_ops)
        .envs(&group)
        .start();
    holder.wait_for(|l| l.op == "alloc");
    let out = Run::program(artifacts().clients_dir.join("stacks_fp"))
        .cwd(&dir)
        .env("CUQUOTA_TRACE", "t.jsonl")
        .env("CUQUOTA_STACKS", "16")
        .envs(&group)
        .run();
    std::fs::remove_file(&gate).unwrap();
    holder.wait().check_exit(0);
    assert!(out.stdout.contains("make_texture failed: 2"), "{out}");
    let text = text_report(&dir.join("t.jsonl"), &dir);
    let at = text
        .find("this process's live allocations then, by call site:")
        .unwrap_or_else(|| panic!("{text}"));
    let episode = &text[..at];
    assert!(episode.contains("group svc 1.00 GiB of 1.00 GiB"), "{text}");
    assert!(episode.contains(") 900.00 MiB"), "{text}");
    let first = text[at..].lines().nth(1).unwrap();
    assert!(
        first.contains("64.00 MiB")
            && first.contains(&format!(
                "load_weights (stacks_client.c:{})",
                source_line("cuMemAlloc_v2(out")
            )),
        "{text}"
    );
}
