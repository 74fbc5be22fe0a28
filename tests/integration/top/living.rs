//! The views count only the living: members SIGKILLed or gone with `_exit` while holding
//! memory leave their charges on the group's counter until someone reaps them (a member
//! joining, refusing, asking cuMemGetInfo, or `cuquota set`), yet `top --json`, `top
//! --once`, `metrics` and a real Prometheus scrape show only what living members hold, at
//! every read, with nobody reaping in between.

use super::*;
use cuquota_state::group::GroupFile;
use std::sync::atomic::Ordering::Relaxed;

/// Waits (at most 30 s) for a member to end by itself; fails if it does not.
fn ended(mut bg: Bg) {
    wait_for(Duration::from_secs(30), "a member to end", || {
        bg.0.try_wait().ok().flatten()
    });
}

/// SIGKILLs a member and reaps it.
fn kill(mut bg: Bg) {
    let _ = bg.0.kill(); // already killed, when a storm sent it first
    bg.0.wait().unwrap();
}

/// The group's counter on its one GPU as the file says, reaped or not.
fn raw_in_use(state: &Path, name: &str) -> u64 {
    let f = GroupFile::open_read_only(state, name).unwrap().unwrap();
    f.layout().devices[0].in_use.load(Relaxed)
}

/// The value of the one sample of `metric` whose labels start with `labels`.
fn sample(text: &str, metric: &str, labels: &str) -> Option<u64> {
    let start = format!("{metric}{{{labels}");
    let values: Vec<u64> = (text.lines())
        .filter(|l| l.starts_with(&start))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    assert!(values.len() <= 1, "{start}: {values:?}\n{text}");
    values.first().copied()
}

#[test]
fn views_leave_out_members_killed_or_gone_holding_memory() {
    let state = scratch_dir("top-living");
    let killed = member(&state, "tj", "1GiB", "256M");
    let living = member(&state, "tj", "1GiB", "64M");
    wait_for(Duration::from_secs(30), "both members holding", || {
        group_json(&state, "tj").filter(|g| g["in_use"] == 320 * MIB)
    });
    // One more ends with _exit (no exit handler runs) holding 128 MiB; then one is killed.
    ended(member_ops(
        &state,
        "tj",
        "1GiB",
        &["init", "alloc:128M", "_exit:0"],
    ));
    kill(killed);
    // Nobody reaped: the dead members' charges are still on the group's counter.
    assert_eq!(raw_in_use(&state, "tj"), 448 * MIB);

    let g = group_json(&state, "tj").expect("tj is listed while a member lives");
    assert_eq!(
        (g["in_use"].as_u64(), g["members"].as_u64()),
        (Some(64 * MIB), Some(1))
    );
    let pids: Vec<&Value> = g["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["pid"])
        .collect();
    assert_eq!(pids, [&Value::from(living.0.id())]);
    let frame = cli(&["top", "--once"], &state);
    let row = (frame.lines())
        .find(|l| l.contains("group tj"))
        .unwrap_or_else(|| panic!("{frame}"));
    assert!(
        row.contains("group tj (1 member)") && row.contains("64.0 MiB"),
        "{frame}"
    );
    let text = cli(&["metrics"], &state);
    assert_eq!(
        sample(&text, "cuquota_in_use_bytes", "group=\"tj\""),
        Some(64 * MIB)
    );
    assert_eq!(
        sample(&text, "cuquota_group_members", "group=\"tj\""),
        Some(1)
    );
    assert_eq!(raw_in_use(&state, "tj"), 448 * MIB, "a view reaped");

    // The last member goes: the group holds nothing, and is listed under no GPU.
    kill(living);
    let v: Value = serde_json::from_str(&cli(&["top", "--json"], &state)).unwrap();
    assert_eq!(group_json(&state, "tj"), None, "{v}");
    assert_eq!(v["idle_groups"], serde_json::json!(["tj"]));
    assert_eq!(v["group_count"], 0);
    let frame = cli(&["top", "--once"], &state);
    assert!(
        frame.contains("1 group with no living member: tj"),
        "{frame}"
    );
    let text = cli(&["metrics"], &state);
    assert_eq!(
        sample(&text, "cuquota_in_use_bytes", "group=\"tj\""),
        None,
        "{text}"
    );
    assert_eq!(
        sample(&text, "cuquota_group_members", "group=\"tj\""),
        Some(0)
    );
    assert_eq!(raw_in_use(&state, "tj"), 448 * MIB, "a view reaped");
}

#[test]
fn prometheus_sees_a_storm_of_kills_at_once() {
    if !have("prometheus") {
        return;
    }
    let state = scratch_dir("top-living-prometheus");
    let mut members: Vec<Bg> = (0..4)
        .map(|_| member(&state, "storm", "1GiB", "64M"))
        .collect();
    wait_for(Duration::from_secs(30), "four members holding", || {
        group_json(&state, "storm").filter(|g| g["in_use"] == 256 * MIB)
    });
    let (_exporter, port) = start_exporter(&state);
    let dir = state.join("prometheus");
    let (_prometheus, web) = start_prometheus(&dir, port);
    let in_use = r#"cuquota_in_use_bytes{group="storm"}"#;
    let count = r#"cuquota_group_members{group="storm"}"#;
    let read = || Some((query(web, in_use)?, query(web, count)?));
    wait_for_prometheus(&dir, "a scrape of four members", || {
        read().filter(|got| *got == (256 * MIB, 4))
    });
    // Three SIGKILLs at once; the fourth member lives on and nobody reaps.
    let last = members.pop().unwrap();
    for m in &mut members {
        let _ = m.0.kill();
    }
    for m in members {
        kill(m);
    }
    wait_for_prometheus(&dir, "a scrape of the one living member", || {
        read().filter(|got| *got == (64 * MIB, 1))
    });
    assert_eq!(raw_in_use(&state, "storm"), 256 * MIB, "a view reaped");
    kill(last);
    // No member: the group's series go (Prometheus marks them stale), its count reads 0.
    wait_for_prometheus(&dir, "a scrape of no member", || {
        (query(web, count)? == 0 && query(web, in_use).is_none()).then_some(())
    });
}
