//! Every governed process, visible while it lives: one file per process under
//! `STATE_DIR/processes/`, holding the process's own per-GPU counters — the very counters its
//! quota charges (the interposer keeps its books in this mapping), so that `cuquota top` and
//! `cuquota metrics` read the live figures with no work added to an allocation.
//!
//! A process holds an open-file-description lock on byte 0 of its file for its life; a file
//! whose lock anyone can take belongs to a dead process and is never listed (the next
//! process to register removes it). Viewers open files read-only and only read.

use crate::identity::Identity;
use crate::shared::{self, SharedFile};
use crate::trusted::{self, Refusal, TrustedDir};
use cuquota_format::part::{Part, PerPart};
use cuquota_format::settings::MAX_DEVICES;
use std::path::{Path, PathBuf};
use std::sync::atomic::{
    AtomicPtr, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

const MAGIC: u64 = u64::from_le_bytes(*b"CUQPROC1");
/// The layout's version: a file of another version is skipped with a note.
pub const LAYOUT_VERSION: u64 = 3;
/// A limit not resolved yet (the process has not used the GPU), and no limit.
pub const UNRESOLVED: u64 = u64::MAX;
pub const UNLIMITED: u64 = u64::MAX - 1;
const PARTS: usize = Part::ALL.len();

/// The file's first bytes: who the process is.
#[repr(C)]
pub struct ProcessHeader {
    magic: AtomicU64,
    version: AtomicU64,
    size: AtomicU64,
    pub pid: AtomicU64,
    pub started_unix_ns: AtomicU64,
    host: [AtomicU64; 8],
    group: [AtomicU64; 8],
    argv: [AtomicU64; 64],
    /// 0 enforce, 1 observe.
    pub observe: AtomicU64,
    /// 0 the footprint, 1 allocations.
    pub allocations_only: AtomicU64,
    /// Bumped before and after the last refusal's words are written (odd: being written).
    pub refusal_seq: AtomicU64,
    pub refusal_unix_ns: AtomicU64,
    pub refusal_device: AtomicU64,
    refusal: [AtomicU64; 40],
    /// Who it is as the host sees it: see [`Identity`].
    pub outer_pid: AtomicU64,
    pub pid_ns: AtomicU64,
    cgroup: [AtomicU64; 32],
}

/// What a GPU is, written when the process first uses it.
#[repr(C)]
pub struct DeviceInfo {
    /// 0: not used yet; 1: `uuid`, `total` and `name` are set.
    pub state: AtomicU64,
    pub uuid: [AtomicU64; 2],
    pub total: AtomicU64,
    name: [AtomicU64; 8],
}

/// One GPU's counters: the very atomics the interposer's quota charges (its `DeviceQuota`
/// wraps this type), read live by the viewers.
///
/// Laid out for threads that allocate at once: what reservations, commits and releases
/// write shares one 128-byte line (two 64-byte lines: some CPUs fetch lines in pairs), and
/// what every call only reads — the limit, the peak, the group link — is on another, so that
/// reading it never waits for the line the other threads are writing. The reservation's
/// compare-and-swap on `in_use` is the one point where the quota is decided; `held`, the
/// allocation count and the parts move with it on its line (a commit writes the count then
/// `held`, a release `held` then `in_use`, each pair back to back on a line already fetched).
///
/// Why nothing here is striped per thread: the peak is the highest `held` ever was, and it
/// must never count a request in flight that the driver then fails. Its exact value needs
/// `held` exact at every commit: a striped `held` has no moment at which its sum is known
/// to a writer (a sum read stripe by stripe while others move can exceed any value `held`
/// ever had: a free counted on one stripe before it is read, an allocation of the same
/// bytes on another after), and a peak taken at the reservation's new `in_use` counts other
/// threads' requests in flight, refused ones among them. So a commit adds to the one `held`
/// and learns the exact total it made, the peak's candidate. With `held` shared, striping
/// the allocation count gains nothing: its addition sits beside `held`'s, on the line the
/// commit fetches anyway.
#[derive(Debug)]
#[repr(C, align(128))]
pub struct Counters {
    /// Reserved or held: what a reservation is checked against.
    pub in_use: AtomicU64,
    /// Held: committed by the driver's success, not yet freed. The peak is of this, so that
    /// another thread's request in flight (and then refused) never counts as held.
    pub held: AtomicU64,
    pub allocations: AtomicU64,
    /// Bytes of each [`Part`] held (inside `held`), indexed by the part.
    pub parts: [AtomicU64; PARTS],
    _hot_end: [u64; 16 - 3 - PARTS],
    /// Bytes, [`UNLIMITED`], or [`UNRESOLVED`] until the first use resolves it (a
    /// percentage needs the device's memory); a group member's stays unresolved (the
    /// group's limit applies).
    pub limit: AtomicU64,
    pub peak: AtomicU64,
    pub refusals: AtomicU64,
    /// Each part's highest value.
    pub part_peaks: [AtomicU64; PARTS],
    /// cuquota's own trims of the process's pools and graph memory, and what they gave back.
    pub trims: AtomicU64,
    pub trimmed: AtomicU64,
    /// The owning process's own pointer (the interposer's group link for this GPU; null:
    /// none), meaningless to anyone else: viewers never read it.
    pub link: AtomicPtr<()>,
    _cold_end: [u64; 16 - 6 - PARTS],
}

// The file's layout (version 3): two 128-byte lines, the link one 8-byte word.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<Counters>() == 256 && align_of::<Counters>() == 128);
    assert!(size_of::<AtomicPtr<()>>() == size_of::<u64>());
    assert!(offset_of!(Counters, limit) == 128);
    assert!(offset_of!(Counters, link) == 128 + 8 * (5 + PARTS));
};

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}

