//! Where a charge lands and who owns it: the current context, a stream's context, a pool's
//! device. A pool allocation is owned by no context ([`POOLED`]).

use super::explain::Outcome;
use super::state::Engine;
use crate::contexts::{ContextSlot, NO_CONTEXT, POOLED};
use crate::cuda_abi::{CuMemLocation, CuResult};
use crate::pool_cache::PoolPlace;

/// Where an allocation lands, and which context owns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The current context's device, owned by that context.
    Current,
    /// A stream-ordered allocation from a pool whose device is not known (the current pool
    /// of the stream's device, a managed pool, one never seen located): the device of the
    /// stream's context (the legacy and per-thread default streams mean the current
    /// context), owned by no context ([`POOLED`]).
    Stream(usize),
    /// A known device (`cuMemCreate` properties), owned by no context.
    Device(u32),
    /// A pool's device, owned by no context ([`POOLED`]).
    Pool(u32),
    /// Not device memory (`cuMemCreate` on the host, a host pool): not charged.
    Uncharged,
}

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`: with 0, the default streams, which mean
/// the current context.
const LEGACY_STREAM: usize = 1;
const PER_THREAD_STREAM: usize = 2;

impl Engine {
    /// The device an allocation at `place` is charged to and the context that owns it;
    /// `None` for memory that is not charged.
    pub(super) fn resolve_place(
        &self,
        place: Place,
    ) -> Result<Option<(u32, ContextSlot)>, CuResult> {
        match place {
            Place::Current => self.current().map(Some),
            Place::Stream(stream) => self.of_stream(stream).map(|(d, _)| Some((d, POOLED))),
            Place::Device(d) => Ok(Some((d, NO_CONTEXT))),
            Place::Pool(device) => Ok(Some((device, POOLED))),
            Place::Uncharged => Ok(None),
        }
    }

    /// The current context's device and slot: one driver call (`cuCtxGetCurrent`) and a
    /// scan of the few known contexts; a context seen first costs one more call.
    #[inline(always)]
    pub(super) fn current(&self) -> Result<(u32, ContextSlot), CuResult> {
        let context = self.queries.current_context();
        if let Some((slot, device)) = self.contexts.find(context) {
            return Ok((device, slot));
        }
        // A context seen first, or none (then the driver says why: no context).
        let device = self.queries.current_device()?;
        Ok((device, self.contexts.add(context, device)))
    }

    /// A stream's device and the slot of its context.
    pub(super) fn of_stream(&self, stream: usize) -> Result<(u32, ContextSlot), CuResult> {
        if matches!(stream, 0 | LEGACY_STREAM | PER_THREAD_STREAM) {
            return self.current();
        }
        let context = self.queries.stream_context(stream)?;
        if let Some((slot, device)) = self.contexts.find(context) {
            return Ok((device, slot));
        }
        let device = self.queries.context_device(context)?;
        Ok((device, self.contexts.add(context, device)))
    }

    /// Where an allocation from `pool` on `stream` lands: the pool's location when it is
    /// known, else the stream's device (a pool cuquota never saw made or returned, e.g. an
    /// imported one: the driver cannot be asked its location).
    #[cfg(test)]
    pub fn pool_place(&self, pool: usize, stream: usize) -> Place {
        place_in_pool(self.pool_cache.place(pool), stream)
    }

    /// A pool was made (`cuMemPoolCreate`) or returned (`cuDeviceGetDefaultMemPool`,
    /// `cuDeviceGetMemPool`) with this location: remember where its memory lands.
    pub fn pool_located(&self, pool: usize, place: PoolPlace) {
        self.pool_cache.set_place(pool, place);
    }

    /// `api` names a memory location cuquota cannot place (an unknown type, or a negative
    /// device): refused with one line, never passed as host memory (fail closed).
    #[cold]
    pub fn unknown_location(&self, api: &'static str, location: CuMemLocation) -> CuResult {
        self.explain(Outcome::UnknownLocation {
            api,
            kind: location.kind,
            id: location.id,
        });
        CuResult::NOT_SUPPORTED
    }

    /// `cuMemPoolDestroy` succeeded: the handle may come back for another pool.
    pub fn pool_destroyed(&self, pool: usize) {
        self.pool_cache.forget_place(pool);
        self.pool_cache_destroyed(pool);
    }
}

/// Where an allocation on `stream` lands from a pool whose location is `known` (see
/// [`Engine::pool_place`]).
pub(super) fn place_in_pool(known: Option<PoolPlace>, stream: usize) -> Place {
    match known {
        Some(PoolPlace::Device(device)) => Place::Pool(device),
        Some(PoolPlace::Host) => Place::Uncharged,
        Some(PoolPlace::Managed) | None => Place::Stream(stream),
    }
}
