//! SIGTERM / SIGINT: flush the trace before the default action kills the process.
//!
//! A handler is installed only where the disposition is still `SIG_DFL`: a host's own
//! handler (Python's SIGINT, a trainer's SIGTERM checkpointing) is never replaced, and such
//! hosts usually exit through the normal path, where `finish` runs anyway.

use std::sync::atomic::Ordering;

/// How long the handler waits for the writer before letting the signal kill the process.
const FLUSH_WAIT_MS: u32 = 200;

pub fn install() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: sigaction with a null new action only reads the current one into `old`.
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
    // SAFETY: CURRENT holds null or a leaked, never-freed Tracer.
    if let Some(tracer) = unsafe { super::CURRENT.load(Ordering::Acquire).as_ref() } {
        tracer.flush_from_signal(sig, FLUSH_WAIT_MS);
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
