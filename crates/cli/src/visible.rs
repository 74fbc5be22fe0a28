//! Which GPUs the command `cuquota run` starts will see, asked of the driver it will load:
//! `libcuda.so.1` found as the command finds it (the same `LD_LIBRARY_PATH`, the same
//! `CUDA_VISIBLE_DEVICES`, which the driver applies), so the answer is the driver's own.
//! `cuquota run --driver DIR` names the driver directory instead, and it is loaded from there.
//! Asked only for a limit that names a GPU or a byte count (whether it is more than the GPU's
//! memory), in a child process of its own, so that nothing the
//! driver opens or starts (descriptors, threads, a slow first initialisation) reaches the
//! command, and a driver that hangs costs a bounded wait.

use cuquota_driver::results::{CUDA_ERROR_NO_DEVICE, CUDA_SUCCESS};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// A GPU the command would see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub ordinal: u32,
    /// When the driver gives it.
    pub uuid: Option<[u8; 16]>,
    /// Its memory in bytes, when the driver gives it.
    pub total: Option<u64>,
}

pub type Seen = Vec<Gpu>;

/// A driver that does not answer in this long is not waited for: `run` goes on and the
/// interposer checks the limit at the command's first CUDA call, as without this.
const PATIENCE: Duration = Duration::from_secs(10);

/// `CUresult`: a C enum, returned in a 32-bit register (its codes are the error-name table's).
type CuResult = u32;

/// The GPUs the command would see, or why that cannot be told (no driver, an error, no
/// answer in time, cuquota's own library loaded in this process).
pub fn devices(driver_dir: Option<&std::path::Path>) -> Result<Seen, String> {
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
            let answer = encode(&ask_driver(driver_dir));
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

/// `ok` then a line per GPU (`ORDINAL UUID-HEX|- TOTAL|-`), or `error WHY`.
fn encode(seen: &Result<Seen, String>) -> String {
    match seen {
        Err(why) => format!("error {why}\n"),
        Ok(seen) => {
            let mut out = String::from("ok\n");
            for gpu in seen {
                let uuid = gpu.uuid.map_or("-".to_string(), |u| {
                    u.iter().map(|b| format!("{b:02x}")).collect()
                });
                let total = gpu.total.map_or("-".to_string(), |t| t.to_string());
                out += &format!("{} {uuid} {total}\n", gpu.ordinal);
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
            let mut words = line.split(' ');
            let (Some(ordinal), Some(uuid), Some(total), None) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                return Err(bad());
            };
            let ordinal = ordinal.parse().map_err(|_| bad())?;
            let total = match total {
                "-" => None,
                t => Some(t.parse().map_err(|_| bad())?),
            };
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
            Ok(Gpu {
                ordinal,
                uuid,
                total,
            })
        })
        .collect()
}

type Init = unsafe extern "C" fn(c_uint) -> CuResult;
type Count = unsafe extern "C" fn(*mut c_int) -> CuResult;
type Get = unsafe extern "C" fn(*mut c_int, c_int) -> CuResult;
type Uuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> CuResult;
type TotalMem = unsafe extern "C" fn(*mut usize, c_int) -> CuResult;

fn ask_driver(driver_dir: Option<&std::path::Path>) -> Result<Seen, String> {
    use std::os::unix::ffi::OsStrExt;
    let name = match driver_dir {
        Some(dir) => std::ffi::CString::new(dir.join("libcuda.so.1").as_os_str().as_bytes())
            .map_err(|_| "the driver directory has a NUL byte".to_string())?,
        None => c"libcuda.so.1".to_owned(),
    };
    // SAFETY: dlopen with a NUL-terminated name; the handle is kept (never closed) until exec.
    let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
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
    // type spells (CUresult a 32-bit enum, CUdevice an int, CUuuid 16 bytes).
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
    let total_mem = symbol(c"cuDeviceTotalMem_v2")
        .ok()
        // SAFETY: as above (size_t is usize).
        .map(|f| unsafe { std::mem::transmute::<*mut c_void, TotalMem>(f) });
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
            let mut total: usize = 0;
            // SAFETY: device, bytes and total are valid out-pointers (16 bytes: a CUuuid).
            let got = unsafe { get(&mut device, ordinal) } == CUDA_SUCCESS;
            let known =
                got && uuid.is_some_and(|f| unsafe { f(&mut bytes, device) } == CUDA_SUCCESS);
            let sized =
                got && total_mem.is_some_and(|f| unsafe { f(&mut total, device) } == CUDA_SUCCESS);
            Gpu {
                ordinal: ordinal as u32,
                uuid: known.then_some(bytes),
                total: sized.then_some(total as u64),
            }
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
        let seen: Seen = vec![
            Gpu {
                ordinal: 0,
                uuid: Some([0xab; 16]),
                total: Some(8 << 30),
            },
            Gpu {
                ordinal: 1,
                uuid: None,
                total: None,
            },
        ];
        assert_eq!(decode(&encode(&Ok(seen.clone()))), Ok(seen));
        assert_eq!(decode(&encode(&Ok(Vec::new()))), Ok(Vec::new()));
        assert_eq!(
            decode(&encode(&Err("cuInit returned 3".into()))),
            Err("cuInit returned 3".into())
        );
        assert!(decode("").is_err());
        assert!(decode("ok\n0 zz -\n").is_err());
        assert!(decode("ok\n0 - 12x\n").is_err());
        assert!(decode("ok\n0 -\n").is_err());
    }
}
