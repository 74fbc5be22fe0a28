//! A group's shared state: one file per group under the state directory, mapped by every
//! member (the interposer) and by `cuquota set` (the CLI). What both must agree on lives
//! here: the layout, how the file is created and checked, the header lock, members' slots
//! and how a dead member's charges are given back.
//!
//! The counters are plain atomics in the mapping: a member reserves on its GPU's counter
//! with one compare-and-swap, never under a lock. The lock (an open-file-description lock
//! on byte 0, which the kernel drops when its holder dies) guards only what changes the
//! table — a slot claimed or freed, a GPU entry made, a limit set — never a driver call, and
//! is waited for at most [`LOCK_WAIT`]. Each member holds a lock of the same kind on its own
//! slot's byte for its whole life: whoever can take that lock knows the owner is dead,
//! whatever its PID became. A charge is added to the GPU's counter before the slot's and
//! taken from the slot's before the GPU's, so a member killed between the two leaves the
//! group too high (refusing more, never over-committing) until the group empties.
//!
//! The counters count what members reserved or hold (the footprint, as each process's own
//! quota counts it); what each process holds in detail stays in its own books.

use crate::shared::{self, SharedFile};
use crate::trusted::{Refusal, TrustedDir};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

pub use crate::shared::LOCK_WAIT;

/// GPUs a group tracks (matched by UUID).
pub const GROUP_DEVICES: usize = 16;
/// Members at once.
pub const SLOTS: usize = 256;
/// A limit never set (a GPU entry made by a member with no limit takes the default; the
/// default is unset until `cuquota set` gives one).
pub const UNSET: u64 = u64::MAX;
/// No limit: counted, shown, nothing refused.
pub const NO_LIMIT: u64 = u64::MAX - 1;
/// The default state directory.
pub const DEFAULT_STATE_DIR: &str = "/dev/shm/cuquota";

const MAGIC: u64 = u64::from_le_bytes(*b"CUQGROUP");
/// Written over the magic, under the header lock, just before `cuquota set --remove`
/// unlinks the file: whoever opened it meanwhile opens the path again.
const REMOVED: u64 = u64::from_le_bytes(*b"CUQGONE!");
/// How often an open retries a group that was removed under it.
const REOPENS: usize = 3;
/// The layout's version: a file of another version is refused, never mixed.
pub const LAYOUT_VERSION: u64 = 3;
const NAME_BYTES: usize = 64;

/// The file's first bytes.
#[repr(C)]
pub struct GroupHeader {
    magic: AtomicU64,
    version: AtomicU64,
    size: AtomicU64,
    /// The limit of a GPU entry made from now on ([`UNSET`]: the first member's own).
    pub default_limit: AtomicU64,
    pub created_unix_ns: AtomicU64,
    name: [AtomicU64; NAME_BYTES / 8],
}

/// One GPU of the group, by UUID.
#[repr(C)]
pub struct GroupDevice {
    /// 0: free; 1: in use (`uuid` and `limit` are set before it is published).
    state: AtomicU64,
    uuid: [AtomicU64; 2],
    /// Bytes, or [`NO_LIMIT`]. Read on every check: `cuquota set` changes it live.
    pub limit: AtomicU64,
    /// Reserved or held by all members: what a reservation is checked against.
    pub in_use: AtomicU64,
    /// The highest `in_use` since the entry was made.
    pub peak: AtomicU64,
    pub refusals: AtomicU64,
    /// The GPU's real memory, as a member's driver said (0: unknown).
    pub total: AtomicU64,
    _spare: [AtomicU64; 8],
}

impl GroupDevice {
    /// The GPU's UUID.
    pub fn uuid(&self) -> [u8; 16] {
        shared::load_uuid(&self.uuid)
    }
}

