//! A signal handler that allocates while the thread it interrupted is inside a hook. The
//! shim raises the signal inside a chosen driver call (`CUDA_SHIM_FAIL=FUNC:WHEN:raiseSIG`),
//! so the handler runs at a known point: inside a query cuquota itself makes while it
//! counts (cuquota's own code, which may hold the books' locks), or inside the real call a
//! hook makes for the program (the driver's own code).

use crate::common::*;

const PATHS: [Client; 3] = [Client::Linked, Client::Dlsym, Client::Runtime];
const SIGUSR1: &str = "10";
/// `CUDA_ERROR_NOT_PERMITTED`: what a hooked call made by such a handler gets.
const NOT_PERMITTED: u64 = 800;

/// Interrupting cuquota's own code (its `cuCtxGetCurrent` while it places an allocation):
/// both allocations of the handler are refused, none waits on a lock the interrupted hook
/// holds, and the allocation it interrupted is counted exactly; later calls are counted
/// as ever (the interrupted hook's mark is intact).
#[test]
fn a_handler_that_interrupts_our_own_code_is_refused_and_nothing_goes_uncounted() {
    for client in PATHS {
        let out = run(
            client,
            "catch:10 init sigalloc:10:64M:2 alloc:256M sigallocs info shimstats:0 \
             alloc:128M info shimstats:0",
            &[
                ("CUQUOTA_LIMIT", "1GiB"),
                (
                    "CUDA_SHIM_FAIL",
                    &format!("cuCtxGetCurrent:*:raise{SIGUSR1}"),
                ),
            ],
        );
        out.check_exit(0);
        out.check(3, "alloc", &[("rc", 0)]);
        let handled = out.op(4, "sigallocs");
        assert_eq!(handled.get("runs"), Some("1"), "{out}");
        let refused = format!("{NOT_PERMITTED},{NOT_PERMITTED}");
        assert_eq!(handled.get("rc"), Some(refused.as_str()), "{out}");
        out.check(5, "info", &[("free", GIB - 256 * MIB), ("total", GIB)]);
        out.check(6, "shimstats", &[("in_use", 256 * MIB), ("live", 1)]);
        out.check(7, "alloc", &[("rc", 0)]);
        out.check(8, "info", &[("free", GIB - 384 * MIB)]);
        out.check(9, "shimstats", &[("in_use", 384 * MIB), ("live", 2)]);
    }
}

/// Interrupting the driver's own code (the real `cuMemAlloc_v2` a hook makes): cuquota
/// cannot tell the handler's call from one the driver makes into an exported symbol, which
/// must pass straight through (the hook counts what its call does), so it reaches the
/// driver as such a call does. This pins that documented behaviour down exactly.
#[test]
fn a_handler_that_interrupts_the_driver_passes_through_as_the_drivers_own_calls_do() {
    for client in PATHS {
        let out = run(
            client,
            "catch:10 init sigalloc:10:64M:1 alloc:256M sigallocs info shimstats:0",
            &[
                ("CUQUOTA_LIMIT", "1GiB"),
                ("CUDA_SHIM_FAIL", &format!("cuMemAlloc_v2:1:raise{SIGUSR1}")),
            ],
        );
        out.check_exit(0);
        out.check(3, "alloc", &[("rc", 0)]);
        let handled = out.op(4, "sigallocs");
        assert_eq!(
            (handled.get("runs"), handled.get("rc")),
            (Some("1"), Some("0")),
            "{out}"
        );
        out.check(5, "info", &[("free", GIB - 256 * MIB)]);
        out.check(6, "shimstats", &[("in_use", 320 * MIB), ("live", 2)]);
    }
}
