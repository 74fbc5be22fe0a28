//! Process lifecycle: fork without exec (a child that allocates nothing says nothing; one
//! that allocates has its own quota, summary and, with `%p`, its own trace), fork + exec,
//! `exit` from a thread while others allocate, `_exit`, SIGTERM and SIGKILL during
//! allocation, frees that arrive after the exit handlers ran, and forks while other threads
//! are inside the hooks. Every run is bounded by the harness's timeout (no hang); none may
//! crash, and every trace left behind must be readable line by line.

use crate::common::*;
use crate::reliability_util::*;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

const LIMIT: (&str, &str) = ("CUQUOTA_LIMIT", "1GiB");

/// The cuquota lines of process `pid` starting with `start`.
fn lines_of<'a>(out: &'a Output, pid: u64, start: &str) -> Vec<&'a str> {
    let want = format!("cuquota[{pid}]: {start}");
    out.stderr
        .iter()
        .map(String::as_str)
        .filter(|l| l.starts_with(&want))
        .collect()
}

fn summaries(out: &Output) -> Vec<&str> {
    out.stderr
        .iter()
        .map(String::as_str)
        .filter(|l| l.contains(": GPU 0 summary: "))
        .collect()
}

fn trace_path(dir: &Path, pid: u64) -> std::path::PathBuf {
    dir.join(format!("t-{pid}.jsonl"))
}

#[test]
fn a_forked_child_that_allocates_nothing_says_nothing() {
    for client in [Client::Linked, Client::Runtime] {
        let dir = scratch_dir("fork-idle");
        let template = format!("{}/t-%p.jsonl", dir.display());
        let out = run(
            client,
            "init alloc:256M fork:1 sleep:0 alloc:256M info",
            &[LIMIT, ("CUQUOTA_TRACE", &template)],
        );
        out.check_exit(0);
        no_panic(&out);
        let fork = out.op(3, "fork");
        assert_eq!(fork.num("status"), Some(0), "{out}");
        out.check(5, "info", &[("free", GIB - 512 * MIB)]);
        // One summary, the parent's; the child printed nothing at all.
        assert_eq!(
            summaries(&out),
            out.logs_starting("GPU 0 summary: "),
            "{out}"
        );
        out.check_log(
            "GPU 0 summary: peak 512.00 MiB (536870912 bytes) of quota 1.00 GiB, \
             2 allocations, 0 refusals, 2 live at exit (512.00 MiB)",
        );
        let child = fork.num("pid").unwrap();
        assert!(lines_of(&out, child, "").is_empty(), "{out}");
        // One trace, the parent's, with the parent's events only.
        assert_eq!(
            files_in(&dir),
            [trace_path(&dir, u64::from(out.pid))],
            "{out}"
        );
        let t = read_trace(&trace_path(&dir, u64::from(out.pid)), false);
        assert_eq!(t.of("alloc").len(), 2);
        assert!(t.events.iter().all(|e| e.tid == out.pid));
        assert_eq!(t.summary.unwrap()["devices"][0]["live"], 2);
    }
}

