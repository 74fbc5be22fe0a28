use super::admission::PartRefusal;
use super::explain::{Outcome, Refusal, Request};
use super::queries::Queries;
use super::state::Engine;
use crate::context_memory::{self as books, Measured, Reconciled, Unread};
use crate::contexts::NO_CONTEXT;
use crate::cuda_abi::CuResult;
use crate::in_hook::driver;
use crate::quota::Part;
use cuquota_format::settings::MAX_DEVICES;

// ---- context memory ----------------------------------------------------------------------
//
// The rules are `context_memory`'s; here they meet the driver's answers (`Queries`) and the
// footprint's context part. A context that does not fit is undone by the caller's closure
// (destroyed, released) and refused with one line.

/// The driver and NVML, as context memory measures with them.
pub(super) struct Meters<'a>(&'a dyn Queries);

impl books::Meter for Meters<'_> {
    fn nvml_free(&self, device: u32) -> Option<u64> {
        self.0.nvml_free(device)
    }
    fn driver_free(&self) -> Option<u64> {
        self.0.memory_info().ok().map(|(free, _)| free)
    }
    fn used_by_process(&self, device: u32) -> Result<u64, books::Unread> {
        self.0.used_by_process(device)
    }
}

/// The footprint's context part, charged through `api`; keeps the last refusal for its
/// line.
pub(super) struct ContextPart<'a> {
    engine: &'a Engine,
    api: &'static str,
    refusal: std::cell::Cell<Option<PartRefusal>>,
}

impl books::ContextCharges for ContextPart<'_> {
    fn grow(&self, device: u32, bytes: u64) -> Result<(), books::OverQuota> {
        let grown = self
            .engine
            .part_grow(self.api, device, Part::Context, bytes);
        grown.map_err(|refusal| {
            self.refusal.set(Some(refusal));
            books::OverQuota
        })
    }
    fn force(&self, device: u32, bytes: u64) {
        self.engine
            .part_force(self.api, device, Part::Context, bytes);
    }
    fn shrink(&self, device: u32, bytes: u64) {
        self.engine
            .part_shrink(self.api, device, Part::Context, bytes);
    }
    /// Held bytes only (not requests in flight, which the driver does not hold yet).
    fn others(&self, device: u32) -> u64 {
        let held = self.engine.quota(device).map_or(0, |q| q.held());
        held.saturating_sub(self.engine.part_total(device, Part::Context))
    }
    fn in_flight(&self, device: u32) -> u64 {
        let quota = self.engine.quota(device);
        quota.map_or(0, |q| q.in_use().saturating_sub(q.held()))
    }
    fn commits(&self, device: u32) -> u64 {
        self.engine.quota(device).map_or(0, |q| q.commits())
    }
}

impl Engine {
    /// Whether context memory is counted: the footprint is, and `CUQUOTA_CONTEXT` is not 0.
    pub(super) fn counts_context(&self) -> bool {
        self.counts_footprint() && self.context_memory.setting.counts()
    }

