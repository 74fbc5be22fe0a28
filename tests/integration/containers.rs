//! `cuquota cdi`'s spec under a real container runtime: Debian 12's podman 4.3.1 with runc
//! (scripts/test.sh installs them), no image: each container's root is an overlay of the
//! host's (`--rootfs /:O`), so the host's clients and the stand-in run inside. The spec is
//! written to the runtime's CDI directory (`/var/run/cdi`, under a name of its own) and
//! requested with `--device`; podman's vendored CDI library loads it and runc makes its
//! mounts. Podman keeps everything in a scratch directory (`--root`, `--runroot`,
//! `--tmpdir`, vfs storage, cgroupfs, no network), removed at the end with the spec and every
//! container. If podman cannot start a container, the test fails saying why.
//!
//! The settings are those of a machine like CI's: runc (crun refuses the hybrid cgroup v1
//! layout), the cgroupfs manager (no systemd), vfs storage, and ulimits no higher than the
//! machine's (raising them needs CAP_SYS_RESOURCE, which it lacks).

use crate::common::*;
use cuquota_state::group::GroupFile;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Where podman 4.3.1 reads CDI specs (it has no option for another directory).
const CDI_DIR: &str = "/var/run/cdi";
/// podman makes this directory whatever the options say; removed again if it was not there.
const PODMAN_RUN_DIR: &str = "/run/containers";
/// Inside the containers: the state directory the spec mounts.
const STATE_INSIDE: &str = "/dev/shm/cuquota";
/// How long one podman command (and the container it runs) may take.
const PODMAN_TIMEOUT: Duration = Duration::from_secs(60);
/// How many `waitgone` ops (30 s each at most) hold a container at a gate.
const HOLD_OPS: usize = 3;
const POLICY: &str = "limit = 0:1GiB\ngroup = pod\nmode = enforce\n";

/// Whether a directory existed before these tests first ran podman.
struct Before {
    cdi_dir: bool,
    run_dir: bool,
}

/// One runtime at a time: the tests share the CDI directory and podman's /run directory,
/// which the last one out removes if the tests made them.
fn exclusive() -> MutexGuard<'static, Before> {
    static LOCK: OnceLock<Mutex<Before>> = OnceLock::new();
    let lock = LOCK.get_or_init(|| {
        Mutex::new(Before {
            cdi_dir: Path::new(CDI_DIR).exists(),
            run_dir: Path::new(PODMAN_RUN_DIR).exists(),
        })
    });
    lock.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new directory of its own under /tmp (mkdtemp).
fn short_temp_dir() -> PathBuf {
    let template = std::ffi::CString::new("/tmp/cuquota-podman-XXXXXX").unwrap();
    let mut bytes = template.into_bytes_with_nul();
    // SAFETY: a writable, NUL-terminated template that mkdtemp fills in place.
    let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
    assert!(
        !made.is_null(),
        "mkdtemp /tmp/cuquota-podman-XXXXXX: {}",
        std::io::Error::last_os_error()
    );
    bytes.pop();
    PathBuf::from(String::from_utf8(bytes).unwrap())
}

/// A private podman, a group state directory, a policy, and the spec in the CDI directory.
struct Podman {
    dir: PathBuf,
    /// podman's root, runroot and tmpdir: under /tmp, since podman refuses a runroot
    /// longer than 50 characters.
    podman_dir: PathBuf,
    state: PathBuf,
    spec_file: PathBuf,
    /// The device to request (`cuquota.io/quota=NAME`).
    device: String,
    names: String,
    /// The `podman run` processes started in the background, ended before the clean-up.
    started: std::cell::RefCell<Vec<u32>>,
    _lock: MutexGuard<'static, Before>,
}

