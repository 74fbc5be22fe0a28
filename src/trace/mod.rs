//! The allocation trace (`CUQUOTA_TRACE=PATH`): a JSON Lines record of every device-memory
//! event, written off the hot path by a background thread so that it survives a crash.
//!
//! Life cycle: the engine hands every event to [`emit`], which starts the trace at the first
//! one (or holds events back until the driver can name the devices for the header);
//! [`flush_held`] and [`finish`] run from the exit handler. On SIGTERM/SIGINT the watcher
//! thread calls [`finish_on_signal`] before the default action; after `fork()` the process
//! module calls [`reset_in_child`]: the child forgets the parent's trace and starts its own.

use crate::quota::Part;
use cuquota_format::schema;
/// A GPU as the trace's header lists it: the schema's own.
pub use cuquota_format::schema::HeaderDevice;
use std::ffi::OsStr;

mod cursor;
mod encode;
mod path;
mod tally;
mod writer;

use crate::spin::{SpinLock, EXIT_LOCK_ATTEMPTS};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;
use writer::{Options, Tracer};

/// An event with the stamps `record` adds.
pub(crate) struct Stamped {
    pub t_ns: u64,
    pub tid: u32,
    pub ev: Event,
}

/// One device-memory event as a hook sees it. Cheap to build: no heap allocation except
/// `Backoff`.
pub struct Event {
    pub kind: EventKind,
    pub device: u32,
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

impl Event {
    /// A successful allocation of `bytes` at `ptr`.
    pub fn alloc(device: u32, api: &'static str, ptr: u64, bytes: u64, in_use: u64) -> Event {
        Event::ok(EventKind::ALLOC, device, api, ptr, bytes, in_use)
    }

    /// A successful allocation made at the call stack `stack` (an interned id, 0: none).
    #[inline(always)]
    pub fn alloc_at(
        device: u32,
        api: &'static str,
        ptr: u64,
        bytes: u64,
        in_use: u64,
        stack: u32,
    ) -> Event {
        Event::ok(EventKind::Alloc { stack }, device, api, ptr, bytes, in_use)
    }

    /// A successful free of what `ptr` charged.
    pub fn free(device: u32, api: &'static str, ptr: u64, bytes: u64, in_use: u64) -> Event {
        Event::ok(EventKind::Free, device, api, ptr, bytes, in_use)
    }

    /// A request the quota refused (the caller got `CUDA_ERROR_OUT_OF_MEMORY`).
    pub fn refused_by_quota(device: u32, api: &'static str, bytes: u64, in_use: u64) -> Event {
        let kind = EventKind::Refused { by_driver: false };
        Event {
            result: crate::cuda_abi::CuResult::OUT_OF_MEMORY.0,
            ..Event::ok(kind, device, api, 0, bytes, in_use)
        }
    }

    /// A request the quota refused where NVML's figure for this process could not be read
    /// (`why`: plain words, no character JSON escapes).
    pub fn unreconciled_refusal(
        device: u32,
        api: &'static str,
        bytes: u64,
        in_use: u64,
        why: &'static str,
    ) -> Event {
        let kind = EventKind::Unreconciled { why };
        Event {
            result: crate::cuda_abi::CuResult::OUT_OF_MEMORY.0,
            ..Event::ok(kind, device, api, 0, bytes, in_use)
        }
    }

    /// A request the driver failed with `result` (passed on to the caller).
    pub fn refused_by_driver(
        device: u32,
        api: &'static str,
        bytes: u64,
        result: u32,
        in_use: u64,
    ) -> Event {
        let kind = EventKind::Refused { by_driver: true };
        Event {
            result,
            ..Event::ok(kind, device, api, 0, bytes, in_use)
        }
    }

    /// A `cuMemGetInfo`: what the caller was `told` and what the driver said, (free, total).
    pub fn mem_info(
        device: u32,
        api: &'static str,
        told: (u64, u64),
        real: (u64, u64),
        in_use: u64,
    ) -> Event {
        let kind = EventKind::MemInfo {
            told_free: told.0,
            told_total: told.1,
            real_free: real.0,
            real_total: real.1,
        };
        Event::ok(kind, device, api, 0, 0, in_use)
    }

