//! The variables alone: each value, good and bad, and what it costs.

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
