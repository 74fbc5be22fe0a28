//! The running totals behind the summary line: per device, counts, the peak, each part of
//! the footprint, and the live allocations (pointer → bytes) so that what is still held at
//! exit can be told. Runs on the writer thread, one `add` per event.

use super::{EventKind, Stamped};
use crate::quota::Part;
use cuquota_format::hash::KeyHasher;
use cuquota_format::schema::{kind, Summary, SummaryDevice};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Running totals per device for the summary line, and each device's live allocations
/// (pointer → bytes) so that what is still held at exit can be told.
#[derive(Default)]
pub struct Tally {
    /// Sorted by device.
    devices: Vec<DeviceTally>,
    /// Index in `devices` of the last device looked up: most events are on the same one.
    last: usize,
    pub events: u64,
    /// `unknown_variant` events (no device's).
    unknown_variants: u64,
}

struct DeviceTally {
    /// Every figure of the device's summary but the parts.
    summary: SummaryDevice,
    /// Each [`Part`]'s bytes at its last footprint event and the highest, indexed by part.
    parts: [u64; Part::ALL.len()],
    part_peaks: [u64; Part::ALL.len()],
    live: LiveMap,
}

impl DeviceTally {
    fn summary(&self) -> SummaryDevice {
        let mut d = self.summary.clone();
        for part in Part::ALL {
            let (now, peak) = d.part_mut(part);
            *now = self.parts[part as usize];
            *peak = self.part_peaks[part as usize];
        }
        d
    }
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
                let device = DeviceTally {
                    summary,
                    parts: [0; Part::ALL.len()],
                    part_peaks: [0; Part::ALL.len()],
                    live: LiveMap::default(),
                };
                self.devices.insert(i, device);
                i
            }
        }
    }

    #[inline]
    pub fn add(&mut self, s: &Stamped) {
        let ev = &s.ev;
        if let EventKind::UnknownVariant { .. } = ev.kind {
            self.events += 1;
            self.unknown_variants += 1;
            return;
        }
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
        let DeviceTally {
            summary: d,
            parts,
            part_peaks,
            live,
        } = self.device(ev.device);
        // The live totals wrap rather than panic: only absurd sizes (a test's u64::MAX)
        // could overflow them, and the summary is garbage then either way.
        match ev.kind {
            EventKind::Alloc { .. } if ok => {
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
            EventKind::Refused { .. }
            | EventKind::Observed
            | EventKind::Unreconciled { .. }
            | EventKind::GroupRefused { .. } => d.refusals += 1,
            EventKind::Footprint { part } => {
                let i = part as usize;
                parts[i] = ev.bytes;
                part_peaks[i] = part_peaks[i].max(ev.bytes);
            }
            EventKind::Trim { .. } => {
                d.trims += 1;
                d.trimmed_bytes = d.trimmed_bytes.saturating_add(ev.bytes);
            }
            // The summary's quota is the one in force at the end.
            EventKind::Limit { limit, .. } => {
                d.quota = (limit < crate::quota::UNLIMITED - 1).then_some(limit)
            }
            _ => {}
        }
        d.in_use = ev.in_use;
        // A refusal's figure includes requests in flight: the peak is of what was held.
        let refused = matches!(
            ev.kind,
            EventKind::Refused { .. }
                | EventKind::Unreconciled { .. }
                | EventKind::GroupRefused { .. }
        );
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
            devices: self.devices.iter().map(DeviceTally::summary).collect(),
            unknown_variants: self.unknown_variants,
        }
    }
}

/// One device's live allocations, pointer → bytes (the ledger's cheap hasher: pointers are
/// already spread, and SipHash would cost the writer more than the rest of a line).
type LiveMap = HashMap<u64, u64, BuildHasherDefault<KeyHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Event;

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

    #[test]
    fn tally_counts_peaks_and_live_allocations() {
        let mut t = Tally::new([(0, Some(100)), (1, None)]);
        let mut at = |kind, ptr, bytes, result, in_use, t_ns| {
            let mut s = stamped(kind, ptr, bytes, result, in_use);
            s.t_ns = t_ns;
            t.add(&s);
        };
        at(EventKind::ALLOC, 0xa, 10, 0, 10, 1);
        at(EventKind::ALLOC, 0xb, 20, 0, 30, 2);
        at(EventKind::Refused { by_driver: false }, 0, 80, 2, 30, 3);
        at(EventKind::Free, 0xa, 10, 0, 20, 4);
        at(EventKind::Free, 0xdead, 5, 0, 20, 5); // never seen: counted, no live change
        at(EventKind::ALLOC, 0xc, 7, 0, 27, 6);
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

    /// A refusal's figure counts requests in flight; the peak (of what was held) does not.
    /// A context event frees what its context held.
    #[test]
    fn the_tally_peak_is_of_held_bytes_and_contexts_free() {
        let mut t = Tally::new([(1, None), (2, None)]);
        // GPU 2's pool allocation, owned by GPU 1's context
        let mut pooled = stamped(EventKind::ALLOC, 0xc, 64, 0, 64);
        pooled.ev.device = 2;
        t.add(&pooled);
        let mut at =
            |kind, ptr, bytes, result, in_use| t.add(&stamped(kind, ptr, bytes, result, in_use));
        at(EventKind::ALLOC, 0xa, 4096, 0, 4096);
        at(
            EventKind::Refused { by_driver: true },
            0,
            2 << 30,
            2,
            (2 << 30) + 4096,
        );
        at(EventKind::ALLOC, 0xb, 10, 0, 4106);
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
        assert_eq!(at(EventKind::ALLOC, 0xa, 10), (1, 0, 1, 10));
        // Reused: the free was not seen.
        assert_eq!(at(EventKind::ALLOC, 0xa, 30), (2, 0, 1, 30));
        // A null pointer (or handle 0) is an entry too.
        assert_eq!(at(EventKind::ALLOC, 0, 5), (3, 0, 2, 35));
        assert_eq!(at(EventKind::Free, 0xb, 1), (3, 1, 2, 35));
        assert_eq!(at(EventKind::Free, 0, 5), (3, 2, 1, 30));
        assert_eq!(at(EventKind::Free, 0xa, 30), (3, 3, 0, 0));
        assert_eq!(at(EventKind::Free, 0xa, 30), (3, 4, 0, 0));
    }

    /// Each part's figures go to the summary fields named after it, `{name}` and
    /// `{name}_peak`, in the schema's order.
    #[test]
    fn parts_are_summed_under_their_names() {
        let mut t = Tally::new([(1, None)]);
        for (i, part) in Part::ALL.into_iter().enumerate() {
            let i = i as u64;
            for bytes in [100 + i, 1000 + i, 10 + i] {
                t.add(&stamped(EventKind::Footprint { part }, 0, bytes, 0, 0));
            }
        }
        let s = t.summary(9, "exit", 0);
        let line = serde_json::to_value(&s.devices[0]).unwrap();
        for (i, part) in Part::ALL.into_iter().enumerate() {
            let i = i as u64;
            assert_eq!(line[part.name()], 10 + i, "{}", part.name());
            assert_eq!(line[format!("{}_peak", part.name())], 1000 + i);
        }
        let text = serde_json::to_string(&s.devices[0]).unwrap();
        let at = |key: &str| text.find(&format!("\"{key}\":")).unwrap();
        let order = [
            "context",
            "pool_cache",
            "graph",
            "context_peak",
            "pool_cache_peak",
            "graph_peak",
            "trims",
        ];
        assert!(order.windows(2).all(|w| at(w[0]) < at(w[1])), "{text}");
    }
}
