//! Which GPUs the command `cuquota run` starts will see, asked of the driver it will load:
//! `libcuda.so.1` found as the command finds it (the same `LD_LIBRARY_PATH`, the same
//! `CUDA_VISIBLE_DEVICES`, which the driver applies), so the answer is the driver's own.
//! Asked only for a per-GPU `--limit`, in a child process of its own, so that nothing the
//! driver opens or starts (descriptors, threads, a slow first initialisation) reaches the
//! command, and a driver that hangs costs a bounded wait.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Each GPU by ordinal, with its UUID when the driver gives one.
pub type Seen = Vec<(u32, Option<[u8; 16]>)>;

/// A driver that does not answer in this long is not waited for: `run` goes on and the
/// interposer checks the limit at the command's first CUDA call, as without this.
const PATIENCE: Duration = Duration::from_secs(10);

const CUDA_SUCCESS: c_int = 0;
const CUDA_ERROR_NO_DEVICE: c_int = 100;

/// The GPUs the command would see, or why that cannot be told (no driver, an error, no
/// answer in time, cuquota's own library loaded in this process).
pub fn devices() -> Result<Seen, String> {
    // With the interposer preloaded here too (LD_PRELOAD, /etc/ld.so.preload), asking would
    // make this process a governed one: its first CUDA call would set up the books the
    // command's is about to set up. Its check at the command's first CUDA call stands.
    // SAFETY: a look-up by a NUL-terminated name in the global scope.
    if !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"cuMemAlloc_v2".as_ptr()) }.is_null() {
        return Err("the driver or cuquota's library is loaded in cuquota itself".into());
    }
    let mut fds = [0 as c_int; 2];
    // SAFETY: fds is a valid array of two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors are fresh and owned here alone.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: this process has one thread (run asks before anything starts one), so the
    // child may call anything; it leaves with _exit, running no handler of ours.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            drop(reader);
            let answer = encode(&ask_driver());
            let mut file = std::fs::File::from(writer);
            let _ = std::io::Write::write_all(&mut file, answer.as_bytes());
            // SAFETY: ends the child at once, as it must after fork.
            unsafe { libc::_exit(0) }
        }
        child => {
            drop(writer);
            let answer = read_bounded(reader, child);
            let mut status = 0;
            // SAFETY: reaps the child (ended by now, or killed by read_bounded).
            unsafe { libc::waitpid(child, &mut status, 0) };
            decode(&answer?)
        }
    }
}

/// All the child writes, until it closes the pipe; past [`PATIENCE`] it is killed.
fn read_bounded(reader: OwnedFd, child: libc::pid_t) -> Result<String, String> {
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + PATIENCE;
    let fd = reader.as_raw_fd();
    let mut file = std::fs::File::from(reader);
    let mut answer = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, left.as_millis() as c_int) };
        if ready == 0 || left.is_zero() {
            // SAFETY: our own child, not yet reaped.
            unsafe { libc::kill(child, libc::SIGKILL) };
            return Err(format!(
                "libcuda.so.1 did not answer in {} s",
                PATIENCE.as_secs()
            ));
        }
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // SAFETY: as above.
            unsafe { libc::kill(child, libc::SIGKILL) };
            return Err(format!("poll: {}", std::io::Error::last_os_error()));
        }
        let mut chunk = [0u8; 4096];
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading the driver's answer: {e}")),
        }
    }
    String::from_utf8(answer).map_err(|_| "the driver's answer is not text".into())
}

/// `ok` then a line per GPU (`ORDINAL UUID-HEX` or `ORDINAL -`), or `error WHY`.
fn encode(seen: &Result<Seen, String>) -> String {
    match seen {
        Err(why) => format!("error {why}\n"),
        Ok(seen) => {
            let mut out = String::from("ok\n");
            for (ordinal, uuid) in seen {
                let uuid = uuid.map_or("-".to_string(), |u| {
                    u.iter().map(|b| format!("{b:02x}")).collect()
                });
                out += &format!("{ordinal} {uuid}\n");
            }
            out
        }
    }
}

