use super::explain::Outcome;
use super::state::Engine;
use crate::cuda_abi::{
    CuArrayMapInfo, CuResult, CU_MEM_OPERATION_TYPE_MAP, CU_MEM_OPERATION_TYPE_UNMAP,
};
use crate::in_hook::driver;
use crate::ledger::{Charge, Kind};
use crate::vmm::Export;

// ---- VMM lifetimes and imports ---------------------------------------------------------
//
// A `cuMemCreate` allocation is charged (in the handle ledger) until its last reference is
// released and its last mapping unmapped, and every export of it closed; `VmmBooks` says
// when that is. As in `free`, what a call would end leaves the ledger before the driver is
// called and comes back if it fails. Imports are never charged: the exporting process pays;
// an import of our own export is one more reference of ours, never an end.

impl Engine {
    /// `cuMemCreate` succeeded (charged or not): its handle has one reference.
    pub fn vmm_created(&self, handle: u64) {
        self.vmm.lock().created(handle);
    }

    /// `cuMemRelease`.
    pub fn vmm_release(
        &self,
        api: &'static str,
        handle: u64,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        let call = move || driver(call);
        let taken = {
            let mut books = self.vmm.lock();
            // An import's own handle value stands for our allocation (the ledger's key).
            let allocation = books.allocation_of(handle);
            match books.release(handle) {
                Some(true) => self.take_handles(&[allocation]),
                Some(false) => Vec::new(),
                // Ours, with no reference left (released, still mapped): the driver's to
                // refuse, and it ends nothing.
                None if books.knows(handle) => {
                    drop(books);
                    return call();
                }
                None => {
                    drop(books);
                    // Not in the books: whatever the ledger has under it goes as before.
                    return self.free(api, Kind::Handle, handle, call);
                }
            }
        };
        let rc = call();
        if rc.is_ok() {
            self.credit_all(api, taken);
            self.reap_exports(api);
        } else {
            self.vmm.lock().add_ref(handle);
            self.restore(taken);
        }
        rc
    }

    /// `cuMemMap(base, size, .., handle, ..)`.
    pub fn vmm_map(
        &self,
        api: &'static str,
        base: u64,
        size: u64,
        handle: u64,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        let call = move || driver(call);
        let ours = self.vmm.lock().map_begin(handle);
        let rc = call();
        let taken = {
            let mut books = self.vmm.lock();
            let allocation = books.allocation_of(handle);
            if rc.is_ok() {
                let stale = books.map_done(base, size, handle, ours);
                self.take_handles(&stale)
            } else if ours && books.map_failed(handle) {
                self.take_handles(&[allocation])
            } else {
                Vec::new()
            }
        };
        self.credit_all(api, taken);
        rc
    }

    /// `cuMemUnmap(base, size)`, and `cuMemAddressFree` of a reservation: every mapping
    /// inside the range ends.
    pub fn vmm_unmap(
        &self,
        api: &'static str,
        base: u64,
        size: u64,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        let call = move || driver(call);
        let (unmapped, taken) = {
            let mut books = self.vmm.lock();
            let unmapped = books.unmap_begin(base, size);
            let taken = self.take_handles(&unmapped.ended);
            (unmapped, taken)
        };
        let rc = call();
        if rc.is_ok() {
            self.credit_all(api, taken);
            self.reap_exports(api);
        } else {
            self.restore(taken);
            self.vmm.lock().unmap_undo(unmapped);
        }
        rc
    }

    /// `cuMemMapArrayAsync(infos, ..)`: a map of our allocation into a sparse or
    /// deferred-mapping array is one of its mappings, an unmap ends one (counted before the
    /// call, as `cuMemMap`'s and `cuMemUnmap`'s are; taken back if the call fails).
    pub fn vmm_map_array(
        &self,
        api: &'static str,
        infos: &[CuArrayMapInfo],
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        let call = move || driver(call);
        let slot = |i: &CuArrayMapInfo| {
            (
                i.resource_type,
                i.resource,
                i.subresource_type,
                i.subresource,
            )
        };
        let (maps, unmaps, taken) = {
            let mut books = self.vmm.lock();
            let (mut maps, mut unmaps, mut ended) = (Vec::new(), Vec::new(), Vec::new());
            for info in infos {
                match info.operation {
                    CU_MEM_OPERATION_TYPE_MAP => {
                        maps.push((slot(info), info.handle, books.map_begin(info.handle)))
                    }
                    CU_MEM_OPERATION_TYPE_UNMAP => {
                        if let Some((at, handle, ends)) = books.array_unmap_begin(slot(info)) {
                            unmaps.push((at, handle));
                            if ends {
                                ended.push(handle);
                            }
                        }
                    }
                    _ => {}
                }
            }
            (maps, unmaps, self.take_handles(&ended))
        };
        let rc = call();
        let more = {
            let mut books = self.vmm.lock();
            let mut ended = Vec::new();
            if rc.is_ok() {
                for (at, handle, ours) in maps {
                    ended.extend(books.array_mapped(at, handle, ours));
                }
            } else {
                for (at, handle) in unmaps {
                    books.array_unmap_undo(at, handle);
                }
                for (_, handle, ours) in maps {
                    let allocation = books.allocation_of(handle);
                    if ours && books.map_failed(handle) {
                        ended.push(allocation);
                    }
                }
            }
            self.take_handles(&ended)
        };
        if rc.is_ok() {
            self.credit_all(api, taken);
        } else {
            self.restore(taken);
        }
        self.credit_all(api, more);
        rc
    }

