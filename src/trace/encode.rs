//! Event → JSON line. Runs on the writer thread only, so it may allocate freely.
//!
//! The writer must keep up with a tight alloc/free loop (millions of events a second), so a
//! line costs far less than formatting it would (bench/README.md): no `core::fmt`; each
//! line is written through a raw cursor into capacity reserved once for the whole line
//! ([`Cursor`], which also formats the numbers, eight digits at a time); and what repeats
//! from one line to the next is copied from small caches rather than formatted again: the
//! start of a line with the high digits of its time ([`LineStart`]), and the thread,
//! device, API name and high digits of the pointer ([`Segments`]). Tests compare the lines
//! with serde_json's.

use super::cursor::{Cursor, Piece, E8, OVERHANG};
use super::{EventKind, Stamped};
use crate::cuda_abi::CuResult;
use cuquota_format::schema::{self, kind};

/// Formats event lines (schema 1). Keeps its caches between lines, so the writer uses one for
/// its whole life.
#[derive(Default)]
pub struct Encoder {
    /// Per event type: how its lines start.
    starts: [LineStart; PREFIXES.len()],
    segments: Segments,
}

/// `{"type":"…","t_ns":` and the digits of t_ns above the low eight, which change only
/// every 0.1 s: kept as written, so that a line copies them (one fixed-size copy).
struct LineStart {
    /// `t_ns / 10⁸` written in `piece` (u64::MAX, which no t_ns has: nothing yet).
    t_high: u64,
    piece: Piece<48>,
}

impl Default for LineStart {
    fn default() -> LineStart {
        LineStart {
            t_high: u64::MAX,
            piece: Piece::EMPTY,
        }
    }
}

impl LineStart {
    /// Rare (every 0.1 s per type): `core::fmt` will do.
    #[cold]
    fn fill(&mut self, prefix: &[u8], t_high: u64) {
        let mut text = prefix.to_vec();
        if t_high > 0 {
            // No leading zeros: the high part comes first. At most 12 digits (u64::MAX/10⁸).
            text.extend_from_slice(t_high.to_string().as_bytes());
        }
        // At most 26 + 12 bytes.
        assert!(self.piece.set(&text));
        self.t_high = t_high;
    }
}

/// What an event line can advance the cursor by, besides its API name, result name and
/// backoff sizes: every key and punctuation (under 200 bytes, a meminfo line's being the
/// longest) and every number at its widest (20 digits for each of the seven u64 values; 10
/// for tid and an unknown result code, 11 for dev, 16 for ptr). Rounded well up: only an
/// upper bound matters (`the_widest_lines_fit_their_bound` checks it).
const LINE_FIXED_MAX: usize = 512;
/// One backoff size: up to 20 digits and a comma.
const SIZE_MAX: usize = 21;
/// A name escaped: at most 6 bytes (`\u00XX`) per byte.
const ESCAPE_MAX: usize = 6;

// `{"type":"…","t_ns":` for each type, spelling out `kind::*` (the tests compare).
const PREFIXES: [&[u8]; 10] = [
    b"{\"type\":\"alloc\",\"t_ns\":",
    b"{\"type\":\"free\",\"t_ns\":",
    b"{\"type\":\"refused\",\"t_ns\":",
    b"{\"type\":\"meminfo\",\"t_ns\":",
    b"{\"type\":\"backoff\",\"t_ns\":",
    b"{\"type\":\"context\",\"t_ns\":",
    b"{\"type\":\"footprint\",\"t_ns\":",
    b"{\"type\":\"trim\",\"t_ns\":",
    b"{\"type\":\"limit\",\"t_ns\":",
    b"{\"type\":\"unknown_variant\",\"t_ns\":",
];

impl Encoder {
    /// Appends one line for `s` to `out`.
    pub fn event_line(&mut self, out: &mut Vec<u8>, s: &Stamped) {
        let ev = &s.ev;
        let (kind, sizes) = line_type(&ev.kind);
        let result = match ev.result {
            0 => None, // written as a constant below
            code => CuResult(code).name(),
        };
        // A group's refusal (rare: a refusal) carries its fields ready-made.
        let group = match &ev.kind {
            EventKind::GroupRefused { detail, .. } => detail.json_fields(),
            _ => String::new(),
        };
        let unreconciled = match &ev.kind {
            EventKind::Unreconciled { why } => why.len(),
            _ => 0,
        };
        let max = LINE_FIXED_MAX
            + ESCAPE_MAX * (ev.api.len() + result.map_or(0, str::len))
            + SIZE_MAX * sizes.len()
            + group.len()
            + unreconciled;
        // `max` bounds how far the writes below advance: the fixed part and every number at
        // its widest (LINE_FIXED_MAX), the two names even if escaped, the sizes.
        let mut w = Cursor::new(out, max);
        self.line_start(&mut w, kind, s.t_ns);
        self.call_fields(&mut w, s);
        w.put(b"\",\"bytes\":");
        w.decimal(ev.bytes);
        match (ev.result, result) {
            (0, _) => w.put(b",\"result\":\"CUDA_SUCCESS\",\"in_use\":"),
            (_, Some(name)) => {
                w.put(b",\"result\":\"");
                w.name(name);
                w.put(b"\",\"in_use\":");
            }
            (code, None) => {
                w.put(b",\"result\":\"CUresult ");
                w.decimal(u64::from(code));
                w.put(b"\",\"in_use\":");
            }
        }
        w.decimal(ev.in_use);
        line_end(&mut w, &ev.kind, &group);
        w.finish();
    }