/// One member.
#[repr(C)]
pub struct MemberSlot {
    /// 0: free; 1: a member's (its lock on byte `1 + index` says whether it lives).
    state: AtomicU64,
    /// Bumped at every claim: a cached index of a freed slot is known stale.
    pub generation: AtomicU64,
    pub pid: AtomicU64,
    pub started_unix_ns: AtomicU64,
    /// Per GPU entry: what this member reserved or holds there (inside the GPU's `in_use`).
    pub charged: [AtomicU64; GROUP_DEVICES],
    /// Its PID as NVML lists it: the outermost one its /proc shows ([`crate::identity`]).
    pub outer_pid: AtomicU64,
    /// Its PID namespace (the inode; 0: unknown): PIDs repeat across containers.
    pub pid_ns: AtomicU64,
    /// Its effective user: its registry file must be that user's to name it
    /// ([`crate::holders`]).
    pub uid: AtomicU64,
}

impl MemberSlot {
    /// Whether a member holds this slot (alive, or dead and not reaped yet).
    pub fn is_member(&self) -> bool {
        self.state.load(Acquire) == 1
    }
}

/// The whole file.
#[repr(C)]
pub struct Layout {
    pub header: GroupHeader,
    pub devices: [GroupDevice; GROUP_DEVICES],
    pub slots: [MemberSlot; SLOTS],
}

/// The file's size.
pub const FILE_SIZE: usize = std::mem::size_of::<Layout>();

/// Why a group cannot be used.
#[derive(Debug)]
pub struct GroupError(pub String);

impl std::fmt::Display for GroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A group name: 1–64 characters of `A-Z a-z 0-9 . _ -`, not `.` or `..`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > NAME_BYTES || !name.chars().all(ok_char) {
        return Err(format!(
            "a group name is 1 to 64 characters of A-Z a-z 0-9 . _ - (got {:?})",
            name
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is not a group name"));
    }
    Ok(())
}

/// Who a process is, for [`check_trust`]: its effective user and every group it is in.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub uid: u32,
    pub groups: Vec<u32>,
}

impl Credentials {
    /// This process's credentials. A program with more privileges than its caller (setuid,
    /// setgid, file capabilities: `AT_SECURE`) is in no group here: the groups it runs with
    /// are its caller's, and a file its caller's group may write must not decide its limit.
    pub fn this_process() -> Credentials {
        // SAFETY: geteuid and getegid have no preconditions; getauxval reads the auxiliary
        // vector the kernel gave the process.
        let (uid, gid, secure) = unsafe {
            (
                libc::geteuid(),
                libc::getegid(),
                libc::getauxval(libc::AT_SECURE) != 0,
            )
        };
        if secure {
            return Credentials {
                uid,
                groups: Vec::new(),
            };
        }
        let mut groups = vec![gid];
        // SAFETY: asking the count with a null list of length 0, as getgroups(2) allows.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        if n > 0 {
            let mut list = vec![0 as libc::gid_t; n as usize];
            // SAFETY: `list` has room for `n` entries.
            let got = unsafe { libc::getgroups(n, list.as_mut_ptr()) };
            list.truncate(got.max(0) as usize);
            groups.extend(list);
        }
        Credentials { uid, groups }
    }
}

/// Whether a group file of owner `uid`, group `gid` and permission bits `mode` may decide
/// the limit of process `me`: anyone who can write the file can widen the quota, so only
/// those `me` trusts may. It is trusted when writable by nobody but its owner and, where its
/// group may write, a Unix group `me` is in (shared the documented way: `chgrp TEAM; chmod
/// 660`), and its owner is `me`, root, or — for a file shared so — another member of that
/// group. A file anyone may write is never trusted. Err says why not.
pub fn check_trust(uid: u32, gid: u32, mode: u32, me: &Credentials) -> Result<(), String> {
    if mode & 0o002 != 0 {
        return Err("is writable by every user".into());
    }
    let group_writes = mode & 0o020 != 0;
    if group_writes && !me.groups.contains(&gid) {
        return Err(format!(
            "is writable by group {gid}, which this process (uid {}) is not in",
            me.uid
        ));
    }
    if uid == me.uid || uid == 0 || group_writes {
        return Ok(());
    }
    Err(format!(
        "belongs to another user and is not shared with this process (uid {}) through a \
         group (mode 660, a group it is in)",
        me.uid
    ))
}

