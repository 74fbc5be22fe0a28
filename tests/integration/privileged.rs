//! A setuid-root CUDA program, preloaded by /etc/ld.so.preload (in a mount namespace with an
//! overlay on /etc), run by an ordinary user (nobody) who sets the variables: it takes no
//! file, directory or group from them, as glibc's `MALLOC_TRACE` is ignored there, and says
//! so in one line; a limit may still narrow. The same program without its setuid bit takes
//! them all (the test can tell the two apart). The test runs as root (CI does).

use crate::common::*;
use crate::policy::{needs_root, with_ld_so_preload};
use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::PathBuf;

const NOBODY: u32 = 65534;

/// The client, the library and the shim under /tmp, where nobody can reach them; removed on
/// drop.
struct Kit {
    root: PathBuf,
}

impl Kit {
    fn new() -> Kit {
        let root = std::env::temp_dir().join(format!("cuquota-setuid-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let art = artifacts();
        for dir in ["bin", "lib", "out"] {
            fs::create_dir_all(root.join(dir)).unwrap();
        }
        fs::copy(Client::Linked.path(), root.join("bin/client")).unwrap();
        fs::copy(&art.interposer, root.join("lib/libcuquota.so")).unwrap();
        fs::copy(
            art.shim_dir.join("libcuda.so.1"),
            root.join("lib/libcuda.so.1"),
        )
        .unwrap();
        for (path, mode) in [
            (root.clone(), 0o755),
            (root.join("bin"), 0o755),
            (root.join("lib"), 0o755),
            // Where nobody may create files: what a root-owned trace would land in.
            (root.join("out"), 0o1777),
        ] {
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
        }
        // A root file nobody may write, which the variables point the log at.
        fs::write(root.join("secret"), "root's own\n").unwrap();
        fs::set_permissions(root.join("secret"), fs::Permissions::from_mode(0o644)).unwrap();
        Kit { root }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Runs the client as nobody with the variables set, its setuid bit as `setuid` says.
    fn run(&self, setuid: bool, ops: &str) -> Output {
        let client = self.path("bin/client");
        chown(&client, Some(0), Some(0)).unwrap();
        let mode = if setuid { 0o4755 } else { 0o755 };
        fs::set_permissions(&client, fs::Permissions::from_mode(mode)).unwrap();
        let p = |name: &str| self.path(name).display().to_string();
        // The shim is preloaded too: a setuid program ignores LD_LIBRARY_PATH, and the
        // client's libcuda.so.1 is then the shim already loaded under that name.
        let preload = format!("{} {}", p("lib/libcuquota.so"), p("lib/libcuda.so.1"));
        let command = format!(
            "setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups env -i \
             CUQUOTA_LOG={log} CUQUOTA_TRACE={trace} CUQUOTA_STATE_DIR={state} \
             CUQUOTA_GROUP=theirs CUQUOTA_STACKS=8 CUQUOTA_LIMIT=1GiB {client} {ops}",
            log = p("secret"),
            trace = p("out/t.jsonl"),
            state = p("out/state"),
            client = client.display(),
        );
        with_ld_so_preload(&scratch_dir("setuid-etc"), &preload, &command)
    }

    fn out_dir(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.path("out"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn secret(kit: &Kit) -> String {
    fs::read_to_string(kit.path("secret")).unwrap()
}

#[test]
fn a_setuid_program_takes_no_file_directory_or_group_from_its_callers_variables() {
    needs_root();
    let kit = Kit::new();
    let ops = "init alloc:1G alloc:1 info";

    let out = kit.run(true, ops);
    out.check_exit(0);
    // The limit narrowed (it may): 1 GiB fits, one byte more is refused.
    out.check(1, "alloc", &[("rc", 0)]);
    out.check(2, "alloc", &[("rc", OUT_OF_MEMORY)]);
    out.check(3, "info", &[("total", GIB)]);
    assert_eq!(
        secret(&kit),
        "root's own\n",
        "the log went to the root file: {out}"
    );
    assert_eq!(
        kit.out_dir(),
        Vec::<String>::new(),
        "no trace, no state dir: {out}"
    );
    let ignored: Vec<&str> = out
        .cuquota_lines()
        .into_iter()
        .filter(|l| l.contains("ignored: this program runs with more privileges"))
        .collect();
    assert_eq!(ignored.len(), 1, "{out}");
    assert!(
        ignored[0].contains(
            "CUQUOTA_LOG, CUQUOTA_TRACE, CUQUOTA_STATE_DIR, CUQUOTA_GROUP, CUQUOTA_STACKS are \
             ignored"
        ),
        "{out}"
    );

    // Without the setuid bit the same variables are taken: the trace and the group's state
    // are made (as nobody), and the log, which nobody cannot open, falls back to stderr.
    let out = kit.run(false, ops);
    out.check_exit(0);
    out.check(2, "alloc", &[("rc", OUT_OF_MEMORY)]);
    assert_eq!(kit.out_dir(), ["state", "t.jsonl"], "{out}");
    assert_eq!(secret(&kit), "root's own\n");
    assert!(
        !out.stderr.iter().any(|l| l.contains("more privileges")),
        "an ordinary program warned: {out}"
    );
}
