//! Context memory: what contexts take is charged to the quota. The shim gives each context
//! `CUDA_SHIM_CONTEXT_MEMORY` and `cuCtxSetLimit` its growth, and answers as NVML from the
//! same accounting; its `cuShimFootprint` (the `footprint` op) and NVML's process list are
//! the oracle. Each test runs over every lookup path the functions are reached by.

use crate::common::*;
use std::path::PathBuf;

const CONTEXT: u64 = 300 * MIB;

/// A 1 GiB quota; each context takes 300 MiB on the shim.
const ENV: [(&str, &str); 2] = [
    ("CUQUOTA_LIMIT", "1GiB"),
    ("CUDA_SHIM_CONTEXT_MEMORY", "300MiB"),
];

fn with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    ENV.iter().chain(extra).copied().collect()
}

#[test]
fn the_primary_context_is_charged_what_it_takes_on_every_path() {
    for client in Client::ALL {
        let out = run(
            client,
            "init info footprint:0 alloc:724M alloc:1 info nvmlinit nvmlprocs:0",
            &ENV,
        );
        out.check_exit(0);
        out.check(1, "info", &[("free", GIB - CONTEXT), ("total", GIB)]);
        out.check(2, "footprint", &[("context", CONTEXT), ("allocations", 0)]);
        out.check(3, "alloc", &[("rc", 0)]);
        out.check(4, "alloc", &[("rc", OUT_OF_MEMORY)]);
        out.check(5, "info", &[("free", 0)]);
        // What nvidia-smi would show for the process is exactly the quota.
        out.check(7, "nvmlprocs", &[("mine", GIB)]);
        out.check_log(&format!(
            "GPU 0 refused 1 B (1 byte) via cuMemAlloc_v2: quota 1.00 GiB, in use 1.00 GiB \
             (allocations 724.00 MiB, context {}), 0 B left",
            h(CONTEXT)
        ));
    }
}

/// A created context takes its own share (another process's memory on the card does not
/// count), and gives it back when destroyed.
#[test]
fn a_created_context_is_charged_and_given_back_at_destroy() {
    for client in Client::ALL {
        let out = run(
            client,
            "init otherproc:0:4242:1G pctxcreate info footprint:0 ctxdestroy:0 dev:0 info",
            &ENV,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, 0, 0]);
        out.check(3, "info", &[("free", GIB - 2 * CONTEXT)]);
        out.check(4, "footprint", &[("context", 2 * CONTEXT)]);
        out.check(7, "info", &[("free", GIB - CONTEXT)]);
    }
}

/// A primary context that does not fit is made, measured, released and refused, with one
/// line that says the context alone is larger than the quota; nothing stays on the card.
#[test]
fn a_context_larger_than_the_quota_is_refused_with_one_line() {
    for client in Client::ALL {
        let out = run(
            client,
            "init nvmlinit nvmlprocs:0",
            &[
                ("CUQUOTA_LIMIT", "512MiB"),
                ("CUDA_SHIM_CONTEXT_MEMORY", "600MiB"),
            ],
        );
        out.check_exit(0);
        out.check(0, "init", &[("rc", OUT_OF_MEMORY)]);
        out.check(2, "nvmlprocs", &[("mine", 0), ("listed", 0)]);
        assert_eq!(out.logs_starting("GPU 0 refused").len(), 1, "{out}");
        out.check_log(&format!(
            "GPU 0 refused a new context via cuDevicePrimaryCtxRetain: the context alone takes \
             600.00 MiB ({} bytes) of the quota 512.00 MiB",
            600 * MIB
        ));
    }
}

