//! Writing a line's bytes and digits into a `Vec<u8>` through a raw cursor: all the `unsafe`
//! of the trace's encoding is here, behind a safe interface whose every write is checked
//! against the bound the line reserved (in release builds too).
//!
//! Numbers are formatted eight digits at a time with SWAR arithmetic ([`eight_digits`],
//! [`eight_hex_digits`]), without `core::fmt`; pieces that repeat from line to line are
//! copied whole from a [`Piece`].

use std::ptr;

/// 10⁸: numbers are written eight decimal digits at a time.
pub const E8: u64 = 100_000_000;

/// How far past the cursor a single write may reach beyond what it keeps: a fixed-size copy
/// (a cached piece of up to 96 bytes, eight digits) is cheaper than an exact one, and the
/// bytes past the cursor are overwritten by the next write or left beyond the vector's
/// length.
pub const OVERHANG: usize = 96;

/// Up to `N` bytes kept to be copied into lines: a cursor copies all `N` (one fixed-size
/// copy) and keeps the first `len`.
#[derive(Clone, Copy)]
pub struct Piece<const N: usize> {
    /// At most `N` (what [`Piece::set`] promises [`Cursor::put_piece`]).
    len: u8,
    bytes: [u8; N],
}

impl<const N: usize> Piece<N> {
    pub const EMPTY: Piece<N> = Piece {
        len: 0,
        bytes: [0; N],
    };

    /// Keeps `text`, if it fits (else returns false and is left as it was).
    pub fn set(&mut self, text: &[u8]) -> bool {
        const { assert!(N <= u8::MAX as usize) };
        match self.bytes.get_mut(..text.len()) {
            Some(to) => {
                to.copy_from_slice(text);
                self.len = text.len() as u8;
                true
            }
            None => false,
        }
    }
}

/// A position of a [`Cursor`] within its line, to take what was written since.
#[derive(Clone, Copy)]
pub struct Mark(usize);

/// Appends to a `Vec<u8>` through a raw pointer into capacity reserved up front for the
/// whole line. Each piece then costs a few moves (a constant-length `put` compiles to one or
/// two), where `extend_from_slice` would check the capacity, update the length and often call
/// `memcpy` for every piece. [`Cursor::new`]'s caller names a bound on how far the line
/// advances; every write checks it.
pub struct Cursor<'a> {
    out: &'a mut Vec<u8>,
    /// Where the next byte goes. Every byte from the old end of `out` up to here is written.
    at: *mut u8,
    /// How far `at` may go: `max` bytes after the old end of `out`. The capacity reserved
    /// extends `OVERHANG` bytes further.
    limit: *mut u8,
}

impl<'a> Cursor<'a> {
    /// Reserves room after `out`'s contents for `max` bytes plus a write's overhang. The
    /// writes that follow may advance the cursor by `max` bytes in all: one that would go
    /// further panics (a wrong bound stops the trace writer, on its own thread) rather than
    /// write past the reservation.
    pub fn new(out: &'a mut Vec<u8>, max: usize) -> Cursor<'a> {
        out.reserve(max + OVERHANG);
        // SAFETY: reserve made room for that many bytes after the length.
        let (at, limit) = unsafe {
            let at = out.as_mut_ptr().add(out.len());
            (at, at.add(max))
        };
        Cursor { out, at, limit }
    }

    /// Makes what was written part of the vector.
    pub fn finish(self) {
        // SAFETY: `at` only moved forwards from the old end of `out`, by checked writes
        // within `max` bytes (`check`), so within the capacity, and every byte up to it was
        // written (`put` writes what it keeps; `put_padded` writes `N` ≥ `keep` bytes).
        unsafe {
            let written = self.at.offset_from(self.line_start()) as usize;
            self.out.set_len(self.out.len() + written);
        }
    }

    /// Where the line began: the old end of `out` (its length changes only in `finish`).
    #[inline(always)]
    fn line_start(&self) -> *const u8 {
        // SAFETY: the length is within the allocation (one past its last byte at most).
        unsafe { self.out.as_ptr().add(self.out.len()) }
    }

    /// Writes `N` bytes at the cursor and advances it by `keep` of them. Private: every
    /// caller here passes `keep` ≤ `N` (the bytes kept must have been written).
    #[inline(always)]
    fn put_padded<const N: usize>(&mut self, bytes: &[u8; N], keep: usize) {
        const { assert!(N <= OVERHANG) };
        debug_assert!(keep <= N);
        self.check(keep);
        // SAFETY: the cursor stays within `max` bytes (`check`), and `N` bytes from anywhere
        // up to there fit in the OVERHANG beyond; `bytes` is a live array, not within the
        // spare capacity.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.at, N);
            self.at = self.at.add(keep);
        }
    }

