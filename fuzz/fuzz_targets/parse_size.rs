//! The size parser behind `CUQUOTA_LIMIT` (`cuquota_format::units`): any text either parses
//! to a value that says the same thing again, or is a one-line error; nothing panics.
//! (`CUQUOTA_LIMIT` as a whole is parsed in the interposer, a cdylib that nothing links:
//! its property tests in src/config.rs cover it.)
#![no_main]

use libfuzzer_sys::fuzz_target;

use cuquota_format::units::{human, parse_size, Size};

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
});
