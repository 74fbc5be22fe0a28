//! Event → JSON line, and the running totals behind the summary line. Runs on the writer
//! thread only, so it may allocate freely.

use super::schema::{kind, Summary, SummaryDevice};
use super::{Event, EventKind};
use crate::cuda_abi::CuResult;
use std::collections::{BTreeMap, HashMap};

/// An event with the stamps `record` adds.
pub struct Stamped {
    pub t_ns: u64,
    pub tid: u32,
    pub ev: Event,
}

/// Appends one line (schema 1) for `s` to `out`. Formatted by hand, without `fmt`: it is
/// the bulk of the file, and the writer must keep up with bursts of events.
pub fn event_line(out: &mut Vec<u8>, s: &Stamped) {
    let ev = &s.ev;
    let kind = match ev.kind {
        EventKind::Alloc => kind::ALLOC,
        EventKind::Free => kind::FREE,
        EventKind::Refused { .. } => kind::REFUSED,
        EventKind::MemInfo { .. } => kind::MEMINFO,
        EventKind::Backoff { .. } => kind::BACKOFF,
    };
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"t_ns\":");
    push_u64(out, s.t_ns);
    out.extend_from_slice(b",\"tid\":");
    push_u64(out, u64::from(s.tid));
    out.extend_from_slice(b",\"dev\":");
    if ev.device < 0 {
        out.push(b'-');
    }
    push_u64(out, u64::from(ev.device.unsigned_abs()));
    out.extend_from_slice(b",\"api\":");
    json_string(out, ev.api);
    out.extend_from_slice(b",\"ptr\":\"0x");
    push_hex(out, ev.ptr);
    out.extend_from_slice(b"\",\"bytes\":");
    push_u64(out, ev.bytes);
    out.extend_from_slice(b",\"result\":");
    match CuResult(ev.result).name() {
        Some(name) => json_string(out, name),
        None => {
            out.extend_from_slice(b"\"CUresult ");
            push_u64(out, u64::from(ev.result));
            out.push(b'"');
        }
    }
    out.extend_from_slice(b",\"in_use\":");
    push_u64(out, ev.in_use);
    match &ev.kind {
        EventKind::Refused { by_driver } => {
            let reason: &[u8] = if *by_driver { b"driver" } else { b"quota" };
            out.extend_from_slice(b",\"reason\":\"");
            out.extend_from_slice(reason);
            out.push(b'"');
        }
        EventKind::MemInfo {
            told_free,
            told_total,
            real_free,
            real_total,
        } => {
            for (key, value) in [
                (&b",\"told_free\":"[..], told_free),
                (b",\"told_total\":", told_total),
                (b",\"real_free\":", real_free),
                (b",\"real_total\":", real_total),
            ] {
                out.extend_from_slice(key);
                push_u64(out, *value);
            }
        }
        EventKind::Backoff { sizes } => {
            out.extend_from_slice(b",\"sizes\":[");
            for (i, size) in sizes.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_u64(out, *size);
            }
            out.push(b']');
        }
        EventKind::Alloc | EventKind::Free => {}
    }
    out.extend_from_slice(b"}\n");
}

/// `{"type":"dropped","t_ns":…,"count":…}`: events lost since the previous batch.
pub fn dropped_line(out: &mut Vec<u8>, t_ns: u64, count: u64) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind::DROPPED.as_bytes());
    out.extend_from_slice(b"\",\"t_ns\":");
    push_u64(out, t_ns);
    out.extend_from_slice(b",\"count\":");
    push_u64(out, count);
    out.extend_from_slice(b"}\n");
}

fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Lower-case hex digits, no prefix, no leading zeros (`0` for zero).
fn push_hex(out: &mut Vec<u8>, mut v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = DIGITS[(v & 15) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(b"\\u00");
                out.push(b"0123456789abcdef"[(c as usize) >> 4]);
                out.push(b"0123456789abcdef"[(c as usize) & 15]);
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// Running totals per device for the summary line, and the live allocations
/// (device, pointer) → bytes so that what is still held at exit can be told.
#[derive(Default)]
pub struct Tally {
    devices: BTreeMap<i32, SummaryDevice>,
    live: HashMap<(i32, u64), u64>,
    pub events: u64,
}

impl Tally {
    /// Starts with a row for every device of the header, so that unused devices show too.
    pub fn new(quotas: impl IntoIterator<Item = (i32, Option<u64>)>) -> Tally {
        let mut tally = Tally::default();
        for (dev, quota) in quotas {
            tally.device(dev).quota = quota;
        }
        tally
    }

    fn device(&mut self, dev: i32) -> &mut SummaryDevice {
        self.devices.entry(dev).or_insert_with(|| SummaryDevice {
            dev,
            ..SummaryDevice::default()
        })
    }

    pub fn add(&mut self, s: &Stamped) {
        let ev = &s.ev;
        self.events += 1;
        let key = (ev.device, ev.ptr);
        let ok = ev.result == 0;
        let (mut live_delta, mut bytes_delta) = (0i64, 0i128);
        match ev.kind {
            EventKind::Alloc if ok => {
                if let Some(old) = self.live.insert(key, ev.bytes) {
                    // A pointer reused without a free we saw (e.g. a dropped event).
                    live_delta -= 1;
                    bytes_delta -= i128::from(old);
                }
                live_delta += 1;
                bytes_delta += i128::from(ev.bytes);
            }
            EventKind::Free if ok => {
                if let Some(old) = self.live.remove(&key) {
                    live_delta -= 1;
                    bytes_delta -= i128::from(old);
                }
            }
            _ => {}
        }
        let d = self.device(ev.device);
        match ev.kind {
            EventKind::Alloc if ok => {
                d.allocs += 1;
                d.alloc_bytes = d.alloc_bytes.saturating_add(ev.bytes);
            }
            EventKind::Free if ok => d.frees += 1,
            EventKind::Refused { .. } => d.refusals += 1,
            _ => {}
        }
        d.live = (i128::from(d.live) + i128::from(live_delta)) as u64;
        d.live_bytes = (i128::from(d.live_bytes) + bytes_delta) as u64;
        d.in_use = ev.in_use;
        if ev.in_use > d.peak {
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
            devices: self.devices.values().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema::{parse_ptr, EventLine};
    use super::*;

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
        event_line(&mut out, s);
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

        let mut out = Vec::new();
        dropped_line(&mut out, 7, 3);
        let ev: EventLine = serde_json::from_slice(&out).unwrap();
        assert_eq!((ev.kind.as_ref(), ev.t_ns, ev.count), ("dropped", 7, 3));
    }

    #[test]
    fn numbers_at_the_edges() {
        for (t, tid, dev, ptr, bytes) in [
            (0, 0, 0, 0, 0),
            (u64::MAX, u32::MAX, -1, u64::MAX, u64::MAX),
            (10, 7, i32::MIN, 0xabc, 1_000_000),
            (9, 1, i32::MAX, 0x7f00_0000_0000, 999),
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
        s.ev.api = "we\"ird\\\n";
        let ev: EventLine = serde_json::from_str(line(&s)).unwrap();
        assert_eq!(ev.api, "we\"ird\\\n");
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
}
