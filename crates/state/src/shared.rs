//! A file under the state directory mapped by several processes: how it is opened, sized,
//! mapped and locked. Groups (`group`) and the registry of governed processes (`registry`)
//! are both one of these with a layout of plain atomics on top.
//!
//! Locks are open-file-description locks (`F_OFD_SETLK`) on single bytes: the kernel drops
//! them when the last descriptor of their open description closes — at death, whatever the
//! signal — and PIDs play no part, so a reused PID cannot pass for a dead holder.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a process waits for a lock another holds for a moment, before it gives up.
pub const LOCK_WAIT: Duration = Duration::from_secs(2);

/// An open, mapped file. Dropping it unmaps and closes (and so drops its locks).
pub struct SharedFile {
    fd: libc::c_int,
    map: *mut u8,
    len: usize,
    pub path: PathBuf,
    read_only: bool,
}

// SAFETY: the mapping holds only atomics (the layouts on top say so), shared with other
// processes anyway; the fd is a plain integer used with thread-safe syscalls.
unsafe impl Send for SharedFile {}
// SAFETY: as above.
unsafe impl Sync for SharedFile {}

impl Drop for SharedFile {
    fn drop(&mut self) {
        // SAFETY: `map` is null or our mapping of `len` bytes, unmapped once here; `fd` ours.
        unsafe {
            if !self.map.is_null() {
                libc::munmap(self.map.cast(), self.len);
            }
            libc::close(self.fd);
        }
    }
}

/// Makes `dir` (and its parents) if missing, mode 1777 like /dev/shm, so that every user's
/// processes can keep their files there.
pub fn make_dir(dir: &Path) -> Result<(), String> {
    match fs::DirBuilder::new().mode(0o1777).create(dir) {
        // The umask narrowed the mode given above.
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(0o1777))
            .map_err(|e| format!("cannot set the mode of {}: {e}", dir.display())),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match dir.parent() {
            Some(parent) if !parent.as_os_str().is_empty() && parent != dir => {
                make_dir(parent)?;
                make_dir(dir)
            }
            _ => Err(format!("cannot create {}: {e}", dir.display())),
        },
        Err(e) => Err(format!("cannot create {}: {e}", dir.display())),
    }
}

impl SharedFile {
    /// Opens `path` read-write (created mode 0600 when `create`), close-on-exec, never
    /// following a symbolic link. Not mapped yet: see [`Self::map`].
    pub fn open(path: &Path, create: bool) -> Result<SharedFile, String> {
        let create = if create { libc::O_CREAT } else { 0 };
        SharedFile::open_with(path, libc::O_RDWR | create)
    }

    /// Opens `path` read-only, for a viewer that only reads: no lock of its own can be
    /// taken but read locks, which is all it needs to see whether a writer lives.
    pub fn open_read(path: &Path) -> Result<SharedFile, String> {
        SharedFile::open_with(path, libc::O_RDONLY)
    }