/// A second context that does not fit beside the first is destroyed and refused; the first
/// keeps working.
#[test]
fn a_created_context_that_does_not_fit_is_destroyed_and_refused() {
    for client in Client::ALL {
        let out = run(
            client,
            "init pctxcreate footprint:0 info alloc:424M alloc:1",
            &[
                ("CUQUOTA_LIMIT", "1GiB"),
                ("CUDA_SHIM_CONTEXT_MEMORY", "600MiB"),
            ],
        );
        out.check_exit(0);
        out.check(1, "pctxcreate", &[("rc", OUT_OF_MEMORY)]);
        out.check(2, "footprint", &[("context", 600 * MIB)]);
        out.check(3, "info", &[("free", 424 * MIB)]);
        out.check(4, "alloc", &[("rc", 0)]);
        out.check(5, "alloc", &[("rc", OUT_OF_MEMORY)]);
        out.check_log(&format!(
            "GPU 0 refused a new context via cuCtxCreate_v2: it takes 600.00 MiB ({} bytes); \
             quota 1.00 GiB, in use 600.00 MiB (allocations 0 B, context 600.00 MiB), \
             424.00 MiB left",
            600 * MIB
        ));
    }
}

/// Eight threads create contexts at once: each is measured on its own (the measurement
/// lock), none takes another's share.
#[test]
fn contexts_made_at_once_on_threads_are_each_charged_their_own() {
    for client in Client::ALL {
        let out = run(
            client,
            "init pctxthreads:8 info footprint:0",
            &[
                ("CUQUOTA_LIMIT", "2GiB"),
                ("CUDA_SHIM_CONTEXT_MEMORY", "100MiB"),
            ],
        );
        out.check_exit(0);
        out.check(1, "pctxthreads", &[("ok", 8)]);
        out.check(2, "info", &[("free", 2 * GIB - 900 * MIB)]);
        out.check(3, "footprint", &[("context", 900 * MIB)]);
    }
}

/// A reset frees the primary context; the retain that makes it again is measured again.
#[test]
fn the_primary_context_is_measured_again_after_a_reset() {
    for client in Client::ALL {
        let out = run(
            client,
            "init ctxreset:0 footprint:0 ctxretain:0 info footprint:0 alloc:724M alloc:1",
            &ENV,
        );
        out.check_exit(0);
        out.check(2, "footprint", &[("context", 0)]);
        out.check(4, "info", &[("free", GIB - CONTEXT)]);
        out.check(5, "footprint", &[("context", CONTEXT)]);
        out.check(6, "alloc", &[("rc", 0)]);
        out.check(7, "alloc", &[("rc", OUT_OF_MEMORY)]);
    }
}

#[test]
fn cuquota_context_sets_the_size_and_zero_ignores_it() {
    for client in [Client::Linked, Client::Runtime] {
        let out = run(
            client,
            "init info pctxcreate info",
            &with(&[("CUQUOTA_CONTEXT", "100MiB")]),
        );
        out.check_exit(0);
        out.check(1, "info", &[("free", GIB - 100 * MIB)]);
        out.check(3, "info", &[("free", GIB - 200 * MIB)]);
        let out = run(
            client,
            "init info pctxcreate info",
            &with(&[("CUQUOTA_CONTEXT", "0")]),
        );
        out.check_exit(0);
        out.check(1, "info", &[("free", GIB)]);
        out.check(3, "info", &[("free", GIB)]);
        // Known before the call: a context that cannot fit is never made.
        let out = run(
            client,
            "init nvmlinit nvmlprocs:0",
            &[("CUQUOTA_LIMIT", "512MiB"), ("CUQUOTA_CONTEXT", "600MiB")],
        );
        out.check(0, "init", &[("rc", OUT_OF_MEMORY)]);
        out.check(2, "nvmlprocs", &[("listed", 0)]);
    }
}

/// The shim installed without its `libnvidia-ml.so.1` link.
fn driver_without_nvml() -> PathBuf {
    let dir = scratch_dir("no-nvml");
    std::os::unix::fs::symlink(
        artifacts().shim_dir.join("libcuda.so.1"),
        dir.join("libcuda.so.1"),
    )
    .unwrap();
    dir
}

