//! Hostile input to the trace reader behind `cuquota report`, `export` and `plot`
//! (`cuquota_format::read` and its fast path, `cuquota_format::fastline`): property
//! tests over generated lines and files with garbled, truncated, empty and huge lines, and
//! the `cuquota` binary on such files. Every input either reads to the right records or
//! gives an error naming the file and line; with `--skip-bad` the reader goes on past bad
//! lines; an incomplete last line is skipped with a warning; nothing panics.
//!
//! (The size and limit parsers have their property tests next to them, in
//! crates/format/src/units.rs and src/config.rs; fuzz/ has cargo-fuzz targets for the size
//! parser and this reader.)

use cuquota_format::read::{read, Options, Record};
use cuquota_format::{fastline, read, schema};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const HEADER: &str = r#"{"type":"header","schema":1,"version":"0.1.0","pid":7,"host":"h","rank":0,"argv":["a"],"start_unix_ns":1,"mode":"enforce","devices":[{"ordinal":0,"name":"g","total":8589934592,"quota":1073741824}]}"#;

/// The fast path must agree with serde_json wherever it gives an answer.
fn agrees(line: &[u8]) {
    let fast = fastline::parse(line);
    let slow: Option<schema::EventLine> = serde_json::from_slice(line).ok();
    match (&fast, &slow) {
        (Some(f), Some(s)) => assert_eq!(
            format!("{f:?}"),
            format!("{s:?}"),
            "{}",
            String::from_utf8_lossy(line)
        ),
        (Some(_), None) => panic!(
            "the fast path accepted what serde rejects: {}",
            String::from_utf8_lossy(line)
        ),
        (None, _) => {}
    }
}

/// A JSON value of the kinds event fields meet, well-formed or not quite.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|v| v.to_string()),
        (0u64..1000).prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        Just("-0".to_string()),
        Just("01".to_string()),
        Just("18446744073709551616".to_string()),
        Just("1.5".to_string()),
        Just("1e3".to_string()),
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        "[a-zA-Z0-9_ ]{0,12}".prop_map(|s| format!("\"{s}\"")),
        "\\PC{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just("\"a\\\"b\"".to_string()),
        Just("\"\\u00e5\"".to_string()),
        proptest::collection::vec(any::<u64>(), 0..4).prop_map(|v| {
            format!(
                "[{}]",
                v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
            )
        }),
        Just("[1,]".to_string()),
        Just("{}".to_string()),
    ]
}

const KEYS: [&str; 30] = [
    "type",
    "t_ns",
    "tid",
    "dev",
    "api",
    "ptr",
    "bytes",
    "result",
    "in_use",
    "reason",
    "told_free",
    "told_total",
    "real_free",
    "real_total",
    "sizes",
    "count",
    "ptrs",
    "observed",
    "part",
    "stack",
    "id",
    "frames",
    "path",
    "base",
    "lo",
    "hi",
    "build_id",
    "driver",
    "new_field",
    "type",
];

/// An object of event fields in any order, possibly repeated, with optional whitespace.
fn event_like() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec((0..KEYS.len(), value()), 0..10),
        prop_oneof![Just(""), Just(" ")],
        prop_oneof![
            Just("alloc"),
            Just("free"),
            Just("refused"),
            Just("meminfo"),
            Just("backoff"),
            Just("context"),
            Just("dropped"),
            Just("footprint"),
            Just("trim"),
            Just("stack"),
            Just("module"),
            Just("unknown_variant")
        ],
    )
        .prop_map(|(fields, ws, kind)| {
            let mut parts = vec![format!("\"type\":{ws}\"{kind}\"")];
            parts.extend(
                fields
                    .into_iter()
                    .filter(|(k, _)| *k != 0)
                    .map(|(k, v)| format!("\"{}\":{ws}{v}", KEYS[k])),
            );
            format!("{{{}}}", parts.join(","))
        })
}

