//! Imports are never charged: the exporting process pays. A `cuMemCreate` allocation
//! exported as a POSIX file descriptor and imported by another process (here a child that
//! inherits the descriptor and execs a fresh client) costs the importer nothing, and its
//! map, retain, unmap and release credit nothing there.

use crate::common::*;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "1GiB");

#[test]
fn an_imported_allocation_is_charged_to_the_exporter_only() {
    for client in Client::ALL {
        let out = run(
            client,
            "init createfd:512M export:0 reserve:512M map:0:0 release:0 \
             forkexec:16 init create:512M import:512M reserve:512M map:0:1 access:0:0:512M \
             retain:0:0 release:2 release:1 info shimstats:0 create:512M create:2M unmap:0 \
             info shimstats:0 info shimstats:0",
            &[LIMIT],
        );
        out.check_exit(0);
        for (i, name) in [(0, "init"), (1, "createfd"), (2, "export")] {
            out.check(i, name, &[("rc", 0)]);
        }
        for (i, name) in [(3, "reserve"), (4, "map"), (5, "release")] {
            out.check(i, name, &[("rc", 0)]);
        }
        // the child: its own 512 MiB, then the import, which costs it nothing
        let child = [
            "init", "create", "import", "reserve", "map", "access", "retain", "release", "release",
        ];
        for (i, name) in child.iter().enumerate() {
            out.check(6 + i, name, &[("rc", 0)]);
        }
        out.check(15, "info", &[("rc", 0), ("free", 512 * MIB)]);
        out.check(16, "shimstats", &[("rc", 0), ("in_use", 512 * MIB)]);
        out.check(17, "create", &[("rc", 0)]);
        out.check(18, "create", &[("rc", OUT_OF_MEMORY)]);
        out.check(19, "unmap", &[("rc", 0)]);
        // unmapping the import gives back nothing of the child's own
        out.check(20, "info", &[("rc", 0), ("free", 0)]);
        out.check(21, "shimstats", &[("rc", 0), ("in_use", GIB)]);
        let fork = out.op(22, "forkexec");
        assert_eq!(fork.num("status"), Some(0), "{out}");
        // the exporter still pays for its released but mapped allocation
        out.check(23, "info", &[("rc", 0), ("free", 512 * MIB)]);
        out.check(24, "shimstats", &[("rc", 0), ("in_use", 512 * MIB)]);
    }
}

#[test]
fn a_handle_not_created_exportable_is_refused() {
    for client in Client::ALL {
        let out = run(client, "init create:2M export:0 info", &[LIMIT]);
        out.check_exit(0);
        out.check(2, "export", &[("rc", INVALID_VALUE)]);
        out.check(3, "info", &[("free", GIB - 2 * MIB)]);
    }
}

/// cuda.h on `cuMemRelease`: the memory is freed once every reference "(including it's
/// shareable counterparts)" is released, and each import "needs to pair it with
/// ::cuMemRelease"; on `cuMemExportToShareableHandle`: released "Once all shareable handles
/// are closed and the allocation is released". 512 MiB exported and imported by this
/// process, both handles released: the open descriptor keeps it, in the shim and under the
/// 1 GiB quota (a second 512 MiB fits, 2 MiB more does not); closing the descriptor frees
/// it, and the refusal's second look finds the room.
#[test]
fn an_export_and_an_import_of_it_keep_the_allocation_until_closed() {
    for client in Client::ALL {
        let out = run(
            client,
            "init createfd:512M export:0 import:512M release:0 release:1 info shimstats:0 \
             create:512M create:2M closefd create:2M info shimstats:0",
            &[LIMIT],
        );
        out.check_exit(0);
        let mut rcs = [0; 14];
        rcs[9] = OUT_OF_MEMORY;
        out.check_rcs(&rcs);
        // the shim gives the creating handle back for its own export
        let created = out.op(1, "createfd").num("handle");
        assert_eq!(out.op(3, "import").num("handle"), created, "{out}");
        out.check(6, "info", &[("free", 512 * MIB)]);
        out.check(7, "shimstats", &[("in_use", 512 * MIB), ("live", 1)]);
        out.check(12, "info", &[("free", 510 * MIB)]);
        out.check(13, "shimstats", &[("in_use", 514 * MIB), ("live", 2)]);
    }
}

/// IPC, pool-pointer and external-memory imports cannot be simulated (the shim's device
/// memory is private to its process): on every path the driver's own answer comes back,
/// and nothing is charged.
#[test]
fn pointer_imports_get_the_drivers_answer_and_charge_nothing() {
    for client in Client::ALL {
        let out = run(
            client,
            "init alloc:2M ipcopen poolimport extbuf info",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 801, 801, 801, 0]);
        out.check(5, "info", &[("free", GIB - 2 * MIB)]);
    }
}