impl Podman {
    /// Writes `cuquota cdi`'s spec (with `--ld-so-preload` when `file_form`) and checks that
    /// podman starts a container with it.
    fn new(tag: &str, file_form: bool) -> Podman {
        let lock = exclusive();
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "these tests run podman as root (its CDI mounts need it)"
        );
        for tool in ["podman", "runc"] {
            let found = std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(
                found,
                "{tool} is not installed: apt-get install podman runc (scripts/test.sh does)"
            );
        }
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let names = format!("cuquota-test-{}-{n}", std::process::id());
        let dir = scratch_dir(tag);
        let state = dir.join("state");
        fs::create_dir(&state).unwrap();
        // The policy: root's, 0644, as the library trusts it.
        let policy = dir.join("cuquota.conf");
        fs::write(&policy, POLICY).unwrap();
        fs::set_permissions(&policy, fs::Permissions::from_mode(0o644)).unwrap();
        let art = artifacts();
        let mut args = vec![
            "cdi".to_string(),
            format!("--library={}", art.interposer.display()),
            format!("--policy={}", policy.display()),
            format!("--state-dir={}", state.display()),
        ];
        if file_form {
            let preload = dir.join("ld.so.preload");
            fs::write(&preload, "/usr/lib/cuquota/libcuquota.so\n").unwrap();
            fs::set_permissions(&preload, fs::Permissions::from_mode(0o644)).unwrap();
            args.push(format!("--ld-so-preload={}", preload.display()));
        }
        let out = Run::program(&art.cli)
            .no_preload()
            .args(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .run();
        out.check_exit(0);
        let mut spec: Value = serde_json::from_str(&out.stdout).unwrap();
        // The spec as written, but for the device's name: no other spec on the machine (a real
        // cuquota one, another test run) can declare the same device.
        let device = names.clone();
        spec["devices"][0]["name"] = device.clone().into();
        fs::create_dir_all(CDI_DIR).unwrap();
        let spec_file = Path::new(CDI_DIR).join(format!("{names}.json"));
        fs::write(&spec_file, serde_json::to_string_pretty(&spec).unwrap()).unwrap();
        let podman = Podman {
            dir,
            podman_dir: short_temp_dir(),
            state,
            spec_file,
            device,
            names,
            started: Default::default(),
            _lock: lock,
        };
        let probe = podman.container("probe", &["true"]).run_allowing_timeout();
        assert!(
            !probe.timed_out && probe.status.success(),
            "podman could not run a container with the spec (vfs storage, cgroupfs, runc, no \
             network, --rootfs /:O):\n{probe}\nthe spec:\n{}",
            fs::read_to_string(&podman.spec_file).unwrap()
        );
        podman
    }

    /// podman with its state kept in the scratch directory.
    fn podman(&self, args: &[&str]) -> Run {
        let d = |sub: &str| self.podman_dir.join(sub).display().to_string();
        let global = [
            "--storage-driver=vfs".to_string(),
            "--cgroup-manager=cgroupfs".into(),
            "--runtime=runc".into(),
            "--events-backend=none".into(),
            format!("--root={}", d("root")),
            format!("--runroot={}", d("run")),
            format!("--tmpdir={}", d("tmp")),
            format!("--network-config-dir={}", d("networks")),
        ];
        Run::program("podman")
            .no_preload()
            .env("TMPDIR", &d("."))
            .args(&global.iter().map(String::as_str).collect::<Vec<_>>())
            .args(args)
            .timeout(PODMAN_TIMEOUT)
    }

    /// `podman run` of `command` in a container `name` that requests the device.
    fn container(&self, name: &str, command: &[&str]) -> Run {
        let device = format!("cuquota.io/quota={}", self.device);
        let shim = format!("LD_LIBRARY_PATH={}", artifacts().shim_dir.display());
        let name = self.name(name);
        self.podman(&[
            "run",
            "--rm",
            "--name",
            &name,
            "--network=none",
            "--ulimit=nofile=1024:1024",
            "--ulimit=nproc=1024:1024",
            "--device",
            &device,
            "--env",
            &shim,
            "--rootfs",
            "/:O",
        ])
        .args(command)
    }

    /// Starts `podman run` of `command` in the background.
    fn start(&self, name: &str, command: &[String]) -> Running {
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        let running = self.container(name, &command).start();
        self.started.borrow_mut().push(running.pid());
        running
    }

    fn name(&self, name: &str) -> String {
        format!("{}-{name}", self.names)
    }

    fn kill(&self, name: &str) {
        self.podman(&["kill", &self.name(name)]).run().check_exit(0);
    }

