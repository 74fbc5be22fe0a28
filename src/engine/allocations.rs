//! Allocations and frees of every plain kind: pointers, pitched memory, arrays, `cuMemCreate`
//! handles and pool allocations counted as plain ones.

use super::explain::Outcome;
use super::placement::Place;
use super::state::Engine;
use crate::array_shape::ArrayShape;
use crate::cuda_abi::CuResult;
use crate::in_hook::driver;
use crate::ledger::{Charge, Kind};

impl Engine {
    /// An allocation of `bytes` at `place`. `call` runs the real driver function and returns
    /// its result and the new pointer or handle. Inline, as `alloc_settled` and `free` are:
    /// as a call of its own, the frame and the closures' captures passed through memory make
    /// the plain pair measurably dearer (bench/README.md).
    #[inline(always)]
    pub fn alloc(
        &self,
        api: &'static str,
        kind: Kind,
        place: Place,
        bytes: u64,
        call: impl FnOnce() -> (CuResult, u64),
    ) -> CuResult {
        let call = move || driver(call);
        let call = || {
            let (rc, key) = call();
            (rc, key, bytes)
        };
        self.alloc_settled(api, kind, place, bytes, call, |_| {})
    }

    /// `cuMemAllocPitch`: the driver picks the pitch, so the size is known only after the
    /// call. Reserve `width × height` first, then charge the rest of `pitch × height`; if
    /// that does not fit, `undo` frees the allocation and the caller is refused.
    pub fn alloc_pitch(
        &self,
        api: &'static str,
        width: u64,
        height: u64,
        call: impl FnOnce() -> (CuResult, u64, u64),
        undo: impl FnOnce(u64),
    ) -> CuResult {
        let call = move || driver(call);
        let call = || {
            let (rc, ptr, pitch) = call();
            (rc, ptr, pitch.saturating_mul(height))
        };
        let estimate = width.saturating_mul(height);
        self.alloc_settled(api, Kind::Pointer, Place::Current, estimate, call, undo)
    }

    /// An array creation (`cuArrayCreate(_v2)`, `cuArray3DCreate(_v2)`,
    /// `cuMipmappedArrayCreate`) on the current context's device. The driver lays the array out (row padding, pages),
    /// and answers what that takes only for a deferred-mapping array; so reserve what this
    /// shape took before on this device, else [`ArrayShape::estimate`], call `create`, then
    /// learn the true size once per device and shape from `true_size` (which asks the driver
    /// about a deferred-mapping array of the same shape; `None`: it cannot say, and the
    /// estimate stands) and settle to it. If the true size does not fit, `undo` destroys the
    /// array and the caller is refused. Sparse and deferred-mapping arrays are not charged.
    pub fn alloc_array(
        &self,
        api: &'static str,
        shape: ArrayShape,
        create: impl FnOnce() -> (CuResult, u64),
        true_size: impl FnOnce(u32) -> Option<u64>,
        undo: impl FnOnce(u64),
    ) -> CuResult {
        let create = move || driver(create);
        if !shape.is_backed() {
            return create().0;
        }
        // (Without a context the creation fails, and alloc_settled passes that on.)
        let device = self.queries.current_device().ok();
        let cached = device.and_then(|d| self.allocations.array_size(d, shape));
        let estimate = cached.unwrap_or_else(|| shape.estimate());
        let call = || {
            let (rc, key) = create();
            let size = match (rc.is_ok(), cached, device) {
                (true, None, Some(d)) => true_size(d)
                    .inspect(|&bytes| self.allocations.remember_array_size(d, shape, bytes)),
                _ => cached,
            };
            (rc, key, size.unwrap_or(estimate))
        };
        self.alloc_settled(api, Kind::Array, Place::Current, estimate, call, undo)
    }

    /// An allocation at `place`, admitted (see [`Engine::admit`]): reserve `estimate`, call
    /// the driver, then charge what it actually gave (the third value `call` returns);
    /// `undo` frees an allocation whose true size does not fit.
    #[inline(always)]
    pub(super) fn alloc_settled(
        &self,
        api: &'static str,
        kind: Kind,
        place: Place,
        estimate: u64,
        call: impl FnOnce() -> (CuResult, u64, u64),
        undo: impl FnOnce(u64),
    ) -> CuResult {
        // The current context, the plain allocation's place, inline: it is the hot path.
        let placed = match place {
            Place::Current => self.current().map(Some),
            other => self.resolve_place(other),
        };
        let (device, owner) = match placed {
            Ok(Some(placed)) => placed,
            // Host memory: nothing to charge.
            Ok(None) => return call().0,
            // No current context, or the driver cannot say where: the driver gets the call
            // and gives its own answer (an error where it needs a context), uncharged.
            Err(_) => return call().0,
        };
        self.admit(api, kind, (device, owner), estimate, call, undo)
    }
}

impl Engine {
    /// A free of `key`. Unknown keys go to the driver unchanged and its answer comes back
    /// unchanged. The entry leaves the ledger before the driver frees, so another thread
    /// that gets the same address right after cannot lose its entry to us.
    #[inline(always)]
    pub fn free(
        &self,
        api: &'static str,
        kind: Kind,
        key: u64,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        let call = move || driver(call);
        let ledger = self.ledger(kind);
        let Some(charge) = ledger.remove(key) else {
            // Not a plain allocation: perhaps a pool's (out of line, off the hot path).
            return self.free_unknown(api, kind, key, call);
        };
        if self.tracing {
            self.traced_free(api, key, charge);
        }
        let rc = call();
        if !rc.is_ok() {
            ledger.insert(key, charge);
            if self.tracing {
                self.traced_free_failed(api, key, charge);
            }
            return rc;
        }
        if let Some(q) = self.quota(charge.device) {
            q.release(charge.bytes);
        }
        rc
    }

    /// A free's line, written before the driver frees: from then on another thread may be
    /// given the address, and its allocation's line must come after this one (`in_use` is
    /// what the free leaves).
    pub(super) fn traced_free(&self, api: &'static str, key: u64, charge: Charge) {
        let held = self.held(charge.device).saturating_sub(charge.bytes);
        self.explain(Outcome::Freed {
            device: charge.device,
            api,
            key,
            bytes: charge.bytes,
            held,
        });
    }

    /// The driver failed a free already traced: the allocation is held again, and its line
    /// says so (an `alloc` line through the free's entry point).
    #[cold]
    #[inline(never)]
    pub(super) fn traced_free_failed(&self, api: &'static str, key: u64, charge: Charge) {
        self.explain(Outcome::HeldAgain {
            device: charge.device,
            api,
            key,
            bytes: charge.bytes,
            held: self.held(charge.device),
        });
    }
}
