//! Event → JSON line, and the running totals behind the summary line. Runs on the writer
//! thread only, so it may allocate freely.
//!
//! The writer must keep up with a tight alloc/free loop (millions of events a second), so a
//! line costs a few hundred instructions rather than a few thousand: no `core::fmt`; each
//! line is written through a raw cursor into capacity reserved once for the whole line
//! ([`Cursor`]); numbers are formatted eight digits at a time ([`eight_digits`],
//! [`eight_hex_digits`]); and what repeats from one line to the next is copied from small
//! caches rather than formatted again: the start of a line with the high digits of its time
//! ([`LineStart`]), and the thread, device, API name and high digits of the pointer
//! ([`Segments`]). Tests compare the lines with serde_json's.

use super::{Event, EventKind};
use crate::cuda_abi::CuResult;
use crate::quota::Part;
use cuquota_format::hash::KeyHasher;
use cuquota_format::schema::{kind, Summary, SummaryDevice};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ptr;

/// An event with the stamps `record` adds.
pub struct Stamped {
    pub t_ns: u64,
    pub tid: u32,
    pub ev: Event,
}

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
    /// `t_ns / 10⁸` written in `bytes` (u64::MAX, which no t_ns has: nothing yet).
    t_high: u64,
    len: u8,
    bytes: [u8; 48],
}