/// A line exactly as the writer emits it: an allocation, or a footprint or trim line.
fn canonical() -> impl Strategy<Value = String> {
    (
        any::<u64>(),
        any::<u32>(),
        0u32..8,
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        0usize..4,
    )
        .prop_map(|(t, tid, dev, ptr, bytes, in_use, shape)| {
            use cuquota_format::part::Part;
            match shape {
                0 => format!(
                    "{{\"type\":\"alloc\",\"t_ns\":{t},\"tid\":{tid},\"dev\":{dev},\"api\":\"cuMemAlloc_v2\",\"ptr\":\"{ptr:#x}\",\"bytes\":{bytes},\"result\":\"CUDA_SUCCESS\",\"in_use\":{in_use}}}"
                ),
                // With a call stack (CUQUOTA_STACKS).
                1 => format!(
                    "{{\"type\":\"alloc\",\"t_ns\":{t},\"tid\":{tid},\"dev\":{dev},\"api\":\"cuMemAlloc_v2\",\"ptr\":\"{ptr:#x}\",\"bytes\":{bytes},\"result\":\"CUDA_SUCCESS\",\"in_use\":{in_use},\"stack\":{}}}",
                    tid % 7
                ),
                2 => format!(
                    "{{\"type\":\"footprint\",\"t_ns\":{t},\"tid\":{tid},\"dev\":{dev},\"api\":\"cuDevicePrimaryCtxRetain\",\"part\":\"{}\",\"bytes\":{bytes},\"in_use\":{in_use}}}",
                    Part::ALL[(ptr % Part::ALL.len() as u64) as usize].name()
                ),
                _ => format!(
                    "{{\"type\":\"trim\",\"t_ns\":{t},\"tid\":{tid},\"dev\":{dev},\"api\":\"cuMemAlloc_v2\",\"part\":\"{}\",\"bytes\":{bytes},\"in_use\":{in_use}}}",
                    // The parts cuquota trims.
                    [Part::PoolCache, Part::Graph][(ptr % 2) as usize].name()
                ),
            }
        })
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Delete(usize),
    Insert(usize, u8),
    Truncate(usize),
}

fn mutate(line: &str, mutations: &[Mutation]) -> Vec<u8> {
    let mut b = line.as_bytes().to_vec();
    for m in mutations {
        if b.is_empty() {
            break;
        }
        match *m {
            Mutation::Flip(i, x) => {
                let i = i % b.len();
                b[i] ^= x;
            }
            Mutation::Delete(i) => {
                let i = i % b.len();
                b.remove(i);
            }
            Mutation::Insert(i, x) => {
                let i = i % (b.len() + 1);
                b.insert(i, x);
            }
            Mutation::Truncate(i) => {
                let i = i % b.len();
                b.truncate(i);
            }
        }
    }
    b
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), any::<u8>()).prop_map(|(i, x)| Mutation::Insert(i, x)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// One line of a generated trace file.
#[derive(Clone, Debug)]
enum Item {
    /// A valid event line.
    Event(String),
    /// Not JSON at all.
    Garbled(String),
    /// A valid line cut short (its closing brace is gone).
    Cut(String, usize),
    /// Garbage longer than the reader's 1 MiB buffer.
    Huge(usize),
    /// Blank (spaces, or nothing).
    Blank(usize),
    /// A valid line ending in CRLF.
    Crlf(String),
}

impl Item {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Item::Event(l) => l.as_bytes().to_vec(),
            Item::Garbled(g) => format!("x{g}").into_bytes(),
            Item::Cut(l, at) => l.as_bytes()[..1 + at % (l.len() - 1)].to_vec(),
            Item::Huge(n) => {
                let mut v = b"{\"type\":\"alloc\",\"api\":\"".to_vec();
                v.resize(*n, b'z');
                v.extend_from_slice(b"\\q\"}");
                v
            }
            Item::Blank(n) => vec![b' '; *n],
            Item::Crlf(l) => format!("{l}\r").into_bytes(),
        }
    }

    fn is_event(&self) -> bool {
        matches!(self, Item::Event(_) | Item::Crlf(_))
    }

    fn is_bad(&self) -> bool {
        matches!(self, Item::Garbled(_) | Item::Cut(..) | Item::Huge(_))
    }
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        6 => canonical().prop_map(Item::Event),
        2 => event_like()
            .prop_filter("valid", |l| serde_json::from_str::<schema::EventLine>(l).is_ok())
            .prop_map(Item::Event),
        1 => "[^\n]{0,40}".prop_map(Item::Garbled),
        1 => (canonical(), any::<usize>()).prop_map(|(l, at)| Item::Cut(l, at)),
        1 => (0usize..4).prop_map(Item::Blank),
        1 => canonical().prop_map(Item::Crlf),
    ]
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cuquota-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn count_events(path: &Path, skip_bad: bool) -> Result<(u64, read::Stats), String> {
    let options = Options {
        skip_bad,
        progress: false,
    };
    let mut events = 0;
    let stats = read(path, &options, |r| {
        if let Record::Event(_) = r {
            events += 1;
        }
        Ok(())
    })?;
    Ok((events, stats))
}