    /// An episode of refusals that ended with the allocation of `bytes` at `ptr`; `sizes`
    /// are the refused sizes in order, then the one that fit.
    pub fn backoff(
        device: u32,
        api: &'static str,
        ptr: u64,
        bytes: u64,
        in_use: u64,
        sizes: Box<[u64]>,
    ) -> Event {
        Event::ok(
            EventKind::Backoff { sizes },
            device,
            api,
            ptr,
            bytes,
            in_use,
        )
    }

    /// A context was destroyed or reset and the driver freed what it held: `bytes` in all,
    /// the allocations `ptrs` (pointers and handles), credited at once.
    pub fn context_freed(
        device: u32,
        api: &'static str,
        bytes: u64,
        in_use: u64,
        ptrs: Box<[u64]>,
    ) -> Event {
        Event::ok(EventKind::Context { ptrs }, device, api, 0, bytes, in_use)
    }

    /// An episode of refusals that ended without memory (the caller gave up); `sizes` are
    /// the refused sizes in order, `bytes` the last of them.
    pub fn gave_up(
        device: u32,
        api: &'static str,
        bytes: u64,
        in_use: u64,
        sizes: Box<[u64]>,
    ) -> Event {
        Event {
            result: crate::cuda_abi::CuResult::OUT_OF_MEMORY.0,
            ..Event::backoff(device, api, 0, bytes, in_use, sizes)
        }
    }

    /// Observe mode: a request the quota would have refused, allowed (`result` is what the
    /// caller would have got in enforce mode).
    pub fn observed_refusal(device: u32, api: &'static str, bytes: u64, in_use: u64) -> Event {
        Event {
            kind: EventKind::Observed,
            ..Event::refused_by_quota(device, api, bytes, in_use)
        }
    }

    /// A refusal by a group's quota (`observed`: in observe mode, the call went ahead, and
    /// `result` is what enforce mode would have returned); `in_use` is this process's own,
    /// `detail` the group's.
    pub fn group_refusal(
        device: u32,
        api: &'static str,
        bytes: u64,
        in_use: u64,
        observed: bool,
        detail: GroupDetail,
    ) -> Event {
        let kind = EventKind::GroupRefused {
            observed,
            detail: Box::new(detail),
        };
        Event {
            result: crate::cuda_abi::CuResult::OUT_OF_MEMORY.0,
            ..Event::ok(kind, device, api, 0, bytes, in_use)
        }
    }

    /// The quota on `device` is now `limit` (was `before`; `crate::quota::UNLIMITED` or
    /// more: none), with `in_use` held.
    pub fn limit(device: u32, limit: u64, before: u64, in_use: u64) -> Event {
        Event::ok(
            EventKind::Limit { limit, before },
            device,
            "cuquota set",
            0,
            0,
            in_use,
        )
    }

    /// A lookup handed out (or, `refused`, did not) `symbol`, a variant of a hooked function
    /// this build does not know, from a driver of version `driver`.
    pub fn unknown_variant(symbol: &'static str, driver: u32, refused: bool) -> Event {
        Event {
            result: if refused {
                crate::cuda_abi::CuResult::NOT_FOUND.0
            } else {
                0
            },
            ..Event::ok(EventKind::UnknownVariant { driver }, 0, symbol, 0, 0, 0)
        }
    }

    /// `part` is now `bytes` on `device` (the whole footprint there: `in_use`).
    pub fn footprint(device: u32, api: &'static str, part: Part, bytes: u64, in_use: u64) -> Event {
        Event::ok(EventKind::Footprint { part }, device, api, 0, bytes, in_use)
    }