    /// `{"type":"…","t_ns":` and the digits of t_ns above the low eight (from the cache),
    /// then the low eight.
    #[inline(always)]
    fn line_start(&mut self, w: &mut Cursor, kind: usize, t_ns: u64) {
        let t_high = t_ns / E8;
        let start = &mut self.starts[kind];
        if start.t_high != t_high {
            start.fill(PREFIXES[kind], t_high);
        }
        w.put_piece(&start.piece);
        if t_high == 0 {
            w.leading_digits(t_ns as u32);
        } else {
            w.padded_digits((t_ns % E8) as u32);
        }
    }

    /// `,"tid":…,"dev":…,"api":"…","ptr":"0x` and the hex digits of ptr above the low 32
    /// bits (from the cache), then the low ones.
    #[inline(always)]
    fn call_fields(&mut self, w: &mut Cursor, s: &Stamped) {
        let ev = &s.ev;
        let ptr_high = (ev.ptr >> 32) as u32;
        let key = SegmentKey::new(s.tid, ev.device, ev.api, ptr_high);
        let slot = self.segments.slot(&key);
        if slot.key == key {
            w.put_piece(&slot.piece);
        } else {
            let from = w.mark();
            w.put(b",\"tid\":");
            w.decimal(u64::from(s.tid));
            w.put(b",\"dev\":");
            w.decimal(u64::from(ev.device));
            w.put(b",\"api\":\"");
            w.name(ev.api);
            w.put(b"\",\"ptr\":\"0x");
            if ptr_high != 0 {
                w.hex(ptr_high);
            }
            slot.fill(key, w.written_since(from));
        }
        if ptr_high == 0 {
            w.hex(ev.ptr as u32);
        } else {
            w.padded_hex(ev.ptr as u32);
        }
    }
}

/// An event's line type (its index in [`PREFIXES`]) and the sizes or pointers its line
/// lists.
#[inline(always)]
fn line_type(kind: &EventKind) -> (usize, &[u64]) {
    match kind {
        EventKind::Alloc { .. } => (0, &[]),
        EventKind::Free => (1, &[]),
        EventKind::Refused { .. }
        | EventKind::Observed
        | EventKind::Unreconciled { .. }
        | EventKind::GroupRefused { .. } => (2, &[]),
        EventKind::MemInfo { .. } => (3, &[]),
        EventKind::Backoff { sizes } => (4, sizes),
        EventKind::Context { ptrs } => (5, ptrs),
        EventKind::Footprint { .. } => (6, &[]),
        EventKind::Trim { .. } => (7, &[]),
        EventKind::Limit { .. } => (8, &[]),
        EventKind::UnknownVariant { .. } => (9, &[]),
    }
}

