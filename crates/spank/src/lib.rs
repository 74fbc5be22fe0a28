//! cuquota's Slurm SPANK plugin (`libcuquota_spank.so`). `--gpu-mem=SIZE` on `srun`,
//! `sbatch` or `salloc` (`6GiB`, `75%`, or per GPU `0:6GiB,1:50%`, as `CUQUOTA_LIMIT`)
//! puts every task of the job into one cuquota group, `slurm-job-<id>`, with that limit
//! per GPU, shared by all the job's tasks on a node.
//!
//! Root does it all: the job prolog (slurmd, as root) writes the job's policy,
//! `<jobs>/<id>` (root's, mode 0644: `limit`, `group`, `mode = enforce`), under the jobs
//! directory the site's `/etc/cuquota.conf` names; the library in each task finds it by the
//! job's cgroup (`job_<id>` in `/proc/self/cgroup`), which the task cannot change, and the
//! task's variables can only narrow it. The job epilog (root) removes the policy and the
//! group's state.
//!
//! A job asking `--gpu-mem` never runs unlimited in silence: each task, just before it
//! starts, checks that its node has every piece that limit needs (the site policy naming the
//! jobs directory, the job cgroup, the library in /etc/ld.so.preload; see [`node`]) and
//! otherwise does not start, with one line per missing piece on the job's stderr.
//!
//! Arguments in plugstack.conf: `jobs=DIR` (default `/run/cuquota/jobs`) and
//! `state_dir=DIR` (default `/dev/shm/cuquota`), the same as the policy's, and
//! `policy=FILE`, the site policy the library reads (default `/etc/cuquota.conf`, or the
//! `CUQUOTA_BUILD_POLICY_PATH` the plugin is built with, as the library).
//!
//! The SPANK declarations are written by hand from `slurm/spank.h` (no bindings crate);
//! `plugin_version` is the Slurm release it is built for (build.rs).

pub mod node;

use cuquota_state::trusted::TrustedDir;
use std::ffi::c_uint;
use std::path::{Path, PathBuf};

/// The plugin's loader symbols (`SPANK_PLUGIN(cuquota, 1)`).
#[no_mangle]
pub static plugin_name: [u8; 8] = *b"cuquota\0";
#[no_mangle]
pub static plugin_type: [u8; 6] = *b"spank\0";
#[no_mangle]
pub static plugin_version: c_uint = parse_u32(env!("CUQUOTA_SLURM_VERSION_NUMBER"));
#[no_mangle]
pub static spank_plugin_version: c_uint = 1;

/// The Slurm release this build is for, as `major.minor`.
pub const SLURM_RELEASE: &str = env!("CUQUOTA_SLURM_VERSION_TEXT");
pub const DEFAULT_JOBS: &str = "/run/cuquota/jobs";
pub const DEFAULT_STATE_DIR: &str = "/dev/shm/cuquota";
/// The site policy's path, as the library's build has it.
pub const DEFAULT_POLICY: &str = match option_env!("CUQUOTA_BUILD_POLICY_PATH") {
    Some(path) => path,
    None => cuquota_state::policy::DEFAULT_PATH,
};

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n = 0u32;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}

/// The group a job's tasks share.
pub fn group_name(job: u32) -> String {
    format!("slurm-job-{job}")
}

/// The job's policy file's text.
pub fn job_policy(job: u32, limit: &str) -> String {
    format!(
        "# written by cuquota's SPANK plugin for Slurm job {job} (--gpu-mem={limit})\n\
         limit = {limit}\ngroup = {}\nmode = enforce\n",
        group_name(job)
    )
}

/// The plugin's arguments from plugstack.conf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// `jobs=`: where the job prolog writes each job's policy.
    pub jobs: PathBuf,
    /// `state_dir=`: where the groups' state lives.
    pub state_dir: PathBuf,
    /// `policy=`: the site policy the library reads.
    pub policy: PathBuf,
}

