//! CUQUOTA_LIMIT forms, per-device limits, and CUQUOTA_VIRTUALIZE.

use crate::common::*;

#[test]
fn per_device_limits() {
    let out = run(
        Client::Linked,
        "init info total:0 total:1 dev:1 info alloc:4G alloc:1",
        &[
            ("CUDA_SHIM_DEVICES", "2"),
            ("CUQUOTA_LIMIT", "0:1GiB,1:50%"),
        ],
    );
    out.check_exit(0);
    out.check(1, "info", &[("rc", 0), ("free", GIB), ("total", GIB)]);
    out.check(2, "total", &[("rc", 0), ("bytes", GIB)]);
    out.check(3, "total", &[("rc", 0), ("bytes", 4 * GIB)]);
    out.check(4, "dev", &[("rc", 0)]);
    out.check(
        5,
        "info",
        &[("rc", 0), ("free", 4 * GIB), ("total", 4 * GIB)],
    );
    out.check(6, "alloc", &[("rc", 0)]);
    out.check(7, "alloc", &[("rc", OUT_OF_MEMORY)]);
}

#[test]
fn a_device_not_named_is_unlimited() {
    let out = run(
        Client::Linked,
        "init info dev:1 info alloc:2G total:1",
        &[("CUDA_SHIM_DEVICES", "2"), ("CUQUOTA_LIMIT", "0:1GiB")],
    );
    out.check_exit(0);
    out.check(1, "info", &[("free", GIB), ("total", GIB)]);
    out.check(
        3,
        "info",
        &[("free", DEVICE_BYTES), ("total", DEVICE_BYTES)],
    );
    out.check(4, "alloc", &[("rc", 0)]);
    out.check(5, "total", &[("bytes", DEVICE_BYTES)]);
}

#[test]
fn limit_forms_give_exact_bytes() {
    for (value, bytes) in [
        ("75%", 6 * GIB),
        ("1.5GiB", 1536 * MIB),
        ("512K", 512 * KIB),
        ("6144MiB", 6 * GIB),
        ("4294967296", 4 * GIB),
    ] {
        let out = run(
            Client::Linked,
            "init info total:0",
            &[("CUQUOTA_LIMIT", value)],
        );
        out.check_exit(0);
        out.check(0, "init", &[("rc", 0)]);
        out.check(1, "info", &[("free", bytes), ("total", bytes)]);
        out.check(2, "total", &[("bytes", bytes)]);
    }
}

#[test]
fn virtualize_off_shows_the_device_but_still_enforces() {
    let out = run(
        Client::Linked,
        "init info total:0 alloc:1G alloc:1 info",
        &[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_VIRTUALIZE", "0")],
    );
    out.check_exit(0);
    out.check(
        1,
        "info",
        &[("free", DEVICE_BYTES), ("total", DEVICE_BYTES)],
    );
    out.check(2, "total", &[("bytes", DEVICE_BYTES)]);
    out.check(3, "alloc", &[("rc", 0)]);
    out.check(4, "alloc", &[("rc", OUT_OF_MEMORY)]);
    out.check(
        5,
        "info",
        &[("free", DEVICE_BYTES - GIB), ("total", DEVICE_BYTES)],
    );
}