/// The fields of the line's own type, and the line's end; `group`: a group refusal's
/// fields, ready-made.
#[inline(always)]
fn line_end(w: &mut Cursor, kind: &EventKind, group: &str) {
    match kind {
        EventKind::Alloc { stack } if *stack != 0 => {
            w.put(b",\"stack\":");
            w.decimal(u64::from(*stack));
            w.put(b"}\n");
        }
        EventKind::Alloc { .. } | EventKind::Free => w.put(b"}\n"),
        EventKind::Refused { by_driver: true } => w.put(b",\"reason\":\"driver\"}\n"),
        EventKind::Refused { by_driver: false } => w.put(b",\"reason\":\"quota\"}\n"),
        EventKind::Observed => w.put(b",\"reason\":\"quota\",\"observed\":true}\n"),
        EventKind::Unreconciled { why } => {
            w.put(b",\"reason\":\"quota\",\"unreconciled\":\"");
            w.put(why.as_bytes());
            w.put(b"\"}\n");
        }
        EventKind::GroupRefused { observed, .. } => {
            w.put(b",\"reason\":\"quota\"");
            if *observed {
                w.put(b",\"observed\":true");
            }
            w.put(group.as_bytes());
            w.put(b"}\n");
        }
        EventKind::MemInfo {
            told_free,
            told_total,
            real_free,
            real_total,
        } => {
            w.put(b",\"told_free\":");
            w.decimal(*told_free);
            w.put(b",\"told_total\":");
            w.decimal(*told_total);
            w.put(b",\"real_free\":");
            w.decimal(*real_free);
            w.put(b",\"real_total\":");
            w.decimal(*real_total);
            w.put(b"}\n");
        }
        EventKind::Backoff { sizes } => backoff_sizes(w, sizes),
        EventKind::Context { ptrs } => context_ptrs(w, ptrs),
        EventKind::Footprint { part } | EventKind::Trim { part } => {
            w.put(b",\"part\":\"");
            w.put(part.name().as_bytes());
            w.put(b"\"}\n");
        }
        EventKind::Limit { limit, before } => {
            w.put(b",\"limit\":");
            limit_value(w, *limit);
            w.put(b",\"before\":");
            limit_value(w, *before);
            w.put(b"}\n");
        }
        EventKind::UnknownVariant { driver } => {
            w.put(b",\"driver\":");
            w.decimal(u64::from(*driver));
            w.put(b"}\n");
        }
    }
}

/// A backoff line's sizes, and its end.
fn backoff_sizes(w: &mut Cursor, sizes: &[u64]) {
    w.put(b",\"sizes\":[");
    for (i, size) in sizes.iter().enumerate() {
        if i > 0 {
            w.put(b",");
        }
        w.decimal(*size);
    }
    w.put(b"]}\n");
}

/// A context line's count and pointers (hex strings, as every `ptr` is), and its end.
fn context_ptrs(w: &mut Cursor, ptrs: &[u64]) {
    w.put(b",\"count\":");
    w.decimal(ptrs.len() as u64);
    w.put(b",\"ptrs\":[");
    for (i, ptr) in ptrs.iter().enumerate() {
        if i > 0 {
            w.put(b",");
        }
        w.put(b"\"0x");
        let high = (*ptr >> 32) as u32;
        if high != 0 {
            w.hex(high);
            w.padded_hex(*ptr as u32);
        } else {
            w.hex(*ptr as u32);
        }
        w.put(b"\"");
    }
    w.put(b"]}\n");
}

/// A limit's value: its bytes, or `null` for none (`UNLIMITED` or more: a group's "none").
fn limit_value(w: &mut Cursor, limit: u64) {
    if limit >= crate::quota::UNLIMITED - 1 {
        w.put(b"null");
    } else {
        w.decimal(limit);
    }
}

/// `{"type":"dropped","t_ns":…,"count":…}`: events lost since the previous batch.
pub fn dropped_line(out: &mut Vec<u8>, t_ns: u64, count: u64) {
    // 64 bytes of keys and punctuation at most, and two numbers of 20 digits.
    let mut w = Cursor::new(out, 64 + 2 * 20);
    w.put(b"{\"type\":\"");
    w.put(kind::DROPPED.as_bytes());
    w.put(b"\",\"t_ns\":");
    w.decimal(t_ns);
    w.put(b",\"count\":");
    w.decimal(count);
    w.put(b"}\n");
    w.finish();
}

/// `{"type":"stack","id":…,"frames":["0x…",…]}`: an interned call stack, innermost frame
/// first (return addresses, as the unwinder gave them). Rare: serde will do.
pub fn stack_line(out: &mut Vec<u8>, t_ns: u64, id: u32, frames: &[u64]) {
    let line = schema::StackLine {
        kind: kind::STACK.into(),
        t_ns,
        id: u64::from(id),
        frames: frames.iter().map(|f| format!("{f:#x}")).collect(),
    };
    if serde_json::to_writer(&mut *out, &line).is_ok() {
        out.push(b'\n');
    }
}

/// `{"type":"module",…}`: a loaded module, for symbolising stacks (see `schema::ModuleLine`).
pub fn module_line(out: &mut Vec<u8>, t_ns: u64, m: &crate::stacks::modules::Module) {
    let line = schema::ModuleLine {
        kind: kind::MODULE.into(),
        t_ns,
        path: m.path.clone(),
        base: format!("{:#x}", m.bias),
        lo: format!("{:#x}", m.lo),
        hi: format!("{:#x}", m.hi),
        build_id: m.build_id.clone(),
    };
    if serde_json::to_writer(&mut *out, &line).is_ok() {
        out.push(b'\n');
    }
}

/// The longest `,"tid":…,"dev":…,"api":"…","ptr":"0x…` kept in the cache: 62 bytes with the
/// widest numbers, so API names of up to 34 bytes (the longest that cuquota hooks has 28).
/// The cursor's overhang is sized for this copy.
const SEGMENT_MAX: usize = OVERHANG;