    /// cuquota trimmed `part` on `device` and `released` bytes came back, to fit a request
    /// through `api`.
    pub fn trim(device: u32, api: &'static str, part: Part, released: u64, in_use: u64) -> Event {
        Event::ok(EventKind::Trim { part }, device, api, 0, released, in_use)
    }

    fn ok(
        kind: EventKind,
        device: u32,
        api: &'static str,
        ptr: u64,
        bytes: u64,
        in_use: u64,
    ) -> Event {
        Event {
            kind,
            device,
            api,
            ptr,
            bytes,
            result: 0,
            in_use,
        }
    }
}

pub enum EventKind {
    /// `stack`: the interned call stack (`CUQUOTA_STACKS`; 0: none). Here rather than in
    /// `Event`, where it would make every event bigger: the largest variant has room.
    Alloc {
        stack: u32,
    },
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
    /// Observe mode's would-be refusal: a `refused` line with reason `"quota"` and
    /// `"observed":true`.
    Observed,
    /// A refusal by the quota where NVML's figure for this process could not be read
    /// (`why`): a `refused` line with reason `"quota"` and `"unreconciled":why`.
    Unreconciled {
        why: &'static str,
    },
    /// A refusal by a group's quota (observed or not): a `refused` line with reason
    /// `"quota"` whose `in_use` is this process's, and the group's figure and holders.
    GroupRefused {
        observed: bool,
        detail: Box<GroupDetail>,
    },
    /// Refused sizes in order, then the size that succeeded (none when the caller gave up).
    Backoff {
        sizes: Box<[u64]>,
    },
    /// A context's allocations, freed with it (the keys, in no order).
    Context {
        ptrs: Box<[u64]>,
    },
    /// A footprint part is now `bytes` on the device.
    Footprint {
        part: Part,
    },
    /// cuquota trimmed this part and got `bytes` back.
    Trim {
        part: Part,
    },
    /// The quota in force changed (a group's, by `cuquota set`): a `limit` line with the new
    /// limit and the one before (`null`: none).
    Limit {
        limit: u64,
        before: u64,
    },
    /// A lookup gave (`result` 0) or, refused by the policy, did not give the program a
    /// variant of a hooked function this build does not know (`api`), from a driver of this
    /// version (0: unknown).
    UnknownVariant {
        driver: u32,
    },
}

/// What a refusal by a group's quota adds to its trace line.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDetail {
    /// The group's name.
    pub name: String,
    /// What the group held then (the request not included), and its limit.
    pub in_use: u64,
    pub limit: u64,
    /// Who held it besides this process, most first (empty unless the refusal's line was
    /// printed: the first of a back-off episode, a context or a graph).
    pub holders: Vec<cuquota_format::holder::Holder>,
    /// Why NVML's figure for this process could not be read (see
    /// [`Event::unreconciled_refusal`]), if it could not.
    pub unreconciled: Option<&'static str>,
}

impl GroupDetail {
    /// `,"group":"…","group_in_use":…,"group_limit":…,"holders":[…]` (and `"unreconciled"`
    /// where NVML's figure could not be read), the tail of its
    /// `refused` line.
    pub fn json_fields(&self) -> String {
        let name = serde_json::to_string(&self.name).unwrap_or_else(|_| "\"\"".into());
        let holders = serde_json::to_string(&self.holders).unwrap_or_else(|_| "[]".into());
        let unreconciled = match self.unreconciled {
            Some(why) => format!(",\"unreconciled\":\"{why}\""),
            None => String::new(),
        };
        format!(
            ",\"group\":{name},\"group_in_use\":{},\"group_limit\":{},\"holders\":{holders}\
             {unreconciled}",
            self.in_use, self.limit
        )
    }
}

impl EventKind {
    /// An allocation without a call stack.
    pub const ALLOC: EventKind = EventKind::Alloc { stack: 0 };
}

