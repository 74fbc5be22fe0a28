//! The policy: a root-owned file (`/etc/cuquota.conf` by default; the path is fixed when the
//! library is built) that sets what a process may have, which the environment can only
//! narrow. `key = value` lines; `#` starts a comment; blank lines are skipped:
//!
//! ```text
//! limit = 0:6GiB,1:50%        # as CUQUOTA_LIMIT
//! group = training            # as CUQUOTA_GROUP: every governed process shares it
//! mode = enforce              # or observe
//! state_dir = /dev/shm/cuquota
//! jobs = /run/cuquota/jobs    # per-job policies written by a scheduler (below)
//! unknown_variants = refuse   # or allow (the default): see below
//! ```
//!
//! `unknown_variants = refuse`: a lookup (`dlsym`, `cuGetProcAddress`) that would hand a
//! program a variant of a hooked driver function that this build of cuquota does not know (a
//! newer driver's `cuMemAlloc_v3`) fails as for an unknown symbol, so calls cannot go around
//! the quota through it. With `allow` the variant is handed out, said in one line and counted.
//!
//! A key given twice, an unknown key or a bad value makes the whole file an error: a policy
//! is never half read. `jobs` names a directory of per-job policies, each named after the
//! job's id as the job's cgroup says it (`job_<N>` in `/proc/self/cgroup`: Slurm's
//! proctrack/cgroup and task/cgroup layouts), which a process in the job cannot change. A
//! job's file has the same keys but `jobs` and narrows the main policy.
//!
//! Trust: the file (after symbolic links: a Kubernetes ConfigMap is a link) and the jobs
//! directory must be owned by root and writable by nobody else; anything else is refused,
//! with the reason, and the caller fails closed.

use cuquota_format::settings::{parse_limits, parse_mode, Limits};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The policy file's default path (the library's is fixed when it is built).
pub const DEFAULT_PATH: &str = "/etc/cuquota.conf";
/// The largest policy file read (it is a few lines).
const MAX_BYTES: u64 = 64 * 1024;

/// What a policy file says. Every key is optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// `limit`: as `CUQUOTA_LIMIT`.
    pub limits: Option<Limits>,
    /// `group`: a group name.
    pub group: Option<String>,
    /// `mode`: `true` for enforce, `false` for observe.
    pub enforce: Option<bool>,
    /// `state_dir`: where the group's state lives.
    pub state_dir: Option<PathBuf>,
    /// `jobs`: the directory of per-job policies (main policy only).
    pub jobs: Option<PathBuf>,
    /// `unknown_variants`: `true` for refuse, `false` for allow.
    pub refuse_unknown_variants: Option<bool>,
}

/// A policy file looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// No such file: no policy.
    Absent,
    /// Read, trusted and parsed (with the path it came from).
    Trusted(PathBuf, Policy),
    /// There, but not to be used: why (names the path). The caller fails closed.
    Refused(String),
}

/// Parses a policy's text. `job`: a per-job file, which may not name `jobs`.
pub fn parse(text: &str, job: bool) -> Result<Policy, String> {
    let mut p = Policy::default();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |why: String| format!("line {}: {why}", n + 1);
        let (key, value) = line
            .split_once('=')
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim()))
            .ok_or_else(|| at(format!("{line:?} is not `key = value`")))?;
        if value.is_empty() {
            return Err(at(format!("{key} has no value")));
        }
        let twice = || at(format!("{key} is given twice"));
        match key.as_str() {
            "limit" => {
                let l = parse_limits(value).map_err(|e| at(format!("limit = {value}: {e}")))?;
                p.limits.replace(l).map_or(Ok(()), |_| Err(twice()))?;
            }
            "group" => {
                crate::group::check_name(value).map_err(at)?;
                p.group
                    .replace(value.to_string())
                    .map_or(Ok(()), |_| Err(twice()))?;
            }
            "mode" => {
                let m = parse_mode(value)
                    .ok_or_else(|| at(format!("mode = {value}: use enforce or observe")))?;
                p.enforce.replace(m).map_or(Ok(()), |_| Err(twice()))?;
            }
            "state_dir" | "jobs" => {
                if !value.starts_with('/') {
                    return Err(at(format!("{key} = {value}: an absolute path is needed")));
                }
                if key == "jobs" && job {
                    return Err(at(
                        "a job's policy cannot name another jobs directory".into()
                    ));
                }
                let slot = if key == "jobs" {
                    &mut p.jobs
                } else {
                    &mut p.state_dir
                };
                slot.replace(value.into())
                    .map_or(Ok(()), |_| Err(twice()))?;
            }
            "unknown_variants" => {
                let refuse = match value {
                    "refuse" => true,
                    "allow" => false,
                    _ => {
                        return Err(at(format!(
                            "unknown_variants = {value}: use refuse or allow"
                        )))
                    }
                };
                p.refuse_unknown_variants
                    .replace(refuse)
                    .map_or(Ok(()), |_| Err(twice()))?;
            }
            _ => {
                return Err(at(format!(
                    "unknown key {key:?} (use limit, group, mode, state_dir, jobs or \
                     unknown_variants)"
                )))
            }
        }
    }
    Ok(p)
}