pub fn parse_args<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Args, String> {
    let mut parsed = Args {
        jobs: DEFAULT_JOBS.into(),
        state_dir: DEFAULT_STATE_DIR.into(),
        policy: DEFAULT_POLICY.into(),
    };
    for a in args {
        match a.split_once('=') {
            Some(("jobs", d)) if d.starts_with('/') => parsed.jobs = d.into(),
            Some(("state_dir", d)) if d.starts_with('/') => parsed.state_dir = d.into(),
            Some(("policy", f)) if f.starts_with('/') => parsed.policy = f.into(),
            _ => {
                return Err(format!(
                    "unknown argument {a:?} (use jobs=/DIR, state_dir=/DIR or policy=/FILE)"
                ))
            }
        }
    }
    Ok(parsed)
}

/// The lines that refuse job `job`'s tasks on a node (empty: they may start): one per
/// missing piece, each whole on one line (slurmstepd prefixes its node's name).
pub fn refusal(job: u32, limit: &str, missing: &[String]) -> Vec<String> {
    (missing.iter())
        .map(|why| {
            format!(
                "cuquota: job {job}'s --gpu-mem={limit} cannot be enforced on this node, so \
                 the job does not start here: {why}"
            )
        })
        .collect()
}

/// A light check of `--gpu-mem`'s value where the user typed it (the library checks it in
/// full, and fails the job's CUDA calls closed on a value it refuses): sizes with a unit or
/// `%`, optionally `GPU:` first, separated by commas.
pub fn check_limit(text: &str) -> Result<(), String> {
    let bad = || {
        Err(format!(
            "--gpu-mem={text:?} is not valid: use e.g. --gpu-mem=6GiB, 75% or 0:6GiB,1:50%"
        ))
    };
    if text.is_empty() || text.len() > 1024 {
        return bad();
    }
    let per_gpu = text.contains(':');
    for entry in text.split(',') {
        let size = match entry.split_once(':') {
            Some((gpu, size)) if per_gpu => {
                let gpu = gpu.trim();
                let uuid = gpu.len() > 4 && gpu[..4].eq_ignore_ascii_case("gpu-");
                if !uuid && (gpu.is_empty() || !gpu.bytes().all(|b| b.is_ascii_digit())) {
                    return bad();
                }
                size.trim()
            }
            None if !per_gpu => entry.trim(),
            _ => return bad(),
        };
        let digits = size
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(size.len());
        let (number, unit) = size.split_at(digits);
        let units = [
            "", "%", "k", "m", "g", "t", "ki", "mi", "gi", "ti", "kib", "mib", "gib", "tib", "kb",
            "mb", "gb", "tb", "b",
        ];
        if number.is_empty() || number.matches('.').count() > 1 {
            return bad();
        }
        if !units.contains(&unit.to_ascii_lowercase().as_str()) {
            return bad();
        }
    }
    Ok(())
}

