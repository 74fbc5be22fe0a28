//! The loaded modules (the program and its shared libraries), from `dl_iterate_phdr`: where
//! each lies in memory and its GNU build id (a `PT_NOTE` of type `NT_GNU_BUILD_ID`), so that
//! the CLI can find the file a stack's address belongs to, or its debug file by build id,
//! and symbolise there.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;
const PF_R: u32 = 4;
/// Build ids are 20 bytes (SHA-1) in practice; longer ones are cut here.
const BUILD_ID_MAX: usize = 64;

/// One loaded module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// As the loader names it; the main program's is `/proc/self/exe`'s target.
    pub path: String,
    /// The load bias: an address in memory minus the same address in the file.
    pub bias: u64,
    /// Where its loaded segments lie: `[lo, hi)`.
    pub lo: u64,
    pub hi: u64,
    /// The GNU build id, lowercase hex; empty if it has none.
    pub build_id: String,
}

/// What `dl_iterate_phdr` reports of one module, without allocating (for the hooks).
struct Span {
    bias: u64,
    lo: u64,
    hi: u64,
}

/// # Safety
/// `info` must be a valid `dl_phdr_info` from `dl_iterate_phdr`.
unsafe fn span(info: &libc::dl_phdr_info) -> Span {
    let mut lo = u64::MAX;
    let mut hi = 0;
    for ph in phdrs(info) {
        if ph.p_type == PT_LOAD {
            lo = lo.min(info.dlpi_addr.wrapping_add(ph.p_vaddr));
            hi = hi.max(info.dlpi_addr.wrapping_add(ph.p_vaddr + ph.p_memsz));
        }
    }
    Span {
        bias: info.dlpi_addr,
        lo,
        hi,
    }
}

fn phdrs(info: &libc::dl_phdr_info) -> &[libc::Elf64_Phdr] {
    if info.dlpi_phdr.is_null() {
        return &[];
    }
    // SAFETY: the loader gives `dlpi_phnum` program headers at `dlpi_phdr`, mapped while
    // the module is loaded (it cannot be unloaded during the iteration).
    unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
}

static OWN_LO: AtomicU64 = AtomicU64::new(0);
static OWN_HI: AtomicU64 = AtomicU64::new(0);

/// Where cuquota's own code lies (its stack frames are not the program's), found once. In
/// unit tests nothing is skipped: the test binary is all "own" code.
pub fn own_range() -> (u64, u64) {
    if cfg!(test) {
        return (0, 0);
    }
    let hi = OWN_HI.load(Ordering::Relaxed);
    if hi != 0 {
        return (OWN_LO.load(Ordering::Relaxed), hi);
    }
    find_own()
}

#[cold]
fn find_own() -> (u64, u64) {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, arg: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info, and `arg` is `find_own`'s range.
        let (info, found) = unsafe { (&*info, &mut *arg.cast::<(u64, u64)>()) };
        // SAFETY: as above.
        let s = unsafe { span(info) };
        let me = own_range as *const () as u64;
        if s.lo <= me && me < s.hi {
            *found = (s.lo, s.hi);
            return 1;
        }
        0
    }
    let mut found = (0u64, 0u64);
    // SAFETY: `each` only reads the infos and writes `found`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut found as *mut (u64, u64)).cast()) };
    if found.1 != 0 {
        OWN_LO.store(found.0, Ordering::Relaxed);
        OWN_HI.store(found.1, Ordering::Relaxed);
    }
    found
}

/// Every module loaded now (for the trace writer: it allocates).
pub fn loaded() -> Vec<Module> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, arg: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info, and `arg` is `loaded`'s Vec.
        let (info, out) = unsafe { (&*info, &mut *arg.cast::<Vec<Module>>()) };
        // SAFETY: as above.
        let s = unsafe { span(info) };
        if s.hi == 0 {
            return 0;
        }
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: a non-null dlpi_name is a NUL-terminated string owned by the loader.
            unsafe { CStr::from_ptr(info.dlpi_name) }
                .to_string_lossy()
                .into_owned()
        };
        out.push(Module {
            path: name,
            bias: s.bias,
            lo: s.lo,
            hi: s.hi,
            build_id: build_id(info),
        });
        0
    }
    let mut out: Vec<Module> = Vec::new();
    // A panic must not cross the C frames of dl_iterate_phdr: catch it in `each`'s caller.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `each` reads the infos and pushes into `out`, which outlives the call.
        unsafe { libc::dl_iterate_phdr(Some(each), (&mut out as *mut Vec<Module>).cast()) };
    }));
    if caught.is_err() {
        return Vec::new();
    }
    for m in &mut out {
        // The program itself has an empty name; paths are made absolute, so that a report
        // run from another directory finds them.
        let path = if m.path.is_empty() {
            std::fs::read_link("/proc/self/exe").ok()
        } else {
            std::fs::canonicalize(&m.path).ok()
        };
        if let Some(p) = path {
            m.path = p.to_string_lossy().into_owned();
        }
    }
    out
}

