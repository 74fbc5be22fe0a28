//! Process groups (`CUQUOTA_GROUP`): processes with the same group name and state directory
//! share one quota per GPU, matched by UUID. Real client processes race for one quota, see
//! each other in cuMemGetInfo, die (SIGKILL, exit with memory held, forked and exec'd
//! children, PID 1 of two PID namespaces) and leave their charges behind for the others to
//! reap; `cuquota set` moves the limit under them; bad names, unusable state and a full
//! table fail every call with a clear line. Every process runs under a timeout and every
//! group lives in a temporary state directory of its own, removed at the end.

use crate::common::*;
use crate::reliability_util::*;
use cuquota_state::group::{GroupFile, FILE_SIZE, SLOTS};
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

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
    fn snapshot(&self) -> cuquota_state::group::GroupSnapshot {
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
    let holder_ops = format!("init alloc:768M info {}", hold.op());
    let mut holder = g.member(Some("1GiB"), &holder_ops).start();
    holder.wait_for(|l| l.op == "info");
    let trace = g.dir.join("other.jsonl");
    let other = g
        .member(Some("1GiB"), "init info alloc:512M alloc:256M info")
        .env("CUQUOTA_TRACE", trace.to_str().unwrap())
        .run();
    hold.open();
    let holder_pid = holder.pid();
    let holder = holder.wait();
    holder.check_exit(0);
    holder.check(2, "info", &[("rc", 0), ("free", 256 * MIB), ("total", GIB)]);

    other.check_exit(0);
    other.check(1, "info", &[("rc", 0), ("free", 256 * MIB), ("total", GIB)]);
    other.check(2, "alloc", &[("rc", OUT_OF_MEMORY)]);
    other.check(3, "alloc", &[("rc", 0)]);
    other.check(4, "info", &[("rc", 0), ("free", 0), ("total", GIB)]);
    // The refusal names who holds the group's quota: the other member's pid and command.
    let command = cuquota_format::holder::short_command(&format!(
        "{} {holder_ops}",
        Client::Dlsym.path().display()
    ));
    other.check_log(&format!(
        "{}: quota 1.00 GiB, this process 0 B, 1 other member 768.00 MiB, 256.00 MiB left; \
         held by pid {holder_pid} ({command}) 768.00 MiB",
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
    // The trace's refusal: this process's figure as `in_use`, the group's beside it, and
    // the holder.
    let text = fs::read_to_string(&trace).unwrap();
    let refused: serde_json::Value = (text.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["type"] == "refused")
        .unwrap_or_else(|| panic!("no refusal in\n{text}"));
    assert_eq!(
        (
            refused["in_use"].as_u64(),
            refused["group"].as_str(),
            refused["group_in_use"].as_u64(),
            refused["group_limit"].as_u64(),
        ),
        (Some(0), Some("svc"), Some(768 * MIB), Some(GIB)),
        "{refused}"
    );
    let holders = refused["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{refused}");
    assert_eq!(
        (
            holders[0]["pid"].as_u64(),
            holders[0]["command"].as_str(),
            holders[0]["in_use"].as_u64()
        ),
        (
            Some(holder_pid.into()),
            Some(command.as_str()),
            Some(768 * MIB)
        ),
        "{refused}"
    );
    // The report answers the refusal: who held it, and what would have made it fit.
    let report = Run::program(&artifacts().cli)
        .no_preload()
        .args(&["report", trace.to_str().unwrap()])
        .run();
    report.check_exit(0);
    for want in [
        "held then: this process 0 B; group svc 768.00 MiB of 1.00 GiB".to_string(),
        format!("pid {holder_pid} ({command}) 768.00 MiB"),
        format!(
            "to fit 512.00 MiB: 256.00 MiB more had to be free; it would have fit with memory \
             given back by other members (pid {holder_pid} holds 768.00 MiB), or a quota of \
             1.25 GiB"
        ),
    ] {
        assert!(report.stdout.contains(&want), "{want}\n{report}");
    }
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
    // The member has exited: `set` gives back what the dead held before it shows figures.
    assert!(
        one.stdout.contains(&format!(
            "{GPU0}: limit 512.00 MiB, in use 0 B, peak 1.50 GiB"
        )),
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
        // A usage error: 2, as every subcommand's.
        assert_eq!(out.status.code(), Some(2), "{out}");
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
    assert_eq!(out.status.code(), Some(2), "{out}");
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
    let a_ops = format!("init uuid:0 alloc:768M {}", hold.op());
    let mut a = g
        .member(Some("1GiB"), &a_ops)
        .env("CUDA_SHIM_DEVICES", "2")
        .env("CUDA_VISIBLE_DEVICES", "1")
        .start();
    let a_pid = a.pid();
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
             1.00 GiB, this process 0 B, 1 other member 768.00 MiB, 256.00 MiB left; held by \
             pid {a_pid} ({}) 768.00 MiB",
            b.prefix(),
            cuquota_format::holder::short_command(&format!(
                "{} {a_ops}",
                Client::Dlsym.path().display()
            ))
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

mod bad_state;
mod survival;
mod trust;

/// `cuquota set NAME --remove`: refused, naming the living members, while any lives; then
/// the file goes, and the next member starts a fresh group.
#[test]
fn a_group_is_removed_once_no_member_lives() {
    let g = Group::new("group-remove", "svc");
    let remove = || {
        Run::program(&artifacts().cli)
            .no_preload()
            .args(&["set", g.name, "--remove", "--state-dir", g.state_dir()])
            .timeout(PROCESS_TIMEOUT)
            .run()
    };
    g.set("1GiB").check_exit(0);
    let gate = g.gate("hold");
    let mut member = g
        .member(None, &format!("init alloc:256M {}", gate.op()))
        .start();
    member.wait_for(|l| l.op == "alloc");
    let out = remove();
    out.check_exit(1);
    let pid = member.pid();
    assert_eq!(
        out.stderr,
        [format!(
            "cuquota: group svc has 1 living member (pid {pid}): stop it first"
        )],
        "{out}"
    );
    assert!(g.file().exists());
    gate.open();
    member.wait().check_exit(0);
    let out = remove();
    out.check_exit(0);
    assert_eq!(
        out.stdout,
        format!("group svc removed ({})\n", g.file().display())
    );
    assert!(!g.file().exists());
    // A new member makes a fresh group: its own limit, nothing of the old one's.
    let out = g.member(Some("512MiB"), "init alloc:768M").run();
    out.check_rcs(&[0, OUT_OF_MEMORY]);
    let out = remove();
    out.check_exit(0);
    let out = remove();
    out.check_exit(1);
    assert!(out.stderr[0].contains("no group svc under"), "{out}");
}

/// `cuquota set` while a member runs reaches the member's log and trace: one line, one
/// `limit` event, and the summary, the report and the plot use the quota in force at each
/// moment (the report says when it changed, the plot's quota line steps).
#[test]
fn a_live_limit_change_reaches_the_members_trace_and_report() {
    let g = Group::new("group-limit-event", "svc");
    let gate = g.gate("after-set");
    let trace = g.dir.join("member.jsonl");
    let mut member = g
        .member(
            Some("1GiB"),
            &format!("init alloc:768M {} alloc:768M info", gate.op()),
        )
        .env("CUQUOTA_TRACE", trace.to_str().unwrap())
        .start();
    member.wait_for(|l| l.op == "alloc");
    g.set("2GiB").check_exit(0);
    gate.open();
    let out = member.wait();
    out.check_exit(0);
    out.check(3, "alloc", &[("rc", 0)]);
    out.check(4, "info", &[("total", 2 * GIB), ("free", 512 * MIB)]);
    out.check_log(
        "GPU 0: group svc's quota is now 2.00 GiB (2147483648 bytes) (was 1.00 GiB \
         (1073741824 bytes)): changed by `cuquota set`",
    );
    assert_eq!(
        out.logs_starting("GPU 0: group svc's quota is now").len(),
        1,
        "{out}"
    );
    let summary = out.logs_starting("GPU 0 summary:");
    assert!(summary[0].contains("of quota 2.00 GiB"), "{out}");
    let events: Vec<serde_json::Value> = fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let limits: Vec<&serde_json::Value> = events.iter().filter(|e| e["type"] == "limit").collect();
    assert_eq!(limits.len(), 1, "{events:?}");
    assert_eq!(
        (limits[0]["limit"].as_u64(), limits[0]["before"].as_u64()),
        (Some(2 * GIB), Some(GIB))
    );
    assert_eq!(
        events.last().unwrap()["devices"][0]["quota"].as_u64(),
        Some(2 * GIB)
    );
    let report = Run::program(&artifacts().cli)
        .no_preload()
        .args(&["report", trace.to_str().unwrap()])
        .run();
    report.check_exit(0);
    assert!(
        report.stdout.contains("the quota became 2.00 GiB at"),
        "{report}"
    );
    // The peak is measured against the quota in force then.
    assert!(
        report
            .stdout
            .contains("quota 2.00 GiB, peak 1.50 GiB (75.0%)"),
        "{report}"
    );
    let svg = g.dir.join("member.svg");
    Run::program(&artifacts().cli)
        .no_preload()
        .args(&["plot", trace.to_str().unwrap(), "-o", svg.to_str().unwrap()])
        .run()
        .check_exit(0);
    let svg = fs::read_to_string(&svg).unwrap();
    assert_eq!(svg.matches("class=\"quota\"").count(), 2, "{svg}");
}
