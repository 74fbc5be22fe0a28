//! Driver faults injected into the shim (`CUDA_SHIM_FAIL=FUNC:WHEN:CODE`): out of
//! memory, invalid value, not initialised and a code cuquota does not know (12345), on every
//! allocation entry point, on the frees and on the memory queries, through each lookup
//! path. The code reaches the caller unchanged, a failed allocation is never charged (its
//! reservation is returned), a failed free keeps its charge, the unknown code is written
//! as a number, and nothing crashes. (tests/faults.rs has the first cases.)

use crate::common::*;
use crate::reliability_util::*;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "1GiB");
const CODES: [u64; 4] = [OUT_OF_MEMORY, INVALID_VALUE, 3, 12345];
const PATHS: [Client; 3] = [Client::Linked, Client::Dlsym, Client::Runtime];

fn result_text(code: u64) -> String {
    match code {
        0 => "CUDA_SUCCESS".into(),
        1 => "CUDA_ERROR_INVALID_VALUE".into(),
        2 => "CUDA_ERROR_OUT_OF_MEMORY".into(),
        3 => "CUDA_ERROR_NOT_INITIALIZED".into(),
        c => format!("CUresult {c}"),
    }
}

/// The allocation entry points: (op making 1 GiB, its driver function, how to free slot N).
const ALLOCS: [(&str, &str); 6] = [
    ("alloc:1G", "cuMemAlloc_v2"),
    ("async:1G", "cuMemAllocAsync"),
    ("pool:1G", "cuMemAllocFromPoolAsync"),
    ("managed:1G", "cuMemAllocManaged"),
    // 2 Mi rows of 512 bytes: exactly 1 GiB with the shim's 512-byte pitch.
    ("pitch:512:2097152:4", "cuMemAllocPitch_v2"),
    ("create:1G", "cuMemCreate"),
];

#[test]
fn a_failed_allocation_on_any_entry_point_is_not_charged() {
    for client in PATHS {
        for code in CODES {
            let dir = scratch_dir("fault-alloc");
            let trace = dir.join("t.jsonl");
            let fail: Vec<String> = ALLOCS
                .iter()
                .map(|(_, f)| format!("{f}:1:{code}"))
                .collect();
            // Each entry point: the first call fails, the second gets the whole quota (so
            // nothing of the first was kept), and it is given back.
            let mut ops = vec!["init".to_string()];
            let mut rcs = vec![0];
            for (i, (op, _)) in ALLOCS.iter().enumerate() {
                let slot = 2 * i + 1;
                let free = if op.starts_with("create") {
                    "release:1".to_string()
                } else {
                    format!("free:{slot}")
                };
                ops.extend([op.to_string(), op.to_string(), free]);
                rcs.extend([code, 0, 0]);
            }
            ops.extend(["info".into(), "shimstats:0".into()]);
            rcs.extend([0, 0]);
            let out = run(
                client,
                &ops.join(" "),
                &[
                    LIMIT,
                    ("CUDA_SHIM_FAIL", &fail.join(",")),
                    ("CUQUOTA_TRACE", trace.to_str().unwrap()),
                ],
            );
            out.check_exit(0);
            no_panic(&out);
            out.check_rcs(&rcs);
            let n = ops.len();
            out.check(n - 2, "info", &[("free", GIB), ("total", GIB)]);
            out.check(n - 1, "shimstats", &[("in_use", 0), ("live", 0)]);
            for i in 0..ALLOCS.len() {
                let line = out.ops()[1 + 3 * i];
                assert!(
                    line.get("ptr") == Some("0x0") || line.get("handle") == Some("0x0"),
                    "{out}"
                );
            }

            // The trace: one driver refusal per entry point, with the code as the caller got
            // it (a number when unknown) and nothing in use; every success then fits.
            let t = read_trace(&trace, false);
            let refused = t.of("refused");
            assert_eq!(refused.len(), ALLOCS.len(), "{}", trace.display());
            for (e, (_, api)) in refused.iter().zip(ALLOCS) {
                assert_eq!(e.api, api);
                assert_eq!(e.result, result_text(code));
                assert_eq!(e.reason.as_deref(), Some("driver"));
                assert_eq!((e.bytes, e.in_use), (GIB, 0));
            }
            assert!(t.of("alloc").iter().all(|e| e.in_use == GIB));
            // Each free leaves nothing allocated; a pool's freed memory stays in the pool
            // cache (its `footprint` lines) until cuquota trims it for the next request.
            let frees: Vec<u64> = t.of("free").iter().map(|e| e.in_use).collect();
            assert_eq!(frees, [0; 6]);
            let kept: Vec<u64> = t.of("footprint").iter().map(|e| e.in_use).collect();
            assert!(kept.contains(&GIB), "{kept:?}");
            let summary = t.summary.expect("summary");
            assert_eq!(summary["devices"][0]["in_use"], 0);
            assert_eq!(summary["devices"][0]["allocs"], ALLOCS.len());

            // The log explains a driver out-of-memory, and nothing else of these.
            let explained = out.logs_starting("GPU 0: the driver refused ");
            if code == OUT_OF_MEMORY {
                assert_eq!(explained.len(), ALLOCS.len(), "{out}");
                // The driver's pools keep what was freed (nothing synchronizes here), and
                // cuquota trims them for the next request: the driver has it all again.
                let driver_free = ["8.00"; 6];
                for ((line, (_, api)), free) in explained.iter().zip(ALLOCS).zip(driver_free) {
                    assert!(
                        line.ends_with(&format!(
                            "GPU 0: the driver refused 1.00 GiB (1073741824 bytes) via {api}: \
                             CUDA_ERROR_OUT_OF_MEMORY, driver free {free} GiB; quota 1.00 GiB, \
                             in use 0 B"
                        )),
                        "{line}"
                    );
                }
            } else {
                assert!(explained.is_empty(), "{out}");
            }
            assert!(out.logs_starting("GPU 0 refused").is_empty(), "{out}");
            let refusals = if code == OUT_OF_MEMORY { 6 } else { 0 };
            out.check_log(&format!(
                "GPU 0 summary: peak 1.00 GiB (1073741824 bytes) of quota 1.00 GiB, \
                 6 allocations, {refusals} refusals, 0 live at exit (0 B); besides \
                 allocations at exit: pool cache 0 B (peak 1.00 GiB); 2 trims gave back \
                 2.00 GiB"
            ));
        }
    }
}

