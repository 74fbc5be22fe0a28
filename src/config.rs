//! The environment variables, parsed once, by one principle: a bad value of a variable that
//! could lift or widen enforcement (`CUQUOTA_LIMIT`, `CUQUOTA_MODE`) is an error that names
//! the variable, the value and a valid example, and every hooked CUDA call then fails
//! (nothing is guessed, and no bad value means "unlimited"); a bad value of any other
//! variable costs one warning naming the variable and its default, which then applies.
//! Values are case-insensitive, and an empty variable is unset (except `CUQUOTA_LIMIT=`,
//! which is an error: it says a limit was meant).
//!
//! A policy (a root-owned file at [`POLICY_PATH`], and a per-job one it may point to; see
//! `cuquota_state::policy`) comes first: the variables may only narrow it — a lower limit,
//! enforce over observe — and never remove its limit or leave its group (such a variable is
//! ignored with one line). A policy that is there but cannot be trusted or read fails closed.
//!
//! A program that runs with more privileges than the user who started it (setuid, setgid or
//! file capabilities: the kernel's `AT_SECURE`) ignores the variables that name files,
//! directories or groups ([`IGNORED_WHEN_SECURE`]), as glibc ignores `MALLOC_TRACE` there:
//! otherwise that user could make it write where only it may write, or judge a group file
//! by the user's credentials. The others may still only narrow.

use cuquota_format::lenient;
pub use cuquota_format::lenient::{Count, LogLevel};
use cuquota_format::settings::{self, printable};
pub use cuquota_format::settings::{parse_limits, DeviceId, Limits, MAX_DEVICES};
use cuquota_state::group;
use cuquota_state::policy::{self, Loaded};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Where the library reads its policy: fixed when it is built, never taken from the
/// environment. `CUQUOTA_BUILD_POLICY_PATH` at build time bakes another path in (the tests'
/// build of the library uses it; a process cannot change it at run time).
pub const POLICY_PATH: &str = match option_env!("CUQUOTA_BUILD_POLICY_PATH") {
    Some(path) => path,
    None => policy::DEFAULT_PATH,
};

/// What the variables are read against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sources {
    /// The main policy.
    pub main: Loaded,
    /// The job's policy (under the main policy's `jobs` directory).
    pub job: Loaded,
    /// The process asked for cuquota itself: a `CUQUOTA_*` variable, or `LD_PRELOAD` naming
    /// the library. With no policy either, it is untouched (preloaded by /etc/ld.so.preload).
    pub asked: bool,
    /// The program runs with more privileges than its caller (`AT_SECURE`).
    pub secure: bool,
}

/// What a program with more privileges than its caller takes from no variable: where to
/// write, which group to trust, which directory holds the shared state, and call stacks
/// (which would name the privileged program's code to the caller).
pub const IGNORED_WHEN_SECURE: [&str; 5] = [
    "CUQUOTA_LOG",
    "CUQUOTA_TRACE",
    "CUQUOTA_STATE_DIR",
    "CUQUOTA_GROUP",
    "CUQUOTA_STACKS",
];

