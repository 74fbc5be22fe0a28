//! Process groups (`CUQUOTA_GROUP`): processes with the same group name and state directory
//! share one quota per GPU, matched by UUID. Real client processes race for one quota, see
//! each other in cuMemGetInfo, die (SIGKILL, exit with memory held, forked and exec'd
//! children, PID 1 of two PID namespaces) and leave their charges behind for the others to
//! reap; `cuquota set` moves the limit under them; bad names, unusable state and a full
//! table fail every call with a clear line. Every process runs under a timeout and every
//! group lives in a temporary state directory of its own, removed at the end.

use crate::common::*;
use crate::reliability_util::*;
use cuquota_format::group::{GroupFile, FILE_SIZE, SLOTS};
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long any one process of these tests may run.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(30);
/// The shim's first and second simulated GPU (CUDA_SHIM_DEVICES=2).
const GPU0: &str = "GPU-63757175-6f74-412d-b368-696d00000000";
const GPU1: &str = "GPU-63757175-6f74-412d-b368-696d00000001";

/// A group's state directory (a scratch dir, removed when dropped) and its name.
struct Group {
    dir: PathBuf,
    name: &'static str,
}

impl Group {
    fn new(tag: &str, name: &'static str) -> Group {
        Group {
            dir: scratch_dir(tag),
            name,
        }
    }

    fn state_dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// A member (the dlsym client) running `ops`, with `limit` as CUQUOTA_LIMIT if given.
    fn member(&self, limit: Option<&str>, ops: &str) -> Run {
        let run = Run::client(Client::Dlsym)
            .ops(ops)
            .env("CUQUOTA_STATE_DIR", self.state_dir())
            .env("CUQUOTA_GROUP", self.name)
            .timeout(PROCESS_TIMEOUT);
        match limit {
            Some(l) => run.env("CUQUOTA_LIMIT", l),
            None => run,
        }
    }

    /// `cuquota set NAME --limit SPEC --state-dir DIR`.
    fn set(&self, spec: &str) -> Output {
        Run::program(&artifacts().cli)
            .no_preload()
            .args(&[
                "set",
                self.name,
                "--limit",
                spec,
                "--state-dir",
                self.state_dir(),
            ])
            .timeout(PROCESS_TIMEOUT)
            .run()
    }

    /// A gate file: a member's `waitgone:PATH` op waits until the test removes it.
    fn gate(&self, name: &str) -> Gate {
        let path = self.dir.join(format!("gate-{name}"));
        fs::write(&path, b"").unwrap();
        Gate(path)
    }

    /// The group's figures, read from its file (opened as `cuquota set` does).
    fn snapshot(&self) -> cuquota_format::group::Snapshot {
        GroupFile::open(&self.dir, self.name)
            .unwrap_or_else(|e| panic!("open group {}: {e}", self.name))
            .snapshot()
    }

