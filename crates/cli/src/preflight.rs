//! What `cuquota run` checks before the command starts besides its options' values: the
//! `CUQUOTA_*` variables the command inherits (a name cuquota does not know, a value the
//! interposer would refuse or replace by its default), where the trace will go, and notes on
//! a limit that is valid but may not say what was meant. A refusal exits 2 with one line; a
//! note is one line and the command starts.

use crate::run::Settings;
use crate::visible::Gpu;
use cuquota_format::settings::{self, printable, Limits};
use cuquota_format::units::{human, Size};
use cuquota_format::{lenient, variables};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The `CUQUOTA_*` variables of this environment (name, value), which the command inherits.
pub fn inherited() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter(|(k, _)| k.as_encoded_bytes().starts_with(b"CUQUOTA_"))
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// Each inherited variable that no option replaces, checked by the interposer's own parsers:
/// the first problem refused, in the variable's words; or the notes.
pub fn variables(settings: &Settings, vars: &[(String, String)]) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    for (name, value) in vars {
        let replaced = match name.as_str() {
            "CUQUOTA_LIMIT" => settings.limit.is_some(),
            "CUQUOTA_TRACE" => settings.trace.is_some(),
            "CUQUOTA_MODE" => settings.observe,
            "CUQUOTA_LOG" => settings.log.is_some(),
            "CUQUOTA_GROUP" => settings.group.is_some(),
            "CUQUOTA_STATE_DIR" => settings.state_dir.is_some(),
            _ => false,
        };
        if replaced {
            continue;
        }
        if let Some(line) = variables::unknown(name, "correct or unset it") {
            return Err(line);
        }
        if let Some(why) = lenient::problem(name, value) {
            return Err(why);
        }
        let shown = printable(value);
        let is_set = !value.trim().is_empty();
        match name.as_str() {
            "CUQUOTA_LIMIT" => {
                settings::parse_limits(value).map_err(|why| settings::limit_error(value, &why))?;
                notes.extend(settings::limit_notes(value, "CUQUOTA_LIMIT="));
            }
            "CUQUOTA_MODE" if settings::parse_mode(value).is_none() => {
                return Err(format!(
                    "CUQUOTA_MODE=\"{shown}\" is not valid: use enforce or observe"
                ));
            }
            "CUQUOTA_TRACE" if !value.is_empty() => {
                notes.extend(trace_path(value, &format!("CUQUOTA_TRACE=\"{shown}\""))?);
            }
            "CUQUOTA_LOG" => log_directory(value, &format!("CUQUOTA_LOG=\"{shown}\""))?,
            "CUQUOTA_GROUP" if is_set => {
                cuquota_state::group::check_name(value).map_err(|why| {
                    format!(
                        "CUQUOTA_GROUP=\"{shown}\" is not valid: {}",
                        printable(&why)
                    )
                })?;
            }
            "CUQUOTA_STATE_DIR" if Path::new(value).exists() && !Path::new(value).is_dir() => {
                return Err(format!("CUQUOTA_STATE_DIR={shown}: not a directory"));
            }
            _ => {}
        }
    }
    Ok(notes)
}

/// `--log`'s or `CUQUOTA_LOG`'s file must be in a directory that exists.
pub fn log_directory(log: &str, named: &str) -> Result<(), String> {
    if let settings::LogTarget::File(path) = settings::parse_log_target(log.as_bytes()) {
        let dir = Path::new(OsStr::from_bytes(path)).parent();
        if let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
            return Err(format!("{named}: there is no directory {}", dir.display()));
        }
    }
    Ok(())
}

/// Where the trace of `template` goes, expanded as the interposer will (the command keeps
/// this pid): its directory must exist and be writable by this user; an existing file is
/// never overwritten, so the note says where the trace goes instead. A template with `%t`
/// (the start time, not known yet) is checked as far as it can be.
pub fn trace_path(template: &str, named: &str) -> Result<Option<String>, String> {
    settings::check_template(template.as_bytes())
        .map_err(|e| format!("{named}: {}", after_value(&e)))?;
    let vars = settings::TemplateVars {
        pid: std::process::id(),
        host: &host_name(),
        rank: settings::rank(|name| std::env::var(name).ok()),
        start_unix_secs: 0,
    };
    let path = settings::expand_template(template.as_bytes(), &vars)
        .map(|p| PathBuf::from(OsStr::from_bytes(&p)))
        .map_err(|e| format!("{named}: {}", after_value(&e)))?;
    let timed = template.contains("%t");
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir_timed = Path::new(template)
        .parent()
        .is_some_and(|d| d.as_os_str().as_bytes().windows(2).any(|w| w == b"%t"));
    if !dir_timed {
        if !dir.is_dir() {
            return Err(format!("{named}: there is no directory {}", dir.display()));
        }
        if !writable(&dir) {
            return Err(format!(
                "{named}: this user cannot create files in {}",
                dir.display()
            ));
        }
    }
    if timed {
        return Ok(None);
    }
    Ok(taken_instead(&path).map(|instead| {
        format!(
            "{named}: {} exists, and a trace never overwrites a file: this run's goes to {}",
            path.display(),
            instead.display()
        )
    }))
}

