//! The environment variables, parsed once. Every bad value is an error that names the
//! variable, the value and a valid example: nothing is guessed, and no bad value means
//! "unlimited".

use cuquota_format::units::{parse_size, Size};
use std::ffi::OsString;
use std::path::PathBuf;

/// The most device ordinals cuquota keeps a quota for (CUDA device ordinals are small).
pub const MAX_DEVICES: usize = 64;

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
pub enum Limits {
    /// `CUQUOTA_LIMIT` unset.
    None,
    /// One value for every device.
    All(Size),
    /// `0:6GiB,1:50%`: devices not named are unlimited.
    PerDevice(Vec<(u32, Size)>),
}

impl Limits {
    pub fn for_device(&self, device: u32) -> Option<Size> {
        match self {
            Limits::None => None,
            Limits::All(s) => Some(*s),
            Limits::PerDevice(list) => list.iter().find(|(d, _)| *d == device).map(|(_, s)| *s),
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
    /// `CUQUOTA_LOG_LEVEL=info`: print the effective configuration once.
    pub verbose: bool,
    /// `CUQUOTA_LOG_LEVEL=debug`: as info, and every refusal of an episode gets its line.
    pub debug: bool,
    /// `CUQUOTA_TRACE`: the trace path template, exactly as given (bytes).
    pub trace: Option<OsString>,
}

/// A bad variable: printed once, and every CUDA call cuquota hooks then fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub message: String,
}

const LIMIT_EXAMPLES: &str = "e.g. CUQUOTA_LIMIT=6GiB, 6144MiB, 75% or 0:6GiB,1:50%";

impl Config {
    /// Reads the variables through `var` (a map in tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        Config::from_os_vars(|name| var(name).map(OsString::from))
    }

