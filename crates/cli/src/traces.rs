//! What every subcommand that reads traces shares: one check that a file is a trace (one
//! wording for "not a cuquota trace"), and reading each process once when the same trace is
//! given twice.

use cuquota_format::read;
use cuquota_format::schema::Header;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// The header of `path`, or the one error every subcommand gives for a file that is not a
/// trace (empty, not JSON, or JSON without a header first).
pub fn header(path: &Path) -> Result<Header, String> {
    let name = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("{name}: {e}"))?;
    let mut first = Vec::new();
    BufReader::new(file)
        .read_until(b'\n', &mut first)
        .map_err(|e| format!("{name}: {e}"))?;
    if !is_header_line(&first) {
        return Err(not_a_trace(path));
    }
    read::header(path)
}

pub fn not_a_trace(path: &Path) -> String {
    format!(
        "{}: not a cuquota trace (its first line is not a cuquota header; traces are written \
         with CUQUOTA_TRACE=PATH or cuquota run --trace PATH)",
        path.display()
    )
}

/// A JSON object whose `type` is `header`.
fn is_header_line(line: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(line.trim_ascii())
        .is_ok_and(|v| v.get("type").and_then(|t| t.as_str()) == Some("header"))
}

/// Processes already read, by (host, pid, start): a trace given twice is read once.
#[derive(Default)]
pub struct Seen {
    files: HashMap<(String, u32, u64), String>,
}

impl Seen {
    /// Whether the process of `h` is new; if not, warns that `file` repeats it and returns
    /// false (its records are to be skipped).
    pub fn first(&mut self, h: &Header, file: &str) -> bool {
        let key = (h.host.clone(), h.pid, h.start_unix_ns);
        match self.files.get(&key) {
            None => {
                self.files.insert(key, file.to_string());
                true
            }
            Some(earlier) if earlier == file => {
                read::warn(&format!("{file}: given twice; read once"));
                false
            }
            Some(earlier) => {
                read::warn(&format!(
                    "{file}: the trace of pid {} on {} (started at {} ns) is also in {earlier}; \
                     read once",
                    h.pid, h.host, h.start_unix_ns
                ));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_header_object_starts_a_trace() {
        assert!(is_header_line(br#"{"type":"header","schema":1}"#));
        assert!(is_header_line(b" {\"type\":\"header\"}\r\n"));
        for line in [
            &b""[..],
            b"not json",
            br#"{"a":1}"#,
            br#"{"type":"alloc"}"#,
            b"[1]",
        ] {
            assert!(!is_header_line(line), "{:?}", String::from_utf8_lossy(line));
        }
    }
}
