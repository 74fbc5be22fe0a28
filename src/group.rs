//! This process as a member of a group (`CUQUOTA_GROUP`): every process with the same group
//! name and state directory shares one quota per GPU, matched by UUID. The shared state
//! (its layout, the header lock, slots, reaping dead members) is `cuquota_state::group`'s;
//! here is this process's side of it: its slot, and for each GPU it uses, the counters it
//! charges besides its own ([`Member`]). [`crate::quota::DeviceQuota`] charges through them.

use crate::spin::SpinLock;
use cuquota_state::group::{GroupDevice, GroupFile, MemberSlot, NO_LIMIT};
use std::path::PathBuf;
use std::sync::atomic::{
    AtomicPtr, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

/// A group's quota as one member sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupShare {
    pub name: String,
    /// What this process holds or has reserved on the GPU.
    pub this_process: u64,
    /// The other members holding anything there, and what they hold.
    pub others: usize,
    pub others_bytes: u64,
}

/// A member's hold on one GPU of its group: the group's counters for that GPU and this
/// member's record of what it charged there (which the reaper gives back at its death).
/// Made once per GPU and never freed (the mapping it points into is never unmapped).
pub struct Member {
    pub device: &'static GroupDevice,
    /// Inside `device.in_use`: what this process reserved or holds there.
    pub charged: &'static AtomicU64,
    /// The GPU's index in the group's table.
    pub index: usize,
    pub membership: &'static Membership,
    /// This process's own bound on the group's limit (a policy's; `NO_LIMIT`: none): what
    /// the group's shared file says cannot lift it.
    pub cap: u64,
    /// The limit this member last saw (`cuquota set` changes the group's).
    seen_limit: AtomicU64,
}

/// This process's place in its group.
pub struct Membership {
    pub file: GroupFile,
    pub slot: usize,
    pub name: String,
}

impl Membership {
    fn slot(&self) -> &MemberSlot {
        &self.file.layout().slots[self.slot]
    }
}

/// The group to join, and this process's membership once joined.
pub struct Group {
    /// (state directory, name) from the configuration; `None`: not in a group.
    spec: Option<(PathBuf, String)>,
    joined: AtomicPtr<Membership>,
    /// Joining is done by one thread at a time (it claims a slot).
    joining: SpinLock<()>,
}

impl Group {
    pub fn new(spec: Option<(PathBuf, String)>) -> Group {
        Group {
            spec,
            joined: AtomicPtr::new(std::ptr::null_mut()),
            joining: SpinLock::new(()),
        }
    }

    /// The group's name, when the process is configured into one.
    pub fn name(&self) -> Option<&str> {
        self.spec.as_ref().map(|(_, name)| name.as_str())
    }

    /// This process's membership: the group's file opened and a slot claimed the first time
    /// (after a fork, again in the child).
    pub fn join(&self) -> Result<&'static Membership, String> {
        // SAFETY: `joined` holds null or a leaked Membership, never freed.
        if let Some(m) = unsafe { self.joined.load(Acquire).as_ref() } {
            return Ok(m);
        }
        let Some((dir, name)) = &self.spec else {
            return Err("not in a group".into());
        };
        let _one = self.joining.lock();
        // SAFETY: as above.
        if let Some(m) = unsafe { self.joined.load(Acquire).as_ref() } {
            return Ok(m);
        }
        let (file, slot) = GroupFile::join(dir, name).map_err(|e| e.0)?;
        let m: &'static Membership = Box::leak(Box::new(Membership {
            file,
            slot,
            name: name.clone(),
        }));
        self.joined.store(
            (m as *const Membership).cast_mut(),
            std::sync::atomic::Ordering::Release,
        );
        Ok(m)
    }

    /// This process's hold on the group's GPU `uuid` (made with `own_limit` if the group has
    /// no entry for it yet; `total`: the GPU's real memory, for the views).
    pub fn member(
        &self,
        uuid: [u8; 16],
        own_limit: u64,
        total: u64,
        cap: u64,
    ) -> Result<Member, String> {
        let membership = self.join()?;
        let file = &membership.file;
        let index = {
            let locked = file.lock().map_err(|e| e.0)?;
            file.device(&locked, uuid, own_limit, total)
                .map_err(|e| e.0)?
        };
        let slot = membership.slot();
        let device = &file.layout().devices[index];
        Ok(Member {
            device,
            charged: &slot.charged[index],
            index,
            membership,
            cap,
            seen_limit: AtomicU64::new(device.limit.load(Relaxed).min(cap)),
        })
    }

    /// In a forked child: it is not its parent's member. The inherited descriptor is closed
    /// (the parent's slot lock lives on in the parent's) and the mapping left in place; the
    /// child joins afresh, in a slot of its own, when it first uses a GPU.
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        let m = self.joined.swap(std::ptr::null_mut(), Relaxed);
        // SAFETY: null or a leaked Membership; leaked again here, its descriptor closed.
        if let Some(m) = unsafe { m.as_ref() } {
            m.file.close_in_child();
        }
        // SAFETY: the caller's promise: one thread, so no other holds it.
        unsafe { self.joining.reset_in_child(()) };
    }
}