/// Whether a file or directory of owner `uid` and `mode` may carry a policy: root's, and
/// writable by nobody else. The error says why not.
pub fn check_trust(uid: u32, mode: u32) -> Result<(), String> {
    if uid != 0 {
        return Err(format!("owned by uid {uid}, not root"));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "writable by its group or others (mode {:o})",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// Reads the policy at `path` (the file, following links, checked on the descriptor read).
pub fn load(path: &Path, job: bool) -> Loaded {
    let refused = |why: String| Loaded::Refused(format!("the policy {} {why}", path.display()));
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Absent,
        Err(e) => return refused(format!("cannot be read: {e}")),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return refused(format!("cannot be read: {e}")),
    };
    if !meta.is_file() {
        return refused("is not a regular file".into());
    }
    if let Err(why) = check_trust(meta.uid(), meta.mode()) {
        return refused(format!("is {why}"));
    }
    let mut text = String::new();
    if let Err(e) = (&mut file).take(MAX_BYTES).read_to_string(&mut text) {
        return refused(format!("cannot be read: {e}"));
    }
    match parse(&text, job) {
        Ok(p) => Loaded::Trusted(path.to_path_buf(), p),
        Err(why) => refused(format!("is not valid: {why}")),
    }
}

/// The job's id, as its cgroup names it (`/proc/self/cgroup`): the first path component of
/// the form `job_<digits>` (Slurm: `/slurm/uid_1000/job_42/step_0` with cgroup v1,
/// `/system.slice/slurmstepd.scope/job_42/step_0/user/task_0` with v2).
pub fn job_key(cgroup: &str) -> Option<String> {
    cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .flat_map(|path| path.split('/'))
        .filter_map(|c| c.strip_prefix("job_"))
        .find(|id| !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_string)
}

/// The policy of job `key` under `jobs` (the directory checked as the file is). Absent when
/// the job has none (a job the scheduler put under no quota).
pub fn load_job(jobs: &Path, key: &str) -> Loaded {
    match std::fs::metadata(jobs) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Absent,
        Err(e) => return Loaded::Refused(format!("the jobs directory {}: {e}", jobs.display())),
        Ok(m) => {
            if let Err(why) = check_trust(m.uid(), m.mode()) {
                return Loaded::Refused(format!("the jobs directory {} is {why}", jobs.display()));
            }
        }
    }
    load(&jobs.join(key), true)
}

/// The main policy narrowed by a job's: enforce if either says so, the job's group and
/// state directory where it names them. Limits are not merged here: both bound the process
/// (see [`ceilings`]).
pub fn narrow(main: &Policy, job: &Policy) -> Policy {
    Policy {
        limits: None,
        group: job.group.clone().or_else(|| main.group.clone()),
        enforce: match (main.enforce, job.enforce) {
            (Some(a), Some(b)) => Some(a || b),
            (a, b) => a.or(b),
        },
        state_dir: job.state_dir.clone().or_else(|| main.state_dir.clone()),
        jobs: main.jobs.clone(),
        refuse_unknown_variants: match (main.refuse_unknown_variants, job.refuse_unknown_variants) {
            (Some(a), Some(b)) => Some(a || b),
            (a, b) => a.or(b),
        },
    }
}

