//! The configuration by one principle: a value that could lift or widen
//! enforcement fails closed; a slip of any other variable costs one warning and its default;
//! values are case-insensitive and an empty variable is unset. And per-GPU limits by UUID,
//! with one warning for a GPU the process does not see.

use crate::common::*;

/// The shim's UUID of its device 1 (stable: fixed per device).
const SHIM_GPU1: &str = "GPU-63757175-6f74-412d-b368-696d00000001";
const PATHS: [Client; 3] = [Client::Linked, Client::Dlsym, Client::Runtime];

#[test]
fn harmless_slips_cost_one_warning_and_the_gpu_still_works() {
    let dir = scratch_dir("config-slips");
    for (var, value, warning) in [
        ("CUQUOTA_LOG_LEVEL", "loud", Some("CUQUOTA_LOG_LEVEL=\"loud\" is not valid (use warn, info or debug); using the default, warn")),
        ("CUQUOTA_VIRTUALIZE", "maybe", Some("CUQUOTA_VIRTUALIZE=\"maybe\" is not valid (use 1 or 0); using the default, 1 (on)")),
        ("CUQUOTA_TRACE", "t-%x", Some("CUQUOTA_TRACE=\"t-%x\": unknown \"%x\" (use %p, %h, %r, %t or %%); no trace is written (the default)")),
        ("CUQUOTA_TRACE", "", None),
        ("CUQUOTA_LOG_LEVEL", "debug", None),
        ("CUQUOTA_LOG_LEVEL", "", None),
        ("CUQUOTA_MODE", "", None),
        ("CUQUOTA_MODE", "ENFORCE", None),
        ("CUQUOTA_LOG", "", None),
        ("CUQUOTA_LOG", "STDERR", None),
    ] {
        let out = Run::client(Client::Linked)
            .ops("init info alloc:768M alloc:512M")
            .envs(&[("CUQUOTA_LIMIT", "1GiB"), (var, value)])
            .cwd(&dir)
            .run();
        out.check_exit(0);
        // Enforced as without the slip: the quota holds, the figures are virtualized.
        out.check_rcs(&[0, 0, 0, OUT_OF_MEMORY]);
        out.check(1, "info", &[("free", GIB), ("total", GIB)]);
        let warnings = out.logs_starting(var);
        match warning {
            Some(w) => out.check_log(w),
            None => assert!(warnings.is_empty(), "{var}={value:?}:\n{out}"),
        }
        assert_eq!(out.logs_starting("GPU 0 refused").len(), 1, "{var}={value:?}:\n{out}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no file was created"
    );
}

#[test]
fn keywords_are_keywords_in_any_case() {
    let dir = scratch_dir("config-keywords");
    let out = Run::client(Client::Linked)
        .ops("init alloc:768M alloc:512M")
        .envs(&[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_LOG", "OFF")])
        .cwd(&dir)
        .run();
    out.check_rcs(&[0, 0, OUT_OF_MEMORY]);
    assert!(out.cuquota_lines().is_empty(), "{out}");
    assert!(!dir.join("OFF").exists(), "CUQUOTA_LOG=OFF made a file");

    let out = run(
        Client::Linked,
        "init alloc:768M alloc:512M",
        &[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_MODE", "OBSERVE")],
    );
    out.check_rcs(&[0, 0, 0]);
    assert_eq!(out.logs_starting("GPU 0 would refuse").len(), 1, "{out}");

    let out = run(
        Client::Linked,
        "init alloc:1M",
        &[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_LOG_LEVEL", "INFO")],
    );
    out.check_rcs(&[0, 0]);
    assert_eq!(out.logs_starting("config: ").len(), 1, "{out}");
}

#[test]
fn values_that_could_lift_enforcement_fail_closed() {
    for (value, why) in [
        ("1.5", "\"1.5\" has no unit, so it would be a count of bytes, which is whole; did you mean 1.5GiB?"),
        ("18446744073709551615", "\"18446744073709551615\" is too large: the largest limit is 18446744073709551613 bytes (leave CUQUOTA_LIMIT unset for none)"),
        ("", "it is empty"),
    ] {
        let out = run(Client::Linked, "init alloc:1M", &[("CUQUOTA_LIMIT", value)]);
        out.check_rcs(&[INVALID_VALUE, INVALID_VALUE]);
        out.check_log(&format!(
            "CUQUOTA_LIMIT=\"{value}\" is not valid: {why}; use e.g. CUQUOTA_LIMIT=6GiB, 6144MiB, 75% or 0:6GiB,1:50%. \
             CUDA calls fail with CUDA_ERROR_INVALID_VALUE until it is fixed"
        ));
    }
    let out = run(
        Client::Linked,
        "init alloc:1M",
        &[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_MODE", "observing")],
    );
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE]);
}

#[test]
fn the_largest_accepted_limit_is_a_limit() {
    let out = run(
        Client::Linked,
        "init alloc:1M",
        &[
            ("CUQUOTA_LIMIT", "18446744073709551613"),
            ("CUQUOTA_LOG_LEVEL", "info"),
        ],
    );
    out.check_rcs(&[0, 0]);
    let config = out.logs_starting("config: ");
    assert!(
        config[0].contains("(18446744073709551613 bytes) on every device"),
        "{out}"
    );
}

#[test]
fn a_gpu_named_by_uuid_gets_its_limit_on_every_path() {
    for client in PATHS {
        let out = run(
            client,
            "init info dev:1 info alloc:768M alloc:512M",
            &[
                ("CUDA_SHIM_DEVICES", "2"),
                (
                    "CUQUOTA_LIMIT",
                    &format!("{}:1GiB", SHIM_GPU1.to_uppercase()),
                ),
            ],
        );
        out.check_exit(0);
        out.check(
            1,
            "info",
            &[("free", DEVICE_BYTES), ("total", DEVICE_BYTES)],
        );
        out.check(3, "info", &[("free", GIB), ("total", GIB)]);
        out.check(4, "alloc", &[("rc", 0)]);
        out.check(5, "alloc", &[("rc", OUT_OF_MEMORY)]);
        assert!(out.logs_starting("CUQUOTA_LIMIT names").is_empty(), "{out}");
    }
}

#[test]
fn a_gpu_the_process_does_not_see_gets_one_warning() {
    let out = run(
        Client::Linked,
        "init alloc:1M dev:1 alloc:1M info",
        &[
            ("CUDA_SHIM_DEVICES", "2"),
            (
                "CUQUOTA_LIMIT",
                "3:1GiB,GPU-00000000-0000-4000-8000-000000000000:2GiB,1:1GiB",
            ),
        ],
    );
    out.check_rcs(&[0, 0, 0, 0, 0]);
    out.check(4, "info", &[("total", GIB)]);
    out.check_log(
        "CUQUOTA_LIMIT names GPU 3, GPU GPU-00000000-0000-4000-8000-000000000000, which this process \
         does not see, so that limit applies to no device; it sees GPU 0 (GPU-63757175-6f74-412d-b368-696d00000000), \
         GPU 1 (GPU-63757175-6f74-412d-b368-696d00000001). CUDA_VISIBLE_DEVICES renumbers the GPUs a process \
         sees from 0: name a GPU by its UUID (nvidia-smi -L) to follow it",
    );
}

/// At info, the exit says where the trace went, its template expanded.
#[test]
fn at_info_the_exit_names_the_trace_written() {
    let dir = scratch_dir("config-trace-path");
    let template = dir.join("t-%p.jsonl");
    let out = run(
        Client::Linked,
        "init alloc:1M",
        &[
            ("CUQUOTA_TRACE", template.to_str().unwrap()),
            ("CUQUOTA_LOG_LEVEL", "info"),
        ],
    );
    out.check_rcs(&[0, 0]);
    let written = dir.join(format!("t-{}.jsonl", out.pid));
    assert!(written.is_file(), "{out}");
    out.check_log(&format!("trace written to {}", written.display()));
    let quiet = run(
        Client::Linked,
        "init alloc:1M",
        &[("CUQUOTA_TRACE", template.to_str().unwrap())],
    );
    assert!(quiet.logs_starting("trace written").is_empty(), "{quiet}");
}

/// At info, once the driver knows its devices, each one's quota resolved to bytes.
#[test]
fn at_info_each_devices_quota_is_shown_in_bytes() {
    let out = run(
        Client::Linked,
        "init alloc:1M",
        &[
            ("CUDA_SHIM_DEVICES", "3"),
            ("CUQUOTA_LIMIT", &format!("0:75%,{SHIM_GPU1}:1GiB")),
            ("CUQUOTA_LOG_LEVEL", "info"),
        ],
    );
    out.check_rcs(&[0, 0]);
    out.check_log(
        "quotas: GPU 0 6.00 GiB (6442450944 bytes), GPU 1 1.00 GiB (1073741824 bytes), GPU 2 unlimited",
    );
}

// ---- CUDA_VISIBLE_DEVICES through the shim (the shim honours it) ----

/// Physical device 1 is ordinal 0 under `CUDA_VISIBLE_DEVICES=1`: the limit named by its
/// UUID follows it through the renumbering, on every path.
#[test]
fn a_gpu_named_by_uuid_keeps_its_limit_under_cuda_visible_devices() {
    for client in PATHS {
        let out = run(
            client,
            "init count info alloc:768M alloc:512M uuid:0 busid:0",
            &[
                ("CUDA_SHIM_DEVICES", "2"),
                ("CUDA_VISIBLE_DEVICES", "1"),
                ("CUQUOTA_LIMIT", &format!("{SHIM_GPU1}:1GiB")),
            ],
        );
        out.check_exit(0);
        out.check(1, "count", &[("n", 1)]);
        out.check(2, "info", &[("free", GIB), ("total", GIB)]);
        out.check(3, "alloc", &[("rc", 0)]);
        out.check(4, "alloc", &[("rc", OUT_OF_MEMORY)]);
        assert_eq!(out.op(5, "uuid").get("uuid"), Some(SHIM_GPU1), "{out}");
        assert_eq!(out.op(6, "busid").get("id"), Some("0000:01:00.0"), "{out}");
        assert!(out.logs_starting("CUQUOTA_LIMIT names").is_empty(), "{out}");
    }
}

/// A limit by ordinal names what the process sees after renumbering: ordinal 1 does not
/// exist under `CUDA_VISIBLE_DEVICES=1`, so the limit names no GPU the process sees and it
/// fails closed; the line names the device it does see.
#[test]
fn an_ordinal_hidden_by_cuda_visible_devices_fails_closed() {
    let out = run(
        Client::Linked,
        "init alloc:1M info",
        &[
            ("CUDA_SHIM_DEVICES", "2"),
            ("CUDA_VISIBLE_DEVICES", "1"),
            ("CUQUOTA_LIMIT", "1:1GiB"),
        ],
    );
    out.check_rcs(&[0, INVALID_VALUE, INVALID_VALUE]);
    out.check_log(&format!(
        "CUQUOTA_LIMIT names only GPU 1, which this process does not see, so it would run with \
         no limit at all: CUDA calls fail with CUDA_ERROR_INVALID_VALUE instead. It sees GPU 0 \
         ({SHIM_GPU1}); CUDA_VISIBLE_DEVICES renumbers the GPUs a process sees from 0: name a \
         GPU by its UUID (nvidia-smi -L) to follow it"
    ));
}
