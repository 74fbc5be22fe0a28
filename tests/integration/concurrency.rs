//! Many threads allocating at once never push the driver past the quota: the interposer
//! reserves before it calls the driver, so the shim's own peak stays under the limit.

use crate::common::*;

const QUOTA: u64 = 64 * MIB;
const THREADS: u64 = 8;
const ITERS: u64 = 2000;
/// 8 threads holding up to 4 x 4 MiB each: up to 128 MiB of demand against 64 MiB.
const OPS: &str = "init threads:8:2000:4M shimstats:0 info";

#[test]
fn contended_threads_stay_under_the_quota_in_the_drivers_view() {
    for client in [Client::Linked, Client::Runtime, Client::RuntimePerThread] {
        let out = run(client, OPS, &[("CUQUOTA_LIMIT", "64MiB")]);
        out.check_exit(0);
        let t = out.check(1, "threads", &[("other", 0)]);
        let (ok, oom) = (t.num("ok").unwrap(), t.num("oom").unwrap());
        assert_eq!(ok + oom, THREADS * ITERS, "{out}");
        assert!(ok > 0 && oom > 0, "no contention:\n{out}");
        let stats = out.check(2, "shimstats", &[("rc", 0), ("in_use", 0), ("live", 0)]);
        let peak = stats.num("peak").unwrap();
        assert!(peak <= QUOTA, "the driver saw {peak} bytes in use:\n{out}");
        out.check(3, "info", &[("rc", 0), ("free", QUOTA), ("total", QUOTA)]);
    }
}

/// The same load without the interposer exceeds 64 MiB, so the test above has teeth.
#[test]
fn the_same_load_without_the_interposer_exceeds_the_quota() {
    let out = run_raw(Client::Linked, OPS, &[("CUQUOTA_LIMIT", "64MiB")]);
    out.check_exit(0);
    out.check(
        1,
        "threads",
        &[("ok", THREADS * ITERS), ("oom", 0), ("other", 0)],
    );
    let peak = out
        .check(2, "shimstats", &[("rc", 0), ("in_use", 0)])
        .num("peak")
        .unwrap();
    assert!(peak > QUOTA, "peak {peak}:\n{out}");
}