/// Whether `cuquota set`, run by `me`, may write a group file of owner `uid`, group `gid`
/// and mode `mode`: only one its members may trust ([`check_trust`]), so that it never
/// reports a limit set that no member will obey. Root may write any such file, whoever
/// owns it.
pub fn check_write_trust(uid: u32, gid: u32, mode: u32, me: &Credentials) -> Result<(), String> {
    if mode & 0o002 != 0 {
        return Err("is writable by every user, so no member may trust it".into());
    }
    if me.uid == 0 {
        return Ok(());
    }
    check_trust(uid, gid, mode, me)
}

/// Where group NAME's state lives under `state_dir`.
pub fn group_path(state_dir: &Path, name: &str) -> PathBuf {
    state_dir.join("groups").join(name)
}

/// A group's file, mapped. Dropping it unmaps and closes: a member's slot lock goes with it.
pub struct GroupFile {
    file: SharedFile,
    pub path: PathBuf,
}

/// The header lock, released when dropped.
pub struct Locked<'a>(&'a GroupFile);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.0.file.unlock_byte(0);
    }
}

impl GroupFile {
    /// Opens group `name` under `state_dir` to write it (`cuquota set`), creating the
    /// directories (mode 1777, like /dev/shm, so that each user's groups can live there)
    /// and the file (mode 0600: members and `cuquota set` need write access, so whoever may
    /// join may also resize). Every path passes the trust rule ([`crate::trusted`]); the file
    /// must be one its members may trust ([`check_write_trust`]), checked before anything is
    /// written; a file that is not group `name` of this layout is refused, never repaired.
    pub fn open(state_dir: &Path, name: &str) -> Result<GroupFile, GroupError> {
        GroupFile::open_as(state_dir, name, |uid, gid, mode| {
            check_write_trust(uid, gid, mode, &Credentials::this_process())
                .map_err(|why| format!("{why}: `cuquota set` writes only a file its members trust"))
        })
    }

    /// As [`Self::open`], the file judged by `rule(owner, group, mode)` before anything is
    /// read or written (Err: the line's tail).
    fn open_as(
        state_dir: &Path,
        name: &str,
        rule: impl Fn(u32, u32, u32) -> Result<(), String>,
    ) -> Result<GroupFile, GroupError> {
        check_name(name).map_err(GroupError)?;
        let dir = groups_dir(state_dir, true).map_err(refused)?;
        let path = dir.path().join(name);
        let fail = |what: String| GroupError(format!("{}: {what}", path.display()));
        for _ in 0..REOPENS {
            let file = SharedFile::open_in(&dir, name, true, false).map_err(refused)?;
            let (uid, gid, mode) = file.owner().map_err(fail)?;
            rule(uid, gid, mode).map_err(|why| {
                GroupError(format!(
                    "{} (owner uid {uid}, group gid {gid}, mode {mode:o}) {why}",
                    path.display()
                ))
            })?;
            let mut g = GroupFile {
                file,
                path: path.clone(),
            };
            g.file.lock_wait(0).map_err(fail)?;
            let result = g.init(name);
            g.file.unlock_byte(0);
            match result {
                Ok(()) if g.removed() => continue,
                Ok(()) => return Ok(g),
                Err(e) => return Err(fail(e)),
            }
        }
        Err(fail(format!("removed {REOPENS} times while being opened")))
    }

    /// Whether `cuquota set --remove` took this file away (its path now names another file,
    /// or none).
    fn removed(&self) -> bool {
        self.layout().header.magic.load(Acquire) == REMOVED
    }

    /// Opens group `name` under `state_dir` as a member: the file must be one this process
    /// may let decide its limit ([`check_trust`], judged before anything in it is read or
    /// written); a slot is claimed under the header lock. Returns the file and the slot's
    /// index.
    pub fn join(state_dir: &Path, name: &str) -> Result<(GroupFile, usize), GroupError> {
        let me = Credentials::this_process();
        for _ in 0..REOPENS {
            let file = GroupFile::open_as(state_dir, name, |uid, gid, mode| {
                check_trust(uid, gid, mode, &me).map_err(|why| member_refuses(&why))
            })?;
            let locked = file.lock()?;
            if file.removed() {
                continue;
            }
            let slot = file.claim_slot(&locked)?;
            drop(locked);
            return Ok((file, slot));
        }
        Err(GroupError(format!(
            "group {name}: removed {REOPENS} times while being joined"
        )))
    }

