//! Who a process is as the host sees it. A process in a PID namespace (a container, `unshare
//! --pid`) knows only its own PID there; NVML reports the PID the kernel's outermost view
//! gives, and a viewer on the host lists host PIDs. What a governed process can tell of itself
//! is written into its state files ([`Identity::own`]); a viewer maps that to the host PID it
//! can see ([`host_pid`]) from `/proc`, whose `status` (`NSpid:`) and `cgroup` files every user
//! may read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What a process records of itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// Its PID in the outermost PID namespace its `/proc` shows (the first `NSpid:` field):
    /// the host's PID unless the process mounted a `/proc` of its own namespace.
    pub outer_pid: u32,
    /// The inode of its PID namespace (`/proc/self/ns/pid`; 0 when unknown).
    pub pid_ns: u64,
    /// Its cgroup path (the unified hierarchy's, else the first controller's).
    pub cgroup: String,
}

impl Identity {
    /// This process's.
    pub fn own() -> Identity {
        Identity {
            outer_pid: outer_pid(),
            pid_ns: namespace_inode(Path::new("/proc/self/ns/pid")),
            cgroup: cgroup_path(&std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default()),
        }
    }
}

/// This process's PID in the outermost PID namespace its `/proc` shows.
pub fn outer_pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    nspids(&status).first().copied().unwrap_or(pid)
}

/// The PIDs of `NSpid:` in a `/proc/<pid>/status` text, outermost first.
pub fn nspids(status: &str) -> Vec<u32> {
    (status.lines())
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The four users of `Uid:` in a `/proc/<pid>/status` text (real, effective, saved, file
/// system); None when the line is missing or malformed.
pub fn uids(status: &str) -> Option<[u32; 4]> {
    let rest = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let ids: Vec<u32> = rest
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    ids.try_into().ok()
}

/// The cgroup path of a `/proc/<pid>/cgroup` text: the unified hierarchy's (`0::PATH`),
/// else the `pids`, `memory` or `name=systemd` controller's, else the first line's.
pub fn cgroup_path(text: &str) -> String {
    let lines: Vec<(&str, &str)> = (text.lines())
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            Some((controllers, path))
        })
        .collect();
    let pick = |want: &str| {
        (lines.iter())
            .find(|(c, _)| c.split(',').any(|c| c == want))
            .map(|(_, p)| p.to_string())
    };
    (lines
        .iter()
        .find(|(c, _)| c.is_empty())
        .map(|(_, p)| p.to_string()))
    .filter(|p| p != "/" || lines.len() == 1)
    .or_else(|| pick("pids"))
    .or_else(|| pick("memory"))
    .or_else(|| pick("name=systemd"))
    .or_else(|| lines.first().map(|(_, p)| p.to_string()))
    .unwrap_or_default()
}

/// The container a cgroup path names: the 12-character short form of a 64-hex-digit
/// container id in it (podman's `libpod-ID`, docker's `docker/ID` or `docker-ID.scope`,
/// containerd's and CRI-O's `cri-containerd-ID.scope` / `crio-ID.scope`); None on the host.
pub fn container_of(cgroup: &str) -> Option<String> {
    cgroup.rsplit('/').find_map(|part| {
        let hex: Vec<char> = part.chars().collect();
        (0..hex.len().saturating_sub(63)).find_map(|i| {
            let run = &hex[i..i + 64];
            let whole = run
                .iter()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase());
            let bounded = (i == 0 || !hex[i - 1].is_ascii_hexdigit())
                && hex.get(i + 64).is_none_or(|c| !c.is_ascii_hexdigit());
            (whole && bounded).then(|| run[..12].iter().collect())
        })
    })
}

/// The inode of a namespace link such as `/proc/<pid>/ns/pid` (0: unreadable).
pub fn namespace_inode(link: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(link).map_or(0, |m| m.ino())
}

/// The viewer's `/proc` (normally "/proc"), for naming processes as the viewer sees them:
/// its own PID namespace, and (read once, when first needed) every process in a namespace
/// below it by its innermost PID, so that a view of many containers' processes reads /proc
/// once, not once per process.
pub struct ProcView {
    proc: PathBuf,
    own_ns: u64,
    /// Innermost PID → the viewer's PIDs of the processes whose `NSpid` ends in it.
    nested: Option<HashMap<u32, Vec<u32>>>,
}

impl ProcView {
    pub fn new(proc: &Path) -> ProcView {
        ProcView {
            proc: proc.to_path_buf(),
            own_ns: namespace_inode(&proc.join("self/ns/pid")),
            nested: None,
        }
    }

