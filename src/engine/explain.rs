//! The one place that speaks. The counting code hands over what happened as an [`Outcome`]
//! of plain figures; this turns it into log lines (their words from `messages`) and trace
//! events (`trace`, started at the first one), and joins refusals to each thread's back-off
//! episode (`episodes`). Nothing here counts: the figures arrive made.

use super::state::Engine;
use crate::config::{Count, DeviceId};
use crate::cuda_abi::CuResult;
use crate::quota::{Part, UNLIMITED};
use crate::trace::{self, Event};
use crate::{episodes, messages};
use std::sync::atomic::Ordering::Relaxed;

/// What happened, in figures.
pub(super) enum Outcome {
    /// The driver gave `key`, and its `bytes` are held: `held` on `device` after.
    Admitted {
        device: u32,
        api: &'static str,
        key: u64,
        bytes: u64,
        held: u64,
    },
    /// Over the quota: refused, nothing kept.
    Refused(Refusal),
    /// Observe mode let through what the quota would have refused.
    WouldRefuse(Refusal),
    /// The driver failed a call the quota had room for; `in_use` is after the roll back.
    DriverFailed {
        device: u32,
        api: &'static str,
        bytes: u64,
        /// [`UNLIMITED`] for none.
        limit: u64,
        in_use: u64,
        rc: CuResult,
    },
    /// An allocation left the books; `held` is what it leaves. A free's is said before the
    /// driver frees: another thread may be given the address at once, and that
    /// allocation's line must come after.
    Freed {
        device: u32,
        api: &'static str,
        key: u64,
        bytes: u64,
        held: u64,
    },
    /// The driver failed a free already said: the allocation is held again.
    HeldAgain {
        device: u32,
        api: &'static str,
        key: u64,
        bytes: u64,
        held: u64,
    },
    /// A context ended and the driver freed what it held: `keys`, `bytes` in all.
    ContextEnded {
        device: u32,
        api: &'static str,
        bytes: u64,
        held: u64,
        keys: Box<[u64]>,
    },
    /// A part of the footprint is `total` now.
    PartChanged {
        device: u32,
        api: &'static str,
        part: Part,
        total: u64,
        held: u64,
    },
    /// cuquota trimmed `part` for a request of `wanted` bytes: `released` came back.
    Trimmed {
        device: u32,
        api: &'static str,
        part: Part,
        released: u64,
        wanted: u64,
        held: u64,
    },
    /// `cuMemGetInfo` told the caller `told` (free, total) of the driver's `real`.
    MemoryInfo {
        device: u32,
        api: &'static str,
        told: (u64, u64),
        real: (u64, u64),
        held: u64,
    },
    /// A per-GPU limit names GPUs the process does not see (`seen`: ordinal, UUID).
    UnseenDevices {
        unseen: Vec<DeviceId>,
        seen: Vec<(u32, Option<[u8; 16]>)>,
    },
    /// The per-GPU limits name only GPUs the process does not see: every call fails.
    NoNamedDeviceSeen {
        unseen: Vec<DeviceId>,
        seen: Vec<(u32, Option<[u8; 16]>)>,
    },
    /// Each GPU's quota, resolved (None: unlimited).
    DeviceQuotas(Vec<(u32, Option<u64>)>),
    /// NVML cannot be used, so contexts are not measured: why.
    NvmlAbsent(String),
    /// A memory location cuquota cannot place (`kind`, `id`): `api` refused, fail closed.
    UnknownLocation {
        api: &'static str,
        kind: i32,
        id: i32,
    },
    /// This member's own limit of `device` differs from its group's, which applies.
    GroupLimitDiffers {
        device: u32,
        group: String,
        own: u64,
        limit: u64,
    },
    /// The group's quota cannot be used: every call fails.
    GroupUnusable { group: String, why: String },
    /// `cuquota set` moved the group's limit on a GPU since this process last read it.
    GroupLimitMoved {
        device: u32,
        group: String,
        before: u64,
        limit: u64,
    },
}

/// A request the quota refused (or, in observe mode, would have).
#[derive(Clone, Copy, Debug)]
pub(super) struct Refusal {
    pub device: u32,
    pub api: &'static str,
    pub bytes: u64,
    pub limit: u64,
    /// What the quota held, the refused bytes not included.
    pub in_use: u64,
    pub what: Request,
}

impl Refusal {
    /// `api` asked for `bytes` on `device`, refused at `in_use` of `limit`.
    pub(super) fn new(
        api: &'static str,
        device: u32,
        bytes: u64,
        in_use: u64,
        limit: u64,
        what: Request,
    ) -> Refusal {
        Refusal {
            device,
            api,
            bytes,
            limit,
            in_use,
            what,
        }
    }
}