impl Sources {
    /// No policy; the process asked for cuquota.
    #[cfg(test)]
    pub fn variables_only() -> Sources {
        Sources {
            main: Loaded::Absent,
            job: Loaded::Absent,
            asked: true,
            secure: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Refuse over-quota requests with CUDA_ERROR_OUT_OF_MEMORY.
    Enforce,
    /// Refuse nothing; log what would have been refused.
    Observe,
}

impl Mode {
    /// The word for it in the configuration line and the trace header.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Observe => "observe",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogTarget {
    Stderr,
    Off,
    /// The path exactly as given (bytes, not necessarily UTF-8).
    File(PathBuf),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub limits: Limits,
    pub mode: Mode,
    /// Report the quota as the device's memory (`CUQUOTA_VIRTUALIZE`, default on).
    pub virtualize: bool,
    pub log: LogTarget,
    pub log_level: LogLevel,
    /// `CUQUOTA_TRACE`: the trace path template, exactly as given (bytes).
    pub trace: Option<OsString>,
    /// `CUQUOTA_COUNT`.
    pub count: Count,
    /// `CUQUOTA_CONTEXT=SIZE`: what each context takes, instead of measuring it (`Some(0)`:
    /// context memory is not counted); `None`: measured.
    pub context: Option<u64>,
    /// `CUQUOTA_GROUP`: the group whose quota this process shares.
    pub group: Option<String>,
    /// `CUQUOTA_STATE_DIR`: where groups keep their state.
    pub state_dir: PathBuf,
    /// `CUQUOTA_STACKS=N`: record the call stack of each allocation in the trace, at most
    /// N frames (0, the default: none; at most `stacks::MAX_DEPTH`).
    pub stacks: u32,
    /// The policies' limits: the process's limit on a GPU is the smallest of these and
    /// `limits` (empty: no policy limit).
    pub ceilings: Vec<Limits>,
    /// The policy files in force (none: the variables alone).
    pub policies: Vec<PathBuf>,
    /// The policy's `unknown_variants = refuse`: a lookup of a variant of a hooked function
    /// this build does not know fails (false: it is handed out, said and counted).
    pub refuse_unknown_variants: bool,
    /// No policy and nothing asked for: no line, no file, no limit (the library came from
    /// /etc/ld.so.preload into a process nobody put under cuquota).
    pub untouched: bool,
    /// One line per variable with a bad value that fell back to its default, or that the
    /// policy overrides.
    pub warnings: Vec<String>,
}

impl Config {
    /// `CUQUOTA_LOG_LEVEL=info` or more: print the effective configuration once.
    pub fn verbose(&self) -> bool {
        self.log_level >= LogLevel::Info
    }

    /// `CUQUOTA_LOG_LEVEL=debug`: as info, and every refusal of an episode gets its line.
    pub fn debug(&self) -> bool {
        self.log_level >= LogLevel::Debug
    }

    /// The process's limit on the GPU `device` in bytes: the smallest of the variable's and
    /// the policies' (`None`: none names it). `uuid` and `total` are asked only if needed.
    pub fn own_limit<E>(
        &self,
        device: u32,
        uuid: impl Fn() -> Option<[u8; 16]>,
        total: impl Fn() -> Result<u64, E>,
    ) -> Result<Option<u64>, E> {
        let mut own = None;
        for l in std::iter::once(&self.limits).chain(&self.ceilings) {
            let size = match l.for_device(device, &uuid) {
                None => continue,
                Some(cuquota_format::units::Size::Bytes(b)) => b,
                Some(share) => share.resolve(total()?),
            };
            own = Some(own.map_or(size, |o: u64| o.min(size)));
        }
        Ok(own)
    }

    /// The group to join: (state directory, name).
    pub fn group_spec(&self) -> Option<(PathBuf, String)> {
        (self.group.clone()).map(|name| (self.state_dir.clone(), name))
    }
}

/// A bad variable: printed once, and every CUDA call cuquota hooks then fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub message: String,
}

impl Config {
    /// Reads the variables through `var` (a map in tests).
    #[cfg(test)]
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        Config::from_os_vars(|name| var(name).map(OsString::from))
    }

    /// Reads the variables through `raw` (the environment in the library). Paths are kept as
    /// the bytes given; other values that are not UTF-8 fail to parse (read lossily, so they
    /// are errors or warnings rather than unset).
    #[cfg(test)]
    pub fn from_os_vars(raw: impl Fn(&str) -> Option<OsString>) -> Result<Config, ConfigError> {
        Config::with_policy(raw, &Sources::variables_only())
    }

