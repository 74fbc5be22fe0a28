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