/// What the header needs; asked for only when the trace is about to start.
pub struct StartInfo {
    /// `"enforce"` or `"observe"`.
    pub mode: &'static str,
    /// `"footprint"` or `"allocations"`.
    pub count: &'static str,
    /// Empty while the driver cannot name its devices (before `cuInit`).
    pub devices: Vec<HeaderDevice>,
    /// The group whose quota the process shares (`CUQUOTA_GROUP`).
    pub group: Option<String>,
}

/// The running trace of this process; null when off (never started, failed, or reset in a
/// forked child). Tracers are leaked, so a non-null pointer stays valid forever.
static CURRENT: AtomicPtr<Tracer> = AtomicPtr::new(std::ptr::null_mut());

const OFF: u8 = 0;
const STARTING: u8 = 1;
const ON: u8 = 2;
/// Events are kept (see [`hold`]) for a trace that cannot be opened yet.
const HOLDING: u8 = 3;
/// The start failed (one warning said so): events are ignored, in this process.
const FAILED: u8 = 4;
static STATE: AtomicU8 = AtomicU8::new(OFF);

/// Events recorded while `start` runs (creating the file and the writer takes a while) or
/// while the trace is held back (before `cuInit`): handed to the tracer when it is published,
/// so that none is lost. A spin lock, so that a forked child can simply clear it.
static PENDING: SpinLock<Vec<Stamped>> = SpinLock::new(Vec::new());
/// At most this many events wait in `PENDING`; more are dropped and counted.
const PENDING_CAPACITY: usize = 1 << 16;
static PENDING_DROPPED: AtomicU64 = AtomicU64::new(0);

/// How long `finish` waits for the writer.
const FINISH_TIMEOUT: Duration = Duration::from_secs(1);

fn current() -> Option<&'static Tracer> {
    // SAFETY: CURRENT only ever holds null or a leaked, never-freed Tracer.
    unsafe { CURRENT.load(Ordering::Acquire).as_ref() }
}

/// Appends `ev`, starting the trace at its first event. `header` gives the `CUQUOTA_TRACE`
/// template and what the header says; it is asked for only when the trace is about to start.
/// While the driver names no device (before `cuInit`) the events are held back with their
/// own times, and each new one tries again. A trace that cannot be written is one warning,
/// then no events.
#[inline]
pub fn emit<'a>(ev: Event, header: impl FnOnce() -> (&'a OsStr, StartInfo)) {
    if let Some(tracer) = current() {
        tracer.record_with(|| ev);
    } else {
        emit_before_start(ev, header);
    }
}

#[cold]
fn emit_before_start<'a>(ev: Event, header: impl FnOnce() -> (&'a OsStr, StartInfo)) {
    if matches!(STATE.load(Ordering::Acquire), OFF | HOLDING) {
        let (template, info) = header();
        if info.devices.is_empty() {
            hold();
        } else {
            start_or_warn(template, info);
        }
    }
    record(ev);
}

/// At exit, before [`finish`]: a trace still holding events (all of them before `cuInit`)
/// starts now with what the driver can tell; a trace of early failures beats none.
pub fn flush_held<'a>(header: impl FnOnce() -> (&'a OsStr, StartInfo)) {
    if holding() {
        // Never wait at exit: the lock's holder may be the thread running the exit handler.
        if PENDING.try_lock_for(EXIT_LOCK_ATTEMPTS).is_none() {
            crate::log::line("trace: the held events were not written (exit during a hook)");
            return;
        }
        let (template, info) = header();
        start_or_warn(template, info);
    }
}

fn start_or_warn(template: &OsStr, info: StartInfo) {
    if let Err(why) = start(template, info) {
        crate::log::line(&format!("trace: {why}; running on without a trace"));
    }
}

