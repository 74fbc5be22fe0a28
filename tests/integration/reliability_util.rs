//! Helpers shared by the reliability tests (reliability_*.rs): reading traces back
//! strictly, and reading cuquota's log lines.
#![allow(dead_code)]

use crate::common::Output;
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One event line of a trace (schema 1), the fields the checks use.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Ev {
    #[serde(rename = "type")]
    pub kind: String,
    pub t_ns: u64,
    pub tid: u32,
    pub dev: u32,
    pub api: String,
    pub ptr: String,
    pub bytes: u64,
    pub result: String,
    pub in_use: u64,
    pub reason: Option<String>,
    pub told_free: u64,
    pub told_total: u64,
    pub count: u64,
    /// context: the allocations freed with it (hex strings, as `ptr`).
    pub ptrs: Vec<String>,
    /// footprint, trim: the part of the footprint.
    pub part: Option<String>,
}

/// A trace read back: header, events in file order, and the summary if there is one.
pub struct Trace {
    pub path: PathBuf,
    pub header: Value,
    pub events: Vec<Ev>,
    pub summary: Option<Value>,
    /// The file ended in an incomplete line (allowed only where the caller says so).
    pub torn_tail: bool,
}

impl Trace {
    pub fn of(&self, kind: &str) -> Vec<&Ev> {
        self.events.iter().filter(|e| e.kind == kind).collect()
    }

    /// Events dropped, as the `dropped` lines count them.
    pub fn dropped_lines_total(&self) -> u64 {
        self.of("dropped").iter().map(|e| e.count).sum()
    }
}

/// Reads a trace: every complete line must be JSON, the first a header, no header after
/// it, and a summary (if any) only last. An incomplete last line is accepted only with
/// `allow_torn_tail` (a SIGKILL may cut the writer's last write).
pub fn read_trace(path: &Path, allow_torn_tail: bool) -> Trace {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text =
        String::from_utf8(raw).unwrap_or_else(|e| panic!("{}: not UTF-8: {e}", path.display()));
    let torn_tail = !text.is_empty() && !text.ends_with('\n');
    assert!(
        allow_torn_tail || !torn_tail,
        "{}: the last line is incomplete",
        path.display()
    );
    let mut lines: Vec<&str> = text.split_terminator('\n').collect();
    if torn_tail {
        lines.pop();
    }
    assert!(!lines.is_empty(), "{}: no complete line", path.display());
    let header: Value = serde_json::from_str(lines[0])
        .unwrap_or_else(|e| panic!("{}:1: {e}: {}", path.display(), lines[0]));
    assert_eq!(header["type"], "header", "{}:1", path.display());
    let mut events = Vec::new();
    let mut summary = None;
    for (i, line) in lines.iter().enumerate().skip(1) {
        let at = format!("{}:{}", path.display(), i + 1);
        let value: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{at}: {e}: {line}"));
        assert!(summary.is_none(), "{at}: a line after the summary: {line}");
        match value["type"].as_str() {
            Some("header") => panic!("{at}: a second header"),
            Some("summary") => summary = Some(value),
            Some(_) => events
                .push(serde_json::from_value::<Ev>(value).unwrap_or_else(|e| panic!("{at}: {e}"))),
            None => panic!("{at}: no type: {line}"),
        }
    }
    Trace {
        path: path.to_path_buf(),
        header,
        events,
        summary,
        torn_tail,
    }
}

/// The files in `dir`, sorted.
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

/// Fails the test if any stderr line mentions a panic.
pub fn no_panic(out: &Output) {
    assert!(
        !out.stderr.iter().any(|l| l.contains("panic")),
        "a panic:\n{out}"
    );
}

/// `"0x7f00"` → 0x7f00.
pub fn hex(text: &str) -> u64 {
    u64::from_str_radix(text.trim_start_matches("0x"), 16).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The number in `(N bytes)` of a refusal or summary line.
pub fn bytes_in_parens(line: &str) -> Option<u64> {
    let start = line.find('(')? + 1;
    let end = start + line[start..].find(" bytes)")?;
    line[start..end].parse().ok()
}

/// The number just before `word` in `line` (`"17 allocations"` → 17).
pub fn number_before(line: &str, word: &str) -> Option<u64> {
    let at = line.find(word)?;
    line[..at].trim_end().rsplit(' ').next()?.parse().ok()
}
