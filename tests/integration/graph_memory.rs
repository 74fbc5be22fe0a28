//! Graph memory is part of the footprint. The device's graph memory
//! reservation is charged (reconciled after instantiate, upload, launch and
//! cuDeviceGraphMemTrim); a launch whose allocations do not fit is refused with
//! CUDA_ERROR_OUT_OF_MEMORY before the driver runs it; cuquota trims unused graph memory to
//! make room; CUQUOTA_COUNT=allocations leaves graphs alone. Every test runs over every
//! lookup path (the runtime clients ask cuGetProcAddress for "cuGraphInstantiate" at 12000,
//! which is cuGraphInstantiateWithFlags, and the per-thread one gets the _ptsz launches) and
//! checks against the shim's own footprint (`footprint:DEV`).

use crate::common::*;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "64MiB");

/// The api a client's graph launch goes through.
fn launch_api(client: Client) -> &'static str {
    match client {
        Client::RuntimePerThread => "cuGraphLaunch_ptsz",
        _ => "cuGraphLaunch",
    }
}

/// The shim's whole footprint on device 0 at op `i`, and its graph part.
fn shim_footprint(out: &Output, i: usize) -> (u64, u64) {
    let line = out.op(i, "footprint");
    let n = |k| line.num(k).unwrap();
    let total = n("allocations") + n("pool_cache") + n("graph") + n("context");
    (total, n("graph"))
}

fn events(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| {
            !matches!(e["type"].as_str(), Some("header" | "summary" | "backoff"))
        })
        .collect()
}

#[test]
fn a_graph_launch_under_the_quota_is_admitted_and_charged() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream graph graphalloc:0:24M graphalloc:0:1M instantiate:0 footprint:0 \
             launch:0:0 footprint:0 info alloc:38M alloc:1M free:0 free:1 info",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, OUT_OF_MEMORY, 0, 0, 0]);
        assert_eq!(shim_footprint(&out, 6), (0, 0), "{out}");
        // 25 MiB of allocations take 26 MiB of graph memory (2 MiB granules).
        assert_eq!(shim_footprint(&out, 8), (26 * MIB, 26 * MIB), "{out}");
        out.check(9, "info", &[("free", 38 * MIB), ("total", 64 * MIB)]);
        // Live graph allocations freed by the program stay in the graph pool's reservation.
        out.check(14, "info", &[("free", 0)]);
    }
}

#[test]
fn an_upload_is_charged_and_the_launch_after_it_adds_nothing() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream graph graphalloc:0:32M graphfree:0:0 instantiate:0 upload:0:0 \
             footprint:0 info launch:0:0 launch:0:0 info execdestroy:0 graph graphalloc:1:16M \
             instantiatep:1:2:0 footprint:0 info",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check_rcs(&[0; 18]);
        assert_eq!(shim_footprint(&out, 7), (32 * MIB, 32 * MIB), "{out}");
        out.check(8, "info", &[("free", 32 * MIB)]);
        out.check(11, "info", &[("free", 32 * MIB)]);
        // Instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: the pool's unused 32 MiB
        // back the new graph's 16.
        out.check(15, "instantiatep", &[("result", 0)]);
        assert_eq!(shim_footprint(&out, 16), (32 * MIB, 32 * MIB), "{out}");
        out.check(17, "info", &[("free", 32 * MIB)]);
    }
}

#[test]
fn a_graph_launch_over_the_quota_is_refused_before_the_driver_runs_it() {
    for client in Client::ALL {
        let dir = scratch_dir("graph-refused");
        let path = dir.join(format!("{client:?}.jsonl"));
        let out = run(
            client,
            "init stream alloc:48M graph graphalloc:0:24M instantiate:0 launch:0:0 \
             footprint:0 info free:0 launch:0:0 footprint:0",
            &[LIMIT, ("CUQUOTA_TRACE", path.to_str().unwrap())],
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, OUT_OF_MEMORY, 0, 0, 0, 0, 0]);
        // The driver never ran it: no graph memory, only the allocation.
        assert_eq!(shim_footprint(&out, 7), (48 * MIB, 0), "{out}");
        out.check(8, "info", &[("free", 16 * MIB)]);
        assert_eq!(shim_footprint(&out, 11), (24 * MIB, 24 * MIB), "{out}");
        let api = launch_api(client);
        out.check_log(&format!(
            "GPU 0 refused a graph launch via {api}: its allocations need 24.00 MiB \
             (25165824 bytes) more graph memory; quota 64.00 MiB, in use 48.00 MiB, \
             16.00 MiB left"
        ));
        let refused: Vec<_> = events(&path)
            .into_iter()
            .filter(|e| e["type"] == "refused")
            .collect();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0]["api"], api);
        assert_eq!(refused[0]["bytes"], 24 * MIB);
        assert_eq!(refused[0]["in_use"], 48 * MIB);
    }
}

