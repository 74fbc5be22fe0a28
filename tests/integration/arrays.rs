//! CUDA arrays (`cuArrayCreate_v2`, `cuArray3DCreate_v2`, `cuMipmappedArrayCreate`) are
//! charged what the driver holds for them, from creation to destruction, through every
//! lookup path. The shim lays arrays out as a driver might (rows padded to 512 bytes, whole
//! 64 KiB pages), so what an array holds is more than its elements: cuquota reserves the
//! elements first and settles to the driver's size, which it learns from a deferred-mapping
//! array of the same shape.

use crate::common::*;

const PAGE: u64 = 64 * KIB;

/// (in_use, peak, live) of device 0 from the `shimstats` op at `i`.
fn shim(out: &Output, i: usize) -> (u64, u64, u64) {
    let line = out.check(i, "shimstats", &[("rc", 0)]);
    let n = |k| line.num(k).unwrap();
    (n("in_use"), n("peak"), n("live"))
}

/// Op `i` succeeded.
fn ok(out: &Output, i: usize) {
    let line = out.ops()[i];
    assert_eq!(
        line.num("rc"),
        Some(SUCCESS),
        "op {i} ({}):\n{out}",
        line.raw
    );
}

/// The bytes cuquota charges device 0, from the virtualised free memory at `i`.
fn charged(out: &Output, quota: u64, i: usize) -> u64 {
    quota
        - out
            .check(i, "info", &[("rc", 0), ("total", quota)])
            .num("free")
            .unwrap()
}

#[test]
fn arrays_are_charged_what_the_driver_holds_and_credited_on_destroy() {
    // 1000 rows of 1000 bytes: 1024-byte rows, 16 pages (1 000 000 estimated, settled up).
    // 10 slices of 100 × 100 floats: 512-byte rows, 8 pages (400 000 estimated).
    // 256² RGBA8 with 9 levels: 392 704 bytes of padded rows, 6 pages (349 524 estimated).
    let sizes = [16 * PAGE, 8 * PAGE, 6 * PAGE];
    for client in Client::ALL {
        let out = run(
            client,
            "init array:1000:1000:1:1 info shimstats:0 \
             array3d:100:100:10:32:1:0 info shimstats:0 \
             mipmap:256:256:0:1:4:0:9 info shimstats:0 \
             array:1000:1000:1:1 info shimstats:0 arrdestroy:2 \
             arrdestroy:0 arrdestroy:1 mipdestroy:0 info shimstats:0",
            &[("CUQUOTA_LIMIT", "1GiB")],
        );
        out.check_exit(0);
        let mut held = 0;
        for (k, size) in sizes.into_iter().enumerate() {
            let op = 1 + 3 * k;
            ok(&out, op);
            held += size;
            assert_eq!(charged(&out, GIB, op + 1), held, "{out}");
            // Exactly what the shim holds, and one live allocation each: the
            // deferred-mapping array asked about the size was destroyed again.
            assert_eq!(shim(&out, op + 2), (held, held, k as u64 + 1), "{out}");
        }
        // The same shape again is reserved at its known size at once.
        out.check(10, "array", &[("rc", 0)]);
        assert_eq!(charged(&out, GIB, 11), held + 16 * PAGE, "{out}");
        for i in 13..17 {
            ok(&out, i);
        }
        assert_eq!(charged(&out, GIB, 17), 0, "{out}");
        assert_eq!(shim(&out, 18).0, 0, "{out}");
        assert_eq!(shim(&out, 18).2, 0, "{out}");
    }
}