/// Turns tracing on. `template` is the `CUQUOTA_TRACE` value. On failure returns the message
/// for the one warning; events are then ignored. A call while a trace runs, or after a start
/// failed, is a no-op.
pub fn start(template: impl AsRef<OsStr>, info: StartInfo) -> Result<(), String> {
    let claimed = [OFF, HOLDING].into_iter().any(|from| {
        STATE
            .compare_exchange(from, STARTING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    });
    if !claimed {
        return Ok(());
    }
    start_claimed(template.as_ref(), &info)
}

/// The trace cannot be opened yet (its header must name the devices, and before `cuInit`
/// the driver cannot): keep events, stamped with their own times, until [`start`].
pub fn hold() {
    let _ = STATE.compare_exchange(OFF, HOLDING, Ordering::AcqRel, Ordering::Acquire);
}

/// Whether events are being held for a trace not started yet.
pub fn holding() -> bool {
    STATE.load(Ordering::Acquire) == HOLDING
}

/// `start` once this thread has moved STATE from OFF or HOLDING to STARTING.
fn start_claimed(template: &OsStr, info: &StartInfo) -> Result<(), String> {
    // The trace starts at its first event: one held back (before `cuInit`) keeps its time.
    let now = crate::sys::monotonic_ns();
    let start = PENDING
        .lock()
        .first()
        .map_or(now, |held| held.t_ns.min(now));
    let opened = open(template, info, start, Options::default());
    let mut pending = PENDING.lock();
    let waiting = std::mem::take(&mut *pending);
    let dropped = PENDING_DROPPED.swap(0, Ordering::AcqRel);
    match opened {
        Ok(tracer) => {
            tracer.adopt(waiting, dropped);
            CURRENT.store((tracer as *const Tracer).cast_mut(), Ordering::Release);
            STATE.store(ON, Ordering::Release);
            drop(pending);
            Ok(())
        }
        Err(e) => {
            STATE.store(FAILED, Ordering::Release);
            Err(e)
        }
    }
}

/// Appends an event. Never blocks on disk or allocates; stamps the time since start and the
/// OS thread id. A no-op when no trace runs.
pub fn record(ev: Event) {
    if let Some(tracer) = current() {
        tracer.record(ev);
    } else if !matches!(STATE.load(Ordering::Acquire), OFF | FAILED) {
        // Starting, or published since CURRENT was read: record_pending sorts it out.
        record_pending(ev);
    }
}

/// While another thread runs `start`, or while held: keep the event for the tracer to come.
#[cold]
fn record_pending(ev: Event) {
    let tid = crate::sys::thread_id();
    let mut pending = PENDING.lock();
    // Published meanwhile (`start` publishes under this lock).
    if let Some(tracer) = current() {
        drop(pending);
        return tracer.record(ev);
    }
    if !matches!(STATE.load(Ordering::Acquire), STARTING | HOLDING) {
        return; // the start failed: events are ignored
    }
    if pending.len() >= PENDING_CAPACITY {
        PENDING_DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // Absolute for now: `adopt` makes it relative to the trace's start.
    let t_ns = crate::sys::monotonic_ns();
    pending.push(Stamped { t_ns, tid, ev });
}

/// From the exit handler: writes what is buffered and the summary line, and stops the writer,
/// waiting at most one second. Later `record` calls are ignored.
pub fn finish() {
    if let Some(tracer) = current() {
        if !tracer.finish(FINISH_TIMEOUT) {
            crate::log::line(
                "trace: the writer did not finish within 1 s; the trace may lack its last events",
            );
        }
    }
}

/// SIGTERM/SIGINT is ending the process (from the watcher thread; the exit handlers will not
/// run): writes what is buffered and the summary line, whose `end` names the signal, and
/// stops the writer, waiting at most `timeout`. Returns whether it finished in time (true
/// when no trace runs).
pub fn finish_on_signal(sig: i32, timeout: Duration) -> bool {
    current().is_none_or(|tracer| tracer.finish_on_signal(sig, timeout))
}

/// The file this process's trace went to, once it was started.
pub fn written_path() -> Option<String> {
    current().map(|t| t.path().to_owned())
}

/// Events dropped because the buffer was full.
pub fn dropped() -> u64 {
    current().map_or(0, Tracer::dropped)
}

/// The template expanded as `open` will expand it, `%t` as of now: what the configuration
/// line at `info` shows. None if it does not expand (the trace will say why when it starts).
pub fn expanded_path(template: &OsStr) -> Option<String> {
    let vars = path::Vars {
        pid: std::process::id(),
        host: crate::sys::host_name(),
        rank: path::rank(|name| std::env::var(name).ok()),
        start_unix_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let path = path::expand(template, &vars).ok()?;
    Some(path.to_string_lossy().into_owned())
}

/// Creates the file, writes the header and starts a writer. Separate from the global state
/// so that tests can run several tracers in one process.
fn open(
    template: impl AsRef<OsStr>,
    info: &StartInfo,
    start_mono_ns: u64,
    options: Options,
) -> Result<&'static Tracer, String> {
    // The wall clock of `start_mono_ns`, which may lie before now (held events).
    let since_start = crate::sys::monotonic_ns().saturating_sub(start_mono_ns);
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        .saturating_sub(since_start);
    let vars = path::Vars {
        pid: std::process::id(),
        host: crate::sys::host_name(),
        rank: path::rank(|name| std::env::var(name).ok()),
        start_unix_secs: start_unix_ns / 1_000_000_000,
    };
    let wanted = path::expand(template.as_ref(), &vars)?;
    let (fd, file) = path::create(&wanted)?;
    let shown = file.to_string_lossy().into_owned();
    if file != wanted {
        // Never overwritten, never followed; but the user must learn where the trace went.
        crate::log::line(&format!(
            "trace: \"{}\" already exists; writing the trace to \"{shown}\"",
            wanted.to_string_lossy()
        ));
    }
    let header = schema::Header {
        kind: schema::kind::HEADER.into(),
        schema: schema::SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION").into(),
        pid: vars.pid,
        host: vars.host,
        rank: vars.rank,
        argv: crate::sys::command_line(),
        start_unix_ns,
        mode: info.mode.into(),
        devices: info.devices.clone(),
        count: Some(info.count.into()),
        group: info.group.clone(),
    };
    let mut line = serde_json::to_vec(&header).map_err(|e| format!("trace header: {e}"))?;
    line.push(b'\n');
    // Written here rather than by the writer, so that a full disk or a dead pipe is one
    // warning at start and a kill right after start still leaves a header.
    if let Err(e) = writer::write_all(fd, &line) {
        // A regular file here is one we just created (O_EXCL): don't leave it behind empty.
        // SAFETY: fd is ours and closed once; `st` is a valid out-parameter.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG {
                let _ = std::fs::remove_file(&file);
            }
            libc::close(fd);
        }
        return Err(format!("cannot write trace file \"{shown}\": {e}"));
    }
    let quotas = info.devices.iter().map(|d| (d.ordinal, d.quota)).collect();
    Tracer::spawn(fd, shown, start_mono_ns, quotas, options)
}

/// In a forked child (from the process module's fork handler): the child has no writer
/// thread, and must not write into the parent's file. Forget the parent's tracer (leaked,
/// untouched: its lock may be held) and close its fds, so that the child's first event starts
/// a trace of its own.
///
/// # Safety
/// Only in the child right after `fork()`, while it has one thread.
pub unsafe fn reset_in_child() {
    let old = CURRENT.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: a non-null CURRENT is a leaked Tracer; only its plain fd fields are read.
    if let Some(old) = unsafe { old.as_ref() } {
        // SAFETY: the fds belong to the forgotten tracer; nothing in the child uses them.
        unsafe {
            libc::close(old.fd);
            libc::close(old.wake_fd);
        }
    }
    // A thread that held PENDING at the fork does not exist here: free the lock and forget
    // (without dropping: it may be mid-update) what the parent had queued.
    // SAFETY: the caller guarantees the child has one thread.
    unsafe { PENDING.reset_in_child(Vec::new()) };
    PENDING_DROPPED.store(0, Ordering::Relaxed);
    STATE.store(OFF, Ordering::Release);
}

#[cfg(test)]
mod tests;
