//! The watcher: one idle thread in every governed process (made with the engine, at the
//! first hooked CUDA call; a forked child gets a fresh one), for what must happen while no
//! hook runs. A process that never calls CUDA has neither the thread nor the handlers.
//!
//! - SIGTERM / SIGINT. A handler is installed only where the disposition is still `SIG_DFL`:
//!   a program's own handler (Python's SIGINT, a trainer's SIGTERM checkpointing) is never
//!   replaced, and such programs usually exit through the normal path, where the exit
//!   handler prints the summary anyway. The handler does only async-signal-safe things
//!   (atomics, write(2) to an eventfd, nanosleep, sigaction, raise): it wakes the watcher,
//!   which ends the open back-off episodes, prints the summary lines and finishes the trace
//!   (its `on_signal` task), and waits for it at most [`FLUSH_WAIT_MS`] before the default
//!   action kills the process.
//! - Back-off episodes whose gap has passed. [`wake`] is called when a refusal opens an
//!   episode; the watcher then sleeps until the earliest open episode's gap has passed and
//!   ends it (its `expire` task), so the outcome line is said when the episode ends, not at
//!   the program's next CUDA call or at exit.
//! - Context memory no call announces (lazy module loading, local memory at a launch): while
//!   a context measured to take memory lives, once a second the footprint is reconciled
//!   with NVML's figure for this process (its `reconcile` task; [`wake`] when a context is
//!   measured starts it). With no episode open and no such context it waits in poll(2)
//!   with no timeout: a program that is never refused and has none never wakes it.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// How long the signal handler waits for the watcher before letting the signal kill the
/// process.
const FLUSH_WAIT_MS: u32 = 200;

/// What the watcher runs; the process module provides both.
pub struct Tasks {
    /// SIGTERM/SIGINT (the signal's number) ends the process: the episodes' outcomes, the
    /// summary lines, the trace's end.
    pub on_signal: fn(i32),
    /// Ends the episodes whose gap has passed; returns when the next open one's gap ends
    /// (CLOCK_MONOTONIC ns), or None when none is open.
    pub expire: fn() -> Option<u64>,
    /// Reconciles context memory with NVML's figure; true while there is context memory to
    /// reconcile (then it runs again in [`RECONCILE_EVERY_NS`]).
    pub reconcile: fn() -> bool,
}

/// How often the watcher reconciles context memory with NVML's figure.
const RECONCILE_EVERY_NS: u64 = 1_000_000_000;

/// The eventfd that wakes the watcher; -1 while there is none (no engine, or the thread
/// could not be made).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// The signal the handler caught (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The watcher has run its `on_signal` task.
static DONE: AtomicBool = AtomicBool::new(false);
/// The handlers were installed (or found taken) in this process; a forked child keeps them.
static HANDLERS: AtomicBool = AtomicBool::new(false);

/// Once, with the engine: the thread, then the handlers (so that a handler never finds no
/// watcher in a process that has one).
pub fn start(tasks: &'static Tasks) {
    spawn(tasks);
    if !HANDLERS.swap(true, Ordering::AcqRel) {
        install_handlers();
    }
}

/// Wakes the watcher to look at the open episodes again (one write(2); a refusal is rare).
pub fn wake() {
    let fd = WAKE_FD.load(Ordering::Acquire);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd (EAGAIN when saturated is
        // fine: it is awake already).
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
}

/// In a forked child of a governed process: the parent's watcher is not here, and its
/// eventfd is shared with the parent. Forget both and make the child's own.
///
/// # Safety
/// Only in the child right after `fork()`, while it has one thread.
pub unsafe fn restart_in_child(tasks: &'static Tasks) {
    let old = WAKE_FD.swap(-1, Ordering::AcqRel);
    if old >= 0 {
        // SAFETY: the parent's eventfd, which nothing in the child uses any more.
        unsafe { libc::close(old) };
    }
    spawn(tasks);
}

/// Makes the eventfd and the thread (every signal blocked in it, so it never runs a
/// handler); on failure one line says what is lost.
fn spawn(tasks: &'static Tasks) {
    SIGNAL.store(0, Ordering::Release);
    DONE.store(false, Ordering::Release);
    // SAFETY: eventfd has no memory preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return cannot_watch(std::io::Error::last_os_error());
    }
    let start = Box::into_raw(Box::new(Start { fd, tasks }));
    // SAFETY: plain pthread calls on local, initialised values; `start` is handed to the
    // thread, which owns it, or freed here if there is no thread.
    let created = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        libc::pthread_attr_setstacksize(&mut attr, STACK_BYTES);
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut thread: libc::pthread_t = 0;
        let rc = libc::pthread_create(&mut thread, &attr, run, start.cast());
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        if rc == 0 {
            libc::pthread_setname_np(thread, c"cuquota-watch".as_ptr());
        }
        rc
    };
    if created != 0 {
        // SAFETY: the thread was not made: `start` and `fd` are still ours alone.
        unsafe {
            drop(Box::from_raw(start));
            libc::close(fd);
        }
        return cannot_watch(std::io::Error::from_raw_os_error(created));
    }
    WAKE_FD.store(fd, Ordering::Release);
}

