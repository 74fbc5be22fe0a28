//! Streams a trace file line by line, in constant memory, with errors that name the file
//! and line. A last line without its newline (the process was killed mid-write) is skipped
//! with a warning; any other bad line is an error unless `--skip-bad`.

use crate::fastline;
use crate::schema::{kind, EventLine, Header, Summary, SCHEMA_VERSION};
use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::Path;

pub struct Options {
    pub skip_bad: bool,
    /// Show a line count on stderr for long files.
    pub progress: bool,
}

impl Options {
    pub fn new(skip_bad: bool) -> Options {
        Options {
            skip_bad,
            progress: std::io::stderr().is_terminal(),
        }
    }
}

/// Passed by reference to the visitor: one lives at a time, nothing is boxed per line
/// (so the size of the flat event line does not matter).
#[allow(clippy::large_enum_variant)]
pub enum Record<'a> {
    Header(Header),
    Event(EventLine<'a>),
    Summary(Summary),
}

/// What reading a file found besides its records.
#[derive(Clone, Copy, Default, Debug)]
pub struct Stats {
    pub lines: u64,
    /// Malformed lines skipped under `--skip-bad`.
    pub skipped: u64,
    /// The last line was incomplete and skipped.
    pub truncated: bool,
}

const PROGRESS_EVERY: u64 = 1 << 20;

/// One warning line on stderr; what it quotes of a trace is escaped.
pub fn warn(msg: &str) {
    eprintln!("cuquota: warning: {}", crate::escape::text(msg));
}

/// Calls `visit` for each record of `path`, in file order. The first record is always a
/// header (or the file is an error).
pub fn read(
    path: &Path,
    options: &Options,
    mut visit: impl FnMut(&Record<'_>) -> Result<(), String>,
) -> Result<Stats, String> {
    let name = path.display();
    let file = File::open(path).map_err(|e| format!("{name}: {e}"))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    // A line split across two reads of the buffer is put together here; other lines are
    // parsed where they lie in the buffer.
    let mut carry: Vec<u8> = Vec::new();
    let mut stats = Stats::default();
    let mut seen_header = false;
    let mut progress_shown = false;
    loop {
        let available = reader.fill_buf().map_err(|e| format!("{name}: {e}"))?;
        let (line, complete, used): (&[u8], bool, usize) = match find_newline(available) {
            Some(pos) if carry.is_empty() => (&available[..pos], true, pos + 1),
            Some(pos) => {
                carry.extend_from_slice(&available[..pos]);
                (&carry, true, pos + 1)
            }
            None if available.is_empty() && carry.is_empty() => break,
            None if available.is_empty() => (&carry, false, 0),
            None => {
                carry.extend_from_slice(available);
                let n = available.len();
                reader.consume(n);
                continue;
            }
        };
        stats.lines += 1;
        let line_no = stats.lines;
        if options.progress && line_no % PROGRESS_EVERY == 0 {
            eprint!("\r{name}: {} M lines…", line_no / PROGRESS_EVERY);
            progress_shown = true;
        }
        let line = trim(line);
        match parse(line) {
            _ if line.is_empty() => {}
            Ok(record) => {
                match &record {
                    Record::Header(h) if h.schema > SCHEMA_VERSION => {
                        return Err(format!(
                            "{name}:{line_no}: trace schema {} is newer than this cuquota \
                             reads ({SCHEMA_VERSION}); use a newer cuquota",
                            h.schema
                        ));
                    }
                    Record::Header(_) => seen_header = true,
                    _ if !seen_header => {
                        return Err(format!(
                            "{name}:{line_no}: not a cuquota trace (no header line before \
                             the events)"
                        ))
                    }
                    _ => {}
                }
                visit(&record).map_err(|e| format!("{name}:{line_no}: {e}"))?;
            }
            Err(_) if !complete => {
                warn(&format!(
                    "{name}:{line_no}: incomplete last line (the process was killed while \
                     writing it?); skipped"
                ));
                stats.truncated = true;
            }
            Err(e) if options.skip_bad && seen_header => {
                warn(&format!("{name}:{line_no}: {e}; skipped"));
                stats.skipped += 1;
            }
            Err(e) => return Err(format!("{name}:{line_no}: {e}")),
        }
        if !complete {
            break;
        }
        carry.clear();
        reader.consume(used);
    }
    if progress_shown {
        eprint!("\r\x1b[K");
    }
    if !seen_header {
        return Err(format!("{name}: not a cuquota trace (it is empty)"));
    }
    Ok(stats)
}

/// The header (first line) of a trace, without reading the rest.
pub fn header(path: &Path) -> Result<Header, String> {
    let name = path.display();
    let file = File::open(path).map_err(|e| format!("{name}: {e}"))?;
    let mut line = Vec::new();
    BufReader::new(file)
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("{name}: {e}"))?;
    match parse(trim(&line)) {
        Ok(Record::Header(h)) => Ok(h),
        Ok(_) => Err(format!("{name}:1: not a cuquota trace (no header line)")),
        Err(e) => Err(format!("{name}:1: not a cuquota trace ({e})")),
    }
}

/// The first `\n`, eight bytes at a time (a line is ~150 bytes; a byte loop would cost a
/// tenth of the reader's time).
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut chunks = bytes.chunks_exact(8);
    for (i, chunk) in chunks.by_ref().enumerate() {
        let word = u64::from_le_bytes(chunk.try_into().unwrap()) ^ (ONES * u64::from(b'\n'));
        // A zero byte of `word` (a newline) sets its high bit here; bits above the first
        // zero byte may be wrong, bits below it never are, so the lowest set bit is exact.
        let zeros = word.wrapping_sub(ONES) & !word & HIGHS;
        if zeros != 0 {
            return Some(i * 8 + zeros.trailing_zeros() as usize / 8);
        }
    }
    let done = bytes.len() - chunks.remainder().len();
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'\n')
        .map(|at| done + at)
}

