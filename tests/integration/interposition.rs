//! Interception that other code in the process cannot undo (issue 12): a program's own
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
