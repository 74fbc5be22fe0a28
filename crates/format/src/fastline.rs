//! A fast path for event lines in the exact shape the writer emits: a flat object of known
//! keys with integer, plain-string (no escapes) or integer-array values, no whitespace.
//! It returns `None` for anything else (unknown or repeated keys, escapes, floats, `null`,
//! whitespace, header and summary lines …), and the caller then uses serde_json, so the
//! result never differs from serde's; serde_json alone reads about 1 M lines/s, this ~3×.

use crate::schema::EventLine;
use std::borrow::Cow;

pub fn parse(line: &[u8]) -> Option<EventLine<'_>> {
    let mut c = Cursor { s: line, i: 0 };
    c.byte(b'{')?;
    let mut ev = EventLine::default();
    let mut seen = 0u32;
    loop {
        let key = c.raw_string()?;
        c.byte(b':')?;
        let bit = match key {
            b"type" => {
                ev.kind = Cow::Borrowed(c.string()?);
                0
            }
            b"t_ns" => {
                ev.t_ns = c.u64()?;
                1
            }
            b"tid" => {
                ev.tid = u32::try_from(c.u64()?).ok()?;
                2
            }
            b"dev" => {
                ev.dev = c.u32()?;
                3
            }
            b"api" => {
                ev.api = Cow::Borrowed(c.string()?);
                4
            }
            b"ptr" => {
                ev.ptr = Cow::Borrowed(c.string()?);
                5
            }
            b"bytes" => {
                ev.bytes = c.u64()?;
                6
            }
            b"result" => {
                ev.result = Cow::Borrowed(c.string()?);
                7
            }
            b"in_use" => {
                ev.in_use = c.u64()?;
                8
            }
            b"reason" => {
                ev.reason = Some(Cow::Borrowed(c.string()?));
                9
            }
            b"told_free" => {
                ev.told_free = c.u64()?;
                10
            }
            b"told_total" => {
                ev.told_total = c.u64()?;
                11
            }
            b"real_free" => {
                ev.real_free = c.u64()?;
                12
            }
            b"real_total" => {
                ev.real_total = c.u64()?;
                13
            }
            b"sizes" => {
                ev.sizes = Some(c.u64_array()?);
                14
            }
            b"count" => {
                ev.count = c.u64()?;
                15
            }
            b"ptrs" => {
                ev.ptrs = Some(c.string_array()?);
                16
            }
            b"observed" => {
                ev.observed = c.literal_true()?;
                17
            }
            b"part" => {
                ev.part = Some(Cow::Borrowed(c.string()?));
                18
            }
            b"stack" => {
                ev.stack = c.u64()?;
                19
            }
            b"unreconciled" => {
                ev.unreconciled = Some(Cow::Borrowed(c.string()?));
                20
            }
            _ => return None,
        };
        if seen & (1 << bit) != 0 {
            return None;
        }
        seen |= 1 << bit;
        match c.next()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    // Complete, and with its `type`.
    (c.i == line.len() && seen & 1 != 0).then_some(ev)
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<u8> {
        let b = *self.s.get(self.i)?;
        self.i += 1;
        Some(b)
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// A string's bytes, when it has no escape or control character.
    fn raw_string(&mut self) -> Option<&'a [u8]> {
        self.byte(b'"')?;
        let rest = &self.s[self.i..];
        let len = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        self.i += len + 1;
        Some(&rest[..len])
    }

    fn string(&mut self) -> Option<&'a str> {
        let raw = self.raw_string()?;
        if raw.is_ascii() {
            // SAFETY: ASCII is valid UTF-8 (checked this way: most strings are short ASCII
            // names, for which from_utf8's setup costs more than the check).
            Some(unsafe { std::str::from_utf8_unchecked(raw) })
        } else {
            std::str::from_utf8(raw).ok()
        }
    }

    /// A JSON integer without sign: no leading zero, no fraction or exponent (the next byte
    /// is checked by the caller: anything but `,` `}` `]` makes the line fall back).
    fn u64(&mut self) -> Option<u64> {
        let start = self.i;
        let mut value: u64 = 0;
        while let Some(&b) = self.s.get(self.i) {
            if !b.is_ascii_digit() {
                break;
            }
            value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            self.i += 1;
        }
        let digits = self.i - start;
        if digits == 0 || (digits > 1 && self.s[start] == b'0') {
            return None;
        }
        Some(value)
    }

    /// `true` (the writer never writes `"observed":false`; anything else falls back).
    fn literal_true(&mut self) -> Option<bool> {
        let rest = self.s.get(self.i..)?;
        rest.starts_with(b"true").then(|| self.i += 4)?;
        Some(true)
    }

    /// An unsigned 32-bit number; a sign is left to serde (which reads `-0` as 0).
    fn u32(&mut self) -> Option<u32> {
        if self.s.get(self.i) == Some(&b'-') {
            return None;
        }
        u32::try_from(self.u64()?).ok()
    }

    fn string_array(&mut self) -> Option<Vec<Cow<'a, str>>> {
        self.byte(b'[')?;
        let mut out = Vec::new();
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            return Some(out);
        }
        loop {
            out.push(Cow::Borrowed(self.string()?));
            match self.next()? {
                b',' => continue,
                b']' => return Some(out),
                _ => return None,
            }
        }
    }

    fn u64_array(&mut self) -> Option<Vec<u64>> {
        self.byte(b'[')?;
        let mut out = Vec::new();
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            return Some(out);
        }
        loop {
            out.push(self.u64()?);
            match self.next()? {
                b',' => continue,
                b']' => return Some(out),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path must agree with serde_json wherever it answers.
    fn agrees(line: &str) -> bool {
        let fast = parse(line.as_bytes());
        let slow: Option<EventLine> = serde_json::from_str(line).ok();
        match (&fast, &slow) {
            (Some(f), Some(s)) => {
                assert_eq!(format!("{f:?}"), format!("{s:?}"), "{line}");
                true
            }
            (Some(_), None) => panic!("fast path accepted what serde rejects: {line}"),
            (None, _) => false,
        }
    }

    #[test]
    fn canonical_lines_take_the_fast_path() {
        for line in [
            r#"{"type":"alloc","t_ns":123,"tid":9,"dev":1,"api":"cuMemAlloc_v2","ptr":"0x7f12","bytes":4096,"result":"CUDA_SUCCESS","in_use":8192}"#,
            r#"{"type":"refused","t_ns":0,"tid":9,"dev":0,"api":"a","ptr":"0x0","bytes":1,"result":"CUDA_ERROR_OUT_OF_MEMORY","in_use":0,"reason":"quota"}"#,
            r#"{"type":"refused","t_ns":0,"reason":"quota","observed":true}"#,
            r#"{"type":"refused","t_ns":0,"reason":"quota","unreconciled":"NVML cannot be used"}"#,
            r#"{"type":"meminfo","t_ns":1,"told_free":1,"told_total":2,"real_free":3,"real_total":18446744073709551615}"#,
            r#"{"type":"backoff","dev":3,"sizes":[40,36,32]}"#,
            r#"{"type":"backoff","sizes":[]}"#,
            r#"{"type":"dropped","t_ns":7,"count":3}"#,
            r#"{"type":"footprint","t_ns":8,"tid":9,"dev":0,"api":"cuDevicePrimaryCtxRetain","part":"context","bytes":536870912,"in_use":536870912}"#,
            r#"{"type":"trim","t_ns":9,"tid":9,"dev":1,"api":"cuMemAlloc_v2","part":"pool_cache","bytes":2097152,"in_use":4194304}"#,
            r#"{"type":"ålloc"}"#,
        ] {
            assert!(agrees(line), "{line}");
        }
    }

    #[test]
    fn anything_unusual_falls_back() {
        for line in [
            r#"{"type":"header","schema":1}"#,
            r#"{"type":"alloc","t_ns":1.5}"#,
            r#"{"type":"alloc","t_ns":1e3}"#,
            r#"{"type":"alloc","t_ns":01}"#,
            r#"{"type":"alloc","t_ns":-1}"#,
            r#"{"type":"alloc","t_ns":18446744073709551616}"#,
            r#"{"type":"alloc","dev":-1}"#,
            r#"{"type":"alloc","dev":-0}"#,
            r#"{"type":"alloc","dev":4294967296}"#,
            r#"{"type":"alloc","api":"a\"b"}"#,
            r#"{"type":"alloc","reason":null}"#,
            r#"{"type":"refused","observed":false}"#,
            r#"{"type":"refused","observed":tru}"#,
            r#"{"type":"footprint","part":null}"#,
            r#"{"type":"footprint","part":7}"#,
            r#"{"type":"footprint","part":"graph","part":"graph"}"#,
            r#"{"type":"alloc","t_ns":1,"t_ns":2}"#,
            r#"{"type": "alloc"}"#,
            r#"{"type":"alloc"} "#,
            r#"{"type":"alloc"}x"#,
            r#"{"t_ns":1}"#,
            r#"{"type":"alloc","#,
            r#"{"type":"backoff","sizes":[1,]}"#,
            "{}",
            "",
        ] {
            assert!(!agrees(line), "{line}");
        }
    }
}