    fn file(&self) -> PathBuf {
        self.dir.join("groups").join(self.name)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A file that members wait on (`waitgone:PATH`); [`Gate::open`] removes it.
struct Gate(PathBuf);

impl Gate {
    fn op(&self) -> String {
        format!("waitgone:{}", self.0.display())
    }

    fn open(&self) {
        fs::remove_file(&self.0).unwrap();
    }
}

trait RunArgs {
    fn args(self, args: &[&str]) -> Self;
}

impl RunArgs for Run {
    fn args(mut self, args: &[&str]) -> Run {
        for a in args {
            self = self.arg(a);
        }
        self
    }
}

/// The line a refusal of `bytes` via cuMemAlloc_v2 on GPU 0 writes in a group.
fn refusal(bytes: u64, group_state: &str) -> String {
    format!(
        "GPU 0 refused {} ({bytes} bytes) via cuMemAlloc_v2: group {group_state}",
        h(bytes)
    )
}

/// A small deterministic generator (xorshift64*), so that a failing storm can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------------------------------
// Sharing one quota
// ---------------------------------------------------------------------------------------

/// Four processes filling a 1 GiB group quota in 64 MiB chunks at the same moment get 16
/// chunks in all, however the race goes (five times); each process's driver holds exactly
/// what it was given. Afterwards (all of them dead with their memory held) one process alone
/// gets all 16. 64 MiB chunks are few enough that one racer often takes them all, so two
/// more rounds race in 1 MiB chunks (1024 in all), where the racers interleave.
#[test]
fn racing_members_fill_the_group_quota_exactly() {
    const RACERS: usize = 4;
    let rounds = [(64 * MIB, "64M"); 5].into_iter().chain([(MIB, "1M"); 2]);
    for (round, (chunk, size)) in rounds.enumerate() {
        let chunks = GIB / chunk;
        let g = Group::new("group-race", "svc");
        let go = g.gate("go");
        let done = g.gate("done");
        let ops = format!("init {} fill:{size} shimstats:0 {}", go.op(), done.op());
        let mut racers: Vec<Running> = (0..RACERS)
            .map(|_| g.member(Some("1GiB"), &ops).start())
            .collect();
        for r in &mut racers {
            r.wait_for(|l| l.op == "init");
        }
        go.open();
        // Each holds what it got until every one has filled: nobody's exit frees anything
        // while the others still ask.
        for r in &mut racers {
            r.wait_for(|l| l.op == "shimstats");
        }
        done.open();
        let outs: Vec<Output> = racers.into_iter().map(Running::wait).collect();
        let mut total = 0;
        for out in &outs {
            out.check_exit(0);
            no_panic(out);
            let ok = out.value(2, "fill", "ok");
            out.check(2, "fill", &[("rc", OUT_OF_MEMORY)]);
            out.check(3, "shimstats", &[("rc", 0), ("in_use", ok * chunk)]);
            total += ok;
        }
        let shares: Vec<u64> = outs.iter().map(|o| o.value(2, "fill", "ok")).collect();
        assert_eq!(total, chunks, "round {round}: chunks {shares:?}");
        eprintln!("race round {round}: {size} chunks per process {shares:?}");
        let snap = g.snapshot();
        assert_eq!(snap.devices.len(), 1);
        assert_eq!(snap.devices[0].peak, GIB, "round {round}");
        assert_eq!(snap.devices[0].refusals, RACERS as u64, "round {round}");

        let alone = g.member(Some("1GiB"), &format!("init fill:{size}")).run();
        alone.check_exit(0);
        alone.check(1, "fill", &[("ok", chunks), ("rc", OUT_OF_MEMORY)]);
        alone.check_log(&format!(
            "{}: quota 1.00 GiB, this process 1.00 GiB, no other member holds any, 0 B left",
            refusal(chunk, "svc")
        ));
    }
}

/// cuMemGetInfo in a group: total is the group's limit, free what the group has left; the
/// refusal names the other member and its bytes; the summary ends with the group's peak.
#[test]
fn a_member_sees_another_members_memory() {
    let g = Group::new("group-info", "svc");
    let hold = g.gate("hold");
    let mut holder = g
        .member(Some("1GiB"), &format!("init alloc:768M info {}", hold.op()))
        .start();
    holder.wait_for(|l| l.op == "info");
    let other = g
        .member(Some("1GiB"), "init info alloc:512M alloc:256M info")
        .run();
    hold.open();
    let holder = holder.wait();
    holder.check_exit(0);
    holder.check(2, "info", &[("rc", 0), ("free", 256 * MIB), ("total", GIB)]);

    other.check_exit(0);
    other.check(1, "info", &[("rc", 0), ("free", 256 * MIB), ("total", GIB)]);
    other.check(2, "alloc", &[("rc", OUT_OF_MEMORY)]);
    other.check(3, "alloc", &[("rc", 0)]);
    other.check(4, "info", &[("rc", 0), ("free", 0), ("total", GIB)]);
    other.check_log(&format!(
        "{}: quota 1.00 GiB, this process 0 B, 1 other member 768.00 MiB, 256.00 MiB left",
        refusal(512 * MIB, "svc")
    ));
    other.check_log(
        "GPU 0 summary: peak 256.00 MiB (268435456 bytes) of quota 1.00 GiB, 1 allocation, \
         1 refusal, 1 live at exit (256.00 MiB); group svc: peak 1.00 GiB of all its members",
    );
    holder.check_log(
        "GPU 0 summary: peak 768.00 MiB (805306368 bytes) of quota 1.00 GiB, 1 allocation, \
         0 refusals, 1 live at exit (768.00 MiB); group svc: peak 1.00 GiB of all its members",
    );
}

/// A group is its name and its state directory: the same name under another directory
/// is another group, and a process outside any group is bounded by its own limit only.
#[test]
fn the_same_name_in_another_state_dir_is_another_group() {
    let g = Group::new("group-dir-a", "svc");
    let other = Group::new("group-dir-b", "svc");
    let hold = g.gate("hold");
    let mut holder = g
        .member(Some("1GiB"), &format!("init alloc:768M {}", hold.op()))
        .start();
    holder.wait_for(|l| l.op == "alloc");
    let elsewhere = other.member(Some("1GiB"), "init info alloc:1G").run();
    let alone = Run::client(Client::Dlsym)
        .ops("init info alloc:1G")
        .env("CUQUOTA_LIMIT", "1GiB")
        .timeout(PROCESS_TIMEOUT)
        .run();
    hold.open();
    holder.wait().check_exit(0);
    for out in [&elsewhere, &alone] {
        out.check_exit(0);
        out.check(1, "info", &[("free", GIB), ("total", GIB)]);
        out.check(2, "alloc", &[("rc", 0)]);
    }
}

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
            snap.devices.iter().all(|d| d.held <= GIB && d.peak <= GIB),
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
            "{GPU0}: limit 1.00 GiB, in use 1.00 GiB, peak 1.00 GiB"
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
    assert_eq!(g.snapshot().members, [1], "the dead member was PID 1");

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
// Limits
// ---------------------------------------------------------------------------------------

/// The first member's limit is the group's; a later one with another limit is told once
/// and held to the group's; one with no limit takes it silently.
#[test]
fn the_groups_limit_applies_to_every_member() {
    let g = Group::new("group-limit", "m");
    let first = g.member(Some("1GiB"), "init alloc:1M").run();
    first.check_exit(0);
    assert_eq!(first.logs_starting("GPU 0:"), Vec::<&str>::new(), "{first}");

    let bigger = g
        .member(Some("2GiB"), "init info alloc:1G alloc:1 info")
        .run();
    bigger.check_exit(0);
    bigger.check_rcs(&[0, 0, 0, OUT_OF_MEMORY, 0]);
    bigger.check(1, "info", &[("free", GIB), ("total", GIB)]);
    bigger.check_log(
        "GPU 0: this process's limit 2.00 GiB (2147483648 bytes) differs from group m's \
         1.00 GiB (1073741824 bytes); the group's applies (`cuquota set m --limit …` changes it)",
    );
    assert_eq!(bigger.logs_starting("GPU 0: this process's").len(), 1);

    let none = g.member(None, "init info alloc:1G alloc:1").run();
    none.check_exit(0);
    none.check_rcs(&[0, 0, 0, OUT_OF_MEMORY]);
    none.check(1, "info", &[("free", GIB), ("total", GIB)]);
    assert!(
        none.logs_starting("GPU 0: this process's").is_empty(),
        "{none}"
    );
    none.check_log(
        "GPU 0 summary: peak 1.00 GiB (1073741824 bytes) of quota 1.00 GiB, 1 allocation, \
         1 refusal, 1 live at exit (1.00 GiB); group m: peak 1.00 GiB of all its members",
    );

    let same = g.member(Some("1GiB"), "init info").run();
    same.check_exit(0);
    assert!(
        same.logs_starting("GPU 0: this process's").is_empty(),
        "{same}"
    );
}

/// `cuquota set` lowers the limit below what the members hold (nothing is taken away, the
/// next request is refused and says so), then raises it (requests fit again); on a group
/// that does not exist yet it creates it, and a member with no limit of its own takes it.
#[test]
fn cuquota_set_moves_the_limit_under_running_members() {
    let g = Group::new("group-set", "svc");
    let (g1, g2, g3) = (g.gate("1"), g.gate("2"), g.gate("3"));
    let mut m = g
        .member(
            Some("1GiB"),
            &format!(
                "init alloc:768M {} alloc:64M info shimstats:0 {} alloc:64M info {}",
                g1.op(),
                g2.op(),
                g3.op()
            ),
        )
        .start();
    m.wait_for(|l| l.op == "alloc");

    let lowered = g.set("512MiB");
    lowered.check_exit(0);
    assert_eq!(
        lowered.stdout,
        format!(
            "group svc ({}): 1 member; GPUs joining from now on get 512.00 MiB\n  {GPU0}: \
             limit 512.00 MiB (below what is held: new requests are refused until it is \
             freed), in use 768.00 MiB, peak 768.00 MiB, 0 refusals\n",
            g.file().display()
        )
    );
    g1.open();
    m.wait_for(|l| l.op == "shimstats");
    let raised = g.set("2GiB");
    raised.check_exit(0);
    assert!(
        raised.stdout.contains(&format!(
            "{GPU0}: limit 2.00 GiB, in use 768.00 MiB, peak 768.00 MiB, 1 refusal"
        )),
        "{raised}"
    );
    g2.open();
    m.wait_for(|l| l.op == "info" && l.num("total") == Some(2 * GIB));
    g3.open();
    let out = m.wait();
    out.check_exit(0);
    no_panic(&out);
    // Lowered: refused, and nothing taken away (the driver still has the 768 MiB).
    out.check(3, "alloc", &[("rc", OUT_OF_MEMORY)]);
    out.check(4, "info", &[("rc", 0), ("free", 0), ("total", 512 * MIB)]);
    out.check(
        5,
        "shimstats",
        &[("rc", 0), ("in_use", 768 * MIB), ("live", 1)],
    );
    out.check_log(&format!(
        "{}: quota 512.00 MiB (lowered below what its members hold), this process 768.00 MiB, \
         no other member holds any, 0 B left",
        refusal(64 * MIB, "svc")
    ));
    // Raised: it fits again.
    out.check(7, "alloc", &[("rc", 0)]);
    out.check(
        8,
        "info",
        &[("free", 2 * GIB - 832 * MIB), ("total", 2 * GIB)],
    );

    // A group made ahead of its members.
    let ahead = Group::new("group-set-ahead", "pre");
    let made = ahead.set("1536MiB");
    made.check_exit(0);
    assert_eq!(
        made.stdout,
        format!(
            "group pre ({}): 0 members; GPUs joining from now on get 1.50 GiB\n",
            ahead.file().display()
        )
    );
    let member = ahead.member(None, "init info fill:64M").run();
    member.check_exit(0);
    member.check(1, "info", &[("free", 1536 * MIB), ("total", 1536 * MIB)]);
    member.check(2, "fill", &[("ok", 24), ("rc", OUT_OF_MEMORY)]);
    // One GPU by UUID.
    let one = ahead.set(&format!("{GPU0}:512MiB"));
    one.check_exit(0);
    assert!(
        one.stdout
            .contains(&format!("{GPU0}: limit 512.00 MiB (below what is held")),
        "{one}"
    );
}

#[test]
fn cuquota_set_refuses_percentages_ordinals_and_nonsense() {
    let g = Group::new("group-set-bad", "svc");
    for (spec, says) in [
        (
            "50%",
            "cuquota: --limit 50%: a group's limit is a size (its GPUs may differ): give one \
             size, or GPU-<uuid>:SIZE for each GPU",
        ),
        (
            "0:1GiB",
            "cuquota: --limit 0:1GiB: GPU 0 is an ordinal, which means something only inside \
             a process: name the GPU by its UUID (GPU-…, as nvidia-smi -L prints it)",
        ),
        ("lots", "cuquota: --limit lots: "),
    ] {
        let out = g.set(spec);
        assert_eq!(out.status.code(), Some(1), "{out}");
        assert!(out.stdout.is_empty(), "{out}");
        assert_eq!(out.stderr.len(), 1, "{out}");
        assert!(out.stderr[0].starts_with(says), "{out}");
    }
    // A bad name is refused before anything is made.
    let out = Run::program(&artifacts().cli)
        .no_preload()
        .args(&[
            "set",
            "a/b",
            "--limit",
            "1GiB",
            "--state-dir",
            g.state_dir(),
        ])
        .timeout(PROCESS_TIMEOUT)
        .run();
    assert_eq!(out.status.code(), Some(1), "{out}");
    assert!(
        out.stderr[0].contains("a group name is 1 to 64 characters"),
        "{out}"
    );
    assert!(!g.dir.join("groups").exists());
}

/// Two GPUs, renumbered by CUDA_VISIBLE_DEVICES: the group matches them by UUID, so a
/// member that sees GPU 1 as its GPU 0 shares GPU 1's quota with a member using ordinal 1,
/// and GPU 0's quota is untouched.
#[test]
fn members_share_a_gpu_by_uuid_whatever_its_ordinal() {
    let g = Group::new("group-uuid", "svc");
    let hold = g.gate("hold");
    let mut a = g
        .member(
            Some("1GiB"),
            &format!("init uuid:0 alloc:768M {}", hold.op()),
        )
        .env("CUDA_SHIM_DEVICES", "2")
        .env("CUDA_VISIBLE_DEVICES", "1")
        .start();
    let uuid = a.wait_for(|l| l.op == "uuid");
    assert_eq!(uuid.get("uuid"), Some(GPU1));
    a.wait_for(|l| l.op == "alloc" && l.num("rc") == Some(0));
    let b = g
        .member(
            Some("1GiB"),
            "init uuid:1 dev:1 info alloc:512M alloc:256M dev:0 info alloc:1G",
        )
        .env("CUDA_SHIM_DEVICES", "2")
        .run();
    hold.open();
    let a = a.wait();
    a.check_exit(0);
    b.check_exit(0);
    no_panic(&b);
    assert_eq!(b.op(1, "uuid").get("uuid"), Some(GPU1));
    b.check(3, "info", &[("free", 256 * MIB), ("total", GIB)]);
    b.check(4, "alloc", &[("rc", OUT_OF_MEMORY)]);
    b.check(5, "alloc", &[("rc", 0)]);
    b.check(7, "info", &[("free", GIB), ("total", GIB)]);
    b.check(8, "alloc", &[("rc", 0)]);
    // B's refusal was on its GPU 1, against A's 768 MiB there.
    let lines = b.logs_starting("GPU 1 refused 512.00 MiB");
    assert_eq!(
        lines,
        [format!(
            "{}GPU 1 refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: group svc: quota \
             1.00 GiB, this process 0 B, 1 other member 768.00 MiB, 256.00 MiB left",
            b.prefix()
        )],
        "{b}"
    );
    let snap = g.snapshot();
    let by_uuid = |u: &str| {
        snap.devices
            .iter()
            .find(|d| cuquota_format::settings::format_uuid(&d.uuid) == u)
            .unwrap_or_else(|| panic!("no entry for {u}: {snap:?}"))
    };
    assert_eq!(by_uuid(GPU1).peak, GIB);
    assert_eq!(by_uuid(GPU0).peak, GIB);
    assert_eq!(by_uuid(GPU1).refusals, 1);
    assert_eq!(by_uuid(GPU0).refusals, 0);
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// A bad group name is a configuration error: one line naming CUQUOTA_GROUP, and every
/// hooked call fails with CUDA_ERROR_INVALID_VALUE. An empty one means no group.
#[test]
fn a_bad_group_name_fails_every_call() {
    let dir = scratch_dir("group-names");
    let long = "x".repeat(65);
    for (name, why) in [
        (
            "a/b",
            "a group name is 1 to 64 characters of A-Z a-z 0-9 . _ - (got \"a/b\")".to_string(),
        ),
        ("..", "\"..\" is not a group name".to_string()),
        (".", "\".\" is not a group name".to_string()),
        (
            long.as_str(),
            format!("a group name is 1 to 64 characters of A-Z a-z 0-9 . _ - (got \"{long}\")"),
        ),
    ] {
        let out = Run::client(Client::Dlsym)
            .ops("init alloc:1M info")
            .env("CUQUOTA_STATE_DIR", dir.to_str().unwrap())
            .env("CUQUOTA_GROUP", name)
            .env("CUQUOTA_LIMIT", "1GiB")
            .timeout(PROCESS_TIMEOUT)
            .run();
        out.check_exit(0);
        out.check_rcs(&[INVALID_VALUE, INVALID_VALUE, INVALID_VALUE]);
        out.check_log(&format!(
            "CUQUOTA_GROUP=\"{name}\" is not valid: {why}. CUDA calls fail with \
             CUDA_ERROR_INVALID_VALUE until it is fixed"
        ));
        assert_eq!(out.cuquota_lines().len(), 1, "{out}");
    }
    // 64 characters is a name.
    let longest = "y".repeat(64);
    let out = Run::client(Client::Dlsym)
        .ops("init alloc:1M")
        .env("CUQUOTA_STATE_DIR", dir.to_str().unwrap())
        .env("CUQUOTA_GROUP", &longest)
        .env("CUQUOTA_LIMIT", "1GiB")
        .timeout(PROCESS_TIMEOUT)
        .run();
    out.check_rcs(&[0, 0]);
    assert!(dir.join("groups").join(&longest).is_file());
    fs::remove_dir_all(dir.join("groups")).unwrap();

    // Empty: no group at all.
    let out = Run::client(Client::Dlsym)
        .ops("init alloc:1M info")
        .env("CUQUOTA_STATE_DIR", dir.to_str().unwrap())
        .env("CUQUOTA_GROUP", "")
        .env("CUQUOTA_LIMIT", "1GiB")
        .timeout(PROCESS_TIMEOUT)
        .run();
    out.check_rcs(&[0, 0, 0]);
    out.check_log(
        "GPU 0 summary: peak 1.00 MiB (1048576 bytes) of quota 1.00 GiB, 1 allocation, \
         0 refusals, 1 live at exit (1.00 MiB)",
    );
    assert!(!dir.join("groups").exists());
    fs::remove_dir_all(&dir).unwrap();
}

/// A member that finds its group's file unusable says why in one line, and every call
/// fails; the file is left as it was.
fn check_unusable(g: &Group, why: &str) {
    let before = fs::read(g.file()).ok();
    let out = g.member(Some("1GiB"), "init alloc:1M info").run();
    out.check_exit(0);
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE, INVALID_VALUE]);
    out.check_log(&format!(
        "CUQUOTA_GROUP={}: its quota cannot be used ({why}). CUDA calls fail with \
         CUDA_ERROR_INVALID_VALUE until it is fixed",
        g.name
    ));
    assert_eq!(out.cuquota_lines().len(), 1, "{out}");
    assert_eq!(fs::read(g.file()).ok(), before, "the file was changed");
}

#[test]
fn a_corrupt_or_foreign_state_file_fails_every_call() {
    // A real group file cut to 100 bytes.
    let g = Group::new("group-corrupt", "svc");
    g.member(Some("1GiB"), "init alloc:1M").run().check_exit(0);
    let file = g.file();
    assert_eq!(fs::metadata(&file).unwrap().len(), FILE_SIZE as u64);
    fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(100)
        .unwrap();
    check_unusable(
        &g,
        &format!(
            "{}: 100 bytes, not a cuquota group of layout 1 ({FILE_SIZE} bytes)",
            file.display()
        ),
    );

    // Random bytes of the right size.
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let noise: Vec<u8> = (0..FILE_SIZE).map(|_| rng.next() as u8).collect();
    assert_ne!(noise[..8], [0; 8]);
    fs::write(&file, &noise).unwrap();
    check_unusable(&g, &format!("{}: not a cuquota group file", file.display()));

    // A group file of another layout.
    let mut other = vec![0u8; FILE_SIZE];
    other[..8].copy_from_slice(b"CUQGROUP");
    other[8..16].copy_from_slice(&2u64.to_le_bytes());
    other[16..24].copy_from_slice(&(FILE_SIZE as u64).to_le_bytes());
    fs::write(&file, &other).unwrap();
    check_unusable(
        &g,
        &format!(
            "{}: a cuquota group of layout 2; this cuquota reads layout 1",
            file.display()
        ),
    );

    // Not a regular file.
    fs::remove_file(&file).unwrap();
    fs::create_dir(&file).unwrap();
    let out = g.member(Some("1GiB"), "init alloc:1M").run();
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE]);
    assert_eq!(
        out.logs_starting("CUQUOTA_GROUP=svc: its quota cannot be used (")
            .len(),
        1,
        "{out}"
    );
}