impl Counters {
    /// Nothing counted, the limit unresolved, no link.
    pub const fn new() -> Counters {
        Counters {
            in_use: AtomicU64::new(0),
            held: AtomicU64::new(0),
            allocations: AtomicU64::new(0),
            parts: [const { AtomicU64::new(0) }; PARTS],
            _hot_end: [0; 16 - 3 - PARTS],
            limit: AtomicU64::new(UNRESOLVED),
            peak: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            part_peaks: [const { AtomicU64::new(0) }; PARTS],
            trims: AtomicU64::new(0),
            trimmed: AtomicU64::new(0),
            link: AtomicPtr::new(std::ptr::null_mut()),
            _cold_end: [0; 16 - 6 - PARTS],
        }
    }

    /// What the counters say now, each read on its own (not one instant across them). The
    /// limit is the counter's own: see [`Usage::limit`].
    pub fn usage(&self) -> Usage {
        Usage {
            limit: Some(self.limit.load(Relaxed)).filter(|l| *l < UNLIMITED),
            in_use: self.in_use.load(Relaxed),
            held: self.held.load(Relaxed),
            peak: self.peak.load(Relaxed),
            allocations: self.allocations.load(Relaxed),
            refusals: self.refusals.load(Relaxed),
            parts: PerPart::from_fn(|p| self.parts[p as usize].load(Relaxed)),
            part_peaks: PerPart::from_fn(|p| self.part_peaks[p as usize].load(Relaxed)),
            trims: self.trims.load(Relaxed),
            trimmed: self.trimmed.load(Relaxed),
        }
    }
}

/// One GPU's [`Counters`] read at a moment: what the viewers show and the exit summary says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// As [`Counters::usage`] reads it, the counter's own: None when unlimited, unresolved,
    /// or a group member's (the group's applies). The interposer's own reading
    /// (`DeviceQuota::usage`) puts the limit in force there instead, a group's included.
    pub limit: Option<u64>,
    pub in_use: u64,
    pub held: u64,
    pub peak: u64,
    pub allocations: u64,
    pub refusals: u64,
    /// Each [`Part`]'s bytes now and its peak.
    pub parts: PerPart<u64>,
    pub part_peaks: PerPart<u64>,
    pub trims: u64,
    pub trimmed: u64,
}

impl Usage {
    /// Live allocations alone: the footprint less its other parts.
    pub fn allocations_bytes(&self) -> u64 {
        self.in_use.saturating_sub(self.parts.total())
    }
}

/// The whole file.
#[repr(C)]
pub struct ProcessLayout {
    pub header: ProcessHeader,
    pub info: [DeviceInfo; MAX_DEVICES],
    pub counters: [Counters; MAX_DEVICES],
}

pub const FILE_SIZE: usize = std::mem::size_of::<ProcessLayout>();