#[test]
fn a_forked_child_that_allocates_has_its_own_quota_summary_and_trace() {
    for client in [Client::Linked, Client::Dlsym, Client::Runtime] {
        let dir = scratch_dir("fork-alloc");
        let template = format!("{}/t-%p.jsonl", dir.display());
        let out = run(
            client,
            "init alloc:768M fork:3 alloc:1G alloc:1 info alloc:256M alloc:1 info",
            &[LIMIT, ("CUQUOTA_TRACE", &template)],
        );
        out.check_exit(0);
        no_panic(&out);
        // The child (its lines come first: the parent waits for it) starts from zero.
        out.check_rcs(&[0, 0, 0, OUT_OF_MEMORY, 0, 0, OUT_OF_MEMORY, 0]);
        out.check(4, "info", &[("free", 0), ("total", GIB)]);
        let fork = out.op(5, "fork");
        assert_eq!(fork.num("status"), Some(0), "{out}");
        let child = fork.num("pid").unwrap();
        out.check(8, "info", &[("free", 0), ("total", GIB)]);
        let parent = u64::from(out.pid);
        assert_eq!(
            lines_of(&out, child, "GPU 0 summary: "),
            [format!(
                "cuquota[{child}]: GPU 0 summary: peak 1.00 GiB (1073741824 bytes) of quota \
                 1.00 GiB, 1 allocation, 1 refusal, 1 live at exit (1.00 GiB)"
            )],
            "{out}"
        );
        assert_eq!(
            lines_of(&out, parent, "GPU 0 summary: "),
            [format!(
                "cuquota[{parent}]: GPU 0 summary: peak 1.00 GiB (1073741824 bytes) of quota \
                 1.00 GiB, 2 allocations, 1 refusal, 2 live at exit (1.00 GiB)"
            )],
            "{out}"
        );
        assert_eq!(summaries(&out).len(), 2, "{out}");

        // Two traces, each with its own process's events only.
        let (pt, ct) = (trace_path(&dir, parent), trace_path(&dir, child));
        let mut want = vec![pt.clone(), ct.clone()];
        want.sort();
        assert_eq!(files_in(&dir), want);
        let p = read_trace(&pt, false);
        let c = read_trace(&ct, false);
        assert_eq!(p.header["pid"], parent);
        assert_eq!(c.header["pid"], child);
        let bytes = |t: &Trace| t.of("alloc").iter().map(|e| e.bytes).collect::<Vec<_>>();
        assert_eq!(bytes(&p), [768 * MIB, 256 * MIB]);
        assert_eq!(bytes(&c), [GIB]);
        assert!(p.events.iter().all(|e| u64::from(e.tid) == parent));
        assert!(c.events.iter().all(|e| u64::from(e.tid) == child));
        assert_eq!(c.of("refused").len(), 1);
        assert_eq!(c.summary.as_ref().unwrap()["devices"][0]["in_use"], GIB);
        assert_eq!(p.summary.as_ref().unwrap()["devices"][0]["in_use"], GIB);
    }
}

#[test]
fn a_forked_child_never_overwrites_its_parents_trace() {
    // Without %p both processes want the same name: the child gets NAME.1.
    let dir = scratch_dir("fork-name");
    let path = dir.join("t.jsonl");
    let out = run(
        Client::Linked,
        "init alloc:1M fork:1 alloc:2M alloc:3M",
        &[LIMIT, ("CUQUOTA_TRACE", path.to_str().unwrap())],
    );
    out.check_exit(0);
    let p = read_trace(&path, false);
    let c = read_trace(&dir.join("t.jsonl.1"), false);
    assert_eq!(p.header["pid"], out.pid);
    let bytes = |t: &Trace| t.of("alloc").iter().map(|e| e.bytes).collect::<Vec<_>>();
    assert_eq!(bytes(&p), [MIB, 3 * MIB]);
    assert_eq!(bytes(&c), [2 * MIB]);
    assert_eq!(files_in(&dir).len(), 2);
}