    /// A gate in the shared state directory, and the ops that wait for it to be removed
    /// inside: HOLD_OPS `waitgone`s of at most 30 s each, so that a slow machine does not
    /// release a container early.
    fn gate(&self, name: &str) -> (PathBuf, String) {
        fs::write(self.state.join(name), "").unwrap();
        let op = format!("waitgone:{STATE_INSIDE}/{name}");
        (self.state.join(name), vec![op; HOLD_OPS].join(" "))
    }

    /// `cuquota ARGS --state-dir STATE` on the host.
    fn cli(&self, args: &[&str]) -> String {
        let state = self.state.display().to_string();
        let out = Run::program(&artifacts().cli)
            .no_preload()
            .args(args)
            .args(&["--state-dir", &state])
            .run();
        out.check_exit(0);
        out.stdout
    }
}

impl Podman {
    /// The processes whose command line names podman's directory (conmon, podman).
    fn users(&self) -> Vec<u32> {
        let dir = self.podman_dir.display().to_string();
        let Ok(entries) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        (entries.flatten())
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&dir))
            })
            .collect()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // A test that failed leaves its `podman run`s behind: they are our children, not
        // yet reaped, so the PIDs are still theirs.
        for pid in self.started.borrow().iter() {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        let rm = self
            .podman(&["rm", "--force", "--all", "--time=0"])
            .run_allowing_timeout();
        let mut trouble = Vec::new();
        if rm.timed_out || !rm.status.success() {
            trouble.push(format!("podman rm --force --all: {rm}"));
        }
        // conmon outlives a container briefly and then runs podman's clean-up, which writes
        // under podman's directory: wait (bounded) until no process names it.
        let deadline = std::time::Instant::now() + PODMAN_TIMEOUT;
        while !self.users().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !self.users().is_empty() {
            trouble.push(format!(
                "still using {:?}: {:?}",
                self.podman_dir,
                self.users()
            ));
        }
        // Nothing may stay mounted under podman's directory (a container's overlay root)
        // before it is removed.
        let prefix = format!("{}/", self.podman_dir.display());
        let mounted = || -> Vec<String> {
            let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            let mut m: Vec<String> = (info.lines())
                .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
                .filter(|p| p.starts_with(&prefix))
                .collect();
            m.sort_by_key(|p| std::cmp::Reverse(p.len()));
            m
        };
        for point in mounted() {
            let c = std::ffi::CString::new(point).unwrap();
            // SAFETY: a valid C string; a detached unmount of a directory of ours.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = fs::remove_file(&self.spec_file);
        let _ = fs::remove_dir_all(&self.dir);
        if mounted().is_empty() && self.users().is_empty() {
            let _ = fs::remove_dir_all(&self.podman_dir);
        } else {
            trouble.push(format!("still mounted, left in place: {:?}", mounted()));
        }
        if !self._lock.cdi_dir {
            let _ = fs::remove_dir(CDI_DIR);
        }
        if !self._lock.run_dir {
            let _ = fs::remove_dir(Path::new(PODMAN_RUN_DIR).join("networks"));
            let _ = fs::remove_dir(PODMAN_RUN_DIR);
        }
        if !trouble.is_empty() && !std::thread::panicking() {
            panic!("cleaning up podman: {}", trouble.join("\n"));
        }
    }
}

/// The LD_PRELOAD form: podman's CDI library takes the spec, the variable is set, the
/// library and the policy are read-only, and a client is held to the policy's quota.
#[test]
fn podman_runs_the_ld_preload_form() {
    let p = Podman::new("podman-env", false);
    let env = p.container("env", &["printenv", "LD_PRELOAD"]).run();
    env.check_exit(0);
    assert_eq!(env.stdout.trim(), "/usr/lib/cuquota/libcuquota.so", "{env}");
    read_only_inside(&p, false);
    let client = Client::Dlsym.path().display().to_string();
    let out = inside(
        p.container(
            "client",
            &[&client, "init", "alloc:768M", "alloc:512M", "info"],
        )
        .run(),
    );
    out.check_exit(0);
    out.check(1, "alloc", &[("rc", SUCCESS)]);
    out.check(2, "alloc", &[("rc", OUT_OF_MEMORY)]);
    out.check(3, "info", &[("free", 256 * MIB), ("total", GIB)]);
    out.check_log(&format!(
        "GPU 0 refused 512.00 MiB ({} bytes) via cuMemAlloc_v2: group pod: quota 1.00 GiB, \
         this process 768.00 MiB, no other member holds any, 256.00 MiB left",
        512 * MIB
    ));
}

