//! Hostile input for `CUQUOTA_LIMIT`: every value either parses to exactly what it says or
//! is an error that names the variable; no value ever means "unlimited"; nothing panics.

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
