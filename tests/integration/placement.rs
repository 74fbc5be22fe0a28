//! Placement and ownership: where a charge lands (the stream's device, the pool's
//! location), the context that owns it (destroyed or reset, it takes its allocations with
//! it; pool allocations belong to none, a primary reset takes its device's), and capture (a capturing stream's allocations and frees allocate and free nothing).
//! Each test runs over every lookup path and checks against the shim's own accounting.

use crate::common::*;

/// Two 8 GiB simulated GPUs, 1 GiB quota on each.
const TWO_GPUS: [(&str, &str); 2] = [("CUDA_SHIM_DEVICES", "2"), ("CUQUOTA_LIMIT", "1GiB")];

#[test]
fn an_allocation_on_gpu1s_stream_is_charged_to_gpu1() {
    for client in Client::ALL {
        // GPU 1's stream, GPU 0 current: GPU 1 takes 768 MiB, GPU 0 still has its 1 GiB.
        let out = run(
            client,
            "init dev:1 stream dev:0 asyncon:768M:0 alloc:768M asyncon:768M:0 \
             shimstats:1 shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check(4, "asyncon", &[("rc", 0)]);
        out.check(5, "alloc", &[("rc", 0)]);
        out.check(6, "asyncon", &[("rc", OUT_OF_MEMORY)]);
        out.check(7, "shimstats", &[("in_use", 768 * MIB), ("live", 1)]);
        out.check(8, "shimstats", &[("in_use", 768 * MIB), ("live", 1)]);
    }
}

#[test]
fn an_allocation_from_gpu1s_default_pool_is_charged_to_gpu1() {
    for client in Client::ALL {
        let out = run(
            client,
            "init defpoolon:1:768M:n alloc:768M defpoolon:1:768M:n shimstats:1 shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check(1, "defpoolon", &[("rc", 0)]);
        out.check(2, "alloc", &[("rc", 0)]);
        out.check(3, "defpoolon", &[("rc", OUT_OF_MEMORY)]);
        out.check(4, "shimstats", &[("in_use", 768 * MIB)]);
        out.check(5, "shimstats", &[("in_use", 768 * MIB)]);
    }
}

/// The driver gives 0 for a stream-ordered allocation on a stream with a context, from a
/// thread with none current; cuquota used to answer 201 itself.
#[test]
fn a_thread_without_a_context_gets_the_drivers_answer_and_gpu1_is_charged() {
    for client in Client::ALL {
        let out = run(
            client,
            "init dev:1 stream dev:0 t-asyncon:768M:0 t-defpoolon:1:256M:0 \
             t-defpoolon:1:1M:0 t-asyncon:1M:n shimstats:1",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check(4, "asyncon", &[("rc", 0)]);
        out.check(5, "defpoolon", &[("rc", 0)]);
        out.check(6, "defpoolon", &[("rc", OUT_OF_MEMORY)]);
        // the NULL stream needs a current context: the driver's own 201
        out.check(7, "asyncon", &[("rc", 201)]);
        out.check(8, "shimstats", &[("in_use", GIB), ("live", 2)]);
    }
}

/// CUDA 13's pools by location: a device's is charged there, the host's is not.
#[test]
fn cuda13_default_pools_by_location() {
    for client in Client::ALL {
        let out = run(
            client,
            "init locpool:1:1:768M alloc:768M locpool:3:0:768M locpool:2:0:768M \
             locpool:1:1:768M info shimstats:1",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, OUT_OF_MEMORY, 0, 0]);
        out.check(6, "info", &[("free", 256 * MIB)]);
        out.check(7, "shimstats", &[("in_use", 768 * MIB), ("live", 1)]);
    }
}

/// CUDA 13.4's `DEVICE_LOCALITY_DOMAIN` (cuda.h: "a portion of device memory, specified by
/// the locality domain ID"), its device in the location's `localized.deviceId` (the client
/// leaves the rest of the union non-zero): `cuMemCreate`, a pool `cuMemPoolCreate` makes
/// there and the default pool `cuMemGetDefaultMemPool` names are charged to that GPU.
#[test]
fn locality_domain_memory_is_charged_to_its_device() {
    for client in Client::ALL {
        let out = run(
            client,
            "init createat:768M:6:1 poolat:6:1:256M locpool:6:1:2M createat:2M:6:1 \
             createat:768M:6:0 dev:1 info shimstats:1 shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0, 0, 0, 0, 0]);
        out.check(7, "info", &[("free", 0)]);
        out.check(8, "shimstats", &[("in_use", GIB), ("live", 2)]);
        out.check(9, "shimstats", &[("in_use", 768 * MIB), ("live", 1)]);
    }
}

/// A location type cuquota does not know is refused with one line naming it (fail closed),
/// never passed as host memory; the host types still pass uncharged.
#[test]
fn an_unknown_location_type_is_refused_not_taken_for_the_host() {
    for client in Client::ALL {
        let out = run(
            client,
            "init createat:2M:7:0 poolat:9:0:2M createat:768M:2:0 poolat:3:0:768M \
             alloc:1G shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, NOT_SUPPORTED, NOT_SUPPORTED, 0, 0, 0, 0]);
        out.check(6, "shimstats", &[("in_use", GIB), ("live", 1)]);
        for (api, kind) in [("cuMemCreate", 7), ("cuMemPoolCreate", 9)] {
            out.check_log(&format!(
                "refused {api}: memory location type {kind} (id 0) is not one cuquota knows \
                 (DEVICE, DEVICE_LOCALITY_DOMAIN, HOST, HOST_NUMA, HOST_NUMA_CURRENT), so its \
                 memory cannot be charged; the call fails with CUDA_ERROR_NOT_SUPPORTED"
            ));
        }
        assert_eq!(out.logs_starting("refused ").len(), 2, "{out}");
    }
}

#[test]
fn host_pools_are_not_charged() {
    for client in Client::ALL {
        let out = run(
            client,
            "init hostpool:768M hostpool:768M alloc:768M info shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0]);
        out.check(4, "info", &[("free", 256 * MIB), ("total", GIB)]);
        out.check(5, "shimstats", &[("in_use", 768 * MIB), ("live", 1)]);
    }
}

#[test]
fn destroying_a_context_credits_its_pointers_not_its_streams_pool_allocations() {
    for client in Client::ALL {
        let out = run(
            client,
            "init ctxcreate alloc:256M async:256M defpoolon:0:256M:n ctxdestroy:0 \
             shimstats:0 alloc:1G alloc:512M shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, 0, OUT_OF_MEMORY, 0, 0]);
        // the pointer went with the context; the two pool allocations stay, in the shim too
        out.check(6, "shimstats", &[("in_use", 512 * MIB), ("live", 2)]);
        out.check(9, "shimstats", &[("in_use", GIB), ("live", 3)]);
    }
}

/// cuda.h on `cuCtxDestroy`: it "will not destroy memory allocations by cuMemCreate(),
/// cuMemAllocAsync() and cuMemAllocFromPoolAsync(). These memory allocations are not
/// associated with any CUDA context". A context takes 768 MiB from a pool and is destroyed
/// (or detached for the last time), twice, under a 1 GiB quota: the second round is refused
/// (the shim still holds the first), and a free from another context gives the room back.
/// Both ways of counting (the footprint, allocations only).
#[test]
fn a_context_gone_leaves_its_pool_allocation_held_to_the_quota() {
    for client in Client::ALL {
        for end in ["ctxdestroy", "ctxdetach"] {
            for count in ["footprint", "allocations"] {
                let out = run(
                    client,
                    &format!(
                        "init ctxcreate async:768M {end}:0 ctxcreate async:768M shimstats:0 \
                         {end}:1 shimstats:0 dev:0 free:0 ctxcreate async:768M shimstats:0 info"
                    ),
                    &[TWO_GPUS[0], TWO_GPUS[1], ("CUQUOTA_COUNT", count)],
                );
                out.check_exit(0);
                let mut rcs = [0; 15];
                rcs[5] = OUT_OF_MEMORY;
                out.check_rcs(&rcs);
                out.check(6, "shimstats", &[("in_use", 768 * MIB), ("live", 1)]);
                out.check(8, "shimstats", &[("in_use", 768 * MIB), ("live", 1)]);
                out.check(13, "shimstats", &[("in_use", 768 * MIB), ("live", 1)]);
                out.check(14, "info", &[("free", 256 * MIB)]);
            }
        }
    }
}

/// A primary context's reset (or last release, which resets it) is device-wide: cuda.h, it
/// "destroys and cleans up all resources associated with the current device in the current
/// process". GPU 0's allocations go, its pool allocation too; the one from GPU 1's pool,
/// made on GPU 0's stream, is GPU 1's and stays until freed.
#[test]
fn resetting_or_releasing_the_primary_context_credits_what_it_held() {
    for client in Client::ALL {
        for op in ["ctxreset", "ctxrelease"] {
            let out = run(
                client,
                &format!(
                    "init alloc:512M async:256M defpoolon:1:256M:n {op}:0 shimstats:0 \
                     shimstats:1 dev:0 alloc:1G dev:1 alloc:1G free:2 alloc:1G shimstats:1"
                ),
                &TWO_GPUS,
            );
            out.check_exit(0);
            let mut rcs = [0; 14];
            rcs[10] = OUT_OF_MEMORY;
            out.check_rcs(&rcs);
            out.check(5, "shimstats", &[("in_use", 0), ("live", 0)]);
            out.check(6, "shimstats", &[("in_use", 256 * MIB), ("live", 1)]);
            out.check(13, "shimstats", &[("in_use", GIB), ("live", 1)]);
        }
    }
}

/// Only the release of the last reference frees a primary context's memory.
#[test]
fn a_release_that_leaves_a_reference_credits_nothing() {
    for client in Client::ALL {
        let out = run(
            client,
            "init ctxretain:0 alloc:512M ctxrelease:0 alloc:768M ctxrelease:0 alloc:768M \
             shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, OUT_OF_MEMORY, 0, 0, 0]);
        out.check(7, "shimstats", &[("in_use", 768 * MIB), ("live", 1)]);
    }
}

/// The deprecated cuCtxDetach destroys a created context at its last reference (PyCUDA).
#[test]
fn the_last_detach_credits_the_context() {
    for client in Client::ALL {
        let out = run(
            client,
            "init ctxcreate ctxattach alloc:768M ctxdetach:0 alloc:512M ctxdetach:0 \
             alloc:1G shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, OUT_OF_MEMORY, 0, 0, 0]);
        out.check(8, "shimstats", &[("in_use", GIB), ("live", 1)]);
    }
}

/// Another context's memory stays charged when one is destroyed.
#[test]
fn a_context_takes_only_its_own_allocations() {
    for client in Client::ALL {
        let out = run(
            client,
            "init alloc:512M ctxcreate alloc:256M ctxdestroy:0 alloc:512M alloc:1 shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, OUT_OF_MEMORY, 0]);
        out.check(7, "shimstats", &[("in_use", GIB), ("live", 2)]);
    }
}

#[test]
fn the_trace_records_one_context_event() {
    let dir = scratch_dir("trace-context");
    let template = format!("{}/t-%p.jsonl", dir.display());
    let out = run(
        Client::Linked,
        "init ctxcreate alloc:1M alloc:2M async:4M ctxdestroy:0",
        &[("CUQUOTA_TRACE", &template)],
    );
    out.check_rcs(&[0, 0, 0, 0, 0, 0]);
    let text = std::fs::read_to_string(dir.join(format!("t-{}.jsonl", out.pid))).unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["type"] == "context")
        .collect();
    assert_eq!(events.len(), 1, "{text}");
    let e = &events[0];
    assert_eq!(e["api"], "cuCtxDestroy_v2");
    // the pool allocation belongs to no context: it stays
    assert_eq!(
        (e["count"].as_u64(), e["bytes"].as_u64()),
        (Some(2), Some(3 * MIB))
    );
    assert_eq!(e["in_use"], 4 * MIB);
    let mut ptrs: Vec<u64> = e["ptrs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u64::from_str_radix(p.as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
        .collect();
    ptrs.sort();
    let mut want: Vec<u64> = (2..4).map(|i| out.value(i, "alloc", "ptr")).collect();
    want.sort();
    assert_eq!(ptrs, want);
}

/// Calls ask the driver whether their stream captures only while a capture may be live:
/// the count of live captures must never fall while one is. One of two captures ends, a
/// second end of it fails (CUDA_ERROR_ILLEGAL_STATE, 401): the other stream still captures,
/// and its allocations charge nothing.
#[test]
fn a_capture_stays_counted_while_another_ends() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream stream capture:0 capture:1 endcapture:0 endcapture:0 \
             asyncon:768M:1 asyncon:768M:1 endcapture:1 alloc:1G shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, 401, 0, 0, 0, 0, 0]);
        out.check(11, "shimstats", &[("in_use", GIB), ("live", 1)]);
    }
}

#[test]
fn capturing_streams_neither_charge_nor_credit() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream capture:0 asyncon:768M:0 asyncon:768M:0 endcapture:0 alloc:1G \
             shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, 0, 0]);
        out.check(7, "shimstats", &[("in_use", GIB), ("live", 1)]);
        // a free captured into the graph frees nothing until the graph runs
        let out = run(
            client,
            "init stream alloc:768M capture:0 freeon:0:0 endcapture:0 alloc:512M shimstats:0",
            &TWO_GPUS,
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, OUT_OF_MEMORY, 0]);
        out.check(7, "shimstats", &[("in_use", 768 * MIB), ("live", 1)]);
    }
}