/// Who registers.
pub struct Registration<'a> {
    pub pid: u32,
    pub started_unix_ns: u64,
    pub host: &'a str,
    pub argv: &'a [String],
    pub group: Option<&'a str>,
    pub observe: bool,
    pub allocations_only: bool,
    pub identity: &'a Identity,
}

/// This process's registered file. Kept for the process's life (its lock says it lives).
pub struct ProcessFile {
    file: SharedFile,
}

impl ProcessFile {
    /// Registers this process under `state_dir`: removes files of dead processes it can,
    /// creates its own, takes its life lock and publishes it. A directory that breaks the
    /// trust rule ([`crate::trusted`]) is [`Refusal::Untrusted`]: nothing in it is touched,
    /// and the process runs on unregistered.
    pub fn register(state_dir: &Path, who: &Registration) -> Result<ProcessFile, Refusal> {
        let dir = TrustedDir::open(state_dir, true)?.sub("processes", true)?;
        remove_dead(&dir);
        let name = format!("{}-{}", who.pid, who.started_unix_ns);
        // A leftover of this pid and start is ours (a pid and a start in ns are never
        // another's): removed as a dead entry is, then made afresh, only made.
        if let Ok(f) = SharedFile::open_read_in(&dir, &name) {
            if let Ok(st) = f.status() {
                if st.st_uid == trusted::euid() {
                    let _ = dir.unlink(&name, st.st_ino);
                }
            }
        }
        let mut file = SharedFile::open_in(&dir, &name, true, true)?;
        let fail = |e: String| Refusal::Failed(format!("{}: {e}", file_path(&dir, &name)));
        file.lock_wait(0).map_err(fail)?;
        file.set_size(FILE_SIZE).map_err(fail)?;
        file.map(FILE_SIZE).map_err(fail)?;
        let p = ProcessFile { file };
        let h = &p.layout().header;
        h.version.store(LAYOUT_VERSION, Relaxed);
        h.size.store(FILE_SIZE as u64, Relaxed);
        h.pid.store(u64::from(who.pid), Relaxed);
        h.started_unix_ns.store(who.started_unix_ns, Relaxed);
        shared::store_text(&h.host, who.host);
        shared::store_text(&h.group, who.group.unwrap_or(""));
        shared::store_text(&h.argv, &who.argv.join(" "));
        h.observe.store(u64::from(who.observe), Relaxed);
        h.allocations_only
            .store(u64::from(who.allocations_only), Relaxed);
        h.outer_pid
            .store(u64::from(who.identity.outer_pid), Relaxed);
        h.pid_ns.store(who.identity.pid_ns, Relaxed);
        shared::store_text(&h.cgroup, &who.identity.cgroup);
        for c in &p.layout().counters {
            c.limit.store(UNRESOLVED, Relaxed);
        }
        h.magic.store(MAGIC, Release);
        Ok(p)
    }

    pub fn layout(&self) -> &ProcessLayout {
        // SAFETY: a live shared mapping of FILE_SIZE bytes, page-aligned; every field is an
        // atomic, so shared references are sound while others read.
        unsafe { &*self.file.ptr().cast::<ProcessLayout>() }
    }

    /// The counters of every GPU, for the process's books.
    pub fn counters(&self) -> &[Counters; MAX_DEVICES] {
        &self.layout().counters
    }

    /// What GPU `ordinal` is, once the process knows.
    pub fn describe_device(&self, ordinal: usize, uuid: [u8; 16], total: u64, name: &str) {
        let Some(info) = self.layout().info.get(ordinal) else {
            return;
        };
        shared::store_uuid(&info.uuid, uuid);
        if total > 0 {
            info.total.store(total, Relaxed);
        }
        shared::store_text(&info.name, name);
        info.state.store(1, Release);
    }

    /// GPU `ordinal`'s real memory, learnt later than its UUID.
    pub fn set_total(&self, ordinal: usize, total: u64) {
        if let Some(info) = self.layout().info.get(ordinal) {
            info.total.store(total, Relaxed);
        }
    }

    /// The last refusal's words, for the views.
    pub fn refused(&self, device: u32, line: &str) {
        let h = &self.layout().header;
        h.refusal_seq.fetch_add(1, Release);
        h.refusal_unix_ns.store(shared::unix_ns(), Relaxed);
        h.refusal_device.store(u64::from(device), Relaxed);
        shared::store_text(&h.refusal, line);
        h.refusal_seq.fetch_add(1, Release);
    }