#[test]
fn arrays_over_the_quota_are_refused_before_or_after_the_driver() {
    let quota = 2 * MIB;
    for client in Client::ALL {
        let out = run(
            client,
            // slots: 0 refused at once; 1 fits; 2 and 3 refused; 4 fits once 1 is gone
            "init array:2048:1025:1:1 shimstats:0 \
             array:1000:1000:1:1 array:1040:1000:1:1 info shimstats:0 \
             array:1040:1000:1:1 info arrdestroy:1 \
             array:1040:1000:1:1 info shimstats:0",
            // Every refusal its line (the default prints an episode's first only).
            &[("CUQUOTA_LIMIT", "2MiB"), ("CUQUOTA_LOG_LEVEL", "debug")],
        );
        out.check_exit(0);
        // 2 099 200 elements are over 2 MiB: refused, the driver never asked.
        out.check(1, "array", &[("rc", OUT_OF_MEMORY)]);
        assert_eq!(shim(&out, 2), (0, 0, 0), "{out}");
        out.check(3, "array", &[("rc", 0)]);
        // 1 040 000 elements fit the 1 MiB left, the driver's 24 pages do not: the array
        // is destroyed and the caller refused, the shim back where it was.
        out.check(4, "array", &[("rc", OUT_OF_MEMORY)]);
        assert_eq!(charged(&out, quota, 5), 16 * PAGE, "{out}");
        assert_eq!(shim(&out, 6), (16 * PAGE, 40 * PAGE, 1), "{out}");
        out.check(7, "array", &[("rc", OUT_OF_MEMORY)]);
        assert_eq!(charged(&out, quota, 8), 16 * PAGE, "{out}");
        out.check(9, "arrdestroy", &[("rc", 0)]);
        out.check(10, "array", &[("rc", 0)]);
        assert_eq!(charged(&out, quota, 11), 24 * PAGE, "{out}");
        assert_eq!(shim(&out, 12).0, 24 * PAGE, "{out}");
        assert_eq!(out.logs_starting("GPU 0 refused").len(), 3, "{out}");
    }
}

#[test]
fn the_legacy_32_bit_creations_are_charged_too() {
    for client in Client::ALL {
        let out = run(
            client,
            "init larray:1000:1000:1:1 info larray3d:100:100:10:32:1:0 info \
             larray:1040:1000:1:1 info arrdestroy:0 arrdestroy:1 info shimstats:0",
            &[("CUQUOTA_LIMIT", "2MiB")],
        );
        out.check_exit(0);
        ok(&out, 1);
        assert_eq!(charged(&out, 2 * MIB, 2), 16 * PAGE, "{out}");
        ok(&out, 3);
        assert_eq!(charged(&out, 2 * MIB, 4), 24 * PAGE, "{out}");
        // 1 040 000 elements are over the 512 KiB left: refused, the driver never asked
        out.check(5, "larray", &[("rc", OUT_OF_MEMORY)]);
        assert_eq!(charged(&out, 2 * MIB, 6), 24 * PAGE, "{out}");
        ok(&out, 7);
        ok(&out, 8);
        assert_eq!(charged(&out, 2 * MIB, 9), 0, "{out}");
        assert_eq!(shim(&out, 10), (0, 24 * PAGE, 0), "{out}");
    }
}

#[test]
fn sparse_and_deferred_mapping_arrays_are_not_charged() {
    // Each is 64 MiB of elements, over the 16 MiB quota if it were charged.
    for client in Client::ALL {
        let out = run(
            client,
            "init array3d:4096:4096:0:1:4:128 array3d:4096:4096:0:1:4:64 \
             mipmap:4096:4096:0:1:4:128:13 info shimstats:0 \
             arrreq:0 mipreq:0 array:64:64:1:1 arrreq:2 \
             arrdestroy:0 arrdestroy:1 mipdestroy:0 info",
            &[("CUQUOTA_LIMIT", "16MiB")],
        );
        out.check_exit(0);
        for i in 0..4 {
            ok(&out, i);
        }
        assert_eq!(charged(&out, 16 * MIB, 4), 0, "{out}");
        assert_eq!(shim(&out, 5), (0, 0, 0), "{out}");
        // The documented query answers for deferred-mapping arrays, and only for them.
        let size = out.check(6, "arrreq", &[("rc", 0)]).num("size").unwrap();
        assert_eq!(size, 4096 * 4096 * 4, "{out}");
        out.check(7, "mipreq", &[("rc", 0), ("alignment", PAGE)]);
        out.check(8, "array", &[("rc", 0)]);
        out.check(9, "arrreq", &[("rc", INVALID_VALUE)]);
        for i in 10..13 {
            ok(&out, i);
        }
        assert_eq!(charged(&out, 16 * MIB, 13), PAGE, "{out}");
    }
}

#[test]
fn mipmap_levels_go_with_their_array() {
    for client in Client::ALL {
        let out = run(
            client,
            "init mipmap:64:64:0:1:1:0:7 miplevel:0:3 miplevel:0:7 arrdestroy:0 info \
             mipdestroy:0 info shimstats:0",
            &[("CUQUOTA_LIMIT", "1GiB")],
        );
        out.check_exit(0);
        out.check(1, "mipmap", &[("rc", 0)]);
        out.check(2, "miplevel", &[("rc", 0)]);
        out.check(3, "miplevel", &[("rc", INVALID_VALUE)]);
        // A level is not the caller's to destroy; its charge stays with the mipmap.
        out.check(4, "arrdestroy", &[("rc", 400)]);
        assert_eq!(charged(&out, GIB, 5), PAGE, "{out}");
        out.check(6, "mipdestroy", &[("rc", 0)]);
        assert_eq!(charged(&out, GIB, 7), 0, "{out}");
        assert_eq!(shim(&out, 8), (0, PAGE, 0), "{out}");
    }
}