/// The module's GNU build id in hex, read from its `PT_NOTE` segments in memory.
fn build_id(info: &libc::dl_phdr_info) -> String {
    for ph in phdrs(info) {
        if ph.p_type != PT_NOTE {
            continue;
        }
        // Read only a note that lies within a loaded segment (mapped, readable).
        let loaded = phdrs(info).iter().any(|l| {
            l.p_type == PT_LOAD
                && l.p_flags & PF_R != 0
                && l.p_vaddr <= ph.p_vaddr
                && ph.p_vaddr.saturating_add(ph.p_memsz) <= l.p_vaddr.saturating_add(l.p_filesz)
        });
        if !loaded {
            continue;
        }
        let start = info.dlpi_addr.wrapping_add(ph.p_vaddr) as usize;
        // SAFETY: the note's bytes lie in a readable loaded segment of a module that stays
        // loaded during the iteration; only `p_memsz` bytes from its start are read.
        let notes = unsafe { std::slice::from_raw_parts(start as *const u8, ph.p_memsz as usize) };
        if let Some(id) = find_build_id(notes, ph.p_align) {
            return id.iter().map(|b| format!("{b:02x}")).collect();
        }
    }
    String::new()
}

/// The descriptor of the `NT_GNU_BUILD_ID` note named "GNU" in `notes`, bounds-checked.
fn find_build_id(notes: &[u8], align: u64) -> Option<&[u8]> {
    let pad = if align == 8 { 8 } else { 4 };
    let up = |n: usize| n.checked_add(pad - 1).map(|n| n & !(pad - 1));
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(notes.get(at..at + 4)?.try_into().ok()?))
    };
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let (namesz, descsz, kind) = (word(at)? as usize, word(at + 4)? as usize, word(at + 8)?);
        let name_at = at + 12;
        let desc_at = up(name_at.checked_add(namesz)?)?;
        let next = up(desc_at.checked_add(descsz)?)?;
        let name = notes.get(name_at..name_at + namesz)?;
        let desc = notes.get(desc_at..desc_at + descsz)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(&desc[..desc.len().min(BUILD_ID_MAX)]);
        }
        at = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_and_libc_are_listed_with_their_build_ids() {
        let mods = loaded();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let me = mods
            .iter()
            .find(|m| m.path == exe.to_string_lossy())
            .expect("the test binary");
        let here = the_program_and_libc_are_listed_with_their_build_ids as *const () as u64;
        assert!(me.lo <= here && here < me.hi, "{me:?}");
        // rustc links with --build-id; so does Debian's libc.
        assert_eq!(me.build_id.len(), 40, "{me:?}");
        assert!(mods.iter().any(|m| m.path.contains("libc.so")), "{mods:?}");
    }

    #[test]
    fn notes_are_walked_within_bounds() {
        let mut notes = Vec::new();
        // An unrelated note, then the build id.
        for (name, kind, desc) in [
            (&b"XY\0"[..], 1u32, &[9u8; 5][..]),
            (b"GNU\0", 3, &[0xab; 20]),
        ] {
            notes.extend_from_slice(&(name.len() as u32).to_ne_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
            notes.extend_from_slice(&kind.to_ne_bytes());
            notes.extend_from_slice(name);
            notes.resize(notes.len().next_multiple_of(4), 0);
            notes.extend_from_slice(desc);
            notes.resize(notes.len().next_multiple_of(4), 0);
        }
        assert_eq!(find_build_id(&notes, 4), Some(&[0xab; 20][..]));
        for cut in 0..notes.len() - 3 {
            assert_eq!(find_build_id(&notes[..cut], 4), None, "cut at {cut}");
        }
        // A size that runs past the end, or overflows, is no build id.
        let mut bad = notes.clone();
        bad[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(find_build_id(&bad, 4), None);
    }
}