    /// In a forked child: see [`SharedFile::close_in_child`].
    pub fn close_in_child(&self) {
        self.file.close_in_child();
    }
}

fn file_path(dir: &TrustedDir, name: &str) -> String {
    dir.path().join(name).display().to_string()
}

/// Whether `name` is a registry file's: `PID-START`, both decimal.
pub fn is_entry_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    name.split_once('-')
        .is_some_and(|(pid, start)| digits(pid) && digits(start))
}

/// Removes the files of processes that died (their life lock free): only regular files this
/// process's user owns, through the directory's descriptor (`unlinkat`), never a path, so
/// nothing outside the trusted directory and nothing of another user's is ever removed
/// (their owner, or root, removes theirs). Bounded: one pass over the directory.
fn remove_dead(dir: &TrustedDir) {
    let me = trusted::euid();
    for name in dir.names().unwrap_or_default() {
        let Some(name) = name.to_str().filter(|n| is_entry_name(n)) else {
            continue;
        };
        let Ok(f) = SharedFile::open_read_in(dir, name) else {
            continue;
        };
        let Ok(st) = f.status() else {
            continue;
        };
        if st.st_uid == me && !f.held_elsewhere(0) {
            let _ = dir.unlink(name, st.st_ino);
        }
    }
}

/// One governed process as a viewer sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessSnapshot {
    pub file: PathBuf,
    /// The file's owner (`st_uid`, which only the kernel sets): who may say what it says.
    pub owner: u32,
    pub pid: u32,
    pub started_unix_ns: u64,
    pub host: String,
    pub argv: String,
    pub group: Option<String>,
    pub observe: bool,
    pub allocations_only: bool,
    pub devices: Vec<DeviceSnapshot>,
    /// (when, GPU ordinal, the line) of the last refusal.
    pub last_refusal: Option<(u64, u32, String)>,
    /// Who it said it is: its PID namespace and cgroup.
    pub identity: Identity,
    /// Its PID as the viewer's /proc gives it (None: not asked, or the viewer cannot tell):
    /// see [`crate::identity::ProcView::host_pid`], which a viewer asks.
    pub host_pid: Option<u32>,
}

/// One GPU of a process.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSnapshot {
    pub ordinal: u32,
    pub uuid: [u8; 16],
    pub name: String,
    pub total: u64,
    /// Its counters; the limit None when it has none of its own (unlimited, or a group
    /// member: the group's applies).
    pub usage: Usage,
}

/// What a scan found: the living processes, and a note for each file it skipped.
#[derive(Debug, Default)]
pub struct Scan {
    pub processes: Vec<ProcessSnapshot>,
    pub notes: Vec<String>,
}

/// Reads every living governed process under `state_dir`, never writing. A file being
/// created, of another layout, or of a dead process is skipped (the first two with a note);
/// a directory that breaks the trust rule is not read (a note says why).
pub fn scan(state_dir: &Path) -> Scan {
    let mut scan = Scan::default();
    let dir = match TrustedDir::open(state_dir, false).and_then(|d| d.sub("processes", false)) {
        Ok(dir) => dir,
        Err(Refusal::Missing(_)) => return scan,
        Err(why) => {
            scan.notes.push(format!("registry not read: {why}"));
            return scan;
        }
    };
    let names = match dir.names() {
        Ok(names) => names,
        Err(why) => {
            scan.notes.push(format!("registry not read: {why}"));
            return scan;
        }
    };
    for name in names {
        let shown = dir.path().join(&name);
        let Some(name) = name.to_str().filter(|n| is_entry_name(n)) else {
            scan.notes.push(format!(
                "{}: skipped (not a registry file's name)",
                shown.display()
            ));
            continue;
        };
        match read_one(&dir, name) {
            Ok(Some(p)) => scan.processes.push(p),
            Ok(None) => {}
            Err(Unread::Refused(line)) => scan.notes.push(format!("skipped {line}")),
            Err(Unread::Bad(why)) => scan
                .notes
                .push(format!("{}: skipped ({why})", shown.display())),
        }
    }
    scan.processes.sort_by_key(|p| (p.group.clone(), p.pid));
    scan
}

/// Why a registry file was not read: the trust rule's line (which names the file), or what
/// is wrong with what it holds.
enum Unread {
    Refused(String),
    Bad(String),
}