    /// Whether this process may let the file decide its limit, by its owner and mode (its
    /// directories passed the trust rule when it was opened).
    pub fn trusted(&self) -> Result<(), GroupError> {
        let (uid, gid, mode) = self
            .file
            .owner()
            .map_err(|e| GroupError(format!("{}: {e}", self.path.display())))?;
        check_trust(uid, gid, mode, &Credentials::this_process()).map_err(|why| {
            GroupError(format!(
                "{} (owner uid {uid}, group gid {gid}, mode {mode:o}) {}",
                self.path.display(),
                member_refuses(&why)
            ))
        })
    }

    /// Removes group `name` under `state_dir` if no member of it lives (dead members' charges
    /// are given back first); refused, naming the living members' pids, otherwise. A process
    /// opening the group meanwhile opens a fresh one.
    pub fn remove(state_dir: &Path, name: &str) -> Result<(), GroupError> {
        check_name(name).map_err(GroupError)?;
        let missing = || GroupError(format!("no group {name} under {}", state_dir.display()));
        let dir = match groups_dir(state_dir, false) {
            Err(Refusal::Missing(_)) => return Err(missing()),
            other => other.map_err(refused)?,
        };
        match dir.open_file(name, libc::O_RDONLY) {
            Err(Refusal::Missing(_)) => return Err(missing()),
            Err(r) => return Err(refused(r)),
            // SAFETY: the descriptor open_file gave us, closed once (opened again below).
            Ok((fd, _)) => unsafe {
                libc::close(fd);
            },
        }
        // Whoever may remove the name may remove the file: only the directory's trust and
        // the kernel's permissions decide (a file no member trusts may go too).
        let file = GroupFile::open_as(state_dir, name, |_, _, _| Ok(()))?;
        let locked = file.lock()?;
        file.reap(&locked, None);
        let living = file.snapshot().members;
        if !living.is_empty() {
            let pids: Vec<String> = living.iter().map(u64::to_string).collect();
            return Err(GroupError(format!(
                "group {name} has {} living member{} (pid {}): stop {} first",
                living.len(),
                if living.len() == 1 { "" } else { "s" },
                pids.join(", "),
                if living.len() == 1 { "it" } else { "them" },
            )));
        }
        file.layout().header.magic.store(REMOVED, Release);
        let ino = file.file.status().map_err(GroupError)?.st_ino;
        dir.unlink(name, ino).map_err(GroupError)?;
        drop(locked);
        Ok(())
    }

    /// Under the header lock: sizes and initialises a fresh file, checks an existing one.
    fn init(&mut self, name: &str) -> Result<(), String> {
        let size = self.file.size()?;
        if size == 0 {
            self.file.set_size(FILE_SIZE)?;
        } else if size as usize != FILE_SIZE {
            return Err(format!(
                "{size} bytes, not a cuquota group of layout {LAYOUT_VERSION} ({FILE_SIZE} bytes)"
            ));
        }
        self.file.map(FILE_SIZE)?;
        let h = &self.layout().header;
        match (h.magic.load(Acquire), h.version.load(Relaxed)) {
            // A fresh file, or one whose creator died before publishing it.
            (0, _) => {
                h.version.store(LAYOUT_VERSION, Relaxed);
                h.size.store(FILE_SIZE as u64, Relaxed);
                h.default_limit.store(UNSET, Relaxed);
                h.created_unix_ns.store(shared::unix_ns(), Relaxed);
                shared::store_text(&h.name, name);
                h.magic.store(MAGIC, Release);
                Ok(())
            }
            (MAGIC, LAYOUT_VERSION) if h.size.load(Relaxed) == FILE_SIZE as u64 => self.named(name),
            // Being removed: the caller opens the path again.
            (REMOVED, _) => Ok(()),
            (MAGIC, v) => Err(format!(
                "a cuquota group of layout {v}; this cuquota reads layout {LAYOUT_VERSION}"
            )),
            _ => Err("not a cuquota group file".into()),
        }
    }