fn trim(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &line[..end]
}

fn parse(line: &[u8]) -> Result<Record<'_>, String> {
    let event: EventLine = match fastline::parse(line) {
        Some(event) => event,
        None => serde_json::from_slice(line).map_err(|e| describe(&e))?,
    };
    // Header and summary are rare: parsed a second time, whole.
    Ok(match event.kind.as_ref() {
        kind::HEADER => Record::Header(serde_json::from_slice(line).map_err(|e| describe(&e))?),
        kind::SUMMARY => Record::Summary(serde_json::from_slice(line).map_err(|e| describe(&e))?),
        _ => Record::Event(event),
    })
}

/// serde_json's message without its "line 1" (every line is line 1 to it).
fn describe(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let message = text
        .rfind(" at line ")
        .map_or(text.as_str(), |at| &text[..at]);
    format!("{message} at column {}", e.column())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"type":"header","schema":1,"version":"0.1.0","pid":7,"host":"h","rank":0,"argv":["a"],"start_unix_ns":1,"mode":"enforce","devices":[]}"#;
    const ALLOC: &str = r#"{"type":"alloc","t_ns":1,"tid":1,"dev":0,"api":"cuMemAlloc_v2","ptr":"0x1","bytes":1,"result":"CUDA_SUCCESS","in_use":1}"#;

    /// A file removed when dropped.
    struct TempFile(std::path::PathBuf);

    impl std::ops::Deref for TempFile {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn file(name: &str, text: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("cuquota-read-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }

    fn count(path: &Path, skip_bad: bool) -> Result<(usize, Stats), String> {
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

    #[test]
    fn newlines_are_found_at_every_offset() {
        for len in 0..40 {
            for at in 0..=len {
                let mut bytes = vec![b'a'; len];
                bytes.extend_from_slice(b"\n\x8a\x0b\n");
                bytes[..at].fill(0x8a);
                assert_eq!(find_newline(&bytes), Some(len), "{len} {at}");
                assert_eq!(find_newline(&bytes[..len]), None);
            }
        }
    }

    #[test]
    fn truncated_last_line_is_skipped() {
        let path = file("trunc", &format!("{HEADER}\n{ALLOC}\n{}", &ALLOC[..40]));
        let (events, stats) = count(&path, false).unwrap();
        assert_eq!(events, 1);
        assert!(stats.truncated);
        // A complete last line without its newline is fine.
        let path = file("nonl", &format!("{HEADER}\n{ALLOC}"));
        let (events, stats) = count(&path, false).unwrap();
        assert_eq!((events, stats.truncated), (1, false));
    }

    #[test]
    fn garbled_lines_name_file_and_line() {
        let path = file("garbled", &format!("{HEADER}\n{ALLOC}\n\n{{x\n{ALLOC}\n"));
        let err = count(&path, false).unwrap_err();
        assert!(
            err.ends_with("garbled:4: key must be a string at column 2"),
            "{err}"
        );
        let (events, stats) = count(&path, true).unwrap();
        assert_eq!((events, stats.skipped), (2, 1));

        let path = file("notype", &format!("{HEADER}\n{{\"t_ns\":1}}\n"));
        let err = count(&path, false).unwrap_err();
        assert!(err.contains("notype:2: missing field `type`"), "{err}");
    }

    /// A header with its count mode (`quota_counts`, a word) reads, though every line is
    /// first read as a flat event.
    #[test]
    fn a_header_with_its_count_mode_reads() {
        let with = HEADER.replace(
            "\"devices\":[]",
            "\"devices\":[],\"quota_counts\":\"footprint\"",
        );
        assert!(with.contains(r#""quota_counts":"footprint""#), "{with}");
        let path = file("count", &format!("{with}\n{ALLOC}\n"));
        let mut mode = None;
        let options = Options {
            skip_bad: false,
            progress: false,
        };
        read(&path, &options, |r| {
            if let Record::Header(h) = r {
                mode = h.count.clone();
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(mode.as_deref(), Some("footprint"));
        assert_eq!(header(&path).unwrap().count.as_deref(), Some("footprint"));
        // An event whose count is a word is still an error, named as before.
        let path = file(
            "badcount",
            &format!("{HEADER}\n{{\"type\":\"dropped\",\"count\":\"x\"}}\n"),
        );
        let err = count(&path, false).unwrap_err();
        assert!(
            err.contains("badcount:2: invalid type: string \"x\", expected u64"),
            "{err}"
        );
    }

    #[test]
    fn not_a_trace() {
        let err = count(&file("noheader", &format!("{ALLOC}\n")), false).unwrap_err();
        assert!(err.contains("noheader:1: not a cuquota trace"), "{err}");
        let err = count(&file("empty", ""), false).unwrap_err();
        assert!(err.contains("empty: not a cuquota trace"), "{err}");
        let err = count(&file("value", "[1,2]\n"), true).unwrap_err();
        assert!(err.contains("value:1:"), "{err}");
        let newer = HEADER.replace("\"schema\":1", "\"schema\":2");
        let err = count(&file("newer", &format!("{newer}\n")), false).unwrap_err();
        assert!(err.contains("schema 2 is newer"), "{err}");
        let err = header(Path::new("/nonexistent/t.jsonl")).unwrap_err();
        assert!(err.starts_with("/nonexistent/t.jsonl: "), "{err}");
    }
}