/// What was asked for, for the words of a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Request {
    /// An allocation: said once per back-off episode.
    Memory,
    /// Growth a call brings with it (a limit, a module, a pool's reservation): said each
    /// time, not an episode.
    Growth,
    /// A new context.
    Context,
    /// What a graph's allocations need at an upload or launch.
    Graph,
}

impl Engine {
    /// Says what happened. Inline: each caller names one variant, so the rest folds away
    /// (the plain allocation's path keeps only the trace line and the episode check).
    #[inline(always)]
    pub(super) fn explain(&self, outcome: Outcome) {
        match outcome {
            Outcome::Admitted {
                device,
                api,
                key,
                bytes,
                held,
            } => {
                if self.tracing {
                    if crate::stacks::depth() == 0 {
                        self.emit(|| Event::alloc(device, api, key, bytes, held));
                    } else {
                        self.emit_with_stack(device, api, key, bytes, held);
                    }
                }
                if let Some(ended) = episodes::allocated(device, bytes, key, api) {
                    self.episodes_ended(ended);
                }
            }
            Outcome::Refused(r) => self.say_refused(r),
            Outcome::WouldRefuse(r) => self.say_would_refuse(r),
            Outcome::DriverFailed {
                device,
                api,
                bytes,
                limit,
                in_use,
                rc,
            } => self.say_driver_failed(device, api, bytes, limit, in_use, rc),
            Outcome::Freed {
                device,
                api,
                key,
                bytes,
                held,
            } => self.emit(|| Event::free(device, api, key, bytes, held)),
            Outcome::HeldAgain {
                device,
                api,
                key,
                bytes,
                held,
            } => self.emit(|| Event::alloc(device, api, key, bytes, held)),
            Outcome::ContextEnded {
                device,
                api,
                bytes,
                held,
                keys,
            } => self.emit(|| Event::context_freed(device, api, bytes, held, keys)),
            Outcome::PartChanged {
                device,
                api,
                part,
                total,
                held,
            } => self.emit(|| Event::footprint(device, api, part, total, held)),
            Outcome::Trimmed {
                device,
                api,
                part,
                released,
                wanted,
                held,
            } => {
                self.emit(|| Event::trim(device, api, part, released, held));
                if self.config.as_ref().is_ok_and(|c| c.verbose()) {
                    crate::log::line(&messages::trimmed(device, part, released, wanted, api));
                }
            }
            Outcome::MemoryInfo {
                device,
                api,
                told,
                real,
                held,
            } => self.emit(|| Event::mem_info(device, api, told, real, held)),
            Outcome::UnseenDevices { unseen, seen } => {
                crate::log::line(&messages::unseen_devices(&unseen, &seen))
            }
            Outcome::NoNamedDeviceSeen { unseen, seen } => {
                crate::log::line(&messages::no_named_device_seen(&unseen, &seen))
            }
            Outcome::DeviceQuotas(quotas) => crate::log::line(&messages::device_quotas(&quotas)),
            Outcome::GroupLimitDiffers {
                device,
                group,
                own,
                limit,
            } => crate::log::line(&messages::group_limit_differs(device, &group, own, limit)),
            Outcome::GroupUnusable { group, why } => {
                crate::log::line(&messages::group_unusable(&group, &why))
            }
            Outcome::GroupLimitMoved {
                device,
                group,
                before,
                limit,
            } => {
                crate::log::line(&messages::group_limit_moved(device, &group, before, limit));
                let in_use = self.held(device);
                self.emit(|| Event::limit(device, limit, before, in_use));
            }
            Outcome::UnknownLocation { api, kind, id } => {
                crate::log::line(&messages::unknown_location(api, kind, id))
            }
            Outcome::NvmlAbsent(why) => {
                if self.config.as_ref().is_ok_and(|c| c.verbose()) {
                    crate::log::line(&messages::nvml_absent(&why));
                }
            }
        }
    }

    /// Refused over quota: one line (an allocation's when it opens a back-off episode, any
    /// other always), and a `refused` event at the figure it was refused at (requests in
    /// flight included: no peak counts it). In a group, a printed refusal names who holds
    /// the quota, and its event carries them with the group's figure.
    #[cold]
    #[inline(never)]
    fn say_refused(&self, r: Refusal) {
        let Refusal {
            device,
            api,
            bytes,
            what,
            ..
        } = r;
        let printed = match what {
            Request::Memory => self.episode_refusal(device, bytes, api),
            Request::Growth | Request::Context | Request::Graph => true,
        };
        let held = self.held_figures(device, &r, printed);
        if printed {
            let line = match what {
                Request::Memory | Request::Growth => {
                    messages::quota_refusal(device, bytes, api, &held)
                }
                Request::Context => messages::context_refusal(device, bytes, api, &held),
                Request::Graph => messages::graph_refusal(device, bytes, api, &held),
            };
            crate::log::line(&line);
            self.books.refused(device, &line);
        }
        self.emit(|| self.refusal_event(device, &r, held, false));
        if what == Request::Memory {
            episodes::refusal_said();
        }
    }