    /// A group is named by its file's name: the name its header holds must agree (else the
    /// file was renamed, or forged, to pass for another group).
    fn named(&self, name: &str) -> Result<(), String> {
        let inside = self.name();
        if inside != name {
            return Err(format!(
                "its header names group {inside:?}: a group file renamed or written to pass for \
                 another is never used"
            ));
        }
        Ok(())
    }

    /// Opens existing group `name`'s file in `dir` for reading only (the views, the NVML
    /// hooks): checked as `open` checks, never created, locked or written; `None` while its
    /// creator has not published it yet.
    fn read_existing(dir: &TrustedDir, name: &str) -> Result<Option<GroupFile>, GroupError> {
        let path = dir.path().join(name);
        let fail = |what: String| GroupError(format!("{}: {what}", path.display()));
        let mut file = match SharedFile::open_read_in(dir, name) {
            Err(Refusal::Missing(_)) => return Ok(None),
            other => other.map_err(refused)?,
        };
        let size = file.size().map_err(fail)?;
        if size as usize != FILE_SIZE {
            return Err(fail(format!(
                "{size} bytes, not a group of layout {LAYOUT_VERSION}"
            )));
        }
        // Another user's file is copied, not mapped (see `SharedFile::map`).
        file.map(FILE_SIZE).map_err(fail)?;
        let g = GroupFile {
            file,
            path: path.clone(),
        };
        let h = &g.layout().header;
        match (h.magic.load(Acquire), h.version.load(Relaxed)) {
            (MAGIC, LAYOUT_VERSION) => {
                g.named(name).map_err(fail)?;
                Ok(Some(g))
            }
            (0, _) | (REMOVED, _) => Ok(None),
            (MAGIC, v) => Err(fail(format!(
                "layout {v}, this cuquota reads {LAYOUT_VERSION}"
            ))),
            _ => Err(fail("not a cuquota group file".into())),
        }
    }

    /// Every group under `state_dir` that can be read, one per file and named by it, and a
    /// note for each that cannot (a file whose header names another group among them).
    pub fn read_all(state_dir: &Path) -> (Vec<GroupSnapshot>, Vec<String>) {
        let (mut groups, mut notes) = (Vec::new(), Vec::new());
        let dir = match groups_dir(state_dir, false) {
            Ok(dir) => dir,
            Err(Refusal::Missing(_)) => return (groups, notes),
            Err(e) => {
                notes.push(format!("groups not read: {e}"));
                return (groups, notes);
            }
        };
        let names = match dir.names() {
            Ok(names) => names,
            Err(why) => {
                notes.push(format!("groups not read: {why}"));
                return (groups, notes);
            }
        };
        for name in names {
            let Some(name) = name.to_str().filter(|n| check_name(n).is_ok()) else {
                notes.push(format!(
                    "skipped {}: not a group's name",
                    dir.path().join(&name).display()
                ));
                continue;
            };
            match GroupFile::read_existing(&dir, name) {
                Ok(Some(g)) => groups.push(g.snapshot()),
                Ok(None) => {} // being created, or gone
                Err(e) => notes.push(format!("skipped {}", e.0)),
            }
        }
        (groups, notes)
    }

    /// In a forked child: see [`SharedFile::close_in_child`].
    pub fn close_in_child(&self) {
        self.file.close_in_child();
    }

    /// The mapped layout.
    pub fn layout(&self) -> &Layout {
        // SAFETY: a live shared mapping of FILE_SIZE bytes (checked in `init`), aligned to a
        // page; every field of `Layout` is an atomic, so shared references to it are sound
        // while other processes write.
        unsafe { &*self.file.ptr().cast::<Layout>() }
    }

    /// The group's name, as its file says.
    pub fn name(&self) -> String {
        shared::load_text(&self.layout().header.name)
    }

