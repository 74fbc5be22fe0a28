//! A file under the state directory mapped by several processes: how it is opened, sized,
//! mapped and locked. Groups (`group`) and the registry of governed processes (`registry`)
//! are both one of these with a layout of plain atomics on top.
//!
//! Locks are open-file-description locks (`F_OFD_SETLK`) on single bytes: the kernel drops
//! them when the last descriptor of their open description closes — at death, whatever the
//! signal — and PIDs play no part, so a reused PID cannot pass for a dead holder.

use crate::trusted::{Refusal, TrustedDir};
use std::io;
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
    /// Where [`Self::map`] copied the file instead of mapping it (another user's, read-only,
    /// read with `pread` so that its owner truncating it cannot raise SIGBUS here).
    copy: Option<Vec<Line>>,
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
            if !self.map.is_null() && self.copy.is_none() {
                libc::munmap(self.map.cast(), self.len);
            }
            libc::close(self.fd);
        }
    }
}

/// Makes the state directory `dir` (and the directories above it) if missing, mode 1777 like
/// /dev/shm, so that every user's processes can keep their files there; an existing one must
/// pass the trust rule ([`crate::trusted`]). Bounded: one step per component of the path.
pub fn make_dir(dir: &Path) -> Result<(), String> {
    TrustedDir::open(dir, true)
        .map(drop)
        .map_err(Refusal::into_line)
}

/// 128 bytes, aligned as the layouts' most aligned type: the unit of a private copy.
#[derive(Clone, Copy)]
#[repr(C, align(128))]
struct Line([u8; 128]);

/// A file's directory and its name (one component).
fn split(path: &Path) -> Result<(&Path, &str), String> {
    match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) => Ok((
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            },
            name,
        )),
        _ => Err(format!("{}: no file name", path.display())),
    }
}

impl SharedFile {
    /// Opens `name` in the trusted directory `dir` read-write (made, mode 0600, when
    /// `create`; with `exclusive`, only made), under the trust rule: no link followed, no
    /// wait, a regular file. Not mapped yet: see [`Self::map`].
    pub fn open_in(
        dir: &TrustedDir,
        name: &str,
        create: bool,
        exclusive: bool,
    ) -> Result<SharedFile, Refusal> {
        let mut access = libc::O_RDWR;
        if create {
            access |= libc::O_CREAT;
        }
        if exclusive {
            access |= libc::O_EXCL;
        }
        SharedFile::open_with(dir, name, access)
    }

    /// Opens `name` in `dir` read-only, for a viewer that only reads: no lock of its own
    /// can be taken but read locks, which is all it needs to see whether a writer lives.
    pub fn open_read_in(dir: &TrustedDir, name: &str) -> Result<SharedFile, Refusal> {
        SharedFile::open_with(dir, name, libc::O_RDONLY)
    }

    fn open_with(dir: &TrustedDir, name: &str, access: libc::c_int) -> Result<SharedFile, Refusal> {
        let (fd, _) = dir.open_file(name, access)?;
        Ok(SharedFile {
            fd,
            map: std::ptr::null_mut(),
            len: 0,
            path: dir.path().join(name),
            read_only: access & libc::O_ACCMODE == libc::O_RDONLY,
            copy: None,
        })
    }

    /// Opens the file at `path` (its directory walked as [`TrustedDir::open`] walks a state
    /// directory, made when `create`): for tests and tools that name one file.
    pub fn open(path: &Path, create: bool) -> Result<SharedFile, String> {
        let (dir, name) = split(path)?;
        let dir = TrustedDir::open(dir, create).map_err(Refusal::into_line)?;
        SharedFile::open_in(&dir, name, create, false).map_err(Refusal::into_line)
    }

    /// The file's status (`fstat`).
    pub fn status(&self) -> Result<libc::stat, String> {
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
        let st = self.status()?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err("not a regular file".into());
        }
        Ok(st.st_size as u64)
    }

    /// The file's owner, group and permission bits (`st_uid`, `st_gid`, `st_mode & 0o7777`).
    pub fn owner(&self) -> Result<(u32, u32, u32), String> {
        let st = self.status()?;
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

    /// Maps the first `len` bytes shared (the caller checked the file is that large). A
    /// read-only file another user owns is copied instead ([`Self::copy`]): its owner could
    /// truncate a mapping under this process (SIGBUS); our own files stay mapped.
    pub fn map(&mut self, len: usize) -> Result<(), String> {
        if self.read_only && self.owner()?.0 != crate::trusted::euid() {
            return self.copy(len);
        }
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

    /// Reads the first `len` bytes into a private copy with `pread` (bounded: `len` is the
    /// layout's size, checked by the caller): a file cut short meanwhile is an error, never
    /// a signal.
    pub fn copy(&mut self, len: usize) -> Result<(), String> {
        let mut words = vec![Line([0; 128]); len.div_ceil(128)];
        let buf = words.as_mut_ptr().cast::<u8>();
        let mut done = 0usize;
        while done < len {
            // SAFETY: `buf` has room for `len` bytes (whole lines); our descriptor.
            let n = unsafe {
                libc::pread(
                    self.fd,
                    buf.add(done).cast(),
                    len - done,
                    done as libc::off_t,
                )
            };
            match n {
                n if n > 0 => done += n as usize,
                0 => return Err(format!("cut to {done} bytes while being read")),
                _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                _ => return Err(io::Error::last_os_error().to_string()),
            }
        }
        self.map = buf;
        self.len = len;
        self.copy = Some(words);
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
        if !self.map.is_null() && self.copy.is_none() {
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

/// A GPU's UUID packed into two atomic words (little-endian halves), as the group and
/// process files and the interposer keep one. Relaxed: whoever stores it publishes it after,
/// with a state word of its own.
pub fn store_uuid(words: &[std::sync::atomic::AtomicU64; 2], uuid: [u8; 16]) {
    for (i, w) in words.iter().enumerate() {
        let half: [u8; 8] = std::array::from_fn(|j| uuid[i * 8 + j]);
        w.store(
            u64::from_le_bytes(half),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// See [`store_uuid`].
pub fn load_uuid(words: &[std::sync::atomic::AtomicU64; 2]) -> [u8; 16] {
    let halves = words
        .each_ref()
        .map(|w| w.load(std::sync::atomic::Ordering::Relaxed).to_le_bytes());
    std::array::from_fn(|i| halves[i / 8][i % 8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// The UUID's bytes in order: the first eight in the first word, little-endian.
    #[test]
    fn a_uuid_round_trips_through_its_words() {
        let words = [AtomicU64::new(0), AtomicU64::new(0)];
        let uuid: [u8; 16] = std::array::from_fn(|i| 0xa0 + i as u8);
        store_uuid(&words, uuid);
        assert_eq!(words[0].load(Relaxed), 0xa7a6_a5a4_a3a2_a1a0);
        assert_eq!(words[1].load(Relaxed), 0xafae_adac_abaa_a9a8);
        assert_eq!(load_uuid(&words), uuid);
    }

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