    #[inline(always)]
    pub fn put(&mut self, bytes: &[u8]) {
        self.check(bytes.len());
        // SAFETY: within `max` bytes (`check`), so within the reserved capacity; `bytes` is
        // a live shared slice, so not within the spare capacity that the cursor writes.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), self.at, bytes.len());
            self.at = self.at.add(bytes.len());
        }
    }

    /// A piece's bytes (all `N` copied, `len` kept).
    #[inline(always)]
    pub fn put_piece<const N: usize>(&mut self, piece: &Piece<N>) {
        // `len` ≤ `N`: what `Piece::set` keeps.
        self.put_padded(&piece.bytes, usize::from(piece.len));
    }

    /// That advancing `n` bytes stays within the bound given to `new`. Checked in release
    /// builds too: a wrong bound must stop the trace writer (a panic on our own thread),
    /// never write past the buffer inside the host process.
    #[inline(always)]
    fn check(&self, n: usize) {
        assert!(
            n <= self.limit as usize - self.at as usize,
            "the line is longer than the bound its caller reserved"
        );
    }

    /// The cursor's position, for [`Cursor::written_since`].
    pub fn mark(&self) -> Mark {
        Mark(self.at as usize - self.line_start() as usize)
    }

    /// The bytes written since the cursor was at `from`.
    pub fn written_since(&self, from: Mark) -> &[u8] {
        let written = self.at as usize - self.line_start() as usize;
        // A mark of another cursor, further along, would reach outside this line.
        assert!(from.0 <= written, "a mark past the cursor");
        // SAFETY: the `written - from` bytes from `from` up to the cursor were written
        // (see `finish`) and lie within `out`'s allocation, which `self` borrows.
        unsafe { std::slice::from_raw_parts(self.line_start().add(from.0), written - from.0) }
    }

    /// `v` in decimal.
    #[inline(always)]
    pub fn decimal(&mut self, v: u64) {
        if v < E8 {
            return self.leading_digits(v as u32);
        }
        let (high, low) = (v / E8, (v % E8) as u32);
        if high < E8 {
            self.leading_digits(high as u32);
        } else {
            // At most 20 digits: 4, then 8, then 8.
            self.leading_digits((high / E8) as u32);
            self.padded_digits((high % E8) as u32);
        }
        self.padded_digits(low);
    }

    /// `y` (< 10⁸) in exactly eight decimal digits, leading zeros included.
    #[inline(always)]
    pub fn padded_digits(&mut self, y: u32) {
        self.put_padded(&ascii(eight_digits(y)).to_le_bytes(), 8);
    }

    /// `y` (< 10⁸) in decimal, without leading zeros. Small numbers (a device, a count) are
    /// common: they take a shorter path.
    #[inline(always)]
    pub fn leading_digits(&mut self, y: u32) {
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
    pub fn hex(&mut self, v: u32) {
        // Significant bits rounded up to whole digits (`| 1`: zero has one digit).
        let len = (35 - (v | 1).leading_zeros()) / 4;
        // The leading zeros are the low 8 - len bytes.
        let digits = eight_hex_digits(v) >> (8 * (8 - len));
        self.put_padded(&digits.to_le_bytes(), len as usize);
    }

    /// `h` in exactly eight lower-case hex digits, leading zeros included.
    #[inline(always)]
    pub fn padded_hex(&mut self, h: u32) {
        self.put_padded(&eight_hex_digits(h).to_le_bytes(), 8);
    }

    /// A name's text between the quotes, escaped as JSON needs (names rarely need it).
    pub fn name(&mut self, s: &str) {
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Every number of digits in decimal and hex, with its neighbours: 0, 9, 10, 99, 100…,
    /// 0xf, 0x10…, both sides of 2³² and 10⁸ and 10¹⁶ (where the formatting changes path),
    /// u64::MAX, typical pointers.
    pub fn edge_numbers() -> Vec<u64> {
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

    fn formatted(write: impl FnOnce(&mut Cursor)) -> String {
        let mut out = b"before ".to_vec();
        // Every use below writes at most 20 digits.
        let mut w = Cursor::new(&mut out, 20);
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
            assert_eq!(
                formatted(|w| w.padded_hex(v32)),
                format!("before {v32:08x}")
            );
            let y = (v % E8) as u32;
            assert_eq!(formatted(|w| w.padded_digits(y)), format!("before {y:08}"));
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
    fn pieces_and_marks() {
        let mut piece = Piece::<8>::EMPTY;
        assert!(piece.set(b"abc"));
        assert!(!piece.set(b"too long!"), "nine bytes in eight");
        let mut out = b"x".to_vec();
        let mut w = Cursor::new(&mut out, 40);
        w.put(b"[");
        let from = w.mark();
        w.put_piece(&piece);
        w.name("q\"\u{1}");
        assert_eq!(w.written_since(from), b"abcq\\\"\\u0001");
        w.put(b"]");
        w.finish();
        assert_eq!(out, b"x[abcq\\\"\\u0001]");
    }

    #[test]
    #[should_panic(expected = "longer than the bound")]
    fn a_write_past_the_bound_panics() {
        let mut out = Vec::new();
        let mut w = Cursor::new(&mut out, 4);
        w.put(b"1234");
        w.decimal(5);
    }
}
