//! Writer round trips: start, record, finish into a temporary file, parse every line back.

use super::*;
use cuquota_format::schema::{parse_ptr, EventLine, Header, Summary};
use std::path::{Path, PathBuf};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cuquota-trace-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn info() -> StartInfo {
    StartInfo {
        mode: "enforce",
        count: "footprint",
        group: None,
        devices: vec![
            HeaderDevice {
                ordinal: 0,
                name: "Stand-in GPU 0".into(),
                total: 8 << 30,
                quota: Some(6 << 30),
            },
            HeaderDevice {
                ordinal: 1,
                name: "Stand-in \"GPU\" 1".into(),
                total: 8 << 30,
                quota: None,
            },
        ],
    }
}

fn ev(kind: EventKind, device: u32, ptr: u64, bytes: u64, result: u32, in_use: u64) -> Event {
    Event {
        kind,
        device,
        api: "cuMemAlloc_v2",
        ptr,
        bytes,
        result,
        in_use,
    }
}

struct Parsed {
    header: Header,
    events: Vec<EventLine<'static>>,
    summary: Option<Summary>,
}

fn parse(path: &Path) -> Parsed {
    // Leaked so that the events can borrow from it for the rest of the test.
    let text: &'static str = std::fs::read_to_string(path).unwrap().leak();
    assert!(text.ends_with('\n'), "every line is complete");
    let mut lines = text.lines();
    let header: Header = serde_json::from_str(lines.next().unwrap()).unwrap();
    let mut events = Vec::new();
    let mut summary = None;
    for line in lines {
        assert!(summary.is_none(), "nothing after the summary");
        let ev: EventLine = serde_json::from_str(line).unwrap();
        if ev.kind == "summary" {
            summary = Some(serde_json::from_str(line).unwrap());
        } else {
            events.push(ev);
        }
    }
    Parsed {
        header,
        events,
        summary,
    }
}

fn fast() -> writer::Options {
    writer::Options {
        capacity: 1024,
        period: Duration::from_millis(5),
        wake_when_half_full: true,
    }
}