    /// Reads the variables through `raw`, narrowing the policies in `sources`.
    pub fn with_policy(
        raw: impl Fn(&str) -> Option<OsString>,
        sources: &Sources,
    ) -> Result<Config, ConfigError> {
        let trusted = |loaded: &Loaded| match loaded {
            Loaded::Absent => Ok(None),
            Loaded::Trusted(path, p) => Ok(Some((path.clone(), p.clone()))),
            Loaded::Refused(why) => Err(ConfigError {
                message: format!(
                    "{why}: it is ignored, and CUDA calls fail with CUDA_ERROR_INVALID_VALUE \
                     until it is fixed"
                ),
            }),
        };
        let main = trusted(&sources.main)?;
        let job = trusted(&sources.job)?;
        let given = |name: &str| raw(name).is_some();
        let ignored: Vec<&str> = match sources.secure {
            true => IGNORED_WHEN_SECURE
                .into_iter()
                .filter(|v| given(v))
                .collect(),
            false => Vec::new(),
        };
        let raw = |name: &str| raw(name).filter(|_| !ignored.contains(&name));
        let mut config = Config::variables(&raw)?;
        if !ignored.is_empty() {
            config.warnings.push(format!(
                "{} ignored: this program runs with more privileges than the user who \
                 started it (setuid, setgid or file capabilities), so no variable may name \
                 its files, directories or groups",
                match ignored.as_slice() {
                    [one] => format!("{one} is"),
                    many => format!("{} are", many.join(", ")),
                }
            ));
        }
        let Some((main_path, main)) = main else {
            config.untouched = !sources.asked;
            if config.untouched {
                config.log = LogTarget::Off;
            }
            return Ok(config);
        };
        let job_policy = job.as_ref().map(|(_, p)| p);
        let p = policy::narrow(&main, job_policy.unwrap_or(&policy::Policy::default()));
        config.ceilings = policy::ceilings(&main, job_policy);
        config.policies = std::iter::once(main_path)
            .chain(job.map(|(path, _)| path))
            .collect();
        let named = config
            .policies
            .last()
            .map_or(String::new(), |p| p.display().to_string());
        let mut ignored = |var: &str, value: &str, policy_says: &str| {
            config.warnings.push(format!(
                "{var}=\"{}\" is ignored: the policy {named} says {policy_says}, and the \
                 environment may only narrow it",
                printable(value)
            ))
        };
        let policy_enforces = p.enforce.unwrap_or(true);
        if policy_enforces && config.mode == Mode::Observe {
            ignored("CUQUOTA_MODE", "observe", "enforce");
        }
        let env_mode = raw("CUQUOTA_MODE").filter(|m| !m.to_string_lossy().trim().is_empty());
        let mode = match (policy_enforces, env_mode) {
            (true, _) => Mode::Enforce,
            (false, Some(_)) => config.mode,
            (false, None) => Mode::Observe,
        };
        let env_dir = raw("CUQUOTA_STATE_DIR").filter(|d| !d.is_empty());
        let (group, state_dir) = match (&p.group, &p.state_dir) {
            (Some(g), dir) => {
                if let Some(mine) = config.group.as_ref().filter(|mine| *mine != g) {
                    ignored("CUQUOTA_GROUP", mine, &format!("group = {g}"));
                }
                let dir = dir
                    .clone()
                    .unwrap_or_else(|| group::DEFAULT_STATE_DIR.into());
                if let Some(d) = env_dir.filter(|d| *d != dir) {
                    let says = format!("state_dir = {}", dir.display());
                    ignored("CUQUOTA_STATE_DIR", &d.to_string_lossy(), &says);
                }
                (Some(g.clone()), dir)
            }
            (None, Some(dir)) => (config.group.clone(), dir.clone()),
            (None, None) => (config.group.clone(), config.state_dir.clone()),
        };
        Ok(Config {
            mode,
            group,
            state_dir,
            refuse_unknown_variants: p.refuse_unknown_variants.unwrap_or(false),
            ..config
        })
    }

