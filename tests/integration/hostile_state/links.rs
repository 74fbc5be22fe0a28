//! Links in and to the state directory delete nothing and are never followed: the victim's
//! process runs on unregistered with one line; a state directory that is, or is in, /proc
//! is refused at once (it once recursed until SIGSEGV); dead entries of other users stay.

use super::*;

const VICTIMS: [&str; 3] = ["1-1", "2-2", "notes.txt"];
const ROOTS: [&str; 2] = ["3-3", "passwd"];

#[test]
fn links_in_the_state_directory_delete_nothing() {
    crate::policy::needs_root();
    let kit = Kit::new("hostile-links");
    let state = kit.state();
    // nobody's private directory and a root directory: regular files their owner could
    // open read-write, no lock held on any (what "dead entry" removal took).
    let victim = private_dir(kit.root.join("victim"), NOBODY, &VICTIMS);
    let roots = private_dir(kit.root.join("roots"), (0, 0), &ROOTS);

    // daemon makes `processes` a link to nobody's directory, in root's state directory.
    link(&victim, &state.join("processes"), DAEMON);
    let out = kit
        .client(NOBODY, &[NOBODY.1])
        .ops(JOB)
        .env("CUQUOTA_LIMIT", "1GiB")
        .run();
    ran_unregistered(
        &out,
        &format!(
            "{}/processes (owner uid 1, mode 777) is a symbolic link, and none is followed \
             from a state directory down",
            state.display()
        ),
    );
    untouched(&victim, &VICTIMS);

    // The same link to root's directory, met by root's process: the same.
    fs::remove_file(state.join("processes")).unwrap();
    link(&roots, &state.join("processes"), DAEMON);
    let out = kit
        .client((0, 0), &[0])
        .ops(JOB)
        .env("CUQUOTA_LIMIT", "1GiB")
        .run();
    ran_unregistered(
        &out,
        &format!(
            "{}/processes (owner uid 1, mode 777) is a symbolic link, and none is followed \
             from a state directory down",
            state.display()
        ),
    );
    untouched(&roots, &ROOTS);

    // `groups` a link: a member fails closed, naming it.
    link(&victim, &state.join("groups"), DAEMON);
    let out = kit.member(NOBODY, &[NOBODY.1], "svc", "init alloc:1M");
    out.check_exit(0);
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE]);
    out.check_log(&format!(
        "CUQUOTA_GROUP=svc: its quota cannot be used ({}/groups (owner uid 1, mode 777) is a \
         symbolic link, and none is followed from a state directory down). CUDA calls fail \
         with CUDA_ERROR_INVALID_VALUE until it is fixed",
        state.display()
    ));
    assert_eq!(out.cuquota_lines().len(), 1, "{out}");
    untouched(&victim, &VICTIMS);

    // The state directory itself a link daemon made to nobody's directory.
    let linked = kit.root.join("linked");
    link(&victim, &linked, DAEMON);
    let out = (kit.client_in(NOBODY, &[NOBODY.1], &linked))
        .ops(JOB)
        .env("CUQUOTA_LIMIT", "1GiB")
        .run();
    ran_unregistered(
        &out,
        &format!(
            "{} (owner uid 1, mode 777) is a symbolic link, and none is followed from a state \
             directory down",
            linked.display()
        ),
    );

    // A state directory daemon made (mode 1777, as a first comer's process makes it): daemon
    // could swap anything in it, so nobody's process uses none of it.
    let theirs = kit.root.join("theirs");
    fs::create_dir(&theirs).unwrap();
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o1777)).unwrap();
    chown(&theirs, Some(DAEMON.0), Some(DAEMON.1)).unwrap();
    link(&victim, &theirs.join("processes"), DAEMON);
    let out = (kit.client_in(NOBODY, &[NOBODY.1], &theirs))
        .ops(JOB)
        .env("CUQUOTA_LIMIT", "1GiB")
        .run();
    ran_unregistered(
        &out,
        &format!(
            "{} (owner uid 1, mode 1777) belongs to another user (neither root nor uid 65534), \
             who could change what is in it",
            theirs.display()
        ),
    );
    untouched(&victim, &VICTIMS);
    untouched(&roots, &ROOTS);
}