#[test]
fn round_trip_every_event_and_the_summary() {
    let dir = temp_dir("roundtrip");
    let template = format!("{}/t-%p.jsonl", dir.display());
    let tracer = open(&template, &info(), crate::sys::monotonic_ns(), fast()).unwrap();
    tracer.record(ev(
        EventKind::ALLOC,
        0,
        0x7f00_0000_0000,
        1 << 30,
        0,
        1 << 30,
    ));
    tracer.record(ev(
        EventKind::ALLOC,
        0,
        0x7f00_4000_0000,
        2 << 30,
        0,
        3 << 30,
    ));
    tracer.record(ev(
        EventKind::Refused { by_driver: false },
        0,
        0,
        4 << 30,
        2,
        3 << 30,
    ));
    let sizes = vec![4u64 << 30, 3 << 30].into_boxed_slice();
    tracer.record(ev(
        EventKind::ALLOC,
        0,
        0x7f00_c000_0000,
        3 << 30,
        0,
        6 << 30,
    ));
    tracer.record(ev(
        EventKind::Backoff { sizes },
        0,
        0x7f00_c000_0000,
        3 << 30,
        0,
        6 << 30,
    ));
    tracer.record(ev(
        EventKind::Free,
        0,
        0x7f00_0000_0000,
        1 << 30,
        0,
        5 << 30,
    ));
    tracer.record(ev(
        EventKind::MemInfo {
            told_free: 1 << 30,
            told_total: 6 << 30,
            real_free: 3 << 30,
            real_total: 8 << 30,
        },
        0,
        0,
        0,
        0,
        5 << 30,
    ));
    tracer.record(ev(EventKind::ALLOC, 1, 0x10, 100, 0, 100));
    assert!(tracer.finish(Duration::from_secs(5)));
    // After finish: ignored, harmless.
    tracer.record(ev(EventKind::ALLOC, 1, 0x20, 100, 0, 200));
    assert!(tracer.finish(Duration::from_secs(1)));

    let file = dir.join(format!("t-{}.jsonl", std::process::id()));
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    let p = parse(&file);
    let h = &p.header;
    assert_eq!(
        (h.kind.as_str(), h.schema, h.pid),
        ("header", 1, std::process::id())
    );
    assert_eq!(h.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(h.mode, "enforce");
    assert!(!h.argv.is_empty() && !h.host.is_empty());
    assert_eq!(h.devices.len(), 2);
    assert_eq!(h.devices[0].quota, Some(6 << 30));
    assert_eq!(h.devices[1].name, "Stand-in \"GPU\" 1");
    assert_eq!(h.devices[1].quota, None);

    let kinds: Vec<&str> = p.events.iter().map(|e| e.kind.as_ref()).collect();
    assert_eq!(
        kinds,
        ["alloc", "alloc", "refused", "alloc", "backoff", "free", "meminfo", "alloc"]
    );
    assert!(p.events.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
    assert_eq!(parse_ptr(&p.events[1].ptr), Some(0x7f00_4000_0000));
    assert_eq!(p.events[2].reason.as_deref(), Some("quota"));
    assert_eq!(
        p.events[4].sizes.as_deref(),
        Some(&[4u64 << 30, 3 << 30][..])
    );
    assert_eq!(p.events[6].told_total, 6 << 30);
    let me = crate::sys::thread_id();
    assert!(p.events.iter().all(|e| e.tid == me));

    let s = p.summary.expect("summary line");
    assert_eq!((s.end.as_str(), s.events, s.dropped), ("exit", 8, 0));
    let d0 = &s.devices[0];
    assert_eq!((d0.dev, d0.quota), (0, Some(6 << 30)));
    assert_eq!((d0.peak, d0.peak_t_ns), (6 << 30, p.events[3].t_ns));
    assert_eq!((d0.allocs, d0.frees, d0.refusals), (2 + 1, 1, 1));
    assert_eq!(d0.alloc_bytes, 6 << 30);
    assert_eq!((d0.live, d0.live_bytes, d0.in_use), (2, 5 << 30, 5 << 30));
    let d1 = &s.devices[1];
    assert_eq!(
        (d1.allocs, d1.live, d1.live_bytes, d1.peak),
        (1, 1, 100, 100)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_buffer_drops_and_counts() {
    let dir = temp_dir("drop");
    let template = format!("{}/t.jsonl", dir.display());
    let options = writer::Options {
        capacity: 4,
        period: Duration::from_secs(3600),
        wake_when_half_full: false,
    };
    let tracer = open(&template, &info(), crate::sys::monotonic_ns(), options).unwrap();
    for i in 0..10 {
        tracer.record(ev(EventKind::ALLOC, 0, 0x1000 + i, 1, 0, i + 1));
    }
    assert_eq!(tracer.dropped(), 6);
    assert!(tracer.finish(Duration::from_secs(5)));
    let p = parse(&dir.join("t.jsonl"));
    let kinds: Vec<&str> = p.events.iter().map(|e| e.kind.as_ref()).collect();
    assert_eq!(kinds, ["dropped", "alloc", "alloc", "alloc", "alloc"]);
    assert_eq!(p.events[0].count, 6);
    let s = p.summary.unwrap();
    assert_eq!((s.events, s.dropped), (4, 6));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_writer_flushes_within_its_period_without_finish() {
    let dir = temp_dir("period");
    let template = format!("{}/t.jsonl", dir.display());
    let tracer = open(&template, &info(), crate::sys::monotonic_ns(), fast()).unwrap();
    tracer.record(ev(EventKind::ALLOC, 0, 0x1, 1, 0, 1));
    let file = dir.join("t.jsonl");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&file).unwrap().lines().count() < 2 {
        assert!(std::time::Instant::now() < deadline, "event never written");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(tracer.finish(Duration::from_secs(5)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unwritable_paths_and_full_disks_fail_at_start() {
    let err = open(
        "/nonexistent-cuquota/t.jsonl",
        &info(),
        crate::sys::monotonic_ns(),
        fast(),
    )
    .err()
    .unwrap();
    assert!(err.contains("/nonexistent-cuquota/t.jsonl"), "{err}");
    let err = open("/dev/full", &info(), crate::sys::monotonic_ns(), fast())
        .err()
        .unwrap();
    assert!(err.contains("No space left on device"), "{err}");
    let err = open("t-%q", &info(), crate::sys::monotonic_ns(), fast())
        .err()
        .unwrap();
    assert!(err.contains("%q"), "{err}");
}

/// The process-wide API, `fork` and the SIGTERM flush: one test, as they share global state.
#[test]
fn global_api_fork_and_sigterm() {
    let dir = temp_dir("global");
    let template = format!("{}/p-%p.jsonl", dir.display());
    record(ev(EventKind::ALLOC, 0, 0x1, 1, 0, 1)); // not started: ignored
    assert_eq!(dropped(), 0);
    start(&template, info()).unwrap();
    start(&template, info()).unwrap(); // a second start is a no-op
    record(ev(EventKind::ALLOC, 0, 0xa, 10, 0, 10));

    // A child inherits nothing: its events go nowhere until it starts its own trace.
    let child = fork_child(|| {
        record(ev(EventKind::ALLOC, 0, 0xbad, 1, 0, 11));
        if start(&template, info()).is_err() {
            return 2;
        }
        record(ev(EventKind::ALLOC, 0, 0xc, 20, 0, 20));
        finish();
        0
    });
    assert_eq!(wait(child), Ok(0));

    record(ev(EventKind::Free, 0, 0xa, 10, 0, 0));
    finish();

    // Events from other threads while a start is under way are kept for the new trace.
    let starting = format!("{}/starting.jsonl", dir.display());
    let early_child = fork_child(|| {
        STATE.store(STARTING, Ordering::Release);
        record(ev(EventKind::ALLOC, 0, 0xf0, 5, 0, 5));
        if start_claimed(starting.as_ref(), &info()).is_err() {
            return 2;
        }
        record(ev(EventKind::Free, 0, 0xf0, 5, 0, 0));
        finish();
        0
    });
    assert_eq!(wait(early_child), Ok(0));
    let early = parse(Path::new(&starting));
    let kinds: Vec<&str> = early.events.iter().map(|e| e.kind.as_ref()).collect();
    assert_eq!(kinds, ["alloc", "free"]);
    assert!(early.events[0].t_ns < 1_000_000_000);
    assert_eq!(early.summary.unwrap().devices[0].live, 0);
    record(ev(EventKind::ALLOC, 0, 0xd, 1, 0, 1)); // after finish: ignored

    let parent = parse(&dir.join(format!("p-{}.jsonl", std::process::id())));
    let ptrs: Vec<&str> = parent.events.iter().map(|e| e.ptr.as_ref()).collect();
    assert_eq!(ptrs, ["0xa", "0xa"]);
    assert_eq!(parent.summary.unwrap().events, 2);
    let child_file = parse(&dir.join(format!("p-{child}.jsonl")));
    assert_eq!(child_file.header.pid, child as u32);
    let ptrs: Vec<&str> = child_file.events.iter().map(|e| e.ptr.as_ref()).collect();
    assert_eq!(ptrs, ["0xc"]);
    // The child's only thread is its main thread: tid == pid (not the parent thread's id).
    assert_eq!(child_file.events[0].tid, child as u32);
    assert_eq!(child_file.summary.unwrap().devices[0].live_bytes, 20);

    // SIGTERM ending the process (the watcher's call): the rest and a summary naming it.
    let child = fork_child(|| {
        if start(&template, info()).is_err() {
            return 2;
        }
        record(ev(EventKind::ALLOC, 0, 0xe, 30, 0, 30));
        if !finish_on_signal(libc::SIGTERM, Duration::from_secs(5)) {
            return 3;
        }
        record(ev(EventKind::Free, 0, 0xe, 30, 0, 0)); // after the end: ignored
        0
    });
    assert_eq!(wait(child), Ok(0));
    let killed = parse(&dir.join(format!("p-{child}.jsonl")));
    assert_eq!(killed.events.len(), 1);
    assert_eq!(killed.summary.unwrap().end, "SIGTERM");

    // `emit` before `cuInit` (no device named yet) holds events; the first event that can
    // name the devices starts the trace with them, and the held one keeps its own time.
    let held = format!("{}/held.jsonl", dir.display());
    let held_child = fork_child(|| {
        let none = || StartInfo {
            mode: "enforce",
            count: "footprint",
            group: None,
            devices: Vec::new(),
        };
        emit(ev(EventKind::ALLOC, 0, 0x1, 1, 0, 1), || {
            (held.as_ref(), none())
        });
        if !holding() {
            return 2;
        }
        std::thread::sleep(Duration::from_millis(20));
        emit(ev(EventKind::Free, 0, 0x1, 1, 0, 0), || {
            (held.as_ref(), info())
        });
        if holding() || current().is_none() {
            return 3;
        }
        finish();
        0
    });
    assert_eq!(wait(held_child), Ok(0));
    let held = parse(Path::new(&held));
    assert_eq!(held.header.devices.len(), 2);
    let kinds: Vec<&str> = held.events.iter().map(|e| e.kind.as_ref()).collect();
    assert_eq!(kinds, ["alloc", "free"]);
    assert!(held.events[1].t_ns >= held.events[0].t_ns + 20_000_000);

    // A trace that cannot be written fails once: later events neither retry nor hold.
    let failing = fork_child(|| {
        crate::log::configure(&crate::config::LogTarget::Off);
        let bad = "/nonexistent-cuquota/t.jsonl";
        emit(ev(EventKind::ALLOC, 0, 0x1, 1, 0, 1), || {
            (bad.as_ref(), info())
        });
        let mut asked = false;
        emit(ev(EventKind::ALLOC, 0, 0x2, 1, 0, 2), || {
            asked = true;
            (bad.as_ref(), info())
        });
        flush_held(|| {
            asked = true;
            (bad.as_ref(), info())
        });
        match (asked, current().is_some(), holding()) {
            (false, false, false) => 0,
            _ => 2,
        }
    });
    assert_eq!(wait(failing), Ok(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `body` in a forked child that exits with its return value (never returns there).
fn fork_child(body: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child runs only `body` (malloc and our own code, no lock another test
    // thread could hold) and leaves with _exit, never through the test harness.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0);
        if pid == 0 {
            // What the process module's fork handler does for the thread ids and the trace.
            crate::sys::forget_thread_ids_in_child();
            reset_in_child();
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(99);
            libc::_exit(code);
        }
        pid
    }
}

/// Ok(exit code) or Err(signal).
fn wait(pid: libc::pid_t) -> Result<i32, i32> {
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Err(libc::WTERMSIG(status))
    }
}
