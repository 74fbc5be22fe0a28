//! Odd but legal calls: each gets the driver's own answer (the shim's, which follows
//! the real driver's documented behaviour), the books stay exact, and nothing panics.

use crate::common::*;
use crate::reliability_util::*;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "1GiB");
const PATHS: [Client; 3] = [Client::Linked, Client::Dlsym, Client::Runtime];
const MAX: &str = "18446744073709551615";
const INVALID_CONTEXT: u64 = 201;
const NOT_INITIALIZED: u64 = 3;

#[test]
fn frees_of_unknown_twice_freed_and_null_pointers() {
    for client in PATHS {
        let dir = scratch_dir("odd-free");
        let trace = dir.join("t.jsonl");
        let out = run(
            client,
            "init alloc:256M freeptr:0x1234 free:0 free:0 freeptr:0x0 info alloc:1G info",
            &[LIMIT, ("CUQUOTA_TRACE", trace.to_str().unwrap())],
        );
        out.check_exit(0);
        no_panic(&out);
        // Unknown and twice-freed pointers: the driver's INVALID_VALUE; null: a no-op.
        out.check_rcs(&[0, 0, INVALID_VALUE, 0, INVALID_VALUE, 0, 0, 0, 0]);
        out.check(6, "info", &[("free", GIB)]);
        out.check(8, "info", &[("free", 0)]);
        let t = read_trace(&trace, false);
        assert_eq!(t.of("alloc").len(), 2);
        assert_eq!(t.of("free").len(), 1, "one free was real");
        assert!(t.of("refused").is_empty());
        out.check_log(
            "GPU 0 summary: peak 1.00 GiB (1073741824 bytes) of quota 1.00 GiB, \
             2 allocations, 0 refusals, 1 live at exit (1.00 GiB)",
        );
    }
}

#[test]
fn zero_byte_allocations_get_the_drivers_answer_and_cost_nothing() {
    for client in PATHS {
        let out = run(
            client,
            "init alloc:0 async:0 pool:0 managed:0 create:0 info alloc:1G info",
            &[LIMIT],
        );
        out.check_exit(0);
        no_panic(&out);
        let raw = run_raw(
            client,
            "init alloc:0 async:0 pool:0 managed:0 create:0",
            &[],
        );
        let want: Vec<u64> = raw.rcs();
        assert_eq!(&want[1..], [INVALID_VALUE; 5], "the shim:\n{raw}");
        out.check_rcs(&[0, 1, 1, 1, 1, 1, 0, 0, 0]);
        out.check(6, "info", &[("free", GIB), ("total", GIB)]);
        out.check(8, "info", &[("free", 0)]);
        assert!(out.logs_starting("GPU 0 refused").is_empty(), "{out}");
    }
}

#[test]
fn an_allocation_of_usize_max_is_refused_and_changes_nothing() {
    // The driver's own answer (no interposer): out of memory.
    let raw = run_raw(
        Client::Linked,
        &format!("init alloc:{MAX} async:{MAX}"),
        &[],
    );
    raw.check_rcs(&[0, OUT_OF_MEMORY, OUT_OF_MEMORY]);
    for client in PATHS {
        let out = run(
            client,
            &format!(
                "init alloc:256M alloc:{MAX} async:{MAX} pool:{MAX} create:{MAX} info free:0 info"
            ),
            &[LIMIT],
        );
        out.check_exit(0);
        no_panic(&out);
        out.check_rcs(&[0, 0, 2, 2, 2, 2, 0, 0, 0]);
        out.check(6, "info", &[("free", GIB - 256 * MIB)]);
        out.check(8, "info", &[("free", GIB)]);
        out.check_log(&format!(
            "GPU 0 refused 16384.00 PiB ({MAX} bytes) via cuMemAlloc_v2: \
             quota 1.00 GiB, in use 256.00 MiB, 768.00 MiB left"
        ));
    }
}

