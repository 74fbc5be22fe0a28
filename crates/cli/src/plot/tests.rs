#[test]
fn the_title_names_up_to_four_files_and_counts_the_rest() {
    let names = |n: usize| -> Vec<String> { (0..n).map(|i| format!("t-{i}.jsonl")).collect() };
    assert_eq!(super::files_title(&names(2)), "t-0.jsonl, t-1.jsonl");
    assert_eq!(
        super::files_title(&names(4)),
        "t-0.jsonl, t-1.jsonl, t-2.jsonl, t-3.jsonl"
    );
    assert_eq!(
        super::files_title(&names(5)),
        "t-0.jsonl, t-1.jsonl and 3 more"
    );
    let long = format!("/scratch/{}/t-1.jsonl", "x".repeat(80));
    assert_eq!(
        super::files_title(&[long]),
        format!("…{}/t-1.jsonl", "x".repeat(77))
    );
}

use super::*;

#[test]
fn ticks_are_round_numbers() {
    assert_eq!(ticks(10.0, 5.0), (2.0, 0));
    assert_eq!(ticks(1.0, 4.0), (0.5, 1));
    assert_eq!(ticks(1012.0, 4.0), (500.0, 0));
    assert_eq!(ticks(0.03, 3.0), (0.01, 2));
}

/// Every text fits in the picture with the longest labels there can be, at a generous
/// 0.6 em a character (sans-serif averages about 0.5).
#[test]
fn no_label_runs_off_the_picture() {
    let long = "x".repeat(300);
    let mut s = Series {
        label: format!("rank 123456 · pid 4194304 · {long} · GPU 7 ({long})"),
        quota: Some(u64::MAX / 4),
        quota_changes: Vec::new(),
        peak: u64::MAX / 3,
        first_ns: 0,
        top_refusal: u64::MAX,
        refusals: 1_000_000_000,
        timeline: Timeline::new(64),
        observed: true,
        end_ns: 123_456_789_012,
        footprint: true,
        parts: DeviceParts {
            now: cuquota_format::part::PerPart([1, 2, 3]),
            seen: true,
        },
        part_peaks: PerLayer([1, 2, 3, 4]),
        stack: None,
        trims: 1,
        group_held: Some(Box::new(Timeline::new(64))),
    };
    if let Some(g) = s.group_held.as_mut() {
        g.add(3, 1 << 40);
    }
    s.stack = Some(Box::new(std::array::from_fn(|_| s.timeline.clone())));
    s.timeline.add(0, 1 << 40);
    s.timeline.refusal(5, u64::MAX);
    let sources = Sources {
        programs: vec![long.clone(), long.clone()],
        files: vec![long.clone(), long.clone()],
    };
    let note = format!(
        "since the first event, {} after the first process started",
        crate::report::seconds(u64::MAX)
    );
    let svg = draw(&[s], &sources, (0, note));
    let attr = |tag: &str, name: &str| -> Option<f64> {
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        tag[at..].split('"').next()?.parse().ok()
    };
    for piece in svg.split("<text").skip(1) {
        let (tag, rest) = piece.split_once('>').unwrap();
        let text = rest.split("</text>").next().unwrap();
        let chars = text
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .chars()
            .count() as f64;
        let width = chars * attr(tag, "font-size").unwrap() * 0.6;
        let x = attr(tag, "x").unwrap();
        let (from, to) = if tag.contains("text-anchor=\"end\"") {
            (x - width, x)
        } else if tag.contains("text-anchor=\"middle\"") {
            (x - width / 2.0, x + width / 2.0)
        } else {
            (x, x + width)
        };
        if tag.contains("rotate") {
            continue; // the y title, short and turned
        }
        assert!(from >= 0.0 && to <= WIDTH, "{text:?} spans {from}..{to}");
    }
}