    /// `cuMemRetainAllocationHandle(.., address)`; `call` returns the handle it gave.
    pub fn vmm_retain(
        &self,
        api: &'static str,
        address: u64,
        call: impl FnOnce() -> (CuResult, u64),
    ) -> CuResult {
        let call = move || driver(call);
        let counted = self.vmm.lock().retain_begin(address);
        let (rc, got) = call();
        let taken = {
            let mut books = self.vmm.lock();
            let mut ended = Vec::new();
            match counted {
                Some(h) if rc.is_ok() && h == got => {}
                Some(h) => {
                    if books.retain_failed(h) {
                        ended.push(h);
                    }
                    if rc.is_ok() {
                        books.retained(got);
                    }
                }
                None if rc.is_ok() => books.retained(got),
                None => {}
            }
            self.take_handles(&ended)
        };
        self.credit_all(api, taken);
        rc
    }

    /// `cuMemExportToShareableHandle` gave the POSIX file descriptor `fd` for `handle`: a
    /// reference of its allocation until the descriptor is closed.
    pub fn vmm_exported(&self, handle: u64, fd: i32) {
        if let Some(file) = crate::sys::file_id(fd) {
            self.vmm.lock().exported(handle, Export { fd, file });
        }
    }

    /// `cuMemImportFromShareableHandle` gave `handle`, for the POSIX file descriptor `fd`
    /// (`None`: another kind of shareable handle). An import of one of our own exports (or
    /// a handle value of ours given back) is one more reference of our allocation, released
    /// by its own `cuMemRelease`; anything else is another process's memory, never charged
    /// here. Never an end of anything.
    pub fn imported_handle(&self, handle: u64, fd: Option<i32>) {
        let export = fd.and_then(|fd| {
            Some(Export {
                fd,
                file: crate::sys::file_id(fd)?,
            })
        });
        let mut books = self.vmm.lock();
        let own = export.and_then(|e| books.export_of(e));
        books.imported(handle, own);
    }

    /// Exports closed since are gone (no call announces a `close`): what that leaves with
    /// no reference, mapping or open export is credited. Looked at when a VMM call may have
    /// ended something, before a figure is told and before a refusal is final. True if
    /// anything was credited.
    pub(super) fn reap_exports(&self, api: &'static str) -> bool {
        let taken = {
            let mut books = self.vmm.lock();
            if !books.has_exports() {
                return false;
            }
            let ended = books.reap_exports(|e| crate::sys::file_id(e.fd) == Some(e.file));
            self.take_handles(&ended)
        };
        let credited = !taken.is_empty();
        self.credit_all(api, taken);
        credited
    }

    /// An import gave device pointer `ptr` (IPC, a pool's exported pointer, external
    /// memory): never charged, so its free credits nothing. An entry under that address is
    /// stale (the driver reused it) and is given back now, so no later free of the import
    /// can credit it.
    pub fn imported_pointer(&self, api: &'static str, ptr: u64) {
        if let Some(stale) = self.ledger(Kind::Pointer).remove(ptr) {
            self.credit(api, ptr, stale);
        }
    }

    /// Takes the charges of ended handles out of the handle ledger (host memory has none).
    pub(super) fn take_handles(&self, ended: &[u64]) -> Vec<(u64, Charge)> {
        let ledger = self.ledger(Kind::Handle);
        ended
            .iter()
            .filter_map(|&h| ledger.remove(h).map(|c| (h, c)))
            .collect()
    }

    pub(super) fn restore(&self, taken: Vec<(u64, Charge)>) {
        for (h, c) in taken {
            self.ledger(Kind::Handle).insert(h, c);
        }
    }

    pub(super) fn credit_all(&self, api: &'static str, taken: Vec<(u64, Charge)>) {
        for (key, charge) in taken {
            self.credit(api, key, charge);
        }
    }

    /// Gives a charge back that the driver no longer holds.
    pub(super) fn credit(&self, api: &'static str, key: u64, charge: Charge) {
        if let Some(q) = self.quota(charge.device) {
            let held = q.release(charge.bytes);
            self.explain(Outcome::Freed {
                device: charge.device,
                api,
                key,
                bytes: charge.bytes,
                held,
            });
        }
    }
}
