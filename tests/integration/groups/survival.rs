//! Groups survive what their members do: SIGKILL, PID reuse, fork and exec.

use super::*;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// Deaths
// ---------------------------------------------------------------------------------------

/// A member SIGKILLed while it holds 768 MiB: another member, already joined (it holds 64
/// MiB), gets 768 MiB at its first try, with no refusal.
#[test]
fn a_killed_members_memory_goes_to_the_next_request() {
    let g = Group::new("group-kill", "svc");
    let go = g.gate("go");
    let mut victim = g
        .member(Some("1GiB"), "init alloc:768M sleep:60000")
        .start();
    victim.wait_for(|l| l.op == "alloc");
    let mut survivor = g
        .member(
            Some("1GiB"),
            &format!("init alloc:64M info {} alloc:768M info", go.op()),
        )
        .start();
    survivor.wait_for(|l| l.op == "info");
    victim.kill();
    let victim = victim.wait();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&victim.status),
        Some(9),
        "{victim}"
    );
    go.open();
    let out = survivor.wait();
    out.check_exit(0);
    no_panic(&out);
    out.check(2, "info", &[("free", 192 * MIB), ("total", GIB)]);
    out.check(4, "alloc", &[("rc", 0)]);
    out.check(5, "info", &[("free", 192 * MIB), ("total", GIB)]);
    assert!(out.logs_starting("GPU 0 refused").is_empty(), "{out}");
}

/// Eight members allocating and freeing in loops (one thread each, 64 MiB at a time, up to
/// 2 GiB of demand against 1 GiB) while 50 of them are SIGKILLed at random moments and
/// restarted. The group never holds more than its limit; members that run to the end see
/// only successes and refusals; once all are gone a fresh member finds the whole quota.
#[test]
fn a_storm_of_kills_leaves_the_group_whole() {
    const MEMBERS: usize = 8;
    const KILLS: usize = 50;
    let g = Group::new("group-storm", "svc");
    let seed = 0x5eed_0000_0000_0001 ^ u64::from(std::process::id());
    let mut rng = Rng(seed);
    let start = Instant::now();
    let looping = "init threads:1:100000000:64M";
    let mut members: Vec<Running> = (0..MEMBERS)
        .map(|_| g.member(Some("1GiB"), looping).start())
        .collect();
    let mut kills = 0;
    while kills < KILLS {
        let i = rng.below(MEMBERS as u64) as usize;
        members[i].wait_for(|l| l.op == "init");
        std::thread::sleep(Duration::from_millis(rng.below(40)));
        members[i].kill();
        let restarted = g.member(Some("1GiB"), looping).start();
        let killed = std::mem::replace(&mut members[i], restarted).wait();
        assert!(!killed.timed_out, "{killed}");
        no_panic(&killed);
        kills += 1;
        let snap = g.snapshot();
        assert!(
            snap.devices
                .iter()
                .all(|d| d.in_use <= GIB && d.peak <= GIB),
            "the group went over its limit: {snap:?}"
        );
    }
    let storm_took = start.elapsed();
    for mut m in members {
        m.kill();
        m.wait();
    }
    let finish_start = Instant::now();
    // Members that run to their end, all at once: only successes and refusals, and they
    // free it all.
    let go = g.gate("finish");
    let finishing: Vec<Running> = (0..MEMBERS)
        .map(|_| {
            let ops = format!("init {} threads:1:1000:64M info", go.op());
            g.member(Some("1GiB"), &ops).start()
        })
        .collect();
    go.open();
    let mut allocations = 0;
    let mut refused = 0;
    for out in finishing.into_iter().map(Running::wait) {
        out.check_exit(0);
        no_panic(&out);
        let t = out.check(2, "threads", &[("other", 0)]);
        allocations += t.num("ok").unwrap();
        refused += t.num("oom").unwrap();
        assert_eq!(t.num("ok").unwrap() + t.num("oom").unwrap(), 1000, "{out}");
    }
    let snap = g.snapshot();
    eprintln!(
        "storm (seed {seed:#x}): {kills} SIGKILLs of {MEMBERS} looping members in {storm_took:?}; \
         then {MEMBERS} members ran to the end in {:?}: {allocations} allocations, {refused} \
         refused; group: peak {} of {}, {} refusals in all",
        finish_start.elapsed(),
        h(snap.devices[0].peak),
        h(snap.devices[0].limit),
        snap.devices[0].refusals
    );
    assert!(snap.devices[0].peak <= GIB, "{snap:?}");
    assert!(snap.devices[0].refusals > 0, "no contention: {snap:?}");

    let fresh = g.member(Some("1GiB"), "init info fill:64M").run();
    fresh.check_exit(0);
    fresh.check(1, "info", &[("rc", 0), ("free", GIB), ("total", GIB)]);
    fresh.check(2, "fill", &[("ok", 16), ("rc", OUT_OF_MEMORY)]);
    let after = g.set("1GiB");
    after.check_exit(0);
    assert!(
        after.stdout.contains(&format!(
            "{GPU0}: limit 1.00 GiB, in use 0 B, peak 1.00 GiB"
        )),
        "{after}"
    );
}