    /// Reads the variables through `raw` (the environment in the library). Paths are kept as
    /// the bytes given; other values that are not UTF-8 fail to parse (read lossily, so they
    /// are errors rather than unset).
    pub fn from_os_vars(raw: impl Fn(&str) -> Option<OsString>) -> Result<Config, ConfigError> {
        let var = |name: &str| raw(name).map(|v| v.to_string_lossy().into_owned());
        let limits = match var("CUQUOTA_LIMIT") {
            None => Limits::None,
            Some(v) => parse_limits(&v).map_err(|why| ConfigError {
                message: format!(
                    "CUQUOTA_LIMIT=\"{}\" is not valid: {}; use {LIMIT_EXAMPLES}. \
                     CUDA calls fail with CUDA_ERROR_INVALID_VALUE until it is fixed",
                    printable(&v),
                    printable(&why)
                ),
            })?,
        };
        let mode = match var("CUQUOTA_MODE").as_deref() {
            None | Some("enforce") => Mode::Enforce,
            Some("observe") => Mode::Observe,
            Some(v) => return Err(bad("CUQUOTA_MODE", v, "enforce or observe")),
        };
        let virtualize = match var("CUQUOTA_VIRTUALIZE").as_deref() {
            None | Some("1") | Some("on") | Some("true") | Some("yes") => true,
            Some("0") | Some("off") | Some("false") | Some("no") => false,
            Some(v) => return Err(bad("CUQUOTA_VIRTUALIZE", v, "1 or 0")),
        };
        let log = match raw("CUQUOTA_LOG") {
            None => LogTarget::Stderr,
            Some(v) if v == "stderr" => LogTarget::Stderr,
            Some(v) if v == "off" => LogTarget::Off,
            Some(v) if v.is_empty() => {
                return Err(bad("CUQUOTA_LOG", "", "a file path, stderr or off"))
            }
            Some(path) => LogTarget::File(path.into()),
        };
        let (verbose, debug) = match var("CUQUOTA_LOG_LEVEL").as_deref() {
            None | Some("warn") => (false, false),
            Some("info") => (true, false),
            Some("debug") => (true, true),
            Some(v) => return Err(bad("CUQUOTA_LOG_LEVEL", v, "warn, info or debug")),
        };
        let trace = match raw("CUQUOTA_TRACE") {
            Some(t) if t.is_empty() => {
                return Err(bad(
                    "CUQUOTA_TRACE",
                    "",
                    "a path such as /tmp/cuquota.%p.jsonl",
                ))
            }
            other => other,
        };
        Ok(Config {
            limits,
            mode,
            virtualize,
            log,
            verbose,
            debug,
            trace,
        })
    }
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

/// The value as it can be shown on one line: control characters escaped (`\n`, `\u{1b}`).
fn printable(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `6GiB` (every device) or `0:6GiB,1:50%` (per device).
pub fn parse_limits(text: &str) -> Result<Limits, String> {
    if !text.contains(':') {
        return parse_size(text).map(Limits::All);
    }
    let mut list: Vec<(u32, Size)> = Vec::new();
    for entry in text.split(',') {
        let (ordinal, size) = entry
            .split_once(':')
            .ok_or_else(|| format!("\"{}\" has no device ordinal", entry.trim()))?;
        let ordinal = ordinal.trim();
        if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("\"{ordinal}\" is not a device ordinal"));
        }
        let device: u32 = ordinal
            .parse()
            .ok()
            .filter(|d| (*d as usize) < MAX_DEVICES)
            .ok_or_else(|| format!("device {ordinal} is beyond the {MAX_DEVICES} supported"))?;
        if list.iter().any(|(d, _)| *d == device) {
            return Err(format!("device {device} is named twice"));
        }
        let size = parse_size(size).map_err(|why| format!("device {device}: {why}"))?;
        list.push((device, size));
    }
    Ok(Limits::PerDevice(list))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let c = config(&[]).unwrap();
        assert_eq!(c.limits, Limits::None);
        assert_eq!(c.mode, Mode::Enforce);
        assert!(c.virtualize);
        assert_eq!(c.log, LogTarget::Stderr);
        assert!(!c.verbose);
        assert_eq!(c.trace, None);
    }

    #[test]
    fn per_device_limits() {
        let l = parse_limits("0:6GiB, 1:50%").unwrap();
        assert_eq!(l.for_device(0), Some(Size::Bytes(6 << 30)));
        assert_eq!(l.for_device(1).unwrap().resolve(8 << 30), 4 << 30);
        assert_eq!(l.for_device(2), None);
        assert_eq!(
            parse_limits("6GiB").unwrap().for_device(7),
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
        assert!(config(&[("CUQUOTA_VIRTUALIZE", "maybe")]).is_err());
        assert_eq!(
            config(&[("CUQUOTA_LOG", "off")]).unwrap().log,
            LogTarget::Off
        );
        assert_eq!(
            config(&[("CUQUOTA_LOG", "/tmp/x")]).unwrap().log,
            LogTarget::File("/tmp/x".into())
        );
        assert!(config(&[("CUQUOTA_LOG_LEVEL", "info")]).unwrap().verbose);
        let debug = config(&[("CUQUOTA_LOG_LEVEL", "debug")]).unwrap();
        assert!(debug.verbose && debug.debug);
        assert!(config(&[("CUQUOTA_LOG_LEVEL", "loud")]).is_err());
        assert!(config(&[("CUQUOTA_TRACE", "")]).is_err());
    }
}

/// Hostile input for `CUQUOTA_LIMIT`: every value either parses to exactly what it says or
/// is an error that names the variable; no value ever means "unlimited"; nothing panics.
#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn limit(value: &str) -> Result<Config, ConfigError> {
        Config::from_vars(|k| (k == "CUQUOTA_LIMIT").then(|| value.to_string()))
    }

    fn fails_closed(value: &str) {
        match limit(value) {
            Ok(c) => assert_ne!(c.limits, Limits::None, "{value:?} gave no limit"),
            Err(e) => {
                assert!(
                    e.message
                        .starts_with(&format!("CUQUOTA_LIMIT=\"{value}\" is not valid: ")),
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
                prop_assert_eq!(d, got_d);
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

    fn limits_for(list: &[(u32, Size)], device: u32) -> Option<Size> {
        Limits::PerDevice(list.to_vec()).for_device(device)
    }
}