/// In observe mode a request so large that in-use + request overflows (u64::MAX bytes),
/// refused by the driver, leaves the books as they were: the 256 MiB still held stay
/// charged, their later free neither underflows nor panics, and every query after it gives
/// the right figures.
#[test]
fn usize_max_in_observe_mode_leaves_the_books_intact() {
    let out = run(
        Client::Linked,
        &format!("init alloc:256M alloc:{MAX} info free:0 info alloc:512M info"),
        &[LIMIT, ("CUQUOTA_MODE", "observe")],
    );
    out.check_exit(0);
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, 0, 0, 0, 0, 0]);
    no_panic(&out);
    out.check(3, "info", &[("free", GIB - 256 * MIB)]);
    out.check(5, "info", &[("free", GIB)]);
    out.check(7, "info", &[("free", GIB - 512 * MIB)]);
}

/// With no quota set, a request of u64::MAX bytes does not saturate past "unlimited" into
/// a quota refusal: the caller gets the driver's OUT_OF_MEMORY and no log line calls it a
/// refusal by a quota that does not exist ("GPU 0 refused …").
#[test]
fn usize_max_without_a_quota_is_not_called_a_quota_refusal() {
    let out = run(Client::Linked, &format!("init alloc:{MAX} info"), &[]);
    out.check_exit(0);
    out.check_rcs(&[0, OUT_OF_MEMORY, 0]);
    assert!(
        out.logs_starting("GPU 0 refused").is_empty(),
        "a quota refusal without a quota:\n{out}"
    );
}

#[test]
fn async_frees_on_another_stream_or_thread() {
    for client in Client::ALL {
        let dir = scratch_dir("odd-async");
        let trace = dir.join("t.jsonl");
        let out = run(
            client,
            "init stream alloc:256M async:256M pool:256M alloc:256M \
             freeon:0:0 tc-freeasync:1 tc-free:2 t-free:3 info tc-free:3 info shimstats:0",
            &[LIMIT, ("CUQUOTA_TRACE", trace.to_str().unwrap())],
        );
        out.check_exit(0);
        no_panic(&out);
        // A plain free from a thread with no current context is the driver's
        // INVALID_CONTEXT, and the memory stays charged until freed properly.
        out.check_rcs(&[0, 0, 0, 0, 0, 0, 0, 0, 0, INVALID_CONTEXT, 0, 0, 0, 0]);
        // The pools keep what the async and pool frees gave them (nothing synchronized):
        // still the footprint.
        out.check(10, "info", &[("free", 256 * MIB)]);
        out.check(12, "info", &[("free", 2 * 256 * MIB)]);
        out.check(13, "shimstats", &[("in_use", 0), ("live", 0)]);
        let t = read_trace(&trace, false);
        // Each free is traced before the driver frees; the one the driver refused (no
        // context) is then held again: an `alloc` line through cuMemFree_v2.
        let frees = t.of("free");
        let free_async = if client == Client::RuntimePerThread {
            "cuMemFreeAsync_ptsz"
        } else {
            "cuMemFreeAsync"
        };
        let free = "cuMemFree_v2";
        assert_eq!(
            frees.iter().map(|e| e.api.as_str()).collect::<Vec<_>>(),
            [free_async, free_async, free, free, free]
        );
        assert_eq!(frees[0].tid, out.pid, "freeon runs on the main thread");
        assert!(
            frees[1..].iter().all(|e| e.tid != out.pid),
            "on other threads"
        );
        let allocs = t.of("alloc");
        let again: Vec<_> = allocs.iter().filter(|e| e.api == free).collect();
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].tid, again[0].in_use), (frees[3].tid, 768 * MIB));
        // A line says what its free leaves allocated; the pools keep what the pool
        // allocations gave back (their `footprint` lines).
        assert_eq!(
            frees.iter().map(|e| e.in_use).collect::<Vec<_>>(),
            [768 * MIB, 512 * MIB, 512 * MIB, 512 * MIB, 512 * MIB]
        );
    }
}

#[test]
fn memory_queries_and_allocations_before_cuinit() {
    for client in PATHS {
        let out = run(
            client,
            "info total:0 linfo alloc:1M create:2M freeptr:0x1234 init info total:0",
            &[LIMIT],
        );
        out.check_exit(0);
        no_panic(&out);
        out.check_rcs(&[
            NOT_INITIALIZED,
            NOT_INITIALIZED,
            NOT_INITIALIZED,
            NOT_INITIALIZED,
            NOT_INITIALIZED,
            NOT_INITIALIZED,
            0,
            0,
            0,
        ]);
        out.check(7, "info", &[("free", GIB), ("total", GIB)]);
        out.check(8, "total", &[("bytes", GIB)]);
        // Nothing was allocated or refused by the quota: no line at all.
        assert!(out.cuquota_lines().is_empty(), "{out}");
    }
}