fn decode(answer: &str) -> Result<Seen, String> {
    let mut lines = answer.lines();
    match lines.next() {
        Some("ok") => {}
        Some(l) if l.starts_with("error ") => return Err(l["error ".len()..].to_string()),
        _ => return Err("the driver probe ended with no answer".into()),
    }
    lines
        .map(|line| {
            let bad = || format!("the driver probe said {line:?}");
            let (ordinal, uuid) = line.split_once(' ').ok_or_else(bad)?;
            let ordinal = ordinal.parse().map_err(|_| bad())?;
            let uuid = match uuid {
                "-" => None,
                hex if hex.len() == 32 => {
                    let mut bytes = [0u8; 16];
                    for (i, b) in bytes.iter_mut().enumerate() {
                        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
                    }
                    Some(bytes)
                }
                _ => return Err(bad()),
            };
            Ok((ordinal, uuid))
        })
        .collect()
}

type Init = unsafe extern "C" fn(c_uint) -> c_int;
type Count = unsafe extern "C" fn(*mut c_int) -> c_int;
type Get = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type Uuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> c_int;

fn ask_driver() -> Result<Seen, String> {
    // SAFETY: dlopen with a NUL-terminated name; the handle is kept (never closed) until exec.
    let lib = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        return Err(format!("libcuda.so.1 cannot be loaded ({})", dl_error()));
    }
    let symbol = |name: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: lib is a live handle from dlopen; name is NUL-terminated.
        let f = unsafe { libc::dlsym(lib, name.as_ptr()) };
        (!f.is_null())
            .then_some(f)
            .ok_or_else(|| format!("libcuda.so.1 has no {}", name.to_string_lossy()))
    };
    // SAFETY: each symbol is the driver API function of that name, whose C signature the
    // type spells (CUresult is an int, CUdevice an int, CUuuid 16 bytes).
    let (init, count, get) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Init>(symbol(c"cuInit")?),
            std::mem::transmute::<*mut c_void, Count>(symbol(c"cuDeviceGetCount")?),
            std::mem::transmute::<*mut c_void, Get>(symbol(c"cuDeviceGet")?),
        )
    };
    // The interposer asks the UUID with cuDeviceGetUuid_v2 (a MIG instance's own); the
    // older name only where the driver predates it.
    let uuid = symbol(c"cuDeviceGetUuid_v2")
        .or_else(|_| symbol(c"cuDeviceGetUuid"))
        .ok()
        // SAFETY: as above.
        .map(|f| unsafe { std::mem::transmute::<*mut c_void, Uuid>(f) });
    // SAFETY: plain calls with valid out-pointers.
    match unsafe { init(0) } {
        CUDA_SUCCESS => {}
        CUDA_ERROR_NO_DEVICE => return Ok(Vec::new()),
        rc => return Err(format!("cuInit returned {rc}")),
    }
    let mut n: c_int = 0;
    // SAFETY: n is a valid out-pointer.
    let rc = unsafe { count(&mut n) };
    if rc != CUDA_SUCCESS {
        return Err(format!("cuDeviceGetCount returned {rc}"));
    }
    Ok((0..n.max(0))
        .map(|ordinal| {
            let mut device: c_int = 0;
            let mut bytes = [0u8; 16];
            // SAFETY: device and bytes are valid out-pointers (16 bytes: a CUuuid).
            let known = unsafe { get(&mut device, ordinal) } == CUDA_SUCCESS
                && uuid.is_some_and(|f| unsafe { f(&mut bytes, device) } == CUDA_SUCCESS);
            (ordinal as u32, known.then_some(bytes))
        })
        .collect())
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl call.
    let e: *const c_char = unsafe { libc::dlerror() };
    if e.is_null() {
        "no reason given".into()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_crosses_the_pipe_whole() {
        let seen: Seen = vec![(0, Some([0xab; 16])), (1, None)];
        assert_eq!(decode(&encode(&Ok(seen.clone()))), Ok(seen));
        assert_eq!(decode(&encode(&Ok(Vec::new()))), Ok(Vec::new()));
        assert_eq!(
            decode(&encode(&Err("cuInit returned 3".into()))),
            Err("cuInit returned 3".into())
        );
        assert!(decode("").is_err());
        assert!(decode("ok\n0 zz\n").is_err());
    }
}
