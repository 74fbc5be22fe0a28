//! Where cuquota's lines go: stderr (default), a file (`CUQUOTA_LOG=PATH`) or nowhere
//! (`off`). Each line is formatted whole and written with one write(2), never through
//! Rust's stderr lock, so hooks can log from any thread, in any state.

use crate::config::LogTarget;
use crate::output::{describe_open_error, open_append, write_all};
use crate::spin::SpinLock;
use cuquota_format::escape;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

enum Sink {
    Stderr,
    Off,
    /// Opened on the first line, so that a process that never logs creates no file.
    File {
        path: PathBuf,
        fd: Option<i32>,
    },
}

static SINK: SpinLock<Sink> = SpinLock::new(Sink::Stderr);

/// Sets the target once the configuration is known (until then lines go to stderr).
pub fn configure(target: &LogTarget) {
    *SINK.lock() = match target {
        LogTarget::Stderr => Sink::Stderr,
        LogTarget::Off => Sink::Off,
        LogTarget::File(path) => Sink::File {
            path: path.clone(),
            fd: None,
        },
    };
}

/// Set by the exit handler: from then on a line never waits for the log's lock.
static EXITING: AtomicBool = AtomicBool::new(false);

/// The process is exiting: the exit handler may run on a thread that holds the log's lock
/// (`exit()` from a signal handler that interrupted a log line), so lines stop waiting for it.
pub fn exiting() {
    EXITING.store(true, Ordering::Release);
}

/// Writes `cuquota[PID]: msg`. Never blocks for long and never raises SIGPIPE (see
/// `output`): a log file that cannot be opened or written (a FIFO nobody reads, a reader
/// that left, a full disk) costs one note, and every line after it goes to stderr. One line
/// whatever `msg` quotes: its control characters are written out (`\n`, `\x1b`), so that
/// text from elsewhere (another member's command line, a path) can neither forge a line
/// nor drive the reader's terminal.
pub fn line(msg: &str) {
    // SAFETY: getpid has no preconditions. Read per line: a forked child logs its own pid.
    let pid = unsafe { libc::getpid() };
    let text = format!("cuquota[{pid}]: {}\n", escape::text(msg));
    let mut sink = if EXITING.load(Ordering::Acquire) {
        match SINK.try_lock_for(crate::spin::EXIT_LOCK_ATTEMPTS) {
            Some(sink) => sink,
            None => {
                // Its holder will not come back: the line goes to stderr, unlocked.
                let _ = write_all(2, text.as_bytes());
                return;
            }
        }
    } else {
        SINK.lock()
    };
    let (fd, path) = match &mut *sink {
        Sink::Off => return,
        Sink::Stderr => (2, None),
        Sink::File { path, fd } => match fd {
            Some(fd) => (*fd, Some(path.display().to_string())),
            None => match open_log(path) {
                Ok(opened) => (*fd.insert(opened), Some(path.display().to_string())),
                Err(why) => {
                    let note = format!(
                        "cannot open CUQUOTA_LOG file \"{}\" ({why})",
                        path.display()
                    );
                    *sink = Sink::Stderr;
                    to_stderr_instead(pid, &note, &text);
                    return;
                }
            },
        },
    };
    if let Err(why) = write_all(fd, text.as_bytes()) {
        if let Some(path) = path {
            // The log file broke (a full disk, a reader gone): say so once, then stderr.
            let note = format!("cannot write CUQUOTA_LOG file \"{path}\" ({why})");
            *sink = Sink::Stderr;
            to_stderr_instead(pid, &note, &text);
        }
    }
}

fn to_stderr_instead(pid: i32, note: &str, text: &str) {
    let note = format!(
        "cuquota[{pid}]: {}; logging to stderr\n",
        escape::text(note)
    );
    let _ = write_all(2, note.as_bytes());
    let _ = write_all(2, text.as_bytes());
}

/// Opens the log file for appending (non-blocking: a FIFO with no reader fails at once).
fn open_log(path: &std::path::Path) -> Result<i32, String> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| "the path contains a NUL byte".to_string())?;
    open_append(&c_path, 0o644).map_err(|e| describe_open_error(&e))
}

/// In a forked child: the sink's lock is free again, whoever held it in the parent.
///
/// # Safety
/// Only in the child right after `fork()`, while it has one thread.
pub unsafe fn reset_in_child() {
    // SAFETY: the caller's promise (one thread, right after fork); a sink is usable as a
    // parent thread left it: every change to it is one assignment.
    unsafe { SINK.unlock_in_child() };
}