    /// Observe mode allowed what the quota would have refused: said, and traced as a refusal
    /// marked observed, so that the trace and the report count what the log summary counts.
    /// Not an episode: the caller got its memory.
    #[cold]
    #[inline(never)]
    fn say_would_refuse(&self, r: Refusal) {
        let held = self.held_figures(r.device, &r, true);
        crate::log::line(&messages::would_refuse(r.device, r.bytes, r.api, &held));
        self.emit(|| self.refusal_event(r.device, &r, held, true));
    }

    /// A refusal's `refused` event: in a group its `in_use` is this process's own and the
    /// group's figure and holders go with it.
    fn refusal_event(
        &self,
        device: u32,
        r: &Refusal,
        held: messages::Held,
        observed: bool,
    ) -> Event {
        let (api, bytes) = (r.api, r.bytes);
        match held.group {
            None if observed => Event::observed_refusal(device, api, bytes, r.in_use),
            None => match held.unreconciled {
                Some(why) => Event::unreconciled_refusal(device, api, bytes, r.in_use, why),
                None => Event::refused_by_quota(device, api, bytes, r.in_use),
            },
            Some(group) => {
                let own = self.quota(device).map_or(0, |q| q.in_use());
                let detail = crate::trace::GroupDetail {
                    name: group.name,
                    in_use: r.in_use,
                    limit: r.limit,
                    holders: held.holders,
                    unreconciled: held.unreconciled,
                };
                Event::group_refusal(device, api, bytes, own, observed, detail)
            }
        }
    }

    /// The driver failed a call we had reserved for: traced; an out-of-memory is explained
    /// with the driver's own free figure.
    #[cold]
    #[inline(never)]
    fn say_driver_failed(
        &self,
        device: u32,
        api: &'static str,
        bytes: u64,
        limit: u64,
        in_use: u64,
        rc: CuResult,
    ) {
        self.emit(|| Event::refused_by_driver(device, api, bytes, rc.0, in_use));
        if rc != CuResult::OUT_OF_MEMORY {
            return;
        }
        let driver_free = match self.queries.current_device() {
            Ok(d) if d == device => self.queries.memory_info().ok().map(|(free, _)| free),
            _ => None,
        };
        let limit = (limit != UNLIMITED).then_some(limit);
        if self.episode_refusal(device, bytes, api) {
            let line = messages::driver_refusal(
                device,
                bytes,
                api,
                &rc.describe(),
                driver_free,
                limit,
                in_use,
            );
            crate::log::line(&line);
            self.books.refused(device, &line);
        }
    }

    /// What the quota of `device` held when it refused at `in_use` of `limit`: this
    /// process's parts and, in a group, who holds the rest.
    /// What the quota held at refusal `r`; with `holders`, in a group, who held it (this
    /// reads every registry file: only for a refusal that is said).
    fn held_figures(&self, device: u32, r: &Refusal, holders: bool) -> messages::Held {
        let quota = self.quota(device);
        let state_dir = self.config.as_ref().ok().map(|c| c.state_dir.as_path());
        let holders = match (holders, quota, state_dir) {
            (true, Some(q), Some(dir)) => q.group_holders(dir),
            _ => Vec::new(),
        };
        messages::Held {
            limit: r.limit,
            in_use: r.in_use,
            parts: self.parts_of(device),
            group: quota.and_then(|q| q.group_share()),
            holders,
            unreconciled: self.context_unreconciled(device).map(|u| u.words()),
        }
    }

    /// A refusal joins or opens this thread's episode; the episodes it ends get their
    /// outcome line first. True when its own line is to be printed: the first of an
    /// episode, or every one at `CUQUOTA_LOG_LEVEL=debug`.
    fn episode_refusal(&self, device: u32, bytes: u64, api: &'static str) -> bool {
        let refusal = episodes::refused(device, bytes, api);
        self.episodes_ended(refusal.ended);
        refusal.opened || self.config.as_ref().is_ok_and(|c| c.debug())
    }

    /// Episodes that ended: their outcome lines, and the trace's `backoff` events. Cold and
    /// out of line: the alloc path only calls it when an episode was open.
    #[cold]
    #[inline(never)]
    fn episodes_ended(&self, ended: Vec<episodes::Ended>) {
        for e in ended {
            crate::log::line(&e.line());
            let in_use = self.held(e.device);
            let event = match e.outcome {
                messages::EpisodeEnd::BackedOff { got, .. }
                | messages::EpisodeEnd::Retried { got, .. } => {
                    Event::backoff(e.device, e.api, e.ptr, got, in_use, e.sizes())
                }
                messages::EpisodeEnd::GaveUp(_) => {
                    let last = e.refused.last().copied().unwrap_or(0);
                    Event::gave_up(e.device, e.api, last, in_use, e.sizes())
                }
            };
            self.emit(|| event);
        }
    }