#[test]
fn fork_and_exec_gives_a_new_process_with_the_quota_of_its_environment() {
    for client in [Client::Linked, Client::Dlsym, Client::Runtime] {
        let out = run(
            client,
            "init alloc:768M setenv:CUQUOTA_LIMIT=0:2GiB \
             forkexec:5 init alloc:2G alloc:1 info exit:7 \
             alloc:256M alloc:1 info",
            &[LIMIT],
        );
        out.check_exit(0);
        no_panic(&out);
        out.check_rcs(&[0, 0, 0, 0, 0, OUT_OF_MEMORY, 0, 0, OUT_OF_MEMORY, 0]);
        out.check(6, "info", &[("free", 0), ("total", 2 * GIB)]);
        let fork = out.op(8, "forkexec");
        assert_eq!(fork.num("status"), Some(7), "{out}");
        out.check(11, "info", &[("free", 0), ("total", GIB)]);
        let child = fork.num("pid").unwrap();
        assert_eq!(
            lines_of(&out, child, "GPU 0 summary: "),
            [format!(
                "cuquota[{child}]: GPU 0 summary: peak 2.00 GiB (2147483648 bytes) of quota \
                 2.00 GiB, 1 allocation, 1 refusal, 1 live at exit (2.00 GiB)"
            )],
            "{out}"
        );
        out.check_log(
            "GPU 0 summary: peak 1.00 GiB (1073741824 bytes) of quota 1.00 GiB, \
             2 allocations, 1 refusal, 2 live at exit (1.00 GiB)",
        );
    }
}

/// A trace of a process that did not end cleanly: readable line by line (a torn last line
/// only where the writer may have been cut), header first; if the summary is there, it
/// says how the process ended.
fn check_unclean_trace(dir: &Path, pid: u32, torn_ok: bool, end: Option<&str>) -> Trace {
    let files = files_in(dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let t = read_trace(&files[0], torn_ok);
    assert_eq!(t.header["pid"], pid);
    if let (Some(summary), Some(end)) = (&t.summary, end) {
        assert_eq!(summary["end"], end, "{}", files[0].display());
    }
    t
}

#[test]
fn exit_from_a_thread_while_others_allocate() {
    for client in [Client::Linked, Client::Runtime] {
        let dir = scratch_dir("exit-thread");
        let template = format!("{}/t-%p.jsonl", dir.display());
        let out = run(
            client,
            "init alloc:256M spin:2:1M exitthread:3",
            &[LIMIT, ("CUQUOTA_TRACE", &template)],
        );
        out.check_exit(3);
        no_panic(&out);
        let s = out.logs_starting("GPU 0 summary: ");
        assert_eq!(s.len(), 1, "{out}");
        let t = check_unclean_trace(&dir, out.pid, false, Some("exit"));
        // Either the writer finished (summary last) or cuquota said it could not in time.
        assert!(
            t.summary.is_some()
                || !out
                    .logs_starting("trace: the writer did not finish")
                    .is_empty(),
            "{out}"
        );
        assert!(t.events.iter().all(|e| e.kind != "refused"));
    }
}

#[test]
fn underscore_exit_skips_the_summary_and_leaves_a_readable_trace() {
    let dir = scratch_dir("underscore-exit");
    let template = format!("{}/t-%p.jsonl", dir.display());
    let out = run(
        Client::Linked,
        "init alloc:256M spin:2:1M _exit:4",
        &[LIMIT, ("CUQUOTA_TRACE", &template)],
    );
    out.check_exit(4);
    no_panic(&out);
    assert!(out.cuquota_lines().is_empty(), "{out}");
    let t = check_unclean_trace(&dir, out.pid, true, None);
    assert!(t.summary.is_none());
}

#[test]
fn sigterm_during_allocation() {
    for client in [Client::Linked, Client::Runtime] {
        let dir = scratch_dir("sigterm");
        let template = format!("{}/t-%p.jsonl", dir.display());
        let out = run(
            client,
            "init alloc:256M spin:4:1M signal:15",
            &[LIMIT, ("CUQUOTA_TRACE", &template)],
        );
        assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{out}");
        no_panic(&out);
        // cuquota flushed (at most 200 ms) and let the signal kill the process: a trace
        // ending in a SIGTERM summary if the writer made it in time, in whole lines either
        // way, and then (written just before it) the summary line on stderr too.
        let t = check_unclean_trace(&dir, out.pid, false, Some("SIGTERM"));
        let lines = out.logs_starting("GPU 0 summary: ").len();
        assert_eq!(lines, usize::from(t.summary.is_some()), "{out}");
    }
}

#[test]
fn sigkill_during_allocation() {
    for client in [Client::Linked, Client::Runtime] {
        let dir = scratch_dir("sigkill");
        let template = format!("{}/t-%p.jsonl", dir.display());
        let out = run(
            client,
            "init alloc:256M spin:4:1M kill",
            &[LIMIT, ("CUQUOTA_TRACE", &template)],
        );
        assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out}");
        let t = check_unclean_trace(&dir, out.pid, true, None);
        assert!(t.summary.is_none());
    }
}

