//! The books of virtual memory management (`cuMemCreate` and friends): how many handle
//! references and mappings each physical allocation made in this process has, and which
//! mapped range belongs to which allocation. The driver frees a `cuMemCreate` allocation only
//! when every reference is released *and* every mapping is unmapped, so that is when its
//! charge (kept in the engine's handle ledger) is given back. No FFI here.
//!
//! Every change is made *before* the driver is called and undone if the call fails, as the
//! engine does for frees: whatever order two threads' calls reach the driver in, the books
//! never count an allocation as gone while a call that keeps it alive may still succeed
//! (a `cuMemMap` in flight counts as a mapping, a `cuMemRetainAllocationHandle` in flight as
//! a reference). Handles this process did not create here (imported ones) are not in the
//! books: their calls pass through and end nothing.
//!
//! cuda.h on `cuMemRelease`: the memory is freed "when all outstanding references to the
//! handle (including it's shareable counterparts) are also released", and "Each time a
//! recipient process imports a shareable handle, it needs to pair it with ::cuMemRelease";
//! on `cuMemExportToShareableHandle`: "Once all shareable handles are closed and the
//! allocation is released, the allocated memory referenced will be released". So an export
//! (a POSIX file descriptor) keeps its allocation until the descriptor is closed, which no
//! call announces: the books keep the export, and whoever can look at the descriptor
//! ([`VmmBooks::reap_exports`]) ends it. An import of one of our own exports is one more
//! reference to our allocation, whatever handle value the driver gives for it: never an end.

use std::collections::{BTreeMap, HashMap};

/// What keeps one physical allocation alive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Keepers {
    refs: u32,
    maps: u32,
}

impl Keepers {
    fn is_unused(self) -> bool {
        self.refs == 0 && self.maps == 0
    }
}

/// One range `cuMemMap` made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub size: u64,
    pub handle: u64,
}

/// Mappings an unmap took out of the books before its driver call, to put back if it fails.
#[derive(Debug, Default)]
pub struct Unmapped {
    mappings: Vec<(u64, Mapping)>,
    /// Handles that this unmap leaves with no reference and no mapping: their memory is
    /// freed by the call.
    pub ended: Vec<u64>,
}

/// Where `cuMemMapArrayAsync` maps memory: (resource type, resource, subresource type,
/// subresource bytes), as the caller passed them.
pub type ArraySlot = (i32, usize, i32, [u64; 4]);

/// A shareable handle `cuMemExportToShareableHandle` gave: a POSIX file descriptor, and the
/// file it was (device, inode), so that a closed descriptor whose number came back for
/// another file is not taken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Export {
    pub fd: i32,
    pub file: (u64, u64),
}

#[derive(Default)]
pub struct VmmBooks {
    handles: HashMap<u64, Keepers>,
    /// Mappings of the handles in `handles`, by base address.
    mappings: BTreeMap<u64, Mapping>,
    /// The exports of handles in `handles` still open: each keeps its allocation.
    exports: HashMap<u64, Vec<Export>>,
    /// Handle values an import of our own export gave that are not the allocation's own →
    /// the allocation's handle (a release of one is a release of a reference of it).
    aliases: HashMap<u64, u64>,
    /// Our allocations mapped into sparse or deferred-mapping arrays: slot → handle.
    array_mappings: HashMap<ArraySlot, u64>,
}

impl VmmBooks {
    pub fn new() -> Self {
        Self::default()
    }

    /// `cuMemCreate` gave `handle`: one reference, no mapping. A stale entry of the same
    /// value (an allocation whose end we never saw) goes, with its mappings.
    pub fn created(&mut self, handle: u64) {
        if self.handles.contains_key(&handle) {
            self.forget(handle);
        }
        self.handles.insert(handle, Keepers { refs: 1, maps: 0 });
    }

    /// Whether `handle` is one of ours.
    pub fn knows(&self, handle: u64) -> bool {
        self.handles.contains_key(&handle)
    }

    /// The allocation a handle value stands for: its own, or the one an import of our
    /// export gave it for.
    pub fn allocation_of(&self, handle: u64) -> u64 {
        self.aliases.get(&handle).copied().unwrap_or(handle)
    }

    /// Before `cuMemRelease(handle)`: drops one reference of its allocation. `None` when
    /// the handle is not ours or has no reference left (the driver answers that call);
    /// `Some(true)` when this release frees the memory.
    pub fn release(&mut self, handle: u64) -> Option<bool> {
        let handle = self.allocation_of(handle);
        let held = self.handles.get_mut(&handle).filter(|h| h.refs > 0)?;
        held.refs -= 1;
        Some(self.end_if_unused(handle))
    }

