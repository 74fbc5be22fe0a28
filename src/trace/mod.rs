//! The allocation trace (`CUQUOTA_TRACE=PATH`): a JSON Lines record of every device-memory
//! event, written off the hot path by a background thread so that it survives a crash.
//!
//! Life cycle: the core calls [`start`] just before the first event, [`record`] from the
//! hooks, and [`finish`] from its exit handler. SIGTERM/SIGINT flush before the default
//! action (see `signals`); after `fork()` the child forgets the parent's trace and may
//! [`start`] its own.

pub mod schema;

mod encode;
mod path;
mod signals;
mod writer;

use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};
use std::time::Duration;
use writer::{Options, Tracer};

/// One device-memory event as a hook sees it. Cheap to build: no heap allocation except
/// `Backoff`.
pub struct Event {
    pub kind: EventKind,
    pub device: i32,
    /// The driver entry point, e.g. `"cuMemAlloc_v2"`.
    pub api: &'static str,
    /// Device pointer or `cuMemCreate` handle (0 if none).
    pub ptr: u64,
    pub bytes: u64,
    /// The `CUresult` returned to the caller.
    pub result: u32,
    /// Bytes charged on that device after the event.
    pub in_use: u64,
}

pub enum EventKind {
    Alloc,
    Free,
    /// Reason `"quota"`, or `"driver"` when the driver itself refused.
    Refused {
        by_driver: bool,
    },
    MemInfo {
        told_free: u64,
        told_total: u64,
        real_free: u64,
        real_total: u64,
    },
    /// Refused sizes in order, then the size that succeeded.
    Backoff {
        sizes: Box<[u64]>,
    },
}

pub struct DeviceInfo {
    pub ordinal: i32,
    pub name: String,
    pub total: u64,
    pub quota: Option<u64>,
}

pub struct StartInfo {
    /// `"enforce"` or `"observe"`.
    pub mode: &'static str,
    pub devices: Vec<DeviceInfo>,
}

/// The running trace of this process; null when off (never started, failed, or reset in a
/// forked child). Tracers are leaked, so a non-null pointer stays valid forever.
static CURRENT: AtomicPtr<Tracer> = AtomicPtr::new(std::ptr::null_mut());

const OFF: u8 = 0;
const STARTING: u8 = 1;
const ON: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(OFF);

/// How long `finish` waits for the writer.
const FINISH_TIMEOUT: Duration = Duration::from_secs(1);

fn current() -> Option<&'static Tracer> {
    // SAFETY: CURRENT only ever holds null or a leaked, never-freed Tracer.
    unsafe { CURRENT.load(Ordering::Acquire).as_ref() }
}

/// Turns tracing on. `template` is the `CUQUOTA_TRACE` value. On failure returns the message
/// for the one warning; events are then ignored. A second call while a trace runs is a no-op.
pub fn start(template: &str, info: StartInfo) -> Result<(), String> {
    if STATE
        .compare_exchange(OFF, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Ok(());
    }
    match open(template, &info, Options::default()) {
        Ok(tracer) => {
            CURRENT.store((tracer as *const Tracer).cast_mut(), Ordering::Release);
            STATE.store(ON, Ordering::Release);
            install_process_hooks();
            Ok(())
        }
        Err(e) => {
            STATE.store(OFF, Ordering::Release);
            Err(e)
        }
    }
}

/// Appends an event. Never blocks on disk or allocates; stamps the time since start and the
/// OS thread id. A no-op when no trace runs.
pub fn record(ev: Event) {
    if let Some(tracer) = current() {
        tracer.record(ev);
    }
}

/// From the exit handler: writes what is buffered and the summary line, and stops the writer,
/// waiting at most one second. Later `record` calls are ignored.
pub fn finish() {
    if let Some(tracer) = current() {
        if !tracer.finish(FINISH_TIMEOUT) {
            crate::log::warn(
                "trace: the writer did not finish within 1 s; the trace may lack its last events",
            );
        }
    }
}

/// Events dropped because the buffer was full.
pub fn dropped() -> u64 {
    current().map_or(0, Tracer::dropped)
}

/// Creates the file, writes the header and starts a writer. Separate from the global state
/// so that tests can run several tracers in one process.
fn open(template: &str, info: &StartInfo, options: Options) -> Result<&'static Tracer, String> {
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let start_mono_ns = writer::monotonic_ns();
    let vars = path::Vars {
        pid: std::process::id(),
        host: path::host_name(),
        rank: path::rank(|name| std::env::var(name).ok()),
        start_unix_secs: start_unix_ns / 1_000_000_000,
    };
    let file = path::expand(template, &vars)?;
    let (fd, file) = path::create(&file)?;
    let header = schema::Header {
        kind: schema::kind::HEADER.into(),
        schema: schema::SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION").into(),
        pid: vars.pid,
        host: vars.host,
        rank: vars.rank,
        argv: argv(),
        start_unix_ns,
        mode: info.mode.into(),
        devices: info
            .devices
            .iter()
            .map(|d| schema::HeaderDevice {
                ordinal: d.ordinal,
                name: d.name.clone(),
                total: d.total,
                quota: d.quota,
            })
            .collect(),
    };
    let mut line = serde_json::to_vec(&header).map_err(|e| format!("trace header: {e}"))?;
    line.push(b'\n');
    // Written here rather than by the writer, so that a full disk or a dead pipe is one
    // warning at start and a kill right after start still leaves a header.
    if let Err(e) = writer::write_all(fd, &line) {
        // SAFETY: fd is ours; nothing else uses it.
        unsafe { libc::close(fd) };
        return Err(format!("cannot write trace file \"{file}\": {e}"));
    }
    let quotas = info.devices.iter().map(|d| (d.ordinal, d.quota)).collect();
    Tracer::spawn(fd, file, start_mono_ns, quotas, options)
}

fn argv() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Once per process (a forked child inherits both): the fork reset and the signal flush.
fn install_process_hooks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain extern "C" fn with no prepare/parent handlers.
        unsafe { libc::pthread_atfork(None, None, Some(forget_after_fork)) };
        signals::install();
    });
}

/// pthread_atfork child handler: the child has no writer thread, and must not write into the
/// parent's file. Forget the parent's tracer (leaked, untouched: its lock may be held) and
/// close its fds, so that the child's first event starts a trace of its own.
extern "C" fn forget_after_fork() {
    let old = CURRENT.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: a non-null CURRENT is a leaked Tracer; only its plain fd fields are read.
    if let Some(old) = unsafe { old.as_ref() } {
        // SAFETY: the fds belong to the forgotten tracer; nothing in the child uses them.
        unsafe {
            libc::close(old.fd);
            libc::close(old.wake_fd);
        }
    }
    STATE.store(OFF, Ordering::Release);
}

#[cfg(test)]
mod tests;
