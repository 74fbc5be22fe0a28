//! `cuquota run`: exec a command with libcuquota.so preloaded and the settings in its
//! environment. exec, not spawn: the command keeps this pid (so `%p` and signals from the
//! terminal reach it directly) and its exit status or signal is the caller's to see.
//!
//! Beside the preload, `LD_AUDIT` names libcuquota_audit.so (found next to libcuquota.so),
//! which binds the driver functions of objects loaded with RTLD_DEEPBIND to the hooks too.

use cuquota_format::{lenient, settings};
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
    /// A driver directory (its `libcuda.so.1`) put first on the command's `LD_LIBRARY_PATH`:
    /// the stand-in for one command, nothing left in the shell.
    pub driver: Option<PathBuf>,
    /// Call stacks of at most this many frames in the trace (`CUQUOTA_STACKS`).
    pub stacks: Option<u32>,
}

impl Settings {
    /// The checks the interposer makes of these values, made before the command starts: the
    /// same parsers (`cuquota_format::settings`), in the words of the options. Returns the
    /// notes on values that are valid but may not say what was meant.
    pub fn check(&self) -> Result<Vec<String>, String> {
        let mut notes = Vec::new();
        if let Some(limit) = self
            .limit
            .as_deref()
            .filter(|l| !settings::means_no_limit(l))
        {
            settings::parse_limits(limit)
                .map_err(|why| settings::option_limit_error(limit, &why))?;
            notes.extend(settings::limit_notes(limit, "--limit "));
        }
        if let Some(group) = &self.group {
            cuquota_state::group::check_name(group).map_err(|why| {
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
        if let Some(dir) = &self.driver {
            if !dir.join("libcuda.so.1").is_file() {
                return Err(format!(
                    "--driver {}: there is no libcuda.so.1 in it (scripts/shim.sh prints the \
                     stand-in's directory; python3 -m cuquota.shim after pip install)",
                    dir.display()
                ));
            }
        }
        if let Some(n) = self.stacks {
            if lenient::parse_stacks(&n.to_string()).is_none() {
                return Err(format!(
                    "--stacks {n}: give {}",
                    lenient::STACKS
                        .valid
                        .replace("a number of frames", "frames")
                ));
            }
        }
        if let Some(trace) = &self.trace {
            let named = format!("--trace \"{}\"", settings::printable(trace));
            notes.extend(crate::preflight::trace_path(trace, &named)?);
        }
        if let Some(log) = &self.log {
            let named = format!("--log \"{}\"", settings::printable(log));
            crate::preflight::log_directory(log, &named)?;
        }
        Ok(notes)
    }

    /// Slips that parse but say something else than meant: `--limit 1 GiB` (the unit became
    /// the command), and a per-GPU limit that names no GPU the command will see (it would run
    /// with no limit at all). Refused, as a bad value is, before the command starts. The
    /// limit is `--limit`'s, else the inherited `env_limit` (`CUQUOTA_LIMIT`). Returns a note
    /// for a limit above a GPU's memory.
    pub fn check_intent(
        &self,
        command: &[OsString],
        env_limit: Option<&str>,
    ) -> Result<Vec<String>, String> {
        let (limit, written) = match (self.limit.as_deref(), env_limit) {
            (Some(l), _) => (l, format!("--limit {l}")),
            (None, Some(l)) => (l, format!("CUQUOTA_LIMIT={}", settings::printable(l))),
            (None, None) => return Ok(Vec::new()),
        };
        let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        if let Some(word) = command.first().and_then(|c| c.to_str()) {
            let joined = format!("{}{word}", limit.trim());
            if self.limit.is_some()
                && number(limit.trim())
                && is_unit(word)
                && settings::parse_limits(&joined).is_ok()
            {
                return Err(format!(
                    "--limit {limit} {word}: the unit is a word of its own, so {word} would be \
                     the command; write --limit {joined}"
                ));
            }
        }
        let Ok(limits) = settings::parse_limits(limit) else {
            return Ok(Vec::new());
        };
        if !crate::preflight::asks_gpus(&limits) {
            return Ok(Vec::new());
        }
        // A driver that cannot be asked leaves the check to the interposer (at the first
        // CUDA call, with the same words), as it was before `run` asked.
        let Ok(gpus) = crate::visible::devices(self.driver.as_deref()) else {
            return Ok(Vec::new());
        };
        let notes = Vec::from_iter(crate::preflight::above_memory(&limits, &gpus, &written));
        let settings::Limits::PerDevice(named) = &limits else {
            return Ok(notes);
        };
        let seen: Vec<_> = gpus.iter().map(|g| (g.ordinal, g.uuid)).collect();
        let unseen = limits.unseen(&seen);
        // Some named GPUs seen: the limit holds there; the interposer warns of the others.
        if unseen.len() < named.len() {
            return Ok(notes);
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
            "{written} names {names}, which the command would not see, so it would run \
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
    if let Some(dir) = &settings.driver {
        match std::path::absolute(dir) {
            Ok(dir) => {
                let mut path = dir.into_os_string();
                if let Some(rest) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
                    path.push(":");
                    path.push(rest);
                }
                cmd.env("LD_LIBRARY_PATH", path);
            }
            Err(e) => {
                eprintln!("cuquota: --driver: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let state_dir = settings.state_dir.as_deref().map(std::path::absolute);
    let state_dir = match state_dir.transpose() {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("cuquota: --state-dir: {e}");
            return ExitCode::from(2);
        }
    };
    let stacks = settings.stacks.map(|n| n.to_string());
    let vars = [
        ("CUQUOTA_LIMIT", settings.limit.as_deref().map(OsStr::new)),
        ("CUQUOTA_TRACE", settings.trace.as_deref().map(OsStr::new)),
        (
            "CUQUOTA_MODE",
            settings.observe.then_some(OsStr::new("observe")),
        ),
        ("CUQUOTA_LOG", settings.log.as_deref().map(OsStr::new)),
        ("CUQUOTA_STACKS", stacks.as_deref().map(OsStr::new)),
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

/// The stand-in driver that comes with cuquota: the wheel's `cuquota/shim` (`../shim`),
/// `PREFIX/share/cuquota/shim` of scripts/install.sh, or a clone's `target/PROFILE/shim`
/// (made by scripts/shim.sh) beside this executable.
pub fn stand_in_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate cuquota itself: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join("shim"),
        dir.join("../shim"),
        dir.join("../share/cuquota/shim"),
    ];
    candidates
        .iter()
        .find(|d| d.join("libcuda.so.1").is_file())
        .and_then(|d| d.canonicalize().ok())
        .ok_or_else(|| {
            format!(
                "no stand-in driver beside {}: in a clone, build it with scripts/shim.sh",
                exe.display()
            )
        })
}

/// `CUQUOTA_LIB` if set; else next to this executable (target/release), its parent
/// (target/release/deps, or an install's bin/ beside lib/), or ../lib.
pub fn find_library() -> Result<PathBuf, String> {
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
            driver: None,
            stacks: None,
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
            assert_eq!(ok.check(), Ok(vec![]));
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
            s.check_intent(&["GiB".into(), "prog".into()], None).unwrap_err(),
            "--limit 1 GiB: the unit is a word of its own, so GiB would be the command; write --limit 1GiB"
        );
        // A percentage asks no driver and has no note.
        let s = settings(Some("50%"), None, None);
        assert_eq!(s.check_intent(&["prog".into()], None), Ok(vec![]));
        assert_eq!(
            settings(None, None, None).check_intent(&["GiB".into()], Some("1")),
            Ok(vec![])
        );
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
