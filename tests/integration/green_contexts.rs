//! Green contexts are context memory: a creation is measured and charged like a context's
//! (and refused, the green context destroyed, when it does not fit), its `CUcontext`
//! (`cuCtxFromGreenCtx`) and its streams (`cuGreenCtxStreamCreate`) charge its device, and
//! its destruction gives back what it took. The shim gives each context
//! `CUDA_SHIM_CONTEXT_MEMORY` and each green context `CUDA_SHIM_GREEN_CONTEXT_MEMORY`; a
//! green context retains its device's primary context (cuda.h: "This API will retain the
//! primary context on device dev, which will is released when the green context is
//! destroyed"), and what is allocated in its `CUcontext` is the primary context's ("treated
//! as if it were a primary context"). Every test runs over every lookup path.

use crate::common::*;

const CONTEXT: u64 = 300 * MIB;
const GREEN: u64 = 100 * MIB;

/// A 1 GiB quota per GPU; each context takes 300 MiB on the shim, each green context 100.
const ENV: [(&str, &str); 3] = [
    ("CUQUOTA_LIMIT", "1GiB"),
    ("CUDA_SHIM_CONTEXT_MEMORY", "300MiB"),
    ("CUDA_SHIM_GREEN_CONTEXT_MEMORY", "100MiB"),
];

fn with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    ENV.iter().chain(extra).copied().collect()
}

/// On a device whose primary context is active: the green context takes its own 100 MiB,
/// an allocation in its context is charged on the device, and the destruction gives back
/// the 100 MiB while the allocation (the primary context's) stays charged until freed.
#[test]
fn a_green_context_is_charged_what_it_takes_and_gives_it_back() {
    for client in Client::ALL {
        let out = run(
            client,
            "init green:0 info footprint:0 greenctx:0 alloc:64M info greendestroy:0 dev:0 \
             info footprint:0 free:0 info",
            &ENV,
        );
        out.check_exit(0);
        out.check_rcs(&[0; 13]);
        out.check(2, "info", &[("free", GIB - CONTEXT - GREEN)]);
        out.check(3, "footprint", &[("context", CONTEXT + GREEN)]);
        out.check(6, "info", &[("free", GIB - CONTEXT - GREEN - 64 * MIB)]);
        out.check(9, "info", &[("free", GIB - CONTEXT - 64 * MIB)]);
        out.check(
            10,
            "footprint",
            &[("context", CONTEXT), ("allocations", 64 * MIB)],
        );
        out.check(12, "info", &[("free", GIB - CONTEXT)]);
    }
}

/// A green context on a second GPU whose primary context it activates: its creation is
/// charged there (the primary context's 300 MiB and its own 100), its context's and its
/// stream's allocations too; its destruction is the primary context's last release, which
/// frees all of it.
#[test]
fn a_green_context_charges_its_own_device_and_its_end_frees_it() {
    for client in Client::ALL {
        let out = run(
            client,
            "init green:1 greenstream:0 asyncon:32M:0 greenctx:0 alloc:64M info \
             footprint:1 dev:0 info greendestroy:0 footprint:1 dev:1 info",
            &with(&[("CUDA_SHIM_DEVICES", "2")]),
        );
        out.check_exit(0);
        out.check_rcs(&[0; 14]);
        let held = CONTEXT + GREEN + 96 * MIB;
        out.check(6, "info", &[("free", GIB - held)]);
        out.check(
            7,
            "footprint",
            &[("context", CONTEXT + GREEN), ("allocations", 96 * MIB)],
        );
        // GPU 0 has only its own primary context.
        out.check(9, "info", &[("free", GIB - CONTEXT)]);
        out.check(11, "footprint", &[("context", 0), ("allocations", 0)]);
        // Used again, GPU 1's primary context takes its 300 MiB afresh, and nothing else.
        out.check(13, "info", &[("free", GIB - CONTEXT)]);
    }
}

/// A green context that does not fit beside the primary context is destroyed and refused
/// with one line; the device keeps working.
#[test]
fn a_green_context_that_does_not_fit_is_destroyed_and_refused() {
    for client in Client::ALL {
        let out = run(
            client,
            "init green:0 footprint:0 info alloc:724M alloc:1",
            &with(&[("CUDA_SHIM_GREEN_CONTEXT_MEMORY", "800MiB")]),
        );
        out.check_exit(0);
        out.check_rcs(&[0, OUT_OF_MEMORY, 0, 0, 0, OUT_OF_MEMORY]);
        out.check(2, "footprint", &[("context", CONTEXT)]);
        out.check(3, "info", &[("free", GIB - CONTEXT)]);
        out.check_log(&format!(
            "GPU 0 refused a new context via cuGreenCtxCreate: it takes 800.00 MiB ({} bytes); \
             quota 1.00 GiB, in use 300.00 MiB (allocations 0 B, context 300.00 MiB), \
             724.00 MiB left",
            800 * MIB
        ));
    }
}
