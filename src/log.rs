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
    let fd = match &mut *sink {
        Sink::Off => return,
        Sink::Stderr => 2,
        Sink::File { path, fd } => match fd {
            Some(fd) => *fd,
            None => match open_append(path) {
                Some(opened) => *fd.insert(opened),
                None => {
                    let path = std::mem::take(path);
                    *sink = Sink::Stderr;
                    write_all(
                        2,
                        format!(
                            "cuquota[{pid}]: cannot open CUQUOTA_LOG file \"{path}\" ({}); logging to stderr\n",
                            std::io::Error::last_os_error()
                        )
                        .as_bytes(),
                    );
                    2
                }
            },
        },
    };
    write_all(fd, text.as_bytes());
}

/// In a forked child: the sink's lock is free again, whoever held it in the parent.
///
/// # Safety
/// Only in the child right after `fork()`, while it has one thread.
pub unsafe fn reset_in_child() {
    SINK.unlock_in_child();
}

/// A warning from any module (the trace writer, the exit handler): same as [`line`].
pub fn warn(msg: &str) {
    line(msg)
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

fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: bytes is a live slice; write reads at most bytes.len() from it.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return; // nowhere to report a failing log; never harm the host over it
        }
        bytes = &bytes[n as usize..];
    }
}