impl Default for LineStart {
    fn default() -> LineStart {
        LineStart {
            t_high: u64::MAX,
            len: 0,
            bytes: [0; 48],
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
        self.bytes[..text.len()].copy_from_slice(&text);
        self.len = text.len() as u8;
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
const PREFIXES: [&[u8]; 8] = [
    b"{\"type\":\"alloc\",\"t_ns\":",
    b"{\"type\":\"free\",\"t_ns\":",
    b"{\"type\":\"refused\",\"t_ns\":",
    b"{\"type\":\"meminfo\",\"t_ns\":",
    b"{\"type\":\"backoff\",\"t_ns\":",
    b"{\"type\":\"context\",\"t_ns\":",
    b"{\"type\":\"footprint\",\"t_ns\":",
    b"{\"type\":\"trim\",\"t_ns\":",
];

const E8: u64 = 100_000_000;

impl Encoder {
    /// Appends one line for `s` to `out`.
    pub fn event_line(&mut self, out: &mut Vec<u8>, s: &Stamped) {
        let ev = &s.ev;
        let (kind, sizes): (usize, &[u64]) = match &ev.kind {
            EventKind::Alloc => (0, &[]),
            EventKind::Free => (1, &[]),
            EventKind::Refused { .. } | EventKind::Observed => (2, &[]),
            EventKind::MemInfo { .. } => (3, &[]),
            EventKind::Backoff { sizes } => (4, sizes),
            EventKind::Context { ptrs } => (5, ptrs),
            EventKind::Footprint { .. } => (6, &[]),
            EventKind::Trim { .. } => (7, &[]),
        };
        let result = match ev.result {
            0 => None, // written as a constant below
            code => CuResult(code).name(),
        };
        let max = LINE_FIXED_MAX
            + ESCAPE_MAX * (ev.api.len() + result.map_or(0, str::len))
            + SIZE_MAX * sizes.len();
        // SAFETY: `max` bounds how far the writes below advance: the fixed part and every
        // number at its widest (LINE_FIXED_MAX), the two names even if escaped, the sizes.
        let mut w = unsafe { Cursor::new(out, max) };

        // `{"type":"…","t_ns":` and the digits of t_ns above the low eight (from the cache),
        // then the low eight.
        let t_high = s.t_ns / E8;
        let start = &mut self.starts[kind];
        if start.t_high != t_high {
            start.fill(PREFIXES[kind], t_high);
        }
        w.put_padded(&start.bytes, usize::from(start.len));
        if t_high == 0 {
            w.leading_digits(s.t_ns as u32);
        } else {
            w.put_padded(&ascii(eight_digits((s.t_ns % E8) as u32)).to_le_bytes(), 8);
        }

        // `,"tid":…,"dev":…,"api":"…","ptr":"0x` and the hex digits of ptr above the low
        // 32 bits (from the cache), then the low ones.
        let ptr_high = (ev.ptr >> 32) as u32;
        let key = SegmentKey::new(s.tid, ev.device, ev.api, ptr_high);
        let slot = self.segments.slot(&key);
        if slot.key == key {
            w.put_padded(&slot.bytes, usize::from(slot.len));
        } else {
            let from = w.at;
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
            w.put_padded(&eight_hex_digits(ev.ptr as u32).to_le_bytes(), 8);
        }
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
        match &ev.kind {
            EventKind::Alloc | EventKind::Free => w.put(b"}\n"),
            EventKind::Refused { by_driver: true } => w.put(b",\"reason\":\"driver\"}\n"),
            EventKind::Refused { by_driver: false } => w.put(b",\"reason\":\"quota\"}\n"),
            EventKind::Observed => w.put(b",\"reason\":\"quota\",\"observed\":true}\n"),
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
            EventKind::Backoff { .. } => {
                w.put(b",\"sizes\":[");
                for (i, size) in sizes.iter().enumerate() {
                    if i > 0 {
                        w.put(b",");
                    }
                    w.decimal(*size);
                }
                w.put(b"]}\n");
            }
            EventKind::Context { .. } => {
                w.put(b",\"count\":");
                w.decimal(sizes.len() as u64);
                // Hex strings, as every `ptr` is.
                w.put(b",\"ptrs\":[");
                for (i, ptr) in sizes.iter().enumerate() {
                    if i > 0 {
                        w.put(b",");
                    }
                    w.put(b"\"0x");
                    let high = (*ptr >> 32) as u32;
                    if high != 0 {
                        w.hex(high);
                        w.put_padded(&eight_hex_digits(*ptr as u32).to_le_bytes(), 8);
                    } else {
                        w.hex(*ptr as u32);
                    }
                    w.put(b"\"");
                }
                w.put(b"]}\n");
            }
            EventKind::Footprint { part } | EventKind::Trim { part } => {
                w.put(b",\"part\":\"");
                w.put(part.name().as_bytes());
                w.put(b"\"}\n");
            }
        }
        w.finish();
    }
}

/// `{"type":"dropped","t_ns":…,"count":…}`: events lost since the previous batch.
pub fn dropped_line(out: &mut Vec<u8>, t_ns: u64, count: u64) {
    // SAFETY: 64 bytes of keys and punctuation at most, and two numbers of 20 digits.
    let mut w = unsafe { Cursor::new(out, 64 + 2 * 20) };
    w.put(b"{\"type\":\"");
    w.put(kind::DROPPED.as_bytes());
    w.put(b"\",\"t_ns\":");
    w.decimal(t_ns);
    w.put(b",\"count\":");
    w.decimal(count);
    w.put(b"}\n");
    w.finish();
}

/// How far past the cursor a single write may reach beyond what it keeps: a fixed-size copy
/// (a cached segment, eight digits) is cheaper than an exact one, and the bytes past the
/// cursor are overwritten by the next write or left beyond the vector's length.
const OVERHANG: usize = SEGMENT_MAX;

/// Appends to a `Vec<u8>` through a raw pointer into capacity reserved up front for the
/// whole line. Each piece then costs a few moves (a constant-length `put` compiles to one or
/// two), where `extend_from_slice` would check the capacity, update the length and often call
/// `memcpy` for every piece. [`Cursor::new`]'s caller promises a bound on how far it advances;
/// debug builds check every write.
struct Cursor<'a> {
    out: &'a mut Vec<u8>,
    /// Where the next byte goes. Every byte from the old end of `out` up to here is written.
    at: *mut u8,
    /// How far `at` may go: `max` bytes after the old end of `out`. The capacity reserved
    /// extends `OVERHANG` bytes further.
    limit: *mut u8,
}

impl<'a> Cursor<'a> {
    /// Reserves room after `out`'s contents for `max` bytes plus a write's overhang.
    ///
    /// SAFETY: the caller must advance the cursor by at most `max` bytes in all.
    unsafe fn new(out: &'a mut Vec<u8>, max: usize) -> Cursor<'a> {
        out.reserve(max + OVERHANG);
        // SAFETY: reserve made room for that many bytes after the length.
        let (at, limit) = unsafe {
            let at = out.as_mut_ptr().add(out.len());
            (at, at.add(max))
        };
        Cursor { out, at, limit }
    }

    /// Makes what was written part of the vector.
    fn finish(self) {
        // SAFETY: `at` only moved forwards from the old end of `out`, within the capacity
        // (the promise of `new`), and every byte up to it was written.
        unsafe {
            let written = self.at.offset_from(self.out.as_ptr().add(self.out.len())) as usize;
            self.out.set_len(self.out.len() + written);
        }
    }

    /// Writes `N` bytes at the cursor and advances it by `keep` (≤ `N`) of them.
    #[inline(always)]
    fn put_padded<const N: usize>(&mut self, bytes: &[u8; N], keep: usize) {
        const { assert!(N <= OVERHANG) };
        debug_assert!(keep <= N);
        self.check(keep);
        // SAFETY: the cursor stays within `max` bytes (the promise of `new`), and `N` bytes
        // from anywhere up to there fit in the OVERHANG beyond; `bytes` is a live array, not
        // within the spare capacity.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.at, N);
            self.at = self.at.add(keep);
        }
    }

    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        self.check(bytes.len());
        // SAFETY: within the reserved capacity (the promise of `new`); `bytes` is a live
        // shared slice, so not within the spare capacity that the cursor writes.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.at, bytes.len());
            self.at = self.at.add(bytes.len());
        }
    }