#[test]
fn a_state_dir_that_cannot_be_made_fails_every_call() {
    let g = Group::new("group-dir", "svc");
    let plain = g.dir.join("plain");
    fs::write(&plain, b"a regular file").unwrap();
    let under = plain.join("state");
    let out = Run::client(Client::Dlsym)
        .ops("init alloc:1M info")
        .env("CUQUOTA_STATE_DIR", under.to_str().unwrap())
        .env("CUQUOTA_GROUP", "svc")
        .env("CUQUOTA_LIMIT", "1GiB")
        .timeout(PROCESS_TIMEOUT)
        .run();
    out.check_exit(0);
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE, INVALID_VALUE]);
    out.check_log(&format!(
        "CUQUOTA_GROUP=svc: its quota cannot be used (cannot create {}: Not a directory (os \
         error 20)). CUDA calls fail with CUDA_ERROR_INVALID_VALUE until it is fixed",
        under.display()
    ));
}

/// 256 members alive at once fill the table (taken here by 256 opens of the group's file,
/// each an open file description with its own slot lock); a newcomer is told the group is
/// full and every call fails. One slot given back, a newcomer joins.
#[test]
fn a_full_table_turns_newcomers_away() {
    let g = Group::new("group-full", "svc");
    let mut held: Vec<GroupFile> = (0..SLOTS)
        .map(|i| {
            let file = GroupFile::open(&g.dir, g.name).unwrap();
            let slot = {
                let locked = file.lock().unwrap();
                file.claim_slot(&locked).unwrap()
            };
            assert_eq!(slot, i);
            file
        })
        .collect();
    assert_eq!(g.snapshot().members.len(), SLOTS);
    check_unusable(
        &g,
        &format!("group svc is full: {SLOTS} members at once, all alive"),
    );
    held.pop();
    let out = g.member(Some("1GiB"), "init alloc:1M info").run();
    out.check_exit(0);
    out.check_rcs(&[0, 0, 0]);
    out.check(2, "info", &[("free", GIB - MIB), ("total", GIB)]);
}

