//! The pool cache: what memory pools keep beyond their live allocations is charged
//! (settled to the pools' chunked growth, moved there by a free), read again when a decision
//! needs it, and trimmed to make room, exactly as the shim's own footprint says, on every
//! lookup path and through each stream-ordered allocation function.

use crate::common::*;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "64MiB");

/// The stream-ordered allocation ops: `cuMemAllocAsync`, `cuMemAllocFromPoolAsync` from a
/// created pool and from the default pool (each a `_ptsz` variant under RuntimePerThread).
const KINDS: [&str; 3] = ["async", "pool", "defpool"];

/// The shim's whole footprint of the device at footprint line `i`.
fn footprint(out: &Output, i: usize) -> u64 {
    std::iter::once("allocations")
        .chain(cuquota_format::part::Part::ALL.map(|p| p.name()))
        .map(|k| out.value(i, "footprint", k))
        .sum()
}

/// cuMemGetInfo's free figure at line `i` is the quota less the shim's footprint at line
/// `at`.
fn check_free(out: &Output, i: usize, at: usize, limit: u64) {
    let free = out.value(i, "info", "free");
    assert_eq!(free, limit - footprint(out, at), "line {i}:\n{out}");
}

fn trace_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_freed_pool_allocation_stays_charged_until_the_pool_gives_it_back() {
    for client in Client::ALL {
        for kind in KINDS {
            let out = run(
                client,
                &format!(
                    "init {kind}:3M info footprint:0 freeasync:0 info footprint:0 sync info \
                     footprint:0"
                ),
                &[LIMIT],
            );
            out.check_exit(0);
            out.check_rcs(&[0; 10]);
            // 3 MiB in a pool that reserved two 2 MiB chunks: 4 MiB charged
            out.check(
                3,
                "footprint",
                &[("allocations", 3 * MIB), ("pool_cache", MIB)],
            );
            check_free(&out, 2, 3, 64 * MIB);
            // freed: the pool keeps it (cuMemGetInfo reads it again, and it is still there)
            out.check(
                6,
                "footprint",
                &[("allocations", 0), ("pool_cache", 4 * MIB)],
            );
            check_free(&out, 5, 6, 64 * MIB);
            // synchronized: the pool gave it back, and cuMemGetInfo reads that
            out.check(9, "footprint", &[("pool_cache", 0)]);
            check_free(&out, 8, 9, 64 * MIB);
        }
    }
}

#[test]
fn the_charge_follows_the_pools_chunk_growth() {
    for client in Client::ALL {
        for kind in KINDS {
            let out = run(
                client,
                &format!(
                    "init {kind}:1M info footprint:0 {kind}:1M info footprint:0 {kind}:31M \
                     info footprint:0 {kind}:1M footprint:0"
                ),
                &[LIMIT, ("CUDA_SHIM_POOL_CHUNK", "32MiB")],
            );
            out.check_exit(0);
            out.check_rcs(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, OUT_OF_MEMORY, 0]);
            out.check(
                3,
                "footprint",
                &[("allocations", MIB), ("pool_cache", 31 * MIB)],
            );
            check_free(&out, 2, 3, 64 * MIB);
            // the second fits in what the pool reserved
            out.check(6, "footprint", &[("pool_cache", 30 * MIB)]);
            check_free(&out, 5, 6, 64 * MIB);
            // 31 MiB more fits the quota, and so does the chunk the pool grows by
            out.check(
                9,
                "footprint",
                &[("allocations", 33 * MIB), ("pool_cache", 31 * MIB)],
            );
            check_free(&out, 8, 9, 64 * MIB);
            // 1 MiB more would fit in the pool, but not in the quota: it is all reserved
            assert_eq!(footprint(&out, 11), 64 * MIB, "{out}");
        }
    }
}

/// The 12-GiB example: a pool that never gives memory back (threshold at the
/// maximum, as PyTorch's `cudaMallocAsync` backend sets it) holds 6 GiB that were freed;
/// `cuMemAlloc` of 6 GiB under a 6 GiB quota trims it and fits, and the device never holds
/// more than the quota. The trim is in the summary line and the trace.
#[test]
fn the_12_gib_example_trims_the_pool_and_fits() {
    let dir = scratch_dir("pool-cache-12g");
    for (n, client) in Client::ALL.into_iter().enumerate() {
        for kind in KINDS {
            let path = dir.join(format!("{n}-{kind}.jsonl"));
            let pool = if kind == "async" { "defpool" } else { kind };
            let out = run(
                client,
                &format!(
                    "init poolthreshold:{pool}:16G {kind}:6G freeasync:0 sync footprint:0 \
                     alloc:6G footprint:0 info"
                ),
                &[
                    ("CUQUOTA_LIMIT", "6GiB"),
                    ("CUDA_SHIM_MEMORY", "16GiB"),
                    ("CUQUOTA_TRACE", path.to_str().unwrap()),
                ],
            );
            out.check_exit(0);
            out.check_rcs(&[0; 9]);
            out.check(
                5,
                "footprint",
                &[("allocations", 0), ("pool_cache", 6 * GIB)],
            );
            out.check(
                7,
                "footprint",
                &[("allocations", 6 * GIB), ("pool_cache", 0)],
            );
            assert!(footprint(&out, 7) <= 6 * GIB, "{out}");
            out.check(8, "info", &[("free", 0)]);
            out.check_log(
                "GPU 0 summary: peak 6.00 GiB (6442450944 bytes) of quota 6.00 GiB, 2 \
                 allocations, 0 refusals, 1 live at exit (6.00 GiB); besides allocations at \
                 exit: pool cache 0 B (peak 6.00 GiB); 1 trim gave back 6.00 GiB",
            );
            let lines = trace_lines(&path);
            let at = lines
                .iter()
                .position(|l| l["type"] == "trim")
                .unwrap_or_else(|| panic!("no trim event in {lines:?}"));
            let (trim, after) = (&lines[at], &lines[at + 1]);
            assert_eq!(
                (&trim["api"], &trim["part"], trim["bytes"].as_u64()),
                (&"cuMemAlloc_v2".into(), &"pool_cache".into(), Some(6 * GIB)),
                "{trim}"
            );
            assert_eq!(
                (&after["type"], &after["part"], after["bytes"].as_u64()),
                (&"footprint".into(), &"pool_cache".into(), Some(0)),
                "{after}"
            );
            let max = lines.iter().filter_map(|l| l["in_use"].as_u64()).max();
            assert_eq!(max, Some(6 * GIB));
            let d = &lines.last().unwrap()["devices"][0];
            assert_eq!(
                (d["trims"].as_u64(), d["trimmed_bytes"].as_u64()),
                (Some(1), Some(6 * GIB)),
                "{d}"
            );
            assert_eq!(d["pool_cache_peak"].as_u64(), Some(6 * GIB), "{d}");
        }
    }
}

