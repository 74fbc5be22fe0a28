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
    /// `none` (or `unlimited`): no limit of the process's own, whatever the environment says.
    pub limit: Option<String>,
    pub trace: Option<String>,
    pub observe: bool,
    pub log: Option<String>,
    pub group: Option<String>,
    pub state_dir: Option<PathBuf>,
}

impl Settings {
    /// The checks the interposer makes of these values, made before the command starts: the
    /// same parsers (`cuquota_format::settings`), in the words of the options.
    pub fn check(&self) -> Result<(), String> {
        if let Some(limit) = self
            .limit
            .as_deref()
            .filter(|l| !settings::means_no_limit(l))
        {
            settings::parse_limits(limit)
                .map_err(|why| settings::option_limit_error(limit, &why))?;
        }
        if let Some(group) = &self.group {
            cuquota_format::group::check_name(group).map_err(|why| {
                format!(
                    "--group \"{}\" is not valid: {}",
                    settings::printable(group),
                    settings::printable(&why)
                )
            })?;
        }
        if let Some(dir) = &self.state_dir {
            if dir.as_os_str().is_empty() || (dir.exists() && !dir.is_dir()) {
                return Err(format!("--state-dir {}: not a directory", dir.display()));
            }
        }
        if let Some(trace) = &self.trace {
            settings::check_template(trace.as_bytes())
                .map_err(|e| e.replacen("CUQUOTA_TRACE=", "--trace ", 1))?;
        }
        if let Some(log) = &self.log {
            if let settings::LogTarget::File(path) = settings::parse_log_target(log.as_bytes()) {
                let dir = Path::new(OsStr::from_bytes(path)).parent();
                if let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
                    return Err(format!(
                        "--log \"{}\": there is no directory {}",
                        settings::printable(log),
                        dir.display()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Slips that parse but say something else than meant: `--limit 1 GiB` (the unit became
    /// the command), and a per-GPU limit that names no GPU the command will see (it would run
    /// with no limit at all). Refused, as a bad value is, before the command starts.
    pub fn check_intent(&self, command: &[OsString]) -> Result<(), String> {
        let Some(limit) = self.limit.as_deref() else {
            return Ok(());
        };
        let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        if let Some(word) = command.first().and_then(|c| c.to_str()) {
            let joined = format!("{}{word}", limit.trim());
            if number(limit.trim()) && is_unit(word) && settings::parse_limits(&joined).is_ok() {
                return Err(format!(
                    "--limit {limit} {word}: the unit is a word of its own, so {word} would be \
                     the command; write --limit {joined}"
                ));
            }
        }
        let Ok(limits @ settings::Limits::PerDevice(_)) = settings::parse_limits(limit) else {
            return Ok(());
        };
        // A driver that cannot be asked leaves the check to the interposer (at the first
        // CUDA call, with the same words), as it was before `run` asked.
        let Ok(seen) = crate::visible::devices() else {
            return Ok(());
        };
        let settings::Limits::PerDevice(named) = &limits else {
            return Ok(());
        };
        let unseen = limits.unseen(&seen);
        // Some named GPUs seen: the limit holds there; the interposer warns of the others.
        if unseen.len() < named.len() {
            return Ok(());
        }
        let names = unseen
            .iter()
            .map(|d| match d {
                settings::DeviceId::Ordinal(o) => format!("GPU {o}"),
                settings::DeviceId::Uuid(_) => d.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sees = if seen.is_empty() {
            "no GPU".to_string()
        } else {
            seen.iter()
                .map(|(d, u)| match u {
                    Some(u) => format!("GPU {d} ({})", settings::format_uuid(u)),
                    None => format!("GPU {d}"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        Err(format!(
            "--limit {limit} names {names}, which the command would not see, so it would run \
             with no limit; it sees {sees} (CUDA_VISIBLE_DEVICES renumbers from 0: name a GPU \
             by its UUID, nvidia-smi -L, to follow it)"
        ))
    }
}

/// A size's unit as a word of its own (`GiB`, `g`, `MB`, `%`).
fn is_unit(word: &str) -> bool {
    let w = word.to_ascii_lowercase();
    w == "%"
        || w == "b"
        || (["k", "m", "g", "t"].iter().any(|p| w.starts_with(p))
            && matches!(&w[1..], "" | "b" | "i" | "ib"))
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
    let state_dir = settings.state_dir.as_deref().map(std::path::absolute);
    let state_dir = match state_dir.transpose() {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("cuquota: --state-dir: {e}");
            return ExitCode::from(2);
        }
    };
    let vars = [
        ("CUQUOTA_LIMIT", settings.limit.as_deref().map(OsStr::new)),
        ("CUQUOTA_TRACE", settings.trace.as_deref().map(OsStr::new)),
        (
            "CUQUOTA_MODE",
            settings.observe.then_some(OsStr::new("observe")),
        ),
        ("CUQUOTA_LOG", settings.log.as_deref().map(OsStr::new)),
        ("CUQUOTA_GROUP", settings.group.as_deref().map(OsStr::new)),
        // Absolute: the command may change directory before its first CUDA call.
        (
            "CUQUOTA_STATE_DIR",
            state_dir.as_deref().map(Path::as_os_str),
        ),
    ];
    for (name, value) in vars {
        match value {
            // `--limit none`: no limit of its own, even one the environment gave.
            Some(v)
                if name == "CUQUOTA_LIMIT" && settings::means_no_limit(&v.to_string_lossy()) =>
            {
                cmd.env_remove(name);
            }
            Some(v) => {
                cmd.env(name, v);
            }
            None => {}
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
            group: None,
            state_dir: None,
        }
    }

    #[test]
    fn values_are_checked_with_the_interposers_parsers() {
        assert_eq!(
            settings(Some("6GBB"), None, None).check().unwrap_err(),
            "--limit \"6GBB\" is not valid: unknown unit \"GBB\"; use e.g. --limit 6GiB, 6144MiB, 75%, 0:6GiB,1:50% or none"
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
            "--log \"/no/such/dir/log\": there is no directory /no/such/dir"
        );
        for ok in [
            settings(
                Some("0:1G,GPU-63757175-6f74-412d-b368-696d00000001:2G"),
                Some("t-%p"),
                Some("OFF"),
            ),
            settings(None, None, Some("log.txt")),
            settings(Some("none"), None, None),
            settings(Some("Unlimited"), None, None),
        ] {
            assert_eq!(ok.check(), Ok(()));
        }
    }

    #[test]
    fn units_as_words_of_their_own() {
        for unit in ["GiB", "g", "MB", "ki", "T", "%", "b"] {
            assert!(is_unit(unit), "{unit}");
        }
        for word in ["python", "gx", "torchrun", "Gib2", "", "mib/"] {
            assert!(!is_unit(word), "{word}");
        }
        let s = settings(Some("1"), None, None);
        assert_eq!(
            s.check_intent(&["GiB".into(), "prog".into()]).unwrap_err(),
            "--limit 1 GiB: the unit is a word of its own, so GiB would be the command; write --limit 1GiB"
        );
        assert_eq!(s.check_intent(&["prog".into()]), Ok(()));
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
