//! Where the trace goes: the `CUQUOTA_TRACE` template (`%p %h %r %t %%`) and the exclusive,
//! owner-only creation of the file (never overwriting, never following a symbolic link).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The values a template may name.
pub struct Vars {
    pub pid: u32,
    pub host: String,
    pub rank: u32,
    pub start_unix_secs: u64,
}

pub use cuquota_format::settings::rank;

/// Expands `%p` (pid), `%h` (host), `%r` (rank), `%t` (start, unix seconds) and `%%`, by
/// the rule `cuquota run` checks the template with (`cuquota_format::settings`).
pub fn expand(template: &OsStr, vars: &Vars) -> Result<OsString, String> {
    let vars = cuquota_format::settings::TemplateVars {
        pid: vars.pid,
        host: &vars.host,
        rank: vars.rank,
        start_unix_secs: vars.start_unix_secs,
    };
    cuquota_format::settings::expand_template(template.as_bytes(), &vars).map(OsString::from_vec)
}

/// How many suffixes (`PATH.1` … `PATH.N`) are tried before giving up.
const MAX_SUFFIX: u32 = 999;

/// Creates the trace file: `PATH`, else `PATH.1`, `PATH.2`, … when a file, directory or
/// symbolic link already has that name. Returns the open fd and the path used.
/// A character device or FIFO that already exists (`/dev/null`, `/dev/full`, a named pipe)
/// is opened for writing instead: writing to it overwrites nothing.
pub fn create(path: impl AsRef<OsStr>) -> Result<(i32, OsString), String> {
    let path = path.as_ref();
    let shown = path.to_string_lossy();
    for n in 0..=MAX_SUFFIX {
        let mut candidate = path.to_os_string();
        if n > 0 {
            candidate.push(format!(".{n}"));
        }
        let c_path = CString::new(candidate.as_bytes())
            .map_err(|_| format!("trace path \"{shown}\" contains a NUL byte"))?;
        // SAFETY: c_path is a valid NUL-terminated string for the duration of the call.
        // O_EXCL with O_CREAT fails on any existing name, a dangling symlink included.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd >= 0 {
            return Ok((fd, candidate));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EEXIST) {
            return Err(format!(
                "cannot create trace file \"{}\": {err}",
                candidate.to_string_lossy()
            ));
        }
        if let Some(fd) = open_existing_stream(&c_path)? {
            return Ok((fd, candidate));
        }
    }
    Err(format!(
        "cannot create trace file \"{shown}\": it and {shown}.1 … {shown}.{MAX_SUFFIX} all exist"
    ))
}

