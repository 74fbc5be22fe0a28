//! Per-device quota accounting: reserve before the driver is called, commit or roll back
//! after. Lock-free (one compare-and-swap per reservation), so `in_use` never exceeds the
//! limit whatever the threads do. No FFI here.

use crate::group::{Group, GroupShare, Member};
use cuquota_format::holder::Holder;
use cuquota_format::part::PerPart;
use cuquota_format::settings::MAX_DEVICES;
use cuquota_state::registry::{Counters, ProcessFile, UNRESOLVED};
use std::sync::atomic::{
    AtomicPtr, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

/// A snapshot for the exit summary and the trace: the registry's, with the limit in force
/// (see [`DeviceQuota::usage`]).
pub use cuquota_state::registry::Usage;
/// A limit this large is "no limit" (no device has 16 EiB).
pub use cuquota_state::registry::UNLIMITED;

/// The footprint's parts besides allocations: the format crate owns the list (their trace
/// names and words), so that the CLI reads what the interposer writes. Each is charged into
/// the same `in_use`/`held` as allocations, so one compare-and-swap checks the whole
/// footprint against the limit, and kept apart here (indexed by the part) to say where the
/// room went.
pub use cuquota_format::part::Part;

/// Every GPU's counters: the books the engine charges, through [`DeviceQuota`]'s reserve,
/// commit, roll back and release. Where the counters live is this type's business alone:
/// in this process's registry file (`STATE_DIR/processes/…`, so that `cuquota top` and
/// `cuquota metrics` read them live, at no cost to an allocation), or in this process's
/// memory when it is not registered. A group member charges its group's counters too
/// ([`crate::group`]).
pub struct Books {
    /// The counters: in the registry file's mapping, or leaked memory; never freed.
    devices: AtomicPtr<[Counters; MAX_DEVICES]>,
    /// This process's registry file, when it registered (null: not, or a forked child).
    registry: AtomicPtr<ProcessFile>,
    /// The group this process shares its quotas with (`CUQUOTA_GROUP`), if any.
    group: Group,
}

/// The counters a forked child keeps (it does not write into its parent's file).
static CHILD_COUNTERS: [Counters; MAX_DEVICES] = [const { Counters::new() }; MAX_DEVICES];

impl Books {
    /// Books in this process's memory.
    pub fn new(group: Group) -> Books {
        let devices = Box::leak(Box::new([const { Counters::new() }; MAX_DEVICES]));
        Books {
            devices: AtomicPtr::new(devices),
            registry: AtomicPtr::new(std::ptr::null_mut()),
            group,
        }
    }

    /// Books in this process's registry file, which stays open (and so listed) for its life.
    pub fn registered(group: Group, file: ProcessFile) -> Books {
        let file: &'static ProcessFile = Box::leak(Box::new(file));
        // The mapping lives as long as the leaked file, that is, for good.
        let counters: &'static [Counters; MAX_DEVICES] = file.counters();
        for c in counters.iter() {
            c.limit.store(UNRESOLVED, Relaxed);
        }
        Books {
            devices: AtomicPtr::new((counters as *const [Counters; MAX_DEVICES]).cast_mut()),
            registry: AtomicPtr::new((file as *const ProcessFile).cast_mut()),
            group,
        }
    }

    /// `device`'s counters; `None` for an ordinal beyond any the books keep.
    #[inline(always)]
    pub fn device(&self, device: u32) -> Option<&DeviceQuota> {
        // SAFETY: always a leaked array or a mapping that is never unmapped.
        let devices = unsafe { &*self.devices.load(Relaxed) };
        devices.get(device as usize).map(DeviceQuota::of)
    }

    /// The group's name, when the process is configured into one.
    pub fn group_name(&self) -> Option<&str> {
        self.group.name()
    }

    fn registry(&self) -> Option<&'static ProcessFile> {
        // SAFETY: null or a leaked ProcessFile, never freed.
        unsafe { self.registry.load(Acquire).as_ref() }
    }

    /// Whether the process is listed (its books in its registry file).
    pub fn is_registered(&self) -> bool {
        self.registry().is_some()
    }

    /// What GPU `device` is, for the views (once, at its first use).
    pub fn describe(&self, device: u32, uuid: [u8; 16], total: u64, name: &str) {
        if let Some(file) = self.registry() {
            file.describe_device(device as usize, uuid, total, name);
        }
    }

    /// A GPU's real memory, as the driver just said (a figure the program asked for).
    pub fn describe_total(&self, device: u32, total: u64) {
        if let Some(file) = self.registry() {
            file.set_total(device as usize, total);
        }
    }

    /// The last refusal's words, for the views.
    pub fn refused(&self, device: u32, line: &str) {
        if let Some(file) = self.registry() {
            file.refused(device, line);
        }
    }

    /// Joins `device` (GPU `uuid`, `total` bytes) to the group's quota of that GPU: from
    /// now on its reservations are checked against the group's counter and limit. The
    /// group's entry is made with `own_limit` if it has none; `cap` bounds the group's limit
    /// for this process (a policy's). Returns the group's limit.
    pub fn join_group(
        &self,
        device: u32,
        uuid: [u8; 16],
        own_limit: u64,
        total: u64,
        cap: u64,
    ) -> Result<u64, String> {
        let quota = self.device(device).ok_or("no such device")?;
        if let Some(m) = quota.member() {
            return Ok(m.limit());
        }
        let member: &'static Member =
            Box::leak(Box::new(self.group.member(uuid, own_limit, total, cap)?));
        quota.link(member);
        Ok(member.limit())
    }

    /// In a forked child: nothing is in use, nothing happened yet; the limits stay, and
    /// the child is not its parent's group member.
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        // The parent's file is the parent's: the child counts in memory of its own, and is
        // not listed. Its limits stay the parent's (resolving one again could ask a driver
        // another of the parent's threads was inside at the fork); copied before the parent's
        // mapping is let go.
        let fresh = (&CHILD_COUNTERS as *const [Counters; MAX_DEVICES]).cast_mut();
        let parent = self.devices.swap(fresh, Relaxed);
        if !std::ptr::eq(parent, fresh) {
            // SAFETY: a leaked array or a mapping still mapped (let go just below).
            let parent = unsafe { &*parent };
            for (child, parent) in CHILD_COUNTERS.iter().zip(parent.iter()) {
                child.limit.store(parent.limit.load(Relaxed), Relaxed);
            }
        }
        if let Some(file) = self.registry() {
            file.close_in_child();
        }
        self.registry.store(std::ptr::null_mut(), Relaxed);
        for d in CHILD_COUNTERS.iter() {
            DeviceQuota::of(d).reset();
        }
        // SAFETY: the caller's promise.
        unsafe { self.group.reset_in_child() };
    }
}