#[test]
fn unused_graph_memory_is_trimmed_to_make_room() {
    for client in Client::ALL {
        let dir = scratch_dir("graph-trim");
        let path = dir.join(format!("{client:?}.jsonl"));
        let out = run(
            client,
            "init stream graph graphalloc:0:32M graphfree:0:0 instantiate:0 launch:0:0 \
             footprint:0 alloc:48M footprint:0 info launch:0:0 footprint:0",
            &[LIMIT, ("CUQUOTA_TRACE", path.to_str().unwrap())],
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, OUT_OF_MEMORY, 0]);
        // The pool keeps the 32 MiB after the launch; 48 more do not fit beside them.
        assert_eq!(shim_footprint(&out, 7), (32 * MIB, 32 * MIB), "{out}");
        assert_eq!(shim_footprint(&out, 9), (48 * MIB, 0), "{out}");
        out.check(10, "info", &[("free", 16 * MIB)]);
        // Now the graph needs all of its memory again, and it does not fit.
        assert_eq!(shim_footprint(&out, 12), (48 * MIB, 0), "{out}");
        let trace = events(&path);
        let at = trace
            .iter()
            .position(|e| e["type"] == "trim")
            .unwrap_or_else(|| panic!("no trim in {trace:?}"));
        let (trim, after) = (&trace[at], &trace[at + 1]);
        assert_eq!(trim["api"], "cuMemAlloc_v2");
        assert_eq!(trim["part"], "graph");
        assert_eq!(trim["bytes"], 32 * MIB);
        assert_eq!(after["type"], "footprint");
        assert_eq!(after["part"], "graph");
        assert_eq!(after["bytes"], 0);
        assert_eq!(trace[at + 2]["type"], "alloc", "{trace:?}");
        assert_eq!(trace[at + 2]["bytes"], 48 * MIB);
        assert_eq!(trace[at + 2]["in_use"], 48 * MIB);
    }
}

#[test]
fn a_captured_allocation_is_charged_when_its_graph_launches() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream alloc:48M capture:0 asyncon:24M:0 endcapture:0 instantiate:0 \
             launch:0:0 footprint:0 free:0 launch:0:0 footprint:0 info",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, 0, OUT_OF_MEMORY, 0, 0, 0, 0, 0]);
        assert_eq!(shim_footprint(&out, 8), (48 * MIB, 0), "{out}");
        assert_eq!(shim_footprint(&out, 11), (24 * MIB, 24 * MIB), "{out}");
        out.check(12, "info", &[("free", 40 * MIB)]);
    }
}

#[test]
fn the_programs_own_graph_trim_credits_the_quota() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream graph graphalloc:0:32M graphfree:0:0 instantiate:0 launch:0:0 \
             info graphtrim:0 info footprint:0 alloc:64M",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check_rcs(&[0; 12]);
        out.check(7, "info", &[("free", 32 * MIB)]);
        out.check(9, "info", &[("free", 64 * MIB)]);
        assert_eq!(shim_footprint(&out, 10), (0, 0), "{out}");
    }
}

#[test]
fn graph_memory_released_by_a_context_reset_is_credited() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream graph graphalloc:0:32M graphfree:0:0 instantiate:0 launch:0:0 \
             info ctxreset:0 info footprint:0 alloc:64M",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check_rcs(&[0; 12]);
        out.check(7, "info", &[("free", 32 * MIB)]);
        out.check(9, "info", &[("free", 64 * MIB)]);
        assert_eq!(shim_footprint(&out, 10), (0, 0), "{out}");
    }
}