    /// The variables alone.
    fn variables(raw: &impl Fn(&str) -> Option<OsString>) -> Result<Config, ConfigError> {
        let var = |name: &str| raw(name).map(|v| v.to_string_lossy().into_owned());
        // An empty variable is unset, but for CUQUOTA_LIMIT (below).
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let mut warnings = Vec::new();
        let limits = match var("CUQUOTA_LIMIT") {
            None => Limits::None,
            Some(v) => parse_limits(&v).map_err(|why| ConfigError {
                message: limit_error(&v, &why),
            })?,
        };
        let mode = match set("CUQUOTA_MODE") {
            None => Mode::Enforce,
            Some(v) => match settings::parse_mode(&v) {
                Some(true) => Mode::Enforce,
                Some(false) => Mode::Observe,
                None => return Err(bad("CUQUOTA_MODE", &v, "enforce or observe")),
            },
        };
        let virtualize = match set("CUQUOTA_VIRTUALIZE") {
            None => true,
            Some(v) => lenient::parse_virtualize(&v).unwrap_or_else(|| {
                warnings.push(lenient_warning(
                    "CUQUOTA_VIRTUALIZE",
                    &v,
                    &lenient::VIRTUALIZE,
                ));
                true
            }),
        };
        let log = match raw("CUQUOTA_LOG") {
            None => LogTarget::Stderr,
            Some(v) => match settings::parse_log_target(v.as_bytes()) {
                settings::LogTarget::Stderr => LogTarget::Stderr,
                settings::LogTarget::Off => LogTarget::Off,
                settings::LogTarget::File(_) => LogTarget::File(v.into()),
            },
        };
        let log_level = match set("CUQUOTA_LOG_LEVEL") {
            None => LogLevel::Warn,
            Some(v) => lenient::parse_log_level(&v).unwrap_or_else(|| {
                warnings.push(lenient_warning(
                    "CUQUOTA_LOG_LEVEL",
                    &v,
                    &lenient::LOG_LEVEL,
                ));
                LogLevel::Warn
            }),
        };
        let trace = match raw("CUQUOTA_TRACE") {
            Some(t) if t.is_empty() => None,
            Some(t) => match settings::check_template(t.as_bytes()) {
                Ok(()) => Some(t),
                Err(why) => {
                    warnings.push(format!(
                        "{}; no trace is written (the default)",
                        printable(&why)
                    ));
                    None
                }
            },
            None => None,
        };
        // Neither can lift enforcement: footprint is the stricter count, and a measured
        // context is what a bad size falls back to.
        let count = match set("CUQUOTA_COUNT") {
            None => Count::Footprint,
            Some(v) => lenient::parse_count(&v).unwrap_or_else(|| {
                warnings.push(lenient_warning("CUQUOTA_COUNT", &v, &lenient::COUNT));
                Count::Footprint
            }),
        };
        let context = match set("CUQUOTA_CONTEXT") {
            None => None,
            Some(v) => match lenient::parse_context(&v) {
                Ok(b) => Some(b),
                Err(why) => {
                    let valid = if why.is_empty() {
                        lenient::CONTEXT.valid.to_string()
                    } else {
                        format!("a size such as 512MiB ({why})")
                    };
                    warnings.push(lenient::warning(
                        "CUQUOTA_CONTEXT",
                        &v,
                        &valid,
                        lenient::CONTEXT.default,
                    ));
                    None
                }
            },
        };
        // A bad group name could leave the process unbounded by the group: an error.
        let group = match set("CUQUOTA_GROUP") {
            None => None,
            Some(v) => match cuquota_state::group::check_name(&v) {
                Ok(()) => Some(v),
                Err(why) => {
                    return Err(ConfigError {
                        message: format!(
                            "CUQUOTA_GROUP=\"{}\" is not valid: {why}. \
                             CUDA calls fail with CUDA_ERROR_INVALID_VALUE until it is fixed",
                            printable(&v)
                        ),
                    })
                }
            },
        };
        let state_dir = match raw("CUQUOTA_STATE_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => PathBuf::from(cuquota_state::group::DEFAULT_STATE_DIR),
        };
        // Only what the trace records: a bad value is a warning, and no stacks.
        let stacks = match set("CUQUOTA_STACKS") {
            None => 0,
            Some(v) => lenient::parse_stacks(&v).unwrap_or_else(|| {
                warnings.push(lenient_warning("CUQUOTA_STACKS", &v, &lenient::STACKS));
                0
            }),
        };
        if stacks > 0 && trace.is_none() {
            warnings.push(
                "CUQUOTA_STACKS is set but CUQUOTA_TRACE is not: call stacks are recorded only \
                 in the trace; none are recorded"
                    .to_string(),
            );
        }
        Ok(Config {
            limits,
            mode,
            virtualize,
            log,
            log_level,
            trace,
            count,
            context,
            group,
            state_dir,
            stacks,
            ceilings: Vec::new(),
            policies: Vec::new(),
            untouched: false,
            refuse_unknown_variants: false,
            warnings,
        })
    }
}

/// The one-line error for a bad `CUQUOTA_LIMIT` (`cuquota run --limit` prints its start).
fn limit_error(value: &str, why: &str) -> String {
    format!(
        "{}. CUDA calls fail with CUDA_ERROR_INVALID_VALUE until it is fixed",
        settings::limit_error(value, why)
    )
}