    pub(super) fn context_part(&self, api: &'static str) -> ContextPart<'_> {
        ContextPart {
            engine: self,
            api,
            refusal: std::cell::Cell::new(None),
        }
    }

    /// NVML is not there, so contexts are not measured: said once, at `info`.
    pub(super) fn say_nvml_absence(&self) {
        if let Some(why) = self.queries.nvml_absence() {
            self.explain(Outcome::NvmlAbsent(why));
        }
    }

    /// A context creation on `device` (`cuCtxCreate*`): `create` makes it and returns the
    /// result and the context; one that does not fit is destroyed (`destroy`) and refused.
    pub fn context_create(
        &self,
        api: &'static str,
        device: i32,
        create: impl FnOnce() -> (CuResult, usize),
        destroy: impl FnOnce(usize),
    ) -> CuResult {
        self.context_made(api, device, || true, create, destroy, true)
    }

    /// `cuDevicePrimaryCtxRetain`: the retain that makes the primary context (it was not
    /// active) is measured; one whose context does not fit is released again (`release`).
    pub fn primary_retain(
        &self,
        api: &'static str,
        device: i32,
        inactive: impl FnOnce() -> bool,
        retain: impl FnOnce() -> (CuResult, usize),
        release: impl FnOnce(),
    ) -> CuResult {
        let (rc, context) = {
            let got = std::cell::Cell::new(0usize);
            let rc = self.context_made(
                api,
                device,
                inactive,
                || {
                    let (rc, context) = retain();
                    got.set(context);
                    (rc, context)
                },
                |_| release(),
                false,
            );
            (rc, got.get())
        };
        if let (true, Ok(device)) = (rc.is_ok(), u32::try_from(device)) {
            self.primary_retained(device, context);
        }
        rc
    }

    /// A call that may make a context (`is_new`, asked under the measurement lock): measured
    /// and charged; one that does not fit is undone and refused, and with `forget_undone`
    /// (a destroyed context: its handle may come back for another) its slot is freed.
    pub(super) fn context_made(
        &self,
        api: &'static str,
        device: i32,
        is_new: impl FnOnce() -> bool,
        create: impl FnOnce() -> (CuResult, usize),
        undo: impl FnOnce(usize),
        forget_undone: bool,
    ) -> CuResult {
        let create = move || driver(create);
        let device = match u32::try_from(device) {
            Ok(d) if self.counts_context() => d,
            _ => return create().0,
        };
        let made = std::cell::Cell::new(0usize);
        let part = self.context_part(api);
        let (rc, slot, fits) =
            self.context_memory
                .create(device, &Meters(&*self.queries), &part, is_new, || {
                    let (rc, context) = create();
                    made.set(context);
                    let slot = match rc.is_ok() {
                        true => self.contexts.add(context, device),
                        false => NO_CONTEXT,
                    };
                    (rc, slot)
                });
        self.say_nvml_absence();
        match fits {
            Ok(()) => {
                if rc.is_ok() {
                    self.correct_context_memory(api, device);
                    // The watcher reconciles it with NVML's figure from now on.
                    crate::watcher::wake();
                }
                rc
            }
            Err(refused) => {
                if rc.is_ok() {
                    undo(made.get());
                    if forget_undone {
                        self.contexts.remove(slot);
                    }
                }
                if let Some(refusal) = part.refusal.get() {
                    self.part_refused(api, device, Part::Context, refused.bytes, refusal);
                }
                CuResult::OUT_OF_MEMORY
            }
        }
    }

    /// Growth of a context (a limit, a module) that did not fit: one line, and a refusal
    /// in the trace.
    pub(super) fn growth_refused(&self, part: &ContextPart<'_>, device: u32, bytes: u64) {
        let Some(PartRefusal { in_use, limit }) = part.refusal.get() else {
            return;
        };
        let refusal = Refusal::new(part.api, device, bytes, in_use, limit, Request::Growth);
        self.explain(Outcome::Refused(refusal));
    }

    /// A call that can grow the current context's memory (`cuCtxSetLimit`, a module or
    /// library load), measured with the driver's free figure. Growth that does not fit is
    /// undone (`undo` returns whether it could be; if not, the growth is charged anyway).
    /// `module`: the handle the load returned (its charge goes back at its unload).
    pub fn context_grows<R: Copy>(
        &self,
        api: &'static str,
        call: impl FnOnce() -> (CuResult, R),
        module: impl FnOnce(R) -> Option<usize>,
        undo: impl FnOnce(R) -> bool,
    ) -> CuResult {
        let call = move || driver(call);
        if !self.counts_context() {
            return call().0;
        }
        let Ok((device, slot)) = self.current() else {
            return call().0;
        };
        let meters = Meters(&*self.queries);
        let part = self.context_part(api);
        let free = || books::Meter::driver_free(&meters);
        let Measured {
            rc, value, growth, ..
        } = self.context_memory.measure(device, free, &part, call);
        if !rc.is_ok() {
            return rc;
        }
        let growth = growth.unwrap_or(0);
        let module = module(value);
        match self
            .context_memory
            .grew(device, slot, growth, module, false, &part)
        {
            Ok(()) => rc,
            Err(refused) => {
                if !undo(value) {
                    let _ = self
                        .context_memory
                        .grew(device, slot, growth, module, true, &part);
                    return rc;
                }
                self.growth_refused(&part, device, refused.bytes);
                CuResult::OUT_OF_MEMORY
            }
        }
    }

    /// `cuModuleUnload` / `cuLibraryUnload` of `module` succeeded: its load's charge goes.
    pub fn module_unloaded(&self, api: &'static str, module: usize) {
        if self.counts_context() {
            self.context_memory
                .unloaded(module, &self.context_part(api));
        }
    }

    /// Before a refusal on `device` is final: NVML's figure for this process once (growth
    /// no call announced is charged to the context part, at `api`). True when it was read:
    /// the request is then tried again against the reconciled figure.
    #[cold]
    #[inline(never)]
    pub(super) fn reconcile_before_refusal(&self, api: &'static str, device: u32) -> bool {
        if !self.counts_context() {
            return false;
        }
        let part = self.context_part(api);
        let meters = Meters(&*self.queries);
        let done = self
            .context_memory
            .correct_before_refusal(device, &meters, &part);
        done == Reconciled::Read
    }

    /// Why NVML's figure for this process could not be read on `device` when last asked
    /// (None: it was, or context memory is not counted), for a refusal's line and event.
    pub(super) fn context_unreconciled(&self, device: u32) -> Option<Unread> {
        self.counts_context()
            .then(|| self.context_memory.unread(device))
            .flatten()
    }

    /// The watcher's reconciliation (at most once a second per GPU): every GPU where a
    /// context measured to take memory lives is corrected from NVML's figure. True while
    /// there is one (the watcher comes back in a second).
    pub fn reconcile_context_memory(&self) -> bool {
        if !self.counts_context() {
            return false;
        }
        let mut any = false;
        for device in 0..MAX_DEVICES as u32 {
            if self.context_memory.measured_on(device) {
                any = true;
                self.correct_context_memory(WATCHER_API, device);
            }
        }
        any
    }

    /// NVML's figure for this process corrects `device`'s context part (rate-limited:
    /// `context_memory`), at `api` (traced as its footprint event). Never on the
    /// allocation path.
    pub fn correct_context_memory(&self, api: &'static str, device: u32) {
        if !self.counts_context() {
            return;
        }
        let now = crate::sys::monotonic_ns();
        let part = self.context_part(api);
        self.context_memory
            .correct(device, now, &Meters(&*self.queries), &part);
    }
}

/// The api a correction on the watcher is traced under: where its figure comes from.
const WATCHER_API: &str = "nvmlDeviceGetComputeRunningProcesses";

impl Engine {}
