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
    /// N frames (0, the default: none; at most `cuquota_format::lenient::MAX_STACK_DEPTH`).
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
        let mut vars = Variables {
            raw,
            warnings: Vec::new(),
        };
        let limits = vars.limits()?;
        let mode = vars.mode()?;
        let virtualize = vars
            .lenient(
                "CUQUOTA_VIRTUALIZE",
                lenient::parse_virtualize,
                &lenient::VIRTUALIZE,
            )
            .unwrap_or(true);
        let log = vars.log();
        let log_level = vars
            .lenient(
                "CUQUOTA_LOG_LEVEL",
                lenient::parse_log_level,
                &lenient::LOG_LEVEL,
            )
            .unwrap_or(LogLevel::Warn);
        let trace = vars.trace();
        // Neither can lift enforcement: footprint is the stricter count, and a measured
        // context is what a bad size falls back to.
        let count = vars
            .lenient("CUQUOTA_COUNT", lenient::parse_count, &lenient::COUNT)
            .unwrap_or(Count::Footprint);
        let context = vars.context();
        let group = vars.group()?;
        let state_dir = match raw("CUQUOTA_STATE_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => PathBuf::from(cuquota_state::group::DEFAULT_STATE_DIR),
        };
        // Only what the trace records: a bad value is a warning, and no stacks.
        let stacks = vars
            .lenient("CUQUOTA_STACKS", lenient::parse_stacks, &lenient::STACKS)
            .unwrap_or(0);
        if stacks > 0 && trace.is_none() {
            vars.warnings.push(
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
            warnings: vars.warnings,
        })
    }
}

/// The variables as read, and the warnings their bad values cost so far.
struct Variables<'a, F> {
    raw: &'a F,
    warnings: Vec<String>,
}

impl<F: Fn(&str) -> Option<OsString>> Variables<'_, F> {
    fn var(&self, name: &str) -> Option<String> {
        (self.raw)(name).map(|v| v.to_string_lossy().into_owned())
    }

    /// An empty variable is unset, but for CUQUOTA_LIMIT.
    fn set(&self, name: &str) -> Option<String> {
        self.var(name).filter(|v| !v.trim().is_empty())
    }

    /// A variable that cannot lift enforcement: unset, or a bad value (one warning naming
    /// its default), is `None`.
    fn lenient<T>(
        &mut self,
        name: &str,
        parse: fn(&str) -> Option<T>,
        words: &lenient::Words,
    ) -> Option<T> {
        let v = self.set(name)?;
        let parsed = parse(&v);
        if parsed.is_none() {
            self.warnings.push(lenient_warning(name, &v, words));
        }
        parsed
    }

    fn limits(&self) -> Result<Limits, ConfigError> {
        match self.var("CUQUOTA_LIMIT") {
            None => Ok(Limits::None),
            Some(v) => parse_limits(&v).map_err(|why| ConfigError {
                message: limit_error(&v, &why),
            }),
        }
    }

    fn mode(&self) -> Result<Mode, ConfigError> {
        match self.set("CUQUOTA_MODE") {
            None => Ok(Mode::Enforce),
            Some(v) => match settings::parse_mode(&v) {
                Some(true) => Ok(Mode::Enforce),
                Some(false) => Ok(Mode::Observe),
                None => Err(bad("CUQUOTA_MODE", &v, "enforce or observe")),
            },
        }
    }

    fn log(&self) -> LogTarget {
        match (self.raw)("CUQUOTA_LOG") {
            None => LogTarget::Stderr,
            Some(v) => match settings::parse_log_target(v.as_bytes()) {
                settings::LogTarget::Stderr => LogTarget::Stderr,
                settings::LogTarget::Off => LogTarget::Off,
                settings::LogTarget::File(_) => LogTarget::File(v.into()),
            },
        }
    }

    /// A bad template is a warning, and no trace.
    fn trace(&mut self) -> Option<OsString> {
        let t = (self.raw)("CUQUOTA_TRACE").filter(|t| !t.is_empty())?;
        match settings::check_template(t.as_bytes()) {
            Ok(()) => Some(t),
            Err(why) => {
                self.warnings.push(format!(
                    "{}; no trace is written (the default)",
                    printable(&why)
                ));
                None
            }
        }
    }

    fn context(&mut self) -> Option<u64> {
        let v = self.set("CUQUOTA_CONTEXT")?;
        match lenient::parse_context(&v) {
            Ok(b) => Some(b),
            Err(why) => {
                let valid = if why.is_empty() {
                    lenient::CONTEXT.valid.to_string()
                } else {
                    format!("a size such as 512MiB ({why})")
                };
                self.warnings.push(lenient::warning(
                    "CUQUOTA_CONTEXT",
                    &v,
                    &valid,
                    lenient::CONTEXT.default,
                ));
                None
            }
        }
    }

    /// A bad group name could leave the process unbounded by the group: an error.
    fn group(&self) -> Result<Option<String>, ConfigError> {
        let Some(v) = self.set("CUQUOTA_GROUP") else {
            return Ok(None);
        };
        match cuquota_state::group::check_name(&v) {
            Ok(()) => Ok(Some(v)),
            Err(why) => Err(ConfigError {
                message: format!(
                    "CUQUOTA_GROUP=\"{}\" is not valid: {why}. \
                     CUDA calls fail with CUDA_ERROR_INVALID_VALUE until it is fixed",
                    printable(&v)
                ),
            }),
        }
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
mod proptests;

#[cfg(test)]
mod tests;