    /// At exit, before the summary lines: every episode still open ends (gave up).
    pub fn end_episodes(&self) {
        self.episodes_ended(episodes::at_exit());
    }

    /// From the watcher thread: the episodes whose gap has passed end (gave up).
    pub fn end_expired_episodes(&self) {
        self.episodes_ended(episodes::expired());
    }

    /// The exit summary: one line per device that saw an allocation or a refusal, and one
    /// for the variants this build does not know that lookups gave out. It never waits for
    /// a lock.
    pub fn summary_lines(&self) -> Vec<String> {
        let lines = self.figures_at_exit().into_iter().map(|f| {
            let line = messages::summary(f.device, &f.usage, f.live);
            match f.group {
                Some((name, peak)) => line + &messages::group_summary(&name, peak),
                None => line,
            }
        });
        let unknown = self.unknown_variants.count.load(Relaxed);
        let unknown = (unknown > 0).then(|| {
            let names = self.unknown_variants.said.try_lock_for(64);
            let names = names.as_deref().map_or(&[][..], Vec::as_slice);
            messages::unknown_variants_summary(unknown, names, self.refuses_unknown_variants())
        });
        lines.chain(unknown).collect()
    }

    /// Whether the policy refuses variants this build does not know (a bad configuration
    /// refuses: fail closed).
    fn refuses_unknown_variants(&self) -> bool {
        self.config
            .as_ref()
            .map_or(true, |c| c.refuse_unknown_variants)
    }

    /// A lookup (`via`: `dlsym` or `cuGetProcAddress`) is about to give the program `symbol`,
    /// a variant of the hooked function `base` that this build does not know: its calls
    /// would not be counted. Said once per symbol (with the driver's version), traced and
    /// counted each time. Returns whether the policy refuses it (the lookup then fails as for
    /// an unknown symbol).
    pub fn unknown_variant(&self, symbol: &[u8], base: &str, via: &str) -> bool {
        let refused = self.refuses_unknown_variants();
        self.unknown_variants.count.fetch_add(1, Relaxed);
        let driver = self.queries.driver_version();
        let name = {
            let mut said = self.unknown_variants.said.lock();
            match said.iter().find(|n| n.as_bytes() == symbol) {
                Some(name) => Some((*name, false)),
                None if said.len() < super::state::UnknownVariants::NAMES => {
                    let name: &'static str = Box::leak(
                        String::from_utf8_lossy(symbol)
                            .into_owned()
                            .into_boxed_str(),
                    );
                    said.push(name);
                    Some((name, true))
                }
                None => None,
            }
        };
        let (name, first) = name.unwrap_or(("(another variant)", false));
        if first {
            crate::log::line(&messages::unknown_variant(name, base, via, driver, refused));
        }
        self.emit(|| Event::unknown_variant(name, driver.unwrap_or(0), refused));
        refused
    }

    /// Appends the trace event `event` builds; the trace module starts the trace at the
    /// first one. Inline, the check only: with no trace, an event is never built (nor
    /// dropped: the drop glue of an event, some of which own memory, is a call).
    #[inline(always)]
    fn emit(&self, event: impl FnOnce() -> Event) {
        if self.tracing {
            self.emit_traced(event());
        }
    }

    /// An allocation with its call stack (`CUQUOTA_STACKS`): out of line, so that the
    /// hooks' path without stacks stays as it was.
    #[cold]
    #[inline(never)]
    fn emit_with_stack(&self, device: u32, api: &'static str, key: u64, bytes: u64, held: u64) {
        let stack = crate::stacks::capture();
        self.emit(|| Event::alloc_at(device, api, key, bytes, held, stack));
    }

    #[inline(never)]
    fn emit_traced(&self, event: Event) {
        trace::emit(event, || self.trace_header());
    }

    /// What the trace header needs: the template, the mode, and every device the driver
    /// names with its quota (none before `cuInit`: the trace then holds its events back).
    fn trace_header(&self) -> (&std::ffi::OsStr, trace::StartInfo) {
        let template = self.config.as_ref().ok().and_then(|c| c.trace.as_deref());
        let devices = self
            .queries
            .devices()
            .into_iter()
            .map(|(ordinal, name, total)| trace::HeaderDevice {
                ordinal,
                name,
                total: total.unwrap_or(0),
                quota: self.known_limit(ordinal),
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
                group: self.books.group_name().map(str::to_string),
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
