//! The quota holds on every way a program can reach the driver: linked symbols, dlsym (both
//! glibc versions), and the CUDA runtime's cuGetProcAddress lookups (with and without
//! per-thread default streams), and for every kind of device allocation.

use crate::common::*;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "1GiB");

#[test]
fn cumemalloc_is_capped_and_figures_are_virtualized_on_every_path() {
    for client in Client::ALL {
        let out = run(
            client,
            "init info alloc:256M alloc:256M alloc:256M alloc:256M alloc:1 info \
             free:0 info alloc:256M total:0",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check(0, "init", &[("rc", 0)]);
        out.check(1, "info", &[("rc", 0), ("free", GIB), ("total", GIB)]);
        for i in 2..6 {
            out.check(i, "alloc", &[("rc", 0), ("slot", i as u64 - 2)]);
        }
        out.check(6, "alloc", &[("rc", OUT_OF_MEMORY), ("ptr", 0)]);
        out.check(7, "info", &[("rc", 0), ("free", 0), ("total", GIB)]);
        out.check(8, "free", &[("rc", 0)]);
        out.check(9, "info", &[("rc", 0), ("free", 256 * MIB), ("total", GIB)]);
        out.check(10, "alloc", &[("rc", 0)]);
        out.check(11, "total", &[("rc", 0), ("bytes", GIB)]);
    }
}

#[test]
fn without_the_interposer_the_shim_gives_raw_figures() {
    for client in Client::ALL {
        let out = run_raw(
            client,
            "init info alloc:256M alloc:256M alloc:256M alloc:256M info alloc:1 total:0",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check(0, "init", &[("rc", 0)]);
        out.check(
            1,
            "info",
            &[("free", DEVICE_BYTES), ("total", DEVICE_BYTES)],
        );
        out.check_rcs(&[0, 0, 0, 0, 0, 0, 0, 0, 0]);
        out.check(
            6,
            "info",
            &[("free", DEVICE_BYTES - GIB), ("total", DEVICE_BYTES)],
        );
        out.check(8, "total", &[("bytes", DEVICE_BYTES)]);
        assert!(out.cuquota_lines().is_empty(), "{out}");
    }
}

/// `kind:512M` twice fills the 1 GiB quota; a third of 2 MiB is refused.
fn check_kind_capped(client: Client, kind: &str, extra: &str, after: &[(u64, u64)]) {
    let out = run(
        client,
        &format!("init {kind}:512M {kind}:512M {kind}:2M info {extra}"),
        &[LIMIT],
    );
    out.check_exit(0);
    out.check(1, kind, &[("rc", 0)]);
    out.check(2, kind, &[("rc", 0)]);
    out.check(3, kind, &[("rc", OUT_OF_MEMORY)]);
    out.check(4, "info", &[("rc", 0), ("free", 0), ("total", GIB)]);
    for &(i, free) in after {
        out.check(i as usize, "info", &[("free", free)]);
    }
}

#[test]
fn stream_ordered_allocations_are_capped() {
    for client in Client::ALL {
        // Freed, the memory stays in the pool (counted in the footprint) until a
        // synchronization gives it back.
        let after = [(6, 0), (8, 512 * MIB)];
        check_kind_capped(client, "async", "freeasync:0 info sync info", &after);
        check_kind_capped(client, "pool", "freeasync:0 info sync info", &after);
        check_kind_capped(client, "defpool", "freeasync:1 info sync info", &after);
    }
}

#[test]
fn managed_allocations_are_capped() {
    for client in Client::ALL {
        check_kind_capped(client, "managed", "free:0 info", &[(6, 512 * MIB)]);
    }
}

#[test]
fn pitched_allocations_are_charged_pitch_times_height() {
    for client in Client::ALL {
        let out = run(
            client,
            "init pitch:1000:1024:4 info pitch:65536:16384:4 info",
            &[LIMIT],
        );
        out.check_exit(0);
        let pitch = out.check(1, "pitch", &[("rc", 0)]).num("pitch").unwrap();
        assert!(pitch >= 1000, "pitch {pitch} < width:\n{out}");
        let left = GIB - pitch * 1024;
        out.check(2, "info", &[("rc", 0), ("free", left)]);
        // 64 KiB x 16 Ki rows is the whole quota: more than what is left.
        out.check(3, "pitch", &[("rc", OUT_OF_MEMORY)]);
        out.check(4, "info", &[("free", left)]);
    }
}

#[test]
fn cumemcreate_on_a_device_is_capped_and_host_and_reservations_are_not() {
    for client in Client::ALL {
        let out = run(
            client,
            "init create:512M create:512M create:2M info release:0 info \
             createhost:512M info reserve:2G info",
            &[LIMIT],
        );
        out.check_exit(0);
        out.check(1, "create", &[("rc", 0)]);
        out.check(2, "create", &[("rc", 0)]);
        out.check(3, "create", &[("rc", OUT_OF_MEMORY)]);
        out.check(4, "info", &[("free", 0)]);
        out.check(5, "release", &[("rc", 0)]);
        out.check(6, "info", &[("free", 512 * MIB)]);
        out.check(7, "createhost", &[("rc", 0)]);
        out.check(8, "info", &[("free", 512 * MIB)]);
        out.check(9, "reserve", &[("rc", 0)]);
        out.check(10, "info", &[("free", 512 * MIB)]);
    }
}

#[test]
fn legacy_32_bit_entry_points_are_capped() {
    for client in [Client::Linked, Client::Runtime, Client::RuntimePerThread] {
        let out = run(
            client,
            "init lalloc:32M lalloc:32M lalloc:2M linfo lfree:0 linfo",
            &[("CUQUOTA_LIMIT", "64MiB")],
        );
        out.check_exit(0);
        out.check_rcs(&[0, 0, 0, OUT_OF_MEMORY, 0, 0, 0]);
        out.check(4, "linfo", &[("free", 0), ("total", 64 * MIB)]);
        out.check(6, "linfo", &[("free", 32 * MIB), ("total", 64 * MIB)]);
    }
}

/// How many functions `tests/clients/driver_functions.h` lists (its `DRV(` and `DRV_LEGACY(`
/// lines): the functions the op clients resolve, each looked up once by the runtime client.
fn driver_functions() -> usize {
    let path = artifacts()
        .workspace
        .join("tests/clients/driver_functions.h");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let n = text
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("DRV(") || l.starts_with("DRV_LEGACY("))
        .count();
    assert!(n > 0, "no DRV( lines in {path:?}");
    n
}

#[test]
fn runtime_lookups_all_resolve() {
    for (client, flags) in [(Client::Runtime, 0), (Client::RuntimePerThread, 2)] {
        let out = run(client, "init", &[LIMIT]);
        out.check_exit(0);
        let lookups = out.lookups();
        // cuGetProcAddress itself twice (12000 and 11030), then one per function of the list
        assert_eq!(lookups.len(), 2 + driver_functions(), "{out}");
        for l in lookups {
            for (key, want) in [("rc", 0), ("status", 0), ("flags", flags)] {
                assert_eq!(l.num(key), Some(want), "{}: {key}\n{out}", l.raw);
            }
        }
    }
}

#[test]
fn dlsym_clients_bind_the_intended_glibc_version() {
    let old = if cfg!(target_arch = "aarch64") {
        "GLIBC_2.17"
    } else {
        "GLIBC_2.2.5"
    };
    for (client, version) in [(Client::Dlsym, "GLIBC_2.34"), (Client::DlsymOld, old)] {
        let out = std::process::Command::new("objdump")
            .arg("-T")
            .arg(client.path())
            .output()
            .expect("run objdump");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let refs: Vec<&str> = text
            .lines()
            .filter(|l| l.split_whitespace().last() == Some("dlsym"))
            .collect();
        assert_eq!(refs.len(), 1, "{client:?}: dlsym references:\n{text}");
        assert!(
            refs[0].contains(&format!("({version})")),
            "{client:?} binds {}, not {version}",
            refs[0]
        );
    }
}

/// A pitched allocation's excess (the driver's pitch wider than the width) settles as a first
/// reservation would: refused, the pool cache is trimmed and it is tried again; refused for
/// good, one line and one event name the whole request; in observe mode one "would refuse"
/// line, one observed event, and the summary counts that one refusal.
#[test]
fn a_pitched_allocations_excess_settles_as_a_first_reservation_would() {
    let dir = scratch_dir("pitch-settle");
    // 1040 × 20000 (19.8 MiB) fits beside the pool's 40 MiB under 64 MiB; the shim's 1536-byte
    // pitch (30,720,000 bytes) fits only once the pool cache is trimmed.
    let out = run(
        Client::Dlsym,
        "init poolthreshold:defpool:16G async:40M freeasync:0 sync pitch:1040:20000:4 \
         footprint:0",
        &[("CUQUOTA_LIMIT", "64MiB"), ("CUQUOTA_CONTEXT", "0")],
    );
    out.check_exit(0);
    out.check(5, "pitch", &[("rc", 0), ("pitch", 1536)]);
    out.check(
        6,
        "footprint",
        &[("allocations", 30_720_000), ("pool_cache", 0)],
    );
    out.check_log(
        "GPU 0 summary: peak 40.00 MiB (41943040 bytes) of quota 64.00 MiB, 2 allocations, 0 \
         refusals, 1 live at exit (29.30 MiB); besides allocations at exit: pool cache 0 B \
         (peak 40.00 MiB); 1 trim gave back 40.00 MiB",
    );

    for (mode, rc) in [("enforce", OUT_OF_MEMORY), ("observe", 0)] {
        let trace = dir.join(format!("{mode}.jsonl"));
        let out = run(
            Client::Dlsym,
            "init pitch:1040:1000:4",
            &[
                ("CUQUOTA_LIMIT", "1MiB"),
                ("CUQUOTA_CONTEXT", "0"),
                ("CUQUOTA_MODE", mode),
                ("CUQUOTA_TRACE", trace.to_str().unwrap()),
            ],
        );
        out.check_exit(0);
        out.check(1, "pitch", &[("rc", rc)]);
        let said = match mode {
            "enforce" => "refused",
            _ => "would refuse",
        };
        let left = if mode == "enforce" {
            ""
        } else {
            " (observe mode: allowed)"
        };
        out.check_log(&format!(
            "GPU 0 {said} 1.46 MiB (1536000 bytes) via cuMemAllocPitch_v2: quota 1.00 MiB, in \
             use 0 B, 1.00 MiB left{left}"
        ));
        let summary = out.logs_starting("GPU 0 summary:");
        assert_eq!(summary.len(), 1, "{out}");
        assert!(summary[0].contains(", 1 refusal"), "{out}");
        let refusals: Vec<serde_json::Value> = std::fs::read_to_string(&trace)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|e| e["type"] == "refused")
            .collect();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert_eq!(
            refusals[0]["bytes"].as_u64(),
            Some(1_536_000),
            "{refusals:?}"
        );
        assert_eq!(
            refusals[0]["observed"].as_bool(),
            (mode == "observe").then_some(true)
        );
        let end = std::fs::read_to_string(&trace).unwrap();
        let last: serde_json::Value = serde_json::from_str(end.lines().last().unwrap()).unwrap();
        assert_eq!(last["devices"][0]["refusals"].as_u64(), Some(1), "{last}");
    }
}
