//! The trace reader behind `cuquota report/export/plot` (`cuquota_format::read` and its fast
//! path `cuquota_format::fastline`): the fast path agrees with serde_json on every
//! line it answers for, and reading any file ends in records or in an error that names the
//! file (and line); nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

use cuquota_format::{fastline, read, schema};

fuzz_target!(|data: &[u8]| {
    for line in data.split(|&b| b == b'\n') {
        let fast = fastline::parse(line);
        let slow: Option<schema::EventLine> = serde_json::from_slice(line).ok();
        match (&fast, &slow) {
            (Some(f), Some(s)) => assert_eq!(format!("{f:?}"), format!("{s:?}")),
            (Some(_), None) => panic!("the fast path accepted what serde rejects"),
            (None, _) => {}
        }
    }
    let path = std::env::temp_dir().join(format!("cuquota-fuzz-{}.jsonl", std::process::id()));
    std::fs::write(&path, data).unwrap();
    for skip_bad in [false, true] {
        let options = read::Options {
            skip_bad,
            progress: false,
        };
        let mut records = 0u64;
        match read::read(&path, &options, |_| {
            records += 1;
            Ok(())
        }) {
            Ok(stats) => assert!(records <= stats.lines),
            Err(e) => assert!(e.starts_with(&path.display().to_string()), "{e}"),
        }
    }
});