/// The quota of one device: the registry's [`Counters`] (their layout says why they are laid
/// out so, and why nothing is striped), charged through reserve, commit, roll back and
/// release. The counters' `link` is this process's group link for the GPU: its [`Member`]
/// (null: not in a group), read only here.
#[derive(Debug)]
#[repr(transparent)]
pub struct DeviceQuota(Counters);

/// What a reservation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reservation {
    /// Charged; `in_use` is the total after this reservation.
    Granted { in_use: u64 },
    /// Over the quota and refused (enforce mode). Nothing was charged.
    Refused { in_use: u64, limit: u64 },
    /// Over the quota but charged anyway (observe mode).
    Allowed { in_use_before: u64, limit: u64 },
    /// Too large to count at all (the sum would pass 2^64): not charged; the driver will
    /// refuse it (with no quota, or in observe mode).
    Uncharged,
}

/// Reserves `bytes` on `counter` against `limit` with one compare-and-swap loop, so the
/// counter never passes the limit whatever the threads (and processes) do; a refusal, or
/// in observe mode what would have been one, is counted in `refusals`.
#[inline(always)]
fn reserve_on(
    counter: &AtomicU64,
    refusals: &AtomicU64,
    bytes: u64,
    limit: u64,
    enforce: bool,
) -> Reservation {
    let mut current = counter.load(Relaxed);
    loop {
        let Some(after) = current.checked_add(bytes) else {
            // More than 16 EiB in all: over any quota, and no counter can hold it.
            return if enforce && limit != UNLIMITED {
                refusals.fetch_add(1, Relaxed);
                Reservation::Refused {
                    in_use: current,
                    limit,
                }
            } else {
                Reservation::Uncharged
            };
        };
        let over = limit != UNLIMITED && after > limit;
        if over && enforce {
            refusals.fetch_add(1, Relaxed);
            return Reservation::Refused {
                in_use: current,
                limit,
            };
        }
        match counter.compare_exchange_weak(current, after, Acquire, Relaxed) {
            Ok(_) if over => {
                refusals.fetch_add(1, Relaxed);
                return Reservation::Allowed {
                    in_use_before: current,
                    limit,
                };
            }
            Ok(_) => return Reservation::Granted { in_use: after },
            Err(now) => current = now,
        }
    }
}