/// Writes header + items (the last one without its newline if `no_final_newline`), then
/// checks what the reader makes of it, strict and with `--skip-bad`.
fn check_file(name: &str, items: &[Item], no_final_newline: bool) {
    let mut bytes = format!("{HEADER}\n").into_bytes();
    for (i, it) in items.iter().enumerate() {
        bytes.extend(it.bytes());
        if !(no_final_newline && i + 1 == items.len()) {
            bytes.push(b'\n');
        }
    }
    let path = temp_file(name, &bytes);
    let shown = path.display().to_string();
    // The last item, without its newline and bad, is an incomplete last line: skipped.
    let torn = no_final_newline && items.last().is_some_and(Item::is_bad);
    let complete = if torn {
        &items[..items.len() - 1]
    } else {
        items
    };
    let events = complete.iter().filter(|i| i.is_event()).count() as u64;
    let bad = complete.iter().filter(|i| i.is_bad()).count() as u64;
    let first_bad = complete.iter().position(Item::is_bad).map(|i| i + 2);

    match (count_events(&path, false), first_bad) {
        (Err(e), Some(line)) => assert!(
            e.starts_with(&format!("{shown}:{line}: ")),
            "the error names line {line}: {e}"
        ),
        (Ok((n, stats)), None) => {
            assert_eq!(n, events);
            assert_eq!(stats.truncated, torn);
        }
        (got, want) => panic!("{shown}: {got:?}, first bad line {want:?}"),
    }
    let (n, stats) = count_events(&path, true).unwrap();
    assert_eq!(
        (n, stats.skipped, stats.truncated),
        (events, bad, torn),
        "{shown}"
    );
    std::fs::remove_file(&path).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fast_path_agrees_with_serde_on_event_like_lines(line in event_like()) {
        agrees(line.as_bytes());
    }

    #[test]
    fn fast_path_agrees_with_serde_on_mutated_lines(
        line in prop_oneof![canonical(), event_like()],
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        agrees(&mutate(&line, &mutations));
    }

    #[test]
    fn fast_path_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        agrees(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_reader_names_the_first_bad_line_or_skips_it(
        items in proptest::collection::vec(item(), 0..40),
        no_final_newline in any::<bool>(),
        case in any::<u64>(),
    ) {
        check_file(&format!("p{case}.jsonl"), &items, no_final_newline);
    }
}

#[test]
fn huge_lines_are_named_and_skipped() {
    let event = r#"{"type":"alloc","t_ns":1,"tid":1,"dev":0,"api":"cuMemAlloc_v2","ptr":"0x1","bytes":1,"result":"CUDA_SUCCESS","in_use":1}"#;
    for (name, items, torn) in [
        (
            "huge-middle",
            vec![
                Item::Event(event.into()),
                Item::Huge(3 << 20),
                Item::Event(event.into()),
            ],
            false,
        ),
        (
            "huge-first",
            vec![Item::Huge((1 << 20) - 5), Item::Event(event.into())],
            false,
        ),
        (
            "huge-last-torn",
            vec![Item::Event(event.into()), Item::Huge(5 << 20)],
            true,
        ),
    ] {
        check_file(name, &items, torn);
    }
    // A huge line that is valid reads fine.
    let api = "a".repeat(3 << 20);
    let big = format!(
        r#"{{"type":"alloc","t_ns":1,"tid":1,"dev":0,"api":"{api}","ptr":"0x1","bytes":1,"result":"CUDA_SUCCESS","in_use":1}}"#
    );
    check_file("huge-valid", &[Item::Event(big)], false);
}

// ---- the binary ------------------------------------------------------------------------

fn report(args: &[&str]) -> std::process::Output {
    Command::new(&crate::common::artifacts().cli)
        .arg("report")
        .args(args)
        .env_remove("CUQUOTA_LIB")
        .output()
        .expect("run cuquota report")
}

#[test]
fn report_names_bad_lines_and_goes_on_with_skip_bad() {
    let event = r#"{"type":"alloc","t_ns":1,"tid":1,"dev":0,"api":"cuMemAlloc_v2","ptr":"0x1","bytes":1048576,"result":"CUDA_SUCCESS","in_use":1048576}"#;
    let huge = "\u{1}".repeat(3 << 20);
    let text = format!(
        "{HEADER}\n{event}\n{huge}\n{{\"type\":\n{event}\n{}",
        &event[..30]
    );
    let path = temp_file("report.jsonl", text.as_bytes());
    let p = path.to_str().unwrap();

    let out = report(&[p]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("{p}:3: ")), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let out = report(&["--skip-bad", p]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("{p}:3: ")), "{err}");
    assert!(err.contains(&format!("{p}:4: ")), "{err}");
    assert!(
        err.contains(&format!("{p}:6: incomplete last line")),
        "{err}"
    );

    // Not traces at all: empty, binary, a directory, nothing there.
    let empty = temp_file("empty.jsonl", b"");
    let binary = temp_file("binary.jsonl", &[0u8, 159, 146, 150, 0xff, b'\n', 7]);
    let dir = std::env::temp_dir();
    for (file, want) in [
        (empty.to_str().unwrap(), "not a cuquota trace"),
        (
            binary.to_str().unwrap(),
            "binary.jsonl: not a cuquota trace",
        ),
        (dir.to_str().unwrap(), dir.to_str().unwrap()),
        ("/nonexistent/t.jsonl", "/nonexistent/t.jsonl"),
    ] {
        for skip in [false, true] {
            let args: Vec<&str> = if skip {
                vec!["--skip-bad", file]
            } else {
                vec![file]
            };
            let out = report(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{file}: {err}");
            assert!(err.contains(want), "{file}: {err}");
            assert!(!err.contains("panicked"), "{file}: {err}");
        }
    }
}