impl Member {
    /// The group's limit now (`cuquota set` changes it live), within this process's cap.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.device.limit.load(Relaxed).min(self.cap)
    }

    /// `bytes` were added to the group's counter (now `in_use`): this member's record
    /// follows, and the group's peak.
    #[inline]
    pub fn charged_more(&self, bytes: u64, in_use: u64) {
        self.charged.fetch_add(bytes, Relaxed);
        // A plain load first: the peak rarely moves, and an RMW costs every member more.
        if in_use > self.device.peak.load(Relaxed) {
            self.device.peak.fetch_max(in_use, Relaxed);
        }
    }

    /// `bytes` go back: this member's record first, then the group's counter (killed in
    /// between, the group stays too high, never too low). Returns the group's in-use after.
    #[inline]
    pub fn charged_less(&self, bytes: u64) -> u64 {
        self.charged.fetch_sub(bytes, Relaxed);
        self.device.in_use.fetch_sub(bytes, Release) - bytes
    }

    /// `limit` (the group's now) differs from the limit this member last saw: the one it
    /// saw before, once per change (threads racing on one change: one of them).
    #[inline]
    pub fn limit_moved(&self, limit: u64) -> Option<u64> {
        if self.seen_limit.load(Relaxed) == limit {
            return None;
        }
        let before = self.seen_limit.swap(limit, Relaxed);
        (before != limit).then_some(before)
    }

    /// The limit if there is one.
    pub fn known_limit(&self) -> Option<u64> {
        Some(self.limit()).filter(|l| *l != NO_LIMIT)
    }

    /// Gives back what dead members held (under the header lock, waited for a bounded
    /// time). Returns how many were reaped (0 also when the lock could not be had).
    pub fn reap_dead(&self) -> usize {
        let file = &self.membership.file;
        match file.lock() {
            Ok(locked) => file.reap(&locked, Some(self.membership.slot)),
            Err(_) => 0,
        }
    }

    /// The other living members holding anything of the group's quota on this GPU, named
    /// from their registry files under `state_dir` (read, never locked), most first. For a
    /// refusal's words: it reads every registry file.
    pub fn holders(&self, state_dir: &std::path::Path) -> Vec<cuquota_format::holder::Holder> {
        let file = &self.membership.file;
        let members = file.others_on(self.index, self.membership.slot);
        if members.is_empty() {
            return Vec::new();
        }
        let processes = cuquota_state::registry::scan(state_dir).processes;
        let uuid = self.device.uuid();
        cuquota_state::holders::holders(&members, &processes, &self.membership.name, uuid)
    }

    /// Who holds the group's quota on this GPU besides this process: how many other living
    /// members hold anything there, and the bytes not this process's (in flight included,
    /// as the quota counts them).
    pub fn share(&self) -> GroupShare {
        let this_process = self.charged.load(Relaxed);
        // The living only, as the holders the line names (a dead member not yet reaped
        // holds nothing anyone could give back).
        let others = (self.membership.file)
            .others_on(self.index, self.membership.slot)
            .len();
        GroupShare {
            name: self.membership.name.clone(),
            this_process,
            others,
            others_bytes: self
                .device
                .in_use
                .load(Relaxed)
                .saturating_sub(this_process),
        }
    }
}
