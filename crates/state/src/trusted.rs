//! The one trust rule for every path under the state directory, for every process that
//! reads or writes there (the interposer, the CLI, the Slurm plugin, the NVML hooks).
//!
//! Every user's processes share the state directory, so whatever another user could have
//! put there is hostile: a symbolic link (to a directory of the victim's, to `/proc/self`),
//! a FIFO, a device, a file that changes size. The rule:
//! - the state directory is reached from `/` one component at a time, each opened with
//!   `openat(O_DIRECTORY|O_NOFOLLOW)` relative to the one before; a link above the state
//!   directory is followed only when root owns it (as `/var/run`), and none at all from the
//!   state directory down;
//! - each directory counts only if root or this process's user owns it and, when others may
//!   write it, it has the sticky bit (so nobody else can rename or delete what is in it);
//!   one in `/proc` or `/sys` never counts;
//! - files are opened relative to their trusted directory's descriptor with
//!   `O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC` (a FIFO's open never waits) and `fstat`-checked as
//!   regular before anything is read; a name is one plain component.
//!
//! Anything else is refused with one line naming the path, its owner and its mode.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// Entries read from one directory at most (a directory with more is read in part).
pub const MAX_ENTRIES: usize = 100_000;

/// The magic numbers (`statfs`'s `f_type`) of the kernel's own file systems, where no state
/// directory may be: proc, sysfs, cgroup, cgroup2, debugfs, tracefs, securityfs.
const KERNEL_FS: [i64; 7] = [
    0x9fa0,
    0x6265_6572,
    0x27e0eb,
    0x6367_7270,
    0x6462_6720,
    0x7472_6163,
    0x7365_6373,
];

/// Why a path under the state directory cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It does not exist (and was not to be made).
    Missing(String),
    /// It exists but breaks the trust rule: a link, not a directory or regular file, another
    /// user's, writable by others without the sticky bit, in `/proc` or `/sys`.
    Untrusted(String),
    /// The system said no (permissions, no room).
    Failed(String),
}

impl Refusal {
    /// The one line that says why.
    pub fn line(&self) -> &str {
        match self {
            Refusal::Missing(s) | Refusal::Untrusted(s) | Refusal::Failed(s) => s,
        }
    }

    pub fn into_line(self) -> String {
        match self {
            Refusal::Missing(s) | Refusal::Untrusted(s) | Refusal::Failed(s) => s,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.line())
    }
}

/// This process's effective user.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

fn errno() -> i32 {
    last_error().raw_os_error().unwrap_or(0)
}

fn c_name(name: &OsStr) -> Result<CString, Refusal> {
    CString::new(name.as_bytes())
        .map_err(|_| Refusal::Untrusted(format!("{name:?} has a NUL byte")))
}

fn fstat(fd: libc::c_int) -> io::Result<libc::stat> {
    // SAFETY: fstat into a zeroed struct of the right type.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor we hold and a valid out-pointer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(last_error());
    }
    Ok(st)
}

/// The status of `name` in directory `dir` itself (a link's own, not its target's).
fn lstat_at(dir: libc::c_int, name: &CString) -> io::Result<libc::stat> {
    // SAFETY: as in `fstat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: our directory descriptor, a valid C string and out-pointer.
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(last_error());
    }
    Ok(st)
}

/// `(owner uid U, mode M)` of a status.
fn owner_mode(st: &libc::stat) -> String {
    format!("(owner uid {}, mode {:o})", st.st_uid, st.st_mode & 0o7777)
}

fn kind_word(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFDIR => "a directory",
        _ => "not a regular file",
    }
}

/// Whether a directory of status `st` may be trusted by user `me` (see the module's rule).
/// Err is the line's tail after the path.
pub fn check_dir(uid: u32, mode: u32, me: u32) -> Result<(), String> {
    if uid != 0 && uid != me {
        return Err(format!(
            "belongs to another user (neither root nor uid {me}), who could change what is in it"
        ));
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err("may be written by others and has no sticky bit".into());
    }
    Ok(())
}

