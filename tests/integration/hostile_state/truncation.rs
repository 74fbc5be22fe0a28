//! A registry file another user owns, held alive by its owner and truncated and refilled
//! over and over while others read it: a viewer (the `metrics --listen` exporter, a scan
//! per scrape) and a refused member (a holder lookup per refusal) copy it with `pread`
//! instead of mapping it, so a cut cannot raise SIGBUS in them (it once did, in about one
//! read in five).

use super::*;
use cuquota_state::identity::Identity;
use cuquota_state::registry::{ProcessFile, Registration, FILE_SIZE};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Scrapes, and refusals (with their holder lookups). With the files mapped, the refusals
/// died of SIGBUS in 3 runs of 3, the scrapes in 2 of 3.
const SCRAPES: usize = 600;
const ROUNDS: usize = 300;

/// GET /metrics from 127.0.0.1:`port`: the status line and the body.
fn scrape(port: u16) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("the exporter lives");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

#[test]
fn a_registry_file_cut_under_its_readers_raises_no_sigbus() {
    crate::policy::needs_root();
    let kit = Kit::new("hostile-cut").root_made();
    // daemon's living process (its life lock held here), its file readable by all.
    let argv = ["flipper".to_string()];
    let living = ProcessFile::register(
        &kit.state(),
        &Registration {
            pid: 4_000_001,
            started_unix_ns: 1,
            host: "h",
            argv: &argv,
            group: Some("svc"),
            observe: false,
            allocations_only: false,
            identity: &Identity::default(),
        },
    )
    .unwrap();
    // Every GPU described: a reader reads the whole file, every page of it.
    for d in 0..cuquota_format::settings::MAX_DEVICES {
        living.describe_device(d, [d as u8; 16], 8 << 30, "Stand-in GPU");
    }
    let path = kit.state().join("processes/4000001-1");
    chown(&path, Some(DAEMON.0), Some(DAEMON.1)).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let whole = fs::read(&path).unwrap();
    assert_eq!(whole.len(), FILE_SIZE);

    // Cut to nothing and refilled, as fast as it goes, until the readers are done.
    let done = Arc::new(AtomicBool::new(false));
    let cuts = Arc::new(AtomicU64::new(0));
    let flipper = {
        let (done, cuts) = (done.clone(), cuts.clone());
        let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::thread::spawn(move || {
            while !done.load(Relaxed) {
                f.set_len(0).unwrap();
                f.write_all_at(&whole, 0).unwrap();
                cuts.fetch_add(1, Relaxed);
            }
        })
    };

    // A viewer: nobody's exporter, one full scan per scrape.
    let s = kit.state();
    let mut exporter = Run::program(kit.root.join("bin/cuquota"))
        .no_preload()
        .args(&[
            "metrics",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            s.to_str().unwrap(),
        ])
        .user(NOBODY.0, NOBODY.1, &[NOBODY.1])
        .timeout(USER_TIMEOUT)
        .start();
    let said = exporter.wait_for(|l| l.raw.contains("/metrics"));
    let port: u16 = (said.raw.trim().rsplit_once(':'))
        .and_then(|(_, p)| p.strip_suffix("/metrics")?.parse().ok())
        .unwrap_or_else(|| panic!("no address in {:?}", said.raw));
    for round in 0..SCRAPES {
        let (status, body) = scrape(port);
        assert_eq!(status, "HTTP/1.0 200 OK", "scrape {round}: {body}");
        assert!(
            body.contains("\ncuquota_processes "),
            "scrape {round}: {body}"
        );
    }
    assert!(!exporter.has_ended(), "the exporter died");
    exporter.kill();
    let out = exporter.wait();
    assert!(out.stderr.is_empty(), "{out}");

    // A refusal: nobody's member refused ROUNDS times beside a holder, each refusal looking
    // its holders up in every registry file.
    let mut holder = (kit.client(NOBODY, &[NOBODY.1]))
        .ops("init alloc:768M sleep:30000")
        .env("CUQUOTA_GROUP", "svc")
        .env("CUQUOTA_LIMIT", "1GiB")
        .start();
    holder.wait_for(|l| l.op == "alloc");
    // At debug, every refusal of an episode is said, and so looks its holders up.
    let ops = format!("init{}", " alloc:512M".repeat(ROUNDS));
    let out = (kit.client(NOBODY, &[NOBODY.1]))
        .ops(&ops)
        .env("CUQUOTA_GROUP", "svc")
        .env("CUQUOTA_LIMIT", "1GiB")
        .env("CUQUOTA_LOG_LEVEL", "debug")
        .run();
    out.check_exit(0);
    let mut want = vec![0];
    want.extend([OUT_OF_MEMORY; ROUNDS]);
    out.check_rcs(&want);
    let named = format!("held by pid {} (", holder.pid());
    let said = (out.cuquota_lines().iter())
        .filter(|l| l.contains("refused 512.00 MiB") && l.contains(&named))
        .count();
    assert_eq!(said, ROUNDS, "{out}");
    holder.kill();

    done.store(true, Relaxed);
    flipper.join().unwrap();
    assert!(
        cuts.load(Relaxed) >= ROUNDS as u64,
        "{} cuts",
        cuts.load(Relaxed)
    );
    drop(living);
}
