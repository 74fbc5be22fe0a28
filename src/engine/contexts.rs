//! Contexts as owners of charges: primary contexts, destroy, attach and detach, and the end of a
//! context, when the driver frees everything the context held before cuquota hears of it.
//!
//! Pool allocations are owned by no context ([`crate::contexts::POOLED`]): cuda.h on
//! `cuCtxDestroy`, they "are not associated with any CUDA context and need to be destroyed
//! explicitly", so a destroy or the last detach credits none of them. A primary context's
//! reset ("destroys and cleans up all resources associated with the current device in the
//! current process") and its last release (which resets it) are device-wide: they credit
//! every pool allocation charged to the device.

use super::explain::Outcome;
use super::state::Engine;
use crate::contexts::{ContextSlot, NO_CONTEXT};
use crate::ledger::{Charge, Kind};
use crate::pool_cache::TakenPooled;

/// The end of a context, from just before the driver runs a call that may end it (destroy,
/// detach, primary reset or release) until cuquota has credited it. The driver frees the
/// context's memory before cuquota hears of it, and may hand an address out again at once,
/// to another thread: the new allocation then finds the old entry stale. While the context
/// is marked ending, such an entry is kept for the context's `context` event rather than
/// lost from it. Made by [`Engine::context_end`]; [`ContextEnd::conclude`] says how the call
/// went; dropping it ends the mark (after the caller's crediting).
pub struct ContextEnd<'e> {
    engine: &'e Engine,
    api: &'static str,
    /// The context's slot ([`NO_CONTEXT`]: not one cuquota knows).
    pub(super) slot: ContextSlot,
    /// A sure end's charges, taken out of the books before the call.
    taken: Option<Taken>,
}

/// What a sure end took out of the books before the driver ran the call.
struct Taken {
    plain: Vec<(Kind, u64, Charge)>,
    pooled: TakenPooled,
    /// The `context` line was written.
    written: bool,
}

impl ContextEnd<'_> {
    /// The driver answered the call: on success what a sure end took is credited (the pool
    /// allocations' charges move into the pool cache), on failure it is put back.
    pub fn conclude(&mut self, ok: bool) {
        if let Some(taken) = self.taken.take() {
            self.engine.conclude_taken(self.api, taken, ok);
        }
    }
}

impl Drop for ContextEnd<'_> {
    /// The call and its crediting are over. Charges never concluded (no answer came) are put
    /// back: held rather than lost.
    fn drop(&mut self) {
        self.conclude(false);
        self.engine.context_end_done(self.slot);
    }
}

impl Engine {
    /// `cuDevicePrimaryCtxRetain` returned `context` as `device`'s primary context.
    pub fn primary_retained(&self, device: u32, context: usize) {
        self.contexts.set_primary(device, context);
        self.contexts.add(context, device);
    }

    /// `device`'s primary context was reset, or released for the last time: the driver
    /// freed every allocation of it and every pool allocation on the device (known to
    /// cuquota or not, the context may never have been current). The context handle stays
    /// (it is reinitialised on its next use), so its slot stays too.
    pub fn primary_gone(&self, api: &'static str, device: u32) {
        let slot = (self.contexts.primary(device))
            .and_then(|context| self.contexts.find(context))
            .map_or(NO_CONTEXT, |(slot, _)| slot);
        self.credit_context(api, device, slot, true);
        self.graph_context_gone(api, device); // graph memory
    }

    /// `cuCtxDestroy` / `cuCtxDetach` of `context` succeeded: credit what it held and
    /// forget it.
    pub fn context_destroyed(&self, api: &'static str, context: usize) {
        if let Some((slot, device)) = self.contexts.find(context) {
            self.credit_context(api, device, slot, false);
            self.contexts.remove(slot);
            self.graph_context_gone(api, device); // graph memory
        }
    }

    /// `cuCtxAttach` added a reference to `context`: one more `cuCtxDetach` before it goes.
    pub fn context_attached(&self, context: usize) {
        self.contexts.attach(context);
    }

    /// `cuCtxDetach` succeeded: it destroyed the context unless an attach's reference was
    /// left.
    pub fn context_detached(&self, api: &'static str, context: usize) {
        if !self.contexts.detach(context) {
            self.context_destroyed(api, context);
        }
    }