#[test]
fn a_failed_free_keeps_its_charge_and_its_code() {
    for client in PATHS {
        for code in CODES {
            let fail =
                format!("cuMemFree_v2:1:{code},cuMemFreeAsync:1:{code},cuMemRelease:1:{code}");
            let dir = scratch_dir("fault-free");
            let trace = dir.join("t.jsonl");
            let out = run(
                client,
                "init alloc:256M async:256M create:256M \
                 free:0 freeasync:1 release:0 info shimstats:0 \
                 free:0 freeasync:1 release:0 info shimstats:0",
                &[
                    LIMIT,
                    ("CUDA_SHIM_FAIL", &fail),
                    ("CUQUOTA_TRACE", trace.to_str().unwrap()),
                ],
            );
            out.check_exit(0);
            no_panic(&out);
            out.check_rcs(&[0, 0, 0, 0, code, code, code, 0, 0, 0, 0, 0, 0, 0]);
            // The driver still holds all three, and so does the quota.
            out.check(7, "info", &[("free", GIB - 768 * MIB)]);
            out.check(8, "shimstats", &[("in_use", 768 * MIB), ("live", 3)]);
            // The pool keeps what cuMemFreeAsync gave it (nothing synchronized).
            out.check(12, "info", &[("free", GIB - 256 * MIB)]);
            out.check(13, "shimstats", &[("in_use", 0), ("live", 0)]);
            let t = read_trace(&trace, false);
            // A pointer's free is traced before the driver frees (another thread may get
            // the address at once); one the driver failed is then held again: an `alloc`
            // line through the free's entry point.
            let frees = t.of("free");
            let apis: Vec<&str> = frees.iter().map(|e| e.api.as_str()).collect();
            let (free, free_async) = (apis[0], apis[1]);
            assert_eq!(apis, [free, free_async, free, free_async, "cuMemRelease"]);
            let again: Vec<&str> = t.of("alloc")[3..].iter().map(|e| e.api.as_str()).collect();
            assert_eq!(
                again,
                [free, free_async],
                "the failed frees hold their memory again"
            );
            assert_eq!(
                frees.iter().map(|e| e.in_use).collect::<Vec<_>>(),
                [512 * MIB, 512 * MIB, 512 * MIB, 256 * MIB, 256 * MIB]
            );
            out.check_log(
                "GPU 0 summary: peak 768.00 MiB (805306368 bytes) of quota 1.00 GiB, \
                 3 allocations, 0 refusals, 0 live at exit (0 B); besides allocations at \
                 exit: pool cache 256.00 MiB (peak 256.00 MiB)",
            );
        }
    }
}

#[test]
fn a_failed_memory_query_passes_its_code_and_changes_nothing() {
    for client in PATHS {
        for code in CODES {
            let fail = format!(
                "cuMemGetInfo_v2:1:{code},cuDeviceTotalMem_v2:1:{code},cuMemGetInfo:1:{code}"
            );
            let out = run(
                client,
                "init alloc:256M info total:0 linfo info total:0 linfo alloc:768M alloc:1",
                &[LIMIT, ("CUDA_SHIM_FAIL", &fail)],
            );
            out.check_exit(0);
            no_panic(&out);
            out.check_rcs(&[0, 0, code, code, code, 0, 0, 0, 0, OUT_OF_MEMORY]);
            // Outputs of a failed query are left as the caller had them (zero here).
            out.check(2, "info", &[("free", 0), ("total", 0)]);
            out.check(3, "total", &[("bytes", 0)]);
            out.check(4, "linfo", &[("free", 0), ("total", 0)]);
            out.check(5, "info", &[("free", GIB - 256 * MIB), ("total", GIB)]);
            out.check(6, "total", &[("bytes", GIB)]);
            out.check(7, "linfo", &[("free", (GIB - 256 * MIB)), ("total", GIB)]);
        }
    }
}