impl Default for DeviceQuota {
    fn default() -> Self {
        Self::new()
    }
}

impl DeviceQuota {
    pub const fn new() -> Self {
        DeviceQuota(Counters::new())
    }

    /// The quota kept in `counters` (this process's: in its memory or its registry file).
    #[inline(always)]
    fn of(counters: &Counters) -> &DeviceQuota {
        // SAFETY: `DeviceQuota` is `repr(transparent)` over `Counters`: one layout, so the
        // reference is valid for the same lifetime.
        unsafe { &*(counters as *const Counters).cast::<DeviceQuota>() }
    }

    /// In a group: this GPU's hold on the group's counters.
    #[inline(always)]
    fn member(&self) -> Option<&'static Member> {
        // SAFETY: only `link` stores it: null or a leaked Member, never freed.
        unsafe { self.0.link.load(Relaxed).cast::<Member>().as_ref() }
    }

    /// From now on charges the group's counters through `member` too.
    fn link(&self, member: &'static Member) {
        self.0
            .link
            .store((member as *const Member).cast_mut().cast(), Release);
    }

    /// In a group: the group's limit now, with the limit this process saw before when
    /// `cuquota set` moved it since this process last asked (once per change).
    pub fn group_limit_moved(&self) -> Option<(u64, u64)> {
        let m = self.member()?;
        let limit = m.limit();
        m.limit_moved(limit).map(|before| (before, limit))
    }

    /// In a group: the other living members holding the group's quota of this GPU, named
    /// from their registry files under `state_dir` (reads every one: only for a refusal
    /// that is said). Empty outside a group.
    pub fn group_holders(&self, state_dir: &std::path::Path) -> Vec<Holder> {
        self.member()
            .map_or_else(Vec::new, |m| m.holders(state_dir))
    }

    /// The limit in bytes ([`UNLIMITED`] for none), resolving it on first use with
    /// `resolve` (which may ask the driver for the device's total memory, and joins the
    /// group's quota of the GPU). A group's limit is read live, never kept here: `moved`
    /// hears of it, with the limit seen before, when `cuquota set` changed it (only a
    /// member's path pays for that: a process's own limit never changes).
    #[inline(always)]
    pub fn limit_or_resolve<E>(
        &self,
        resolve: impl FnOnce() -> Result<u64, E>,
        moved: impl FnOnce(u64, u64),
    ) -> Result<u64, E> {
        let limit = self.0.limit.load(Relaxed);
        if limit != UNRESOLVED {
            return Ok(limit);
        }
        if let Some(m) = self.member() {
            let limit = m.limit();
            if let Some(before) = m.limit_moved(limit) {
                moved(before, limit);
            }
            return Ok(limit);
        }
        let resolved = resolve()?.min(UNLIMITED);
        if self.member().is_none() {
            // Two threads may resolve at once; they compute the same value.
            self.0.limit.store(resolved, Relaxed);
        }
        Ok(resolved)
    }

    /// The limit if it is resolved and finite (a group's: now).
    pub fn known_limit(&self) -> Option<u64> {
        if let Some(m) = self.member() {
            return m.known_limit();
        }
        match self.0.limit.load(Relaxed) {
            UNRESOLVED | UNLIMITED => None,
            l => Some(l),
        }
    }

    /// Reserves `bytes` against `limit` (from [`Self::limit_or_resolve`]); in a group,
    /// against the group's counter and its limit now.
    #[inline(always)]
    pub fn reserve(&self, bytes: u64, limit: u64, enforce: bool) -> Reservation {
        if let Some(m) = self.member() {
            return self.reserve_in_group(m, bytes, enforce);
        }
        reserve_on(&self.0.in_use, &self.0.refusals, bytes, limit, enforce)
    }

    /// A group member's reservation: the group's counter first (checked against its limit),
    /// then this member's record, then this process's own count. Killed in between, the
    /// group is left too high, never too low.
    #[cold]
    #[inline(never)]
    fn reserve_in_group(&self, m: &Member, bytes: u64, enforce: bool) -> Reservation {
        let group = &m.device.in_use;
        let mut reservation = reserve_on(group, &self.0.refusals, bytes, m.limit(), enforce);
        // Before anyone is refused for lack of room, dead members give theirs back.
        if matches!(reservation, Reservation::Refused { .. }) && m.reap_dead() > 0 {
            self.forgive_refusal();
            reservation = reserve_on(group, &self.0.refusals, bytes, m.limit(), enforce);
        }
        match reservation {
            Reservation::Granted { in_use } => m.charged_more(bytes, in_use),
            Reservation::Allowed { in_use_before, .. } => {
                m.charged_more(bytes, in_use_before + bytes);
                m.device.refusals.fetch_add(1, Relaxed);
            }
            Reservation::Refused { .. } => {
                m.device.refusals.fetch_add(1, Relaxed);
                return reservation;
            }
            Reservation::Uncharged => return reservation,
        }
        self.0.in_use.fetch_add(bytes, Relaxed);
        reservation
    }

    /// The driver refused or failed: give the reservation back. Returns in-use after (the
    /// group's, in a group).
    pub fn rollback(&self, bytes: u64) -> u64 {
        let own = self.0.in_use.fetch_sub(bytes, Relaxed) - bytes;
        match self.member() {
            None => own,
            Some(m) => m.charged_less(bytes),
        }
    }

    /// The driver succeeded: `bytes` (already reserved) are held. Returns the bytes held
    /// after. The peak is of held bytes only, so that a request in flight (this thread's
    /// before the driver answered, or another's) never counts as held.
    #[inline(always)]
    pub fn commit(&self, bytes: u64) -> u64 {
        self.0.allocations.fetch_add(1, Relaxed);
        self.hold(bytes)
    }

    #[inline(always)]
    fn hold(&self, bytes: u64) -> u64 {
        let now = self.0.held.fetch_add(bytes, Relaxed) + bytes;
        // A plain load first: the peak rarely moves, and an RMW costs more.
        if now > self.0.peak.load(Relaxed) {
            self.0.peak.fetch_max(now, Relaxed);
        }
        now
    }

    /// Memory was freed: return its bytes. Returns the bytes held after.
    #[inline(always)]
    pub fn release(&self, bytes: u64) -> u64 {
        // Held first: held ≤ in_use ≤ limit at every moment, so the peak never passes the
        // limit (room given back in in_use first could be reserved, committed and counted
        // while these bytes were still held).
        let held = self.0.held.fetch_sub(bytes, Relaxed) - bytes;
        self.0.in_use.fetch_sub(bytes, Release);
        if let Some(m) = self.member() {
            m.charged_less(bytes);
        }
        held
    }

    /// Allocations ever committed (the summary's count).
    pub fn commits(&self) -> u64 {
        self.0.allocations.load(Relaxed)
    }

    /// Bytes held (committed, not freed), without reservations in flight.
    pub fn held(&self) -> u64 {
        self.0.held.load(Relaxed)
    }

    /// The driver refused a request we had room for.
    pub fn count_driver_refusal(&self) {
        self.0.refusals.fetch_add(1, Relaxed);
    }

    /// A refusal that [`Self::reserve`] counted is retried (after a trim made room): it
    /// was not one.
    pub fn forgive_refusal(&self) {
        self.0.refusals.fetch_sub(1, Relaxed);
    }

    /// `bytes` of `part`, already reserved, are held. Returns the bytes held after.
    pub fn commit_part(&self, part: Part, bytes: u64) -> u64 {
        let now = self.hold(bytes);
        let p = self.0.parts[part as usize].fetch_add(bytes, Relaxed) + bytes;
        self.0.part_peaks[part as usize].fetch_max(p, Relaxed);
        now
    }

    /// Charges `bytes` of `part` whatever the limit: the driver already holds them and they
    /// cannot be given back. Returns the bytes held after.
    pub fn force_part(&self, part: Part, bytes: u64) -> u64 {
        self.0.in_use.fetch_add(bytes, Relaxed);
        if let Some(m) = self.member() {
            let in_use = m.device.in_use.fetch_add(bytes, Relaxed) + bytes;
            m.charged_more(bytes, in_use);
        }
        self.commit_part(part, bytes)
    }

    /// Gives back up to `bytes` of `part` (never more than it holds). Returns what was
    /// given back.
    pub fn release_part(&self, part: Part, bytes: u64) -> u64 {
        let counter = &self.0.parts[part as usize];
        let mut current = counter.load(Relaxed);
        loop {
            let take = bytes.min(current);
            match counter.compare_exchange_weak(current, current - take, Relaxed, Relaxed) {
                Ok(_) => {
                    self.release(take);
                    return take;
                }
                Err(now) => current = now,
            }
        }
    }

    /// Bytes of `part` held now.
    pub fn part(&self, part: Part) -> u64 {
        self.0.parts[part as usize].load(Relaxed)
    }

    /// Every part's bytes now, indexed by [`Part`].
    pub fn parts(&self) -> PerPart<u64> {
        PerPart::from_fn(|p| self.0.parts[p as usize].load(Relaxed))
    }

    /// cuquota trimmed this process's pools or graph memory and got `bytes` back.
    pub fn count_trim(&self, bytes: u64) {
        self.0.trims.fetch_add(1, Relaxed);
        self.0.trimmed.fetch_add(bytes, Relaxed);
    }

    /// This process's bytes reserved or held.
    pub fn in_use(&self) -> u64 {
        self.0.in_use.load(Relaxed)
    }

    /// What the limit is checked against: this process's in-use, or its group's.
    pub fn quota_in_use(&self) -> u64 {
        match self.member() {
            Some(m) => m.device.in_use.load(Relaxed),
            None => self.0.in_use.load(Relaxed),
        }
    }

    /// In a group: dead members give back what they held (before a figure is told).
    pub fn reap_dead_members(&self) {
        if let Some(m) = self.member() {
            m.reap_dead();
        }
    }

    /// In a group: who holds the quota of this GPU besides this process.
    pub fn group_share(&self) -> Option<GroupShare> {
        self.member().map(|m| m.share())
    }

    /// In a group: the group's name and the highest its members held on this GPU.
    pub fn group_peak(&self) -> Option<(String, u64)> {
        let m = self.member()?;
        Some((m.membership.name.clone(), m.device.peak.load(Relaxed)))
    }

    /// The counters now, the limit the one in force ([`Self::known_limit`], a group's
    /// included) rather than the counter's own.
    pub fn usage(&self) -> Usage {
        Usage {
            limit: self.known_limit(),
            ..self.0.usage()
        }
    }

    /// In a forked child: nothing is in use, nothing happened yet; the limit stays (a
    /// group's is found again when the child joins).
    pub fn reset(&self) {
        self.0.link.store(std::ptr::null_mut(), Relaxed);
        for counter in [
            &self.0.in_use,
            &self.0.held,
            &self.0.peak,
            &self.0.allocations,
            &self.0.refusals,
            &self.0.trims,
            &self.0.trimmed,
        ]
        .into_iter()
        .chain(&self.0.parts)
        .chain(&self.0.part_peaks)
        {
            counter.store(0, Relaxed);
        }
    }

    /// Whether anything ever happened on this device (for the exit summary).
    pub fn was_used(&self) -> bool {
        self.0.allocations.load(Relaxed) > 0
            || self.0.refusals.load(Relaxed) > 0
            || self.0.part_peaks.iter().any(|p| p.load(Relaxed) > 0)
    }
}

