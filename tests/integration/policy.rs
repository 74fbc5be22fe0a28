//! The policy file, on a test build of the library: its path is baked in when it is built
//! (`CUQUOTA_BUILD_POLICY_PATH`, here `<target>/policy-test/etc/cuquota.conf`), as
//! `/etc/cuquota.conf` is in a real build; nothing a process sets at run time moves it.
//! The tests that write that one file hold [`LOCK`]. `/etc/ld.so.preload` is tried in a
//! mount namespace of its own (an overlay on /etc), so the machine's is never touched.

use crate::common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The tests that write the one policy file take turns.
pub static LOCK: Mutex<()> = Mutex::new(());

pub struct PolicyBuild {
    /// The test build of libcuquota.so.
    pub library: PathBuf,
    /// The policy path baked into it.
    pub conf: PathBuf,
    /// A scratch directory for what the tests write next to it.
    pub dir: PathBuf,
}

/// Builds (once per test binary; cargo makes it a no-op when fresh) the library with the
/// test policy path, in a target dir of its own so that the main build is never replaced.
pub fn build() -> &'static PolicyBuild {
    static BUILD: OnceLock<PolicyBuild> = OnceLock::new();
    BUILD.get_or_init(|| {
        let art = artifacts();
        let dir = art.target_dir.join("policy-test");
        let conf = dir.join("etc/cuquota.conf");
        fs::create_dir_all(conf.parent().unwrap()).unwrap();
        let target = art.target_dir.join("policy-build");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(&art.workspace)
            .args(["build", "--quiet", "-p", "cuquota", "--lib", "--target-dir"])
            .arg(&target)
            .env("CUQUOTA_BUILD_POLICY_PATH", &conf);
        for var in [
            "CARGO_TARGET_DIR",
            "CARGO_MAKEFLAGS",
            "MAKEFLAGS",
            "LD_PRELOAD",
        ] {
            cmd.env_remove(var);
        }
        let out = cmd.output().expect("run cargo build");
        assert!(
            out.status.success(),
            "building the test build of the library failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let library = dir.join("libcuquota.so");
        let tmp = dir.join(format!(".libcuquota.so.{}", std::process::id()));
        fs::copy(target.join("debug/libcuquota.so"), &tmp).unwrap();
        fs::rename(&tmp, &library).unwrap();
        PolicyBuild { library, conf, dir }
    })
}

/// The policy file, written with `mode` (and chowned to `uid`), or removed (`None`).
pub fn write_policy(text: Option<&str>, mode: u32, uid: u32) -> MutexGuard<'static, ()> {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let b = build();
    let _ = fs::remove_file(&b.conf);
    if let Some(text) = text {
        fs::write(&b.conf, text).unwrap();
        fs::set_permissions(&b.conf, fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(&b.conf, Some(uid), None).unwrap();
    }
    guard
}

fn run_policy(ops: &str, env: &[(&str, &str)]) -> Output {
    let b = build();
    Run::client(Client::Linked)
        .no_preload()
        .env_os("LD_PRELOAD", b.library.as_os_str())
        .envs(env)
        .ops(ops)
        .run()
}

/// cuquota's lines without their `cuquota[PID]: ` prefix.
pub fn bodies(out: &Output) -> Vec<String> {
    (out.cuquota_lines().iter())
        .map(|l| l.split_once("]: ").map_or(*l, |(_, b)| b).to_string())
        .collect()
}

pub(crate) fn needs_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the policy tests write a root-owned policy: run them as root (CI does)"
    );
}