#[test]
fn without_nvml_contexts_are_not_measured_and_that_is_said_once() {
    let dir = driver_without_nvml();
    let dir = dir.to_str().unwrap();
    let absent = "NVML is not available (libnvidia-ml.so.1 could not be loaded): the memory \
                  of contexts is not measured (CUQUOTA_CONTEXT=SIZE counts SIZE per context)";
    for client in [Client::Linked, Client::Runtime] {
        let out = run(
            client,
            "init info pctxcreate info",
            &with(&[("LD_LIBRARY_PATH", dir), ("CUQUOTA_LOG_LEVEL", "info")]),
        );
        out.check_exit(0);
        out.check(1, "info", &[("free", GIB)]);
        out.check(3, "info", &[("free", GIB)]);
        out.check_log(absent);
        // CUQUOTA_CONTEXT needs no NVML (nor says anything about it).
        let extra = [
            ("LD_LIBRARY_PATH", dir),
            ("CUQUOTA_LOG_LEVEL", "info"),
            ("CUQUOTA_CONTEXT", "300MiB"),
        ];
        let out = run(client, "init info pctxcreate info", &with(&extra));
        out.check(1, "info", &[("free", GIB - CONTEXT)]);
        out.check(3, "info", &[("free", GIB - 2 * CONTEXT)]);
        assert!(out.logs_starting("NVML").is_empty(), "{out}");
    }
}

/// `CUQUOTA_COUNT=allocations` charges no context memory, as before cuquota counted the footprint.
#[test]
fn allocations_mode_charges_no_context() {
    for client in [Client::Linked, Client::Dlsym] {
        let ops = "init info pctxcreate psetlimit:2:72M info";
        let out = run(client, ops, &with(&[("CUQUOTA_COUNT", "allocations")]));
        out.check_exit(0);
        out.check(1, "info", &[("free", GIB)]);
        out.check(4, "info", &[("free", GIB)]);
        let out = run(client, ops, &ENV);
        out.check(1, "info", &[("free", GIB - CONTEXT)]);
        out.check(4, "info", &[("free", GIB - 2 * CONTEXT - 64 * MIB)]);
    }
}

/// A larger malloc heap takes its growth (72 MiB over the default 8 MiB); one that does not
/// fit is set back and refused; a smaller one gives the growth back.
#[test]
fn cuctxsetlimit_growth_is_charged_and_set_back_when_it_does_not_fit() {
    for client in Client::ALL {
        let out = run(
            client,
            "init psetlimit:2:72M info footprint:0 psetlimit:2:1G getlimit:2 info \
             psetlimit:2:8M info",
            &ENV,
        );
        out.check_exit(0);
        let grown = CONTEXT + 64 * MIB;
        out.check(1, "psetlimit", &[("rc", 0)]);
        out.check(2, "info", &[("free", GIB - grown)]);
        out.check(3, "footprint", &[("context", grown)]);
        out.check(4, "psetlimit", &[("rc", OUT_OF_MEMORY)]);
        out.check(5, "getlimit", &[("value", 72 * MIB)]);
        out.check(6, "info", &[("free", GIB - grown)]);
        out.check(8, "info", &[("free", GIB - CONTEXT)]);
        assert_eq!(out.logs_starting("GPU 0 refused").len(), 1, "{out}");
    }
}

/// The trace has a `footprint` event for the context part, with its new total.
#[test]
fn the_context_is_traced_as_a_footprint_event() {
    let dir = scratch_dir("context-trace");
    let path = dir.join("t.jsonl");
    let out = run(
        Client::Linked,
        "init pctxcreate ctxdestroy:0",
        &with(&[("CUQUOTA_TRACE", path.to_str().unwrap())]),
    );
    out.check_exit(0);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let footprint: Vec<(String, u64, u64)> = lines
        .iter()
        .filter(|l| l["type"] == "footprint" && l["part"] == "context")
        .map(|l| {
            let api = l["api"].as_str().unwrap().to_string();
            (
                api,
                l["bytes"].as_u64().unwrap(),
                l["in_use"].as_u64().unwrap(),
            )
        })
        .collect();
    let c = CONTEXT;
    assert_eq!(
        footprint,
        [
            ("cuDevicePrimaryCtxRetain".to_string(), c, c),
            ("cuCtxCreate_v2".to_string(), 2 * c, 2 * c),
            ("cuCtxDestroy_v2".to_string(), c, c),
        ],
        "{text}"
    );
}
