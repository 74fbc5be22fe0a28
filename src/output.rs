//! How cuquota writes its own bytes (log lines, the exit summary, the trace): never raising
//! SIGPIPE in the host program, never waiting on another process for longer than a bound.
//!
//! - SIGPIPE is blocked on the writing thread for the length of the write; if our write made
//!   one pending, it is consumed before the mask is restored, so the program's own SIGPIPE
//!   behaviour is untouched. A broken pipe is then an ordinary `EPIPE` error.
//! - A descriptor that cannot take the bytes (a full pipe, a FIFO whose reader stalls) is
//!   waited for with `poll` for at most [`WRITE_BOUND_MS`] without progress; then the write fails with
//!   `TimedOut` and the caller falls back as for any failure (the lines are lost, never the
//!   program's time).
//! - Files are opened with `O_NONBLOCK`: a FIFO nobody reads fails at once (`ENXIO`) instead
//!   of blocking the hook that logs.

use std::ffi::CStr;
use std::io;
use std::time::{Duration, Instant};

/// The longest one write waits for a descriptor to take bytes.
pub const WRITE_BOUND_MS: u64 = 500;

/// Writes all of `bytes` to `fd`: retries on EINTR and partial writes, gives up when the
/// descriptor takes nothing for [`WRITE_BOUND_MS`] (blocking or not: a full pipe on stderr
/// would otherwise block the hook; a log line is one page, so one bound), and raises no
/// SIGPIPE.
pub fn write_all(fd: i32, bytes: &[u8]) -> io::Result<()> {
    let _quiet = QuietPipe::enter();
    let bound = Duration::from_millis(WRITE_BOUND_MS);
    let mut deadline = Instant::now() + bound;
    // After POLLOUT a pipe takes a page without blocking; more may block a blocking one.
    let most = if is_pipe_or_socket(fd) {
        libc::PIPE_BUF
    } else {
        usize::MAX
    };
    let mut left = bytes;
    while !left.is_empty() {
        if !writable_before(fd, deadline) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the reader took nothing for {WRITE_BOUND_MS} ms"),
            ));
        }
        // SAFETY: `left` is a live slice; write reads at most left.len() bytes from it.
        let n = unsafe { libc::write(fd, left.as_ptr().cast(), left.len().min(most)) };
        if n > 0 {
            left = &left[n as usize..];
            deadline = Instant::now() + bound;
            continue;
        }
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) | Some(libc::EAGAIN) => {}
            _ => return Err(err),
        }
    }
    Ok(())
}

/// Whether `fd` can take bytes (or has an error to report) before `deadline`. A pipe is
/// writable when a page is free, so a line of up to a page then goes in without blocking.
fn writable_before(fd: i32, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `p` is one valid pollfd for the duration of the call.
        match unsafe { libc::poll(&mut p, 1, ms) } {
            0 => return false,
            n if n > 0 => return true,
            _ if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {
                if left.is_zero() {
                    return false;
                }
            }
            // poll itself failed (a bad descriptor): let write report the error.
            _ => return true,
        }
    }
}

fn is_pipe_or_socket(fd: i32) -> bool {
    // SAFETY: zeroed stat is a valid out-parameter; fstat only fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    let kind = st.st_mode & libc::S_IFMT;
    ok && (kind == libc::S_IFIFO || kind == libc::S_IFSOCK)
}

/// Opens `path` for appending, creating it with `mode`, close-on-exec and non-blocking.
pub fn open_append(path: &CStr, mode: libc::c_uint) -> io::Result<i32> {
    // SAFETY: `path` is NUL-terminated for the duration of the call.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NONBLOCK,
            mode,
        )
    };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// Words for an open error that a user may not recognise.
pub fn describe_open_error(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::ENXIO) => format!("{err}: a FIFO with no reader"),
        _ => err.to_string(),
    }
}

/// SIGPIPE blocked on this thread until dropped; a SIGPIPE our writes made pending meanwhile
/// is consumed then (one that was pending before is left for the program).
struct QuietPipe {
    old_mask: libc::sigset_t,
    was_pending: bool,
}

impl QuietPipe {
    fn enter() -> QuietPipe {
        let pipe = sigpipe_set();
        // SAFETY: zeroed sigset_t is a valid out-parameter, filled by pthread_sigmask.
        let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid sets; changes only this thread's mask.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old_mask) };
        QuietPipe {
            old_mask,
            was_pending: sigpipe_pending(),
        }
    }
}

impl Drop for QuietPipe {
    fn drop(&mut self) {
        if !self.was_pending && sigpipe_pending() {
            let pipe = sigpipe_set();
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: valid set and timeout; SIGPIPE is blocked here, so this only takes the
            // pending one (ours) without waiting.
            unsafe { libc::sigtimedwait(&pipe, std::ptr::null_mut(), &zero) };
        }
        // SAFETY: restores the mask saved by `enter` on this same thread.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}

fn sigpipe_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the zeroed set; sigaddset adds a valid signal.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        set
    }
}

/// SIGPIPE is pending for this thread or the process.
fn sigpipe_pending() -> bool {
    // SAFETY: zeroed sigset_t is a valid out-parameter; sigismember reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut set) == 0 && libc::sigismember(&set, libc::SIGPIPE) == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe() -> (i32, i32) {
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        (fds[0], fds[1])
    }

    fn close(fd: i32) {
        // SAFETY: a descriptor this test opened, closed once.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn a_broken_pipe_is_an_error_and_no_signal() {
        let (r, w) = pipe();
        close(r);
        let err = write_all(w, b"line\n").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPIPE));
        assert!(!sigpipe_pending(), "our SIGPIPE was consumed");
        close(w);
    }

    #[test]
    fn a_full_non_blocking_pipe_times_out_within_the_bound() {
        let (r, w) = pipe();
        // SAFETY: plain fcntl on our own descriptor.
        unsafe { libc::fcntl(w, libc::F_SETFL, libc::O_NONBLOCK) };
        let big = vec![b'x'; 1 << 20]; // more than a pipe holds
        let started = std::time::Instant::now();
        let err = write_all(w, &big).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        // Not a timing assertion on speed: it proves the wait ended (no hang).
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        close(r);
        close(w);
    }

    #[test]
    fn a_full_blocking_pipe_times_out_too() {
        let (r, w) = pipe();
        let big = vec![b'x'; 1 << 20];
        let err = write_all(w, &big).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        close(r);
        close(w);
    }

    #[test]
    fn everything_arrives_through_a_pipe_that_is_read() {
        let (r, w) = pipe();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                // SAFETY: buf is writable for its length.
                let n = unsafe { libc::read(r, buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n as usize]);
            }
            close(r);
            got
        });
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        write_all(w, &data).unwrap();
        close(w);
        assert_eq!(reader.join().unwrap(), data);
    }

    #[test]
    fn a_fifo_without_reader_fails_to_open_at_once() {
        let dir = std::env::temp_dir().join(format!("cuquota-output-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: c is NUL-terminated.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = open_append(&c, 0o600).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENXIO));
        assert!(describe_open_error(&err).contains("FIFO with no reader"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