/// Liveness is not a PID: two members that are both PID 1 (each in a PID namespace of its
/// own), one after the other; the first is killed holding the whole quota, the second gets
/// all of it.
#[test]
fn a_dead_member_with_the_same_pid_is_still_reaped() {
    let g = Group::new("group-pidns", "svc");
    let client = Client::Dlsym.path();
    let in_namespace = |ops: &str| {
        Run::program("unshare")
            .args(&["--pid", "--fork", "--mount-proc"])
            .arg(client.to_str().unwrap())
            .ops(ops)
            .env("CUQUOTA_STATE_DIR", g.state_dir())
            .env("CUQUOTA_GROUP", g.name)
            .env("CUQUOTA_LIMIT", "1GiB")
            .timeout(PROCESS_TIMEOUT)
    };
    // Can this machine make PID namespaces at all? (unshare is util-linux's.)
    if let Err(e) = std::process::Command::new("unshare")
        .arg("--version")
        .output()
    {
        eprintln!("skipped: no unshare command ({e}): this test did NOT run");
        return;
    }
    let probe = Run::program("unshare")
        .no_preload()
        .args(&["--pid", "--fork", "--mount-proc", "true"])
        .timeout(PROCESS_TIMEOUT)
        .run_allowing_timeout();
    if !probe.status.success() {
        eprintln!(
            "skipped: PID namespaces are refused here (`unshare --pid --fork --mount-proc \
             true`: {}; {}): this test did NOT run",
            probe.status,
            probe.stderr.join(" / ")
        );
        return;
    }

    let mut first = in_namespace("init alloc:1G sleep:60000").start();
    first.wait_for(|l| l.op == "alloc" && l.num("rc") == Some(0));
    // unshare forked the member: kill it (not unshare, which would only pass it on) from
    // here, outside its namespace, where SIGKILL reaches a namespace's PID 1.
    let outer = first.pid();
    let children = fs::read_to_string(format!("/proc/{outer}/task/{outer}/children")).unwrap();
    let member: i32 = children
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("unshare {outer} should have one child, has {children:?}"));
    // SAFETY: kill has no memory-safety preconditions; the pid is our grandchild.
    assert_eq!(unsafe { libc::kill(member, libc::SIGKILL) }, 0);
    let first = first.wait();
    assert!(!first.timed_out, "{first}");
    let file = GroupFile::open(&g.dir, g.name).unwrap();
    let unreaped: Vec<u64> = (file.layout().slots.iter())
        .filter(|s| s.is_member())
        .map(|s| s.pid.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    assert_eq!(unreaped, [1], "the dead member was PID 1, not reaped yet");
    assert_eq!(
        g.snapshot().members,
        [0u64; 0],
        "dead, it is no member to a view"
    );

    let second = in_namespace("init fill:64M").run();
    assert!(second.status.success(), "{second}");
    second.check(1, "fill", &[("ok", 16), ("rc", OUT_OF_MEMORY)]);
    assert!(
        second
            .stderr
            .iter()
            .any(|l| l.starts_with("cuquota[1]: GPU 0 summary: peak 1.00 GiB")),
        "the second member is PID 1 too:\n{second}"
    );
}

