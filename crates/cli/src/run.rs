//! `cuquota run`: exec a command with libcuquota.so preloaded and the settings in its
//! environment. exec, not spawn: the command keeps this pid (so `%p` and signals from the
//! terminal reach it directly) and its exit status or signal is the caller's to see.
//!
//! Beside the preload, `LD_AUDIT` names libcuquota_audit.so (found next to libcuquota.so),
//! which binds the driver functions of objects loaded with RTLD_DEEPBIND to the hooks too.

use cuquota_format::settings;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const LIBRARY: &str = "libcuquota.so";
const AUDIT_MODULE: &str = "libcuquota_audit.so";

pub struct Settings {
    pub limit: Option<String>,
    pub trace: Option<String>,
    pub observe: bool,
    pub log: Option<String>,
}

impl Settings {
    /// The checks the interposer makes of these values, made before the command starts: the
    /// same parsers (`cuquota_format::settings`) and the same words.
    pub fn check(&self) -> Result<(), String> {
        if let Some(limit) = &self.limit {
            settings::parse_limits(limit).map_err(|why| settings::limit_error(limit, &why))?;
        }
        if let Some(trace) = &self.trace {
            settings::check_template(trace.as_bytes())?;
        }
        if let Some(log) = &self.log {
            if let settings::LogTarget::File(path) = settings::parse_log_target(log.as_bytes()) {
                let dir = Path::new(OsStr::from_bytes(path)).parent();
                if let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
                    return Err(format!(
                        "CUQUOTA_LOG=\"{}\": there is no directory {}",
                        settings::printable(log),
                        dir.display()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Returns only when the command could not be started (127: not found, 126: not runnable).
pub fn exec(settings: &Settings, command: &[OsString]) -> ExitCode {
    let library = match find_library() {
        Ok(path) => path,
        Err(e) => {
            eprintln!("cuquota: {e}");
            return ExitCode::from(127);
        }
    };
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    cmd.env(
        "LD_PRELOAD",
        preload_with(&library, std::env::var_os("LD_PRELOAD").as_deref()),
    );
    // Without the audit module (not built, not installed beside the library) deep-bound
    // objects go unenforced, and cuquota says so at exit.
    if let Some(audit) = usable(&library.with_file_name(AUDIT_MODULE)) {
        cmd.env(
            "LD_AUDIT",
            preload_with(&audit, std::env::var_os("LD_AUDIT").as_deref()),
        );
    }
    let vars = [
        ("CUQUOTA_LIMIT", settings.limit.as_deref()),
        ("CUQUOTA_TRACE", settings.trace.as_deref()),
        ("CUQUOTA_MODE", settings.observe.then_some("observe")),
        ("CUQUOTA_LOG", settings.log.as_deref()),
    ];
    for (name, value) in vars {
        if let Some(value) = value {
            cmd.env(name, value);
        }
    }
    let err = cmd.exec();
    eprintln!(
        "cuquota: cannot run {}: {err}",
        Path::new(&command[0]).display()
    );
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

/// `CUQUOTA_LIB` if set; else next to this executable (target/release), its parent
/// (target/release/deps, or an install's bin/ beside lib/), or ../lib.
fn find_library() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("CUQUOTA_LIB") {
        let path = PathBuf::from(path);
        return usable(&path).ok_or_else(|| {
            let why = if path.is_file() {
                "LD_PRELOAD cannot name a path with a space or colon"
            } else {
                "no such file (it should name libcuquota.so)"
            };
            format!("CUQUOTA_LIB={}: {why}", path.display())
        });
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate cuquota itself: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join(LIBRARY),
        dir.join("..").join(LIBRARY),
        dir.join("../lib").join(LIBRARY),
    ];
    candidates.iter().find_map(|p| usable(p)).ok_or_else(|| {
        format!(
            "cannot find {LIBRARY} next to {} or in its parent directory; build it \
             (cargo build --release) or set CUQUOTA_LIB=/path/to/{LIBRARY}",
            exe.display()
        )
    })
}

/// The absolute path of `path` if it is a file LD_PRELOAD can name (no space or colon).
fn usable(path: &Path) -> Option<PathBuf> {
    let path = path.canonicalize().ok()?;
    let bytes = path.as_os_str().as_bytes();
    (path.is_file() && !bytes.iter().any(|b| *b == b' ' || *b == b':')).then_some(path)
}

/// The library first, then whatever was already preloaded (without a second copy of it).
fn preload_with(library: &Path, existing: Option<&OsStr>) -> OsString {
    let mut value = library.as_os_str().to_os_string();
    let lib = library.as_os_str().as_bytes();
    for entry in existing
        .map(OsStr::as_bytes)
        .unwrap_or_default()
        .split(|b| *b == b':' || *b == b' ')
        .filter(|e| !e.is_empty() && *e != lib)
    {
        value.push(":");
        value.push(OsStr::from_bytes(entry));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(limit: Option<&str>, trace: Option<&str>, log: Option<&str>) -> Settings {
        Settings {
            limit: limit.map(Into::into),
            trace: trace.map(Into::into),
            observe: false,
            log: log.map(Into::into),
        }
    }

    #[test]
    fn values_are_checked_with_the_interposers_parsers() {
        assert_eq!(
            settings(Some("6GBB"), None, None).check().unwrap_err(),
            "CUQUOTA_LIMIT=\"6GBB\" is not valid: unknown unit \"GBB\"; use e.g. CUQUOTA_LIMIT=6GiB, 6144MiB, 75% or 0:6GiB,1:50%"
        );
        assert!(settings(Some("1.5"), None, None)
            .check()
            .unwrap_err()
            .contains("1.5GiB"));
        assert!(settings(None, Some("t-%x"), None)
            .check()
            .unwrap_err()
            .contains("\"%x\""));
        assert_eq!(
            settings(None, None, Some("/no/such/dir/log"))
                .check()
                .unwrap_err(),
            "CUQUOTA_LOG=\"/no/such/dir/log\": there is no directory /no/such/dir"
        );
        for ok in [
            settings(
                Some("0:1G,GPU-63757175-6f74-412d-b368-696d00000001:2G"),
                Some("t-%p"),
                Some("OFF"),
            ),
            settings(None, None, Some("log.txt")),
        ] {
            assert_eq!(ok.check(), Ok(()));
        }
    }

    #[test]
    fn preload_is_prepended_once() {
        let lib = Path::new("/opt/cuquota/libcuquota.so");
        assert_eq!(preload_with(lib, None), "/opt/cuquota/libcuquota.so");
        assert_eq!(
            preload_with(
                lib,
                Some(OsStr::new("/a.so /b.so:/opt/cuquota/libcuquota.so"))
            ),
            "/opt/cuquota/libcuquota.so:/a.so:/b.so"
        );
    }
}