impl From<String> for Unread {
    fn from(why: String) -> Unread {
        Unread::Bad(why)
    }
}

/// Ok(None): a dead process's file, one still being created by a living process, or one
/// gone meanwhile.
fn read_one(dir: &TrustedDir, name: &str) -> Result<Option<ProcessSnapshot>, Unread> {
    let path = dir.path().join(name);
    let mut f = match SharedFile::open_read_in(dir, name) {
        Ok(f) => f,
        Err(Refusal::Missing(_)) => return Ok(None),
        Err(r) => return Err(Unread::Refused(r.into_line())),
    };
    if !f.held_elsewhere(0) {
        return Ok(None); // dead (or its creator died before locking it)
    }
    let size = f.size()?;
    if size == 0 {
        return Ok(None); // being created
    }
    if size as usize != FILE_SIZE {
        return Err(Unread::Bad(format!(
            "{size} bytes: another cuquota's layout"
        )));
    }
    let owner = f.owner()?.0;
    // Another user's file is copied, not mapped (see `SharedFile::map`).
    f.map(FILE_SIZE)?;
    // SAFETY: as in `ProcessFile::layout`, mapped read-only or a private copy of FILE_SIZE
    // bytes aligned for the layout; only loads follow.
    let l = unsafe { &*f.ptr().cast::<ProcessLayout>() };
    let h = &l.header;
    match (h.magic.load(Acquire), h.version.load(Relaxed)) {
        (0, _) => return Ok(None), // being created
        (MAGIC, LAYOUT_VERSION) => {}
        (MAGIC, v) => {
            return Err(Unread::Bad(format!(
                "layout {v}, this cuquota reads {LAYOUT_VERSION}"
            )))
        }
        _ => return Err(Unread::Bad("not a cuquota process file".into())),
    }
    let devices = (0..MAX_DEVICES)
        .filter(|&d| l.info[d].state.load(Acquire) == 1)
        .map(|d| {
            let (i, c) = (&l.info[d], &l.counters[d]);
            DeviceSnapshot {
                ordinal: d as u32,
                uuid: shared::load_uuid(&i.uuid),
                name: shared::load_text(&i.name),
                total: i.total.load(Relaxed),
                usage: c.usage(),
            }
        })
        .collect();
    let group = shared::load_text(&h.group);
    let pid = h.pid.load(Relaxed) as u32;
    let identity = Identity {
        outer_pid: h.outer_pid.load(Relaxed) as u32,
        pid_ns: h.pid_ns.load(Relaxed),
        cgroup: shared::load_text(&h.cgroup),
    };
    Ok(Some(ProcessSnapshot {
        file: path,
        owner,
        pid,
        started_unix_ns: h.started_unix_ns.load(Relaxed),
        host: shared::load_text(&h.host),
        argv: shared::load_text(&h.argv),
        group: Some(group).filter(|g| !g.is_empty()),
        observe: h.observe.load(Relaxed) == 1,
        allocations_only: h.allocations_only.load(Relaxed) == 1,
        devices,
        last_refusal: last_refusal(h),
        host_pid: None,
        identity,
    }))
}

