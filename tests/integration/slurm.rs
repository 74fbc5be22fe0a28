//! The SPANK plugin on a real Slurm: Debian's slurmctld and slurmd started by
//! tests/slurm/run.sh in a network namespace with loopback alone and a mount namespace
//! whose /etc/ld.so.preload names the test build of the library (see `policy`), which
//! reads the test policy (`jobs = …`). `scripts/test.sh` installs Slurm with apt-get; a
//! machine without it, or where a part cannot start, fails here with what and why.
//! With the README's whole set-up `--gpu-mem` is exact; with one piece of it missing at a
//! time (the site policy, its jobs directory, /etc/ld.so.preload, the job cgroup) the job is refused before
//! anything of it runs, with one line naming the piece.

use crate::common::*;
use crate::policy::{build, write_policy};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

#[test]
fn gpu_mem_puts_a_jobs_tasks_under_one_quota_they_cannot_leave() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the Slurm test runs its daemons as root"
    );
    for tool in [
        "slurmctld",
        "slurmd",
        "srun",
        "scontrol",
        "sinfo",
        "unshare",
        "ip",
    ] {
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
        assert!(
            found,
            "{tool} is not installed: scripts/test.sh installs Slurm with \
             `apt-get install slurmctld slurmd slurm-client` (and iproute2, util-linux)"
        );
    }
    let art = artifacts();
    let b = build();
    let dir = scratch_dir("slurm");
    // The plugin as scripts/install.sh installs it, next to the library.
    let prefix = dir.join("prefix");
    let install = Command::new(art.workspace.join("scripts/install.sh"))
        .arg(&prefix)
        .env("CUQUOTA_INSTALL_FROM", art.cli.parent().unwrap())
        .output()
        .expect("run scripts/install.sh");
    assert!(
        install.status.success(),
        "{}",
        String::from_utf8_lossy(&install.stderr)
    );
    let plugin = prefix.join("lib/libcuquota_spank.so");
    assert!(
        plugin.is_file(),
        "install.sh did not install {}",
        plugin.display()
    );
    let _policy = write_policy(
        Some(&format!(
            "jobs = {d}/jobs\nstate_dir = {d}/cq\n",
            d = dir.display()
        )),
        0o644,
        0,
    );
    let started = Instant::now();
    let out = Command::new("unshare")
        .args(["-m", "-n", "--propagation", "private", "bash"])
        .arg(art.workspace.join("tests/slurm/run.sh"))
        .arg(&plugin)
        .arg(&b.library)
        .arg(Client::Linked.path())
        .arg(&art.shim_dir)
        .arg(&dir)
        .arg(&b.conf)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("start unshare");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    println!(
        "{text}\n(the Slurm test took {:.2} s)",
        started.elapsed().as_secs_f64()
    );
    assert!(out.status.success(), "{text}");
    assert!(
        !text.contains("FAIL") && !text.contains("failed:"),
        "{text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("srun --help:") && l.contains("--gpu-mem=SIZE")),
        "srun --help does not list --gpu-mem:\n{text}"
    );
    let count = |prefix: &str, needle: &str| {
        (lines.iter())
            .filter(|l| l.starts_with(prefix) && l.contains(needle))
            .count()
    };
    // Job A: two tasks, one gigabyte between them, filled exactly.
    assert_eq!(count("job a: ", "info rc=0 free="), 2, "{text}");
    assert_eq!(count("job a: ", " total=1073741824"), 2, "{text}");
    assert_eq!(
        count("job a: ", "alloc 67108864 rc=0"),
        16,
        "16 × 64 MiB = 1 GiB:\n{text}"
    );
    assert_eq!(count("job a: ", "alloc 67108864 rc=2"), 24, "{text}");
    assert_eq!(count("job a: ", "waitgone gone=1"), 2, "{text}");
    // Job B: every variable gone or hostile; its own 512 MiB while A holds its gigabyte.
    let b_ops: Vec<&str> = (lines.iter())
        .filter_map(|l| l.strip_prefix("job b: "))
        .filter(|l| !l.starts_with("cuquota["))
        .map(|l| l.split(" slot=").next().unwrap_or(l))
        .collect();
    assert_eq!(
        b_ops,
        [
            "init rc=0",
            "info rc=0 free=536870912 total=536870912",
            "alloc 536870912 rc=0",
            "alloc 1 rc=2",
        ],
        "{text}"
    );
    for var in ["CUQUOTA_MODE", "CUQUOTA_GROUP", "CUQUOTA_STATE_DIR"] {
        assert_eq!(
            count("job b: cuquota[", &format!("{var}=")),
            1,
            "{var}:\n{text}"
        );
    }
    // Job C: no --gpu-mem, no limit.
    assert_eq!(
        count("job c: ", "info rc=0 free=4294967296 total=4294967296"),
        1,
        "{text}"
    );
    // Jobs D to G: one piece of the set-up missing each. srun fails; its stderr has the one
    // line naming that piece (from the node's first task); no task ran the client, so
    // nothing was allocated, limited or not.
    let conf = b.conf.display().to_string();
    for (job, piece, says) in [
        (
            "d",
            "no site policy",
            format!("there is no site policy {conf}, so the library never reads"),
        ),
        (
            "e",
            "no jobs directory",
            format!("the site policy {conf} names no jobs directory, so the library never reads"),
        ),
        (
            "f",
            "no ld.so.preload",
            "there is no /etc/ld.so.preload, so the job's processes load libcuquota.so only \
             through LD_PRELOAD"
                .to_string(),
        ),
        (
            "g",
            "no job cgroup",
            "the task is in no job cgroup (no job_".to_string(),
        ),
    ] {
        let status = format!("slurm-test: job {job} ({piece}) rc=");
        let rc = (lines.iter())
            .find_map(|l| l.strip_prefix(status.as_str()))
            .unwrap_or_else(|| panic!("no {status:?} line:\n{text}"));
        assert_ne!(rc, "0", "job {job} ({piece}) ran:\n{text}");
        let err = format!("job {job} err: ");
        let refusals: Vec<&str> = (lines.iter())
            .filter(|l| l.starts_with(&err) && l.contains("cuquota: job "))
            .copied()
            .collect();
        assert_eq!(refusals.len(), 1, "job {job} ({piece}):\n{text}");
        assert!(
            refusals[0].contains(
                "--gpu-mem=1GiB cannot be enforced on this node, so the job \
                 does not start here: "
            ) && refusals[0].contains(&says),
            "job {job} ({piece}): {}",
            refusals[0]
        );
        // The client's lines, and the library's, are nowhere: nothing of it ran.
        assert_eq!(count(&format!("job {job}: "), ""), 0, "{text}");
        assert_eq!(count(&err, "init rc="), 0, "{text}");
        assert_eq!(count(&err, "alloc 536870912"), 0, "{text}");
        assert_eq!(count(&err, "cuquota["), 0, "{text}");
    }
    // Nothing of the jobs is left.
    assert!(
        lines.contains(&"slurm-test: left in the jobs directory: []"),
        "{text}"
    );
    assert!(
        lines.contains(&"slurm-test: left in the groups directory: []"),
        "{text}"
    );
    assert!(!Path::new("/sys/fs/cgroup/freezer/slurm_localhost").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
