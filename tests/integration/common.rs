//! The integration-test harness: finds (or builds) the interposer, the shim and the
//! `cuquota` CLI, builds the C test clients once per test run, runs a client under the
//! interposer with a clean environment and a hard timeout, and parses its one-line-per-op
//! output.
//!
//! Where things live (`<target>` is the target dir this test binary was built in: the
//! directory above `<profile>/deps/`, i.e. `target/` or `$CARGO_TARGET_DIR`):
//! - the build: `libcuquota.so` (the interposer), `libcuda.so` (the shim) and `cuquota`
//!   (the CLI), all in one directory. `scripts/test.sh` builds the workspace before it runs
//!   the tests and names that directory in `CUQUOTA_TEST_BUILD` (`<target>/debug`), so the
//!   harness uses it as it is. Without that variable (a plain `cargo test`) the harness runs
//!   a nested `cargo build --workspace` (debug) into `<target>/test-build`, a target dir of
//!   its own since the outer cargo holds the lock on the main one (and cargo does not build
//!   a cdylib-only library for integration tests);
//! - the shim installed as `<target>/shim/libcuda.so.1` (+ a `libcuda.so` link, and a
//!   `libnvidia-ml.so.1` link: the shim also answers as NVML, one object for both);
//! - the clients, compiled with gcc into `<target>/test-clients/`.
//!
//! A file lock makes the set-up safe when several test runs do it at once.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::Read;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

mod clients;
use clients::build_clients;
// Two real users sharing one state directory.
mod users;
pub use users::*;

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
/// The shim's default device size.
pub const DEVICE_BYTES: u64 = 8 * GIB;

pub const SUCCESS: u64 = 0;
pub const INVALID_VALUE: u64 = 1;
pub const OUT_OF_MEMORY: u64 = 2;
pub const NOT_SUPPORTED: u64 = 801;

/// How long one client may run before it is killed and the test fails.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Names the directory holding an already built `libcuquota.so`, `libcuda.so` and
/// `cuquota` (set by `scripts/test.sh`).
pub const BUILD_VAR: &str = "CUQUOTA_TEST_BUILD";

// ---------------------------------------------------------------------------------------
// Artifacts
// ---------------------------------------------------------------------------------------

pub struct Artifacts {
    pub workspace: PathBuf,
    /// Where the harness puts what it makes (the installed shim, clients, scratch dirs).
    pub target_dir: PathBuf,
    /// The interposer, `libcuquota.so`.
    pub interposer: PathBuf,
    /// The `cuquota` command line.
    pub cli: PathBuf,
    /// The directory with the shim as `libcuda.so.1`: the tests' `LD_LIBRARY_PATH`.
    pub shim_dir: PathBuf,
    pub clients_dir: PathBuf,
}

/// Finds or builds (once per test binary) and returns the paths of everything the tests run.
pub fn artifacts() -> &'static Artifacts {
    static ARTIFACTS: OnceLock<Artifacts> = OnceLock::new();
    ARTIFACTS.get_or_init(prepare)
}

fn prepare() -> Artifacts {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().expect("the test binary's path");
    let target_dir = exe
        .ancestors()
        .nth(3)
        .expect("the test binary lives in <target>/<profile>/deps/")
        .to_path_buf();
    let _lock = FileLock::acquire(&target_dir.join("cuquota-test-harness.lock"));

    let build = match std::env::var_os(BUILD_VAR) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let build_dir = target_dir.join("test-build");
            cargo_build(&workspace, &build_dir);
            build_dir.join("debug")
        }
    };
    let built = |name: &str| {
        let path = build.join(name);
        assert!(
            path.is_file(),
            "{} is missing: build the workspace first (`cargo build --workspace`), \
             or unset {BUILD_VAR} to let the tests build it",
            path.display()
        );
        path
    };
    let interposer = built("libcuquota.so");
    let cli = built("cuquota");
    let shim_dir = target_dir.join("shim");
    install_shim(&built("libcuda.so"), &shim_dir);
    let clients_dir = target_dir.join("test-clients");
    build_clients(&workspace.join("tests/clients"), &shim_dir, &clients_dir);

    Artifacts {
        workspace,
        target_dir,
        interposer,
        cli,
        shim_dir,
        clients_dir,
    }
}

/// An exclusive `flock` held until dropped.
struct FileLock(fs::File);