    /// A release (or a retain in flight) failed: the reference is there after all.
    pub fn add_ref(&mut self, handle: u64) {
        let handle = self.allocation_of(handle);
        self.handles.entry(handle).or_default().refs += 1;
    }

    /// `cuMemExportToShareableHandle` gave `export` for `handle`: if the handle is ours,
    /// the export keeps its allocation until it is closed.
    pub fn exported(&mut self, handle: u64, export: Export) {
        let handle = self.allocation_of(handle);
        if self.handles.contains_key(&handle) {
            self.exports.entry(handle).or_default().push(export);
        }
    }

    /// The allocation whose export `export` is, if it is one of ours still open.
    pub fn export_of(&self, export: Export) -> Option<u64> {
        (self.exports.iter())
            .find(|(_, list)| list.contains(&export))
            .map(|(&h, _)| h)
    }

    /// `cuMemImportFromShareableHandle` gave `got`; `own` is the allocation whose export
    /// was imported, if ours. One more reference of it (under `got` too, if the driver gave
    /// another value); a value of ours given back for an export the books cannot tell (a
    /// duplicated descriptor) is a reference as well. Anything else is not ours: an alias
    /// left under that value is stale and goes.
    pub fn imported(&mut self, got: u64, own: Option<u64>) {
        let own = own.filter(|h| self.handles.contains_key(h));
        match own {
            Some(h) if h != got => {
                self.aliases.insert(got, h);
            }
            _ => {
                self.aliases.remove(&got);
            }
        }
        let target = own.unwrap_or(got);
        if let Some(h) = self.handles.get_mut(&target) {
            h.refs += 1;
        }
    }

    /// `cuMemMapArrayAsync` mapped `handle` at `slot` (`ours`: `map_begin` counted it).
    /// Whatever the books held there is replaced (the driver remaps a slot): that mapping
    /// ends, and a handle it leaves unused is returned.
    pub fn array_mapped(&mut self, slot: ArraySlot, handle: u64, ours: bool) -> Option<u64> {
        let old = match ours {
            true => (self.array_mappings).insert(slot, self.allocation_of(handle)),
            false => self.array_mappings.remove(&slot),
        }?;
        if let Some(h) = self.handles.get_mut(&old) {
            h.maps = h.maps.saturating_sub(1);
        }
        self.end_if_unused(old).then_some(old)
    }

    /// Before a `cuMemMapArrayAsync` unmap of `slot`: takes out the mapping there, or, if the
    /// books have none at exactly that slot, the resource's only one (a deferred-mapping
    /// array's subresource is ignored by the driver). Returns (its slot, its handle, whether
    /// the unmap ends the allocation).
    pub fn array_unmap_begin(&mut self, slot: ArraySlot) -> Option<(ArraySlot, u64, bool)> {
        let found = match self.array_mappings.contains_key(&slot) {
            true => slot,
            false => {
                let mut of_resource =
                    (self.array_mappings.keys()).filter(|k| (k.0, k.1) == (slot.0, slot.1));
                match (of_resource.next(), of_resource.next()) {
                    (Some(&only), None) => only,
                    _ => return None,
                }
            }
        };
        let handle = self.array_mappings.remove(&found)?;
        if let Some(h) = self.handles.get_mut(&handle) {
            h.maps = h.maps.saturating_sub(1);
        }
        Some((found, handle, self.end_if_unused(handle)))
    }

    /// The unmap failed: the mapping is back.
    pub fn array_unmap_undo(&mut self, slot: ArraySlot, handle: u64) {
        self.handles.entry(handle).or_default().maps += 1;
        self.array_mappings.insert(slot, handle);
    }

    /// Whether any export is open (the reaping costs a look at each).
    pub fn has_exports(&self) -> bool {
        !self.exports.is_empty()
    }

    /// Exports `is_open` says were closed are gone; the allocations that leaves with
    /// nothing keeping them end, and are returned.
    pub fn reap_exports(&mut self, is_open: impl Fn(&Export) -> bool) -> Vec<u64> {
        let mut emptied = Vec::new();
        self.exports.retain(|&h, list| {
            list.retain(&is_open);
            if list.is_empty() {
                emptied.push(h);
            }
            !list.is_empty()
        });
        emptied.sort_unstable();
        emptied.retain(|&h| self.end_if_unused(h));
        emptied
    }

    /// Before `cuMemMap` of `handle`: counts the mapping in flight. False if not ours.
    pub fn map_begin(&mut self, handle: u64) -> bool {
        let handle = self.allocation_of(handle);
        match self.handles.get_mut(&handle) {
            Some(h) if h.refs > 0 => {
                h.maps += 1;
                true
            }
            _ => false,
        }
    }