#[test]
fn cumemcreate_from_threads_without_a_current_context() {
    for client in PATHS {
        let out = run(
            client,
            "init noctx create:512M t-create:512M t-create:2M dev:0 info shimstats:0 \
             release:0 t-release:1 info",
            &[LIMIT],
        );
        out.check_exit(0);
        no_panic(&out);
        out.check_rcs(&[0, 0, 0, 0, OUT_OF_MEMORY, 0, 0, 0, 0, 0, 0]);
        out.check(6, "info", &[("free", 0), ("total", GIB)]);
        out.check(7, "shimstats", &[("in_use", GIB), ("live", 2)]);
        out.check(10, "info", &[("free", GIB)]);
        out.check_log(
            "GPU 0 refused 2.00 MiB (2097152 bytes) via cuMemCreate: \
             quota 1.00 GiB, in use 1.00 GiB, 0 B left",
        );
    }
}

#[test]
fn two_devices_with_different_quotas() {
    for client in PATHS {
        let out = run(
            client,
            "init alloc:256M alloc:1 create:512M:1 dev:1 alloc:512M alloc:1 \
             dev:0 info dev:1 info free:0 release:0 info dev:0 info \
             shimstats:0 shimstats:1 total:0 total:1",
            &[
                ("CUDA_SHIM_DEVICES", "2"),
                ("CUQUOTA_LIMIT", "0:256MiB,1:1GiB"),
            ],
        );
        out.check_exit(0);
        no_panic(&out);
        out.check_rcs(&[
            0,
            0,
            OUT_OF_MEMORY,
            0,
            0,
            0,
            OUT_OF_MEMORY,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ]);
        out.check(8, "info", &[("free", 0), ("total", 256 * MIB)]);
        out.check(10, "info", &[("free", 0), ("total", GIB)]);
        // A device-0 pointer freed from device 1's context is credited to device 0.
        out.check(13, "info", &[("free", 512 * MIB), ("total", GIB)]);
        out.check(15, "info", &[("free", 256 * MIB), ("total", 256 * MIB)]);
        out.check(16, "shimstats", &[("in_use", 0)]);
        out.check(17, "shimstats", &[("in_use", 512 * MIB), ("live", 1)]);
        out.check(18, "total", &[("bytes", 256 * MIB)]);
        out.check(19, "total", &[("bytes", GIB)]);
        out.check_log(
            "GPU 0 summary: peak 256.00 MiB (268435456 bytes) of quota 256.00 MiB, \
             1 allocation, 1 refusal, 0 live at exit (0 B)",
        );
        out.check_log(
            "GPU 1 summary: peak 1.00 GiB (1073741824 bytes) of quota 1.00 GiB, \
             2 allocations, 1 refusal, 1 live at exit (512.00 MiB)",
        );
    }
}

/// A traced call before `cuInit` (here a `cuMemCreate` the driver refuses with
/// NOT_INITIALIZED) still gives a trace whose header lists the devices and whose summary
/// has the 1 GiB quota that applies all along (the devices are listed once the driver
/// can list them), so `cuquota report` shows the quota.
#[test]
fn a_trace_started_before_cuinit_still_names_the_devices_and_quotas() {
    let dir = scratch_dir("odd-preinit-trace");
    let trace = dir.join("t.jsonl");
    let out = run(
        Client::Linked,
        "create:2M init alloc:1M",
        &[LIMIT, ("CUQUOTA_TRACE", trace.to_str().unwrap())],
    );
    out.check_exit(0);
    out.check_rcs(&[NOT_INITIALIZED, 0, 0]);
    let t = read_trace(&trace, false);
    assert_eq!(t.of("alloc").len(), 1);
    assert_eq!(t.header["devices"][0]["quota"], GIB, "{}", t.header);
    assert_eq!(t.summary.unwrap()["devices"][0]["quota"], GIB);
}
