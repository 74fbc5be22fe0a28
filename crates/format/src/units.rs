//! Byte sizes: the parser behind `CUQUOTA_LIMIT` and the human format of the log lines.
//! The interposer and the CLI both use these, so a size reads and prints the same in each.

/// A parsed size: an exact byte count, or a share of a device's real total memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Bytes(u64),
    /// `numerator / denominator` of the device total (`75%` is 75/100, `12.5%` is 125/1000).
    Fraction {
        numerator: u64,
        denominator: u64,
    },
}

impl Size {
    /// The byte count on a device whose real total memory is `total`.
    pub fn resolve(self, total: u64) -> u64 {
        match self {
            Size::Bytes(b) => b,
            Size::Fraction {
                numerator,
                denominator,
            } => (u128::from(total) * u128::from(numerator) / u128::from(denominator)) as u64,
        }
    }
}

/// Parses `6GiB`, `6144MiB`, `512K`, `4294967296`, `1.5GiB`, `75%`, `12.5%`.
/// K/M/G/T, Ki/Mi/Gi/Ti and KiB/MiB/GiB/TiB are binary, KB/MB/GB/TB decimal, `B` is bytes;
/// units are case-insensitive. Numbers are decimal (a leading zero is not octal); a fraction
/// of a byte is rounded down. Anything else is an error that says what is wrong.
pub fn parse_size(text: &str) -> Result<Size, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("it is empty".into());
    }
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_end);
    let unit = unit.trim_start();
    let (mantissa, scale) = parse_decimal(number).ok_or_else(|| {
        if number.is_empty() {
            format!("\"{s}\" does not start with a number")
        } else {
            format!("\"{number}\" is not a number")
        }
    })?;
    let too_large = || format!("\"{s}\" is too large");
    if unit == "%" {
        // percent = mantissa / 10^scale; as a share of the total: mantissa / (100 · 10^scale)
        let denominator = 10u128
            .checked_pow(scale + 2)
            .filter(|d| *d <= u128::from(u64::MAX))
            .ok_or("too many decimals")?;
        if mantissa > denominator {
            return Err(format!("{number}% is more than 100%"));
        }
        return Ok(Size::Fraction {
            numerator: mantissa as u64,
            denominator: denominator as u64,
        });
    }
    let multiplier: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "ki" | "kib" => 1 << 10,
        "m" | "mi" | "mib" => 1 << 20,
        "g" | "gi" | "gib" => 1 << 30,
        "t" | "ti" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(format!("unknown unit \"{unit}\"")),
    };
    let bytes = mantissa.checked_mul(multiplier).ok_or_else(too_large)? / 10u128.pow(scale);
    u64::try_from(bytes)
        .map(Size::Bytes)
        .map_err(|_| too_large())
}

