//! Green contexts (cuda.h, "Green Contexts"): a green context is context memory, measured at
//! its creation like a context's and given back at its destruction; its `CUcontext`
//! (`cuCtxFromGreenCtx`, and the context of its streams) is "treated as if it were a
//! primary context", so what is allocated there belongs to its device's primary context,
//! which the green context retains ("This API will retain the primary context on device
//! dev, which will is released when the green context is destroyed").
//!
//! Two slots per green context: the green context's own (keyed by its `CUgreenCtx`: its
//! context memory) and its `CUcontext`'s (what is allocated in it). At the destruction both
//! are freed; what the `CUcontext` owns goes to the primary context if the destruction's
//! release left it active (known to cuquota: its slot; else to no context, charged until
//! freed), and is credited with it if not (that release was the last).

use super::state::Engine;
use crate::contexts::NO_CONTEXT;
use crate::cuda_abi::CuResult;
use crate::ledger::Kind;

impl Engine {
    /// `cuGreenCtxCreate` on `device`: `create` makes it and returns the result and the
    /// green context; one that does not fit is destroyed (`destroy`) and refused.
    pub fn green_context_create(
        &self,
        api: &'static str,
        device: i32,
        create: impl FnOnce() -> (CuResult, usize),
        destroy: impl FnOnce(usize),
    ) -> CuResult {
        self.context_made(api, device, || true, create, destroy, true)
    }

    /// `context` is the `CUcontext` of green context `green` (`cuCtxFromGreenCtx`, or the
    /// context of a stream `cuGreenCtxStreamCreate` made): it is charged on the green
    /// context's device.
    pub fn green_context_seen(&self, green: usize, context: usize) {
        let Some((_, device)) = self.contexts.find(green) else {
            return; // a green context made before cuquota was loaded: left as any context
        };
        if context == 0 || context == green {
            return;
        }
        self.contexts.add(context, device);
        self.contexts.set_green_context(green, context);
    }

    /// `cuGreenCtxStreamCreate` made `stream` in `green`: its context is the green context's.
    pub fn green_stream_made(&self, green: usize, stream: usize) {
        if let Ok(context) = self.queries.stream_context(stream) {
            self.green_context_seen(green, context);
        }
    }

    /// `cuGreenCtxDestroy` of `green` succeeded; `primary_active` asks the driver whether a
    /// device's primary context is still active (after the destruction's release).
    pub fn green_context_destroyed(
        &self,
        api: &'static str,
        green: usize,
        primary_active: impl FnOnce(u32) -> Result<bool, CuResult>,
    ) {
        let Some((_, device)) = self.contexts.find(green) else {
            return;
        };
        if let Some(context) = self.contexts.take_green_context(green) {
            match primary_active(device) {
                // The last release: the primary context's memory went with it.
                Ok(false) => {
                    self.context_destroyed(api, context);
                    self.primary_gone(api, device);
                }
                _ => self.green_context_handed_over(api, device, context),
            }
        }
        // What the green context itself took.
        self.context_destroyed(api, green);
    }

    /// What green `context` owns becomes the primary context's (or no context's), and its
    /// slot is freed. (Pool allocations belong to no context: nothing of theirs moves.)
    fn green_context_handed_over(&self, api: &'static str, device: u32, context: usize) {
        let Some((slot, _)) = self.contexts.find(context) else {
            return;
        };
        let primary = self.contexts.primary(device).unwrap_or(0);
        let heir = self.contexts.find(primary).map_or(NO_CONTEXT, |(s, _)| s);
        for kind in Kind::ALL {
            self.ledger(kind).reown_context(slot, heir);
        }
        self.context_memory.gone(slot, &self.context_part(api));
        self.contexts.remove(slot);
    }
}