#[test]
fn the_trace_records_arrays_at_their_true_size() {
    let dir = scratch_dir("trace-arrays");
    let path = dir.join("t.jsonl");
    let out = run(
        Client::Dlsym,
        "init array:1000:1000:1:1 array:1040:1000:1:1 arrdestroy:0",
        &[
            ("CUQUOTA_LIMIT", "2MiB"),
            ("CUQUOTA_TRACE", path.to_str().unwrap()),
        ],
    );
    // The second is over the quota only at its true size: refused after the driver.
    out.check_rcs(&[0, 0, OUT_OF_MEMORY, 0]);
    let text = std::fs::read_to_string(&path).unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        // (and not the episode's outcome: the `backoff` line at exit)
        .filter(|e: &serde_json::Value| {
            !matches!(e["type"].as_str(), Some("header" | "summary" | "backoff"))
        })
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["alloc", "refused", "free"], "{text}");
    let handle = out.op(1, "array").get("handle").unwrap().to_string();
    for (e, bytes, in_use) in [
        (&events[0], 16 * PAGE, 16 * PAGE),
        (&events[1], 24 * PAGE, 16 * PAGE),
        (&events[2], 16 * PAGE, 0),
    ] {
        assert_eq!(e["bytes"], bytes, "{e}");
        assert_eq!(e["in_use"], in_use, "{e}");
    }
    assert_eq!(events[0]["api"], "cuArrayCreate_v2");
    assert_eq!(events[0]["ptr"], handle.as_str());
    assert_eq!(events[2]["api"], "cuArrayDestroy");
}

/// tests/clients/array_sizes.c (also the gpu-check "arrays" workload): for each shape, the
/// drop in free memory across the creation and the requirements of its deferred-mapping twin.
fn array_sizes(preload: bool) -> Vec<(String, u64, u64)> {
    let mut run =
        Run::program(artifacts().clients_dir.join("array_sizes")).env("CUQUOTA_LIMIT", "4GiB");
    if !preload {
        run = run.no_preload();
    }
    let out = run.run();
    out.check_exit(0);
    let shapes: Vec<_> = out
        .ops()
        .into_iter()
        .filter(|l| l.op == "shape")
        .map(|l| {
            for k in ["rc", "twin_rc", "destroy_rc"] {
                assert_eq!(l.num(k), Some(0), "{}\n{out}", l.raw);
            }
            let n = |k| l.num(k).unwrap();
            (l.args[0].clone(), n("drop"), n("twin"))
        })
        .collect();
    assert_eq!(shapes.len(), 5, "{out}");
    shapes
}

#[test]
fn a_deferred_mapping_twin_tells_what_an_array_takes() {
    // The shim alone: its free memory drops by what the twin's requirements say.
    for (name, drop, twin) in array_sizes(false) {
        assert_eq!(drop, twin, "{name}");
        assert!(twin > 0 && twin % PAGE == 0, "{name}: {twin}");
    }
    // Under cuquota (4 GiB quota): the virtualised free memory drops by the same, so
    // cuquota charged each array exactly what the driver holds for it.
    for (name, drop, twin) in array_sizes(true) {
        assert_eq!(drop, twin, "{name}");
    }
}

/// Arrays belong to their context: destroying it frees them in the driver, and cuquota
/// credits them with its other allocations.
#[test]
fn a_destroyed_context_takes_its_arrays_with_it() {
    for client in Client::ALL {
        let out = run(
            client,
            "init ctxcreate array:1000:1000:1:1 mipmap:256:256:0:1:4:0:9 info shimstats:0 \
             ctxdestroy:0 dev:0 info shimstats:0",
            &[("CUQUOTA_LIMIT", "1GiB")],
        );
        out.check_exit(0);
        ok(&out, 2);
        ok(&out, 3);
        assert_eq!(charged(&out, GIB, 4), 22 * PAGE, "{out}");
        assert_eq!(shim(&out, 5), (22 * PAGE, 22 * PAGE, 2), "{out}");
        ok(&out, 6);
        assert_eq!(charged(&out, GIB, 8), 0, "{out}");
        assert_eq!(shim(&out, 9).0, 0, "{out}");
        assert_eq!(shim(&out, 9).2, 0, "{out}");
    }
}
