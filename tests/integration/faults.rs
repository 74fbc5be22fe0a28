//! Driver errors (injected into the shim with CUDA_SHIM_FAIL) reach the caller
//! unchanged, and the quota's books stay right.

use crate::common::*;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "1GiB");

#[test]
fn a_failed_allocation_is_not_charged_and_its_code_passes_through() {
    for client in [Client::Linked, Client::Runtime] {
        for code in [2u64, 1, 3, 12345] {
            let fail = format!("cuMemAlloc_v2:1:{code}");
            let out = run(
                client,
                "init alloc:256M alloc:1G info",
                &[LIMIT, ("CUDA_SHIM_FAIL", &fail)],
            );
            out.check_exit(0);
            out.check(1, "alloc", &[("rc", code), ("ptr", 0)]);
            // Nothing was charged: the whole quota is still there.
            out.check(2, "alloc", &[("rc", 0)]);
            out.check(3, "info", &[("rc", 0), ("free", 0), ("total", GIB)]);
        }
    }
}

#[test]
fn freeing_an_unknown_pointer_gets_the_drivers_answer() {
    let out = run(
        Client::Linked,
        "init alloc:256M freeptr:0x1234 info",
        &[LIMIT],
    );
    out.check_exit(0);
    out.check(2, "freeptr", &[("rc", INVALID_VALUE)]);
    out.check(3, "info", &[("free", GIB - 256 * MIB)]);
}

#[test]
fn a_failed_free_keeps_the_memory_charged() {
    let out = run(
        Client::Linked,
        "init alloc:256M free:0 info free:0 info",
        &[LIMIT, ("CUDA_SHIM_FAIL", "cuMemFree_v2:1:999")],
    );
    out.check_exit(0);
    out.check(2, "free", &[("rc", 999)]);
    out.check(3, "info", &[("free", GIB - 256 * MIB)]);
    out.check(4, "free", &[("rc", 0)]);
    out.check(5, "info", &[("free", GIB)]);
}
