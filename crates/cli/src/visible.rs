//! Which GPUs the command `cuquota run` starts will see, asked of the driver it will load:
//! `libcuda.so.1` found as the command finds it (the same `LD_LIBRARY_PATH`, the same
//! `CUDA_VISIBLE_DEVICES`, which the driver applies), so the answer is the driver's own.
//! Asked only for a per-GPU `--limit`, before the exec that discards what was loaded.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::mpsc;
use std::time::Duration;

/// Each GPU by ordinal, with its UUID when the driver gives one.
pub type Seen = Vec<(u32, Option<[u8; 16]>)>;

/// A driver that does not answer in this long is not waited for: `run` goes on and the
/// interposer checks the limit at the command's first CUDA call, as without this.
const PATIENCE: Duration = Duration::from_secs(10);

const CUDA_SUCCESS: c_int = 0;
const CUDA_ERROR_NO_DEVICE: c_int = 100;

/// The GPUs the command would see, or why that cannot be told (no driver, an error).
pub fn devices() -> Result<Seen, String> {
    let (tx, rx) = mpsc::channel();
    // A thread, so that a driver that hangs in cuInit costs a bounded wait; exec ends it.
    std::thread::Builder::new()
        .name("cuquota-probe".into())
        .spawn(move || {
            let _ = tx.send(ask_driver());
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    rx.recv_timeout(PATIENCE).unwrap_or_else(|_| {
        Err(format!(
            "libcuda.so.1 did not answer in {} s",
            PATIENCE.as_secs()
        ))
    })
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
