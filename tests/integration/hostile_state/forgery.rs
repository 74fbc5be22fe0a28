//! Names and identities another user cannot forge: a group is named by its file (a file
//! renamed over another group's, or a copy whose header names another group, is refused
//! and listed under no name); a registry file naming another user's process is believed
//! neither by a refusal's holders nor by `top`; `cuquota set` writes no file a member would
//! refuse.

use super::*;
use cuquota_state::identity::{cgroup_path, namespace_inode, Identity};
use cuquota_state::registry::{ProcessFile, Registration};

/// A group member as nobody holding `size` in the background (killed when dropped).
fn holder(kit: &Kit, group: &str, size: &str) -> Running {
    let mut run = (kit.client(NOBODY, &[NOBODY.1]))
        .ops(&format!("init alloc:{size} sleep:30000"))
        .env("CUQUOTA_GROUP", group)
        .env("CUQUOTA_LIMIT", "1GiB")
        .start();
    run.wait_for(|l| l.op == "alloc");
    run
}

fn top_json(kit: &Kit, user: (u32, u32)) -> serde_json::Value {
    let s = kit.state();
    let top = kit.cli(user, &["top", "--json", "--state-dir", s.to_str().unwrap()]);
    top.check_exit(0);
    serde_json::from_str(&top.stdout).unwrap()
}

#[test]
fn a_renamed_group_file_is_refused_and_its_member_fails_closed() {
    crate::policy::needs_root();
    let kit = Kit::new("hostile-renamed").root_made();
    kit.set(NOBODY, "big", "6GiB").check_exit(0);
    kit.set(NOBODY, "small", "512MiB").check_exit(0);
    // Whoever may rename in the groups' directory puts big's file in small's place.
    fs::rename(kit.file("big"), kit.file("small")).unwrap();
    let out = kit.member(NOBODY, &[NOBODY.1], "small", "init alloc:2G");
    out.check_exit(0);
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE]);
    out.check_log(&format!(
        "CUQUOTA_GROUP=small: its quota cannot be used ({}: its header names group \"big\": a \
         group file renamed or written to pass for another is never used). CUDA calls fail \
         with CUDA_ERROR_INVALID_VALUE until it is fixed",
        kit.file("small").display()
    ));
    assert_eq!(out.cuquota_lines().len(), 1, "{out}");
}

#[test]
fn a_forged_group_header_is_listed_under_no_name() {
    crate::policy::needs_root();
    let kit = Kit::new("hostile-header").root_made();
    let mut member = holder(&kit, "svc", "768M");
    // daemon's copy of svc's file under the name a, with a 64 GiB limit, readable by all.
    let forged = kit.file("a");
    fs::copy(kit.file("svc"), &forged).unwrap();
    let f = cuquota_state::group::GroupFile::open(&kit.state(), "svc").unwrap();
    assert_eq!(
        f.layout().devices[0]
            .limit
            .load(std::sync::atomic::Ordering::Relaxed),
        GIB
    );
    drop(f);
    chown(&forged, Some(DAEMON.0), Some(DAEMON.1)).unwrap();
    fs::set_permissions(&forged, fs::Permissions::from_mode(0o644)).unwrap();

    let v = top_json(&kit, NOBODY);
    let groups = v["gpus"][0]["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{v}");
    assert_eq!(groups[0]["name"], "svc");
    assert_eq!(groups[0]["limit"], GIB);
    assert_eq!(groups[0]["processes"][0]["pid"], member.pid());
    assert_eq!(
        v["notes"],
        serde_json::json!([format!(
            "skipped {}: its header names group \"svc\": a group file renamed or written to \
             pass for another is never used",
            forged.display()
        )])
    );
    let s = kit.state();
    let metrics = kit.cli(NOBODY, &["metrics", "--state-dir", s.to_str().unwrap()]);
    let series: Vec<&str> = (metrics.stdout.lines())
        .filter(|l| l.starts_with("cuquota_group_members{"))
        .collect();
    assert_eq!(series.len(), 1, "{metrics}");
    assert!(series[0].contains("group=\"svc\""), "{metrics}");
    member.kill();
}

/// daemon writes a registry file that names nobody's group member (its PID, namespace,
/// cgroup and group) with a command of daemon's choosing: the member refused names the real
/// holder, and `top` lists it once.
#[test]
fn a_forged_holder_is_believed_nowhere() {
    crate::policy::needs_root();
    let kit = Kit::new("hostile-holder").root_made();
    let mut member = holder(&kit, "svc", "768M");
    let pid = member.pid();
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let identity = Identity {
        outer_pid: pid,
        pid_ns: namespace_inode(&proc.join("ns/pid")),
        cgroup: cgroup_path(&fs::read_to_string(proc.join("cgroup")).unwrap()),
    };
    let argv = ["cryptominer".to_string(), "--wallet".into(), "eve".into()];
    let forged = ProcessFile::register(
        &kit.state(),
        &Registration {
            pid,
            started_unix_ns: 1,
            host: "h",
            argv: &argv,
            group: Some("svc"),
            observe: false,
            allocations_only: false,
            identity: &identity,
        },
    )
    .unwrap();
    let file = kit.state().join(format!("processes/{pid}-1"));
    chown(&file, Some(DAEMON.0), Some(DAEMON.1)).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();

    let out = kit.member(NOBODY, &[NOBODY.1], "svc", "init alloc:512M");
    out.check_rcs(&[0, OUT_OF_MEMORY]);
    out.check_log(&format!(
        "GPU 0 refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: group svc: quota 1.00 \
         GiB, this process 0 B, 1 other member 768.00 MiB, 256.00 MiB left; held by pid {pid} \
         (dlsym init alloc:768M sleep:30000) 768.00 MiB"
    ));

    for viewer in [NOBODY, (0, 0)] {
        let v = top_json(&kit, viewer);
        let svc = &v["gpus"][0]["groups"][0];
        let procs = svc["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 1, "{v}");
        assert_eq!(procs[0]["pid"], pid);
        let argv = format!(
            "{} init alloc:768M sleep:30000",
            kit.root.join("bin/dlsym").display()
        );
        assert_eq!(procs[0]["argv"], argv.as_str());
        assert_eq!(v["process_count"], 1);
        assert_eq!(
            v["notes"],
            serde_json::json!(["1 registry file left out: each names a process of another user"])
        );
    }
    drop(forged);
    member.kill();
}

#[test]
fn cuquota_set_writes_no_file_its_members_refuse() {
    crate::policy::needs_root();
    let kit = Kit::new("hostile-set").root_made();
    kit.set(DAEMON, "open", "1GiB").check_exit(0);
    kit.chmod("open", 0o666);
    let before = fs::read(kit.file("open")).unwrap();
    let out = kit.set(NOBODY, "open", "64GiB");
    out.check_exit(1);
    assert_eq!(
        out.stderr,
        [format!(
            "cuquota: {} (owner uid 1, group gid 1, mode 666) is writable by every user, so no \
             member may trust it: `cuquota set` writes only a file its members trust",
            kit.file("open").display()
        )],
        "{out}"
    );
    assert_eq!(
        fs::read(kit.file("open")).unwrap(),
        before,
        "the file was written"
    );
    // Root may set a limit on a user's own file (mode 600), which its members trust.
    kit.chmod("open", 0o600);
    kit.set((0, 0), "open", "2GiB").check_exit(0);
}
