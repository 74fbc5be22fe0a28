//! The bounded event buffer and the background thread that empties it into the file.
//!
//! Hooks push into a preallocated `Vec` under a mutex held only for the push (no
//! allocation, no syscall); when it is full the event is dropped and counted. The writer
//! thread swaps the buffer out every `period` (or sooner when woken), formats the batch and
//! writes whole lines with write(2), so a killed process leaves only complete lines, all
//! but the last `period` of them on disk.

use super::encode::{dropped_line, module_line, stack_line, Encoder};
use super::tally::Tally;
use super::{Event, EventKind, Stamped};
use crate::sys::{monotonic_ns, thread_id};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

pub struct Options {
    /// Events the buffer holds before new ones are dropped.
    pub capacity: usize,
    /// How often the writer drains the buffer.
    pub period: Duration,
    /// Wake the writer early when the buffer is half full (off only in tests, to make
    /// dropping deterministic).
    pub wake_when_half_full: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            capacity: 1 << 16,
            period: Duration::from_millis(50),
            wake_when_half_full: true,
        }
    }
}

struct Queue {
    events: Vec<Stamped>,
    /// Set by `finish` (or the signal path): later events are ignored.
    closed: bool,
}

/// One trace: its buffer, file and writer thread. Leaked once started (`&'static`), so that
/// a hook racing with exit or fork never sees it freed.
pub struct Tracer {
    queue: Mutex<Queue>,
    capacity: usize,
    /// Buffer length at which `record` wakes the writer (never when `usize::MAX`).
    wake_at: usize,
    dropped: AtomicU64,
    /// CLOCK_MONOTONIC at start; `t_ns` counts from here.
    start_mono_ns: u64,
    pub(super) fd: i32,
    /// An eventfd that wakes the writer early (finish, a signal's end, half-full buffer).
    pub(super) wake_fd: i32,
    /// The signal that is ending the process, for the summary's `end` (0: none).
    signal: AtomicI32,
    /// The writer has written its last line and stopped.
    done: Mutex<bool>,
    done_cv: Condvar,
    done_flag: AtomicBool,
    path: String,
}

