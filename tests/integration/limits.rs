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

/// A per-GPU limit that names only GPUs the process does not see would leave every GPU it
/// sees unlimited (the typo `3:1GiB` on a one-GPU machine): it fails closed, every CUDA call
/// from the first that needs the limit on, with one line naming the GPUs it does see. Naming
/// one it sees beside one it does not keeps the limit of the one it sees, with a warning.
#[test]
fn a_limit_naming_no_gpu_the_process_sees_fails_closed() {
    for client in [Client::Linked, Client::Dlsym] {
        let out = run(
            client,
            "init alloc:2G info alloc:1M",
            &[("CUQUOTA_LIMIT", "3:1GiB")],
        );
        out.check_exit(0);
        out.check_rcs(&[0, INVALID_VALUE, INVALID_VALUE, INVALID_VALUE]);
        out.check_log(
            "CUQUOTA_LIMIT names only GPU 3, which this process does not see, so it would run \
             with no limit at all: CUDA calls fail with CUDA_ERROR_INVALID_VALUE instead. It \
             sees GPU 0 (GPU-63757175-6f74-412d-b368-696d00000000); CUDA_VISIBLE_DEVICES \
             renumbers the GPUs a process sees from 0: name a GPU by its UUID (nvidia-smi -L) \
             to follow it",
        );
        assert_eq!(out.cuquota_lines().len(), 1, "{out}");
    }
    let out = run(
        Client::Linked,
        "init alloc:2G alloc:512M",
        &[("CUQUOTA_LIMIT", "0:1GiB,3:1GiB")],
    );
    out.check_rcs(&[0, OUT_OF_MEMORY, 0]);
    assert_eq!(
        out.logs_starting("CUQUOTA_LIMIT names GPU 3, which this process does not see")
            .len(),
        1,
        "{out}"
    );
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
