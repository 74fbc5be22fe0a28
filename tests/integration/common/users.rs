//! Two real users sharing one state directory: the programs (a client, the CLI, the
//! interposer and the shim) copied where every user can read them, and a state directory
//! under /tmp made by root (mode 1777, as /dev/shm/cuquota is). The tests that use it run
//! as root (CI does) and run each program as daemon (uid 1) or nobody (uid 65534).

use super::*;
use std::os::unix::fs::PermissionsExt;

/// daemon and nobody: (uid, gid).
pub const DAEMON: (u32, u32) = (1, 1);
pub const NOBODY: (u32, u32) = (65534, 65534);

/// How long any one program of these tests may run.
pub const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// The programs and a state directory under /tmp, readable by every user; removed on drop.
pub struct Kit {
    pub root: PathBuf,
}

impl Kit {
    pub fn new(tag: &str) -> Kit {
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
        let kit = Kit { root };
        // The shared state directory, as root or a first user's process makes it.
        kit.root_dir("state");
        kit
    }

    /// Makes `rel` under the kit's root as root makes a shared directory: mode 1777.
    pub fn root_dir(&self, rel: &str) -> PathBuf {
        let dir = self.root.join(rel);
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o1777)).unwrap();
        dir
    }

    /// The safe deployment: the state directory and both directories in it made by root.
    pub fn root_made(self) -> Kit {
        self.root_dir("state/groups");
        self.root_dir("state/processes");
        self
    }

    pub fn state(&self) -> PathBuf {
        self.root.join("state")
    }

    pub fn file(&self, group: &str) -> PathBuf {
        self.state().join("groups").join(group)
    }

    /// The client under the interposer as `user` (with supplementary `groups`), the state
    /// directory the kit's.
    pub fn client(&self, user: (u32, u32), groups: &[u32]) -> Run {
        self.client_in(user, groups, &self.state())
    }

    /// As [`Self::client`], with state directory `state`.
    pub fn client_in(&self, user: (u32, u32), groups: &[u32], state: &Path) -> Run {
        Run::program(self.root.join("bin/dlsym"))
            .env(
                "LD_PRELOAD",
                self.root.join("bin/libcuquota.so").to_str().unwrap(),
            )
            .env("LD_LIBRARY_PATH", self.root.join("shim").to_str().unwrap())
            .env("CUQUOTA_STATE_DIR", state.to_str().unwrap())
            .user(user.0, user.1, groups)
            .timeout(USER_TIMEOUT)
    }

    /// A member of `group` as `user` (with supplementary `groups`), CUQUOTA_LIMIT 1GiB.
    pub fn member(&self, user: (u32, u32), groups: &[u32], group: &str, ops: &str) -> Output {
        self.client(user, groups)
            .ops(ops)
            .env("CUQUOTA_GROUP", group)
            .env("CUQUOTA_LIMIT", "1GiB")
            .run()
    }

    /// `cuquota ARGS` (no preload) as `user`.
    pub fn cli(&self, user: (u32, u32), args: &[&str]) -> Output {
        Run::program(self.root.join("bin/cuquota"))
            .no_preload()
            .args(args)
            .user(user.0, user.1, &[user.1])
            .timeout(USER_TIMEOUT)
            .run()
    }

    /// `cuquota set GROUP --limit SPEC` as `user`.
    pub fn set(&self, user: (u32, u32), group: &str, spec: &str) -> Output {
        let state = self.state();
        self.cli(
            user,
            &[
                "set",
                group,
                "--limit",
                spec,
                "--state-dir",
                state.to_str().unwrap(),
            ],
        )
    }

    pub fn chmod(&self, group: &str, mode: u32) {
        fs::set_permissions(self.file(group), fs::Permissions::from_mode(mode)).unwrap();
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}