#[test]
fn live_pool_memory_is_not_trimmed_and_the_request_is_refused() {
    for client in Client::ALL {
        for kind in KINDS {
            let out = run(
                client,
                &format!("init {kind}:6G alloc:6G footprint:0"),
                &[("CUQUOTA_LIMIT", "6GiB"), ("CUDA_SHIM_MEMORY", "16GiB")],
            );
            out.check_exit(0);
            out.check_rcs(&[0, 0, OUT_OF_MEMORY, 0]);
            out.check(
                3,
                "footprint",
                &[("allocations", 6 * GIB), ("pool_cache", 0)],
            );
            assert!(
                out.cuquota_lines()
                    .iter()
                    .any(|l| l.contains("cuMemAlloc_v2") && l.contains("refused")),
                "{out}"
            );
        }
    }
}

/// `CUQUOTA_COUNT=allocations`: a free gives the room back at once, whatever the pool keeps,
/// and the trace has no footprint events.
#[test]
fn counting_allocations_leaves_the_pools_out() {
    let dir = scratch_dir("pool-cache-allocations");
    for (n, client) in Client::ALL.into_iter().enumerate() {
        for kind in KINDS {
            let path = dir.join(format!("{n}-{kind}.jsonl"));
            let out = run(
                client,
                &format!("init {kind}:3M info freeasync:0 info footprint:0 alloc:64M"),
                &[
                    LIMIT,
                    ("CUQUOTA_COUNT", "allocations"),
                    ("CUQUOTA_TRACE", path.to_str().unwrap()),
                ],
            );
            out.check_exit(0);
            out.check_rcs(&[0; 7]);
            out.check(2, "info", &[("free", 61 * MIB)]);
            out.check(4, "info", &[("free", 64 * MIB)]);
            out.check(5, "footprint", &[("pool_cache", 4 * MIB)]);
            let lines = trace_lines(&path);
            assert_eq!(lines[0]["quota_counts"], "allocations");
            assert!(
                lines
                    .iter()
                    .all(|l| l["type"] != "footprint" && l["type"] != "trim"),
                "{lines:?}"
            );
        }
    }
}

/// Threads mix stream-ordered and plain allocations, frees of both and synchronizations
/// under a quota their demand exceeds: between rounds the shim's whole footprint is never
/// above the quota.
#[test]
fn threads_mixing_pool_and_plain_allocations_keep_the_footprint_under_the_quota() {
    for client in Client::ALL {
        let out = run(client, "init poolthreads:8:200:3M footprint:0", &[LIMIT]);
        out.check_exit(0);
        let t = out.check(1, "poolthreads", &[("other", 0)]);
        assert!(
            t.num("ok").unwrap() > 0 && t.num("oom").unwrap() > 0,
            "{out}"
        );
        assert!(t.num("max").unwrap() <= 64 * MIB, "{out}");
        out.check(2, "footprint", &[("allocations", 0)]);
    }
}

/// A primary context's reset frees the device's pool allocations, and cleans up its pools,
/// whatever their thresholds (the shim follows `cuDevicePrimaryCtxReset`'s "destroys and
/// cleans up all resources associated with the current device in the current process"):
/// cuquota gives the allocations back and reads the pools again, so nothing stays charged.
#[test]
fn a_context_reset_gives_back_what_the_pools_kept() {
    for client in Client::ALL {
        for (threshold, kept) in [(0, 0), (GIB, 0)] {
            let out = run(
                client,
                &format!(
                    "init poolthreshold:defpool:{threshold} async:3M ctxreset:0 dev:0 \
                     footprint:0 info"
                ),
                &[LIMIT],
            );
            out.check_exit(0);
            out.check_rcs(&[0; 7]);
            out.check(5, "footprint", &[("allocations", 0), ("pool_cache", kept)]);
            check_free(&out, 6, 5, 64 * MIB);
        }
    }
}