    /// `open(2)` with `access` (and `O_CREAT`, mode 0600), close-on-exec, no link followed.
    fn open_with(path: &Path, access: libc::c_int) -> Result<SharedFile, String> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| format!("{} has a NUL byte", path.display()))?;
        let flags = access | libc::O_CLOEXEC | libc::O_NOFOLLOW;
        // SAFETY: a valid C string; the mode is passed as the variadic argument open wants
        // (read only when O_CREAT is in the flags).
        let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600 as libc::c_uint) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(format!("cannot open {}: {e}", path.display()));
        }
        Ok(SharedFile {
            fd,
            map: std::ptr::null_mut(),
            len: 0,
            path: path.to_path_buf(),
            read_only: access & libc::O_ACCMODE == libc::O_RDONLY,
        })
    }

    /// The file's status (`fstat`).
    fn stat(&self) -> Result<libc::stat, String> {
        // SAFETY: fstat into a zeroed struct of the right type.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: our fd, a valid out-pointer.
        if unsafe { libc::fstat(self.fd, &mut st) } != 0 {
            return Err(io::Error::last_os_error().to_string());
        }
        Ok(st)
    }

    /// The file's size; an error if it is not a regular file.
    pub fn size(&self) -> Result<u64, String> {
        let st = self.stat()?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err("not a regular file".into());
        }
        Ok(st.st_size as u64)
    }

    /// The file's owner, group and permission bits (`st_uid`, `st_gid`, `st_mode & 0o7777`).
    pub fn owner(&self) -> Result<(u32, u32, u32), String> {
        let st = self.stat()?;
        Ok((st.st_uid, st.st_gid, st.st_mode & 0o7777))
    }

    /// Sets an empty file's size.
    pub fn set_size(&self, len: usize) -> Result<(), String> {
        // SAFETY: our fd.
        if unsafe { libc::ftruncate(self.fd, len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error().to_string());
        }
        Ok(())
    }

    /// Maps the first `len` bytes shared (the caller checked the file is that large).
    pub fn map(&mut self, len: usize) -> Result<(), String> {
        // SAFETY: mapping `len` bytes of our file, shared; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                if self.read_only {
                    libc::PROT_READ
                } else {
                    libc::PROT_READ | libc::PROT_WRITE
                },
                libc::MAP_SHARED,
                self.fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error().to_string());
        }
        self.map = map.cast();
        self.len = len;
        Ok(())
    }

    /// The mapping's start (page-aligned; null before [`Self::map`]).
    pub fn ptr(&self) -> *mut u8 {
        self.map
    }

    /// An open-file-description lock on one byte, never waiting: Ok(false) when another
    /// description holds it.
    pub fn lock_byte(&self, byte: u64, write: bool) -> io::Result<bool> {
        self.fcntl_lock(byte, if write { libc::F_WRLCK } else { libc::F_RDLCK })
    }

    /// Releases this description's lock on one byte.
    pub fn unlock_byte(&self, byte: u64) {
        let _ = self.fcntl_lock(byte, libc::F_UNLCK);
    }

    fn fcntl_lock(&self, byte: u64, kind: libc::c_int) -> io::Result<bool> {
        // SAFETY: a zeroed flock is a valid value; the fields are set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = byte as libc::off_t;
        fl.l_len = 1;
        // SAFETY: our fd and a valid flock.
        if unsafe { libc::fcntl(self.fd, libc::F_OFD_SETLK, &fl) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
            _ => Err(e),
        }
    }

    /// Takes a write lock on one byte, waiting at most [`LOCK_WAIT`].
    pub fn lock_wait(&self, byte: u64) -> Result<(), String> {
        let start = Instant::now();
        loop {
            match self.lock_byte(byte, true) {
                Ok(true) => return Ok(()),
                Ok(false) if start.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                Ok(false) => {
                    return Err(format!(
                        "held locked by another process for over {} s",
                        LOCK_WAIT.as_secs()
                    ))
                }
                Err(e) => return Err(format!("cannot lock it: {e}")),
            }
        }
    }

    /// Whether another open description holds a lock on `byte` (its holder lives). Asked
    /// with `F_OFD_GETLK`, which takes nothing and needs no write access.
    pub fn held_elsewhere(&self, byte: u64) -> bool {
        // SAFETY: a zeroed flock is a valid value; the fields are set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = byte as libc::off_t;
        fl.l_len = 1;
        // SAFETY: our fd and a valid flock.
        if unsafe { libc::fcntl(self.fd, libc::F_OFD_GETLK, &mut fl) } != 0 {
            return true; // cannot be asked: taken as held (fail closed)
        }
        fl.l_type != libc::F_UNLCK as libc::c_short
    }

    /// In a forked child, whose descriptor and mapping are its parent's (and so keep the
    /// parent's open description, with its locks, alive): closes the child's descriptor and
    /// puts private zeroed memory at the mapping's addresses, so that the parent's locks go
    /// when the parent goes, and references into the mapping stay valid (reading zeros). The
    /// value must be leaked, not dropped, afterwards.
    pub fn close_in_child(&self) {
        // SAFETY: our fd; closing a copy inherited by fork touches nothing of the parent's.
        unsafe { libc::close(self.fd) };
        if !self.map.is_null() {
            // SAFETY: replaces exactly our own mapping (its address and length) with anonymous
            // memory; nothing else lives in that range. Both calls are async-signal-safe.
            unsafe {
                libc::mmap(
                    self.map.cast(),
                    self.len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
            }
        }
    }
}

/// Wall-clock now, in ns since the epoch.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Text packed into atomic words (little-endian, NUL-padded), and back.
pub fn store_text(words: &[std::sync::atomic::AtomicU64], text: &str) {
    let mut bytes = vec![0u8; words.len() * 8];
    let n = text.len().min(bytes.len());
    // Cut at a character boundary.
    let n = (0..=n)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
    for (i, w) in words.iter().enumerate() {
        let chunk: [u8; 8] = bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]);
        w.store(
            u64::from_le_bytes(chunk),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// See [`store_text`]. Bytes that are not UTF-8 (another process wrote them) come back
/// as `\xff`, visible to whoever shows the text.
pub fn load_text(words: &[std::sync::atomic::AtomicU64]) -> String {
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.load(std::sync::atomic::Ordering::Relaxed).to_le_bytes())
        .take_while(|b| *b != 0)
        .collect();
    cuquota_format::escape::from_utf8(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// Text another process packed: bytes that are not UTF-8 come back written out, so that
    /// a view shows them rather than a replacement character; control characters stay for
    /// the view to escape (JSON outputs keep them exactly).
    #[test]
    fn text_from_elsewhere_keeps_every_byte_visible() {
        let words: Vec<AtomicU64> = (0..2).map(|_| AtomicU64::new(0)).collect();
        words[0].store(u64::from_le_bytes(*b"ab\xff\x9b2J\x1b\n"), Relaxed);
        words[1].store(u64::from_le_bytes(*b"c\0\0\0\0\0\0\0"), Relaxed);
        assert_eq!(load_text(&words), "ab\\xff\\x9b2J\x1b\nc");
        store_text(&words, "python train.py");
        assert_eq!(load_text(&words), "python train.py");
    }
}
