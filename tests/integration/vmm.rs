//! VMM lifetimes: a `cuMemCreate` allocation stays charged until its last handle reference is
//! released *and* its last mapping (into a reserved range, or into an array) unmapped, on
//! every path to the driver; the shim's own accounting (`shimstats`) is the oracle.

use crate::common::*;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "1GiB");

/// Runs `steps` (one op word each, with the exact values its line must show) on `client`.
pub fn run_steps(client: Client, steps: &[(&str, &[(&str, u64)])]) -> Output {
    let ops: Vec<&str> = steps.iter().map(|s| s.0).collect();
    let out = run(client, &ops.join(" "), &[LIMIT]);
    out.check_exit(0);
    for (i, (word, want)) in steps.iter().enumerate() {
        out.check(i, word.split(':').next().unwrap(), want);
    }
    out
}

const OK: &[(&str, u64)] = &[("rc", 0)];
const REFUSED: &[(&str, u64)] = &[("rc", OUT_OF_MEMORY)];
const INVALID: &[(&str, u64)] = &[("rc", INVALID_VALUE)];

fn free(bytes: u64) -> &'static [(&'static str, u64)] {
    Box::leak(Box::new([("rc", 0), ("free", bytes)]))
}

fn shim_in_use(bytes: u64) -> &'static [(&'static str, u64)] {
    Box::leak(Box::new([("rc", 0), ("in_use", bytes)]))
}

/// The CUDA samples' pattern: create, map, set access, release the handle. The memory lives
/// until the unmap, so the third 512 MiB creation does not fit under 1 GiB.
#[test]
fn released_but_mapped_memory_stays_charged() {
    for client in Client::ALL {
        let mut steps: Vec<(&str, &[(&str, u64)])> = vec![("init", OK)];
        let rounds: [[&str; 5]; 2] = [
            [
                "reserve:512M",
                "create:512M",
                "map:0:0",
                "access:0:0:512M",
                "release:0",
            ],
            [
                "reserve:512M",
                "create:512M",
                "map:1:1",
                "access:1:0:512M",
                "release:1",
            ],
        ];
        for round in &rounds {
            steps.extend(round.iter().map(|w| (*w, OK)));
        }
        steps.extend([
            ("info", free(0)),
            ("shimstats:0", shim_in_use(GIB)),
            ("create:512M", REFUSED),
            ("create:2M", REFUSED),
            ("unmap:0", OK),
            ("info", free(512 * MIB)),
            ("shimstats:0", shim_in_use(512 * MIB)),
            ("create:512M", OK),
            ("info", free(0)),
        ]);
        run_steps(client, &steps);
    }
}

/// NCCL's free path: retain the handle of a mapped address, release it, unmap, release the
/// original. Only the unmap (the last thing that held the memory) credits.
#[test]
fn retain_and_release_do_not_credit_mapped_memory() {
    for client in Client::ALL {
        run_steps(
            client,
            &[
                ("init", OK),
                ("reserve:512M", OK),
                ("create:512M", OK),
                ("map:0:0", OK),
                ("retain:0:4096", OK),
                ("release:1", OK),
                ("info", free(512 * MIB)),
                ("release:0", OK),
                ("info", free(512 * MIB)),
                ("shimstats:0", shim_in_use(512 * MIB)),
                ("create:512M", OK),
                ("create:2M", REFUSED),
                ("unmap:0", OK),
                ("info", free(512 * MIB)),
                ("shimstats:0", shim_in_use(512 * MIB)),
            ],
        );
    }
}

/// Unmap first: the handle still holds the memory; the release then credits it, once.
#[test]
fn unmap_then_release_credits_exactly_once() {
    for client in Client::ALL {
        run_steps(
            client,
            &[
                ("init", OK),
                ("reserve:512M", OK),
                ("create:512M", OK),
                ("map:0:0", OK),
                ("retain:0:0", OK),
                ("unmap:0", OK),
                ("info", free(512 * MIB)),
                ("release:0", OK),
                ("info", free(512 * MIB)),
                ("release:1", OK),
                ("info", free(GIB)),
                ("release:0", INVALID),
                ("info", free(GIB)),
                ("shimstats:0", shim_in_use(0)),
            ],
        );
    }
}

