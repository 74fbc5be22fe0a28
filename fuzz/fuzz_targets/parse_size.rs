//! `CUQUOTA_LIMIT` and its size parser (src/units.rs, src/config.rs, included as source):
//! any text either parses to a value that says the same thing again, or is a one-line error
//! that names the variable; no value means "unlimited"; nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/units.rs"]
mod units;

#[allow(dead_code)]
#[path = "../../src/config.rs"]
mod config;

use units::{human, parse_size, Size};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_size(text) {
        Ok(Size::Bytes(b)) => {
            // Written back as plain bytes, the value reads the same.
            assert_eq!(parse_size(&b.to_string()), Ok(Size::Bytes(b)), "{text:?}");
            let _ = human(b);
        }
        Ok(Size::Fraction {
            numerator,
            denominator,
        }) => {
            assert!(denominator > 0 && numerator <= denominator, "{text:?}");
            let total = u64::MAX;
            assert!(
                Size::Fraction {
                    numerator,
                    denominator
                }
                .resolve(total)
                    <= total
            );
        }
        Err(e) => assert!(!e.is_empty() && !e.contains('\n'), "{text:?}: {e:?}"),
    }
    match config::Config::from_vars(|k| (k == "CUQUOTA_LIMIT").then(|| text.to_string())) {
        Ok(c) => assert!(c.limits != config::Limits::None, "{text:?}"),
        Err(e) => assert!(
            e.message
                .starts_with(&format!("CUQUOTA_LIMIT=\"{text}\" is not valid: ")),
            "{}",
            e.message
        ),
    }
});
