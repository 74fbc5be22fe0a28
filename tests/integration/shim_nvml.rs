//! The shim's context memory, its NVML face and its simulated other processes as a client
//! sees them under cuquota: the ops that the footprint tests build on, and the
//! figures NVML and the driver agree on. No quota is set, so cuquota passes the driver's
//! figures through.

use crate::common::*;

const PATHS: [Client; 3] = [Client::Linked, Client::Dlsym, Client::Runtime];
const SHIM_GPU0: &str = "GPU-63757175-6f74-412d-b368-696d00000000";

#[test]
fn nvml_and_the_driver_agree_on_contexts_allocations_and_other_processes() {
    let context = 300 * MIB;
    for client in PATHS {
        let out = run(
            client,
            "nvmlinit nvmlinfo:0 init info nvmlprocs:0 nvmlinfo:0 alloc:100M info nvmlprocs:0 \
             nvmlinfo2:0 otherproc:0:4242:1G info nvmlprocs:0 ctxcreate info nvmlprocs:0 \
             setlimit:2:72M info getlimit:2 nvmluuid:0 uuid:0 nvmlbus:0 busid:0",
            &[("CUDA_SHIM_CONTEXT_MEMORY", "300MiB")],
        );
        out.check_exit(0);
        assert!(out.lines.iter().all(|l| l.get("rc") == Some("0")), "{out}");
        let t = DEVICE_BYTES;
        out.check(1, "nvmlinfo", &[("used", 0), ("free", t), ("total", t)]);
        // The primary context (retained by `init`) takes its memory.
        out.check(3, "info", &[("free", t - context)]);
        out.check(
            4,
            "nvmlprocs",
            &[("n", 1), ("listed", 1), ("mine", context)],
        );
        out.check(5, "nvmlinfo", &[("used", context), ("free", t - context)]);
        let mine = context + 100 * MIB;
        out.check(7, "info", &[("free", t - mine)]);
        out.check(8, "nvmlprocs", &[("mine", mine), ("others", 0)]);
        out.check(
            9,
            "nvmlinfo2",
            &[("used", mine), ("free", t - mine), ("reserved", 0)],
        );
        // Another process's gigabyte: free in both APIs, listed by NVML.
        out.check(11, "info", &[("free", t - mine - GIB)]);
        out.check(
            12,
            "nvmlprocs",
            &[("n", 2), ("mine", mine), ("others", GIB)],
        );
        // A created context takes its own; a larger malloc heap its growth (72 - 8 MiB).
        let mine = mine + context;
        out.check(14, "info", &[("free", t - mine - GIB)]);
        out.check(15, "nvmlprocs", &[("mine", mine)]);
        out.check(17, "info", &[("free", t - mine - 64 * MIB - GIB)]);
        out.check(18, "getlimit", &[("value", 72 * MIB)]);
        assert_eq!(out.op(19, "nvmluuid").get("uuid"), Some(SHIM_GPU0), "{out}");
        assert_eq!(out.op(20, "uuid").get("uuid"), Some(SHIM_GPU0), "{out}");
        assert_eq!(
            out.op(21, "nvmlbus").get("id"),
            Some("0000:00:00.0"),
            "{out}"
        );
        assert_eq!(out.op(22, "busid").get("id"), Some("0000:00:00.0"), "{out}");
    }
}

/// A context that does not fit the device is refused with out-of-memory, through each
/// creation entry point, and leaves nothing behind.
#[test]
fn a_context_that_does_not_fit_is_refused() {
    for client in PATHS {
        let out = run(
            client,
            "init ctxcreate ctxcreate3 ctxcreate4 info nvmlinit nvmlprocs:0",
            &[
                ("CUDA_SHIM_MEMORY", "2GiB"),
                ("CUDA_SHIM_CONTEXT_MEMORY", "768MiB"),
            ],
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, OUT_OF_MEMORY, OUT_OF_MEMORY, 0, 0, 0]);
        out.check(4, "info", &[("free", 512 * MIB)]);
        out.check(6, "nvmlprocs", &[("mine", 1536 * MIB)]);
    }
}