    /// Takes the header lock, waiting at most [`LOCK_WAIT`].
    pub fn lock(&self) -> Result<Locked<'_>, GroupError> {
        self.file
            .lock_wait(0)
            .map(|()| Locked(self))
            .map_err(|e| GroupError(format!("{}: {e}", self.path.display())))
    }

    /// Gives back the charges of every member that died, and frees their slots. With no
    /// member left alive, the GPUs' counters are set to 0: that also repairs what a member
    /// killed between two of its adds left behind. Returns how many were reaped.
    pub fn reap(&self, _locked: &Locked<'_>, mine: Option<usize>) -> usize {
        let layout = self.layout();
        let mut reaped = 0;
        let mut living = 0;
        for (i, slot) in layout.slots.iter().enumerate() {
            if slot.state.load(Acquire) == 0 || Some(i) == mine {
                living += usize::from(Some(i) == mine && slot.state.load(Relaxed) != 0);
                continue;
            }
            if self.lives(i) {
                living += 1;
                continue;
            }
            for (g, dev) in layout.devices.iter().enumerate() {
                let charged = slot.charged[g].swap(0, Relaxed);
                dev.in_use
                    .fetch_sub(charged.min(dev.in_use.load(Relaxed)), Relaxed);
            }
            slot.state.store(0, Release);
            reaped += 1;
        }
        if living == 0 {
            for dev in &layout.devices {
                dev.in_use.store(0, Relaxed);
            }
        }
        reaped
    }

    /// Claims a free slot for this process and takes its life lock. Under the header lock;
    /// dead members are reaped first.
    pub fn claim_slot(&self, locked: &Locked<'_>) -> Result<usize, GroupError> {
        self.reap(locked, None);
        let outer_pid = crate::identity::outer_pid();
        let pid_ns = crate::identity::namespace_inode(Path::new("/proc/self/ns/pid"));
        let layout = self.layout();
        for (i, slot) in layout.slots.iter().enumerate() {
            if slot.state.load(Acquire) != 0 {
                continue;
            }
            if !matches!(self.file.lock_byte(1 + i as u64, true), Ok(true)) {
                continue;
            }
            for charged in &slot.charged {
                charged.store(0, Relaxed);
            }
            slot.generation.fetch_add(1, Relaxed);
            // SAFETY: getpid has no preconditions.
            slot.pid.store(unsafe { libc::getpid() } as u64, Relaxed);
            slot.outer_pid.store(u64::from(outer_pid), Relaxed);
            slot.pid_ns.store(pid_ns, Relaxed);
            slot.uid.store(u64::from(crate::trusted::euid()), Relaxed);
            slot.started_unix_ns.store(shared::unix_ns(), Relaxed);
            slot.state.store(1, Release);
            return Ok(i);
        }
        Err(GroupError(format!(
            "group {} is full: {SLOTS} members at once, all alive",
            self.name()
        )))
    }

    /// The GPU entry of `uuid`, made if there is none, with the default limit or else
    /// `own_limit` (bytes, [`NO_LIMIT`]). Under the header lock. Returns its index.
    pub fn device(
        &self,
        _locked: &Locked<'_>,
        uuid: [u8; 16],
        own_limit: u64,
        total: u64,
    ) -> Result<usize, GroupError> {
        let layout = self.layout();
        if let Some(g) = self.entry_of(uuid) {
            if total > 0 {
                layout.devices[g].total.store(total, Relaxed);
            }
            return Ok(g);
        }
        let Some(g) = layout
            .devices
            .iter()
            .position(|d| d.state.load(Acquire) == 0)
        else {
            return Err(GroupError(format!(
                "group {} already tracks {GROUP_DEVICES} GPUs",
                self.name()
            )));
        };
        let d = &layout.devices[g];
        shared::store_uuid(&d.uuid, uuid);
        let default = layout.header.default_limit.load(Relaxed);
        d.limit
            .store(if default == UNSET { own_limit } else { default }, Relaxed);
        for c in [&d.in_use, &d.peak, &d.refusals] {
            c.store(0, Relaxed);
        }
        d.total.store(total, Relaxed);
        d.state.store(1, Release);
        Ok(g)
    }

    /// Sets the limit: of every GPU entry and the default (`uuid` None), or of one GPU's
    /// entry, made if needed. Nothing held is taken away.
    pub fn set_limit(&self, uuid: Option<[u8; 16]>, limit: u64) -> Result<(), GroupError> {
        let locked = self.lock()?;
        let layout = self.layout();
        match uuid {
            None => {
                layout.header.default_limit.store(limit, Relaxed);
                for d in &layout.devices {
                    if d.state.load(Acquire) == 1 {
                        d.limit.store(limit, Relaxed);
                    }
                }
            }
            Some(uuid) => {
                let g = self.device(&locked, uuid, limit, 0)?;
                layout.devices[g].limit.store(limit, Relaxed);
            }
        }
        Ok(())
    }

    /// Whether slot `index` belongs to a living member, as a process that is not that member
    /// sees it: a slot in use whose life lock another description holds. Takes no lock and
    /// writes nothing, so a viewer with read access alone can ask.
    fn lives(&self, index: usize) -> bool {
        self.layout().slots[index].is_member() && self.file.held_elsewhere(1 + index as u64)
    }

    /// What the living members reserved or hold on GPU entry `g`: its counter less what dead
    /// members (not reaped yet) left there, and 0 when no member lives (a member killed
    /// between two of its adds may have left the counter too high). Nothing is reaped.
    fn living_in_use(&self, g: usize, living: &[bool]) -> u64 {
        let layout = self.layout();
        if !living.contains(&true) {
            return 0;
        }
        let dead: u64 = (layout.slots.iter().zip(living))
            .filter(|(s, alive)| s.is_member() && !**alive)
            .map(|(s, _)| s.charged[g].load(Relaxed))
            .fold(0, u64::saturating_add);
        layout.devices[g].in_use.load(Relaxed).saturating_sub(dead)
    }

    /// The living members other than slot `mine` that hold anything on GPU entry `g`, as
    /// that member sees them (nothing locked or written), most first.
    pub fn others_on(&self, g: usize, mine: usize) -> Vec<MemberShare> {
        let mut others: Vec<MemberShare> = (self.layout().slots.iter().enumerate())
            .filter(|(i, s)| *i != mine && s.charged[g].load(Relaxed) > 0 && self.lives(*i))
            .map(|(_, s)| MemberShare {
                pid: s.pid.load(Relaxed) as u32,
                outer_pid: s.outer_pid.load(Relaxed) as u32,
                pid_ns: s.pid_ns.load(Relaxed),
                uid: s.uid.load(Relaxed) as u32,
                charged: s.charged[g].load(Relaxed),
            })
            .collect();
        others.sort_by_key(|m| std::cmp::Reverse(m.charged));
        others
    }

    /// What each GPU entry holds now and the living members, as a process that is no member
    /// sees them (`cuquota set` and the views): dead members, reaped or not, count for
    /// nothing. Nothing is locked or written.
    pub fn snapshot(&self) -> GroupSnapshot {
        let layout = self.layout();
        let living: Vec<bool> = (0..SLOTS).map(|i| self.lives(i)).collect();
        let devices = (layout.devices.iter().enumerate())
            .filter(|(_, d)| d.state.load(Acquire) == 1)
            .map(|(g, d)| GroupGpuSnapshot {
                index: g,
                uuid: shared::load_uuid(&d.uuid),
                total: d.total.load(Relaxed),
                limit: d.limit.load(Relaxed),
                in_use: self.living_in_use(g, &living),
                peak: d.peak.load(Relaxed),
                refusals: d.refusals.load(Relaxed),
            })
            .collect();
        let members = (layout.slots.iter().zip(&living))
            .filter(|(_, alive)| **alive)
            .map(|(s, _)| s.pid.load(Relaxed))
            .collect();
        GroupSnapshot {
            name: self.name(),
            default_limit: layout.header.default_limit.load(Relaxed),
            devices,
            members,
        }
    }
}