/// One reservation, two mappings: unmapping one ends only that one; unmapping a range that
/// covers both ends both; a handle mapped twice lives until its second unmap.
#[test]
fn unmap_ends_exactly_the_mappings_inside_its_range() {
    for client in Client::ALL {
        run_steps(
            client,
            &[
                ("init", OK),
                ("reserve:1G", OK),
                ("create:512M", OK),
                ("create:512M", OK),
                ("mapat:0:0:0", OK),
                ("mapat:0:512M:1", OK),
                ("release:0", OK),
                ("release:1", OK),
                ("info", free(0)),
                ("unmapat:0:512M:512M", OK),
                ("info", free(512 * MIB)),
                ("shimstats:0", shim_in_use(512 * MIB)),
                // a range that cuts no mapping whole is refused and ends nothing
                ("unmapat:0:0:2M", INVALID),
                ("info", free(512 * MIB)),
                ("unmapat:0:0:512M", OK),
                ("info", free(GIB)),
                // both at once
                ("create:512M", OK),
                ("create:512M", OK),
                ("mapat:0:0:2", OK),
                ("mapat:0:512M:3", OK),
                ("release:2", OK),
                ("release:3", OK),
                ("info", free(0)),
                ("unmapat:0:0:1G", OK),
                ("info", free(GIB)),
                // one handle mapped twice
                ("create:512M", OK),
                ("mapat:0:0:4", OK),
                ("mapat:0:512M:4", OK),
                ("release:4", OK),
                ("unmapat:0:0:512M", OK),
                ("info", free(512 * MIB)),
                ("unmapat:0:512M:512M", OK),
                ("info", free(GIB)),
                ("shimstats:0", shim_in_use(0)),
            ],
        );
    }
}

/// Freeing a reservation unmaps what is still mapped in it (the shim does, as the driver
/// may): that ends the released allocation's charge.
#[test]
fn freeing_the_reservation_ends_its_mappings() {
    for client in Client::ALL {
        run_steps(
            client,
            &[
                ("init", OK),
                ("reserve:512M", OK),
                ("create:512M", OK),
                ("map:0:0", OK),
                ("release:0", OK),
                ("info", free(512 * MIB)),
                ("unreserve:0", OK),
                ("info", free(GIB)),
                ("shimstats:0", shim_in_use(0)),
            ],
        );
    }
}

/// cuda.h on `cuMemRelease`: freed only "when all outstanding mappings to the memory are
/// unmapped", and `cuMemMapArrayAsync` maps a tile pool's memory into a sparse or
/// deferred-mapping array. A 512 MiB tile pool mapped into a deferred-mapping array and
/// released stays held, in the shim and under the 1 GiB quota (a second 512 MiB fits, 2 MiB
/// more does not), until the array mapping is unmapped.
#[test]
fn an_array_mapping_keeps_released_memory_charged() {
    for client in Client::ALL {
        let out = run(
            client,
            "init array3d:4096:4096:0:1:4:128 createtile:512M arrmap:0:0 release:0 info \
             shimstats:0 create:512M create:2M arrunmap:0 create:2M info shimstats:0",
            &[LIMIT],
        );
        out.check_exit(0);
        let mut rcs = [0; 13];
        rcs[8] = OUT_OF_MEMORY;
        out.check_rcs(&rcs);
        out.check(5, "info", &[("free", 512 * MIB)]);
        out.check(6, "shimstats", &[("in_use", 512 * MIB), ("live", 1)]);
        out.check(11, "info", &[("free", 510 * MIB)]);
        out.check(12, "shimstats", &[("in_use", 514 * MIB), ("live", 2)]);
    }
}