impl Tracer {
    /// Takes ownership of `fd` (header already written; closed on error) and starts the
    /// writer thread.
    /// The file the trace is written to.
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn spawn(
        fd: i32,
        path: String,
        start_mono_ns: u64,
        quotas: Vec<(u32, Option<u64>)>,
        options: Options,
    ) -> Result<&'static Tracer, String> {
        // SAFETY: eventfd has no memory preconditions.
        let wake_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake_fd < 0 {
            // SAFETY: fd is ours and unused elsewhere.
            unsafe { libc::close(fd) };
            return Err(format!(
                "trace: eventfd failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        let capacity = options.capacity.max(1);
        let tracer: &'static Tracer = Box::leak(Box::new(Tracer {
            queue: Mutex::new(Queue {
                events: Vec::with_capacity(capacity),
                closed: false,
            }),
            capacity,
            wake_at: if options.wake_when_half_full {
                capacity / 2
            } else {
                usize::MAX
            },
            dropped: AtomicU64::new(0),
            start_mono_ns,
            fd,
            wake_fd,
            signal: AtomicI32::new(0),
            done: Mutex::new(false),
            done_cv: Condvar::new(),
            done_flag: AtomicBool::new(false),
            path,
        }));
        let period = options.period;
        let spawned = with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("cuquota-trace".into())
                .spawn(move || tracer.run(Tally::new(quotas), period))
        });
        match spawned {
            Ok(_) => Ok(tracer),
            Err(e) => {
                // SAFETY: both fds are ours and no thread uses them (the writer never ran).
                unsafe {
                    libc::close(wake_fd);
                    libc::close(fd);
                }
                Err(format!("trace: cannot start the writer thread: {e}"))
            }
        }
    }

    /// Appends `ev`; drops and counts it when the buffer is full. Never blocks on I/O.
    pub fn record(&self, ev: Event) {
        self.record_with(|| ev);
    }

    /// As [`Self::record`], the event made by `make` in its place in the queue: a hook's
    /// event is moved once, not copied again on the way here (bench/README.md).
    #[inline(always)]
    pub fn record_with(&self, make: impl FnOnce() -> Event) {
        let tid = thread_id();
        let mut q = self.queue.lock();
        if q.closed {
            return;
        }
        if q.events.len() >= self.capacity {
            drop(q);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Stamped under the lock, so that lines are in time order in the file.
        let t_ns = self.now_ns();
        q.events.push(Stamped {
            t_ns,
            tid,
            ev: make(),
        });
        let wake = q.events.len() == self.wake_at;
        drop(q);
        if wake {
            self.wake();
        }
    }

    /// Takes events recorded before this tracer was published (they come first), stamped
    /// with absolute CLOCK_MONOTONIC times.
    pub fn adopt(&self, mut events: Vec<Stamped>, dropped: u64) {
        for s in &mut events {
            s.t_ns = s.t_ns.saturating_sub(self.start_mono_ns);
        }
        self.queue.lock().events.extend(events);
        self.dropped.fetch_add(dropped, Ordering::Relaxed);
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Closes the buffer, lets the writer write the rest and the summary, and waits for it
    /// at most `timeout`. Returns whether it finished in time.
    pub fn finish(&self, timeout: Duration) -> bool {
        {
            // The exit handler may run on a thread that holds the queue (exit from a signal
            // handler inside a hook): then the writer cannot drain it either; give up.
            let Some(mut q) = self.queue.try_lock_for(timeout) else {
                return false;
            };
            if q.closed {
                drop(q);
                return self.done_flag.load(Ordering::Acquire);
            }
            q.closed = true;
        }
        self.wake();
        let mut done = self.done.lock();
        if !*done {
            self.done_cv.wait_for(&mut done, timeout);
        }
        *done
    }

    /// SIGTERM/SIGINT `sig` ends the process: the writer writes the rest and a summary whose
    /// `end` names the signal; waits for it at most `timeout`. Returns whether it finished.
    pub fn finish_on_signal(&self, sig: i32, timeout: Duration) -> bool {
        let _ = self
            .signal
            .compare_exchange(0, sig, Ordering::AcqRel, Ordering::Acquire);
        self.wake();
        let mut done = self.done.lock();
        if !*done {
            self.done_cv.wait_for(&mut done, timeout);
        }
        *done
    }

    fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.start_mono_ns)
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd (EAGAIN when saturated is fine).
        unsafe { libc::write(self.wake_fd, (&one as *const u64).cast(), 8) };
    }

    /// Waits for a wake-up or the period, whichever comes first.
    fn sleep(&self, period: Duration) {
        let mut pfd = libc::pollfd {
            fd: self.wake_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = period.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: pfd is one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, ms) } > 0 {
            let mut count: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
            unsafe { libc::read(self.wake_fd, (&mut count as *mut u64).cast(), 8) };
        }
    }

    /// The writer thread's body.
    fn run(&'static self, tally: Tally, period: Duration) {
        let mut state = WriterState {
            encoder: Encoder::default(),
            tally,
            out: Vec::with_capacity(1 << 20),
            batch: Vec::with_capacity(self.capacity),
            dropped_written: 0,
            failed: false,
            stacks_written: 0,
            new_stacks: Vec::new(),
            modules_written: Vec::new(),
        };
        // A panic here must not take the host down, nor leave `finish` waiting.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
            self.sleep(period);
            let sig = self.signal.load(Ordering::Acquire);
            let closed = {
                let mut q = self.queue.lock();
                if sig != 0 {
                    q.closed = true;
                }
                std::mem::swap(&mut q.events, &mut state.batch);
                q.closed
            };
            self.write_batch(&mut state);
            if closed {
                let end = match sig {
                    0 => "exit",
                    libc::SIGTERM => "SIGTERM",
                    libc::SIGINT => "SIGINT",
                    _ => "signal",
                };
                self.write_summary(&mut state, end);
                return;
            }
        }));
        self.done_flag.store(true, Ordering::Release);
        *self.done.lock() = true;
        self.done_cv.notify_all();
    }

    fn write_batch(&self, st: &mut WriterState) {
        let dropped = self.dropped();
        if dropped > st.dropped_written {
            dropped_line(&mut st.out, self.now_ns(), dropped - st.dropped_written);
            st.dropped_written = dropped;
        }
        self.write_stacks(st);
        // By reference, then cleared: cheaper than moving each event out with `drain`.
        for s in &st.batch {
            if st.failed {
                break;
            }
            st.encoder.event_line(&mut st.out, s);
            st.tally.add(s);
            if st.out.len() >= 1 << 20 {
                self.flush(&mut st.out, &mut st.failed);
            }
        }
        st.batch.clear();
        self.flush(&mut st.out, &mut st.failed);
    }

    /// The stacks interned since the last batch, and the modules loaded since, before the
    /// events that name them (each of this batch's was interned before it was recorded).
    /// Every new one is written, also those whose events were dropped.
    fn write_stacks(&self, st: &mut WriterState) {
        if crate::stacks::depth() == 0 {
            return;
        }
        // Only when an event names a stack not written yet (ids grow: the highest tells).
        let named = st
            .batch
            .iter()
            .map(|s| match s.ev.kind {
                EventKind::Alloc { stack } => stack,
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        if named <= st.stacks_written {
            return;
        }
        st.new_stacks.clear();
        let now = crate::stacks::since(st.stacks_written, &mut st.new_stacks);
        if now == st.stacks_written {
            return;
        }
        st.stacks_written = now;
        // Stamped as the batch's first event, so that the file stays in time order.
        let t_ns = st.batch.first().map_or_else(|| self.now_ns(), |s| s.t_ns);
        for m in crate::stacks::modules::loaded() {
            let key = (m.path.clone(), m.bias);
            if !st.modules_written.contains(&key) {
                module_line(&mut st.out, t_ns, &m);
                st.modules_written.push(key);
            }
        }
        for (id, frames) in &st.new_stacks {
            stack_line(&mut st.out, t_ns, *id, frames);
        }
    }

    fn write_summary(&self, st: &mut WriterState, end: &str) {
        let summary = st.tally.summary(self.now_ns(), end, self.dropped());
        if serde_json::to_writer(&mut st.out, &summary).is_ok() {
            st.out.push(b'\n');
        }
        self.flush(&mut st.out, &mut st.failed);
    }

    /// Writes the buffered lines; on the first failure warns once and stops writing.
    fn flush(&self, out: &mut Vec<u8>, failed: &mut bool) {
        if !*failed {
            if let Err(e) = write_all(self.fd, out) {
                *failed = true;
                crate::log::line(&format!(
                    "trace file \"{}\": write failed ({e}); the trace stops here",
                    self.path
                ));
            }
        }
        out.clear();
    }
}

struct WriterState {
    encoder: Encoder,
    tally: Tally,
    out: Vec<u8>,
    /// The buffer swapped in and out of the queue (keeps its capacity: no reallocation).
    batch: Vec<Stamped>,
    dropped_written: u64,
    failed: bool,
    /// Stacks written so far (ids 1 to this).
    stacks_written: u32,
    new_stacks: Vec<(u32, Vec<u64>)>,
    /// Modules written: (path, load bias).
    modules_written: Vec<(String, u64)>,
}

pub use crate::output::write_all;

/// Runs `f` (a thread spawn) with every signal blocked, so the new thread inherits a full
/// mask and never runs a host's signal handler.
fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigset_t values are plain data initialised by sigfillset/pthread_sigmask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let result = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        result
    }
}