/// Opens `path` if it is (not a link to) a character device or FIFO; `Ok(None)` otherwise.
fn open_existing_stream(c_path: &CString) -> Result<Option<i32>, String> {
    let is_stream = |mode: libc::mode_t| {
        let kind = mode & libc::S_IFMT;
        kind == libc::S_IFCHR || kind == libc::S_IFIFO
    };
    // SAFETY: zeroed `stat` is a valid out-parameter; c_path is NUL-terminated.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::lstat(c_path.as_ptr(), &mut st) } != 0 || !is_stream(st.st_mode) {
        return Ok(None);
    }
    // O_NONBLOCK so that a FIFO with no reader fails (ENXIO) instead of hanging the hook.
    // SAFETY: as above.
    let fd = unsafe {
        libc::open(
            c_path.as_ptr(),
            libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        let err = io::Error::last_os_error();
        return Err(format!(
            "cannot open trace file \"{}\": {err}",
            c_path.to_string_lossy()
        ));
    }
    // Re-check on the fd: the name may have been replaced between lstat and open.
    // SAFETY: fd is open; st is a valid out-parameter.
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0 && is_stream(st.st_mode);
    if !ok {
        // SAFETY: fd is ours and not used after this.
        unsafe { libc::close(fd) };
        return Ok(None);
    }
    // Writes happen on the writer thread, which may block; clear O_NONBLOCK again.
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    Ok(Some(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn vars() -> Vars {
        Vars {
            pid: 4242,
            host: "node7".into(),
            rank: 3,
            start_unix_secs: 1_700_000_000,
        }
    }

    #[test]
    fn template_expansion() {
        let v = vars();
        assert_eq!(
            expand("/t/%h-%r-%p-%t.jsonl".as_ref(), &v).unwrap(),
            "/t/node7-3-4242-1700000000.jsonl"
        );
        assert_eq!(expand("100%%.%p".as_ref(), &v).unwrap(), "100%.4242");
        assert_eq!(expand("plain".as_ref(), &v).unwrap(), "plain");
        assert!(expand("a%x".as_ref(), &v).unwrap_err().contains("\"%x\""));
        assert!(expand("a%".as_ref(), &v).unwrap_err().contains("\"%\""));
        assert!(expand("".as_ref(), &v).is_err());
        // Bytes that are not UTF-8 stay exactly as given.
        let raw = OsStr::from_bytes(b"/t/\xff\xfe-%p");
        assert_eq!(expand(raw, &v).unwrap().as_bytes(), b"/t/\xff\xfe-4242");
    }

    #[test]
    fn rank_takes_the_first_set_variable() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(rank(env(&[])), 0);
        assert_eq!(rank(env(&[("SLURM_PROCID", "5"), ("PMI_RANK", "9")])), 5);
        assert_eq!(rank(env(&[("LOCAL_RANK", "2"), ("RANK", "11")])), 11);
        assert_eq!(rank(env(&[("RANK", "x")])), 0);
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("cuquota-path-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn close(fd: i32) {
        // SAFETY: test-owned fd.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn creates_owner_only_and_never_overwrites() {
        let dir = temp_dir("excl");
        let path = dir.join("t.jsonl");
        let path = path.to_str().unwrap();
        let (fd, used) = create(path).unwrap();
        close(fd);
        assert_eq!(used, path);
        let meta = std::fs::metadata(path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        std::fs::write(path, "keep").unwrap();
        let (fd, used) = create(path).unwrap();
        close(fd);
        assert_eq!(used, OsString::from(format!("{path}.1")));
        let (fd, used) = create(path).unwrap();
        close(fd);
        assert_eq!(used, OsString::from(format!("{path}.2")));
        assert_eq!(std::fs::read_to_string(path).unwrap(), "keep");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn symlinks_and_directories_get_a_suffix() {
        let dir = temp_dir("link");
        let target = dir.join("target");
        std::fs::write(&target, "victim").unwrap();
        let link = dir.join("t.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let dangling = dir.join("d.jsonl");
        std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).unwrap();
        let sub = dir.join("sub");
        std::fs::create_dir(&sub).unwrap();

        let (fd, used) = create(link.to_str().unwrap()).unwrap();
        close(fd);
        assert!(used.to_str().unwrap().ends_with("t.jsonl.1"));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "victim");
        let (fd, used) = create(dangling.to_str().unwrap()).unwrap();
        close(fd);
        assert!(used.to_str().unwrap().ends_with("d.jsonl.1"));
        assert!(!dir.join("nowhere").exists());
        let (fd, used) = create(sub.to_str().unwrap()).unwrap();
        close(fd);
        assert!(used.to_str().unwrap().ends_with("sub.1"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn devices_are_written_in_place_and_errors_name_the_path() {
        let (fd, used) = create("/dev/null").unwrap();
        close(fd);
        assert_eq!(used, "/dev/null");
        assert!(std::fs::metadata("/dev/null").unwrap().rdev() != 0);
        let err = create("/nonexistent-cuquota-dir/t.jsonl").unwrap_err();
        assert!(err.contains("/nonexistent-cuquota-dir/t.jsonl"), "{err}");
        assert!(err.contains("No such file"), "{err}");
    }
}