// ---------------------------------------------------------------------------------------
// Trace
// ---------------------------------------------------------------------------------------

#[test]
fn the_trace_header_names_the_group() {
    let g = Group::new("group-trace", "svc");
    let path = g.dir.join("t.jsonl");
    let out = g
        .member(Some("1GiB"), "init alloc:1M")
        .env("CUQUOTA_TRACE", path.to_str().unwrap())
        .run();
    out.check_exit(0);
    let t = read_trace(&path, false);
    assert_eq!(t.header["group"], "svc", "{}", t.header);

    let alone = g.dir.join("alone.jsonl");
    let out = Run::client(Client::Dlsym)
        .ops("init alloc:1M")
        .env("CUQUOTA_LIMIT", "1GiB")
        .env("CUQUOTA_TRACE", alone.to_str().unwrap())
        .timeout(PROCESS_TIMEOUT)
        .run();
    out.check_exit(0);
    let t = read_trace(&alone, false);
    assert!(
        t.header.get("group").is_none_or(|v| v.is_null()),
        "{}",
        t.header
    );
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
#[ignore = "bug: a forked child's inherited mapping of the group file keeps its dead parent's slot lock (charges not reaped until the child ends)"]
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
/// that are not this machine's), a member on a GPU of its own cannot be bounded: every
/// call must fail. Allocations do (rc 1, with the one line), but cuInit succeeds and
/// cuMemGetInfo answers rc 0 with the whole GPU's figures (free 8 GiB of 8 GiB).
#[test]
#[ignore = "bug: with the group's 16 GPU entries taken, cuInit and cuMemGetInfo succeed (whole-GPU figures) while allocations fail with rc 1"]
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
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE, INVALID_VALUE]);
}