/// A living member's share of one GPU ([`GroupFile::others_on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberShare {
    /// Its PID as it sees itself, and as NVML lists it ([`MemberSlot::outer_pid`]).
    pub pid: u32,
    pub outer_pid: u32,
    /// Its PID namespace (0: unknown).
    pub pid_ns: u64,
    /// Its effective user, as its slot says ([`MemberSlot::uid`]).
    pub uid: u32,
    /// What it reserved or holds there.
    pub charged: u64,
}

/// One GPU of a group as a reader that is no member sees it ([`GroupFile::read_gpu`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuReading {
    /// The limit a GPU entry made now would get ([`UNSET`]: the first member's own).
    pub default_limit: u64,
    /// The GPU's entry, if a member made one.
    pub gpu: Option<GpuFigures>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFigures {
    /// Bytes, or [`NO_LIMIT`].
    pub limit: u64,
    /// What the living members reserved or hold there: the GPU's counter less what dead
    /// members (not reaped yet) left on it; 0 when no member lives.
    pub in_use: u64,
    /// Each living member's pid as NVML lists it (its outermost, [`MemberSlot::outer_pid`]) and
    /// what it reserved or holds there.
    pub members: Vec<(u64, u64)>,
}

impl GroupFile {
    /// Opens group `name` under `state_dir` to read it only: `Ok(None)` when there is no such
    /// file; nothing is created, locked or written (the mapping is read-only), so a process
    /// that only looks (a monitoring tool) leaves no trace and never becomes a member. A file
    /// that is not a group of this layout is an error, as in [`GroupFile::open`].
    pub fn open_read_only(state_dir: &Path, name: &str) -> Result<Option<GroupFile>, GroupError> {
        check_name(name).map_err(GroupError)?;
        match groups_dir(state_dir, false) {
            Ok(dir) => GroupFile::read_existing(&dir, name),
            Err(Refusal::Missing(_)) => Ok(None),
            Err(r) => Err(refused(r)),
        }
    }

