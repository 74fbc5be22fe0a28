//! Only group files a process may trust decide its limit. Two real users — daemon (uid 1)
//! and nobody (uid 65534) — share one state directory (mode 1777, as /dev/shm/cuquota is):
//! a name another user took first, in a file anyone may write, is a refusal that names the
//! file, its owner and mode, never a wider quota; a file shared the documented way (a Unix
//! group the member is in, mode 660) is used. The test runs as root (CI does): see
//! [`crate::common::Kit`].

use super::*;
use std::os::unix::fs::{chown, PermissionsExt};

/// Every call of `out` failed closed with one line naming why the group cannot be used.
fn refused(out: &Output, group: &str, why: &str) {
    out.check_exit(0);
    out.check_rcs(&[INVALID_VALUE, INVALID_VALUE]);
    let lines = out.cuquota_lines();
    assert_eq!(lines.len(), 1, "{out}");
    let want = format!("CUQUOTA_GROUP={group}: its quota cannot be used (");
    assert!(
        lines[0].contains(&want) && lines[0].contains(why),
        "{why}\n{out}"
    );
}

#[test]
fn only_group_files_the_process_may_trust_decide_its_limit() {
    crate::policy::needs_root();
    let kit = Kit::new("trust");
    // daemon comes first and makes the groups' directory: daemon could rename or delete
    // anything in it, so nobody trusts none of it.
    kit.set(DAEMON, "svc", "100GiB").check_exit(0);
    let groups = kit.state().join("groups");
    let out = kit.member(NOBODY, &[NOBODY.1], "svc", "init alloc:2G");
    refused(
        &out,
        "svc",
        &format!(
            "{} (owner uid 1, mode 1777) belongs to another user (neither root nor uid 65534), \
             who could change what is in it",
            groups.display()
        ),
    );
    // The safe deployment: root's directories. daemon takes the name first with a wide
    // limit and lets everyone write the file.
    chown(&groups, Some(0), Some(0)).unwrap();
    kit.chmod("svc", 0o666);
    let before = fs::read(kit.file("svc")).unwrap();
    let out = kit.member(NOBODY, &[NOBODY.1], "svc", "init alloc:2G");
    let path = kit.file("svc");
    refused(
        &out,
        "svc",
        &format!(
            "{} (owner uid 1, group gid 1, mode 666) is writable by every user, so it cannot \
             decide this process's limit",
            path.display()
        ),
    );
    assert_eq!(fs::read(&path).unwrap(), before, "the file was changed");

    // As `cuquota set` leaves it (mode 600): nobody cannot even open it.
    kit.chmod("svc", 0o600);
    let out = kit.member(NOBODY, &[NOBODY.1], "svc", "init alloc:2G");
    refused(&out, "svc", "Permission denied");

    // Shared the documented way: group daemon, mode 660, nobody in that group. The group's
    // limit (now 1 GiB) applies exactly.
    kit.set(DAEMON, "svc", "1GiB").check_exit(0);
    kit.chmod("svc", 0o660);
    let out = kit.member(
        NOBODY,
        &[NOBODY.1, DAEMON.1],
        "svc",
        "init alloc:768M alloc:512M",
    );
    out.check_exit(0);
    out.check_rcs(&[0, 0, OUT_OF_MEMORY]);
    assert!(
        out.cuquota_lines()
            .iter()
            .any(|l| l.contains("group svc: quota 1.00 GiB, this process 768.00 MiB")),
        "{out}"
    );

    // nobody's own file, but writable by every user: refused too.
    kit.set(NOBODY, "own", "1GiB").check_exit(0);
    kit.chmod("own", 0o666);
    let out = kit.member(NOBODY, &[NOBODY.1], "own", "init alloc:2G");
    refused(&out, "own", "mode 666) is writable by every user");
    // Its own file as `cuquota set` made it: used.
    kit.chmod("own", 0o600);
    let out = kit.member(NOBODY, &[NOBODY.1], "own", "init alloc:768M alloc:512M");
    out.check_rcs(&[0, 0, OUT_OF_MEMORY]);

    // Another user's file that nobody may write only through a group it is not in: the
    // kernel refuses the open (fail closed), and the owner's chown to root changes nothing.
    chown(kit.file("own"), Some(0), Some(DAEMON.1)).unwrap();
    kit.chmod("own", 0o660);
    let out = kit.member(NOBODY, &[NOBODY.1], "own", "init alloc:2G");
    refused(&out, "own", "Permission denied");

    // A shared file in a directory anyone may write without the sticky bit: anyone could
    // have put it there in place of the real one.
    fs::set_permissions(kit.state(), fs::Permissions::from_mode(0o777)).unwrap();
    let out = kit.member(NOBODY, &[NOBODY.1, DAEMON.1], "svc", "init alloc:2G");
    refused(
        &out,
        "svc",
        &format!(
            "{} (owner uid 0, mode 777) may be written by others and has no sticky bit",
            kit.state().display()
        ),
    );
}