    /// That advancing `n` bytes keeps the promise of `new`. Checked in release builds too:
    /// a wrong bound must stop the trace writer (a panic on our own thread), never write
    /// past the buffer inside the host process.
    #[inline(always)]
    fn check(&self, n: usize) {
        assert!(
            n <= self.limit as usize - self.at as usize,
            "the line is longer than the bound its caller reserved"
        );
    }

    /// The bytes written since the cursor was at `start`.
    fn written_since(&self, start: *mut u8) -> &[u8] {
        // SAFETY: `start` is an earlier position of this cursor, and every byte from there
        // to `at` was written.
        unsafe { std::slice::from_raw_parts(start, self.at.offset_from(start) as usize) }
    }

    /// `v` in decimal.
    #[inline(always)]
    fn decimal(&mut self, v: u64) {
        if v < E8 {
            return self.leading_digits(v as u32);
        }
        let (high, low) = (v / E8, (v % E8) as u32);
        if high < E8 {
            self.leading_digits(high as u32);
        } else {
            // At most 20 digits: 4, then 8, then 8.
            self.leading_digits((high / E8) as u32);
            self.put_padded(&ascii(eight_digits((high % E8) as u32)).to_le_bytes(), 8);
        }
        self.put_padded(&ascii(eight_digits(low)).to_le_bytes(), 8);
    }

    /// `y` (< 10⁸) in decimal, without leading zeros. Small numbers (a device, a count) are
    /// common: they take a shorter path.
    #[inline(always)]
    fn leading_digits(&mut self, y: u32) {
        if y < 10 {
            return self.put(&[b'0' + y as u8]);
        }
        if y < 100 {
            let pair = 2 * y as usize;
            return self.put(&DECIMAL_PAIRS[pair..pair + 2]);
        }
        let digits = if y < 10_000 {
            // Four digits in the high lane: the low four bytes are leading zeros.
            digits_of_lanes(u64::from(y) << 32)
        } else {
            eight_digits(y)
        };
        // The leading zeros are the low bytes that are 0 (`y` ≥ 1: not all of them).
        let zero_bits = digits.trailing_zeros() & !7;
        let keep = 8 - (zero_bits / 8) as usize;
        self.put_padded(&(ascii(digits) >> zero_bits).to_le_bytes(), keep);
    }

    /// `v` in lower-case hex, no prefix, no leading zeros (`0` for zero).
    #[inline(always)]
    fn hex(&mut self, v: u32) {
        // Significant bits rounded up to whole digits (`| 1`: zero has one digit).
        let len = (35 - (v | 1).leading_zeros()) / 4;
        // The leading zeros are the low 8 - len bytes.
        let digits = eight_hex_digits(v) >> (8 * (8 - len));
        self.put_padded(&digits.to_le_bytes(), len as usize);
    }