// ---- The pool cache ----------------------------------------------------------------------

impl DeviceQuota {
    /// A pool allocation of `bytes` was freed and its pool keeps the memory: its charge
    /// stays held and becomes part of `part` (in one step, so nobody can reserve the room in
    /// between). Returns the bytes held.
    pub fn move_to_part(&self, part: Part, bytes: u64) -> u64 {
        let p = self.0.parts[part as usize].fetch_add(bytes, Relaxed) + bytes;
        // A plain load first, as for the peak: the part's peak rarely moves.
        if p > self.0.part_peaks[part as usize].load(Relaxed) {
            self.0.part_peaks[part as usize].fetch_max(p, Relaxed);
        }
        self.0.held.load(Relaxed)
    }

    /// An allocation of `bytes`, reserved whole, came (at least `taken` bytes of it) out of
    /// what `part` held: `taken` leaves the part, and the reservation gives back what the
    /// part covered, so that the allocation is committed in one step, and held bytes move
    /// only by `bytes − taken`. The same figures as [`Self::release_part`] of `taken` and
    /// then [`Self::commit`] of `bytes`, with two atomic writes fewer when the part gave all
    /// of it, and no moment at which held dips. Returns the bytes held after and what the
    /// part gave.
    pub fn commit_from_part(&self, part: Part, taken: u64, bytes: u64) -> (u64, u64) {
        let counter = &self.0.parts[part as usize];
        let mut current = counter.load(Relaxed);
        let taken = loop {
            let take = taken.min(current);
            match counter.compare_exchange_weak(current, current - take, Relaxed, Relaxed) {
                Ok(_) => break take,
                Err(now) => current = now,
            }
        };
        self.0.allocations.fetch_add(1, Relaxed);
        // Held first when it falls (held ≤ in-use at every moment); in-use first when it
        // rises.
        let held = if taken > bytes {
            let held = self.0.held.fetch_sub(taken - bytes, Relaxed) - (taken - bytes);
            self.0.in_use.fetch_sub(taken, Release);
            held
        } else {
            self.0.in_use.fetch_sub(taken, Release);
            if taken < bytes {
                self.hold(bytes - taken)
            } else {
                self.0.held.load(Relaxed)
            }
        };
        if let Some(m) = self.member() {
            m.charged_less(taken);
        }
        (held, taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// `commit_from_part` ends where `release_part` then `commit` end, whatever the part gave.
    #[test]
    fn a_commit_from_a_part_matches_a_release_then_a_commit() {
        // (part held, taken, bytes): all of it, more than it (a reading fell further), less
        // than it (the pool grew too), more than the part holds.
        for (part_bytes, taken, bytes) in [(8, 4, 4), (8, 6, 4), (8, 2, 4), (3, 6, 4)] {
            let setup = || {
                let q = DeviceQuota::new();
                let limit = q.limit_or_resolve(|| Ok::<_, ()>(100), |_, _| {}).unwrap();
                q.force_part(Part::PoolCache, part_bytes);
                assert!(matches!(
                    q.reserve(bytes, limit, true),
                    Reservation::Granted { .. }
                ));
                q
            };
            let (a, b) = (setup(), setup());
            let (held, gave) = a.commit_from_part(Part::PoolCache, taken, bytes);
            let gave_b = b.release_part(Part::PoolCache, taken);
            let held_b = b.commit(bytes);
            assert_eq!(
                (held, gave),
                (held_b, gave_b),
                "{part_bytes} {taken} {bytes}"
            );
            assert_eq!(a.usage(), b.usage(), "{part_bytes} {taken} {bytes}");
            assert!(a.held() <= a.in_use());
        }
    }

    #[test]
    fn reserve_up_to_the_limit_then_refuse() {
        let q = DeviceQuota::new();
        let limit = q.limit_or_resolve(|| Ok::<_, ()>(100), |_, _| {}).unwrap();
        assert_eq!(
            q.reserve(60, limit, true),
            Reservation::Granted { in_use: 60 }
        );
        assert_eq!(
            q.reserve(40, limit, true),
            Reservation::Granted { in_use: 100 }
        );
        assert_eq!(
            q.reserve(1, limit, true),
            Reservation::Refused {
                in_use: 100,
                limit: 100
            }
        );
        assert_eq!(q.rollback(40), 60);
        assert_eq!(q.commit(60), 60);
        assert_eq!(q.release(60), 0);
        let u = q.usage();
        assert_eq!(
            (u.peak, u.refusals, u.allocations, u.in_use),
            (60, 1, 1, 0),
            "the peak counts what was held, not what was reserved then rolled back"
        );
    }

    /// A process that held 4 KiB once reported a 2 GiB peak, because
    /// another thread's 2 GiB request was reserved (in flight) when the 4 KiB committed.
    #[test]
    fn the_peak_is_of_held_bytes_not_of_requests_in_flight() {
        let q = DeviceQuota::new();
        let (big, small) = (2 << 30, 4096);
        assert!(matches!(
            q.reserve(big, UNLIMITED, true),
            Reservation::Granted { .. }
        ));
        assert!(matches!(
            q.reserve(small, UNLIMITED, true),
            Reservation::Granted { .. }
        ));
        assert_eq!(q.commit(small), small);
        assert_eq!(q.rollback(big), small, "the driver refused the big one");
        let u = q.usage();
        assert_eq!((u.peak, u.in_use, q.held()), (small, small, small));
        assert_eq!(q.release(small), 0);
        assert_eq!((q.in_use(), q.held(), q.usage().peak), (0, 0, small));
    }

    #[test]
    fn parts_share_the_limit_with_allocations() {
        let q = DeviceQuota::new();
        let limit = 100;
        assert!(matches!(
            q.reserve(30, limit, true),
            Reservation::Granted { .. }
        ));
        assert_eq!(q.commit_part(Part::Context, 30), 30);
        assert!(matches!(
            q.reserve(70, limit, true),
            Reservation::Granted { .. }
        ));
        q.commit(70);
        assert!(matches!(
            q.reserve(1, limit, true),
            Reservation::Refused { .. }
        ));
        q.forgive_refusal();
        assert_eq!(q.force_part(Part::Graph, 10), 110, "forced past the limit");
        assert_eq!(
            q.release_part(Part::Graph, 25),
            10,
            "never more than it holds"
        );
        let u = q.usage();
        assert_eq!(u.parts.0, [0, 0, 30]);
        assert_eq!(u.part_peaks.0, [0, 10, 30]);
        assert_eq!((u.in_use, u.peak, u.refusals), (100, 110, 0));
        assert_eq!(u.allocations_bytes(), 70);
        q.count_trim(5);
        assert_eq!((q.usage().trims, q.usage().trimmed), (1, 5));
        q.reset();
        assert_eq!(q.usage(), Usage::default());
    }

    #[test]
    fn observe_mode_charges_but_counts() {
        let q = DeviceQuota::new();
        assert_eq!(
            q.reserve(150, 100, false),
            Reservation::Allowed {
                in_use_before: 0,
                limit: 100
            }
        );
        assert_eq!(q.in_use(), 150);
        assert_eq!(q.usage().refusals, 1);
    }

    #[test]
    fn limit_resolves_once_and_errors_pass_through() {
        let q = DeviceQuota::new();
        assert_eq!(q.limit_or_resolve(|| Err::<u64, _>(3), |_, _| {}), Err(3));
        assert_eq!(q.known_limit(), None);
        assert_eq!(q.limit_or_resolve(|| Ok::<_, ()>(7), |_, _| {}), Ok(7));
        assert_eq!(q.limit_or_resolve(|| Ok::<_, ()>(9), |_, _| {}), Ok(7));
        let unlimited = DeviceQuota::new();
        assert_eq!(
            unlimited.limit_or_resolve(|| Ok::<_, ()>(u64::MAX), |_, _| {}),
            Ok(UNLIMITED)
        );
        assert_eq!(unlimited.known_limit(), None);
        assert_eq!(
            unlimited.reserve(u64::MAX - 1, UNLIMITED, true),
            Reservation::Granted {
                in_use: u64::MAX - 1
            },
            "no quota refuses nothing"
        );
        assert_eq!(
            unlimited.reserve(2, UNLIMITED, true),
            Reservation::Uncharged
        );
        assert_eq!(unlimited.reserve(2, 100, false), Reservation::Uncharged);
        assert_eq!(
            unlimited.reserve(2, 100, true),
            Reservation::Refused {
                in_use: u64::MAX - 1,
                limit: 100
            }
        );
        assert_eq!(
            unlimited.rollback(u64::MAX - 1),
            0,
            "nothing else was charged"
        );
    }

    /// Counts are exact once the threads are done, and read the same through the registry's
    /// layout (what `cuquota top` reads).
    #[test]
    fn counts_are_exact_under_threads_and_read_through_the_registry_layout() {
        let q = Arc::new(DeviceQuota::new());
        let (threads, pairs) = (8u64, 2_000u64);
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..pairs {
                        let size = 1 + (t + i) % 5;
                        assert!(matches!(
                            q.reserve(size, UNLIMITED, true),
                            Reservation::Granted { .. }
                        ));
                        q.commit(size);
                        q.release(size);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let u = q.usage();
        assert_eq!((u.allocations, u.in_use, q.held()), (threads * pairs, 0, 0));
        assert!(u.peak >= 5 && u.peak <= 5 * threads, "{}", u.peak);
        let counters: &Counters = &q.0;
        assert_eq!(counters.allocations.load(Relaxed), threads * pairs);
        assert_eq!(counters.held.load(Relaxed), 0);
    }

    #[test]
    fn never_exceeds_the_limit_under_threads() {
        let q = Arc::new(DeviceQuota::new());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..20_000u64 {
                        let size = 1 + i % 7;
                        if let Reservation::Granted { in_use } = q.reserve(size, 50, true) {
                            assert!(in_use <= 50);
                            q.commit(size);
                            held.push(size);
                        }
                        if held.len() > 3 {
                            q.release(held.remove(0));
                        }
                    }
                    for s in held {
                        q.release(s);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(q.in_use(), 0);
        assert!(q.usage().peak <= 50);
    }
}