    /// A call that may end `context` is about to reach the driver: the context is marked
    /// ending. With `surely` (`cuCtxDestroy`, `cuDevicePrimaryCtxReset`: it ends if the call
    /// succeeds), its charges leave the books now and its `context` line is said now, as a
    /// free's is: once the driver has freed, another thread may be given one of its
    /// addresses, and that allocation's line must come after this one.
    pub fn context_end(&self, api: &'static str, context: usize, surely: bool) -> ContextEnd<'_> {
        let slot = self.contexts.find(context).map_or(NO_CONTEXT, |(s, _)| s);
        if slot != NO_CONTEXT {
            self.contexts.ending().begin(slot, api);
        }
        let taken = if surely {
            self.take_context_charges(api, context)
        } else {
            None
        };
        ContextEnd {
            engine: self,
            api,
            slot,
            taken,
        }
    }

    fn take_context_charges(&self, api: &'static str, context: usize) -> Option<Taken> {
        let (slot, device) = self.contexts.find(context)?;
        // A primary context's reset is device-wide: the device's pool allocations go too.
        let device_wide = self.contexts.primary(device) == Some(context);
        let pooled = if device_wide {
            self.take_device_pool_pointers(device)
        } else {
            Vec::new()
        };
        let mut plain = Vec::new();
        for kind in Kind::ALL {
            for (key, charge) in self.ledger(kind).remove_context(slot) {
                plain.push((kind, key, charge));
            }
        }
        if device_wide {
            for (key, charge) in self.ledger(Kind::Pointer).remove_pooled_on(device) {
                plain.push((Kind::Pointer, key, charge));
            }
        }
        let keys: Vec<u64> = (pooled.iter().map(|(k, _, _)| *k))
            .chain(plain.iter().map(|(_, k, _)| *k))
            .collect();
        let written = !keys.is_empty();
        if written {
            let charges = pooled
                .iter()
                .map(|(_, c, _)| c)
                .chain(plain.iter().map(|(_, _, c)| c));
            let (mut bytes, mut here) = (0u64, 0u64);
            for c in charges {
                bytes = bytes.saturating_add(c.bytes);
                if c.device == device {
                    here = here.saturating_add(c.bytes);
                }
            }
            self.explain(Outcome::ContextEnded {
                device,
                api,
                bytes,
                held: self.held(device).saturating_sub(here),
                keys: keys.into(),
            });
        }
        Some(Taken {
            plain,
            pooled,
            written,
        })
    }

    /// See [`ContextEnd::conclude`]: what a sure end took is credited, or put back and
    /// said to be held again (`alloc` lines through `api`).
    fn conclude_taken(&self, api: &'static str, taken: Taken, ok: bool) {
        let Taken {
            plain,
            pooled,
            written,
        } = taken;
        if ok {
            for (_, _, charge) in &plain {
                if let Some(q) = self.quota(charge.device) {
                    q.release(charge.bytes);
                }
            }
            self.credit_context_pool_pointers(api, pooled);
            return;
        }
        let keys: Vec<(u64, Charge)> = (pooled.iter().map(|(k, c, _)| (*k, *c)))
            .chain(plain.iter().map(|(_, k, c)| (*k, *c)))
            .collect();
        self.restore_context_pool_pointers(pooled);
        for (kind, key, charge) in plain {
            self.ledger(kind).insert(key, charge);
        }
        if written {
            for (key, charge) in keys {
                self.traced_free_failed(api, key, charge);
            }
        }
    }

    /// The primary context of `device`, for [`Engine::context_end`].
    pub fn primary_context(&self, device: u32) -> usize {
        self.contexts.primary(device).unwrap_or(0)
    }

    /// The call that might have ended the context of `slot` is over (credited or not).
    fn context_end_done(&self, slot: ContextSlot) {
        if slot != NO_CONTEXT {
            self.contexts.ending().done(slot);
        }
    }

    /// An entry whose address the driver handed out again, its free never seen: that memory
    /// is gone, and is given back. If its context is ending, that is how it went: traced as
    /// a free by the context's end (before the new allocation's line, so that a reader's
    /// live allocations stay right), and remembered for the context's own line.
    #[cold]
    #[inline(never)]
    pub(super) fn released_stale(&self, key: u64, stale: Charge) {
        let Some(q) = self.quota(stale.device) else {
            return;
        };
        let held = q.release(stale.bytes);
        let ended_by = (self.contexts.ending()).stolen(stale.context, key, stale.bytes);
        if let Some(api) = ended_by {
            self.explain(Outcome::Freed {
                device: stale.device,
                api,
                key,
                bytes: stale.bytes,
                held,
            });
        }
    }

    /// Credits every charge, of every kind, that context `slot` (on `device`; `NO_CONTEXT`:
    /// none known) owns, and with `device_wide` (a primary context's end) every pool
    /// allocation charged to `device`, and records one event for it.
    pub(super) fn credit_context(
        &self,
        api: &'static str,
        device: u32,
        slot: ContextSlot,
        device_wide: bool,
    ) {
        if slot != NO_CONTEXT {
            // What the context itself took (context memory).
            self.context_memory.gone(slot, &self.context_part(api));
        }
        // The device's pool allocations first: what their pools keep stays charged
        // (`pool_cache`), as the driver's reset leaves it; then the plain ledgers'.
        let (mut keys, mut bytes) = match device_wide {
            true => self.device_pool_allocations(api, device),
            false => (Vec::new(), 0),
        };
        let pooled = match device_wide {
            true => self.ledger(Kind::Pointer).remove_pooled_on(device),
            false => Vec::new(),
        };
        let owned = self.allocations.ledgers().iter();
        let owned = owned.flat_map(|ledger| ledger.remove_context(slot));
        for (key, charge) in owned.chain(pooled) {
            if let Some(q) = self.quota(charge.device) {
                q.release(charge.bytes);
            }
            keys.push(key);
            bytes = bytes.saturating_add(charge.bytes);
        }
        // Those whose address the driver gave out again before this were credited, and
        // traced as frees, then (see `released_stale`); the context still ends with its line.
        let stolen = !self.contexts.ending().take_stolen(slot).is_empty();
        if !keys.is_empty() || stolen {
            self.explain(Outcome::ContextEnded {
                device,
                api,
                bytes,
                held: self.held(device),
                keys: keys.into_boxed_slice(),
            });
        }
    }
}
