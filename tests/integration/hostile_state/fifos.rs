//! FIFOs where registry and group files should be: a refusal's holder lookup, `top --once`,
//! `top --json`, `metrics` and an NVML memory query each return at once (a FIFO's open once
//! waited for a writer that never came), with exact outputs.

use super::*;

#[test]
fn fifos_in_the_state_directory_block_nothing() {
    crate::policy::needs_root();
    let kit = Kit::new("hostile-fifo").root_made();
    let state = kit.state();
    let in_processes = state.join("processes/4242-1");
    let in_groups = state.join("groups/pipe");
    fifo(&in_processes, DAEMON);
    fifo(&in_groups, DAEMON);

    // nobody's group svc: one member holds 768 MiB, another is refused 512 MiB and names it.
    let mut holder = (kit.client(NOBODY, &[NOBODY.1]))
        .ops("init alloc:768M sleep:30000")
        .env("CUQUOTA_GROUP", "svc")
        .env("CUQUOTA_LIMIT", "1GiB")
        .start();
    holder.wait_for(|l| l.op == "alloc");
    let out = kit.member(NOBODY, &[NOBODY.1], "svc", "init alloc:512M");
    out.check_exit(0);
    out.check_rcs(&[0, OUT_OF_MEMORY]);
    out.check_log(&format!(
        "GPU 0 refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: group svc: quota 1.00 \
         GiB, this process 0 B, 1 other member 768.00 MiB, 256.00 MiB left; held by pid {} \
         (dlsym init alloc:768M sleep:30000) 768.00 MiB",
        holder.pid()
    ));

    let skipped_fifo = |path: &Path| {
        format!(
            "skipped {} (owner uid 1, mode 666) is a FIFO, not a regular file",
            path.display()
        )
    };
    let s = state.to_str().unwrap();
    let top = kit.cli(NOBODY, &["top", "--json", "--state-dir", s]);
    let v: serde_json::Value = serde_json::from_str(&top.stdout).unwrap();
    assert_eq!(
        v["notes"],
        serde_json::json!([skipped_fifo(&in_processes), skipped_fifo(&in_groups)])
    );
    let svc = &v["gpus"][0]["groups"][0];
    assert_eq!(
        (svc["name"].as_str(), svc["in_use"].as_u64()),
        (Some("svc"), Some(768 * MIB))
    );
    assert_eq!(svc["processes"][0]["pid"], holder.pid());

    let once = kit.cli(NOBODY, &["top", "--once", "--state-dir", s]);
    // Its notes, cut to the frame's width.
    let notes: Vec<&str> = (once.stdout.lines())
        .filter_map(|l| l.trim_start().strip_prefix("note: "))
        .collect();
    assert_eq!(notes.len(), 2, "{once}");
    for (note, path) in notes.iter().zip([&in_processes, &in_groups]) {
        assert!(
            note.starts_with(&format!("skipped {} (owner uid", path.display())),
            "{once}"
        );
    }
    assert!(once.stdout.contains("group svc (1 member)"), "{once}");

    let metrics = kit.cli(NOBODY, &["metrics", "--state-dir", s]);
    assert!(
        metrics.stdout.contains("\ncuquota_state_files_skipped 2\n"),
        "{metrics}"
    );
    assert!(
        metrics
            .stdout
            .contains("cuquota_group_members{group=\"svc\""),
        "{metrics}"
    );

    // A process in the group named by the FIFO asks NVML: its own figures (the group decides
    // nothing), at once.
    let out = (kit.client(NOBODY, &[NOBODY.1]))
        .ops("nvmlinit nvmlinfo:0")
        .env("CUQUOTA_GROUP", "pipe")
        .env("CUQUOTA_LIMIT", "1GiB")
        .run();
    out.check_exit(0);
    out.check(
        1,
        "nvmlinfo",
        &[("rc", 0), ("total", GIB), ("used", 0), ("free", GIB)],
    );
    holder.kill();
}