#[test]
fn frees_after_the_exit_handlers_still_work() {
    for client in [Client::Linked, Client::Dlsym, Client::Runtime] {
        // Registered before the first CUDA call, the program's handler runs after cuquota's
        // (atexit runs handlers in reverse): its frees come after the summary and the end
        // of the trace, and must still reach the driver and succeed.
        let dir = scratch_dir("atexit");
        let template = format!("{}/t-%p.jsonl", dir.display());
        let out = run(
            client,
            "atexitfree init alloc:256M create:256M async:1M",
            &[LIMIT, ("CUQUOTA_TRACE", &template)],
        );
        out.check_exit(0);
        no_panic(&out);
        let ran = out.op(5, "atexitfree-ran");
        assert_eq!((ran.num("n"), ran.num("rc")), (Some(3), Some(0)), "{out}");
        // (the 1 MiB came from a pool that reserved a 2 MiB chunk: the pool cache)
        out.check_log(
            "GPU 0 summary: peak 514.00 MiB (538968064 bytes) of quota 1.00 GiB, \
             3 allocations, 0 refusals, 3 live at exit (513.00 MiB); besides allocations at \
             exit: pool cache 1.00 MiB (peak 1.00 MiB)",
        );
        let t = read_trace(&trace_path(&dir, u64::from(out.pid)), false);
        assert_eq!(t.summary.unwrap()["devices"][0]["live"], 3);

        // Registered after it, the program's handler runs first: the summary sees the frees.
        let out = run(client, "init alloc:256M create:256M atexitfree", &[LIMIT]);
        out.check_exit(0);
        let ran = out.op(4, "atexitfree-ran");
        assert_eq!((ran.num("n"), ran.num("rc")), (Some(2), Some(0)), "{out}");
        out.check_log(
            "GPU 0 summary: peak 512.00 MiB (536870912 bytes) of quota 1.00 GiB, \
             2 allocations, 0 refusals, 0 live at exit (0 B)",
        );
    }
}

const FORKS: usize = 100;

#[test]
fn forks_while_other_threads_are_in_the_hooks_do_not_hang() {
    // Eight threads call the hooks without pause while the main thread forks 100 times:
    // four allocate and free (the live-allocation table's locks), four are refused (the
    // log's lock). Each child goes through cuquota's own locks only (the shim's lock
    // may be held by a thread at the fork, as a real driver's would be: CUDA is not usable
    // in a forked child): a free of 0 (the table) and a refusal (the log).
    //
    // What this guards: no child may hang in cuquota's fork child handler, inside fork()
    // itself, or at its first log line. Other threads are parked on the ledger shards and
    // the log lock that the prepare handler holds; a child that force-unlocked those
    // inherited locks could block on a queue lock a parent thread held at the fork, or
    // hand a lock to a parked thread that does not exist in the child. Any program that
    // forks while other threads allocate (a PyTorch DataLoader with the fork start method,
    // say) would hang, so in the child the locks are replaced by fresh ones rather than
    // unlocked.
    let mut ops = String::from("init spin:4:1M spin:4:2G");
    for _ in 0..FORKS {
        ops.push_str(" fork:2 freeptr:0x0 create:1T:0");
    }
    ops.push_str(" exit:0");
    let out = run(Client::Linked, &ops, &[LIMIT, ("CUQUOTA_LOG", "/dev/null")]);
    let forks: Vec<&Line> = out.ops().into_iter().filter(|l| l.op == "fork").collect();
    for fork in &forks {
        // -2: the child hung and was killed after 10 s (the client then stops).
        assert_eq!(
            fork.num("status"),
            Some(0),
            "a child hung or failed:\n{out}"
        );
    }
    out.check_exit(0);
    no_panic(&out);
    assert_eq!(forks.len(), FORKS, "{out}");
    let rcs: Vec<(String, u64)> = out
        .ops()
        .iter()
        .filter(|l| l.op == "freeptr" || l.op == "create")
        .map(|l| (l.op.clone(), l.num("rc").unwrap()))
        .collect();
    assert_eq!(rcs.len(), 2 * FORKS);
    assert!(rcs
        .iter()
        .all(|(op, rc)| *rc == if op == "create" { OUT_OF_MEMORY } else { 0 }));
}