/// Writes to the library, the policy (and the preload file) fail inside; the state
/// directory is writable.
fn read_only_inside(p: &Podman, file_form: bool) {
    let mut files = vec!["/usr/lib/cuquota/libcuquota.so", "/etc/cuquota.conf"];
    if file_form {
        files.push("/etc/ld.so.preload");
    }
    let script = format!(
        "for f in {}; do if true >> \"$f\"; then echo \"writable $f\"; fi; done; \
         : > {STATE_INSIDE}/probe && rm {STATE_INSIDE}/probe && echo state writable",
        files.join(" ")
    );
    let out = p.container("ro", &["sh", "-c", &script]).run();
    assert_eq!(out.stdout.trim(), "state writable", "{out}");
    assert_eq!(
        (out.stderr.iter())
            .filter(|l| l.contains("Read-only file system"))
            .count(),
        files.len(),
        "{out}"
    );
}

/// The `/etc/ld.so.preload` form: three containers in one group (the policy's `pod`, in the
/// shared state directory) hold one 1 GiB quota exactly, two of them under `env -i`, one
/// of those with variables that try to widen it; the host's `top --json` and `metrics` name
/// each by its host PID and container; a container that exits and one that is killed leave
/// their memory to the third at its next request.
#[test]
fn podman_containers_share_one_group_quota_through_ld_so_preload() {
    let p = Podman::new("podman-group", true);
    read_only_inside(&p, true);
    let shim = format!("LD_LIBRARY_PATH={}", artifacts().shim_dir.display());
    let client = Client::Dlsym.path().display().to_string();
    let (gate_a, hold_a) = p.gate("gate-a");
    let (gate_c, hold_c) = p.gate("gate-c");
    let (gate_d, hold_d) = p.gate("gate-d");
    let (gate_e, hold_e) = p.gate("gate-e");
    let words = |s: String| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    // A: no LD_PRELOAD, and variables that would widen the policy: ignored.
    let mut a = p.start(
        "a",
        &words(format!(
            "env -i {shim} CUQUOTA_LIMIT=8GiB CUQUOTA_MODE=observe CUQUOTA_GROUP=mine \
             CUQUOTA_STATE_DIR=/tmp {client} init alloc:512M shimstats:0 {hold_a}"
        )),
    );
    a.wait_for(|l| l.op == "shimstats");
    // B: as podman starts it (the preload file, no variable).
    let mut b = p.start(
        "b",
        &words(format!("{client} init alloc:256M shimstats:0 sleep:300000")),
    );
    b.wait_for(|l| l.op == "shimstats");
    // C: no LD_PRELOAD either. Ops 0-4; 5-7 hold; 8-9; 10-12 hold; 13-15; 16-18 hold.
    let mut c = p.start(
        "c",
        &words(format!(
            "env -i {shim} {client} init alloc:512M alloc:256M info shimstats:0 {hold_c} \
             alloc:512M info {hold_d} alloc:256M info shimstats:0 {hold_e}"
        )),
    );
    c.wait_for(|l| l.op == "shimstats");

    // The group, read on the host: all three hold the whole quota.
    let group = || {
        GroupFile::open(&p.state, "pod")
            .unwrap_or_else(|e| panic!("group pod: {e}"))
            .snapshot()
    };
    let snap = group();
    assert_eq!(snap.devices.len(), 1, "{snap:?}");
    assert_eq!((snap.devices[0].in_use, snap.devices[0].refusals), (GIB, 1));
    // The views on the host: each container's process by host PID (its own is 1), and its
    // container.
    let names = ["a", "b", "c"].map(|n| p.name(n));
    let inspect = p
        .podman(&["inspect", "--format", "{{.Name}} {{.State.Pid}} {{.Id}}"])
        .args(&names.each_ref().map(String::as_str))
        .run();
    inspect.check_exit(0);
    let mut want: Vec<(u64, String, u64)> = (inspect.stdout.lines())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let bytes = if f[0] == names[0] {
                512 * MIB
            } else {
                256 * MIB
            };
            (f[1].parse().unwrap(), f[2][..12].to_string(), bytes)
        })
        .collect();
    want.sort();
    assert_eq!(want.len(), 3, "{inspect}");
    let top: Value = serde_json::from_str(&p.cli(&["top", "--json"])).unwrap();
    let groups = top["gpus"][0]["groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let g = (groups.iter())
        .find(|g| g["name"] == "pod")
        .unwrap_or_else(|| panic!("no group pod in {top:#}"));
    let mut seen: Vec<(u64, String, u64)> = (g["processes"].as_array().unwrap().iter())
        .map(|m| {
            assert_eq!(m["pid"], 1, "{m}");
            (
                m["host_pid"].as_u64().unwrap_or(0),
                m["container"].as_str().unwrap_or("").to_string(),
                m["in_use"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(seen, want, "{g:#}");
    let metrics = p.cli(&["metrics"]);
    for (pid, _, bytes) in &want {
        let series =
            format!("cuquota_member_in_use_bytes{{group=\"pod\",pid=\"{pid}\",ns_pid=\"1\",");
        let line = (metrics.lines())
            .find(|l| l.starts_with(&series))
            .unwrap_or_else(|| panic!("no {series} in:\n{metrics}"));
        assert!(line.ends_with(&format!(" {bytes}")), "{line}");
    }

    // A exits holding its 512 MiB: C's next 512 MiB is granted at once.
    fs::remove_file(&gate_a).unwrap();
    let a = inside(a.wait());
    a.check_exit(0);
    a.check(1, "alloc", &[("rc", SUCCESS)]);
    a.check(2, "shimstats", &[("in_use", 512 * MIB)]);
    released(&a, 3);
    assert!(a.logs_starting("GPU 0 refused").is_empty(), "{a}");
    a.check_log(
        "CUQUOTA_GROUP=\"mine\" is ignored: the policy /etc/cuquota.conf says group = pod, \
         and the environment may only narrow it",
    );
    fs::remove_file(&gate_c).unwrap();
    let info = c.wait_for(nth("info", 2));
    assert_eq!((info.num("free"), info.num("total")), (Some(0), Some(GIB)));
    // B is killed holding its 256 MiB: C's next 256 MiB is granted at once.
    p.kill("b");
    let b = inside(b.wait());
    assert_eq!(
        b.status.code(),
        Some(137),
        "podman run of a killed container: {b}"
    );
    b.check(2, "shimstats", &[("in_use", 256 * MIB)]);
    fs::remove_file(&gate_d).unwrap();
    c.wait_for(nth("shimstats", 2));
    fs::remove_file(&gate_e).unwrap();
    let c = inside(c.wait());
    c.check_exit(0);
    c.check(1, "alloc", &[("rc", OUT_OF_MEMORY)]);
    c.check(2, "alloc", &[("rc", SUCCESS)]);
    c.check(3, "info", &[("free", 0), ("total", GIB)]);
    c.check(4, "shimstats", &[("in_use", 256 * MIB)]);
    released(&c, 5);
    c.check(8, "alloc", &[("rc", SUCCESS)]);
    c.check(9, "info", &[("free", 0), ("total", GIB)]);
    released(&c, 10);
    c.check(13, "alloc", &[("rc", SUCCESS)]);
    c.check(14, "info", &[("free", 0), ("total", GIB)]);
    c.check(15, "shimstats", &[("in_use", GIB)]);
    // C's refusal names who held the group's quota: A's container, then B's (most first).
    let refused = c.logs_starting("GPU 0 refused");
    assert_eq!(refused.len(), 1, "{c}");
    let container = |name: &str| {
        (inspect.stdout.lines())
            .find(|l| l.starts_with(&format!("{name} ")))
            .and_then(|l| Some(l.split_whitespace().nth(2)?[..12].to_string()))
            .unwrap_or_else(|| panic!("no {name} in {inspect}"))
    };
    let (held_a, held_b) = (container(&names[0]), container(&names[1]));
    let head = format!(
        "GPU 0 refused 512.00 MiB ({} bytes) via cuMemAlloc_v2: group pod: quota 1.00 GiB, \
         this process 0 B, 2 other members 768.00 MiB, 256.00 MiB left; held by pid 1 \
         [{held_a}] (dlsym init alloc:512M",
        512 * MIB
    );
    assert!(refused[0].contains(&head), "{head}\n{c}");
    let b_at = refused[0].find(&format!("; pid 1 [{held_b}] (dlsym init alloc:256M"));
    assert!(
        b_at.is_some_and(|at| refused[0][at..].contains(") 256.00 MiB")),
        "{c}"
    );
    let snap = group();
    assert_eq!((snap.devices[0].peak, snap.devices[0].refusals), (GIB, 1));
}

/// The hold that starts at op `first` (three `waitgone`s) ended because the test opened its
/// gate, not at a time-out.
fn released(out: &Output, first: usize) {
    let held: Vec<Option<u64>> = (first..first + HOLD_OPS)
        .map(|i| out.op(i, "waitgone").num("gone"))
        .collect();
    assert!(held.contains(&Some(1)), "a hold timed out: {held:?}\n{out}");
}

/// A container's output, its cuquota lines read as PID 1's (the PID the process has in its
/// container, which cuquota prints).
fn inside(mut out: Output) -> Output {
    out.pid = 1;
    out
}

/// A predicate accepting the `n`th (from 1) line with op `op`.
fn nth(op: &'static str, n: usize) -> impl Fn(&Line) -> bool {
    let seen = std::cell::Cell::new(0);
    move |l| {
        l.op == op && {
            seen.set(seen.get() + 1);
            seen.get() == n
        }
    }
}

/// The crash hunt inside a container: the BFC client run again and again under the group's
/// 1 GiB quota in one container of the `/etc/ld.so.preload` form (the shell that loops is
/// governed too, as every process there is), `env -i` each time, core dumps allowed into the
/// shared state directory. A run that dies by a signal fails the test with its output and,
/// where gdb is installed, every thread's backtrace from its core.
#[test]
fn the_bfc_client_never_crashes_in_a_container() {
    let p = Podman::new("podman-crash-hunt", true);
    let runs: usize = std::env::var("CUQUOTA_CRASH_RUNS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .map_or(100, |n: usize| n / 5);
    let bfc = Client::Bfc.path().display().to_string();
    let shim = artifacts().shim_dir.display().to_string();
    // Each run's output goes to the state directory, kept when it did not end well.
    let script = format!(
        "ulimit -c unlimited; cd {STATE_INSIDE} || exit 3; i=0; \
         while [ $i -lt {runs} ]; do \
           env -i LD_LIBRARY_PATH={shim} {bfc} > run.out 2>&1; rc=$?; \
           if [ $rc -ne 0 ] || ! grep -q 'GPU 0 summary: peak 1022.00 MiB' run.out; then \
             echo \"run $i rc=$rc\"; cat run.out; exit 1; fi; \
           i=$((i + 1)); done; echo \"$i runs\""
    );
    let out = p
        .container("bfc", &["sh", "-c", &script])
        .timeout(Duration::from_secs(120))
        .run_allowing_timeout();
    if out.timed_out || !out.status.success() {
        let core = ["core", "core.1"]
            .iter()
            .map(|c| p.state.join(c))
            .find(|c| c.exists());
        let backtrace = match &core {
            Some(core) => std::process::Command::new("gdb")
                .args(["-batch", "-nx", "-ex", "thread apply all bt", &bfc])
                .arg(core)
                .output()
                .map_or_else(
                    |e| format!("core at {} (no gdb: {e})", core.display()),
                    |o| String::from_utf8_lossy(&o.stdout).into_owned(),
                ),
            None => "no core file in the state directory".into(),
        };
        panic!("the BFC client in a container:\n{out}\n{backtrace}");
    }
    assert_eq!(out.stdout.trim(), format!("{runs} runs"), "{out}");
}