impl FileLock {
    fn acquire(path: &Path) -> FileLock {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        // SAFETY: flock on a file descriptor we own; it stays open for the lock's lifetime.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock {}", path.display());
        FileLock(file)
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // SAFETY: as above; closing the file would release it too.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Builds the workspace (the interposer, the shim and the CLI) with a nested cargo, in a
/// target dir of its own: the outer `cargo test` holds the lock on the main one. Only for a
/// plain `cargo test`; `scripts/test.sh` has built them already.
fn cargo_build(workspace: &Path, build_dir: &Path) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace)
        .args(["build", "--quiet", "--workspace"])
        .arg("--target-dir")
        .arg(build_dir);
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
        "LD_PRELOAD",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd.output().expect("run cargo build");
    assert!(
        out.status.success(),
        "building the interposer, the shim and the CLI failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn install_shim(built: &Path, shim_dir: &Path) {
    fs::create_dir_all(shim_dir).unwrap();
    let installed = shim_dir.join("libcuda.so.1");
    // The installed copy carries the build's mtime: one already there with the same size and
    // mtime is that build, and is left alone, so that the clients linked with it (rebuilt
    // when the shim is newer than they are) are not rebuilt at every test run.
    let stamp = |p: &Path| fs::metadata(p).ok().map(|m| (m.len(), m.modified().ok()));
    if stamp(&installed).is_none() || stamp(&installed) != stamp(built) {
        // Copy then rename: a client still running from an earlier test run keeps its inode.
        let tmp = shim_dir.join(format!(".libcuda.so.1.{}", std::process::id()));
        fs::copy(built, &tmp).unwrap();
        let built_mtime = fs::metadata(built).unwrap().modified().unwrap();
        fs::File::options()
            .write(true)
            .open(&tmp)
            .and_then(|f| f.set_modified(built_mtime))
            .unwrap();
        fs::rename(&tmp, &installed).unwrap();
    }
    let link = shim_dir.join("libcuda.so");
    if fs::read_link(&link)
        .map(|t| t != Path::new("libcuda.so.1"))
        .unwrap_or(true)
    {
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink("libcuda.so.1", &link).unwrap();
    }
    // NVML from the same file.
    let nvml = shim_dir.join("libnvidia-ml.so.1");
    if fs::read_link(&nvml)
        .map(|t| t != Path::new("libcuda.so.1"))
        .unwrap_or(true)
    {
        let _ = fs::remove_file(&nvml);
        std::os::unix::fs::symlink("libcuda.so.1", &nvml).unwrap();
    }
}

/// A fresh, empty directory under the target dir for one test's files.
pub fn scratch_dir(name: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = artifacts()
        .target_dir
        .join("test-scratch")
        .join(format!("{name}-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------------------------------
// Clients and runs
// ---------------------------------------------------------------------------------------

/// The ways a client reaches the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// Linked with -lcuda; takes the exported functions' addresses.
    Linked,
    /// dlopen + dlsym@GLIBC_2.34.
    Dlsym,
    /// dlopen + the original dlsym@GLIBC_2.2.5.
    DlsymOld,
    /// dlsym of cuGetProcAddress_v2 only, then lookups by base name and version.
    Runtime,
    /// As Runtime, with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (CLIENT_PER_THREAD=1).
    RuntimePerThread,
    /// The TensorFlow-style demo workload (not an op interpreter).
    Bfc,
}

impl Client {
    /// Every op-interpreting client build and mode.
    pub const ALL: [Client; 5] = [
        Client::Linked,
        Client::Dlsym,
        Client::DlsymOld,
        Client::Runtime,
        Client::RuntimePerThread,
    ];

    pub fn binary_name(self) -> &'static str {
        match self {
            Client::Linked => "linked",
            Client::Dlsym => "dlsym",
            Client::DlsymOld => "dlsym_old",
            Client::Runtime | Client::RuntimePerThread => "runtime",
            Client::Bfc => "bfc_growth",
        }
    }

    pub fn path(self) -> PathBuf {
        artifacts().clients_dir.join(self.binary_name())
    }
}

/// One client run, built up and then started with [`Run::run`].
pub struct Run {
    program: PathBuf,
    /// argv[0] when not the program's path (any bytes but NUL).
    arg0: Option<OsString>,
    args: Vec<String>,
    env: Vec<(OsString, OsString)>,
    preload: bool,
    /// stderr is a pipe whose reader is already gone (so writes to it fail with EPIPE).
    broken_stderr: bool,
    /// stderr goes into stdout's pipe: `Output::stdout` has both, in the order written.
    merged: bool,
    cwd: Option<PathBuf>,
    timeout: Duration,
    /// Runs as this user: (uid, gid, supplementary groups).
    user: Option<(u32, u32, Vec<u32>)>,
    /// Dumps core on a crash (RLIMIT_CORE raised).
    core_dumps: bool,
}

impl Run {
    pub fn client(client: Client) -> Run {
        let mut run = Run::program(client.path());
        if client == Client::RuntimePerThread {
            run = run.env("CLIENT_PER_THREAD", "1");
        }
        run
    }

    pub fn program(path: impl Into<PathBuf>) -> Run {
        Run {
            program: path.into(),
            arg0: None,
            args: Vec::new(),
            env: Vec::new(),
            preload: true,
            broken_stderr: false,
            merged: false,
            cwd: None,
            timeout: TIMEOUT,
            user: None,
            core_dumps: false,
        }
    }

    /// Lets the program dump core where the kernel's core_pattern says (RLIMIT_CORE raised).
    pub fn core_dumps(mut self) -> Run {
        self.core_dumps = true;
        self
    }

    /// Runs the program as user `uid` with group `gid` and supplementary `groups` (the test
    /// must be root; the program, the shim and the interposer must be where that user can
    /// read them).
    pub fn user(mut self, uid: u32, gid: u32, groups: &[u32]) -> Run {
        self.user = Some((uid, gid, groups.to_vec()));
        self
    }

    /// Appends ops (or arguments), given as one whitespace-separated string.
    pub fn ops(mut self, ops: &str) -> Run {
        self.args.extend(ops.split_whitespace().map(str::to_string));
        self
    }

    /// Gives the program this argv[0] (it still runs the program's file): a command line
    /// of any bytes but NUL, as /proc/PID/cmdline shows it.
    pub fn arg0(mut self, arg0: impl Into<OsString>) -> Run {
        self.arg0 = Some(arg0.into());
        self
    }

    pub fn arg(mut self, arg: &str) -> Run {
        self.args.push(arg.to_string());
        self
    }

    pub fn args(mut self, args: &[&str]) -> Run {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Run {
        self.env.push((key.into(), value.into()));
        self
    }

    /// A variable whose value need not be UTF-8.
    pub fn env_os(mut self, key: &str, value: impl Into<OsString>) -> Run {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Gives the program a stderr pipe whose reading end is closed before it starts.
    pub fn broken_stderr(mut self) -> Run {
        self.broken_stderr = true;
        self
    }

    /// Sends stderr into stdout's pipe, so that `Output::stdout` shows the program's lines
    /// and cuquota's in the order they were written (`Output::stderr` is then empty).
    pub fn merged(mut self) -> Run {
        self.merged = true;
        self
    }

    pub fn envs(mut self, vars: &[(&str, &str)]) -> Run {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }

    /// Runs without LD_PRELOAD: the shim alone.
    pub fn no_preload(mut self) -> Run {
        self.preload = false;
        self
    }

    pub fn cwd(mut self, dir: &Path) -> Run {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    /// How long the program may run before it is killed (default [`TIMEOUT`]).
    pub fn timeout(mut self, limit: Duration) -> Run {
        self.timeout = limit;
        self
    }

    /// Runs the program; a program killed at the timeout fails the test.
    pub fn run(self) -> Output {
        let limit = self.timeout;
        let out = self.run_allowing_timeout();
        assert!(!out.timed_out, "killed after {limit:?}:\n{out}");
        out
    }

    /// Runs the program; one killed at the timeout comes back with `timed_out` set.
    pub fn run_allowing_timeout(self) -> Output {
        self.start().wait()
    }

    /// Starts the program and returns at once: for tests that watch its output as it runs,
    /// kill it, or run several at the same time. [`Running::wait`] still enforces the
    /// timeout, counted from here.
    pub fn start(self) -> Running {
        let art = artifacts();
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args).stdin(Stdio::null());
        if let Some(arg0) = &self.arg0 {
            use std::os::unix::process::CommandExt;
            cmd.arg0(arg0);
        }
        let mut merged = None;
        if self.merged {
            let (reader, writer) = std::io::pipe().expect("a pipe");
            cmd.stdout(writer.try_clone().expect("a pipe's copy"))
                .stderr(writer);
            merged = Some(reader);
        } else {
            cmd.stdout(Stdio::piped()).stderr(if self.broken_stderr {
                broken_pipe()
            } else {
                Stdio::piped()
            });
        }
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if k.starts_with("CUQUOTA_")
                || k.starts_with("CUDA_SHIM_")
                || k == "LD_PRELOAD"
                || k == "LD_LIBRARY_PATH"
                || k == "CLIENT_PER_THREAD"
                || k == "CUDA_VISIBLE_DEVICES"
            {
                cmd.env_remove(&key);
            }
        }
        cmd.env("LD_LIBRARY_PATH", &art.shim_dir);
        if self.preload {
            cmd.env("LD_PRELOAD", &art.interposer);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        if self.core_dumps {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; the limit is built before the fork.
            unsafe {
                cmd.pre_exec(|| {
                    let unlimited = libc::rlimit {
                        rlim_cur: libc::RLIM_INFINITY,
                        rlim_max: libc::RLIM_INFINITY,
                    };
                    libc::setrlimit(libc::RLIMIT_CORE, &unlimited);
                    Ok(())
                });
            }
        }
        if let Some((uid, gid, groups)) = self.user.clone() {
            use std::os::unix::process::CommandExt;
            let groups: Vec<libc::gid_t> = groups.into_iter().collect();
            // SAFETY: between fork and exec only async-signal-safe calls are made (setgroups,
            // setgid, setuid), on data prepared before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let description = self.describe();

        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {description}: {e}"));
        // Our copies of a merged pipe's writing end go with `cmd`, so that it ends with the
        // program.
        drop(cmd);
        let lines: SharedLines = Default::default();
        let stdout = match (merged, child.stdout.take()) {
            (Some(pipe), _) => line_reader(pipe, lines.clone()),
            (None, pipe) => line_reader(pipe.unwrap(), lines.clone()),
        };
        let stderr = match child.stderr.take() {
            Some(pipe) => reader(pipe),
            None => thread::spawn(String::new),
        };
        Running {
            description,
            pid: child.id(),
            child,
            deadline: Instant::now() + self.timeout,
            lines,
            stdout,
            stderr,
        }
    }

    fn describe(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.env {
            s.push_str(&format!("{}={v:?} ", k.to_string_lossy()));
        }
        if !self.preload {
            s.push_str("(no LD_PRELOAD) ");
        }
        if let Some((uid, gid, _)) = &self.user {
            s.push_str(&format!("(as uid {uid} gid {gid}) "));
        }
        s.push_str(&self.program.display().to_string());
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// The writing end of a pipe whose reading end is already closed.
fn broken_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 returns.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the reading end is ours and closed once; the writing end is owned by Stdio.
    unsafe {
        libc::close(fds[0]);
        Stdio::from(<std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1]))
    }
}

/// A program started by [`Run::start`], still running or not yet waited for.
pub struct Running {
    description: String,
    pid: u32,
    child: std::process::Child,
    deadline: Instant,
    /// The stdout lines read so far, and a wake-up for [`Running::wait_for`].
    lines: SharedLines,
    stdout: thread::JoinHandle<String>,
    stderr: thread::JoinHandle<String>,
}

type SharedLines = std::sync::Arc<(std::sync::Mutex<Vec<String>>, std::sync::Condvar)>;

impl Running {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits (until the run's deadline) for a stdout line that `wanted` accepts and returns
    /// it; fails the test, with what the program said, if none comes or it ends first.
    pub fn wait_for(&mut self, wanted: impl Fn(&Line) -> bool) -> Line {
        let (lock, cond) = &*self.lines;
        let mut seen = 0;
        let mut lines = lock.lock().unwrap();
        loop {
            while seen < lines.len() {
                let line = Line::parse(&lines[seen]);
                seen += 1;
                if wanted(&line) {
                    return line;
                }
            }
            let now = Instant::now();
            // Ended, and every line it wrote read.
            let ended = self.stdout.is_finished() && self.child.try_wait().unwrap().is_some();
            if now >= self.deadline || ended {
                drop(lines);
                let why = if ended { "it ended" } else { "the timeout" };
                self.kill();
                let out = self.finish(false);
                panic!("the line waited for never came ({why}):\n{out}");
            }
            let wait = (self.deadline - now).min(Duration::from_millis(20));
            lines = cond.wait_timeout(lines, wait).unwrap().0;
        }
    }

    /// Whether the program has ended (it is reaped, but its output is read only by
    /// [`Running::wait`]: a child it left behind may still hold its pipes).
    pub fn has_ended(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// SIGKILL, at once (the program is reaped by [`Running::wait`]).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Waits for the program to end (killing it at the deadline: `timed_out`).
    pub fn wait(mut self) -> Output {
        let timed_out = loop {
            if self.child.try_wait().unwrap().is_some() {
                break false;
            }
            if Instant::now() >= self.deadline {
                let _ = self.child.kill();
                break true;
            }
            thread::sleep(Duration::from_millis(5));
        };
        self.finish(timed_out)
    }

    fn finish(&mut self, timed_out: bool) -> Output {
        let status = self.child.wait().unwrap();
        let stdout = std::mem::replace(&mut self.stdout, thread::spawn(String::new));
        let stderr = std::mem::replace(&mut self.stderr, thread::spawn(String::new));
        let stdout = stdout.join().unwrap();
        let stderr = stderr.join().unwrap();
        Output {
            description: self.description.clone(),
            pid: self.pid,
            status,
            timed_out,
            lines: stdout.lines().map(Line::parse).collect(),
            stdout,
            stderr: stderr.lines().map(str::to_string).collect(),
        }
    }
}

impl Drop for Running {
    /// A program left running by a failed test is killed, never left behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads `pipe` to its end, a line at a time into `lines` (waking waiters), and returns it all.
fn line_reader(pipe: impl Read + Send + 'static, lines: SharedLines) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        let mut pipe = std::io::BufReader::new(pipe);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match pipe.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    all.push_str(&text);
                    if text.ends_with('\n') {
                        let (lock, cond) = &*lines;
                        lock.lock()
                            .unwrap()
                            .push(text.trim_end_matches('\n').to_string());
                        cond.notify_all();
                    }
                }
            }
        }
        all
    })
}

fn reader(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Runs `client` under the interposer with `ops` (whitespace-separated) and extra `env`.
pub fn run(client: Client, ops: &str, env: &[(&str, &str)]) -> Output {
    Run::client(client).ops(ops).envs(env).run()
}

/// As [`run`], without LD_PRELOAD.
pub fn run_raw(client: Client, ops: &str, env: &[(&str, &str)]) -> Output {
    Run::client(client).ops(ops).envs(env).no_preload().run()
}

// ---------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------

/// One stdout line: `name [positional...] key=value...`.
#[derive(Clone, Debug)]
pub struct Line {
    pub raw: String,
    pub op: String,
    pub args: Vec<String>,
    pub kv: BTreeMap<String, String>,
}

impl Line {
    fn parse(raw: &str) -> Line {
        let mut words = raw.split_whitespace();
        let op = words.next().unwrap_or("").to_string();
        let mut args = Vec::new();
        let mut kv = BTreeMap::new();
        for w in words {
            match w.split_once('=') {
                Some((k, v)) => {
                    kv.insert(k.to_string(), v.to_string());
                }
                None => args.push(w.to_string()),
            }
        }
        Line {
            raw: raw.to_string(),
            op,
            args,
            kv,
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.kv.get(key).map(String::as_str)
    }

    /// A numeric value (decimal, or hex with 0x).
    pub fn num(&self, key: &str) -> Option<u64> {
        let v = self.get(key)?;
        match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => v.parse().ok(),
        }
    }
}

pub struct Output {
    pub description: String,
    pub pid: u32,
    pub status: ExitStatus,
    /// Killed at the run's timeout.
    pub timed_out: bool,
    pub stdout: String,
    /// Every stdout line, parsed (including the runtime client's `lookup` lines).
    pub lines: Vec<Line>,
    pub stderr: Vec<String>,
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "--- {} (pid {}, {})",
            self.description, self.pid, self.status
        )?;
        writeln!(f, "--- stdout:")?;
        for l in &self.lines {
            if l.op != "lookup" {
                writeln!(f, "  {}", l.raw)?;
            }
        }
        writeln!(f, "--- stderr:")?;
        for l in &self.stderr {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

impl Output {
    /// The op lines (without the runtime client's start-up `lookup` lines).
    pub fn ops(&self) -> Vec<&Line> {
        self.lines.iter().filter(|l| l.op != "lookup").collect()
    }

    /// The `lookup` lines of the runtime client.
    pub fn lookups(&self) -> Vec<&Line> {
        self.lines.iter().filter(|l| l.op == "lookup").collect()
    }

    /// The i-th op line, which must be op `name`.
    pub fn op(&self, i: usize, name: &str) -> &Line {
        let ops = self.ops();
        let line = ops
            .get(i)
            .copied()
            .unwrap_or_else(|| panic!("no op line #{i}:\n{self}"));
        assert_eq!(line.op, name, "op line #{i} is not {name}:\n{self}");
        line
    }

    /// Checks the i-th op line is `name` with these exact numeric values.
    pub fn check(&self, i: usize, name: &str, expected: &[(&str, u64)]) -> &Line {
        let line = self.op(i, name);
        for &(key, want) in expected {
            let got = line.num(key);
            assert_eq!(
                got,
                Some(want),
                "op line #{i} ({}): {key}:\n{self}",
                line.raw
            );
        }
        line
    }

    /// A numeric value of the i-th op line.
    pub fn value(&self, i: usize, name: &str, key: &str) -> u64 {
        let line = self.op(i, name);
        line.num(key)
            .unwrap_or_else(|| panic!("op line #{i} has no numeric {key}:\n{self}"))
    }

    /// The rc of every op line that has one, in order.
    pub fn rcs(&self) -> Vec<u64> {
        self.ops().iter().filter_map(|l| l.num("rc")).collect()
    }

    pub fn check_rcs(&self, expected: &[u64]) {
        assert_eq!(self.rcs(), expected, "rc sequence:\n{self}");
    }

    pub fn check_exit(&self, code: i32) {
        assert_eq!(self.status.code(), Some(code), "exit status:\n{self}");
    }

    /// `cuquota[PID]: ` for this child.
    pub fn prefix(&self) -> String {
        format!("cuquota[{}]: ", self.pid)
    }

    /// The stderr lines written by cuquota (any line starting `cuquota[`).
    pub fn cuquota_lines(&self) -> Vec<&str> {
        self.stderr
            .iter()
            .map(String::as_str)
            .filter(|l| l.starts_with("cuquota["))
            .collect()
    }

    /// Asserts stderr has exactly this line (the `cuquota[PID]: ` prefix added) once.
    pub fn check_log(&self, body: &str) {
        let want = format!("{}{body}", self.prefix());
        let n = self.stderr.iter().filter(|l| **l == want).count();
        assert_eq!(n, 1, "expected once on stderr:\n  {want}\n{self}");
    }

    /// The cuquota lines starting with `cuquota[PID]: <start>`.
    pub fn logs_starting(&self, start: &str) -> Vec<&str> {
        let want = format!("{}{start}", self.prefix());
        self.cuquota_lines()
            .into_iter()
            .filter(|l| l.starts_with(&want))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Formatting as cuquota does
// ---------------------------------------------------------------------------------------

/// `cuquota ARGS…` (the built CLI), in `cwd` when given; it must exit 0 (else the test
/// fails with its stderr). Its output.
pub fn cuquota_ok(args: &[&str], cwd: Option<&Path>) -> std::process::Output {
    let mut command = Command::new(&artifacts().cli);
    command.args(args);
    if let Some(dir) = cwd {
        command.current_dir(dir);
    }
    let out = command.output().expect("run cuquota");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cuquota {args:?}: {stderr}");
    out
}

/// A trace's path as `cuquota plot`'s title names it: clipped from its start to 43
/// characters.
pub fn plot_title_path(p: &Path) -> String {
    let p = p.display().to_string();
    let n = p.chars().count();
    if n <= 43 {
        p
    } else {
        format!("…{}", p.chars().skip(n - 42).collect::<String>())
    }
}

/// A human size: `"{x} B"` below 1 KiB, else the largest of KiB/MiB/GiB/TiB not above it,
/// with exactly two decimals.
pub fn h(x: u64) -> String {
    if x < KIB {
        return format!("{x} B");
    }
    let units = [
        ("TiB", 1u64 << 40),
        ("GiB", GIB),
        ("MiB", MIB),
        ("KiB", KIB),
    ];
    let (name, unit) = units.iter().find(|(_, u)| x >= *u).unwrap();
    format!("{:.2} {name}", x as f64 / *unit as f64)
}
