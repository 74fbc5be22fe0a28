//! What every hook does, in plain Rust: reserve before the driver is called, commit or roll
//! back after, keep the ledgers and virtualise memory figures. The driver is reached through
//! closures and the [`Queries`] trait, so all of it is unit-tested without FFI (`tests/`,
//! one fake driver); `exports` supplies the real calls.
//!
//! One `impl Engine` per room, read in this order:
//! - `placement`: where a charge lands and which context owns it;
//! - `admission`: reserve → call → commit or roll back, written once for every kind;
//! - `allocations`: allocations and frees (pointers, pitch, arrays, handles);
//! - `contexts`: contexts as owners, and the end of a context as one guard value;
//! - `vmm`: `cuMemCreate` references and mappings, imports;
//! - the footprint's parts besides allocations: `parts` (charging any part), `pool_cache`
//!   (what pools keep), `graph_memory`, `context_memory` (what contexts take);
//! - `figures`: what the caller is told (memory info, total, summary figures);
//!   `nvml_figures`: what NVML shows under a quota;
//! - `explain`: the one place that speaks — outcomes become log lines and trace events.

use crate::array_shape::ArrayShape;
use crate::config::{Config, ConfigError, Count, Limits, Mode, MAX_DEVICES};
use crate::context_memory::{ContextMemory, Measured, Setting};
use crate::contexts::{ContextSlot, Contexts, NO_CONTEXT};
use crate::cuda_abi::CuResult;
use crate::group::Group;
use crate::ledger::{Charge, Ledger};
use crate::quota::{Books, DeviceQuota, Part, Reservation, UNLIMITED};
use crate::spin::{SpinLock, EXIT_LOCK_ATTEMPTS};
use crate::vmm::VmmBooks;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

mod admission;
mod allocations;
mod context_memory;
mod contexts;
mod explain;
mod figures;
mod graph_memory;
mod nvml_figures;
mod parts;
mod placement;
mod pool_cache;
mod queries;
#[cfg(test)]
mod tests;
mod vmm;

use context_memory::context_setting;
pub use contexts::ContextEnd;
use contexts::Ending;
use explain::Outcome;
pub use graph_memory::GraphNode;
pub use nvml_figures::{
    configured_limit, cuda_ordinal, memory_told, quota_without_books, reserved_told, NvmlQuota,
};
pub use parts::PartRefusal;
pub use pool_cache::PoolOf;
pub use queries::Queries;

cuquota_format::listed_enum! {
    /// What a charge is keyed by: each kind is a key space with a ledger of its own. A new
    /// kind (arrays, contexts) is a variant here; the engine keeps one ledger per entry of
    /// `ALL`, and everything that sums or resets goes over all of them. (Pool allocations,
    /// while the quota counts the footprint, are in the pool cache's books, with their
    /// pools: see `pool_cache`.) A kind indexes the ledgers: as a usize it needs no widening
    /// on the alloc/free path.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(usize)]
    pub enum Kind {
        /// Device pointers (`cuMemAlloc`, pools, pitch).
        Pointer,
        /// `cuMemCreate` handles.
        Handle,
        /// CUDA arrays and mipmapped arrays (`CUarray`, `CUmipmappedArray` handles).
        Array,
    }
}

/// Where an allocation lands, and which context owns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The current context's device, owned by that context.
    Current,
    /// The device of a stream's context, owned by it (the legacy and per-thread default
    /// streams mean the current context).
    Stream(usize),
    /// A known device (`cuMemCreate` properties), owned by no context.
    Device(u32),
    /// A pool's device, owned by the context of the stream it was allocated on.
    Pool { device: u32, stream: usize },
    /// Not device memory (`cuMemCreate` on the host, a host pool): not charged.
    Uncharged,
}

/// How many (device, array shape) sizes the engine remembers at most.
const ARRAY_SIZES_KEPT: usize = 4096;

/// Where a pool's memory lands, from its properties or the query that returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolPlace {
    Device(u32),
    /// Host or host-NUMA memory: not charged.
    Host,
    /// A CUDA 13 managed pool: charged as `cuMemAllocManaged` is, to the device of the
    /// context it is allocated in (here: the stream's).
    Managed,
}

