//! The shim's own footprint model through the op interpreter: pools that keep
//! memory until a synchronize or a trim, and graph memory backed at upload/launch, on
//! every lookup path, with no interposer (the shim's figures are the oracle other tests
//! compare cuquota against, so they are checked on their own first).

use crate::common::*;

const SMALL: [(&str, &str); 1] = [("CUDA_SHIM_MEMORY", "64MiB")];

fn run_shim(client: Client, ops: &str) -> Output {
    Run::client(client).ops(ops).envs(&SMALL).no_preload().run()
}

#[test]
fn pools_keep_freed_memory_until_synchronized() {
    for client in Client::ALL {
        let out = run_shim(
            client,
            "init async:3M footprint:0 freeasync:0 footprint:0 poolattr:defpool:reserved \
             poolattr:defpool:used alloc:61M sync footprint:0 alloc:61M \
             poolthreshold:pool:8M pool:1M free:3 streamsync:n poolattr:pool:reserved \
             pooltrim:pool:0 poolattr:pool:reserved",
        );
        out.check_exit(0);
        out.check_rcs(&[
            0,
            0,
            0,
            0,
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
        ]);
        let parts = |i, a, p| {
            out.check(
                i,
                "footprint",
                &[
                    ("allocations", a),
                    ("pool_cache", p),
                    ("graph", 0),
                    ("context", 0),
                ],
            );
        };
        parts(2, 3 * MIB, MIB);
        // freed into the pool: 61 MiB no longer fit in 64
        parts(4, 0, 4 * MIB);
        out.check(5, "poolattr", &[("value", 4 * MIB)]);
        out.check(6, "poolattr", &[("value", 0)]);
        parts(9, 0, 0);
        // under its threshold the created pool keeps its chunk through a synchronize
        out.check(15, "poolattr", &[("value", 2 * MIB)]);
        out.check(17, "poolattr", &[("value", 0)]);
    }
}

#[test]
fn graph_memory_is_backed_at_upload_and_launch() {
    for client in Client::ALL {
        let out = run_shim(
            client,
            "init stream graph graphalloc:0:3M graphalloc:0:5M graphfree:0:0 graphnodes:0 \
             instantiate:0 footprint:0 upload:0:0 footprint:0 launch:0:n graphattr:0:used \
             launch:0:0 free:1 graphtrim:0 footprint:0 alloc:60M launch:0:0 free:2 \
             capture:0 asyncon:2M:0 freeon:3:0 endcapture:0 graphnodes:1 instantiatep:1:2:0 \
             footprint:0 shimstats:0",
        );
        out.check_exit(0);
        out.check_rcs(&[
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
            INVALID_VALUE,
            0,
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
        ]);
        out.check(6, "graphnodes", &[("n", 3), ("alloc", 2), ("free", 1)]);
        out.check(8, "footprint", &[("graph", 0)]);
        out.check(10, "footprint", &[("graph", 8 * MIB), ("allocations", 0)]);
        // the 3 MiB are freed inside the graph, the 5 MiB stay live: a relaunch fails
        out.check(12, "graphattr", &[("value", 5 * MIB)]);
        out.check(16, "footprint", &[("graph", 0)]);
        out.check(24, "graphnodes", &[("n", 2), ("alloc", 1), ("free", 1)]);
        out.check(25, "instantiatep", &[("result", 0)]);
        out.check(26, "footprint", &[("graph", 2 * MIB)]);
        out.check(27, "shimstats", &[("in_use", 0), ("live", 0)]);
    }
}