fn bad(var: &str, value: &str, valid: &str) -> ConfigError {
    ConfigError {
        message: format!(
            "{var}=\"{}\" is not valid: use {valid}. \
             CUDA calls fail with CUDA_ERROR_INVALID_VALUE until it is fixed",
            printable(value)
        ),
    }
}

fn lenient_warning(var: &str, value: &str, words: &lenient::Words) -> String {
    lenient::warning(var, value, words.valid, words.default)
}

#[cfg(test)]
mod policy_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use cuquota_format::units::Size;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_vars(|k| map.get(k).cloned())
    }

    /// `CUQUOTA_STACKS`: a depth, off by default; a bad one or one without a trace is a
    /// warning and no stacks.
    #[test]
    fn stacks_setting() {
        assert_eq!(config(&[]).unwrap().stacks, 0);
        let on = config(&[("CUQUOTA_STACKS", "24"), ("CUQUOTA_TRACE", "/tmp/t")]).unwrap();
        assert_eq!((on.stacks, on.warnings.len()), (24, 0));
        for bad in ["-1", "deep", "129", "1.5"] {
            let c = config(&[("CUQUOTA_STACKS", bad), ("CUQUOTA_TRACE", "/tmp/t")]).unwrap();
            assert_eq!(c.stacks, 0, "{bad}");
            assert_eq!(
                c.warnings,
                vec![format!(
                    "CUQUOTA_STACKS=\"{bad}\" is not valid (use a number of frames from 0 \
                     (off) to 128); using the default, 0 (off)"
                )]
            );
        }
        let alone = config(&[("CUQUOTA_STACKS", "8")]).unwrap();
        assert_eq!(alone.stacks, 8);
        assert!(alone.warnings[0].starts_with("CUQUOTA_STACKS is set but CUQUOTA_TRACE is not"));
    }

    #[test]
    fn defaults() {
        let c = config(&[]).unwrap();
        assert_eq!(c.limits, Limits::None);
        assert_eq!(c.mode, Mode::Enforce);
        assert!(c.virtualize);
        assert_eq!(c.log, LogTarget::Stderr);
        assert_eq!(c.log_level, LogLevel::Warn);
        assert_eq!(c.trace, None);
        assert_eq!((c.count, c.context), (Count::Footprint, None));
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn count_and_context() {
        let c = config(&[
            ("CUQUOTA_COUNT", "Allocations"),
            ("CUQUOTA_CONTEXT", "512MiB"),
        ]);
        let c = c.unwrap();
        assert_eq!((c.count, c.context), (Count::Allocations, Some(512 << 20)));
        assert_eq!(
            config(&[("CUQUOTA_CONTEXT", "0")]).unwrap().context,
            Some(0)
        );
        for (var, value) in [
            ("CUQUOTA_COUNT", "everything"),
            ("CUQUOTA_CONTEXT", "10%"),
            ("CUQUOTA_CONTEXT", "1.5"),
        ] {
            let c = config(&[(var, value)]).unwrap();
            assert_eq!((c.count, c.context), (Count::Footprint, None), "{value}");
            assert_eq!(c.warnings.len(), 1, "{value}");
            assert!(c.warnings[0].starts_with(var), "{}", c.warnings[0]);
        }
        assert!(config(&[("CUQUOTA_COUNT", "")])
            .unwrap()
            .warnings
            .is_empty());
    }

    #[test]
    fn per_device_limits() {
        let l = parse_limits("0:6GiB, 1:50%").unwrap();
        assert_eq!(l.for_device(0, || None), Some(Size::Bytes(6 << 30)));
        assert_eq!(l.for_device(1, || None).unwrap().resolve(8 << 30), 4 << 30);
        assert_eq!(l.for_device(2, || None), None);
        assert_eq!(
            parse_limits("6GiB").unwrap().for_device(7, || None),
            Some(Size::Bytes(6 << 30))
        );
    }

    #[test]
    fn malformed_limits_name_the_variable_and_an_example() {
        for bad in [
            "6GBB",
            "-1",
            "0x",
            "110%",
            "0:",
            "",
            "abc",
            "0:1G,0:2G",
            "x:1G",
            "6GiB,1:2G",
            "64:1G",
        ] {
            let err = config(&[("CUQUOTA_LIMIT", bad)]).unwrap_err().message;
            assert!(
                err.starts_with(&format!("CUQUOTA_LIMIT=\"{bad}\" is not valid: ")),
                "{err}"
            );
            assert!(err.contains("6GiB"), "{err}");
        }
    }

    #[test]
    fn other_variables_are_checked() {
        assert_eq!(
            config(&[("CUQUOTA_MODE", "observe")]).unwrap().mode,
            Mode::Observe
        );
        assert!(config(&[("CUQUOTA_MODE", "enforcing")]).is_err());
        assert!(!config(&[("CUQUOTA_VIRTUALIZE", "0")]).unwrap().virtualize);
        assert_eq!(
            config(&[("CUQUOTA_LOG", "off")]).unwrap().log,
            LogTarget::Off
        );
        assert_eq!(
            config(&[("CUQUOTA_LOG", "/tmp/x")]).unwrap().log,
            LogTarget::File("/tmp/x".into())
        );
        assert!(config(&[("CUQUOTA_LOG_LEVEL", "info")]).unwrap().verbose());
        assert_eq!(
            config(&[("CUQUOTA_LOG_LEVEL", "debug")]).unwrap().log_level,
            LogLevel::Debug
        );
    }

    /// Values are case-insensitive; empty is unset (but for CUQUOTA_LIMIT).
    #[test]
    fn keywords_in_any_case_and_empty_is_unset() {
        assert_eq!(
            config(&[("CUQUOTA_MODE", "OBSERVE")]).unwrap().mode,
            Mode::Observe
        );
        assert_eq!(config(&[("CUQUOTA_MODE", "")]).unwrap().mode, Mode::Enforce);
        assert_eq!(
            config(&[("CUQUOTA_LOG", "OFF")]).unwrap().log,
            LogTarget::Off
        );
        assert_eq!(
            config(&[("CUQUOTA_LOG", "Stderr")]).unwrap().log,
            LogTarget::Stderr
        );
        assert_eq!(
            config(&[("CUQUOTA_LOG", "")]).unwrap().log,
            LogTarget::Stderr
        );
        assert_eq!(
            config(&[("CUQUOTA_LOG_LEVEL", "INFO")]).unwrap().log_level,
            LogLevel::Info
        );
        assert!(!config(&[("CUQUOTA_VIRTUALIZE", "OFF")]).unwrap().virtualize);
        let c = config(&[
            ("CUQUOTA_TRACE", ""),
            ("CUQUOTA_LOG_LEVEL", ""),
            ("CUQUOTA_VIRTUALIZE", ""),
        ])
        .unwrap();
        assert_eq!(
            (c.trace, c.log_level, c.virtualize),
            (None, LogLevel::Warn, true)
        );
        assert!(c.warnings.is_empty());
        assert!(config(&[("CUQUOTA_LIMIT", "")]).is_err());
    }

    /// A bad value of a variable that cannot lift enforcement is one warning and the default.
    #[test]
    fn harmless_slips_warn_and_use_the_default() {
        let c = config(&[
            ("CUQUOTA_LOG_LEVEL", "loud"),
            ("CUQUOTA_VIRTUALIZE", "maybe"),
            ("CUQUOTA_TRACE", "/tmp/t-%x"),
        ])
        .unwrap();
        assert_eq!(
            (c.log_level, c.virtualize, c.trace),
            (LogLevel::Warn, true, None)
        );
        assert_eq!(
            c.warnings,
            [
                "CUQUOTA_VIRTUALIZE=\"maybe\" is not valid (use 1 or 0); using the default, 1 (on)",
                "CUQUOTA_LOG_LEVEL=\"loud\" is not valid (use warn, info or debug); using the default, warn",
                "CUQUOTA_TRACE=\"/tmp/t-%x\": unknown \"%x\" (use %p, %h, %r, %t or %%); no trace is written (the default)",
            ]
        );
    }

    #[test]
    fn a_number_without_a_unit_names_the_likely_meaning() {
        let err = config(&[("CUQUOTA_LIMIT", "1.5")]).unwrap_err().message;
        assert_eq!(
            err,
            "CUQUOTA_LIMIT=\"1.5\" is not valid: \"1.5\" has no unit, so it would be a count of bytes, which is whole; did you mean 1.5GiB?; use e.g. CUQUOTA_LIMIT=6GiB, 6144MiB, 75% or 0:6GiB,1:50%. CUDA calls fail with CUDA_ERROR_INVALID_VALUE until it is fixed"
        );
        assert!(config(&[("CUQUOTA_LIMIT", "18446744073709551615")]).is_err());
    }
}