/// Up to 8 panels are full height; more share 1600 px, down to a floor: 512 panels are
/// 512 × 94 px, not 512 × 234.
#[test]
fn panels_get_lower_as_they_get_many() {
    assert_eq!(panel_height(1), 200.0);
    assert_eq!(panel_height(8), 200.0);
    assert_eq!(panel_height(16), 100.0);
    assert_eq!(panel_height(20), 80.0);
    assert_eq!(panel_height(512), 60.0);
    let series: Vec<Series> = (0..512)
        .map(|i| {
            let mut s = Series {
                label: format!("rank {i}"),
                quota: Some(1 << 30),
                quota_changes: Vec::new(),
                peak: 1 << 29,
                first_ns: 0,
                top_refusal: 0,
                refusals: 0,
                timeline: Timeline::new(8),
                observed: false,
                end_ns: 1000,
                footprint: false,
                parts: DeviceParts::default(),
                part_peaks: PerLayer::default(),
                stack: None,
                trims: 0,
                group_held: None,
            };
            s.timeline.add(0, 1 << 29);
            s
        })
        .collect();
    let sources = Sources {
        programs: vec!["p".into()],
        files: vec!["f".into()],
    };
    let svg = draw(&series, &sources, (0, String::new()));
    assert!(svg.contains(r#"height="48270""#), "{}", &svg[..300]);
    // At the floor, labels every 0.5 GiB to 1.5 GiB (the quota at 1 GiB).
    let y_max = svg.matches(r#"data-y-max="1.5""#).count();
    assert_eq!(y_max, 512);
    let labels = svg.matches(r#"class="y-tick""#).count();
    assert_eq!(labels, 512 * 4);
}

#[test]
fn text_is_escaped_and_clipped() {
    assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    assert_eq!(escape("x\u{1b}]0;t\u{7}\n'"), "x\\x1b]0;t\\x07\\n&apos;");
    assert_eq!(clip("abcdef", 4), "abc…");
    assert_eq!(clip("abc", 4), "abc");
    assert_eq!(clip("ab\u{1b}cd", 6), "ab…");
}

/// Refusals closer than a bucket share one cross, with their count beside it.
#[test]
/// A group member's refusal is drawn against the group: its cross at what the group held
/// + the request (above the quota line, where it belongs), a ring at what the group held.
fn a_group_members_refusal_is_drawn_against_the_group() {
    let header: Header = serde_json::from_str(
        r#"{"type":"header","schema":1,"version":"0.1.0","pid":7,"host":"h","rank":0,
        "argv":["bfc"],"start_unix_ns":1,"mode":"enforce","group":"svc",
        "devices":[{"ordinal":0,"name":"GPU","total":8589934592,"quota":4294967296}]}"#,
    )
    .unwrap();
    let event = |line: &'static str| -> EventLine<'static> {
        serde_json::from_str::<EventLine>(line).unwrap()
    };
    let mut plot = Plot {
        t0: 1,
        series: Vec::new(),
        sources: Sources {
            programs: Vec::new(),
            files: Vec::new(),
        },
        processes: 0,
    };
    let mut p = plot.start("t.jsonl", &header);
    plot.event(
        &mut p,
        &event(
            r#"{"type":"alloc","t_ns":1000,"tid":1,"dev":0,"api":"cuMemAlloc_v2","ptr":"0x1","bytes":1073741824,"result":"CUDA_SUCCESS","in_use":1073741824}"#,
        ),
    );
    plot.event(
        &mut p,
        &event(
            r#"{"type":"refused","t_ns":2000,"tid":1,"dev":0,"api":"cuMemAlloc_v2","ptr":"0x0","bytes":2147483648,"result":"CUDA_ERROR_OUT_OF_MEMORY","in_use":1073741824,"reason":"quota","group":"svc","group_in_use":3221225472,"group_limit":4294967296}"#,
        ),
    );
    plot.finish(p, None);
    let s = &plot.series[0];
    assert_eq!(
        s.top_refusal,
        5 << 30,
        "3 GiB held by the group + 2 GiB asked"
    );
    let svg = draw(&plot.series, &plot.sources, (0, String::new()));
    assert_eq!(svg.matches(r#"class="group-held""#).count(), 1, "{svg}");
    assert!(svg.contains("its group's in use at"), "{svg}");
}

#[test]
fn refusals_in_one_bucket_are_counted_at_their_cross() {
    let mut timeline = Timeline::new(BUCKETS);
    for i in 0..7 {
        timeline.refusal(1_000 + i, 100);
    }
    timeline.add(0, 50);
    timeline.add(10_000_000, 50);
    let buckets: Vec<u32> = timeline.buckets().map(|(_, b)| b.refusals).collect();
    assert!(buckets.contains(&7), "{buckets:?}");
}