/// A parser's error without its leading `CUQUOTA_TRACE="…": `, which the caller names.
fn after_value(error: &str) -> &str {
    error.split_once("\": ").map_or(error, |(_, rest)| rest)
}

/// When `path` is taken by a file that is no stream (a character device or FIFO is written
/// to), the name the interposer would create instead (`PATH.1`, `PATH.2`, …).
fn taken_instead(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let taken = |p: &Path| p.symlink_metadata().is_ok();
    let meta = path.symlink_metadata().ok()?;
    if meta.file_type().is_char_device() || meta.file_type().is_fifo() {
        return None;
    }
    (1..=999)
        .map(|n| {
            let mut name = path.as_os_str().to_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        })
        .find(|p| !taken(p))
}

fn writable(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// The node name, as the interposer expands `%h`.
fn host_name() -> String {
    // SAFETY: uname fills a zeroed struct.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut uts) } != 0 {
        return String::new();
    }
    // SAFETY: nodename is NUL-terminated by uname.
    unsafe { std::ffi::CStr::from_ptr(uts.nodename.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The note for a limit above the memory of the GPUs the command would see (written as
/// `--limit 12GiB` or `CUQUOTA_LIMIT=12GiB`): there the GPU runs out before the quota does.
pub fn above_memory(limits: &Limits, gpus: &[Gpu], written: &str) -> Option<String> {
    let over: Vec<String> = gpus
        .iter()
        .filter_map(|gpu| {
            let total = gpu.total.filter(|t| *t > 0)?;
            match limits.for_device(gpu.ordinal, || gpu.uuid)? {
                Size::Bytes(b) if b > total => {
                    Some(format!("GPU {} ({})", gpu.ordinal, human(total)))
                }
                _ => None,
            }
        })
        .collect();
    (!over.is_empty()).then(|| {
        format!(
            "{written} is more than the memory of {}: there the GPU runs out before the quota does",
            over.join(", ")
        )
    })
}

/// Whether the limit needs the GPUs asked: it names GPUs (each must be seen), or a byte
/// count (each above a GPU's memory is noted). A percentage alone needs nothing.
pub fn asks_gpus(limits: &Limits) -> bool {
    match limits {
        Limits::None => false,
        Limits::All(size) => matches!(size, Size::Bytes(_)),
        Limits::PerDevice(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            limit: None,
            trace: None,
            observe: false,
            log: None,
            group: None,
            state_dir: None,
            driver: None,
            stacks: None,
        }
    }

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn inherited_variables_are_checked_unless_an_option_replaces_them() {
        let s = settings();
        assert_eq!(
            variables(&s, &vars(&[("CUQUOTA_LIMT", "6GiB")])).unwrap_err(),
            "CUQUOTA_LIMT is not a cuquota variable (did you mean CUQUOTA_LIMIT?); correct or unset it"
        );
        assert_eq!(
            variables(&s, &vars(&[("CUQUOTA_LIMIT", "abc")])).unwrap_err(),
            "CUQUOTA_LIMIT=\"abc\" is not valid: \"abc\" does not start with a number; use \
             e.g. CUQUOTA_LIMIT=6GiB, 6144MiB, 75% or 0:6GiB,1:50%"
        );
        assert_eq!(
            variables(&s, &vars(&[("CUQUOTA_MODE", "strict")])).unwrap_err(),
            "CUQUOTA_MODE=\"strict\" is not valid: use enforce or observe"
        );
        assert!(variables(&s, &vars(&[("CUQUOTA_LOG_LEVEL", "loud")]))
            .unwrap_err()
            .starts_with("CUQUOTA_LOG_LEVEL=\"loud\" is not valid (use warn, info or debug)"));
        assert!(variables(&s, &vars(&[("CUQUOTA_GROUP", "a/b")]))
            .unwrap_err()
            .starts_with("CUQUOTA_GROUP=\"a/b\" is not valid"));
        assert_eq!(
            variables(&s, &vars(&[("CUQUOTA_LOG", "/no/such/dir/x")])).unwrap_err(),
            "CUQUOTA_LOG=\"/no/such/dir/x\": there is no directory /no/such/dir"
        );
        assert_eq!(
            variables(&s, &vars(&[("CUQUOTA_TRACE", "/no/such/dir/t-%p")])).unwrap_err(),
            "CUQUOTA_TRACE=\"/no/such/dir/t-%p\": there is no directory /no/such/dir"
        );
        assert_eq!(
            variables(&s, &vars(&[("CUQUOTA_LIMIT", "12")])).unwrap(),
            settings::limit_notes("12", "CUQUOTA_LIMIT=")
        );
        let fine = vars(&[
            ("CUQUOTA_LIMIT", "6GiB"),
            ("CUQUOTA_MODE", "Observe"),
            ("CUQUOTA_LIB", "/x"),
            ("CUQUOTA_TEST_BUILD", "/y"),
            ("CUQUOTA_LOG", "off"),
            ("CUQUOTA_COUNT", ""),
        ]);
        assert_eq!(variables(&s, &fine), Ok(vec![]));
        // Replaced by the options: not checked.
        let replaced = Settings {
            limit: Some("1GiB".into()),
            observe: true,
            log: Some("off".into()),
            ..settings()
        };
        let bad = vars(&[
            ("CUQUOTA_LIMIT", "abc"),
            ("CUQUOTA_MODE", "x"),
            ("CUQUOTA_LOG", "/no/such/dir/x"),
        ]);
        assert_eq!(variables(&replaced, &bad), Ok(vec![]));
    }

    #[test]
    fn the_trace_path_is_checked_before_the_command_starts() {
        let dir = std::env::temp_dir().join(format!("cuquota-preflight-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let t = |name: &str| dir.join(name).to_str().unwrap().to_string();
        assert_eq!(trace_path(&t("new.jsonl"), "--trace x"), Ok(None));
        std::fs::write(t("old.jsonl"), "").unwrap();
        std::fs::write(t("old.jsonl.1"), "").unwrap();
        assert_eq!(
            trace_path(&t("old.jsonl"), "--trace x").unwrap().unwrap(),
            format!(
                "--trace x: {} exists, and a trace never overwrites a file: this run's goes to {}",
                t("old.jsonl"),
                t("old.jsonl.2")
            )
        );
        std::fs::write(t(&format!("p-{}.jsonl", std::process::id())), "").unwrap();
        assert!(trace_path(&t("p-%p.jsonl"), "--trace x").unwrap().is_some());
        assert_eq!(trace_path(&t("p-%t.jsonl"), "--trace x"), Ok(None));
        assert_eq!(trace_path("/dev/null", "--trace x"), Ok(None));
        assert_eq!(
            trace_path(&t("none/t.jsonl"), "--trace y").unwrap_err(),
            format!("--trace y: there is no directory {}", t("none"))
        );
        assert_eq!(
            trace_path(&t("a%x"), "--trace z").unwrap_err(),
            "--trace z: unknown \"%x\" (use %p, %h, %r, %t or %%)"
        );
        // Root may write anywhere: the refusal of a read-only directory only for others.
        if unsafe { libc::geteuid() } != 0 {
            let ro = dir.join("ro");
            std::fs::create_dir(&ro).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
            assert!(trace_path(&t("ro/t"), "--trace r")
                .unwrap_err()
                .contains("this user cannot create files in"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_limit_above_a_gpus_memory_is_noted() {
        let gpu = |ordinal, total| Gpu {
            ordinal,
            uuid: None,
            total,
        };
        let gpus = [gpu(0, Some(8 << 30)), gpu(1, Some(16 << 30)), gpu(2, None)];
        let limits = settings::parse_limits("12GiB").unwrap();
        assert_eq!(
            above_memory(&limits, &gpus, "--limit 12GiB").unwrap(),
            "--limit 12GiB is more than the memory of GPU 0 (8.00 GiB): there the GPU runs out \
             before the quota does"
        );
        for quiet in ["8GiB", "100%", "1:12GiB"] {
            let limits = settings::parse_limits(quiet).unwrap();
            assert_eq!(above_memory(&limits, &gpus, "x"), None, "{quiet}");
        }
        assert!(asks_gpus(&settings::parse_limits("1G").unwrap()));
        assert!(asks_gpus(&settings::parse_limits("0:50%").unwrap()));
        assert!(!asks_gpus(&settings::parse_limits("50%").unwrap()));
    }
}