#[test]
fn the_policy_governs_a_process_with_no_variables_and_they_only_narrow_it() {
    needs_root();
    let _p = write_policy(Some("# test\nlimit = 1GiB\nmode = enforce\n"), 0o644, 0);
    let ops = "init info alloc:768M alloc:512M";
    let out = run_policy(ops, &[]);
    out.check_exit(0);
    out.check(1, "info", &[("rc", 0), ("free", GIB), ("total", GIB)]);
    out.check(2, "alloc", &[("rc", 0)]);
    out.check(3, "alloc", &[("rc", OUT_OF_MEMORY)]);
    // A larger limit, observe, another group: ignored; a smaller limit narrows.
    let out = run_policy(
        ops,
        &[("CUQUOTA_LIMIT", "4GiB"), ("CUQUOTA_MODE", "observe")],
    );
    out.check(1, "info", &[("total", GIB)]);
    out.check(3, "alloc", &[("rc", OUT_OF_MEMORY)]);
    let ignored: Vec<&str> = out.logs_starting("CUQUOTA_MODE=\"observe\" is ignored");
    assert_eq!(ignored.len(), 1, "{out}");
    assert!(ignored[0].contains(&format!(
        "the policy {} says enforce, and the environment may only narrow it",
        build().conf.display()
    )));
    let out = run_policy(ops, &[("CUQUOTA_LIMIT", "512MiB")]);
    out.check(1, "info", &[("total", 512 * MIB)]);
    out.check(2, "alloc", &[("rc", OUT_OF_MEMORY)]);
}

#[test]
fn a_policy_others_can_write_or_not_roots_is_refused_and_fails_closed() {
    needs_root();
    for (mode, uid, why) in [
        (0o666, 0, "is writable by its group or others (mode 666)"),
        (0o620, 0, "is writable by its group or others (mode 620)"),
        (0o644, 65534, "is owned by uid 65534, not root"),
    ] {
        let _p = write_policy(Some("limit = 1GiB\n"), mode, uid);
        let out = run_policy("init alloc:2G", &[("CUQUOTA_LIMIT", "4GiB")]);
        out.check_exit(0);
        out.check(0, "init", &[("rc", INVALID_VALUE)]);
        out.check(1, "alloc", &[("rc", INVALID_VALUE)]);
        let want = format!(
            "the policy {} {why}: it is ignored, and CUDA calls fail with \
             CUDA_ERROR_INVALID_VALUE until it is fixed",
            build().conf.display()
        );
        assert_eq!(bodies(&out), [want], "{out}");
    }
    // A policy that does not parse is not half read.
    let _p = write_policy(Some("limit = 1GiB\nlimit = 9GiB\n"), 0o644, 0);
    let out = run_policy("init", &[]);
    out.check(0, "init", &[("rc", INVALID_VALUE)]);
    assert!(
        bodies(&out)[0].contains("is not valid: line 2: limit is given twice"),
        "{out}"
    );
}

/// A job's policy, found through the job's cgroup: the test moves the client into a cgroup
/// named like Slurm's (`job_<N>`) in the v1 freezer hierarchy, then removes it.
#[test]
fn a_jobs_policy_is_found_by_its_cgroup_and_a_job_writable_one_is_refused() {
    needs_root();
    let b = build();
    let jobs = b.dir.join("jobs");
    let _ = fs::remove_dir_all(&jobs);
    fs::create_dir_all(&jobs).unwrap();
    fs::set_permissions(&jobs, fs::Permissions::from_mode(0o755)).unwrap();
    let _p = write_policy(
        Some(&format!("limit = 4GiB\njobs = {}\n", jobs.display())),
        0o644,
        0,
    );
    let job_id = 900_000 + std::process::id() % 99_999;
    let cgroup = Path::new("/sys/fs/cgroup/freezer").join(format!("cuquota-test/job_{job_id}"));
    if let Err(e) = fs::create_dir_all(&cgroup) {
        panic!(
            "cannot make the cgroup {} ({e}): this test needs a writable cgroup v1 freezer \
             hierarchy, as Slurm's proctrack/cgroup does",
            cgroup.display()
        );
    }
    let in_job = |ops: &str| {
        let script = format!(
            "echo $$ > {}/cgroup.procs && exec env -u CUQUOTA_LIMIT {} {ops}",
            cgroup.display(),
            Client::Linked.path().display()
        );
        Run::program("/bin/sh")
            .no_preload()
            .env_os("LD_PRELOAD", b.library.as_os_str())
            .arg("-c")
            .arg(&script)
            .run()
    };
    // No file for the job: the main policy alone.
    let out = in_job("init info");
    out.check(1, "info", &[("total", 4 * GIB)]);
    let job_file = jobs.join(job_id.to_string());
    fs::write(&job_file, "limit = 1GiB\n").unwrap();
    fs::set_permissions(&job_file, fs::Permissions::from_mode(0o644)).unwrap();
    let out = in_job("init info alloc:1G alloc:1");
    out.check(1, "info", &[("total", GIB)]);
    out.check(3, "alloc", &[("rc", OUT_OF_MEMORY)]);
    // The job's own user could write it: refused, closed.
    std::os::unix::fs::chown(&job_file, Some(65534), None).unwrap();
    let out = in_job("init");
    out.check(0, "init", &[("rc", INVALID_VALUE)]);
    assert_eq!(
        bodies(&out),
        [format!(
            "the policy {} is owned by uid 65534, not root: it is ignored, and CUDA calls \
             fail with CUDA_ERROR_INVALID_VALUE until it is fixed",
            job_file.display()
        )],
        "{out}"
    );
    let _ = fs::remove_dir(&cgroup);
    let _ = fs::remove_dir(cgroup.parent().unwrap());
    let _ = fs::remove_dir_all(&jobs);
}

