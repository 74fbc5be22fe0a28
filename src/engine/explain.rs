//! The one place that speaks: outcomes of the counting code become log lines (their words
//! from `messages`) and trace events (`trace`), and refusals join back-off episodes
//! (`episodes`). Nothing here counts.

use super::*;

impl Engine {
    /// Observe mode allowed what the quota would have refused: said, and traced as a refusal
    /// marked observed, so that the trace and the report count what the log summary counts.
    /// Not an episode: the caller got its memory. Out of line, so that `reserve` (on the
    /// alloc path) stays small.
    #[cold]
    #[inline(never)]
    pub(super) fn would_refuse(
        &self,
        device: u32,
        bytes: u64,
        api: &'static str,
        limit: u64,
        in_use: u64,
    ) {
        let parts = self.parts_of(device);
        crate::log::line(&messages::would_refuse(
            device, bytes, api, limit, in_use, &parts,
        ));
        self.emit(Event::observed_refusal(device, api, bytes, in_use));
    }

    /// Refused over quota: explain, and remember it for the back-off line.
    pub(super) fn refused(
        &self,
        device: u32,
        bytes: u64,
        api: &'static str,
        limit: u64,
        in_use: u64,
    ) {
        if self.episode_refusal(device, bytes, api) {
            let parts = self.parts_of(device);
            crate::log::line(&messages::quota_refusal(
                device, bytes, api, limit, in_use, &parts,
            ));
        }
        // The figure it was refused at (requests in flight included): no peak counts it.
        self.emit(Event::refused_by_quota(device, api, bytes, in_use));
    }

    /// A refusal joins or opens this thread's episode; the episodes it ends get their
    /// outcome line first. True when its own line is to be printed: the first of an
    /// episode, or every one at `CUQUOTA_LOG_LEVEL=debug`.
    pub(super) fn episode_refusal(&self, device: u32, bytes: u64, api: &'static str) -> bool {
        let refusal = episodes::refused(device, bytes, api);
        self.episodes_ended(refusal.ended);
        refusal.opened || self.config.as_ref().is_ok_and(|c| c.debug())
    }

    /// Episodes that ended: their outcome lines, and the trace's `backoff` events. Cold and
    /// out of line: `committed` (the alloc path) only calls it when an episode was open.
    #[cold]
    #[inline(never)]
    pub(super) fn episodes_ended(&self, ended: Vec<episodes::Ended>) {
        for e in ended {
            crate::log::line(&e.line());
            let in_use = self.quota(e.device).map_or(0, |q| q.held());
            let event = match e.outcome {
                messages::Outcome::BackedOff { got, .. }
                | messages::Outcome::Retried { got, .. } => {
                    Event::backoff(e.device, e.api, e.ptr, got, in_use, e.sizes())
                }
                messages::Outcome::GaveUp(_) => {
                    let last = e.refused.last().copied().unwrap_or(0);
                    Event::gave_up(e.device, e.api, last, in_use, e.sizes())
                }
            };
            self.emit(event);
        }
    }

    /// At exit, before the summary lines: every episode still open ends (gave up).
    pub fn end_episodes(&self) {
        self.episodes_ended(episodes::at_exit());
    }

    /// The driver failed a call we had reserved for: explain an out-of-memory.
    pub(super) fn driver_failed(
        &self,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        bytes: u64,
        limit: u64,
        rc: CuResult,
    ) {
        self.emit(Event::refused_by_driver(
            device,
            api,
            bytes,
            rc.0,
            quota.in_use(),
        ));
        if rc != CuResult::OUT_OF_MEMORY {
            return;
        }
        quota.count_driver_refusal();
        let driver_free = match self.queries.current_device() {
            Ok(d) if d == device => self.queries.memory_info().ok().map(|(free, _)| free),
            _ => None,
        };
        let limit = (limit != UNLIMITED).then_some(limit);
        if self.episode_refusal(device, bytes, api) {
            crate::log::line(&messages::driver_refusal(
                device,
                bytes,
                api,
                &rc.describe(),
                driver_free,
                limit,
                quota.in_use(),
            ));
        }
    }
}

impl Engine {
    /// Appends a trace event; the trace module starts the trace at the first one.
    pub(super) fn emit(&self, event: Event) {
        if self.tracing {
            trace::emit(event, || self.trace_header());
        }
    }

    /// What the trace header needs: the template, the mode, and every device the driver
    /// names with its quota (none before `cuInit`: the trace then holds its events back).
    pub(super) fn trace_header(&self) -> (&std::ffi::OsStr, trace::StartInfo) {
        let template = self.config.as_ref().ok().and_then(|c| c.trace.as_deref());
        let devices = self
            .queries
            .devices()
            .into_iter()
            .map(|(ordinal, name, total)| trace::DeviceInfo {
                ordinal,
                name,
                total: total.unwrap_or(0),
                quota: self
                    .quota(ordinal)
                    .and_then(|q| self.limit(ordinal, q).ok())
                    .filter(|l| *l != UNLIMITED),
            })
            .collect();
        let mode = self.mode().name();
        let count = self
            .config
            .as_ref()
            .map_or(Count::Footprint, |c| c.count)
            .name();
        (
            template.unwrap_or_default(),
            trace::StartInfo {
                mode,
                count,
                devices,
            },
        )
    }

    /// At exit, before the trace's summary: a trace still waiting for the driver (events
    /// only before `cuInit`) is written now, with what the driver can tell.
    pub fn flush_held_events(&self) {
        if self.tracing {
            trace::flush_held(|| self.trace_header());
        }
    }
}