/// The last refusal, if its words are not being written (a few tries, never a wait).
fn last_refusal(h: &ProcessHeader) -> Option<(u64, u32, String)> {
    for _ in 0..4 {
        let seq = h.refusal_seq.load(Acquire);
        if seq == 0 {
            return None;
        }
        if seq % 2 == 1 {
            std::thread::yield_now();
            continue;
        }
        let got = (
            h.refusal_unix_ns.load(Relaxed),
            h.refusal_device.load(Relaxed) as u32,
            shared::load_text(&h.refusal),
        );
        if h.refusal_seq.load(Acquire) == seq {
            return Some(got);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn a_registered_process_is_listed_while_it_lives() {
        let d = std::env::temp_dir().join(format!("cuquota-registry-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let argv = vec!["python".to_string(), "train.py".to_string()];
        let who = Registration {
            pid: 42,
            started_unix_ns: 7,
            host: "h",
            argv: &argv,
            group: Some("svc"),
            observe: false,
            allocations_only: false,
            identity: &Identity::own(),
        };
        let p = ProcessFile::register(&d, &who).unwrap();
        p.describe_device(1, [9; 16], 8 << 30, "Stand-in GPU");
        p.counters()[1].in_use.store(300, Relaxed);
        p.counters()[1].limit.store(1000, Relaxed);
        p.refused(1, "GPU 1 refused 1.00 GiB");
        let scan = scan(&d);
        assert!(scan.notes.is_empty(), "{:?}", scan.notes);
        let s = &scan.processes[0];
        assert_eq!(
            (s.pid, s.argv.as_str(), s.group.as_deref()),
            (42, "python train.py", Some("svc"))
        );
        assert_eq!(s.devices.len(), 1);
        assert_eq!((s.devices[0].ordinal, s.devices[0].usage.in_use), (1, 300));
        assert_eq!(s.devices[0].usage.limit, Some(1000));
        assert_eq!(s.last_refusal.as_ref().unwrap().2, "GPU 1 refused 1.00 GiB");
        drop(p); // its lock goes: as at death
        assert!(super::scan(&d).processes.is_empty());
        std::fs::write(d.join("processes/junk"), b"x").unwrap();
        let scan = super::scan(&d);
        assert!(scan.processes.is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cuquota-registry-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn who<'a>(pid: u32, argv: &'a [String], identity: &'a Identity) -> Registration<'a> {
        Registration {
            pid,
            started_unix_ns: 1,
            host: "h",
            argv,
            group: None,
            observe: false,
            allocations_only: false,
            identity,
        }
    }

    /// `processes` a link to another directory: registration is refused as untrusted, and
    /// nothing there (dead-looking entries included) is removed.
    #[test]
    fn a_linked_registry_directory_is_refused_and_left_alone() {
        let d = scratch("linked");
        let victim = d.join("victim");
        std::fs::create_dir(&victim).unwrap();
        for name in ["1-1", "notes"] {
            std::fs::write(victim.join(name), name).unwrap();
        }
        let state = d.join("state");
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::symlink(&victim, state.join("processes")).unwrap();
        let (argv, id) = (vec!["x".to_string()], Identity::default());
        match ProcessFile::register(&state, &who(5, &argv, &id)) {
            Err(Refusal::Untrusted(line)) => assert!(
                line.starts_with(&format!("{}/processes (owner uid ", state.display()))
                    && line.ends_with(
                        "is a symbolic link, and none is followed from a state \
                                       directory down"
                    ),
                "{line}"
            ),
            other => panic!("registered through a link: {:?}", other.err()),
        }
        let mut left: Vec<_> = std::fs::read_dir(&victim)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["1-1", "notes"]);
        let scan = scan(&state);
        assert!(scan.processes.is_empty());
        assert_eq!(scan.notes.len(), 1, "{:?}", scan.notes);
        assert!(
            scan.notes[0].starts_with("registry not read: "),
            "{:?}",
            scan.notes
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A dead entry goes only when it is a regular file of this user's; a FIFO, a directory
    /// and a link in its place stay (and the views skip them at once, each with a note).
    #[test]
    fn only_our_own_dead_regular_entries_are_removed() {
        let d = scratch("dead");
        let (argv, id) = (vec!["x".to_string()], Identity::default());
        let alive = ProcessFile::register(&d, &who(1, &argv, &id)).unwrap();
        let processes = d.join("processes");
        let outside = d.join("outside");
        std::fs::write(&outside, b"keep").unwrap();
        std::fs::write(processes.join("5-5"), b"").unwrap();
        std::fs::create_dir(processes.join("7-7")).unwrap();
        std::os::unix::fs::symlink(&outside, processes.join("8-8")).unwrap();
        let fifo =
            std::ffi::CString::new(processes.join("6-6").into_os_string().into_vec()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) }, 0);
        let next = ProcessFile::register(&d, &who(2, &argv, &id)).unwrap();
        let mut left: Vec<_> = std::fs::read_dir(&processes)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["1-1", "2-1", "6-6", "7-7", "8-8"]);
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        let scan = scan(&d);
        let pids: Vec<u32> = scan.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [1, 2]);
        let whats: Vec<&str> = (scan.notes.iter())
            .map(|n| n.rsplit_once(") ").map_or(n.as_str(), |(_, w)| w))
            .collect();
        assert_eq!(
            whats,
            [
                "is a FIFO, not a regular file",
                "is a directory, not a regular file",
                "is a symbolic link, which is never followed under a state directory",
            ]
        );
        drop((alive, next));
        let _ = std::fs::remove_dir_all(&d);
    }
}