/// A state directory that is a link to /proc/self, or /proc/self itself: one line, and the
/// process, `cuquota set` and `cuquota top` go on (the old walk recursed until SIGSEGV).
#[test]
fn proc_self_is_never_a_state_directory() {
    crate::policy::needs_root();
    let kit = Kit::new("hostile-proc");
    let to_proc = kit.root.join("procstate");
    link(Path::new("/proc/self"), &to_proc, DAEMON);
    let out = (kit.client_in(NOBODY, &[NOBODY.1], &to_proc))
        .ops(JOB)
        .env("CUQUOTA_LIMIT", "1GiB")
        .run();
    ran_unregistered(
        &out,
        &format!(
            "{} (owner uid 1, mode 777) is a symbolic link, and none is followed from a state \
             directory down",
            to_proc.display()
        ),
    );
    let mode = fs::metadata("/proc").unwrap().permissions().mode() & 0o7777;
    let in_proc = &format!(
        "/proc (owner uid 0, mode {mode:o}) is in a file system of the kernel's (/proc, /sys), \
         never a state directory"
    );
    let proc_self = Path::new("/proc/self");
    let out = (kit.client_in(NOBODY, &[NOBODY.1], proc_self))
        .ops(JOB)
        .env("CUQUOTA_LIMIT", "1GiB")
        .run();
    ran_unregistered(&out, in_proc);
    let out = (kit.client_in(NOBODY, &[NOBODY.1], proc_self))
        .ops("init alloc:1M")
        .env("CUQUOTA_GROUP", "svc")
        .env("CUQUOTA_LIMIT", "1GiB")
        .run();
    out.check_exit(0);
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE]);
    out.check_log(&format!(
        "CUQUOTA_GROUP=svc: its quota cannot be used ({in_proc}). CUDA calls fail with \
         CUDA_ERROR_INVALID_VALUE until it is fixed"
    ));
    let set = kit.cli(
        NOBODY,
        &["set", "svc", "--limit", "1GiB", "--state-dir", "/proc/self"],
    );
    set.check_exit(1);
    assert_eq!(set.stderr, [format!("cuquota: {in_proc}")], "{set}");
    let top = kit.cli(NOBODY, &["top", "--json", "--state-dir", "/proc/self"]);
    top.check_exit(0);
    let v: serde_json::Value = serde_json::from_str(&top.stdout).unwrap();
    assert_eq!(
        v["notes"],
        serde_json::json!([
            format!("registry not read: {in_proc}"),
            format!("groups not read: {in_proc}")
        ])
    );
}

/// Dead registry entries go only when they are the remover's own: root's process leaves
/// nobody's dead entry (and the entries of anyone else) where it is.
#[test]
fn dead_entries_of_other_users_stay() {
    crate::policy::needs_root();
    let kit = Kit::new("hostile-dead").root_made();
    let processes = kit.state().join("processes");
    // A dead entry of nobody's and one of root's: regular files, no lock held.
    for (name, user) in [("11-1", NOBODY), ("12-1", (0, 0))] {
        fs::write(processes.join(name), b"").unwrap();
        chown(processes.join(name), Some(user.0), Some(user.1)).unwrap();
    }
    let out = kit
        .client((0, 0), &[0])
        .ops("init alloc:1M")
        .env("CUQUOTA_LIMIT", "1GiB")
        .run();
    out.check_rcs(&[0, 0]);
    // Root's dead entry went; nobody's stayed; the process's own (dead now) is the next
    // comer's to remove.
    let mut left: Vec<String> = (files_in(&processes).iter())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.iter().any(|n| n == "11-1"),
        "nobody's dead entry removed: {left:?}"
    );
    left.retain(|name| name != "11-1");
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with(&format!("{}-", out.pid)), "{left:?}");
}
