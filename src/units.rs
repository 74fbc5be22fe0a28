//! Byte sizes: the parser behind `CUQUOTA_LIMIT` and the human format of the log lines.
//! Pure code, shared with the CLI by `#[path]`.

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
    if unit == "%" {
        // percent = mantissa / 10^scale; as a fraction of the total: mantissa / (100 * 10^scale)
        let denominator = 100u64
            .checked_mul(10u64.pow(scale))
            .ok_or("too many decimals")?;
        if u128::from(mantissa) > u128::from(denominator) {
            return Err(format!("{number}% is more than 100%"));
        }
        return Ok(Size::Fraction {
            numerator: mantissa,
            denominator,
        });
    }
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
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
    let bytes = u128::from(mantissa) * u128::from(multiplier) / 10u128.pow(scale);
    u64::try_from(bytes)
        .map(Size::Bytes)
        .map_err(|_| format!("\"{s}\" is too large"))
}

/// `"1.5"` → (15, 1): the digits as an integer and the number of decimals. At most 18 digits
/// in all, so the value fits in a u64 and its scale in 10^18.
fn parse_decimal(number: &str) -> Option<(u64, u32)> {
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
    if int.len() + frac.len() > 18 {
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
        assert!(parse_size("99999999999999999999").is_err());
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