/// The part of a line from `,"tid":` to `"ptr":"0x` and the pointer's high hex digits is
/// the same for every event of one thread, device and API (and 4 GiB of address space):
/// kept as written, so that a line copies it (one fixed 96-byte copy) instead of formatting
/// three numbers and copying the name. Direct-mapped by a hash of the key; a miss (a new
/// key, or one whose slot another took) writes the part out and keeps it.
struct Segments(Box<[Segment; 64]>);

impl Default for Segments {
    fn default() -> Segments {
        Segments(Box::new(
            [Segment {
                key: SegmentKey::EMPTY,
                piece: Piece::EMPTY,
            }; 64],
        ))
    }
}

impl Segments {
    fn slot(&mut self, key: &SegmentKey) -> &mut Segment {
        let mixed = (u64::from(key.tid) | u64::from(key.dev) << 32)
            ^ key.api.0 as u64
            ^ u64::from(key.ptr_high) << 16;
        // The top 6 bits of a multiplicative hash pick one of the 64 slots.
        &mut self.0[(mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize]
    }
}

#[derive(Clone, Copy)]
struct Segment {
    key: SegmentKey,
    piece: Piece<SEGMENT_MAX>,
}

impl Segment {
    /// Keeps `written` for `key`, if it fits (else the slot is left as it was).
    fn fill(&mut self, key: SegmentKey, written: &[u8]) {
        if self.piece.set(written) {
            self.key = key;
        }
    }
}

/// The API name is known by its address and length: a `&'static str`'s text never changes.
#[derive(Clone, Copy, PartialEq, Eq)]
struct SegmentKey {
    tid: u32,
    dev: u32,
    api: (usize, usize),
    /// The pointer's high 32 bits: the same for most pointers of a process.
    ptr_high: u32,
}

impl SegmentKey {
    /// No name's key: a `&str` never points at address 0.
    const EMPTY: SegmentKey = SegmentKey {
        tid: 0,
        dev: 0,
        api: (0, 0),
        ptr_high: 0,
    };