/// The watcher's stack: it formats log lines and nothing deeper.
const STACK_BYTES: usize = 256 << 10;

fn cannot_watch(why: std::io::Error) {
    crate::log::line(&format!(
        "cannot start the watcher thread ({why}): SIGTERM and SIGINT will print no summary, \
         and a back-off episode's outcome comes at the next CUDA call"
    ));
}

struct Start {
    fd: i32,
    tasks: &'static Tasks,
}

extern "C" fn run(start: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `spawn` handed over a Box<Start> made for this thread alone.
    let Start { fd, tasks } = *unsafe { Box::from_raw(start.cast::<Start>()) };
    // A panic here must not take the host down; nor may it leave the handler waiting
    // longer than its bound (it never waits longer anyway).
    let _ = std::panic::catch_unwind(|| watch(fd, tasks));
    DONE.store(true, Ordering::Release);
    std::ptr::null_mut()
}

fn watch(fd: i32, tasks: &'static Tasks) {
    // When context memory is next reconciled (None: when woken).
    let mut reconcile_at: Option<u64> = None;
    loop {
        let now = crate::sys::monotonic_ns();
        if reconcile_at.is_none_or(|at| now >= at) {
            reconcile_at = (tasks.reconcile)().then_some(now + RECONCILE_EVERY_NS);
        }
        let next = earliest((tasks.expire)(), reconcile_at);
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: pfd is one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, timeout_ms(next, crate::sys::monotonic_ns())) } > 0 {
            let mut count: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
            unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) };
        }
        let sig = SIGNAL.load(Ordering::Acquire);
        if sig != 0 {
            (tasks.on_signal)(sig);
            return;
        }
    }
}

/// The earlier of two deadlines, either of which may be missing.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// poll(2)'s timeout for a deadline: -1 (none) without one, else the milliseconds until
/// just past it (an episode has ended once its gap is strictly over), at least 1.
fn timeout_ms(deadline: Option<u64>, now: u64) -> i32 {
    match deadline {
        None => -1,
        Some(at) => (at.saturating_sub(now) / 1_000_000 + 1).min(i32::MAX as u64) as i32,
    }
}

fn install_handlers() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: sigaction with a null new action only reads the current one into `old`;
        // the new action is a plain extern "C" fn with an empty mask.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Async-signal-safe: atomics, write(2), nanosleep, sigaction and raise only.
extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: __errno_location is the thread's errno; saved and restored around our calls.
    let errno = unsafe { *libc::__errno_location() };
    if WAKE_FD.load(Ordering::Acquire) >= 0 {
        // A second signal (SIGINT during SIGTERM's wait) waits for the same work.
        let _ = SIGNAL.compare_exchange(0, sig, Ordering::AcqRel, Ordering::Acquire);
        wake();
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        for _ in 0..FLUSH_WAIT_MS {
            if DONE.load(Ordering::Acquire) {
                break;
            }
            // SAFETY: pause is a valid timespec; the remainder pointer may be null.
            unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
        }
    }
    // SAFETY: restores the default action and re-raises; the signal is blocked while this
    // handler runs and is delivered, with the default action, as it returns.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut());
        libc::raise(sig);
        *libc::__errno_location() = errno;
    }
}

#[cfg(test)]
mod tests {
    use super::{earliest, timeout_ms};

    #[test]
    fn the_earliest_deadline_of_two() {
        assert_eq!(earliest(None, None), None);
        assert_eq!(earliest(Some(5), None), Some(5));
        assert_eq!(earliest(None, Some(7)), Some(7));
        assert_eq!(earliest(Some(9), Some(7)), Some(7));
    }

    #[test]
    fn the_timeout_ends_just_past_the_deadline() {
        assert_eq!(timeout_ms(None, 5), -1);
        assert_eq!(timeout_ms(Some(10), 20), 1, "past: look again at once");
        assert_eq!(timeout_ms(Some(1_000_000), 1_000_000), 1);
        assert_eq!(timeout_ms(Some(200_500_000), 0), 201);
    }
}
