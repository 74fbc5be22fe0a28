//! A variant of a hooked function that this build does not know: a driver newer than the
//! header cuquota was built against hands out `cuMemAlloc_v3` (the shim with
//! `CUDA_SHIM_DRIVER_VERSION=13060`). Its calls would go around the quota: on both lookup
//! paths it is said once with the driver's version, traced and counted in the exit summary,
//! and a policy's `unknown_variants = refuse` makes the lookup fail as for an unknown symbol.

use crate::common::*;
use crate::policy;
use serde_json::Value;

/// A driver of CUDA 13.6, which has `cuMemAlloc_v3`.
const NEWER_DRIVER: (&str, &str) = ("CUDA_SHIM_DRIVER_VERSION", "13060");
/// 48 MiB through the newer variant, then 32 MiB through `cuMemAlloc_v2`, under 64 MiB.
const OPS: &str = "init newer:48M alloc:32M";

/// The client of each lookup path, and the path's name in cuquota's line.
const PATHS: [(Client, &str); 2] = [
    (Client::Runtime, "cuGetProcAddress"),
    (Client::Dlsym, "dlsym"),
];

fn trace_lines(dir: &std::path::Path) -> Vec<Value> {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_newer_drivers_variant_is_said_traced_and_counted_on_both_lookup_paths() {
    for (client, via) in PATHS {
        let dir = scratch_dir(&format!("unknown-variant-{}", client.binary_name()));
        let template = format!("{}/t.jsonl", dir.display());
        let env = [
            ("CUQUOTA_LIMIT", "64MiB"),
            ("CUQUOTA_TRACE", template.as_str()),
            NEWER_DRIVER,
        ];
        let out = run(client, OPS, &env);
        out.check_exit(0);
        // Handed out unhooked: its 48 MiB are not charged, so 32 MiB more still fit.
        out.check(1, "newer", &[("rc", 0)]);
        out.check(2, "alloc", &[("rc", 0)]);
        if client == Client::Runtime {
            let asked = out
                .lookups()
                .into_iter()
                .filter(|l| l.args == ["cuMemAlloc"]);
            let asked: Vec<_> = asked
                .filter(|l| l.get("version") == Some("13060"))
                .collect();
            assert_eq!(asked.len(), 1, "{out}");
            assert_eq!(
                (asked[0].num("rc"), asked[0].num("status")),
                (Some(0), Some(0))
            );
        }
        out.check_log(&format!(
            "{via} handed out cuMemAlloc_v3, a variant of cuMemAlloc this build of cuquota \
             does not know (driver CUDA 13.6): calls through it are not counted (a policy's \
             unknown_variants = refuse closes this door)"
        ));
        out.check_log(
            "1 lookup of variants this build of cuquota does not know was handed out: \
             cuMemAlloc_v3",
        );
        let trace = trace_lines(&dir);
        let unknown: Vec<_> = trace
            .iter()
            .filter(|l| l["type"] == "unknown_variant")
            .collect();
        assert_eq!(unknown.len(), 1, "{trace:?}");
        assert_eq!(unknown[0]["api"], "cuMemAlloc_v3");
        assert_eq!(unknown[0]["driver"], 13060);
        assert_eq!(unknown[0]["result"], "CUDA_SUCCESS");
        let summary = trace.last().unwrap();
        assert_eq!(summary["type"], "summary");
        assert_eq!(summary["unknown_variants"], 1);
        assert_eq!(
            summary["devices"][0]["in_use"],
            32 * MIB,
            "the variant's 48 MiB uncounted"
        );
    }
}

/// The same lookup from a 13.5 driver gets `cuMemAlloc_v2`, our hook: nothing to say, and
/// the quota counts every byte.
#[test]
fn the_same_lookup_from_a_driver_the_build_knows_is_hooked() {
    let out = run(Client::Runtime, OPS, &[("CUQUOTA_LIMIT", "64MiB")]);
    out.check_exit(0);
    out.check(1, "newer", &[("rc", 0)]);
    out.check(2, "alloc", &[("rc", OUT_OF_MEMORY)]);
    assert!(
        out.logs_starting("cuGetProcAddress handed out").is_empty(),
        "{out}"
    );
    assert!(
        out.logs_starting("1 lookup of variants").is_empty(),
        "{out}"
    );
}

#[test]
fn the_policy_refuses_them_as_unknown_symbols() {
    policy::needs_root();
    let _p = policy::write_policy(Some("unknown_variants = refuse\n"), 0o644, 0);
    for (client, via) in PATHS {
        let out = Run::client(client)
            .no_preload()
            .env_os("LD_PRELOAD", policy::build().library.as_os_str())
            .envs(&[("CUQUOTA_LIMIT", "64MiB"), NEWER_DRIVER])
            .ops(OPS)
            .run();
        out.check_exit(0);
        // The lookup failed: no function, CUDA_ERROR_NOT_FOUND for the op.
        out.check(1, "newer", &[("rc", 500)]);
        out.check(2, "alloc", &[("rc", 0)]);
        if client == Client::Runtime {
            let asked = out
                .lookups()
                .into_iter()
                .filter(|l| l.args == ["cuMemAlloc"]);
            let asked: Vec<_> = asked
                .filter(|l| l.get("version") == Some("13060"))
                .collect();
            assert_eq!(asked.len(), 1, "{out}");
            // CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: as an unknown name.
            assert_eq!(
                (asked[0].num("rc"), asked[0].num("status")),
                (Some(500), Some(1))
            );
        }
        out.check_log(&format!(
            "{via} refused cuMemAlloc_v3, a variant of cuMemAlloc this build of cuquota does \
             not know (driver CUDA 13.6): the policy says unknown_variants = refuse, so the \
             lookup fails as for an unknown symbol"
        ));
        out.check_log(
            "1 lookup of variants this build of cuquota does not know was refused: \
             cuMemAlloc_v3",
        );
    }
}
