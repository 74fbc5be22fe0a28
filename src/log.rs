//! Where cuquota's lines go: stderr (default), a file (`CUQUOTA_LOG=PATH`) or nowhere
//! (`off`). Each line is formatted whole and written with one write(2), never through
//! Rust's stderr lock, so hooks can log from any thread, in any state.

use crate::config::LogTarget;
use crate::spin::SpinLock;

enum Sink {
    Stderr,
    Off,
    /// Opened on the first line, so that a process that never logs creates no file.
    File {
        path: String,
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

/// Writes `cuquota[PID]: msg`.
pub fn line(msg: &str) {
    // SAFETY: getpid has no preconditions. Read per line: a forked child logs its own pid.
    let pid = unsafe { libc::getpid() };
    let text = format!("cuquota[{pid}]: {msg}\n");
    let mut sink = SINK.lock();
    let (fd, path) = match &mut *sink {
        Sink::Off => return,
        Sink::Stderr => (2, None),
        Sink::File { path, fd } => match fd {
            Some(fd) => (*fd, Some(path)),
            None => match open_append(path) {
                Some(opened) => (*fd.insert(opened), Some(path)),
                None => {
                    let why = std::io::Error::last_os_error();
                    let note = format!("cannot open CUQUOTA_LOG file \"{path}\" ({why})");
                    *sink = Sink::Stderr;
                    to_stderr_instead(pid, &note, &text);
                    return;
                }
            },
        },
    };
    if let Err(why) = write_all(fd, text.as_bytes()) {
        if let Some(path) = path {
            // The log file broke (a full disk): say so once, and keep every line on stderr.
            let note = format!("cannot write CUQUOTA_LOG file \"{path}\" ({why})");
            *sink = Sink::Stderr;
            to_stderr_instead(pid, &note, &text);
        }
    }
}

fn to_stderr_instead(pid: i32, note: &str, text: &str) {
    let note = format!("cuquota[{pid}]: {note}; logging to stderr\n");
    let _ = write_all(2, note.as_bytes());
    let _ = write_all(2, text.as_bytes());
}

/// In a forked child: the sink's lock is free again, whoever held it in the parent.
///
/// # Safety
/// Only in the child right after `fork()`, while it has one thread.
pub unsafe fn reset_in_child() {
    // SAFETY: our own contract, passed on; the sink is usable as a parent thread left it.
    unsafe { SINK.unlock_in_child() };
}

fn open_append(path: &str) -> Option<i32> {
    let c_path = std::ffi::CString::new(path).ok()?;
    // SAFETY: c_path is a valid NUL-terminated string for the duration of the call.
    let fd = unsafe {
        libc::open(
            c_path.as_ptr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
            0o644,
        )
    };
    (fd >= 0).then_some(fd)
}

/// write(2) until all of `bytes` is written (retrying on EINTR); also used by the trace writer.
pub fn write_all(fd: i32, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: bytes is a live slice; write reads at most bytes.len() from it.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}
