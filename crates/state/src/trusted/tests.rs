//! The trust rule on real directories: links anywhere under the state directory, `/proc`,
//! FIFOs, other users' directories, and making a state directory.

use super::*;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cuquota-trusted-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn untrusted(r: Result<TrustedDir, Refusal>) -> String {
    match r {
        Err(Refusal::Untrusted(line)) => line,
        other => panic!("not refused as untrusted: {other:?}"),
    }
}

#[test]
fn a_state_directory_is_made_with_its_parents_and_opened_again() {
    let d = scratch("make");
    let state = d.join("a/b/state");
    let dir = TrustedDir::open(&state, true).unwrap();
    assert_eq!(dir.path(), state.as_path());
    let mode = fs::metadata(&state).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o1777);
    let sub = dir.sub("processes", true).unwrap();
    assert!(state.join("processes").is_dir());
    assert_eq!(sub.names().unwrap(), Vec::<OsString>::new());
    // Opened again, not made; a missing one is Missing when not to be made.
    TrustedDir::open(&state, false).unwrap();
    assert!(matches!(
        TrustedDir::open(&d.join("none"), false),
        Err(Refusal::Missing(_))
    ));
    assert!(matches!(dir.sub("groups", false), Err(Refusal::Missing(_))));
    assert!(!d.join("none").exists());
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn no_link_is_followed_from_the_state_directory_down() {
    let d = scratch("links");
    let victim = d.join("victim");
    fs::create_dir(&victim).unwrap();
    fs::write(victim.join("precious"), b"x").unwrap();
    // The state directory a link.
    symlink(&victim, d.join("state")).unwrap();
    let line = untrusted(TrustedDir::open(&d.join("state"), true));
    assert!(
        line.starts_with(&format!("{} (owner uid ", d.join("state").display()))
            && line.contains(", mode 777) is a symbolic link"),
        "{line}"
    );
    // A subdirectory a link.
    fs::create_dir(d.join("real")).unwrap();
    symlink(&victim, d.join("real/processes")).unwrap();
    let real = TrustedDir::open(&d.join("real"), true).unwrap();
    let line = untrusted(real.sub("processes", true));
    assert!(line.contains("processes (owner uid ") && line.contains("is a symbolic link"));
    // A link above the state directory that root did not make (only root may run this
    // part: a link's owner is its maker).
    if euid() == 0 {
        let up = d.join("up");
        symlink(d.join("real"), &up).unwrap();
        std::os::unix::fs::lchown(&up, Some(1), Some(1)).unwrap();
        let line = untrusted(TrustedDir::open(&up.join("x"), true));
        assert!(
            line.contains("(owner uid 1, mode 777) is a symbolic link"),
            "{line}"
        );
        // Root's own link above it is followed.
        std::os::unix::fs::lchown(&up, Some(0), Some(0)).unwrap();
        TrustedDir::open(&up.join("x"), true).unwrap();
        assert!(d.join("real/x").is_dir());
    }
    // A file link and a FIFO: refused, never opened through.
    symlink(victim.join("precious"), d.join("real/link")).unwrap();
    let fifo = std::ffi::CString::new(d.join("real/fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) }, 0);
    let line = real.open_file("link", libc::O_RDWR).unwrap_err();
    assert!(
        matches!(&line, Refusal::Untrusted(l) if l.contains("link (owner uid ") && l.contains("is a symbolic link")),
        "{line:?}"
    );
    let line = real.open_file("fifo", libc::O_RDONLY).unwrap_err();
    assert!(
        matches!(&line, Refusal::Untrusted(l) if l.contains("fifo (owner uid ") && l.contains("is a FIFO, not a regular file")),
        "{line:?}"
    );
    assert_eq!(fs::read(victim.join("precious")).unwrap(), b"x");
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn proc_and_sys_are_never_a_state_directory() {
    let me = std::process::id();
    for path in [
        "/proc/self".to_string(),
        format!("/proc/{me}"),
        format!("/proc/{me}/state"),
        "/sys/kernel".to_string(),
    ] {
        let line = untrusted(TrustedDir::open(Path::new(&path), true));
        let top = &path[..path[1..].find('/').map_or(path.len(), |i| i + 1)];
        let mode = fs::metadata(top).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            line,
            format!(
                "{top} (owner uid 0, mode {mode:o}) is in a file system of the kernel's \
                 (/proc, /sys), never a state directory"
            ),
            "{path}"
        );
    }
    // The old `make_dir` recursed without end on this (SIGSEGV); it is one refusal now.
    let line = crate::shared::make_dir(Path::new("/proc/self/fd")).unwrap_err();
    assert!(
        line.starts_with("/proc (owner uid 0, mode 555) is in a file system"),
        "{line}"
    );
}

#[test]
fn directories_others_may_change_are_refused() {
    assert_eq!(check_dir(0, 0o1777, 1000), Ok(()));
    assert_eq!(check_dir(1000, 0o700, 1000), Ok(()));
    assert_eq!(check_dir(0, 0o755, 1000), Ok(()));
    assert_eq!(
        check_dir(0, 0o777, 1000).unwrap_err(),
        "may be written by others and has no sticky bit"
    );
    assert!(check_dir(0, 0o775, 1000).is_err());
    assert_eq!(
        check_dir(1001, 0o1777, 1000).unwrap_err(),
        "belongs to another user (neither root nor uid 1000), who could change what is in it"
    );
    let d = scratch("modes");
    fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
    let line = untrusted(TrustedDir::open(&d, false));
    assert!(
        line.ends_with("mode 777) may be written by others and has no sticky bit"),
        "{line}"
    );
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn dead_entries_are_removed_only_when_still_the_file_checked() {
    let d = scratch("unlink");
    let dir = TrustedDir::open(&d, false).unwrap();
    fs::write(d.join("a"), b"1").unwrap();
    let (fd, st) = dir.open_file("a", libc::O_RDONLY).unwrap();
    // SAFETY: the descriptor open_file gave.
    unsafe { libc::close(fd) };
    // Replaced meanwhile (the first kept aside, so that its inode is not reused): left alone.
    fs::rename(d.join("a"), d.join("kept")).unwrap();
    fs::write(d.join("b"), b"2").unwrap();
    fs::rename(d.join("b"), d.join("a")).unwrap();
    assert!(dir
        .unlink("a", st.st_ino)
        .unwrap_err()
        .contains("replaced meanwhile"));
    assert!(d.join("a").exists());
    let ino = fs::metadata(d.join("a")).unwrap().ino();
    dir.unlink("a", ino).unwrap();
    assert!(!d.join("a").exists());
    assert!(dir.unlink("../x", 0).is_err());
    let _ = fs::remove_dir_all(&d);
}

use std::os::unix::fs::MetadataExt;
