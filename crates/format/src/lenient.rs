//! The settings a bad value of which cannot lift enforcement, so that the interposer warns
//! once and uses the default (`CUQUOTA_VIRTUALIZE`, `CUQUOTA_LOG_LEVEL`, `CUQUOTA_COUNT`,
//! `CUQUOTA_CONTEXT`, `CUQUOTA_STACKS`): one parser each, which `cuquota run` uses to refuse
//! such a value before the command starts, in the same words.

use crate::settings::{parse_limit_size, printable};
use crate::units::Size;

/// The most frames `CUQUOTA_STACKS` records per call stack.
pub const MAX_STACK_DEPTH: u32 = 128;

/// `CUQUOTA_LOG_LEVEL`, in increasing detail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Refusals, explanations, warnings and the exit summary (the default).
    Warn,
    /// Also the effective configuration, once.
    Info,
    /// Also every refusal of a back-off episode.
    Debug,
}

/// `CUQUOTA_COUNT`: what the quota bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// The process's whole footprint on the device: allocations, pool reservations beyond
    /// them, graph memory, context memory (the default).
    Footprint,
    /// Live allocations only (cuquota before it counted the footprint).
    Allocations,
}

impl Count {
    /// The word for it in the configuration line and the trace header.
    pub fn name(self) -> &'static str {
        match self {
            Count::Footprint => "footprint",
            Count::Allocations => "allocations",
        }
    }
}

/// What a setting accepts and what applies instead of a bad value, as its warning says.
pub struct Words {
    pub valid: &'static str,
    pub default: &'static str,
}

pub const VIRTUALIZE: Words = Words {
    valid: "1 or 0",
    default: "1 (on)",
};
pub const LOG_LEVEL: Words = Words {
    valid: "warn, info or debug",
    default: "warn",
};
pub const COUNT: Words = Words {
    valid: "footprint or allocations",
    default: "footprint",
};
pub const CONTEXT: Words = Words {
    valid: "a size such as 512MiB, or 0 to leave context memory out",
    default: "measured",
};
pub const STACKS: Words = Words {
    valid: "a number of frames from 0 (off) to 128",
    default: "0 (off)",
};

/// `CUQUOTA_VIRTUALIZE`.
pub fn parse_virtualize(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => None,
    }
}

/// `CUQUOTA_LOG_LEVEL`.
pub fn parse_log_level(text: &str) -> Option<LogLevel> {
    match text.trim().to_ascii_lowercase().as_str() {
        "warn" | "warning" => Some(LogLevel::Warn),
        "info" => Some(LogLevel::Info),
        "debug" => Some(LogLevel::Debug),
        _ => None,
    }
}

/// `CUQUOTA_COUNT`.
pub fn parse_count(text: &str) -> Option<Count> {
    match text.trim().to_ascii_lowercase().as_str() {
        "footprint" => Some(Count::Footprint),
        "allocations" => Some(Count::Allocations),
        _ => None,
    }
}

/// `CUQUOTA_CONTEXT`: what each context takes, in bytes; the error says what is wrong.
pub fn parse_context(text: &str) -> Result<u64, String> {
    match parse_limit_size(text) {
        Ok(Size::Bytes(b)) => Ok(b),
        Ok(_) => Err(String::new()),
        Err(why) => Err(why),
    }
}

/// `CUQUOTA_STACKS`: frames per stack, at most [`MAX_STACK_DEPTH`].
pub fn parse_stacks(text: &str) -> Option<u32> {
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| *n <= MAX_STACK_DEPTH)
}

/// The warning for a bad value of `var`, which then has its default.
pub fn warning(var: &str, value: &str, valid: &str, default: &str) -> String {
    format!(
        "{var}=\"{}\" is not valid (use {valid}); using the default, {default}",
        printable(value)
    )
}

/// For `cuquota run`: why `value` of `var` (one of these settings; empty is unset) would be
/// replaced by its default, in the words of the interposer's warning. `None`: it is valid,
/// or `var` is none of these.
pub fn problem(var: &str, value: &str) -> Option<String> {
    if value.trim().is_empty() {
        return None;
    }
    let (ok, words, why) = match var {
        "CUQUOTA_VIRTUALIZE" => (parse_virtualize(value).is_some(), VIRTUALIZE, None),
        "CUQUOTA_LOG_LEVEL" => (parse_log_level(value).is_some(), LOG_LEVEL, None),
        "CUQUOTA_COUNT" => (parse_count(value).is_some(), COUNT, None),
        "CUQUOTA_STACKS" => (parse_stacks(value).is_some(), STACKS, None),
        "CUQUOTA_CONTEXT" => match parse_context(value) {
            Ok(_) => (true, CONTEXT, None),
            Err(why) => (false, CONTEXT, Some(why).filter(|w| !w.is_empty())),
        },
        _ => return None,
    };
    if ok {
        return None;
    }
    let valid = match why {
        Some(why) => format!("a size such as 512MiB ({why})"),
        None => words.valid.to_string(),
    };
    Some(format!(
        "{var}=\"{}\" is not valid (use {valid}): the command would run with the default, {}",
        printable(value),
        words.default
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_in_any_case() {
        assert_eq!(parse_virtualize(" Off "), Some(false));
        assert_eq!(parse_virtualize("YES"), Some(true));
        assert_eq!(parse_virtualize("2"), None);
        assert_eq!(parse_log_level("Warning"), Some(LogLevel::Warn));
        assert_eq!(parse_log_level("verbose"), None);
        assert_eq!(parse_count("Allocations"), Some(Count::Allocations));
        assert_eq!(parse_stacks("128"), Some(128));
        assert_eq!(parse_stacks("129"), None);
        assert_eq!(parse_context("0"), Ok(0));
        assert_eq!(parse_context("10%"), Err(String::new()));
        assert_eq!(
            STACKS.valid,
            format!("a number of frames from 0 (off) to {MAX_STACK_DEPTH}")
        );
    }

    #[test]
    fn problems_for_run() {
        assert_eq!(
            problem("CUQUOTA_LOG_LEVEL", "verbose").unwrap(),
            "CUQUOTA_LOG_LEVEL=\"verbose\" is not valid (use warn, info or debug): the command \
             would run with the default, warn"
        );
        assert!(problem("CUQUOTA_CONTEXT", "1.5")
            .unwrap()
            .contains("(use a size such as 512MiB (\"1.5\" has no unit"));
        assert!(problem("CUQUOTA_CONTEXT", "10%")
            .unwrap()
            .contains("or 0 to leave context memory out)"));
        for (var, ok) in [
            ("CUQUOTA_VIRTUALIZE", "0"),
            ("CUQUOTA_COUNT", ""),
            ("CUQUOTA_STACKS", "24"),
            ("CUQUOTA_CONTEXT", "512MiB"),
            ("CUQUOTA_LIMIT", "junk"),
        ] {
            assert_eq!(problem(var, ok), None, "{var}={ok}");
        }
    }
}