/// Writes job `job`'s policy under `jobs` (made mode 0755 if missing): a whole file, mode
/// 0644, renamed into place.
pub fn write_job_policy(jobs: &Path, job: u32, limit: &str) -> Result<PathBuf, String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let fail = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(jobs)
        .map_err(|e| fail("cannot make", jobs, e))?;
    let path = jobs.join(job.to_string());
    let tmp = jobs.join(format!(".{job}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(|e| fail("cannot write", &tmp, e))?;
    f.write_all(job_policy(job, limit).as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| fail("cannot write", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| fail("cannot write", &path, e))?;
    Ok(path)
}

/// At the job's end: its policy and its group's state go. The group's file is removed
/// through the trusted groups directory's descriptor, and only when it is a regular file
/// (the state directory's trust rule: no link followed, nothing outside it removed).
pub fn remove_job(jobs: &Path, state_dir: &Path, job: u32) {
    let _ = std::fs::remove_file(jobs.join(job.to_string()));
    if let Ok(dir) = TrustedDir::open(state_dir, false).and_then(|d| d.sub("groups", false)) {
        let _ = dir.remove_file(&group_name(job));
    }
}

// ---- the SPANK side (not in unit tests: its symbols come from the Slurm process) ----------

#[cfg(not(test))]
mod spank {
    use super::*;
    use std::ffi::{c_char, c_int, c_void, CStr, CString};

    type SpankT = *mut c_void;
    type OptCb = Option<unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int>;

    /// `struct spank_option` (spank.h).
    #[repr(C)]
    struct SpankOption {
        name: *const c_char,
        arginfo: *const c_char,
        usage: *const c_char,
        has_arg: c_int,
        val: c_int,
        cb: OptCb,
    }

    // `enum spank_item`: S_JOB_ID, S_TASK_ID (the task's id on its node).
    const S_JOB_ID: c_int = 2;
    const S_TASK_ID: c_int = 11;
    const ESPANK_SUCCESS: c_int = 0;
    const SLURM_ERROR: c_int = -1;

    extern "C" {
        fn spank_option_register(spank: SpankT, opt: *mut SpankOption) -> c_int;
        fn spank_option_getopt(
            spank: SpankT,
            opt: *mut SpankOption,
            arg: *mut *mut c_char,
        ) -> c_int;
        fn spank_get_item(spank: SpankT, item: c_int, ...) -> c_int;
        fn slurm_error(format: *const c_char, ...);
    }

    static mut OPTION: SpankOption = SpankOption {
        name: c"gpu-mem".as_ptr(),
        arginfo: c"SIZE".as_ptr(),
        usage: c"GPU memory for the whole job on each node, per GPU, shared by all its tasks \
                 (cuquota): 6GiB, 75% or per GPU 0:6GiB,1:50%"
            .as_ptr(),
        has_arg: 1,
        val: 0,
        cb: Some(check_option),
    };

    fn error(text: &str) {
        let text = if text.starts_with("cuquota: ") {
            text.to_string()
        } else {
            format!("cuquota: {text}")
        };
        let line = CString::new(text).unwrap_or_default();
        // SAFETY: a "%s" format with one C string.
        unsafe { slurm_error(c"%s".as_ptr(), line.as_ptr()) };
    }

    fn args<'a>(ac: c_int, av: *mut *mut c_char) -> Vec<&'a str> {
        (0..ac.max(0) as usize)
            // SAFETY: Slurm passes `ac` valid C strings in `av`.
            .filter_map(|i| unsafe { CStr::from_ptr(*av.add(i)) }.to_str().ok())
            .collect()
    }

    unsafe extern "C" fn check_option(_val: c_int, arg: *const c_char, _remote: c_int) -> c_int {
        // SAFETY: Slurm passes the option's argument as a C string (or null).
        let text = (!arg.is_null()).then(|| unsafe { CStr::from_ptr(arg) }.to_string_lossy());
        match check_limit(text.as_deref().unwrap_or("")) {
            Ok(()) => 0,
            Err(why) => {
                error(&why);
                SLURM_ERROR
            }
        }
    }

    /// The option's value when the job gave it, and the job's id.
    fn used(spank: SpankT) -> Option<(String, u32)> {
        let mut arg: *mut c_char = std::ptr::null_mut();
        // SAFETY: OPTION is the registered option; arg receives a pointer Slurm owns.
        let rc = unsafe { spank_option_getopt(spank, &raw mut OPTION, &mut arg) };
        if rc != ESPANK_SUCCESS || arg.is_null() {
            return None;
        }
        // SAFETY: as above.
        let value = unsafe { CStr::from_ptr(arg) }
            .to_string_lossy()
            .into_owned();
        job_id(spank).map(|id| (value, id))
    }

    fn job_id(spank: SpankT) -> Option<u32> {
        let mut id: u32 = 0;
        // SAFETY: S_JOB_ID takes a uint32_t *.
        (unsafe { spank_get_item(spank, S_JOB_ID, &mut id as *mut u32) } == ESPANK_SUCCESS)
            .then_some(id)
    }

    #[no_mangle]
    pub unsafe extern "C" fn slurm_spank_init(
        spank: SpankT,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        if let Err(why) = parse_args(args(ac, av)) {
            error(&why);
            return SLURM_ERROR;
        }
        // SAFETY: registered once per process, from slurm_spank_init as spank.h requires.
        unsafe { spank_option_register(spank, &raw mut OPTION) };
        0
    }

    /// Root, on each node before the job's first step: the job's policy.
    #[no_mangle]
    pub unsafe extern "C" fn slurm_spank_job_prolog(
        spank: SpankT,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        let Some((limit, job)) = used(spank) else {
            return 0;
        };
        let written = check_limit(&limit)
            .and_then(|()| parse_args(args(ac, av)))
            .and_then(|args| write_job_policy(&args.jobs, job, &limit));
        match written {
            Ok(_) => 0,
            Err(why) => {
                error(&format!("job {job}: {why}; the job does not start"));
                SLURM_ERROR
            }
        }
    }

    /// Root, on each node at the job's end: its policy and group state go.
    #[no_mangle]
    pub unsafe extern "C" fn slurm_spank_job_epilog(
        spank: SpankT,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        if let (Some(job), Ok(args)) = (job_id(spank), parse_args(args(ac, av))) {
            remove_job(&args.jobs, &args.state_dir, job);
        }
        0
    }

    /// In each task (as the job's user, in its cgroup, stdio already the job's) just before
    /// it runs the user's program: a node that cannot hold the job to `--gpu-mem` refuses
    /// it. Every task fails (exit 1, nothing of the user's run); the node's first one says
    /// why, one line per missing piece, through slurm_error, which slurmstepd writes both to
    /// the task's stderr (srun's) and to slurmd's log.
    #[no_mangle]
    pub unsafe extern "C" fn slurm_spank_task_init(
        spank: SpankT,
        ac: c_int,
        av: *mut *mut c_char,
    ) -> c_int {
        let Some((limit, job)) = used(spank) else {
            return 0;
        };
        let args = args(ac, av);
        let lines = std::panic::catch_unwind(|| match parse_args(args) {
            Ok(args) => refusal(job, &limit, &node::missing(&args.policy, &args.jobs, job)),
            Err(why) => vec![format!("cuquota: job {job}: plugstack.conf: {why}")],
        })
        .unwrap_or_else(|_| vec![format!("cuquota: job {job}: the node check failed")]);
        if lines.is_empty() {
            return 0;
        }
        let mut task: c_int = -1;
        // SAFETY: S_TASK_ID takes an int *.
        let rc = unsafe { spank_get_item(spank, S_TASK_ID, &mut task as *mut c_int) };
        if rc != ESPANK_SUCCESS || task == 0 {
            lines.iter().for_each(|line| error(line));
        }
        SLURM_ERROR
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_checked_where_typed() {
        for ok in [
            "6GiB",
            "75%",
            "0:6GiB,1:50%",
            "1.5G",
            "512MiB",
            "4294967296",
            "GPU-0a1b:2G",
        ] {
            assert_eq!(check_limit(ok), Ok(()), "{ok}");
        }
        for bad in ["", "lots", "6GiB,1:2G", "x:1G", "1..5G", "6 parsecs", "0:"] {
            assert!(check_limit(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn arguments_and_files() {
        assert_eq!(
            parse_args([]).unwrap(),
            Args {
                jobs: DEFAULT_JOBS.into(),
                state_dir: DEFAULT_STATE_DIR.into(),
                policy: DEFAULT_POLICY.into()
            }
        );
        assert_eq!(
            parse_args(["jobs=/j", "state_dir=/s", "policy=/p.conf"]).unwrap(),
            Args {
                jobs: "/j".into(),
                state_dir: "/s".into(),
                policy: "/p.conf".into()
            }
        );
        assert!(parse_args(["jobs=relative"]).is_err());
        assert!(parse_args(["policy=p.conf"]).is_err());
        assert_eq!(
            refusal(
                7,
                "1GiB",
                &["there is no site policy /etc/cuquota.conf".into()]
            ),
            [
                "cuquota: job 7's --gpu-mem=1GiB cannot be enforced on this node, so the job does \
              not start here: there is no site policy /etc/cuquota.conf"
            ]
        );
        assert!(refusal(7, "1GiB", &[]).is_empty());
        assert_eq!(
            job_policy(42, "1GiB"),
            "# written by cuquota's SPANK plugin for Slurm job 42 (--gpu-mem=1GiB)\n\
             limit = 1GiB\ngroup = slurm-job-42\nmode = enforce\n"
        );
        assert_eq!(
            plugin_version >> 16,
            SLURM_RELEASE
                .split('.')
                .next()
                .unwrap()
                .parse::<u32>()
                .unwrap()
        );
    }
}