/// A child forked while another thread is still making cuquota's engine (here: blocked for
/// up to 500 ms writing its configuration line into a full log FIFO) must make its own at
/// its first call. A one-time initialiser inherited mid-run would wait in the child for a
/// thread the child does not have: the child would hang.
#[test]
fn a_child_forked_during_start_up_starts_its_own_engine() {
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch_dir("lifecycle-fork-start-up");
    let fifo = dir.join("log.fifo");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string; mkfifo and open have no other precondition.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    // SAFETY: as above.
    let reader = unsafe { libc::open(c_path.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK) };
    assert!(reader >= 0);
    // SAFETY: as above.
    let writer = unsafe { libc::open(c_path.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK) };
    assert!(writer >= 0);
    // Fill the FIFO: nobody reads it, so the job's first log line finds no room.
    let chunk = [b'x'; 4096];
    // SAFETY: chunk is a live buffer of its length.
    while unsafe { libc::write(writer, chunk.as_ptr().cast(), chunk.len()) } > 0 {}
    let out = run(
        Client::Linked,
        "bg-init sleep:100 fork:1 freeptr:0x0 sleep:1000",
        &[
            LIMIT,
            ("CUQUOTA_LOG", fifo.to_str().unwrap()),
            ("CUQUOTA_LOG_LEVEL", "info"),
        ],
    );
    // SAFETY: our descriptors, closed once.
    unsafe {
        libc::close(reader);
        libc::close(writer);
    }
    // The background thread's line may come before or after it.
    let fork = *out
        .ops()
        .iter()
        .find(|l| l.op == "fork")
        .unwrap_or_else(|| panic!("no fork line:\n{out}"));
    // -2: the child hung and was killed after 10 s.
    assert_eq!(fork.num("status"), Some(0), "the child hung:\n{out}");
    out.check_exit(0);
    no_panic(&out);
}

/// `exit()` from a signal handler that interrupted a thread inside a hook (C tools and
/// servers do this): cuquota's exit handler runs on that thread, and must not wait for a
/// lock that same thread holds (a ledger shard, the log, the trace queue). Sixty processes
/// with a trace (more locks; without the fix about 1 in 20 hung); each must end by itself.
#[test]
fn exit_from_a_signal_handler_inside_a_hook_never_hangs() {
    let dir = scratch_dir("lifecycle-sigexit");
    let template = dir.join("t-%p.jsonl");
    let mut hangs = Vec::new();
    for _ in 0..60 {
        let out = Run::client(Client::Linked)
            .ops("init spin:4:1M sigexit:10")
            .envs(&[
                LIMIT,
                ("CUQUOTA_TRACE", template.to_str().unwrap()),
                ("CUQUOTA_LOG", "/dev/null"),
            ])
            .timeout(std::time::Duration::from_secs(10))
            .run_allowing_timeout();
        if out.timed_out {
            hangs.push(out.pid);
        } else {
            out.check_exit(0);
        }
    }
    assert!(hangs.is_empty(), "{} of 60 hung: {hangs:?}", hangs.len());
}