/// Hostile input for `CUQUOTA_LIMIT`: every value either parses to exactly what it says or
/// is an error that names the variable; no value ever means "unlimited"; nothing panics.
#[cfg(test)]
mod proptests {
    use super::*;
    use cuquota_format::units::Size;
    use proptest::prelude::*;

    fn limit(value: &str) -> Result<Config, ConfigError> {
        Config::from_vars(|k| (k == "CUQUOTA_LIMIT").then(|| value.to_string()))
    }

    fn fails_closed(value: &str) {
        match limit(value) {
            Ok(c) => assert_ne!(c.limits, Limits::None, "{value:?} gave no limit"),
            Err(e) => {
                assert!(
                    e.message.starts_with(&format!(
                        "CUQUOTA_LIMIT=\"{}\" is not valid: ",
                        printable(value)
                    )),
                    "{}",
                    e.message
                );
                assert!(e.message.contains("6GiB"), "{}", e.message);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_value_gives_a_limit_or_an_error_naming_the_variable(s in "\\PC*") {
            fails_closed(&s);
        }

        #[test]
        fn limit_like_values_too(s in "[0-9:, %.GgMiB]{0,24}") {
            fails_closed(&s);
        }

        /// A value with a line break, such as "6G\nB", still gives one line naming the
        /// variable: control characters are escaped in the message, so a crafted value
        /// cannot forge a cuquota line after the break.
        #[test]
        fn a_bad_value_is_reported_on_one_line(
            s in "[0-9]{1,3}[GM]?[\n\r\t\x00\x1b][A-Za-z]{0,3}",
        ) {
            if let Err(e) = limit(&s) {
                prop_assert!(!e.message.chars().any(char::is_control), "{:?}", e.message);
            }
        }

        #[test]
        fn per_device_lists_are_exact(
            entries in proptest::collection::btree_map(0u32..MAX_DEVICES as u32, (1u64..1 << 20, 0..4usize), 1..8),
            spaces in any::<bool>(),
        ) {
            let units = [("MiB", 1u64 << 20), ("K", 1 << 10), ("GB", 1_000_000_000), ("%", 0)];
            let text = entries
                .iter()
                .map(|(d, (n, u))| {
                    let (name, _) = units[*u];
                    let n = if name == "%" { n % 101 } else { *n };
                    if spaces { format!(" {d} : {n}{name} ") } else { format!("{d}:{n}{name}") }
                })
                .collect::<Vec<_>>()
                .join(",");
            let Limits::PerDevice(list) = parse_limits(&text).unwrap() else {
                panic!("{text}: not per device");
            };
            prop_assert_eq!(list.len(), entries.len());
            for ((d, (n, u)), (got_d, got)) in entries.iter().zip(&list) {
                let (name, mult) = units[*u];
                prop_assert_eq!(DeviceId::Ordinal(*d), *got_d);
                let want = if name == "%" {
                    Size::Fraction { numerator: n % 101, denominator: 100 }
                } else {
                    Size::Bytes(n * mult)
                };
                prop_assert_eq!(*got, want, "{}", text);
            }
            for d in 0..MAX_DEVICES as u32 {
                prop_assert_eq!(
                    limits_for(&list, d).is_some(),
                    entries.contains_key(&d),
                    "device {} in {}", d, text
                );
            }
        }

        #[test]
        fn a_device_named_twice_or_out_of_range_is_an_error(
            d in 0u32..MAX_DEVICES as u32,
            high in MAX_DEVICES..100_000usize,
        ) {
            let twice = parse_limits(&format!("{d}:1G,{d}:2G")).unwrap_err();
            prop_assert!(twice.contains("named twice"), "{}", twice);
            let beyond = parse_limits(&format!("{high}:1G")).unwrap_err();
            prop_assert!(beyond.contains("beyond"), "{}", beyond);
        }
    }

    fn limits_for(list: &[(DeviceId, Size)], device: u32) -> Option<Size> {
        Limits::PerDevice(list.to_vec()).for_device(device, || None)
    }
}
