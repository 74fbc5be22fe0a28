//! Whether a node can hold a `--gpu-mem` job to its limit, checked in each task just before
//! it starts, from the task's own view (its cgroup, its /etc). The limit needs three pieces
//! of the README's set-up, and each missing one would let the job run unlimited in silence:
//!
//! - the site policy naming the plugin's jobs directory (the library reads the job's policy
//!   only through it);
//! - a job cgroup (`job_<N>` in `/proc/self/cgroup`, from proctrack/cgroup or task/cgroup:
//!   the per-job key a task cannot change);
//! - the library in `/etc/ld.so.preload` (`LD_PRELOAD` is the task's to unset).
//!
//! None can be supplied by the plugin in a way the task cannot undo without the plugin
//! rewriting the node's own configuration (which governs every process there, not only
//! Slurm's), so a missing piece refuses the task, with one line naming it and the fix.

use cuquota_format::policy::{self, Loaded};
use std::path::Path;

/// The library's file name as `/etc/ld.so.preload` names it.
const LIBRARY: &str = "libcuquota.so";

/// The site policy (`loaded` from `path`) must be there, trusted, and name `jobs`.
pub fn check_policy(path: &Path, loaded: &Loaded, jobs: &Path) -> Result<(), String> {
    let want = jobs;
    let (path, jobs) = (path.display(), jobs.display());
    let unread = "so the library never reads the job's policy";
    let write = format!("as root, write {path} (root's, mode 0644) with the line `jobs = {jobs}`");
    Err(match loaded {
        Loaded::Absent => format!("there is no site policy {path}, {unread}; {write}"),
        Loaded::Refused(why) => format!("{why}, {unread}; {write}"),
        Loaded::Trusted(_, p) => match &p.jobs {
            Some(named) if named == want => return Ok(()),
            Some(named) => format!(
                "the site policy {path} says jobs = {}, not the plugin's jobs={jobs} \
                 (plugstack.conf), {unread}; make the two the same",
                named.display()
            ),
            None => format!("the site policy {path} names no jobs directory, {unread}; {write}"),
        },
    })
}

/// The task's cgroup (`/proc/self/cgroup`'s text) must name job `job` as the library reads
/// it.
pub fn check_cgroup(cgroup: &str, job: u32) -> Result<(), String> {
    let fix = "set ProctrackType=proctrack/cgroup (or TaskPlugin=task/cgroup) in slurm.conf";
    match policy::job_key(cgroup) {
        Some(key) if key == job.to_string() => Ok(()),
        Some(key) => Err(format!(
            "the task's cgroup names job {key}, not {job}, so the job's policy is not the one \
             found; {fix}"
        )),
        None => Err(format!(
            "the task is in no job cgroup (no job_{job} in /proc/self/cgroup), so the library \
             has no key the task cannot change to find the job's policy by; {fix}"
        )),
    }
}

/// The job's own policy, as the task's library finds it under `jobs` (`loaded`), must be
/// there and trusted. The prolog writes it, so this fails only when that went wrong (the
/// library would then fail closed, not run unlimited; this says why before anything runs).
pub fn check_job_policy(jobs: &Path, job: u32, loaded: &Loaded) -> Result<(), String> {
    match loaded {
        Loaded::Trusted(..) => Ok(()),
        Loaded::Absent => Err(format!(
            "the job's policy {} is not there, so nothing limits it; the job prolog writes \
             it: see slurmd's log for why it did not",
            jobs.join(job.to_string()).display()
        )),
        Loaded::Refused(why) => Err(format!("{why}; the job's CUDA calls would fail")),
    }
}

/// `/etc/ld.so.preload` (its text, `None` when there is none) must name the library, and
/// that file must be there (`is_file`), as the dynamic loader reads it: entries separated
/// by white space or `:`.
pub fn check_preload(preload: Option<&str>, is_file: impl Fn(&Path) -> bool) -> Result<(), String> {
    let fix = format!(
        "as root, add the library's path (e.g. /usr/local/lib/{LIBRARY}) to /etc/ld.so.preload"
    );
    let Some(text) = preload else {
        return Err(format!(
            "there is no /etc/ld.so.preload, so the job's processes load {LIBRARY} only \
             through LD_PRELOAD, which they can unset; {fix}"
        ));
    };
    let named: Vec<&str> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.split(|c: char| c.is_whitespace() || c == ':'))
        .filter(|e| Path::new(e).file_name().is_some_and(|n| n == LIBRARY))
        .collect();
    if named.iter().any(|e| is_file(Path::new(e))) {
        return Ok(());
    }
    let why = match named.first() {
        Some(e) => format!("/etc/ld.so.preload names {e}, which is not there"),
        None => format!("/etc/ld.so.preload does not name {LIBRARY}"),
    };
    Err(format!(
        "{why}, so the job's processes load it only through LD_PRELOAD, which they can \
         unset; {fix}"
    ))
}