/// Every limit the policies set: a process's limit on a GPU is the smallest of them.
pub fn ceilings(main: &Policy, job: Option<&Policy>) -> Vec<Limits> {
    let job = job.and_then(|j| j.limits.clone());
    main.limits.clone().into_iter().chain(job).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuquota_format::units::Size;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn every_key() {
        let p = parse(
            "# site policy\n limit = 0:6GiB, 1:50%\ngroup=train-1 # shared\n\
             MODE = Observe\nstate_dir = /run/cq\njobs = /run/cuquota/jobs\n\n",
            false,
        )
        .unwrap();
        assert_eq!(p.limits, Some(parse_limits("0:6GiB,1:50%").unwrap()));
        assert_eq!(p.group.as_deref(), Some("train-1"));
        assert_eq!(p.enforce, Some(false));
        assert_eq!(p.state_dir, Some("/run/cq".into()));
        assert_eq!(p.jobs, Some("/run/cuquota/jobs".into()));
        assert_eq!(p.refuse_unknown_variants, None);
        assert_eq!(parse("", false).unwrap(), Policy::default());
        let refuse = |text| parse(text, false).map(|p| p.refuse_unknown_variants);
        assert_eq!(refuse("unknown_variants = refuse"), Ok(Some(true)));
        assert_eq!(refuse("unknown_variants = allow"), Ok(Some(false)));
        assert!(refuse("unknown_variants = maybe").is_err());
        assert!(refuse("unknown_variants = refuse\nunknown_variants = allow").is_err());
    }

    #[test]
    fn anything_wrong_refuses_the_whole_file() {
        for (text, why) in [
            ("limit = 6GiB\nlimit = 7GiB", "line 2: limit is given twice"),
            ("limit 6GiB", "line 1: \"limit 6GiB\" is not `key = value`"),
            ("limit =", "line 1: limit has no value"),
            ("limit = 1.5", "line 1: limit = 1.5: \"1.5\" has no unit"),
            ("mode = lax", "line 1: mode = lax: use enforce or observe"),
            ("group = a/b", "line 1: a group name is"),
            (
                "jobs = run/jobs",
                "line 1: jobs = run/jobs: an absolute path",
            ),
            ("limits = 6GiB", "line 1: unknown key \"limits\""),
        ] {
            let e = parse(text, false).unwrap_err();
            assert!(e.starts_with(why), "{text:?}: {e}");
        }
        let e = parse("jobs = /x", true).unwrap_err();
        assert!(e.contains("cannot name another jobs"), "{e}");
    }

    #[test]
    fn only_root_and_nobody_else_writing() {
        assert_eq!(check_trust(0, 0o100644), Ok(()));
        assert_eq!(check_trust(0, 0o100600), Ok(()));
        assert_eq!(check_trust(0, 0o040755), Ok(()));
        assert_eq!(
            check_trust(1000, 0o100644).unwrap_err(),
            "owned by uid 1000, not root"
        );
        assert_eq!(
            check_trust(0, 0o100664).unwrap_err(),
            "writable by its group or others (mode 664)"
        );
        assert!(check_trust(0, 0o100646).is_err());
        assert!(check_trust(0, 0o041777).is_err());
    }

    #[test]
    fn job_ids_from_cgroups() {
        let v1 = "12:freezer:/slurm/uid_1000/job_42/step_0\n3:cpu:/\n";
        assert_eq!(job_key(v1).as_deref(), Some("42"));
        let v2 = "0::/system.slice/slurmstepd.scope/job_7/step_batch/user/task_0\n";
        assert_eq!(job_key(v2).as_deref(), Some("7"));
        for none in ["0::/\n", "0::/user.slice/job_x\n", "0::/job_/a\n", ""] {
            assert_eq!(job_key(none), None, "{none}");
        }
    }

    #[test]
    fn a_job_narrows_the_main_policy() {
        let main = parse(
            "limit = 6GiB\nmode = observe\ngroup = site\njobs = /j",
            false,
        )
        .unwrap();
        let job = parse("limit = 1GiB\ngroup = job-5\nmode = enforce", true).unwrap();
        let p = narrow(&main, &job);
        assert_eq!(
            ceilings(&main, Some(&job)),
            [
                Limits::All(Size::Bytes(6 << 30)),
                Limits::All(Size::Bytes(1 << 30))
            ]
        );
        assert_eq!((p.group.as_deref(), p.enforce), (Some("job-5"), Some(true)));
        let p = narrow(&main, &Policy::default());
        assert_eq!(ceilings(&main, None), [Limits::All(Size::Bytes(6 << 30))]);
        assert_eq!((p.group.as_deref(), p.enforce), (Some("site"), Some(false)));
        let p = narrow(
            &parse("mode = enforce", false).unwrap(),
            &parse("mode = observe", true).unwrap(),
        );
        assert_eq!(p.enforce, Some(true), "a job cannot lift enforce");
        let p = narrow(
            &parse("unknown_variants = refuse", false).unwrap(),
            &parse("unknown_variants = allow", true).unwrap(),
        );
        assert_eq!(
            p.refuse_unknown_variants,
            Some(true),
            "a job cannot lift refuse"
        );
        let p = narrow(
            &Policy::default(),
            &parse("unknown_variants = refuse", true).unwrap(),
        );
        assert_eq!(p.refuse_unknown_variants, Some(true));
    }

    #[test]
    fn files_are_checked_on_what_was_opened() {
        let d = std::env::temp_dir().join(format!("cuquota-policy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("cuquota.conf");
        assert_eq!(load(&f, false), Loaded::Absent);
        std::fs::write(&f, "limit = 1GiB\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        // SAFETY: getuid has no preconditions.
        let root = unsafe { libc::getuid() } == 0;
        match load(&f, false) {
            Loaded::Trusted(path, p) => {
                assert!(root);
                assert_eq!(
                    (path, p.limits),
                    (f.clone(), Some(parse_limits("1GiB").unwrap()))
                );
            }
            Loaded::Refused(why) => {
                assert!(!root);
                assert!(why.contains("not root"), "{why}");
            }
            Loaded::Absent => panic!("absent"),
        }
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        let Loaded::Refused(why) = load(&f, false) else {
            panic!("a file others may write is trusted")
        };
        assert!(
            why.starts_with(&format!("the policy {} is ", f.display())),
            "{why}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