/// A GPU's UUID and real memory, once known (plain atomics: a forked child reads them
/// whatever the parent's threads were doing).
struct KnownGpu {
    known: std::sync::atomic::AtomicBool,
    uuid: [std::sync::atomic::AtomicU64; 2],
    total: std::sync::atomic::AtomicU64,
}

impl KnownGpu {
    const fn new() -> KnownGpu {
        KnownGpu {
            known: std::sync::atomic::AtomicBool::new(false),
            uuid: [const { std::sync::atomic::AtomicU64::new(0) }; 2],
            total: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn get(&self) -> Option<([u8; 16], u64)> {
        use std::sync::atomic::Ordering::Acquire;
        if !self.known.load(Acquire) {
            return None;
        }
        let mut uuid = [0u8; 16];
        uuid[..8].copy_from_slice(&self.uuid[0].load(Relaxed).to_le_bytes());
        uuid[8..].copy_from_slice(&self.uuid[1].load(Relaxed).to_le_bytes());
        Some((uuid, self.total.load(Relaxed)))
    }

    fn set(&self, uuid: [u8; 16], total: u64) {
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        self.uuid[0].store(word(&uuid[..8]), Relaxed);
        self.uuid[1].store(word(&uuid[8..]), Relaxed);
        self.total.store(total, Relaxed);
        self.known.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`: with 0, the default streams, which mean
/// the current context.
const LEGACY_STREAM: usize = 1;
const PER_THREAD_STREAM: usize = 2;

pub struct Engine {
    pub config: Result<Config, ConfigError>,
    queries: Box<dyn Queries>,
    /// Every GPU's counters.
    books: Books,
    /// A GPU could not join the group's quota (said once): every call fails from then on.
    group_failure_said: std::sync::atomic::AtomicBool,
    /// Each GPU's UUID and real memory, once a group member asked (kept across fork).
    gpus: [KnownGpu; MAX_DEVICES],
    /// One ledger per [`Kind`], indexed by it.
    ledgers: [Ledger; Kind::ALL.len()],
    /// Pools whose location is known (made by `cuMemPoolCreate`, or returned by a
    /// default/current pool query) → where their memory lands.
    pools: SpinLock<HashMap<usize, PoolPlace>>,
    /// The contexts charges belong to, and their devices.
    contexts: Contexts,
    /// Each device's primary context, as `cuDevicePrimaryCtxRetain` returned it (0: none
    /// seen), for crediting its charges at a reset or its last release.
    primary: [AtomicUsize; MAX_DEVICES],
    /// Contexts whose end (destroy, detach, primary reset or release) is in the driver now,
    /// and the charges of theirs found stale meanwhile (see [`ContextEnd`]).
    ending: SpinLock<Ending>,
    /// `cuCtxAttach`'s extra references per context (deprecated API, rarely used).
    attached: SpinLock<HashMap<usize, u32>>,
    /// What the driver gave each array shape on each device (see [`Engine::alloc_array`]).
    array_sizes: SpinLock<HashMap<(u32, ArrayShape), u64>>,
    /// References and mappings of `cuMemCreate` allocations (their charges are in the
    /// handle ledger).
    vmm: SpinLock<VmmBooks>,
    /// This process's pools, what each keeps beyond its live allocations, and which pool
    /// each pool allocation came from (the pool cache's books, see `pool_cache`).
    pool_books: SpinLock<pool_cache::PoolBooks>,
    /// `CUQUOTA_TRACE` is set (read on every event, so a plain bool).
    tracing: bool,
    /// The per-GPU limits were checked against the devices the process sees (once).
    devices_checked: std::sync::atomic::AtomicBool,
    /// The per-GPU limits name no GPU the process sees (said once): every call fails.
    limits_unusable: std::sync::atomic::AtomicBool,
    /// What contexts take (context memory): measurements and each context's charge.
    context_memory: ContextMemory,
    /// Executable graphs with memory nodes, and uploads and launches in flight (graph memory).
    graph_books: SpinLock<graph_memory::GraphBooks>,
}

impl Engine {
    pub fn new(config: Result<Config, ConfigError>, queries: Box<dyn Queries>) -> Engine {
        let group = Group::new(config.as_ref().ok().and_then(|c| c.group_spec()));
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
            group_failure_said: std::sync::atomic::AtomicBool::new(false),
            gpus: [const { KnownGpu::new() }; MAX_DEVICES],
            ledgers: std::array::from_fn(|_| Ledger::new()),
            pools: SpinLock::new(HashMap::new()),
            array_sizes: SpinLock::new(HashMap::new()),
            vmm: SpinLock::new(VmmBooks::new()),
            pool_books: SpinLock::new(pool_cache::PoolBooks::default()),
            contexts: Contexts::new(),
            primary: [const { AtomicUsize::new(0) }; MAX_DEVICES],
            attached: SpinLock::new(HashMap::new()),
            ending: SpinLock::new(Ending::new()),
            tracing: config.as_ref().is_ok_and(|c| c.trace.is_some()),
            devices_checked: std::sync::atomic::AtomicBool::new(false),
            limits_unusable: std::sync::atomic::AtomicBool::new(false),
            context_memory: ContextMemory::new(context_setting(&config)),
            graph_books: SpinLock::new(graph_memory::GraphBooks::new()),
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
            || self.group_failure_said.load(Relaxed)
            || self.limits_unusable.load(Relaxed)
        {
            return Err(CuResult::INVALID_VALUE);
        }
        Ok(())
    }

    /// Bytes held on `device` now (0 for a device beyond the books).
    pub(super) fn held(&self, device: u32) -> u64 {
        self.quota(device).map_or(0, |q| q.held())
    }

    /// `device`'s limit, resolved; `None` when it is unlimited or cannot be resolved.
    pub(super) fn known_limit(&self, device: u32) -> Option<u64> {
        let quota = self.quota(device)?;
        self.limit(device, quota).ok().filter(|l| *l != UNLIMITED)
    }

    pub(super) fn quota(&self, device: u32) -> Option<&DeviceQuota> {
        self.books.device(device)
    }

    pub(super) fn ledger(&self, kind: Kind) -> &Ledger {
        &self.ledgers[kind as usize]
    }

    /// The limit of `device` in bytes ([`UNLIMITED`] for none), resolved on first use.
    pub(super) fn limit(&self, device: u32, quota: &DeviceQuota) -> Result<u64, CuResult> {
        let moved = |before, limit| self.group_limit_moved(device, before, limit);
        quota.limit_or_resolve(
            || {
                let limits = self.config.as_ref().map_or(&Limits::None, |c| &c.limits);
                self.check_named_devices(limits)?;
                let ceilings = self.config.as_ref().map_or(&[][..], |c| &c.ceilings[..]);
                // The smallest of the variable's limit and the policies' (which it only narrows);
                // the GPU's real memory, when a percentage needed it, is kept for the views.
                let total = std::cell::Cell::new(None);
                let own = match &self.config {
                    Ok(c) => c.own_limit(
                        device,
                        || self.queries.device_uuid(device),
                        || {
                            let got = self.queries.total_memory(device);
                            total.set(got.ok());
                            got
                        },
                    )?,
                    Err(_) => None,
                };
                self.describe_device(device, total.get());
                let (own, named) = (own.unwrap_or(UNLIMITED), own.is_some());
                // Under a policy a group's limit is bounded by this process's too.
                let cap = if ceilings.is_empty() { UNLIMITED } else { own };
                match self.books.group_name() {
                    None => Ok(own),
                    Some(_) => self.join_group(device, own, named, cap),
                }
            },
            moved,
        )
    }

    /// `cuquota set` moved the group's limit of `device` from `before` to `limit`: said once,
    /// and traced, so that the trace and the report know the quota in force at each moment.
    #[cold]
    #[inline(never)]
    fn group_limit_moved(&self, device: u32, before: u64, limit: u64) {
        let group = self.books.group_name().unwrap_or_default().to_string();
        self.explain(Outcome::GroupLimitMoved {
            device,
            group,
            before,
            limit,
        });
    }

    /// At exit (before the summary): a group limit moved since this process last asked is
    /// said and traced, so that the summary's quota is the trace's last one.
    pub fn note_group_limits(&self) {
        for device in 0..MAX_DEVICES as u32 {
            let moved = self.quota(device).and_then(|q| q.group_limit_moved());
            if let Some((before, limit)) = moved {
                self.group_limit_moved(device, before, limit);
            }
        }
    }

    /// At the first use of `device`: which GPU it is, for the views (its UUID, and its real
    /// memory when the limit needed it). Nothing more is asked of the driver: every call here
    /// would be one the program did not make.
    #[cold]
    #[inline(never)]
    fn describe_device(&self, device: u32, total: Option<u64>) {
        if self.books.is_registered() {
            let uuid = self.queries.device_uuid(device).unwrap_or([0; 16]);
            self.books.describe(device, uuid, total.unwrap_or(0), "");
        }
    }

    /// `device`'s UUID and real memory, asked of the driver once and remembered: a forked
    /// child joins its group again without a driver call (another of the parent's threads
    /// may have been inside the driver at the fork).
    fn gpu_identity(&self, device: u32) -> Option<([u8; 16], u64)> {
        let known = self.gpus.get(device as usize)?;
        if let Some(id) = known.get() {
            return Some(id);
        }
        let uuid = self.queries.device_uuid(device)?;
        let total = self.queries.total_memory(device).unwrap_or(0);
        known.set(uuid, total);
        Some((uuid, total))
    }

    /// The first use of `device` in a group member: its reservations go to the group's
    /// quota of that GPU (by UUID) from now on. Returns the group's limit. A member whose
    /// own limit differs is told once; a GPU that cannot join fails closed.
    #[cold]
    #[inline(never)]
    fn join_group(&self, device: u32, own: u64, named: bool, cap: u64) -> Result<u64, CuResult> {
        let group = self.books.group_name().unwrap_or_default().to_string();
        let joined = match self.gpu_identity(device) {
            None => Err("the driver cannot name the GPU's UUID".to_string()),
            Some((uuid, total)) => self.books.join_group(device, uuid, own, total, cap),
        };
        match joined {
            Ok(limit) => {
                if named && limit != own {
                    self.explain(Outcome::GroupLimitDiffers {
                        device,
                        group,
                        own,
                        limit,
                    });
                }
                Ok(limit)
            }
            Err(why) => {
                if !self.group_failure_said.swap(true, Relaxed) {
                    self.explain(Outcome::GroupUnusable { group, why });
                }
                Err(CuResult::INVALID_VALUE)
            }
        }
    }

    /// After `fork()`, in the child. It starts afresh: the parent's allocations are not its
    /// own (CUDA does not carry a context across fork), no lock is held, no quota is used.
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        // Every field named, so that a new one does not compile until it is decided here:
        // reset (the parent's books), or kept (`_`: the configuration, the driver's answers
        // about GPUs, flags said once).
        let Engine {
            config: _,
            queries: _,
            books,
            group_failure_said: _,
            gpus: _,
            ledgers,
            pools,
            contexts,
            primary,
            ending,
            attached,
            array_sizes,
            vmm,
            pool_books,
            tracing: _,
            devices_checked: _,
            limits_unusable: _,
            context_memory,
            graph_books,
        } = self;
        for ledger in ledgers {
            // SAFETY: the caller's promise: the child of a fork, with one thread.
            unsafe { ledger.reset_in_child() };
        }
        // SAFETY (each below): as above.
        unsafe {
            pools.reset_in_child(HashMap::new());
            array_sizes.reset_in_child(HashMap::new());
            vmm.reset_in_child(VmmBooks::new());
            pool_books.reset_in_child(pool_cache::PoolBooks::default());
            contexts.reset_in_child();
            attached.reset_in_child(HashMap::new());
            ending.reset_in_child(Ending::new());
            graph_books.reset_in_child(graph_memory::GraphBooks::new());
        }
        for p in primary {
            p.store(0, Relaxed);
        }
        // SAFETY: as above.
        unsafe { books.reset_in_child() };
        // SAFETY: as above.
        unsafe { context_memory.reset_in_child() };
    }
}