/// A forked child that allocates and exits without freeing is a member of its own: its
/// charges go back when it is gone, its parent's stay. The same for a child that execs.
#[test]
fn a_forked_or_execd_child_gives_its_charges_back_when_it_ends() {
    for fork in ["fork", "forkexec"] {
        let g = Group::new("group-fork", "svc");
        let child_ops = if fork == "fork" {
            "alloc:512M info"
        } else {
            "init alloc:512M info"
        };
        let n = child_ops.split_whitespace().count();
        let out = g
            .member(
                Some("1GiB"),
                &format!("init alloc:256M {fork}:{n} {child_ops} info alloc:768M alloc:1 info"),
            )
            .run();
        out.check_exit(0);
        no_panic(&out);
        // The child's lines come first: the parent waits for it.
        let c = if fork == "fork" { 2 } else { 3 };
        out.check(c, "alloc", &[("rc", 0)]);
        out.check(c + 1, "info", &[("free", 256 * MIB), ("total", GIB)]);
        let f = out.op(c + 2, fork);
        assert_eq!(f.num("status"), Some(0), "{out}");
        let child = f.num("pid").unwrap();
        // The parent: the child's 512 MiB are back, its own 256 MiB are not.
        out.check(c + 3, "info", &[("free", 768 * MIB), ("total", GIB)]);
        out.check(c + 4, "alloc", &[("rc", 0)]);
        out.check(c + 5, "alloc", &[("rc", OUT_OF_MEMORY)]);
        out.check(c + 6, "info", &[("free", 0), ("total", GIB)]);
        let child_summary = format!(
            "cuquota[{child}]: GPU 0 summary: peak 512.00 MiB (536870912 bytes) of quota \
             1.00 GiB, 1 allocation, 0 refusals, 1 live at exit (512.00 MiB); group svc: \
             peak 768.00 MiB of all its members"
        );
        assert_eq!(
            out.stderr.iter().filter(|l| **l == child_summary).count(),
            1,
            "{out}"
        );
        out.check_log(
            "GPU 0 summary: peak 1.00 GiB (1073741824 bytes) of quota 1.00 GiB, \
             2 allocations, 1 refusal, 2 live at exit (1.00 GiB); group svc: peak 1.00 GiB \
             of all its members",
        );
    }
}

// ---------------------------------------------------------------------------------------
// Found by these tests (each ignored with its reason until the implementation is fixed)
// ---------------------------------------------------------------------------------------

/// SIGKILL for a process outside the harness's (an orphan), when dropped.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// The one child of `pid`, once it has one (at most 10 s).
fn only_child(pid: u32) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children =
            fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Ok(child) = children.trim().parse() {
            return child;
        }
        assert!(
            Instant::now() < deadline,
            "{pid} has no child: {children:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A member killed while a child it forked lives on (one that never uses CUDA, and one that
/// does): the child is not the parent's member, so the parent's charges must go back at
/// once. The child closes its copy of the group file's descriptor, but keeps the parent's
/// shared mapping of it, and a mapping holds the open file description (and so the
/// parent's slot lock) as long as it exists: the dead parent's 768 MiB stay charged until
/// the child ends.
#[test]
fn a_dead_members_forked_child_does_not_keep_its_charges() {
    for child_ops in ["sleep:60000", "alloc:64M sleep:60000"] {
        let g = Group::new("group-orphan", "svc");
        let n = child_ops.split_whitespace().count();
        let mut parent = g
            .member(
                Some("1GiB"),
                &format!("init alloc:768M fork:{n} {child_ops}"),
            )
            .start();
        parent.wait_for(|l| l.op == "alloc" && l.num("slot") == Some(0));
        let child = KillOnDrop(only_child(parent.pid()));
        if child_ops.starts_with("alloc") {
            parent.wait_for(|l| l.op == "alloc" && l.num("slot") == Some(1));
        }
        parent.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !parent.has_ended() {
            assert!(
                Instant::now() < deadline,
                "SIGKILL did not end {}",
                parent.pid()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // The child lives on (and holds the parent's stdout: read it after the child ends).
        let out = g.member(Some("1GiB"), "init alloc:768M").run();
        drop(child);
        parent.wait();
        out.check_exit(0);
        out.check(1, "alloc", &[("rc", 0)]);
    }
}

/// A group tracks 16 GPUs. With all 16 entries taken (here by `cuquota set` naming 16 GPUs
/// that are not this machine's), a member on a GPU of its own cannot be bounded: from the
/// GPU's first use on, every call fails (rc 1, with the one line) — cuMemGetInfo too, never
/// the whole GPU's figures.
#[test]
fn a_group_with_no_room_for_a_gpu_fails_every_call() {
    let g = Group::new("group-gpus", "svc");
    let spec: Vec<String> = (0..16)
        .map(|i| format!("GPU-00000000-0000-0000-0000-0000000000{i:02}:1GiB"))
        .collect();
    g.set(&spec.join(",")).check_exit(0);
    let out = g.member(Some("1GiB"), "init alloc:1M info").run();
    out.check_exit(0);
    out.check_log(
        "CUQUOTA_GROUP=svc: its quota cannot be used (group svc already tracks 16 GPUs). \
         CUDA calls fail with CUDA_ERROR_INVALID_VALUE until it is fixed",
    );
    // cuInit comes before any GPU is used (and so before it can be found not to fit);
    // from the first use of the GPU on, every call fails.
    out.check_rcs(&[0, INVALID_VALUE, INVALID_VALUE]);
}
