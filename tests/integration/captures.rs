//! Every form of stream capture records allocations as graph nodes: nothing is charged until
//! the graph's memory is backed (instantiate with upload, upload, launch). The forms of CUDA
//! 13.1 (`cuStreamBeginCaptureToCig`) and 13.3 (`cuStreamBeginRecaptureToGraph`), on every
//! lookup path (the per-thread runtime client gets their `_ptsz`), checked against the
//! shim's own footprint (`footprint:DEV`). The shim's recapture matches each captured node
//! against the graph's own, in creation order (cuda.h: "The node creation order while
//! recapturing the graph must be identical to the original graph"); its devices support no
//! CIG, so a CIG capture never begins there (the driver's documented failure).

use crate::common::*;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "64MiB");

/// The shim's footprint on device 0 at op `i`: (allocations, graph memory).
fn shim_footprint(out: &Output, i: usize) -> (u64, u64) {
    let line = out.op(i, "footprint");
    (line.num("allocations").unwrap(), line.num("graph").unwrap())
}

/// A graph captured with a 24 MiB allocation freed inside it, launched (its graph memory
/// kept by the pool), 24 MiB allocated beside it: 48 of 64 MiB in use. A recapture of the
/// same allocation is the graph's own node again: charged as real memory it would not fit
/// (72 MiB), as a node it is not charged at all, and the graph launches again in the memory
/// it has.
#[test]
fn an_allocation_during_a_recapture_is_a_node() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream capture:0 asyncon:24M:0 freeon:0:0 endcapture:0 instantiate:0 \
             launch:0:0 alloc:24M recapture:0:0 asyncon:24M:0 freeon:2:0 pendcapture:0 \
             launch:0:0 footprint:0 info",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check_rcs(&[0; 16]);
        // The recaptured allocation is the node's: the address fixed at the first capture.
        let node = out.value(3, "asyncon", "ptr");
        out.check(10, "asyncon", &[("ptr", node)]);
        out.check(12, "pendcapture", &[("same", 1)]);
        assert_eq!(shim_footprint(&out, 14), (24 * MIB, 24 * MIB), "{out}");
        out.check(15, "info", &[("free", 16 * MIB), ("total", 64 * MIB)]);
    }
}

/// A recapture whose allocation does not match the graph's node is terminated by the
/// driver (`CUDA_ERROR_GRAPH_RECAPTURE_FAILURE`, then `_STREAM_CAPTURE_INVALIDATED` at its
/// end): nothing is charged for it, and the next allocation on the stream is charged as
/// real memory again.
#[test]
fn a_recapture_that_does_not_match_charges_nothing() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream capture:0 asyncon:24M:0 endcapture:0 recapture:0:0 asyncon:16M:0 \
             asyncon:16M:0 pendcapture:0 asyncon:48M:0 asyncon:32M:0 footprint:0 info",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 0, 0, 0, 918, 901, 901, 0, OUT_OF_MEMORY, 0, 0]);
        assert_eq!(shim_footprint(&out, 11), (48 * MIB, 0), "{out}");
        out.check(12, "info", &[("free", 16 * MIB)]);
    }
}

/// A CIG capture: the shim's devices support no CIG, so the begin fails as cuda.h says
/// ("The context must be also created in CIG mode previously, otherwise this operation will
/// fail and CUDA_ERROR_INVALID_CONTEXT will be returned"), and so does the end ("Capture
/// must have been initiated on hStream via a call to cuStreamBeginCaptureToCig"). The
/// driver's answers pass unchanged, and the stream's allocations are charged as ever.
#[test]
fn a_cig_capture_the_driver_refuses_changes_nothing() {
    for client in Client::ALL {
        let out = run(
            client,
            "init stream alloc:16M cigcapture:0 asyncon:32M:0 cigend:0 asyncon:32M:0 \
             footprint:0 info",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, 201, 0, 1, OUT_OF_MEMORY, 0, 0]);
        assert_eq!(shim_footprint(&out, 7), (48 * MIB, 0), "{out}");
        out.check(8, "info", &[("free", 16 * MIB)]);
    }
}