    fn new(tid: u32, dev: u32, api: &'static str, ptr_high: u32) -> SegmentKey {
        SegmentKey {
            tid,
            dev,
            api: (api.as_ptr() as usize, api.len()),
            ptr_high,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Part;
    use crate::trace::cursor::tests::edge_numbers;
    use crate::trace::Event;
    use cuquota_format::schema::{parse_ptr, EventLine};

    fn stamped(kind: EventKind, ptr: u64, bytes: u64, result: u32, in_use: u64) -> Stamped {
        Stamped {
            t_ns: 123,
            tid: 9,
            ev: Event {
                kind,
                device: 1,
                api: "cuMemAlloc_v2",
                ptr,
                bytes,
                result,
                in_use,
            },
        }
    }

    /// Leaked so that a parsed line can borrow from it.
    fn line(s: &Stamped) -> &'static str {
        let mut out = Vec::new();
        Encoder::default().event_line(&mut out, s);
        String::from_utf8(out).unwrap().leak()
    }

    /// An allocation with a call stack names it; the `stack` and `module` lines read back.
    #[test]
    fn stacks_and_modules_parse_back() {
        let s = stamped(
            EventKind::Alloc {
                stack: 4_000_000_000,
            },
            0x10,
            4096,
            0,
            4096,
        );
        let text = line(&s);
        assert!(text.ends_with(",\"stack\":4000000000}\n"), "{text}");
        let ev: EventLine = serde_json::from_str(text).unwrap();
        assert_eq!((ev.stack, ev.bytes), (4_000_000_000, 4096));
        let fast = cuquota_format::fastline::parse(text.trim_end().as_bytes()).unwrap();
        assert_eq!(fast.stack, 4_000_000_000);
        // Without a stack the line is as it always was.
        assert!(!line(&stamped(EventKind::ALLOC, 0x10, 1, 0, 1)).contains("stack"));

        let mut out = Vec::new();
        stack_line(&mut out, 5, 7, &[0x55aa_0000_1234, 0x1]);
        let m = crate::stacks::modules::Module {
            path: "/opt/a \"b\".so".into(),
            bias: 0x7f00_0000_0000,
            lo: 0x7f00_0000_1000,
            hi: 0x7f00_0000_9000,
            build_id: "ab12".into(),
        };
        module_line(&mut out, 5, &m);
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        let stack: EventLine = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(
            (stack.kind.as_ref(), stack.id, stack.t_ns),
            (kind::STACK, 7, 5)
        );
        let frames: Vec<u64> = stack
            .frames
            .unwrap()
            .iter()
            .filter_map(|f| parse_ptr(f))
            .collect();
        assert_eq!(frames, [0x55aa_0000_1234, 0x1]);
        let module: EventLine = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!((module.kind.as_ref(), module.t_ns), (kind::MODULE, 5));
        assert_eq!(module.path.as_deref(), Some("/opt/a \"b\".so"));
        assert_eq!(
            module.base.as_deref().and_then(parse_ptr),
            Some(0x7f00_0000_0000)
        );
        assert_eq!(
            module.lo.as_deref().and_then(parse_ptr),
            Some(0x7f00_0000_1000)
        );
        assert_eq!(
            module.hi.as_deref().and_then(parse_ptr),
            Some(0x7f00_0000_9000)
        );
        assert_eq!(module.build_id.as_deref(), Some("ab12"));
    }

    #[test]
    fn lines_parse_back_with_every_field() {
        let text = line(&stamped(EventKind::ALLOC, 0x7f12_3456_7800, 4096, 0, 8192));
        assert!(text.ends_with("}\n") && text.matches('\n').count() == 1);
        let ev: EventLine = serde_json::from_str(text).unwrap();
        assert_eq!(ev.kind, "alloc");
        assert_eq!((ev.t_ns, ev.tid, ev.dev), (123, 9, 1));
        assert_eq!(ev.api, "cuMemAlloc_v2");
        assert_eq!(parse_ptr(&ev.ptr), Some(0x7f12_3456_7800));
        assert_eq!((ev.bytes, ev.in_use), (4096, 8192));
        assert_eq!(ev.result, "CUDA_SUCCESS");

        let text = line(&stamped(
            EventKind::Refused { by_driver: false },
            0,
            1 << 32,
            2,
            5,
        ));
        let ev: EventLine = serde_json::from_str(text).unwrap();
        assert_eq!(ev.reason.as_deref(), Some("quota"));
        assert_eq!(ev.result, "CUDA_ERROR_OUT_OF_MEMORY");
        assert!(!ev.observed);

        let text = line(&stamped(EventKind::Observed, 0, 1 << 32, 2, 5));
        let ev: EventLine = serde_json::from_str(text).unwrap();
        assert_eq!(
            (ev.kind.as_ref(), ev.reason.as_deref()),
            ("refused", Some("quota"))
        );
        assert!(ev.observed);

        let text = line(&stamped(
            EventKind::Refused { by_driver: true },
            0,
            1,
            12345,
            5,
        ));
        let ev: EventLine = serde_json::from_str(text).unwrap();
        assert_eq!(ev.reason.as_deref(), Some("driver"));
        assert_eq!(ev.result, "CUresult 12345");

        let info = EventKind::MemInfo {
            told_free: 1,
            told_total: 2,
            real_free: 3,
            real_total: 4,
        };
        let ev: EventLine = serde_json::from_str(line(&stamped(info, 0, 0, 0, 0))).unwrap();
        assert_eq!(
            (ev.told_free, ev.told_total, ev.real_free, ev.real_total),
            (1, 2, 3, 4)
        );

        let sizes = vec![40u64, 36, 32].into_boxed_slice();
        let text = line(&stamped(EventKind::Backoff { sizes }, 0x10, 32, 0, 32));
        let ev: EventLine = serde_json::from_str(text).unwrap();
        assert_eq!(ev.sizes.as_deref(), Some(&[40u64, 36, 32][..]));

        let ptrs = vec![0x7000u64, 0x7f12_3456_0000, u64::MAX].into_boxed_slice();
        let text = line(&stamped(EventKind::Context { ptrs }, 0, 8, 0, 0));
        let ev: EventLine = serde_json::from_str(text).unwrap();
        assert_eq!(ev.kind, kind::CONTEXT);
        assert_eq!((ev.count, ev.bytes), (3, 8));
        let ptrs: Vec<&str> = ev.ptrs.iter().flatten().map(|p| p.as_ref()).collect();
        assert_eq!(ptrs, ["0x7000", "0x7f1234560000", "0xffffffffffffffff"]);

        let mut out = Vec::new();
        dropped_line(&mut out, 7, 3);
        let ev: EventLine = serde_json::from_slice(&out).unwrap();
        assert_eq!((ev.kind.as_ref(), ev.t_ns, ev.count), ("dropped", 7, 3));
    }

    #[test]
    fn numbers_at_the_edges() {
        for (t, tid, dev, ptr, bytes) in [
            (0, 0, 0, 0, 0),
            (u64::MAX, u32::MAX, 63, u64::MAX, u64::MAX),
            (10, 7, 1 << 20, 0xabc, 1_000_000),
            (9, 1, i32::MAX as u32, 0x7f00_0000_0000, 999),
        ] {
            let mut s = stamped(EventKind::ALLOC, ptr, bytes, 0, bytes);
            (s.t_ns, s.tid, s.ev.device) = (t, tid, dev);
            let ev: EventLine = serde_json::from_str(line(&s)).unwrap();
            assert_eq!(
                (ev.t_ns, ev.tid, ev.dev, ev.bytes, ev.in_use),
                (t, tid, dev, bytes, bytes)
            );
            assert_eq!(ev.ptr, format!("{ptr:#x}"));
        }
    }

    #[test]
    fn a_typical_alloc_line_stays_short() {
        let mut s = stamped(EventKind::ALLOC, 0x7f12_3456_7800, 1 << 32, 0, 6 << 30);
        s.t_ns = 60_000_000_000;
        s.tid = 123_456;
        assert!(line(&s).len() <= 170, "{} bytes", line(&s).len());
    }

    #[test]
    fn api_names_are_escaped() {
        let mut s = stamped(EventKind::Free, 1, 1, 0, 0);
        s.ev.api = "we\"ird\\\n\u{1f}ü";
        let text = line(&s);
        assert!(
            text.contains(r#","api":"we\"ird\\\u000a\u001fü","#),
            "{text}"
        );
        let ev: EventLine = serde_json::from_str(text).unwrap();
        assert_eq!(ev.api, "we\"ird\\\n\u{1f}ü");
    }

    /// An event line as serde_json writes it: the reference for the hand-written encoder.
    #[derive(serde::Serialize)]
    struct Reference<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        t_ns: u64,
        tid: u32,
        dev: u32,
        api: &'a str,
        ptr: String,
        bytes: u64,
        result: String,
        in_use: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        told_free: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        told_total: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        real_free: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        real_total: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        sizes: Option<&'a [u64]>,
        #[serde(skip_serializing_if = "Option::is_none")]
        count: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        ptrs: Option<Vec<String>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        observed: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        unreconciled: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        part: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        group: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        group_in_use: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        group_limit: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        holders: Option<&'a [cuquota_format::holder::Holder]>,
        /// A group refusal's `unreconciled`, after its group fields.
        #[serde(rename = "unreconciled", skip_serializing_if = "Option::is_none")]
        group_unreconciled: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<Option<u64>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        before: Option<Option<u64>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        driver: Option<u32>,
    }

    fn reference(s: &Stamped) -> String {
        let ev = &s.ev;
        let mut r = Reference {
            kind: "",
            t_ns: s.t_ns,
            tid: s.tid,
            dev: ev.device,
            api: ev.api,
            ptr: format!("{:#x}", ev.ptr),
            bytes: ev.bytes,
            result: CuResult(ev.result)
                .name()
                .map_or_else(|| format!("CUresult {}", ev.result), str::to_string),
            in_use: ev.in_use,
            reason: None,
            told_free: None,
            told_total: None,
            real_free: None,
            real_total: None,
            sizes: None,
            count: None,
            ptrs: None,
            observed: None,
            unreconciled: None,
            part: None,
            group: None,
            group_in_use: None,
            group_limit: None,
            holders: None,
            group_unreconciled: None,
            limit: None,
            before: None,
            driver: None,
        };
        match &ev.kind {
            EventKind::Alloc { .. } => r.kind = kind::ALLOC,
            EventKind::Free => r.kind = kind::FREE,
            EventKind::Refused { by_driver } => {
                r.kind = kind::REFUSED;
                r.reason = Some(if *by_driver { "driver" } else { "quota" });
            }
            EventKind::Observed => {
                r.kind = kind::REFUSED;
                r.reason = Some("quota");
                r.observed = Some(true);
            }
            EventKind::Unreconciled { why } => {
                r.kind = kind::REFUSED;
                r.reason = Some("quota");
                r.unreconciled = Some(why);
            }
            EventKind::GroupRefused { observed, detail } => {
                r.kind = kind::REFUSED;
                r.reason = Some("quota");
                r.observed = observed.then_some(true);
                r.group = Some(&detail.name);
                r.group_unreconciled = detail.unreconciled;
                r.group_in_use = Some(detail.in_use);
                r.group_limit = Some(detail.limit);
                r.holders = Some(&detail.holders);
            }
            EventKind::MemInfo {
                told_free,
                told_total,
                real_free,
                real_total,
            } => {
                r.kind = kind::MEMINFO;
                r.told_free = Some(*told_free);
                r.told_total = Some(*told_total);
                r.real_free = Some(*real_free);
                r.real_total = Some(*real_total);
            }
            EventKind::Backoff { sizes } => {
                r.kind = kind::BACKOFF;
                r.sizes = Some(sizes);
            }
            EventKind::Context { ptrs } => {
                r.kind = kind::CONTEXT;
                r.count = Some(ptrs.len() as u64);
                r.ptrs = Some(ptrs.iter().map(|p| format!("{p:#x}")).collect());
            }
            EventKind::Footprint { part } => {
                r.kind = kind::FOOTPRINT;
                r.part = Some(part.name());
            }
            EventKind::Trim { part } => {
                r.kind = kind::TRIM;
                r.part = Some(part.name());
            }
            EventKind::Limit { limit, before } => {
                let value = |l: u64| (l < crate::quota::UNLIMITED - 1).then_some(l);
                r.kind = kind::LIMIT;
                r.limit = Some(value(*limit));
                r.before = Some(value(*before));
            }
            EventKind::UnknownVariant { driver } => {
                r.kind = kind::UNKNOWN_VARIANT;
                r.driver = Some(*driver);
            }
        }
        serde_json::to_string(&r).unwrap() + "\n"
    }

    #[test]
    fn lines_are_what_serde_json_writes() {
        let numbers = edge_numbers();
        let results = [0, 1, 2, 201, 999, 12345, u32::MAX];
        let devices = [0, 1, 7, 10, 63, 1 << 20, i32::MAX as u32];
        let tids = [0, 9, 123_456, u32::MAX];
        let apis = ["cuMemAlloc_v2", "cuMemFree_v2", "", "qu\"ote\\back", "ünï"];
        let mut encoder = Encoder::default();
        let mut out = Vec::new();
        let mut checked = 0;
        for (i, &n) in numbers.iter().enumerate() {
            // Each number in every field, next to other numbers in the others.
            let m = numbers[(i * 7 + 3) % numbers.len()];
            let kinds = [
                EventKind::ALLOC,
                EventKind::Free,
                EventKind::Refused { by_driver: true },
                EventKind::Refused { by_driver: false },
                EventKind::Observed,
                EventKind::Unreconciled {
                    why: "NVML does not list this process, as from another PID namespace",
                },
                EventKind::Limit {
                    limit: n,
                    before: m,
                },
                EventKind::GroupRefused {
                    observed: i % 2 == 0,
                    detail: Box::new(crate::trace::GroupDetail {
                        name: "sv\"c".into(),
                        in_use: n,
                        limit: m,
                        holders: vec![cuquota_format::holder::Holder {
                            pid: 1,
                            outer_pid: 4242,
                            command: "py\\thon ü".into(),
                            container: Some("abababababab".into()),
                            in_use: m,
                            parts: [("pool_cache".to_string(), n / 2)].into(),
                        }],
                        unreconciled: (i % 3 == 0).then_some("NVML cannot be used"),
                    }),
                },
                EventKind::MemInfo {
                    told_free: n,
                    told_total: m,
                    real_free: m,
                    real_total: n,
                },
                EventKind::Backoff {
                    sizes: vec![n, m, 0, n].into_boxed_slice(),
                },
                EventKind::Backoff {
                    sizes: Box::new([]),
                },
                EventKind::Context {
                    ptrs: vec![n, m].into_boxed_slice(),
                },
                EventKind::Footprint {
                    part: Part::ALL[i % 3],
                },
                EventKind::Trim {
                    part: Part::ALL[(i + 1) % 3],
                },
                EventKind::UnknownVariant { driver: n as u32 },
            ];
            for (j, kind) in kinds.into_iter().enumerate() {
                let s = Stamped {
                    t_ns: if j % 2 == 0 { n } else { m },
                    tid: tids[(i + j) % tids.len()],
                    ev: Event {
                        kind,
                        device: devices[(i + j) % devices.len()],
                        api: apis[(i + 2 * j) % apis.len()],
                        ptr: n,
                        bytes: m,
                        result: results[(i + j) % results.len()],
                        in_use: n,
                    },
                };
                out.clear();
                encoder.event_line(&mut out, &s);
                assert_eq!(std::str::from_utf8(&out).unwrap(), reference(&s));
                checked += 1;
            }
        }
        assert!(checked > 500);
    }

    /// Events of every shape with numbers of random magnitudes, through one encoder (its
    /// cache hit and missed), as serde_json writes them.
    #[test]
    fn random_lines_are_what_serde_json_writes() {
        let apis = [
            "cuMemAlloc_v2",
            "cuMemFree_v2",
            "cuMemAllocFromPoolAsync_ptsz",
            "q\"\\",
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // A random number of random bit length.
        let mut num = move || {
            let v = next();
            v >> (v % 64)
        };
        let mut encoder = Encoder::default();
        let mut out = Vec::new();
        for i in 0..20_000u64 {
            let kind = match i % 6 {
                5 => EventKind::Footprint {
                    part: Part::ALL[(num() % 3) as usize],
                },
                0 => EventKind::ALLOC,
                1 => EventKind::Free,
                2 => EventKind::Refused {
                    by_driver: num() % 2 == 0,
                },
                3 => EventKind::MemInfo {
                    told_free: num(),
                    told_total: num(),
                    real_free: num(),
                    real_total: num(),
                },
                _ => EventKind::Backoff {
                    sizes: (0..num() % 4).map(|_| num()).collect(),
                },
            };
            let s = Stamped {
                t_ns: num(),
                tid: (num() % 100) as u32,
                ev: Event {
                    kind,
                    device: (num() % 4) as u32,
                    api: apis[(num() % 4) as usize],
                    ptr: num(),
                    bytes: num(),
                    result: [0, 0, 2, 999, num() as u32][(num() % 5) as usize],
                    in_use: num(),
                },
            };
            out.clear();
            encoder.event_line(&mut out, &s);
            assert_eq!(std::str::from_utf8(&out).unwrap(), reference(&s));
        }
    }

    #[test]
    fn the_widest_lines_fit_their_bound() {
        // Every number at its widest, names that escape to six bytes a byte, an unknown
        // result, many sizes: the cursor's checks (debug builds) fail if a bound is short.
        let api: &'static str = String::from_utf8(vec![1u8; 200]).unwrap().leak();
        let kinds = || {
            [
                EventKind::MemInfo {
                    told_free: u64::MAX,
                    told_total: u64::MAX,
                    real_free: u64::MAX,
                    real_total: u64::MAX,
                },
                EventKind::Refused { by_driver: true },
                EventKind::Observed,
                EventKind::Backoff {
                    sizes: vec![u64::MAX; 1000].into_boxed_slice(),
                },
                EventKind::Context {
                    ptrs: vec![u64::MAX; 1000].into_boxed_slice(),
                },
            ]
        };
        for result in [u32::MAX, 219] {
            for kind in kinds() {
                let s = Stamped {
                    t_ns: u64::MAX,
                    tid: u32::MAX,
                    ev: Event {
                        kind,
                        device: i32::MAX as u32,
                        api,
                        ptr: u64::MAX,
                        bytes: u64::MAX,
                        result,
                        in_use: u64::MAX,
                    },
                };
                let mut out = Vec::new();
                Encoder::default().event_line(&mut out, &s);
                // serde_json too writes \u0001 for the byte 1.
                assert_eq!(std::str::from_utf8(&out).unwrap(), reference(&s));
                let ev: EventLine = serde_json::from_slice(&out).unwrap();
                assert_eq!(
                    (ev.t_ns, ev.dev, ev.api.len()),
                    (u64::MAX, i32::MAX as u32, 200)
                );
            }
        }
        let mut out = Vec::new();
        dropped_line(&mut out, u64::MAX, u64::MAX);
        assert_eq!(
            out,
            format!(
                "{{\"type\":\"dropped\",\"t_ns\":{0},\"count\":{0}}}\n",
                u64::MAX
            )
            .as_bytes()
        );
    }

    /// Lines from an encoder whose caches (line starts, segments) have seen much read as
    /// those of a fresh one, whatever the order of keys and however they collide.
    #[test]
    fn cached_parts_match_fresh_ones() {
        let long: &'static str = "x".repeat(SEGMENT_MAX).leak();
        let apis = ["cuMemAlloc_v2", "cuMemFree_v2", "esc\"aped", long, ""];
        let mut cached = Encoder::default();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut t_ns = 0;
        for round in 0..3u32 {
            for i in 0..1000u32 {
                // Time across multiples of 10⁸ (the cached high digits), now and then a jump.
                t_ns += if i % 100 == 99 { 7 << 40 } else { 999_983 };
                let s = Stamped {
                    t_ns,
                    tid: (i * 7919 + round) % 300,
                    ev: Event {
                        kind: match i % 3 {
                            0 => EventKind::ALLOC,
                            1 => EventKind::Free,
                            _ => EventKind::Refused { by_driver: true },
                        },
                        device: i % 3 + 61,
                        api: apis[(i % 5) as usize],
                        // The high 32 bits (cached with the segment) zero or not.
                        ptr: (u64::from(i % 4) << 32 | u64::from(i) << 12) * u64::from(i % 7),
                        bytes: 4096,
                        result: 0,
                        in_use: 0,
                    },
                };
                a.clear();
                b.clear();
                cached.event_line(&mut a, &s);
                Encoder::default().event_line(&mut b, &s);
                assert_eq!(a, b);
                assert_eq!(std::str::from_utf8(&a).unwrap(), reference(&s));
            }
        }
    }
}
