//! What cuquota asks the OS about itself. On its hot path: the monotonic clock and the
//! calling thread's id, one place for each, so that the trace, the episodes and the context
//! memory's rate limit read the same clock and the same ids. Once: who this process is
//! (command line, host name), for the trace header and the registry. And which file a
//! descriptor is (an exported shareable handle still open).

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

/// CLOCK_MONOTONIC in nanoseconds (a vDSO call, no syscall).
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-parameter; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // Never overflows: u64 nanoseconds last 584 years of uptime.
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Bumped in a forked child: thread ids cached before the fork are stale there.
static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// (fork generation, thread id) of this thread; id 0 means not read yet.
    static THREAD_ID: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

/// The OS thread id (gettid), read once per thread rather than a syscall per call.
#[inline]
pub fn thread_id() -> u32 {
    let generation = FORK_GENERATION.load(Ordering::Relaxed);
    THREAD_ID
        .try_with(|cached| match cached.get() {
            (g, tid) if g == generation && tid != 0 => tid,
            _ => {
                let tid = gettid();
                cached.set((generation, tid));
                tid
            }
        })
        .unwrap_or_else(|_| gettid())
}

/// In a forked child: the forking thread's cached id is its parent's thread's.
pub fn forget_thread_ids_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The file an open descriptor is, as (device, inode); `None` if `fd` is not open. Tells
/// whether a shareable handle (an exported descriptor) is still the one it was.
pub fn file_id(fd: i32) -> Option<(u64, u64)> {
    if fd < 0 {
        return None;
    }
    // SAFETY: an all-zero stat is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer; a descriptor that is not open only makes it fail.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev as u64, st.st_ino as u64))
}

/// This process's command line, word by word (a byte that is not UTF-8 as `\xff`).
pub fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(cuquota_format::escape::from_utf8)
                .collect()
        })
        .unwrap_or_default()
}

/// The host's name (`unknown` if it cannot be had).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for buf.len() bytes; gethostname NUL-terminates on success
    // unless truncated, and we stop at the first NUL or the end of buf either way.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    cuquota_format::escape::from_utf8(&buf[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_forwards() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(b >= a + 2_000_000, "{a} then {b}");
    }

    #[test]
    fn thread_ids_are_the_os_ones_and_survive_a_forgetting() {
        let me = gettid();
        assert_eq!(thread_id(), me);
        assert_eq!(thread_id(), me, "from the cache");
        let other = std::thread::spawn(thread_id).join().unwrap();
        assert_ne!(other, me);
        forget_thread_ids_in_child();
        assert_eq!(thread_id(), me, "read again");
    }
}