/// A directory opened under the trust rule, by its descriptor; every name in it is opened
/// relative to that descriptor. Dropping it closes the descriptor.
#[derive(Debug)]
pub struct TrustedDir {
    fd: libc::c_int,
    path: PathBuf,
}

impl Drop for TrustedDir {
    fn drop(&mut self) {
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// Creation mode of a directory cuquota makes: like /dev/shm, so that every user's
/// processes can keep their files there, none able to remove another's.
const DIR_MODE: libc::mode_t = 0o1777;

impl TrustedDir {
    /// Opens the state directory `state_dir` (made, with the directories above it that are
    /// missing, mode 1777, when `create`). A relative path is taken from the working
    /// directory; a `..` in it is refused.
    pub fn open(state_dir: &Path, create: bool) -> Result<TrustedDir, Refusal> {
        let absolute = if state_dir.is_absolute() {
            state_dir.to_path_buf()
        } else {
            let cwd = std::env::current_dir()
                .map_err(|e| Refusal::Failed(format!("cannot read the working directory: {e}")))?;
            cwd.join(state_dir)
        };
        let mut names: Vec<&OsStr> = Vec::new();
        for c in absolute.components() {
            match c {
                Component::Normal(n) => names.push(n),
                Component::RootDir | Component::CurDir => {}
                Component::ParentDir | Component::Prefix(_) => {
                    return Err(Refusal::Untrusted(format!(
                        "{}: \"..\" may not appear in a state directory's path",
                        state_dir.display()
                    )))
                }
            }
        }
        // SAFETY: a constant C string; the result is checked.
        let fd = unsafe {
            libc::open(
                c"/".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(Refusal::Failed(format!("cannot open /: {}", last_error())));
        }
        let mut dir = TrustedDir {
            fd,
            path: PathBuf::from("/"),
        };
        dir.check()?;
        let last = names.len().saturating_sub(1);
        for (i, name) in names.iter().enumerate() {
            // Above the state directory, a link root made is followed.
            let next = dir.step(name, create, i < last)?;
            dir = next;
        }
        Ok(dir)
    }

    /// Opens the subdirectory `name` (one component), made mode 1777 when missing and
    /// `create`: a link is never followed.
    pub fn sub(&self, name: &str, create: bool) -> Result<TrustedDir, Refusal> {
        self.step(OsStr::new(name), create, false)
    }

    /// The path it was reached by (for lines; never used to open anything).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One step down: `name` opened (made when missing and `create`) and checked.
    fn step(
        &self,
        name: &OsStr,
        create: bool,
        follow_root_links: bool,
    ) -> Result<TrustedDir, Refusal> {
        let path = self.path.join(name);
        let c = c_name(name)?;
        check_component(name, &path)?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        let mut made = false;
        // Twice at most: once to find it missing and make it, once to open what was made.
        for _ in 0..2 {
            // SAFETY: our directory descriptor and a valid C string; checked below.
            let fd = unsafe { libc::openat(self.fd, c.as_ptr(), flags | libc::O_NOFOLLOW) };
            if fd >= 0 {
                let dir = TrustedDir { fd, path };
                if made {
                    dir.set_made_mode();
                }
                dir.check()?;
                return Ok(dir);
            }
            match errno() {
                libc::ENOENT if create => {
                    // SAFETY: as above; mkdirat makes no more than the one name.
                    if unsafe { libc::mkdirat(self.fd, c.as_ptr(), DIR_MODE) } == 0 {
                        made = true;
                    } else if errno() != libc::EEXIST {
                        return Err(Refusal::Failed(format!(
                            "cannot create {}: {}",
                            path.display(),
                            last_error()
                        )));
                    }
                }
                libc::ENOENT => {
                    return Err(Refusal::Missing(format!(
                        "{}: no such directory",
                        path.display()
                    )))
                }
                libc::ELOOP | libc::ENOTDIR => {
                    let st = lstat_at(self.fd, &c).map_err(|e| {
                        Refusal::Failed(format!("cannot open {}: {e}", path.display()))
                    })?;
                    let is_link = st.st_mode & libc::S_IFMT == libc::S_IFLNK;
                    if is_link && follow_root_links && st.st_uid == 0 {
                        // SAFETY: as above, following the link root made.
                        let fd = unsafe { libc::openat(self.fd, c.as_ptr(), flags) };
                        if fd < 0 {
                            return Err(Refusal::Failed(format!(
                                "cannot open {}: {}",
                                path.display(),
                                last_error()
                            )));
                        }
                        let dir = TrustedDir { fd, path };
                        dir.check()?;
                        return Ok(dir);
                    }
                    let why = match (is_link, follow_root_links) {
                        (true, true) => {
                            "is a symbolic link root did not make, and only root's are \
                             followed on the way to a state directory"
                        }
                        (true, false) => {
                            "is a symbolic link, and none is followed from a state directory \
                             down"
                        }
                        (false, _) => "is not a directory",
                    };
                    return Err(Refusal::Untrusted(format!(
                        "{} {} {why}",
                        path.display(),
                        owner_mode(&st)
                    )));
                }
                _ => {
                    return Err(Refusal::Failed(format!(
                        "cannot open {}: {}",
                        path.display(),
                        last_error()
                    )))
                }
            }
        }
        Err(Refusal::Failed(format!(
            "{} changed while being made",
            path.display()
        )))
    }

    /// A directory this process just made: the mode the umask narrowed, when it is ours.
    fn set_made_mode(&self) {
        if fstat(self.fd).is_ok_and(|st| st.st_uid == euid()) {
            // SAFETY: our descriptor.
            unsafe { libc::fchmod(self.fd, DIR_MODE) };
        }
    }

    /// Whether the directory (already open) may be trusted.
    fn check(&self) -> Result<(), Refusal> {
        let st = fstat(self.fd).map_err(|e| {
            Refusal::Failed(format!(
                "cannot read the status of {}: {e}",
                self.path.display()
            ))
        })?;
        if let Err(why) = check_dir(st.st_uid, st.st_mode & 0o7777, euid()) {
            return Err(Refusal::Untrusted(format!(
                "{} {} {why}",
                self.path.display(),
                owner_mode(&st)
            )));
        }
        // SAFETY: fstatfs into a zeroed struct of the right type, our descriptor.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstatfs(self.fd, &mut fs) } == 0
            && KERNEL_FS.contains(&(fs.f_type as i64))
        {
            return Err(Refusal::Untrusted(format!(
                "{} {} is in a file system of the kernel's (/proc, /sys), never a state directory",
                self.path.display(),
                owner_mode(&st)
            )));
        }
        Ok(())
    }

    /// Opens the regular file `name` in this directory with `access` (`O_RDONLY`,
    /// `O_RDWR`; with `O_CREAT`/`O_EXCL` when asked, mode 0600), never following a link and
    /// never waiting (`O_NONBLOCK`), and checks it is a regular file before anything is
    /// read. Returns the descriptor (the caller closes it) and its status.
    pub fn open_file(
        &self,
        name: &str,
        access: libc::c_int,
    ) -> Result<(libc::c_int, libc::stat), Refusal> {
        let path = self.path.join(name);
        check_component(OsStr::new(name), &path)?;
        let c = c_name(OsStr::new(name))?;
        let flags = access | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
        // SAFETY: our directory descriptor, a valid C string, the mode as open's variadic
        // argument (read only with O_CREAT).
        let fd = unsafe { libc::openat(self.fd, c.as_ptr(), flags, 0o600 as libc::c_uint) };
        if fd < 0 {
            let e = last_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENOENT) => Refusal::Missing(format!("{}: no such file", path.display())),
                Some(libc::ELOOP) => match lstat_at(self.fd, &c) {
                    Ok(st) => Refusal::Untrusted(format!(
                        "{} {} is a symbolic link, which is never followed under a state \
                         directory",
                        path.display(),
                        owner_mode(&st)
                    )),
                    Err(_) => Refusal::Failed(format!("cannot open {}: {e}", path.display())),
                },
                _ => Refusal::Failed(format!("cannot open {}: {e}", path.display())),
            });
        }
        let st = match fstat(fd) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => st,
            Ok(st) => {
                // SAFETY: our descriptor, closed once.
                unsafe { libc::close(fd) };
                return Err(Refusal::Untrusted(format!(
                    "{} {} is {}, not a regular file",
                    path.display(),
                    owner_mode(&st),
                    kind_word(st.st_mode)
                )));
            }
            Err(e) => {
                // SAFETY: as above.
                unsafe { libc::close(fd) };
                return Err(Refusal::Failed(format!(
                    "cannot read the status of {}: {e}",
                    path.display()
                )));
            }
        };
        Ok((fd, st))
    }

    /// Removes `name` from this directory if it is still the file of inode `ino` (the
    /// caller checked that file): through the directory's descriptor, never a path.
    pub fn unlink(&self, name: &str, ino: u64) -> Result<(), String> {
        let path = self.path.join(name);
        check_component(OsStr::new(name), &path).map_err(Refusal::into_line)?;
        let c = c_name(OsStr::new(name)).map_err(Refusal::into_line)?;
        let st = lstat_at(self.fd, &c).map_err(|e| format!("{}: {e}", path.display()))?;
        if st.st_ino != ino || st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(format!("{} was replaced meanwhile", path.display()));
        }
        // SAFETY: our directory descriptor and a valid C string.
        if unsafe { libc::unlinkat(self.fd, c.as_ptr(), 0) } != 0 {
            return Err(format!(
                "cannot remove {}: {}",
                path.display(),
                last_error()
            ));
        }
        Ok(())
    }

    /// Removes the regular file `name` (a link, FIFO or directory there stays): for root's
    /// tools, which remove what their jobs left.
    pub fn remove_file(&self, name: &str) -> Result<(), Refusal> {
        let (fd, st) = self.open_file(name, libc::O_RDONLY)?;
        // SAFETY: the descriptor open_file gave, closed once.
        unsafe { libc::close(fd) };
        self.unlink(name, st.st_ino).map_err(Refusal::Failed)
    }

    /// The names in this directory (not `.` and `..`), at most [`MAX_ENTRIES`], sorted.
    pub fn names(&self) -> Result<Vec<OsString>, String> {
        // A descriptor of its own for the stream (closedir closes it).
        // SAFETY: our directory descriptor and a constant C string.
        let fd = unsafe {
            libc::openat(
                self.fd,
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(format!(
                "cannot read {}: {}",
                self.path.display(),
                last_error()
            ));
        }
        // SAFETY: a directory descriptor we own, handed to the stream.
        let stream = unsafe { libc::fdopendir(fd) };
        if stream.is_null() {
            // SAFETY: still ours when fdopendir failed.
            unsafe { libc::close(fd) };
            return Err(format!(
                "cannot read {}: {}",
                self.path.display(),
                last_error()
            ));
        }
        let mut names = Vec::new();
        while names.len() < MAX_ENTRIES {
            // SAFETY: a live stream; the entry is valid until the next readdir.
            let entry = unsafe { libc::readdir(stream) };
            if entry.is_null() {
                break;
            }
            // SAFETY: d_name is a NUL-terminated string inside the entry.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
            let bytes = name.to_bytes();
            if bytes != b"." && bytes != b".." {
                names.push(OsString::from_vec(bytes.to_vec()));
            }
        }
        // SAFETY: the stream, closed once (with its descriptor).
        unsafe { libc::closedir(stream) };
        names.sort();
        Ok(names)
    }
}

/// A name is one plain path component.
fn check_component(name: &OsStr, path: &Path) -> Result<(), Refusal> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Refusal::Untrusted(format!(
            "{}: {name:?} is not a plain file name",
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