    /// The index of GPU `uuid`'s entry, if a member made one.
    fn entry_of(&self, uuid: [u8; 16]) -> Option<usize> {
        (self.layout().devices.iter())
            .position(|d| d.state.load(Acquire) == 1 && shared::load_uuid(&d.uuid) == uuid)
    }

    /// GPU `uuid` of the group as a reader that is no member sees it (dead members' charges
    /// left out, nothing reaped). Works on a read-only or a member's file.
    pub fn read_gpu(&self, uuid: [u8; 16]) -> GpuReading {
        let layout = self.layout();
        let found = self.entry_of(uuid);
        let living: Vec<bool> = (0..SLOTS).map(|i| self.lives(i)).collect();
        let gpu = found.map(|g| GpuFigures {
            limit: layout.devices[g].limit.load(Relaxed),
            in_use: self.living_in_use(g, &living),
            members: (layout.slots.iter().zip(&living))
                .filter(|(s, alive)| **alive && s.charged[g].load(Relaxed) > 0)
                .map(|(s, _)| (s.outer_pid.load(Relaxed), s.charged[g].load(Relaxed)))
                .collect(),
        });
        GpuReading {
            default_limit: layout.header.default_limit.load(Relaxed),
            gpu,
        }
    }
}

/// A group's figures at one moment.
#[derive(Debug, Clone)]
pub struct GroupSnapshot {
    pub name: String,
    pub default_limit: u64,
    pub devices: Vec<GroupGpuSnapshot>,
    /// The living members' pids (as each sees itself).
    pub members: Vec<u64>,
}

/// One GPU of a group, as a viewer reads the group file.
#[derive(Debug, Clone)]
pub struct GroupGpuSnapshot {
    pub index: usize,
    pub uuid: [u8; 16],
    /// The GPU's real memory, as a member's driver said (0: unknown).
    pub total: u64,
    pub limit: u64,
    pub in_use: u64,
    pub peak: u64,
    pub refusals: u64,
}

/// The groups' directory under `state_dir`, under the trust rule (made when `create`).
fn groups_dir(state_dir: &Path, create: bool) -> Result<TrustedDir, Refusal> {
    TrustedDir::open(state_dir, create).and_then(|d| d.sub("groups", create))
}

fn refused(r: Refusal) -> GroupError {
    GroupError(r.into_line())
}

/// A member's refusal of a file it may not trust, after the file's path, owner and mode.
fn member_refuses(why: &str) -> String {
    format!(
        "{why}, so it cannot decide this process's limit: remove it (`cuquota set NAME \
         --remove`) or use another group name"
    )
}

#[cfg(test)]
mod tests;
