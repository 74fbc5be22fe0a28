//! The memory of a GPU whose size no governed process recorded (the interposer asks the
//! driver nothing the program did not ask, so a process with a byte limit that never asks
//! for memory figures leaves it unknown): asked here of NVML, by UUID, where the machine has
//! it, as nvidia-smi asks. Loaded once per process; without NVML, or with cuquota's library
//! loaded in this process (its NVML answers are a process's quota, not the GPU's), unknown
//! stays unknown.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::OnceLock;

const NVML_SUCCESS: c_int = 0;

/// `nvmlMemory_t` (v1): bytes.
#[repr(C)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

type ByUuid = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type MemoryInfo = unsafe extern "C" fn(*mut c_void, *mut Memory) -> c_int;

struct Nvml {
    by_uuid: ByUuid,
    memory: MemoryInfo,
}

/// The real memory of the GPU `GPU-…`, if NVML can tell.
pub fn total(uuid: &str) -> Option<u64> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    let nvml = NVML.get_or_init(load).as_ref()?;
    let uuid = CString::new(uuid).ok()?;
    let mut device: *mut c_void = std::ptr::null_mut();
    let mut memory = Memory {
        total: 0,
        free: 0,
        used: 0,
    };
    // SAFETY: NVML's functions of these names and signatures (nvml.h), with a NUL-terminated
    // UUID and valid out-pointers.
    let ok = unsafe {
        (nvml.by_uuid)(uuid.as_ptr(), &mut device) == NVML_SUCCESS
            && (nvml.memory)(device, &mut memory) == NVML_SUCCESS
    };
    (ok && memory.total > 0).then_some(memory.total)
}

fn load() -> Option<Nvml> {
    // SAFETY: a look-up by a NUL-terminated name in the global scope.
    if !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"cuMemAlloc_v2".as_ptr()) }.is_null() {
        return None;
    }
    // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the process's life.
    let lib = unsafe {
        libc::dlopen(
            c"libnvidia-ml.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    };
    if lib.is_null() {
        return None;
    }
    let symbol = |name: &std::ffi::CStr| {
        // SAFETY: lib is a live handle; the name is NUL-terminated.
        let f = unsafe { libc::dlsym(lib, name.as_ptr()) };
        (!f.is_null()).then_some(f)
    };
    let init = symbol(c"nvmlInit_v2")?;
    let by_uuid = symbol(c"nvmlDeviceGetHandleByUUID")?;
    let memory = symbol(c"nvmlDeviceGetMemoryInfo")?;
    // SAFETY: each symbol is the NVML function of that name, whose C signature the type
    // spells (nvmlReturn_t is an int, nvmlDevice_t a pointer).
    unsafe {
        let init = std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(init);
        if init() != NVML_SUCCESS {
            return None;
        }
        Some(Nvml {
            by_uuid: std::mem::transmute::<*mut c_void, ByUuid>(by_uuid),
            memory: std::mem::transmute::<*mut c_void, MemoryInfo>(memory),
        })
    }
}