/// `"1.5"` → (15, 1): the digits as an integer and the number of decimals. At most 38 digits
/// in all, so that the value fits in a u128 and its scale in 10^38.
fn parse_decimal(number: &str) -> Option<(u128, u32)> {
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int.is_empty() || (number.contains('.') && frac.is_empty()) {
        return None;
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let int = int.trim_start_matches('0');
    if int.len() + frac.len() > 38 {
        return None;
    }
    let joined = format!("{int}{frac}");
    let mantissa = if joined.is_empty() {
        0
    } else {
        joined.parse().ok()?
    };
    Some((mantissa, frac.len() as u32))
}

/// `4.00 GiB`, `512.00 MiB`, `17 B`: binary units, two decimals.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut unit = 0;
    let mut scale = 1024u128;
    while unit + 1 < UNITS.len() && u128::from(bytes) >= scale * 1024 {
        unit += 1;
        scale *= 1024;
    }
    // Round to two decimals in integer arithmetic, half up, like printf("%.2f").
    let hundredths = (u128::from(bytes) * 100 + scale / 2) / scale;
    format!(
        "{}.{:02} {}",
        hundredths / 100,
        hundredths % 100,
        UNITS[unit]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(s: &str) -> u64 {
        match parse_size(s).unwrap() {
            Size::Bytes(b) => b,
            other => panic!("{s} gave {other:?}"),
        }
    }

    #[test]
    fn units() {
        assert_eq!(bytes("6GiB"), 6 << 30);
        assert_eq!(bytes("6144MiB"), 6 << 30);
        assert_eq!(bytes("512K"), 512 << 10);
        assert_eq!(bytes("4294967296"), 1 << 32);
        assert_eq!(bytes("1.5GiB"), 1_610_612_736);
        assert_eq!(bytes("2Gi"), 2 << 30);
        assert_eq!(bytes("2GB"), 2_000_000_000);
        assert_eq!(bytes("2gb"), 2_000_000_000);
        assert_eq!(bytes("1T"), 1 << 40);
        assert_eq!(bytes("010g"), 10 << 30);
        assert_eq!(bytes(" 3 MiB "), 3 << 20);
        assert_eq!(bytes("0"), 0);
        assert_eq!(bytes("0.1GiB"), 107_374_182);
        assert_eq!(bytes("100B"), 100);
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_size("75%").unwrap().resolve(8 << 30), 6 << 30);
        assert_eq!(parse_size("12.5%").unwrap().resolve(8 << 30), 1 << 30);
        assert_eq!(parse_size("100%").unwrap().resolve(12345), 12345);
        assert_eq!(parse_size("0%").unwrap().resolve(12345), 0);
    }

    #[test]
    fn malformed_values_are_errors() {
        for bad in [
            "6GBB", "-1", "0x", "110%", "0:", "", " ", "abc", "1.", ".5", "1..5", "1e9", "GiB",
            "5 %%", "+1G", "0x10", "1,5G", "100.01%",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(parse_size("6GBB").unwrap_err(), "unknown unit \"GBB\"");
        assert_eq!(parse_size("110%").unwrap_err(), "110% is more than 100%");
        assert!(parse_size("99999999999999999999")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(bytes("18446744073709551615"), u64::MAX);
        assert!(parse_size("17179869184GiB")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1024), "1.00 KiB");
        assert_eq!(human(4 << 30), "4.00 GiB");
        assert_eq!(human(3_865_470_566), "3.60 GiB");
        assert_eq!(human(512 << 20), "512.00 MiB");
        assert_eq!(human(u64::MAX), "16384.00 PiB");
    }
}

/// Hostile input: every string either parses to exactly the value it denotes or gives a
/// one-line error; nothing panics.
#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    /// (spelling, bytes) of every unit, in all the cases accepted.
    const UNITS: [(&str, u64); 17] = [
        ("", 1),
        ("B", 1),
        ("K", 1 << 10),
        ("Ki", 1 << 10),
        ("KiB", 1 << 10),
        ("M", 1 << 20),
        ("Mi", 1 << 20),
        ("MiB", 1 << 20),
        ("G", 1 << 30),
        ("Gi", 1 << 30),
        ("GiB", 1 << 30),
        ("T", 1 << 40),
        ("TiB", 1 << 40),
        ("KB", 1_000),
        ("MB", 1_000_000),
        ("GB", 1_000_000_000),
        ("TB", 1_000_000_000_000),
    ];

    fn cased(unit: &str, flips: u32) -> String {
        unit.chars()
            .enumerate()
            .map(|(i, c)| {
                if flips >> (i % 32) & 1 == 1 {
                    c.to_ascii_lowercase()
                } else {
                    c
                }
            })
            .collect()
    }

    fn clear_error(r: &Result<Size, String>) {
        if let Err(e) = r {
            assert!(!e.is_empty() && !e.contains('\n'), "error {e:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_text_parses_or_says_why(s in "\\PC*") {
            clear_error(&parse_size(&s));
        }

        #[test]
        fn size_like_text_parses_or_says_why(
            s in "[ \\t]?[+-]?[0-9]{0,22}(\\.[0-9]{0,20})?[ ]?(%|[kKmMgGtTbBiI]{0,4}|[a-zA-Z%.]{0,3})[ ]?"
        ) {
            let r = parse_size(&s);
            clear_error(&r);
            if s.contains('-') || s.contains('+') {
                prop_assert!(r.is_err(), "{s:?} gave {r:?}");
            }
        }

        #[test]
        fn whole_numbers_with_units_are_exact(
            n in prop_oneof![0u64..4096, 0u64..1_000_000_000_000_000_000],
            unit in 0..UNITS.len(),
            flips in any::<u32>(),
            space in prop_oneof![Just(""), Just(" ")],
            pad in prop_oneof![Just(""), Just("  "), Just("\t")],
        ) {
            let (name, mult) = UNITS[unit];
            let text = format!("{pad}{n}{space}{}{pad}", cased(name, flips));
            let r = parse_size(&text);
            match n.checked_mul(mult) {
                Some(b) => prop_assert_eq!(r, Ok(Size::Bytes(b)), "{:?}", text),
                None => {
                    let e = r.unwrap_err();
                    prop_assert!(e.contains("too large"), "{text:?}: {e}");
                }
            }
        }

        /// A 19- or 20-digit number such as `CUQUOTA_LIMIT=18446744073709551615` (u64::MAX
        /// bytes) parses when it fits in 64 bits, and otherwise is "too large" (never
        /// "… is not a number").
        #[test]
        fn long_numbers_parse_or_are_too_large(n in 1_000_000_000_000_000_000u64..=u64::MAX) {
            match parse_size(&n.to_string()) {
                Ok(size) => prop_assert_eq!(size, Size::Bytes(n)),
                Err(e) => prop_assert!(e.contains("too large"), "{n}: {e}"),
            }
        }

        #[test]
        fn decimals_round_down_to_the_byte(
            int in 0u64..100_000,
            frac in "[0-9]{1,8}",
            unit in 0..UNITS.len(),
        ) {
            let (name, mult) = UNITS[unit];
            let text = format!("{int}.{frac}{name}");
            let scale = 10u128.pow(frac.len() as u32);
            let mantissa = u128::from(int) * scale + frac.parse::<u128>().unwrap();
            let want = mantissa * u128::from(mult) / scale;
            prop_assert_eq!(parse_size(&text), Ok(Size::Bytes(want as u64)), "{}", text);
        }

        #[test]
        fn leading_zeros_are_decimal(zeros in 1usize..6, n in 0u64..1_000_000) {
            let text = format!("{}{n}G", "0".repeat(zeros));
            prop_assert_eq!(parse_size(&text), Ok(Size::Bytes(n << 30)));
        }

        #[test]
        fn percentages_are_exact_shares_up_to_100(
            whole in 0u64..=120,
            frac in "[0-9]{0,4}",
            total in any::<u64>(),
        ) {
            let text = if frac.is_empty() {
                format!("{whole}%")
            } else {
                format!("{whole}.{frac}%")
            };
            let scale = 10u128.pow(frac.len() as u32);
            let mantissa = u128::from(whole) * scale + frac.parse::<u128>().unwrap_or(0);
            let r = parse_size(&text);
            if mantissa > 100 * scale {
                let e = r.unwrap_err();
                prop_assert!(e.contains("more than 100%"), "{text}: {e}");
            } else {
                let size = r.unwrap();
                let want = u128::from(total) * mantissa / (100 * scale);
                prop_assert_eq!(u128::from(size.resolve(total)), want, "{}", text);
                prop_assert!(size.resolve(total) <= total);
            }
        }

        #[test]
        fn unknown_units_are_named(
            n in 1u64..1000,
            // Starting with a letter no unit starts with, or a known one misspelt.
            unit in "[ac-fhjln-su-zAC-FHJLN-SU-Z][a-zA-Z]{0,3}|[kKmMgGtT][iI]?[bB][a-zA-Z]|[kKmMgGtT][a-hj-zA-HJ-Z]",
        ) {
            prop_assume!(!unit.eq_ignore_ascii_case("kb") && !unit.eq_ignore_ascii_case("mb")
                && !unit.eq_ignore_ascii_case("gb") && !unit.eq_ignore_ascii_case("tb"));
            let e = parse_size(&format!("{n}{unit}")).unwrap_err();
            prop_assert_eq!(e, format!("unknown unit \"{unit}\""));
        }

        #[test]
        fn human_never_panics_and_has_two_decimals(b in any::<u64>()) {
            let h = human(b);
            if b >= 1024 {
                let number = h.split(' ').next().unwrap();
                prop_assert_eq!(number.split('.').nth(1).map(str::len), Some(2), "{}", h);
            } else {
                prop_assert_eq!(h, format!("{b} B"));
            }
        }
    }
}
