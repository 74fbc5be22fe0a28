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
mod tests;