    /// A name's text between the quotes, escaped as JSON needs (names rarely need it).
    fn name(&mut self, s: &str) {
        if !s.bytes().any(needs_escape) {
            return self.put(s.as_bytes());
        }
        // Bytes of multi-byte characters are copied as they are (never below 0x80).
        for &b in s.as_bytes() {
            match b {
                b'"' => self.put(b"\\\""),
                b'\\' => self.put(b"\\\\"),
                0..=0x1f => self.put(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX_DIGITS[usize::from(b >> 4)],
                    HEX_DIGITS[usize::from(b & 15)],
                ]),
                _ => self.put(&[b]),
            }
        }
    }
}

fn needs_escape(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The eight decimal digits of `y` (< 10⁸, leading zeros included) as byte values 0–9, the
/// first digit in the lowest byte: split into two four-digit lanes, then
/// [`digits_of_lanes`].
#[inline(always)]
fn eight_digits(y: u32) -> u64 {
    debug_assert!(y < 100_000_000);
    // The high four digits in the low lane: they come first.
    digits_of_lanes(u64::from(y / 10_000) | (u64::from(y % 10_000) << 32))
}

/// Two numbers below 10⁴, one in each 32-bit lane, → their eight digits (byte values 0–9,
/// each lane's first digit in its lowest byte). SWAR: every step splits all lanes in two at
/// once, 32-bit lanes of four digits → 16-bit lanes of two → bytes of one, dividing each by
/// 100 (then 10) with a multiply and a shift, exact in the range a lane holds (10486/2²⁰
/// for a < 10⁴, 103/2¹⁰ for b < 100); no lane's product reaches the bits kept of the next.
#[inline(always)]
fn digits_of_lanes(x: u64) -> u64 {
    debug_assert!(x & 0xffff_ffff < 10_000 && x >> 32 < 10_000);
    let hundreds = ((x * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let x = hundreds | ((x - hundreds * 100) << 16);
    let tens = ((x * 103) >> 10) & 0x000f_000f_000f_000f;
    tens | ((x - tens * 10) << 8)
}

/// Digit values → ASCII digits, in every byte.
#[inline(always)]
fn ascii(digits: u64) -> u64 {
    digits | 0x3030_3030_3030_3030
}

/// "00" "01" … "99".
const DECIMAL_PAIRS: [u8; 200] = {
    let mut table = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        table[2 * i] = b'0' + (i / 10) as u8;
        table[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    table
};

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// The eight hex digits of `h` (leading zeros included) in ASCII, the first digit in the
/// lowest byte. SWAR, as [`digits_of_lanes`]: the nibbles are spread one per byte (halves,
/// then quarters, then nibbles, each step with a shift and a mask), put first digit first,
/// and turned to ASCII in all bytes at once.
#[inline(always)]
fn eight_hex_digits(h: u32) -> u64 {
    let x = u64::from(h);
    let x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    let x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    // Nibble i (from the lowest) in byte i…
    let x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    // …and the highest in the lowest byte.
    let x = x.swap_bytes();
    // n + 6 carries into bit 4 for n ≥ 10, which then gets 'a' - '0' - 10 = 39 more.
    let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    x + 0x3030_3030_3030_3030 + letters * 39
}

/// The longest `,"tid":…,"dev":…,"api":"…","ptr":"0x…` kept in the cache: 62 bytes with the
/// widest numbers, so API names of up to 34 bytes (the longest that cuquota hooks has 28).
const SEGMENT_MAX: usize = 96;

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
                len: 0,
                bytes: [0; SEGMENT_MAX],
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
    len: u8,
    bytes: [u8; SEGMENT_MAX],
}

impl Segment {
    /// Keeps `written` for `key`, if it fits (else the slot is left as it was).
    fn fill(&mut self, key: SegmentKey, written: &[u8]) {
        if let Some(to) = self.bytes.get_mut(..written.len()) {
            to.copy_from_slice(written);
            self.len = written.len() as u8;
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

/// Running totals per device for the summary line, and each device's live allocations
/// (pointer → bytes) so that what is still held at exit can be told.
#[derive(Default)]
pub struct Tally {
    /// Sorted by device.
    devices: Vec<DeviceTally>,
    /// Index in `devices` of the last device looked up: most events are on the same one.
    last: usize,
    pub events: u64,
}

struct DeviceTally {
    summary: SummaryDevice,
    live: LiveMap,
}

impl Tally {
    /// Starts with a row for every device of the header, so that unused devices show too.
    pub fn new(quotas: impl IntoIterator<Item = (u32, Option<u64>)>) -> Tally {
        let mut tally = Tally::default();
        for (dev, quota) in quotas {
            tally.device(dev).summary.quota = quota;
        }
        tally
    }

    #[inline]
    fn device(&mut self, dev: u32) -> &mut DeviceTally {
        if self
            .devices
            .get(self.last)
            .is_none_or(|d| d.summary.dev != dev)
        {
            self.last = self.find_device(dev);
        }
        &mut self.devices[self.last]
    }

    /// The index of `dev`'s row, added if new.
    #[cold]
    fn find_device(&mut self, dev: u32) -> usize {
        match self.devices.binary_search_by_key(&dev, |d| d.summary.dev) {
            Ok(i) => i,
            Err(i) => {
                let summary = SummaryDevice {
                    dev,
                    ..SummaryDevice::default()
                };
                let live = LiveMap::default();
                self.devices.insert(i, DeviceTally { summary, live });
                i
            }
        }
    }

    #[inline]
    pub fn add(&mut self, s: &Stamped) {
        let ev = &s.ev;
        if let EventKind::Context { ptrs } = &ev.kind {
            // Freed with their context, on whichever device each was charged (a pool's
            // may be on another one).
            // The line's in_use is of the context's device; another one's drops by what
            // was freed there.
            let own = ev.device;
            for d in &mut self.devices {
                for ptr in ptrs.iter() {
                    if let Some(old) = d.live.remove(ptr) {
                        d.summary.frees += 1;
                        d.summary.live = d.summary.live.wrapping_sub(1);
                        d.summary.live_bytes = d.summary.live_bytes.wrapping_sub(old);
                        if d.summary.dev != own {
                            d.summary.in_use = d.summary.in_use.saturating_sub(old);
                        }
                    }
                }
            }
        }
        self.events += 1;
        let ok = ev.result == 0;
        let DeviceTally { summary: d, live } = self.device(ev.device);
        // The live totals wrap rather than panic: only absurd sizes (a test's u64::MAX)
        // could overflow them, and the summary is garbage then either way.
        match ev.kind {
            EventKind::Alloc if ok => {
                d.allocs += 1;
                d.alloc_bytes = d.alloc_bytes.saturating_add(ev.bytes);
                match live.insert(ev.ptr, ev.bytes) {
                    // A pointer reused without a free we saw (e.g. a dropped event).
                    Some(old) => d.live_bytes = d.live_bytes.wrapping_sub(old),
                    None => d.live = d.live.wrapping_add(1),
                }
                d.live_bytes = d.live_bytes.wrapping_add(ev.bytes);
            }
            EventKind::Free if ok => {
                d.frees += 1;
                if let Some(old) = live.remove(&ev.ptr) {
                    d.live = d.live.wrapping_sub(1);
                    d.live_bytes = d.live_bytes.wrapping_sub(old);
                }
            }
            EventKind::Refused { .. } | EventKind::Observed => d.refusals += 1,
            EventKind::Footprint { part } => {
                let (now, peak) = match part {
                    Part::Context => (&mut d.context, &mut d.context_peak),
                    Part::PoolCache => (&mut d.pool_cache, &mut d.pool_cache_peak),
                    Part::Graph => (&mut d.graph, &mut d.graph_peak),
                };
                *now = ev.bytes;
                *peak = (*peak).max(ev.bytes);
            }
            EventKind::Trim { .. } => {
                d.trims += 1;
                d.trimmed_bytes = d.trimmed_bytes.saturating_add(ev.bytes);
            }
            _ => {}
        }
        d.in_use = ev.in_use;
        // A refusal's figure includes requests in flight: the peak is of what was held.
        let refused = matches!(ev.kind, EventKind::Refused { .. });
        if ev.in_use > d.peak && !refused {
            d.peak = ev.in_use;
            d.peak_t_ns = s.t_ns;
        }
    }

    pub fn summary(&self, t_ns: u64, end: &str, dropped: u64) -> Summary {
        Summary {
            kind: kind::SUMMARY.into(),
            t_ns,
            end: end.into(),
            events: self.events,
            dropped,
            devices: self.devices.iter().map(|d| d.summary.clone()).collect(),
        }
    }
}

/// One device's live allocations, pointer → bytes (the ledger's cheap hasher: pointers are
/// already spread, and SipHash would cost the writer more than the rest of a line).
type LiveMap = HashMap<u64, u64, BuildHasherDefault<KeyHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn lines_parse_back_with_every_field() {
        let text = line(&stamped(EventKind::Alloc, 0x7f12_3456_7800, 4096, 0, 8192));
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
            let mut s = stamped(EventKind::Alloc, ptr, bytes, 0, bytes);
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
        let mut s = stamped(EventKind::Alloc, 0x7f12_3456_7800, 1 << 32, 0, 6 << 30);
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
        part: Option<&'static str>,
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
            part: None,
        };
        match &ev.kind {
            EventKind::Alloc => r.kind = kind::ALLOC,
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
        }
        serde_json::to_string(&r).unwrap() + "\n"
    }

    /// Every number of digits in decimal and hex, with its neighbours: 0, 9, 10, 99, 100…,
    /// 0xf, 0x10…, both sides of 2³² and 10⁸ and 10¹⁶ (where the formatting changes path),
    /// u64::MAX, typical pointers.
    fn edge_numbers() -> Vec<u64> {
        let mut v = vec![
            0,
            1,
            u64::MAX,
            u64::MAX - 1,
            0x7f12_3456_7800,
            0x7fff_ffff_ffff,
        ];
        for base in [10u64, 16] {
            let mut p = 1u64;
            while let Some(next) = p.checked_mul(base) {
                p = next;
                v.extend([p - 1, p, p + 1]);
            }
        }
        v.extend([u64::from(u32::MAX), 1 << 32, 123_456_789_012_345_678]);
        v
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
                EventKind::Alloc,
                EventKind::Free,
                EventKind::Refused { by_driver: true },
                EventKind::Refused { by_driver: false },
                EventKind::Observed,
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
                0 => EventKind::Alloc,
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

    fn formatted(write: impl FnOnce(&mut Cursor)) -> String {
        let mut out = b"before ".to_vec();
        // SAFETY: every use below writes at most 20 digits.
        let mut w = unsafe { Cursor::new(&mut out, 20) };
        write(&mut w);
        w.finish();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn numbers_in_decimal_and_hex() {
        let mut numbers = edge_numbers();
        // And a spread of every magnitude.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            numbers.push(x >> (x % 64));
        }
        for v in numbers {
            assert_eq!(formatted(|w| w.decimal(v)), format!("before {v}"));
            let v32 = v as u32 ^ (v >> 32) as u32;
            assert_eq!(formatted(|w| w.hex(v32)), format!("before {v32:x}"));
        }
        for k in 0..8 {
            for v in [
                (1u32 << (4 * k)) - 1,
                1 << (4 * k),
                (1 << (4 * k)) + 1,
                u32::MAX,
            ] {
                assert_eq!(formatted(|w| w.hex(v)), format!("before {v:x}"));
            }
        }
        for y in (0..10_000).chain(99_990_000..100_000_000) {
            let digits = eight_digits(y).to_le_bytes().map(|d| b'0' + d);
            assert_eq!(digits, *format!("{y:08}").as_bytes());
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
                            0 => EventKind::Alloc,
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

    #[test]
    fn tally_counts_peaks_and_live_allocations() {
        let mut t = Tally::new([(0, Some(100)), (1, None)]);
        let mut at = |kind, ptr, bytes, result, in_use, t_ns| {
            let mut s = stamped(kind, ptr, bytes, result, in_use);
            s.t_ns = t_ns;
            t.add(&s);
        };
        at(EventKind::Alloc, 0xa, 10, 0, 10, 1);
        at(EventKind::Alloc, 0xb, 20, 0, 30, 2);
        at(EventKind::Refused { by_driver: false }, 0, 80, 2, 30, 3);
        at(EventKind::Free, 0xa, 10, 0, 20, 4);
        at(EventKind::Free, 0xdead, 5, 0, 20, 5); // never seen: counted, no live change
        at(EventKind::Alloc, 0xc, 7, 0, 27, 6);
        let s = t.summary(99, "exit", 4);
        assert_eq!(
            (s.events, s.dropped, s.t_ns, s.end.as_str()),
            (6, 4, 99, "exit")
        );
        assert_eq!(s.devices.len(), 2);
        let d0 = &s.devices[0];
        assert_eq!((d0.dev, d0.quota), (0, Some(100)));
        assert_eq!(d0.allocs + d0.frees + d0.refusals, 0);
        let d1 = &s.devices[1];
        assert_eq!((d1.peak, d1.peak_t_ns, d1.in_use), (30, 2, 27));
        assert_eq!((d1.allocs, d1.frees, d1.refusals), (3, 2, 1));
        assert_eq!((d1.alloc_bytes, d1.live, d1.live_bytes), (37, 2, 27));
    }

    /// Issue 10 item 7: a refusal's figure counts requests in flight; the peak does not.
    /// A context event frees what its context held.
    #[test]
    fn the_tally_peak_is_of_held_bytes_and_contexts_free() {
        let mut t = Tally::new([(1, None), (2, None)]);
        // GPU 2's pool allocation, owned by GPU 1's context
        let mut pooled = stamped(EventKind::Alloc, 0xc, 64, 0, 64);
        pooled.ev.device = 2;
        t.add(&pooled);
        let mut at =
            |kind, ptr, bytes, result, in_use| t.add(&stamped(kind, ptr, bytes, result, in_use));
        at(EventKind::Alloc, 0xa, 4096, 0, 4096);
        at(
            EventKind::Refused { by_driver: true },
            0,
            2 << 30,
            2,
            (2 << 30) + 4096,
        );
        at(EventKind::Alloc, 0xb, 10, 0, 4106);
        let ptrs = vec![0xa, 0xb, 0xc].into_boxed_slice();
        at(EventKind::Context { ptrs }, 0, 4170, 0, 0);
        let s = t.summary(9, "exit", 0);
        let (d1, d2) = (&s.devices[0], &s.devices[1]);
        assert_eq!((d1.peak, d1.in_use), (4106, 0));
        assert_eq!((d1.live, d1.live_bytes, d1.frees), (0, 0, 2));
        assert_eq!(
            (d2.in_use, d2.live, d2.frees),
            (0, 0, 1),
            "freed on its own device"
        );
    }

    #[test]
    fn tally_handles_reused_and_null_pointers() {
        let mut t = Tally::new([]);
        let mut at = |kind, ptr, bytes| {
            t.add(&stamped(kind, ptr, bytes, 0, 0));
            let d = t.summary(0, "exit", 0).devices[0].clone();
            (d.allocs, d.frees, d.live, d.live_bytes)
        };
        assert_eq!(at(EventKind::Alloc, 0xa, 10), (1, 0, 1, 10));
        // Reused: the free was not seen.
        assert_eq!(at(EventKind::Alloc, 0xa, 30), (2, 0, 1, 30));
        // A null pointer (or handle 0) is an entry too.
        assert_eq!(at(EventKind::Alloc, 0, 5), (3, 0, 2, 35));
        assert_eq!(at(EventKind::Free, 0xb, 1), (3, 1, 2, 35));
        assert_eq!(at(EventKind::Free, 0, 5), (3, 2, 1, 30));
        assert_eq!(at(EventKind::Free, 0xa, 30), (3, 3, 0, 0));
        assert_eq!(at(EventKind::Free, 0xa, 30), (3, 4, 0, 0));
    }
}