/// Runs `command` (a shell command line) in a mount namespace of its own where
/// /etc/ld.so.preload holds `preload`: see [`with_etc_overlay`].
pub(crate) fn with_ld_so_preload(over: &Path, preload: &str, command: &str) -> Output {
    fs::create_dir_all(over.join("upper")).unwrap();
    fs::write(over.join("upper/ld.so.preload"), format!("{preload}\n")).unwrap();
    with_etc_overlay(over, command)
}

/// Runs `command` (a shell command line) in a mount namespace of its own with an overlay on
/// /etc whose upper layer is `over/upper` (what the caller put there is in /etc; what the
/// command writes to /etc lands there), so the machine's /etc is never touched.
pub(crate) fn with_etc_overlay(over: &Path, command: &str) -> Output {
    for d in ["upper", "work"] {
        fs::create_dir_all(over.join(d)).unwrap();
    }
    let script = format!(
        "mount -t overlay overlay -o lowerdir=/etc,upperdir={o}/upper,workdir={o}/work /etc \
         || exit 97; exec {command}",
        o = over.display(),
    );
    let out = Run::program("unshare")
        .no_preload()
        .ops("-m --propagation private sh -c")
        .arg(&script)
        .run();
    assert_ne!(
        out.status.code(),
        Some(97),
        "cannot mount an overlay on /etc in a mount namespace (needs CAP_SYS_ADMIN): {out}"
    );
    out
}

/// With the library in /etc/ld.so.preload (in a mount namespace with an overlay on /etc),
/// a process started with an empty environment, in a session of its own, is governed by
/// the policy alone; with no policy it is untouched (no line, the GPU's own figures).
#[test]
fn ld_so_preload_governs_every_process_by_the_policy_alone() {
    needs_root();
    let b = build();
    let over = scratch_dir("ld-so-preload");
    let art = artifacts();
    let in_namespace = |ops: &str| {
        let command = format!(
            "setsid env -i LD_LIBRARY_PATH={shim} {client} {ops}",
            shim = art.shim_dir.display(),
            client = Client::Linked.path().display(),
        );
        with_ld_so_preload(&over, &b.library.display().to_string(), &command)
    };
    let _p = write_policy(Some("limit = 1GiB\n"), 0o644, 0);
    let out = in_namespace("init info alloc:1G alloc:1");
    out.check_exit(0);
    out.check(1, "info", &[("total", GIB)]);
    out.check(2, "alloc", &[("rc", 0)]);
    out.check(3, "alloc", &[("rc", OUT_OF_MEMORY)]);
    drop(_p);
    let _p = write_policy(None, 0, 0);
    let out = in_namespace("init info alloc:6G");
    out.check_exit(0);
    out.check(1, "info", &[("total", DEVICE_BYTES)]);
    out.check(2, "alloc", &[("rc", 0)]);
    assert!(out.stderr.is_empty(), "an untouched process printed: {out}");
    let _ = fs::remove_dir_all(&over);
}
