//! Where a charge lands and who owns it: the current context, a stream's context, a pool's
//! device.

use super::*;

impl Engine {
    /// The device an allocation at `place` is charged to and the context that owns it;
    /// `None` for memory that is not charged.
    pub(super) fn resolve_place(
        &self,
        place: Place,
    ) -> Result<Option<(u32, ContextSlot)>, CuResult> {
        match place {
            Place::Current => self.current().map(Some),
            Place::Stream(stream) => self.of_stream(stream).map(Some),
            Place::Device(d) => Ok(Some((d, NO_CONTEXT))),
            Place::Pool { device, stream } => {
                let (_, owner) = self.of_stream(stream)?;
                Ok(Some((device, owner)))
            }
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
    pub fn pool_place(&self, pool: usize, stream: usize) -> Place {
        match self.pools.lock().get(&pool) {
            Some(PoolPlace::Device(device)) => Place::Pool {
                device: *device,
                stream,
            },
            Some(PoolPlace::Host) => Place::Uncharged,
            Some(PoolPlace::Managed) | None => Place::Stream(stream),
        }
    }

    /// A pool was made (`cuMemPoolCreate`) or returned (`cuDeviceGetDefaultMemPool`,
    /// `cuDeviceGetMemPool`) with this location: remember where its memory lands.
    pub fn pool_located(&self, pool: usize, place: PoolPlace) {
        self.pools.lock().insert(pool, place);
    }

    /// `cuMemPoolDestroy` succeeded: the handle may come back for another pool.
    pub fn pool_destroyed(&self, pool: usize) {
        self.pools.lock().remove(&pool);
        self.pool_cache_destroyed(pool);
    }
}