#[test]
fn faults_on_every_call_from_the_nth_on() {
    // From the second call on, every allocation fails with an unknown code, every free and
    // query with another: still no crash, no charge, and the figures stay right.
    let out = run(
        Client::Linked,
        "init alloc:1M alloc:1M alloc:1M free:0 free:0 info info exit:0",
        &[
            LIMIT,
            (
                "CUDA_SHIM_FAIL",
                "cuMemAlloc_v2:2+:12345,cuMemFree_v2:*:999,cuMemGetInfo_v2:2:54321",
            ),
        ],
    );
    out.check_exit(0);
    no_panic(&out);
    out.check_rcs(&[0, 0, 12345, 12345, 999, 999, 0, 54321]);
    out.check(6, "info", &[("free", GIB - MIB)]);
    let summary = out.logs_starting("GPU 0 summary: ");
    assert_eq!(summary.len(), 1, "{out}");
    assert!(
        summary[0]
            .ends_with(" of quota 1.00 GiB, 1 allocation, 0 refusals, 1 live at exit (1.00 MiB)"),
        "{out}"
    );
}

/// The exit summary's peak counts granted allocations only: a request reserved and then
/// failed by the driver does not raise it (here the process only ever held 1 MiB, though
/// 2 MiB were reserved for a moment), and the log agrees with the trace's summary.
#[test]
fn the_exit_summary_peak_counts_only_what_was_held() {
    let dir = scratch_dir("fault-peak");
    let trace = dir.join("t.jsonl");
    let out = run(
        Client::Linked,
        "init alloc:1M alloc:1M info",
        &[
            LIMIT,
            ("CUDA_SHIM_FAIL", "cuMemAlloc_v2:2:12345"),
            ("CUQUOTA_TRACE", trace.to_str().unwrap()),
        ],
    );
    out.check_exit(0);
    out.check_rcs(&[0, 0, 12345, 0]);
    let t = read_trace(&trace, false);
    assert_eq!(t.summary.unwrap()["devices"][0]["peak"], MIB);
    out.check_log(
        "GPU 0 summary: peak 1.00 MiB (1048576 bytes) of quota 1.00 GiB, \
         1 allocation, 0 refusals, 1 live at exit (1.00 MiB)",
    );
}

#[test]
fn a_percentage_limit_whose_device_size_cannot_be_read_fails_closed() {
    // The device's size is needed to turn 50% into bytes; while the driver cannot say it,
    // allocations fail with its code (never "unlimited"); once it can, 50% holds.
    let out = run(
        Client::Linked,
        "init alloc:1G alloc:5G shimstats:0",
        &[
            ("CUQUOTA_LIMIT", "50%"),
            ("CUDA_SHIM_FAIL", "cuDeviceTotalMem_v2:*:999"),
        ],
    );
    out.check_exit(0);
    out.check_rcs(&[0, 999, 999, 0]);
    out.check(3, "shimstats", &[("in_use", 0)]);

    let out = run(
        Client::Linked,
        "init alloc:1G alloc:5G alloc:3G info",
        &[
            ("CUQUOTA_LIMIT", "50%"),
            ("CUDA_SHIM_FAIL", "cuDeviceTotalMem_v2:1:999"),
        ],
    );
    out.check_exit(0);
    out.check_rcs(&[0, 999, OUT_OF_MEMORY, 0, 0]);
    out.check(4, "info", &[("free", GIB), ("total", 4 * GIB)]);
}

/// When the driver's `cuCtxGetDevice` fails (here with an injected unknown code), the hook
/// cannot tell which device the allocation lands on; it must not call the driver uncharged
/// (failing closed with the query's error, as the percentage case above does, keeps the
/// quota), so the driver never holds more than 1 GiB after three 1 GiB requests.
#[test]
fn a_failing_device_query_does_not_open_the_quota() {
    for client in PATHS {
        let out = run(
            client,
            "init alloc:1G alloc:1G alloc:1G shimstats:0",
            &[LIMIT, ("CUDA_SHIM_FAIL", "cuCtxGetDevice:*:999")],
        );
        out.check_exit(0);
        no_panic(&out);
        for rc in &out.rcs()[1..4] {
            assert!([0, OUT_OF_MEMORY, 999].contains(rc), "{out}");
        }
        let in_use = out.value(4, "shimstats", "in_use");
        assert!(
            in_use <= GIB,
            "the driver holds {in_use} bytes under a 1 GiB quota:\n{out}"
        );
    }
}
