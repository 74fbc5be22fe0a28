//! The engine's one value: its fields (the quota's books and one field per part of the
//! footprint), how it is made, and how a forked child resets it. The rooms beside this file
//! each add one `impl Engine` for what the hooks do.

use super::queries::Queries;
use crate::config::{Config, ConfigError, Mode, MAX_DEVICES};
use crate::context_memory::{ContextMemory, Setting};
use crate::contexts::Contexts;
use crate::cuda_abi::CuResult;
use crate::graph_memory::GraphBooks;
use crate::ledger::{Allocations, Kind, Ledger};
use crate::pool_cache::PoolCache;
use crate::quota::{Books, DeviceQuota};
use crate::spin::SpinLock;
use crate::vmm::VmmBooks;
use std::sync::atomic::{
    AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

/// A GPU's UUID and real memory, once known (plain atomics: a forked child reads them
/// whatever the parent's threads were doing).
pub(super) struct KnownGpu {
    known: AtomicBool,
    uuid: [AtomicU64; 2],
    total: AtomicU64,
}

impl KnownGpu {
    const fn new() -> KnownGpu {
        KnownGpu {
            known: AtomicBool::new(false),
            uuid: [const { AtomicU64::new(0) }; 2],
            total: AtomicU64::new(0),
        }
    }

    pub(super) fn get(&self) -> Option<([u8; 16], u64)> {
        if !self.known.load(Acquire) {
            return None;
        }
        let uuid = cuquota_state::shared::load_uuid(&self.uuid);
        Some((uuid, self.total.load(Relaxed)))
    }

    pub(super) fn set(&self, uuid: [u8; 16], total: u64) {
        cuquota_state::shared::store_uuid(&self.uuid, uuid);
        self.total.store(total, Relaxed);
        self.known.store(true, Release);
    }
}

pub struct Engine {
    pub config: Result<Config, ConfigError>,
    pub(super) queries: Box<dyn Queries>,
    /// Every GPU's counters: what every part charges.
    pub(super) books: Books,
    /// `CUQUOTA_TRACE` is set (read on every event, so a plain bool).
    pub(super) tracing: bool,
    /// What resolving the limits learnt: each GPU's identity, and failures said once.
    pub(super) limits: LimitState,
    // The footprint's parts, one field each (their books; the rooms of the same name hold
    // the engine's glue):
    /// Live allocations of every kind, and array sizes.
    pub(super) allocations: Allocations,
    /// What pools keep, where they land, and the pool allocations.
    pub(super) pool_cache: PoolCache,
    /// Executable graphs with memory nodes, and uploads and launches in flight.
    pub(super) graph_memory: SpinLock<GraphBooks>,
    /// The contexts charges belong to, primary contexts, attaches, and contexts ending.
    pub(super) contexts: Contexts,
    /// What contexts take (context memory): measurements and each context's charge.
    pub(super) context_memory: ContextMemory,
    /// References and mappings of `cuMemCreate` allocations (their charges are in the
    /// handle ledger).
    pub(super) vmm: SpinLock<VmmBooks>,
    /// Variants of hooked functions this build does not know that lookups handed out.
    pub(super) unknown_variants: UnknownVariants,
}

/// The variants of hooked functions this build does not know that lookups gave the program
/// (or refused): how many times, and the names said so far (each once).
pub(super) struct UnknownVariants {
    pub(super) count: AtomicU64,
    /// At most [`UnknownVariants::NAMES`] names; the rest are counted only.
    pub(super) said: SpinLock<Vec<&'static str>>,
}

impl UnknownVariants {
    /// How many distinct names are kept (each is leaked: a process meets a handful at most).
    pub(super) const NAMES: usize = 16;

    fn new() -> UnknownVariants {
        UnknownVariants {
            count: AtomicU64::new(0),
            said: SpinLock::new(Vec::new()),
        }
    }
}

/// What resolving the limits learnt, kept across fork.
pub(super) struct LimitState {
    /// Each GPU's UUID and real memory, once a group member asked.
    pub(super) gpus: [KnownGpu; MAX_DEVICES],
    /// A GPU could not join the group's quota (said once): every call fails from then on.
    pub(super) group_failure_said: AtomicBool,
    /// The per-GPU limits were checked against the devices the process sees (once).
    pub(super) devices_checked: AtomicBool,
    /// The per-GPU limits name no GPU the process sees (said once): every call fails.
    pub(super) limits_unusable: AtomicBool,
}

impl Engine {
    /// An engine charging books of its own (in this process's memory, or a group's).
    #[cfg(test)]
    pub fn new(config: Result<Config, ConfigError>, queries: Box<dyn Queries>) -> Engine {
        let group = crate::group::Group::new(config.as_ref().ok().and_then(|c| c.group_spec()));
        Engine::with_books(config, queries, Books::new(group))
    }

    /// An engine charging `books` (kept in a registry file, or in a group).
    pub fn with_books(
        config: Result<Config, ConfigError>,
        queries: Box<dyn Queries>,
        books: Books,
    ) -> Engine {
        if let Ok(c) = &config {
            if c.trace.is_some() {
                crate::stacks::enable(c.stacks);
            }
        }
        Engine {
            queries,
            books,
            tracing: config.as_ref().is_ok_and(|c| c.trace.is_some()),
            limits: LimitState {
                gpus: [const { KnownGpu::new() }; MAX_DEVICES],
                group_failure_said: AtomicBool::new(false),
                devices_checked: AtomicBool::new(false),
                limits_unusable: AtomicBool::new(false),
            },
            allocations: Allocations::new(),
            pool_cache: PoolCache::new(),
            graph_memory: SpinLock::new(GraphBooks::new()),
            contexts: Contexts::new(),
            context_memory: ContextMemory::new(Setting::from_config(
                config.as_ref().ok().and_then(|c| c.context),
            )),
            vmm: SpinLock::new(VmmBooks::new()),
            unknown_variants: UnknownVariants::new(),
            config,
        }
    }

    pub(super) fn mode(&self) -> Mode {
        self.config.as_ref().map_or(Mode::Enforce, |c| c.mode)
    }

    /// `Err(CUDA_ERROR_INVALID_VALUE)` when the configuration is bad: fail closed.
    /// `Err(CUDA_ERROR_INVALID_VALUE)` as well once a GPU could not join the group's quota:
    /// a group that cannot govern a GPU fails every call, as a bad variable does.
    pub fn check_config(&self) -> Result<(), CuResult> {
        if self.config.is_err()
            || self.limits.group_failure_said.load(Relaxed)
            || self.limits.limits_unusable.load(Relaxed)
        {
            return Err(CuResult::INVALID_VALUE);
        }
        Ok(())
    }

    /// Bytes held on `device` now (0 for a device beyond the books).
    pub(super) fn held(&self, device: u32) -> u64 {
        self.quota(device).map_or(0, |q| q.held())
    }

    pub(super) fn quota(&self, device: u32) -> Option<&DeviceQuota> {
        self.books.device(device)
    }

    #[inline(always)]
    pub(super) fn ledger(&self, kind: Kind) -> &Ledger {
        self.allocations.ledger(kind)
    }

    /// After `fork()`, in the child. It starts afresh: the parent's allocations are not its
    /// own (CUDA does not carry a context across fork), no lock is held, no quota is used.
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        // Every field named, so that a new one does not compile until it is decided here:
        // reset (the parent's books, every part), or kept (`_`: the configuration, the
        // driver's answers about GPUs, flags said once).
        let Engine {
            config: _,
            queries: _,
            books,
            tracing: _,
            limits: _,
            allocations,
            pool_cache,
            graph_memory,
            contexts,
            context_memory,
            vmm,
            unknown_variants,
        } = self;
        // SAFETY (each): the caller's promise: the child of a fork, with one thread.
        unsafe {
            books.reset_in_child();
            allocations.reset_in_child();
            pool_cache.reset_in_child();
            graph_memory.reset_in_child(GraphBooks::new());
            contexts.reset_in_child();
            context_memory.reset_in_child();
            vmm.reset_in_child(VmmBooks::new());
            // The child says its own (its lookups are its own).
            unknown_variants.said.reset_in_child(Vec::new());
        }
        unknown_variants.count.store(0, Relaxed);
    }
}