#[test]
fn graph_memory_is_charged_to_the_allocation_nodes_device() {
    let two = [("CUDA_SHIM_DEVICES", "2"), LIMIT];
    for client in Client::ALL {
        // GPU 0 current; the graph's memory is on GPU 1, and launched from a thread with
        // no context.
        let out = run(
            client,
            "init dev:1 stream dev:0 graph graphalloc:0:40M:1 instantiate:0 t-launch:0:0 \
             footprint:1 info alloc:64M dev:1 info alloc:30M",
            &two,
        );
        out.check_exit(0);
        out.check(7, "launch", &[("rc", 0)]);
        out.check(8, "footprint", &[("graph", 40 * MIB)]);
        out.check(9, "info", &[("free", 64 * MIB)]);
        out.check(10, "alloc", &[("rc", 0)]);
        out.check(12, "info", &[("free", 24 * MIB)]);
        out.check(13, "alloc", &[("rc", OUT_OF_MEMORY)]);
    }
}

#[test]
fn counting_allocations_leaves_graph_memory_out() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream graph graphalloc:0:128M graphfree:0:0 instantiate:0 launch:0:0 \
             footprint:0 info alloc:64M",
            &[LIMIT, ("CUQUOTA_COUNT", "allocations")],
        );
        out.check_exit(0);
        out.check_rcs(&[0; 10]);
        assert_eq!(shim_footprint(&out, 7), (128 * MIB, 128 * MIB), "{out}");
        out.check(8, "info", &[("free", 64 * MIB)]);
        assert!(out.logs_starting("GPU 0 refused").is_empty(), "{out}");
    }
}

/// Threads launching graphs and allocating at once, on a device whose memory is exactly the
/// quota: the driver never refuses (cuquota never let the footprint past the quota), and
/// every refused launch is cuquota's own refusal.
#[test]
fn launches_and_allocations_under_threads_keep_the_footprint_under_the_quota() {
    for client in Client::ALL {
        let dir = scratch_dir("graph-threads");
        let path = dir.join(format!("{client:?}.jsonl"));
        let out = run(
            client,
            "init graphthreads:4:300:30M footprint:0 info",
            &[
                LIMIT,
                ("CUDA_SHIM_MEMORY", "64MiB"),
                ("CUQUOTA_TRACE", path.to_str().unwrap()),
            ],
        );
        out.check_exit(0);
        let line = out.op(1, "graphthreads");
        let n = |k| line.num(k).unwrap();
        assert_eq!(n("other"), 0, "{out}");
        assert_eq!(n("launch_ok") + n("launch_oom"), 1200, "{out}");
        assert_eq!(n("alloc_ok") + n("alloc_oom"), 1200, "{out}");
        assert!(n("launch_ok") > 0 && n("alloc_ok") > 0, "{out}");
        let (total, graph) = shim_footprint(&out, 2);
        assert_eq!(total, graph, "{out}");
        // Everything settled: cuquota's figure is the driver's reservation.
        out.check(3, "info", &[("free", 64 * MIB - graph)]);
        let refused: Vec<_> = events(&path)
            .into_iter()
            .filter(|e| e["type"] == "refused")
            .collect();
        let by_driver = refused.iter().filter(|e| e["reason"] != "quota").count();
        assert_eq!(by_driver, 0, "{refused:?}");
        let launches = refused
            .iter()
            .filter(|e| e["api"] == launch_api(client))
            .count() as u64;
        assert_eq!(launches, n("launch_oom"), "{out}");
    }
}

/// The CUDA 10 and 11.0 instantiations (error node and log, no flags) learn the graph's
/// allocations too.
#[test]
fn the_legacy_instantiations_are_hooked() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream alloc:48M graph graphalloc:0:24M instantiate1:0 launch:0:0 \
             execdestroy:0 instantiate2:0 launch:1:0 free:0 launch:1:0 info",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check_rcs(&[
            0,
            0,
            0,
            0,
            0,
            0,
            OUT_OF_MEMORY,
            0,
            0,
            OUT_OF_MEMORY,
            0,
            0,
            0,
        ]);
        out.check(12, "info", &[("free", 40 * MIB)]);
    }
}