    /// `cuMemMap(base, size, .., handle)` succeeded (`ours`: `map_begin` said so). Any
    /// mapping the books still hold over that range is stale (the driver maps no range
    /// twice): it ends, and the handles that ends are returned.
    pub fn map_done(&mut self, base: u64, size: u64, handle: u64, ours: bool) -> Vec<u64> {
        let handle = self.allocation_of(handle);
        let stale: Vec<u64> = self
            .overlapping(base, size)
            .into_iter()
            .map(|(b, _)| b)
            .collect();
        let ended = self.take_mappings(&stale).ended;
        if ours {
            self.mappings.insert(base, Mapping { size, handle });
        }
        ended
    }

    /// `cuMemMap` of `handle` failed after `map_begin`: true when that leaves it unused.
    pub fn map_failed(&mut self, handle: u64) -> bool {
        let handle = self.allocation_of(handle);
        if let Some(h) = self.handles.get_mut(&handle) {
            h.maps = h.maps.saturating_sub(1);
        }
        self.end_if_unused(handle)
    }

    /// Before `cuMemUnmap(base, size)` (or `cuMemAddressFree` of that range): takes out
    /// every mapping that lies inside the range.
    pub fn unmap_begin(&mut self, base: u64, size: u64) -> Unmapped {
        let end = base.saturating_add(size);
        let inside: Vec<u64> = self
            .mappings
            .range(base..end)
            .filter(|(&b, m)| b.saturating_add(m.size) <= end)
            .map(|(&b, _)| b)
            .collect();
        self.take_mappings(&inside)
    }

    /// The unmap failed: everything it took out goes back.
    pub fn unmap_undo(&mut self, unmapped: Unmapped) {
        for (base, m) in unmapped.mappings {
            self.handles.entry(m.handle).or_default().maps += 1;
            self.mappings.insert(base, m);
        }
    }

    /// Before `cuMemRetainAllocationHandle(.., address)`: the handle of our mapping there,
    /// with the reference in flight counted.
    pub fn retain_begin(&mut self, address: u64) -> Option<u64> {
        let (&base, m) = self.mappings.range(..=address).next_back()?;
        if address >= base.saturating_add(m.size) {
            return None;
        }
        let handle = m.handle;
        self.handles.get_mut(&handle)?.refs += 1;
        Some(handle)
    }

    /// The reference counted by `retain_begin` did not happen: true when `handle` is unused.
    pub fn retain_failed(&mut self, handle: u64) -> bool {
        if let Some(h) = self.handles.get_mut(&handle) {
            h.refs = h.refs.saturating_sub(1);
        }
        self.end_if_unused(handle)
    }

    /// The retain gave `handle`, whose reference `retain_begin` did not count (the books had
    /// no mapping there): counted now if the handle is ours.
    pub fn retained(&mut self, handle: u64) {
        if let Some(h) = self.handles.get_mut(&handle) {
            h.refs += 1;
        }
    }

    /// The driver handed out `handle` for memory that is not ours (an import): whatever the
    /// books held under that value is stale and goes. True if there was an entry.
    pub fn forget(&mut self, handle: u64) -> bool {
        self.mappings.retain(|_, m| m.handle != handle);
        self.exports.remove(&handle);
        self.aliases.retain(|_, &mut h| h != handle);
        self.array_mappings.retain(|_, &mut h| h != handle);
        self.handles.remove(&handle).is_some()
    }

    fn overlapping(&self, base: u64, size: u64) -> Vec<(u64, Mapping)> {
        let end = base.saturating_add(size);
        let mut found: Vec<(u64, Mapping)> = self
            .mappings
            .range(base..end)
            .map(|(&b, m)| (b, *m))
            .collect();
        if let Some((&b, m)) = self.mappings.range(..base).next_back() {
            if b.saturating_add(m.size) > base {
                found.push((b, *m));
            }
        }
        found
    }

    fn take_mappings(&mut self, bases: &[u64]) -> Unmapped {
        let mut out = Unmapped::default();
        for base in bases {
            let Some(m) = self.mappings.remove(base) else {
                continue;
            };
            if let Some(h) = self.handles.get_mut(&m.handle) {
                h.maps = h.maps.saturating_sub(1);
            }
            out.mappings.push((*base, m));
        }
        let mut handles: Vec<u64> = out.mappings.iter().map(|(_, m)| m.handle).collect();
        handles.sort_unstable();
        handles.dedup();
        out.ended = handles
            .into_iter()
            .filter(|h| self.end_if_unused(*h))
            .collect();
        out
    }

