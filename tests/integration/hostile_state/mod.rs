//! A hostile neighbour on the shared state directory touches nothing. Another real user
//! (daemon, uid 1) plants what it can where everyone's processes keep their state — links
//! to a victim's directory or to /proc/self, FIFOs, group files renamed or with a forged
//! header, a registry file naming another user's process, a registry file it truncates
//! while others read it — and the victim (nobody, uid 65534; root where it matters) runs on:
//! nothing of its own or root's is deleted or written, no call waits on a FIFO, no view
//! dies of SIGBUS, no forged figure or holder is shown, and one line says what was refused.
//! The tests run as root (CI does): see [`crate::common::Kit`].

// Links in and to the state directory; /proc/self; dead entries of other users.
mod links;
// FIFOs where registry and group files should be.
mod fifos;
// Renamed and forged group files, forged holders, `cuquota set` on another's file.
mod forgery;
// Registry files truncated under a viewer and under a refusal.
mod truncation;

use crate::common::*;
use crate::reliability_util::files_in;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{chown, lchown, symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// Makes a FIFO at `path`, mode 666, owned by `user`.
fn fifo(path: &Path, user: (u32, u32)) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o666) },
        0,
        "{}",
        path.display()
    );
    fs::set_permissions(path, fs::Permissions::from_mode(0o666)).unwrap();
    chown(path, Some(user.0), Some(user.1)).unwrap();
}

/// A symbolic link at `at` to `to`, made by `user`.
fn link(to: &Path, at: &Path, user: (u32, u32)) {
    symlink(to, at).unwrap();
    lchown(at, Some(user.0), Some(user.1)).unwrap();
}

/// A private directory of `user` (mode 700) holding `names`, each a regular file of that
/// user's whose contents are its name: what a mistaken "dead entry" removal would take.
fn private_dir(at: PathBuf, user: (u32, u32), names: &[&str]) -> PathBuf {
    fs::create_dir(&at).unwrap();
    for name in names {
        let f = at.join(name);
        fs::write(&f, name).unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
        chown(&f, Some(user.0), Some(user.1)).unwrap();
    }
    fs::set_permissions(&at, fs::Permissions::from_mode(0o700)).unwrap();
    chown(&at, Some(user.0), Some(user.1)).unwrap();
    at
}

/// Every file of [`private_dir`] is still there, as it was.
fn untouched(dir: &Path, names: &[&str]) {
    let mut found: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(found, names, "{}", dir.display());
    for name in names {
        assert_eq!(fs::read(dir.join(name)).unwrap(), name.as_bytes());
    }
}

/// A job under a 1 GiB quota that allocates 1 MiB then 2 GiB: the quota still holds (the
/// second is refused), the process exits 0, and one line says it is not registered, and why.
const JOB: &str = "init alloc:1M alloc:2G";

fn ran_unregistered(out: &Output, why: &str) {
    out.check_exit(0);
    out.check_rcs(&[0, 0, OUT_OF_MEMORY]);
    out.check_log(&format!(
        "this process is not listed for cuquota top and metrics ({why})"
    ));
}