    /// The PID the viewer's `/proc` gives a process that recorded `pid` (its own PID, as it
    /// saw it) and `who`: the same PID when it lives in the viewer's PID namespace; else the
    /// one process whose innermost `NSpid` is `pid` and whose namespace (where the viewer
    /// may read it) or else cgroup is the recorded one. None when the viewer cannot tell (it
    /// sees no such process, or more than one).
    pub fn host_pid(&mut self, pid: u32, who: &Identity) -> Option<u32> {
        if who.pid_ns != 0 && who.pid_ns == self.own_ns {
            return Some(pid);
        }
        // The PID it recorded as its outermost one is tried first: the host's where it
        // shared the host's /proc.
        if who.outer_pid != pid && self.is(who.outer_pid, pid, who) {
            return Some(who.outer_pid);
        }
        let proc = &self.proc;
        let nested = self.nested.get_or_insert_with(|| nested_pids(proc));
        let candidates = nested.get(&pid).cloned().unwrap_or_default();
        let mut found = candidates.into_iter().filter(|n| self.is(*n, pid, who));
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// Whether a registry file of owner `owner` may speak for the viewer's process `pid`:
    /// the file's owner must be one of the process's users (`Uid:` in its `status`: real,
    /// effective, saved, file system) — or root. True when the viewer cannot see the process
    /// (it cannot tell).
    pub fn may_speak_for(&self, pid: u32, owner: u32) -> bool {
        let status = self.proc.join(pid.to_string()).join("status");
        let Ok(status) = std::fs::read_to_string(status) else {
            return true;
        };
        owner == 0 || uids(&status).is_none_or(|ids| ids.contains(&owner))
    }

    /// Whether the viewer's process `n` is the one that recorded `pid` and `who`.
    fn is(&self, n: u32, pid: u32, who: &Identity) -> bool {
        let dir = self.proc.join(n.to_string());
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            return false;
        };
        let ids = nspids(&status);
        if ids.len() < 2 || ids.last() != Some(&pid) {
            return false;
        }
        match namespace_inode(&dir.join("ns/pid")) {
            0 => std::fs::read_to_string(dir.join("cgroup"))
                .is_ok_and(|t| cgroup_path(&t) == who.cgroup),
            ns => ns == who.pid_ns,
        }
    }
}

/// Every process under `proc` in a PID namespace below the viewer's, by its innermost PID.
fn nested_pids(proc: &Path) -> HashMap<u32, Vec<u32>> {
    let mut by_inner: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir(proc) else {
        return by_inner;
    };
    for n in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
    {
        let status = std::fs::read_to_string(proc.join(n.to_string()).join("status"));
        let ids = nspids(&status.unwrap_or_default());
        if let [_, .., inner] = ids[..] {
            by_inner.entry(inner).or_default().push(n);
        }
    }
    by_inner
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_lines() {
        let status = "Name:\tdlsym\nPid:\t4242\nNSpid:\t4242\t7\t1\nNSpgid:\t4242\n";
        assert_eq!(nspids(status), [4242, 7, 1]);
        assert_eq!(nspids("Name:\tx\n"), Vec::<u32>::new());
    }

    #[test]
    fn a_registry_file_speaks_only_for_its_owners_processes() {
        let status = "Name:\tdlsym\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\n";
        assert_eq!(uids(status), Some([1000; 4]));
        assert_eq!(uids("Uid:\t1\t2\n"), None);
        let proc = std::env::temp_dir().join(format!("cuquota-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&proc);
        std::fs::create_dir_all(proc.join("1022")).unwrap();
        std::fs::write(proc.join("1022/status"), status).unwrap();
        let view = ProcView::new(&proc);
        assert!(view.may_speak_for(1022, 1000));
        assert!(!view.may_speak_for(1022, 1001), "another user's file");
        assert!(view.may_speak_for(1022, 0), "root's");
        assert!(
            view.may_speak_for(1023, 1001),
            "a process the viewer cannot see"
        );
        let _ = std::fs::remove_dir_all(&proc);
    }

    #[test]
    fn cgroup_paths_of_both_hierarchies() {
        assert_eq!(
            cgroup_path("0::/user.slice/session-1.scope\n"),
            "/user.slice/session-1.scope"
        );
        let v1 = "12:pids:/libpod_parent/libpod-abc\n11:memory:/libpod_parent/libpod-abc\n\
                  1:name=systemd:/libpod_parent/libpod-abc\n0::/\n";
        assert_eq!(cgroup_path(v1), "/libpod_parent/libpod-abc");
        assert_eq!(cgroup_path("3:cpu,cpuacct:/x\n"), "/x");
        assert_eq!(cgroup_path("0::/\n"), "/");
        assert_eq!(cgroup_path(""), "");
    }

    #[test]
    fn containers_by_their_ids() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for path in [
            format!("/libpod_parent/libpod-{id}"),
            format!("/machine.slice/libpod-{id}.scope/container"),
            format!("/docker/{id}"),
            format!("/system.slice/docker-{id}.scope"),
            format!("/kubepods/burstable/pod1234/cri-containerd-{id}.scope"),
        ] {
            assert_eq!(
                container_of(&path).as_deref(),
                Some("0123456789ab"),
                "{path}"
            );
        }
        assert_eq!(container_of("/user.slice/session-1.scope"), None);
        assert_eq!(container_of(&format!("/x/{id}0")), None, "65 hex digits");
        assert_eq!(container_of("/"), None);
    }

    #[test]
    fn this_process_is_in_the_viewers_namespace() {
        let me = Identity::own();
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        assert_eq!(me.outer_pid, pid);
        assert_ne!(me.pid_ns, 0);
        assert_eq!(
            ProcView::new(Path::new("/proc")).host_pid(pid, &me),
            Some(pid)
        );
    }
}
