//! Only group files a process may trust decide its limit. Two real users — daemon (uid 1)
//! and nobody (uid 65534) — share one state directory (mode 1777, as /dev/shm/cuquota is):
//! a name another user took first, in a file anyone may write, is a refusal that names the
//! file, its owner and mode, never a wider quota; a file shared the documented way (a Unix
//! group the member is in, mode 660) is used. The test runs as root (CI does) and copies the
//! client, the CLI, the interposer and the shim where both users can read them.

use super::*;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::Path;

const DAEMON: (u32, u32) = (1, 1);
const NOBODY: (u32, u32) = (65534, 65534);

/// The programs and a state directory under /tmp, readable by every user; removed on drop.
struct Kit {
    root: PathBuf,
}

impl Kit {
    fn new(tag: &str) -> Kit {
        let root = std::env::temp_dir().join(format!("cuquota-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let art = artifacts();
        for sub in ["bin", "shim"] {
            fs::create_dir_all(root.join(sub)).unwrap();
        }
        let copy = |from: &Path, to: PathBuf| {
            fs::copy(from, &to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
            fs::set_permissions(&to, fs::Permissions::from_mode(0o755)).unwrap();
        };
        copy(&Client::Dlsym.path(), root.join("bin/dlsym"));
        copy(&art.cli, root.join("bin/cuquota"));
        copy(&art.interposer, root.join("bin/libcuquota.so"));
        for entry in fs::read_dir(&art.shim_dir).unwrap().flatten() {
            copy(&entry.path(), root.join("shim").join(entry.file_name()));
        }
        for dir in [&root, &root.join("bin"), &root.join("shim")] {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        }
        // The shared state directory, as root or a first user's process makes it.
        fs::create_dir(root.join("state")).unwrap();
        fs::set_permissions(root.join("state"), fs::Permissions::from_mode(0o1777)).unwrap();
        Kit { root }
    }

    fn state(&self) -> PathBuf {
        self.root.join("state")
    }

    fn file(&self, group: &str) -> PathBuf {
        self.state().join("groups").join(group)
    }

    /// `cuquota set GROUP --limit SPEC` as `user`.
    fn set(&self, user: (u32, u32), group: &str, spec: &str) -> Output {
        let state = self.state();
        Run::program(self.root.join("bin/cuquota"))
            .no_preload()
            .args(&["set", group, "--limit", spec, "--state-dir"])
            .arg(state.to_str().unwrap())
            .user(user.0, user.1, &[user.1])
            .timeout(PROCESS_TIMEOUT)
            .run()
    }

    /// A member of `group` as `user` (with supplementary `groups`), CUQUOTA_LIMIT 1GiB.
    fn member(&self, user: (u32, u32), groups: &[u32], group: &str, ops: &str) -> Output {
        Run::program(self.root.join("bin/dlsym"))
            .ops(ops)
            .env(
                "LD_PRELOAD",
                self.root.join("bin/libcuquota.so").to_str().unwrap(),
            )
            .env("LD_LIBRARY_PATH", self.root.join("shim").to_str().unwrap())
            .env("CUQUOTA_STATE_DIR", self.state().to_str().unwrap())
            .env("CUQUOTA_GROUP", group)
            .env("CUQUOTA_LIMIT", "1GiB")
            .user(user.0, user.1, groups)
            .timeout(PROCESS_TIMEOUT)
            .run()
    }

    fn chmod(&self, group: &str, mode: u32) {
        fs::set_permissions(self.file(group), fs::Permissions::from_mode(mode)).unwrap();
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

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