/// Every check, from the running task's view: one line per missing piece, each saying what
/// is missing and what to do (empty when the job's limit holds).
pub fn missing(policy_path: &Path, jobs: &Path, job: u32) -> Vec<String> {
    let main = check_policy(policy_path, &policy::load(policy_path, false), jobs);
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup cannot be read ({e})"))
        .and_then(|text| check_cgroup(&text, job));
    // With both, the job's policy as the library will look it up.
    let own = match (&main, &cgroup) {
        (Ok(()), Ok(())) => check_job_policy(jobs, job, &policy::load_job(jobs, &job.to_string())),
        _ => Ok(()),
    };
    let preload = match std::fs::read_to_string("/etc/ld.so.preload") {
        Ok(text) => check_preload(Some(&text), Path::is_file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => check_preload(None, Path::is_file),
        // Unreadable to the task is unread by its loader too.
        Err(e) => Err(format!(
            "/etc/ld.so.preload cannot be read ({e}), so the job's processes do not load \
             {LIBRARY}; make it readable by all"
        )),
    };
    [main, cgroup, own, preload]
        .into_iter()
        .filter_map(Result::err)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn trusted(text: &str) -> Loaded {
        Loaded::Trusted(
            "/etc/cuquota.conf".into(),
            policy::parse(text, false).unwrap(),
        )
    }

    #[test]
    fn the_policy_must_name_the_plugins_jobs_directory() {
        let (path, jobs) = (
            Path::new("/etc/cuquota.conf"),
            Path::new("/run/cuquota/jobs"),
        );
        assert_eq!(
            check_policy(path, &trusted("jobs = /run/cuquota/jobs\n"), jobs),
            Ok(())
        );
        let absent = check_policy(path, &Loaded::Absent, jobs).unwrap_err();
        assert_eq!(
            absent,
            "there is no site policy /etc/cuquota.conf, so the library never reads the job's \
             policy; as root, write /etc/cuquota.conf (root's, mode 0644) with the line \
             `jobs = /run/cuquota/jobs`"
        );
        let none = check_policy(path, &trusted("limit = 1GiB\n"), jobs).unwrap_err();
        assert!(none.contains("names no jobs directory"), "{none}");
        let other = check_policy(path, &trusted("jobs = /elsewhere\n"), jobs).unwrap_err();
        assert!(
            other.contains("says jobs = /elsewhere, not the plugin's jobs=/run/cuquota/jobs"),
            "{other}"
        );
        let refused = Loaded::Refused("the policy /etc/cuquota.conf is owned by uid 7".into());
        let refused = check_policy(path, &refused, jobs).unwrap_err();
        assert!(refused.starts_with("the policy /etc/cuquota.conf is owned by uid 7, so"));
    }

    #[test]
    fn the_task_must_be_in_its_jobs_cgroup() {
        let v1 = "4:freezer:/slurm_localhost/uid_0/job_42/step_0\n1:name=systemd:/\n";
        assert_eq!(check_cgroup(v1, 42), Ok(()));
        let v2 = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n";
        assert_eq!(check_cgroup(v2, 42), Ok(()));
        let other = check_cgroup(v1, 43).unwrap_err();
        assert!(
            other.starts_with("the task's cgroup names job 42, not 43"),
            "{other}"
        );
        let none = check_cgroup("0::/user.slice/session-3.scope\n", 42).unwrap_err();
        assert!(
            none.starts_with("the task is in no job cgroup (no job_42 in /proc/self/cgroup)")
                && none.contains("ProctrackType=proctrack/cgroup"),
            "{none}"
        );
    }

    #[test]
    fn the_jobs_own_policy_must_be_there() {
        let jobs = Path::new("/run/cuquota/jobs");
        assert_eq!(
            check_job_policy(jobs, 42, &trusted("limit = 1GiB\n")),
            Ok(())
        );
        let absent = check_job_policy(jobs, 42, &Loaded::Absent).unwrap_err();
        assert!(
            absent.starts_with("the job's policy /run/cuquota/jobs/42 is not there"),
            "{absent}"
        );
        let refused =
            Loaded::Refused("the jobs directory /run/cuquota/jobs is owned by uid 7".into());
        let refused = check_job_policy(jobs, 42, &refused).unwrap_err();
        assert!(refused.starts_with("the jobs directory /run/cuquota/jobs is owned by uid 7;"));
    }

    #[test]
    fn the_library_must_be_preloaded_by_the_loader() {
        let there = |p: &Path| p == Path::new("/usr/local/lib/libcuquota.so");
        for ok in [
            "/usr/local/lib/libcuquota.so\n",
            "# cuquota\n/lib/libother.so /usr/local/lib/libcuquota.so\n",
            "/lib/libother.so:/usr/local/lib/libcuquota.so",
        ] {
            assert_eq!(check_preload(Some(ok), there), Ok(()), "{ok}");
        }
        let none = check_preload(None, there).unwrap_err();
        assert!(none.starts_with("there is no /etc/ld.so.preload"), "{none}");
        for (text, says) in [
            ("", "/etc/ld.so.preload does not name libcuquota.so"),
            (
                "/usr/local/lib/libcuquota_audit.so\n",
                "/etc/ld.so.preload does not name libcuquota.so",
            ),
            ("# /usr/local/lib/libcuquota.so\n", "does not name"),
            (
                "/opt/libcuquota.so\n",
                "/etc/ld.so.preload names /opt/libcuquota.so, which is not there",
            ),
        ] {
            let why = check_preload(Some(text), there).unwrap_err();
            assert!(
                why.starts_with(says) || why.contains(says),
                "{text:?}: {why}"
            );
            assert!(why.contains("add the library's path"), "{why}");
        }
    }

    #[test]
    fn a_node_without_the_policy_names_it() {
        // This test's own process: no policy at a path that does not exist.
        let lines = missing(
            &PathBuf::from("/nonexistent/cuquota.conf"),
            Path::new("/run/cuquota/jobs"),
            42,
        );
        assert!(
            lines[0].starts_with("there is no site policy /nonexistent/cuquota.conf"),
            "{lines:?}"
        );
    }
}
