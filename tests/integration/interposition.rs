//! Interception that other code in the process cannot undo: a program's own
//! wrapper of a driver function is never handed out as our hook, a second `dlsym`
//! interposer is reached in either order and does not skip us, and objects that bind
//! deeply are still charged.

use crate::common::*;

fn client(name: &str) -> std::path::PathBuf {
    artifacts().clients_dir.join(name)
}

/// A program exporting its own `cuMemAlloc_v2` (with -rdynamic) that forwards to the
/// driver's, found by `dlsym` or `cuGetProcAddress`, gets our hook: it is enforced and does
/// not call itself (before, the hook address resolved to the program's own export).
#[test]
fn a_program_s_own_wrapper_is_never_handed_out_as_the_hook() {
    for how in ["dlsym", "proc"] {
        let out = Run::program(client("wrapper_client"))
            .arg(how)
            .arg(&(48 * MIB).to_string())
            .arg(&(48 * MIB).to_string())
            .env("CUQUOTA_LIMIT", "64MiB")
            .run();
        out.check_exit(0);
        out.check(0, "forward", &[]);
        assert_eq!(out.lines[0].args, ["other"], "{how}: {out}");
        out.check(1, "alloc", &[("rc", SUCCESS)]);
        out.check(2, "alloc", &[("rc", OUT_OF_MEMORY)]);
    }
}

/// A `dlsym` interposer that finds the real one with `dlvsym(RTLD_NEXT, "dlsym",
/// "GLIBC_2.2.5")`, preloaded first or second: dlsym-path allocations (both glibc versions
/// of `dlsym`) are enforced and the other interposer still sees the lookups.
fn check_layered(layer_first: bool) {
    let layer = client("dlsym_layer.so").display().to_string();
    let ours = artifacts().interposer.display().to_string();
    let preload = if layer_first {
        format!("{layer}:{ours}")
    } else {
        format!("{ours}:{layer}")
    };
    for client in [Client::Dlsym, Client::DlsymOld] {
        let out = run(
            client,
            "init alloc:48M alloc:48M",
            &[("CUQUOTA_LIMIT", "64MiB"), ("LD_PRELOAD", &preload)],
        );
        out.check_exit(0);
        out.check(1, "alloc", &[("rc", SUCCESS)]);
        out.check(2, "alloc", &[("rc", OUT_OF_MEMORY)]);
        assert!(
            out.stderr.iter().any(|l| l == "dlsym_layer: cuMemAlloc_v2"),
            "the other interposer was skipped\n{out}"
        );
    }
}

/// Before: it skipped our unversioned `dlsym`, so nothing was enforced.
#[test]
fn a_dlsym_interposer_before_cuquota_reaches_it() {
    check_layered(true);
}

/// Before: we found the real `dlsym` by version, skipping the interposer's.
#[test]
fn a_dlsym_interposer_after_cuquota_is_not_skipped() {
    check_layered(false);
}

// ---- deep binding ---------------------------------------------------------------------------

fn audit_module() -> String {
    let module = artifacts().interposer.with_file_name("libcuquota_audit.so");
    assert!(module.is_file(), "{} is missing", module.display());
    module.display().to_string()
}

/// deep_host loading deep_plugin.so (`mode`: "deep" or "dlmopen"), two 48 MiB allocations
/// by `path` under a 64 MiB quota.
fn deep(mode: &str, path: &str, audit: bool) -> Output {
    let mut run = Run::program(client("deep_host"))
        .arg(&client("deep_plugin.so").display().to_string())
        .arg(mode)
        .arg(path)
        .arg(&(48 * MIB).to_string())
        .arg(&(48 * MIB).to_string())
        .env("CUQUOTA_LIMIT", "64MiB");
    if audit {
        run = run.env("LD_AUDIT", &audit_module());
    }
    run.run()
}

const PATHS: [&str; 3] = ["linked", "dlsym", "proc"];

/// With the audit module, a plugin loaded with RTLD_DEEPBIND is enforced on every path
/// (before: its bindings went straight to the driver and libc's dlsym).
#[test]
fn a_deep_bound_plugin_is_enforced_on_every_path_with_the_audit_module() {
    for path in PATHS {
        let out = deep("deep", path, true);
        out.check_exit(0);
        out.check(0, "alloc", &[("rc", SUCCESS)]);
        out.check(1, "alloc", &[("rc", OUT_OF_MEMORY)]);
        assert!(
            out.cuquota_lines()
                .iter()
                .all(|l| !l.contains("no CUDA call reached")),
            "{path}: {out}"
        );
    }
}

/// Without it, the bypass is at least said: one line at exit naming the likely cause.
#[test]
fn a_driver_no_call_reached_is_reported_at_exit() {
    for (mode, cause) in [("deep", "RTLD_DEEPBIND"), ("dlmopen", "dlmopen")] {
        for path in PATHS {
            let out = deep(mode, path, false);
            out.check_exit(0);
            let lines = out.logs_starting("libcuda.so was loaded but no CUDA call reached");
            assert_eq!(lines.len(), 1, "{mode} {path}: {out}");
            assert!(lines[0].contains(cause), "{mode} {path}: {out}");
        }
    }
}

/// `cuquota run` sets LD_AUDIT, so the deep-bound plugin is enforced under it.
#[test]
fn cuquota_run_covers_a_deep_bound_plugin() {
    let plugin = client("deep_plugin.so").display().to_string();
    let host = client("deep_host").display().to_string();
    let size = (48 * MIB).to_string();
    let args = [
        "run", "--limit", "64MiB", "--", &host, &plugin, "deep", "dlsym", &size, &size,
    ];
    let out = args
        .iter()
        .fold(Run::program(&artifacts().cli), |run, a| run.arg(a))
        .no_preload()
        .run();
    out.check_exit(0);
    out.check(0, "alloc", &[("rc", SUCCESS)]);
    out.check(1, "alloc", &[("rc", OUT_OF_MEMORY)]);
}