    /// Removes `handle` if nothing keeps it (no reference, mapping or open export): true
    /// when it did.
    fn end_if_unused(&mut self, handle: u64) -> bool {
        let unused = self.handles.get(&handle).is_some_and(|h| h.is_unused())
            && !self.exports.contains_key(&handle);
        if unused {
            self.handles.remove(&handle);
            self.aliases.retain(|_, &mut h| h != handle);
        }
        unused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 0x10;
    const G: u64 = 0x20;
    const MB2: u64 = 2 << 20;

    #[test]
    fn an_export_and_an_import_of_it_keep_the_allocation() {
        let mut b = VmmBooks::new();
        let fd = Export {
            fd: 7,
            file: (1, 99),
        };
        b.created(H);
        b.exported(H, fd);
        assert_eq!(b.export_of(fd), Some(H));
        assert_eq!(
            b.export_of(Export {
                fd: 7,
                file: (1, 98)
            }),
            None,
            "another file"
        );
        // the import gives another value: one more reference of H, under G
        b.imported(G, Some(H));
        assert_eq!(b.release(H), Some(false));
        assert_eq!(b.release(G), Some(false), "the export is still open");
        assert!(b.knows(H));
        assert!(b.reap_exports(|_| true).is_empty(), "still open");
        assert_eq!(
            b.reap_exports(|_| false),
            vec![H],
            "closed: the allocation ends"
        );
        assert!(!b.knows(H) && !b.has_exports());
        // the import gives the same value back: a reference, never an end
        b.created(H);
        b.exported(H, fd);
        b.imported(H, Some(H));
        assert!(b.reap_exports(|_| false).is_empty(), "two references left");
        assert_eq!(b.release(H), Some(false));
        assert_eq!(b.release(H), Some(true));
        // a foreign import under a value an alias had: not ours
        b.created(H);
        b.imported(G, Some(H));
        b.imported(G, None);
        assert_eq!(b.allocation_of(G), G);
    }

    #[test]
    fn array_mappings_keep_the_allocation_until_unmapped() {
        let mut b = VmmBooks::new();
        let tile = |x: u64| (0, 0xa0, 0, [x, 0, 0, 0]);
        b.created(H);
        assert!(b.map_begin(H) && b.map_begin(H));
        assert_eq!(b.array_mapped(tile(1), H, true), None);
        assert_eq!(b.array_mapped(tile(2), H, true), None);
        assert_eq!(b.release(H), Some(false), "mapped twice");
        assert_eq!(b.array_unmap_begin(tile(1)), Some((tile(1), H, false)));
        // an unmap the books cannot place exactly takes the resource's only mapping
        let (slot, h, ended) = b.array_unmap_begin(tile(9)).unwrap();
        assert_eq!((slot, h, ended), (tile(2), H, true));
        b.array_unmap_undo(slot, h);
        assert_eq!(b.array_unmap_begin(tile(2)), Some((tile(2), H, true)));
        assert!(!b.knows(H));
        // remapping a slot ends what was mapped there
        b.created(G);
        b.created(H);
        b.map_begin(G);
        b.array_mapped(tile(1), G, true);
        b.release(G);
        b.map_begin(H);
        assert_eq!(b.array_mapped(tile(1), H, true), Some(G));
        assert_eq!(b.array_unmap_begin(tile(3)), Some((tile(1), H, false)));
    }

    #[test]
    fn the_samples_pattern_frees_at_unmap() {
        let mut b = VmmBooks::new();
        b.created(H);
        assert!(b.map_begin(H));
        assert!(b.map_done(0x1000_0000, MB2, H, true).is_empty());
        assert_eq!(b.release(H), Some(false), "still mapped");
        assert!(b.knows(H));
        let u = b.unmap_begin(0x1000_0000, MB2);
        assert_eq!(u.ended, vec![H]);
        assert!(!b.knows(H));
        assert_eq!(
            b.release(H),
            None,
            "a second release is the driver's to refuse"
        );
    }

    #[test]
    fn release_then_unmap_and_unmap_then_release_end_once() {
        let mut b = VmmBooks::new();
        b.created(H);
        b.map_begin(H);
        b.map_done(0x4000_0000, MB2, H, true);
        assert!(
            b.unmap_begin(0x4000_0000, MB2).ended.is_empty(),
            "still referenced"
        );
        assert_eq!(b.release(H), Some(true));
        assert_eq!(b.release(H), None);
        assert!(b.unmap_begin(0x4000_0000, MB2).ended.is_empty());
    }

    #[test]
    fn retain_adds_a_reference_that_keeps_the_memory() {
        let mut b = VmmBooks::new();
        b.created(H);
        b.map_begin(H);
        b.map_done(0x1000_0000, 2 * MB2, H, true);
        // any address inside the mapping
        assert_eq!(b.retain_begin(0x1000_0000 + MB2 + 5), Some(H));
        assert_eq!(b.retain_begin(0x1000_0000 + 2 * MB2), None, "past the end");
        assert_eq!(b.release(H), Some(false));
        assert_eq!(b.release(H), Some(false), "mapped");
        assert_eq!(b.unmap_begin(0x1000_0000, 2 * MB2).ended, vec![H]);
    }

    #[test]
    fn unmap_ends_every_mapping_inside_the_range_only() {
        let mut b = VmmBooks::new();
        b.created(H);
        b.created(G);
        for (base, h) in [(0x1000_0000, H), (0x1000_0000 + MB2, G)] {
            b.map_begin(h);
            b.map_done(base, MB2, h, true);
        }
        b.release(H);
        b.release(G);
        // the second mapping only
        assert_eq!(b.unmap_begin(0x1000_0000 + MB2, MB2).ended, vec![G]);
        assert!(b.knows(H));
        // a range that cuts a mapping ends nothing (the driver refuses it)
        assert!(b.unmap_begin(0x1000_0000, MB2 / 2).ended.is_empty());
        assert_eq!(b.unmap_begin(0x0, 0x2000_0000).ended, vec![H]);
    }

    #[test]
    fn one_handle_mapped_twice_ends_at_its_last_unmap() {
        let mut b = VmmBooks::new();
        b.created(H);
        for base in [0x1000_0000, 0x2000_0000] {
            b.map_begin(H);
            b.map_done(base, MB2, H, true);
        }
        b.release(H);
        assert!(b.unmap_begin(0x1000_0000, MB2).ended.is_empty());
        assert_eq!(b.unmap_begin(0x2000_0000, MB2).ended, vec![H]);
    }

    #[test]
    fn failed_calls_undo_and_calls_in_flight_keep_memory() {
        let mut b = VmmBooks::new();
        b.created(H);
        // a map in flight keeps the memory when the last reference goes meanwhile
        assert!(b.map_begin(H));
        assert_eq!(b.release(H), Some(false));
        // ... and the map fails: now it is unused
        assert!(b.map_failed(H));
        assert!(!b.knows(H));

        b.created(G);
        b.map_begin(G);
        b.map_done(0x3000_0000, MB2, G, true);
        assert_eq!(b.release(G), Some(false));
        let u = b.unmap_begin(0x3000_0000, MB2);
        assert_eq!(u.ended, vec![G]);
        b.unmap_undo(u); // the driver refused the unmap
        assert!(b.knows(G));
        assert_eq!(b.retain_begin(0x3000_0000), Some(G));
        assert!(!b.retain_failed(G), "still mapped");
        assert_eq!(b.unmap_begin(0x3000_0000, MB2).ended, vec![G]);

        // a failed release: the reference is back
        b.created(H);
        assert_eq!(b.release(H), Some(true));
        b.add_ref(H);
        assert_eq!(b.release(H), Some(true));
    }

    #[test]
    fn imports_are_not_ours_and_replace_stale_entries() {
        let mut b = VmmBooks::new();
        assert!(!b.map_begin(G), "an imported handle maps uncounted");
        assert!(b.map_done(0x1000_0000, MB2, G, false).is_empty());
        assert_eq!(b.retain_begin(0x1000_0000), None);
        assert_eq!(b.release(G), None);
        // a handle value the driver reused for an import: the old entry goes
        b.created(H);
        b.map_begin(H);
        b.map_done(0x5000_0000, MB2, H, true);
        assert!(b.forget(H));
        assert!(!b.knows(H));
        assert!(b.unmap_begin(0x5000_0000, MB2).ended.is_empty());
        // a new mapping over a stale one ends the stale one
        b.created(G);
        b.map_begin(G);
        b.map_done(0x6000_0000, MB2, G, true);
        b.release(G);
        assert_eq!(b.map_done(0x6000_0000, MB2, 0x99, false), vec![G]);
        // a handle value the driver gives again: the stale entry's mappings go with it
        b.created(H);
        b.map_begin(H);
        b.map_done(0x7000_0000, MB2, H, true);
        b.created(H);
        assert!(b.unmap_begin(0x7000_0000, MB2).ended.is_empty());
        assert_eq!(
            b.release(H),
            Some(true),
            "the new allocation has no mapping"
        );
    }
}
