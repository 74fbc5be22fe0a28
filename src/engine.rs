//! What every hook does, in plain Rust: reserve before the driver is called, commit or roll
//! back after, keep the ledgers and virtualise memory figures. The driver is reached through
//! closures and the [`Queries`] trait, so all of it is unit-tested without FFI (see the tests
//! below); `exports.rs` supplies the real calls. What the engine does not do itself it hands
//! on: the words of a log line to `messages`, each thread's back-off episode to `episodes`,
//! events to `trace` (which starts itself at the first one).

use crate::array_shape::ArrayShape;
use crate::config::{Config, ConfigError, Count, Limits, Mode, MAX_DEVICES};
use crate::context_memory::{self, ContextMemory, Measured, Setting};
use crate::contexts::{Contexts, Slot, NO_CONTEXT};
use crate::cuda_abi::CuResult;
use crate::episodes;
use crate::ledger::{Charge, Ledger};
use crate::messages;
use crate::quota::{DeviceQuota, Part, Reservation, UNLIMITED};
use crate::spin::{SpinLock, EXIT_LOCK_ATTEMPTS};
use crate::trace::{self, Event};
use crate::vmm::VmmBooks;
use cuquota_format::units::Size;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

// The footprint's parts besides allocations (issue 11), each an `impl Engine` of its own.
mod graph_memory;
mod pool_cache;
pub use graph_memory::GraphNode;
pub use pool_cache::PoolOf;

/// What the engine asks the driver besides the call being hooked.
pub trait Queries: Sync + Send {
    /// The device of the calling thread's current context.
    fn current_device(&self) -> Result<u32, CuResult>;
    /// The calling thread's current context (0: none, or the driver could not say).
    fn current_context(&self) -> usize;
    /// The device of a context.
    fn context_device(&self, context: usize) -> Result<u32, CuResult>;
    /// The context of a stream (not one of the default streams).
    fn stream_context(&self, stream: usize) -> Result<usize, CuResult>;
    /// A device's real total memory.
    fn total_memory(&self, device: u32) -> Result<u64, CuResult>;
    /// The real (free, total) of the current context's device.
    fn memory_info(&self) -> Result<(u64, u64), CuResult>;
    /// Every device: ordinal, name, real total (for the trace header).
    fn devices(&self) -> Vec<(u32, String, Option<u64>)> {
        Vec::new()
    }
    /// A device's UUID (per-GPU limits may name one).
    fn device_uuid(&self, _device: u32) -> Option<[u8; 16]> {
        None
    }

    // -- context memory (issue 11): NVML, which needs no context
    /// A device's free memory from NVML; `None` without NVML.
    fn nvml_free(&self, _device: u32) -> Option<u64> {
        None
    }
    /// This process's used memory on a device, from NVML's process list.
    fn used_by_process(&self, _device: u32) -> Option<u64> {
        None
    }
    /// Why NVML cannot be used, once (said at `info`).
    fn nvml_absence(&self) -> Option<String> {
        None
    }

    // -- graph memory (issue 11) --
    /// The nodes of a graph, as far as memory goes (None: the driver cannot say).
    fn graph_nodes(&self, _graph: usize) -> Option<Vec<GraphNode>> {
        None
    }
    /// A device's graph memory pool: (reserved, used) bytes.
    fn graph_memory(&self, _device: u32) -> Option<(u64, u64)> {
        None
    }
    /// `cuDeviceGraphMemTrim(device)`: whether it succeeded.
    fn graph_memory_trim(&self, _device: u32) -> bool {
        false
    }

    // -- pool reservations (issue 11: the pool cache; see `pool_cache`) --
    /// A pool's (reserved, used) bytes now (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`,
    /// `CU_MEMPOOL_ATTR_USED_MEM_CURRENT`).
    fn pool_usage(&self, _pool: usize) -> Result<(u64, u64), CuResult> {
        Err(CuResult::NOT_SUPPORTED)
    }
    /// Releases what a pool keeps beyond its live allocations (`cuMemPoolTrimTo(pool, 0)`).
    fn trim_pool(&self, _pool: usize) -> Result<(), CuResult> {
        Err(CuResult::NOT_SUPPORTED)
    }
    /// A device's current pool, which `cuMemAllocAsync` allocates from (`cuDeviceGetMemPool`).
    fn current_pool(&self, _device: u32) -> Result<usize, CuResult> {
        Err(CuResult::NOT_SUPPORTED)
    }
}

/// What a charge is keyed by: each kind is a key space with a ledger of its own. A new kind
/// (arrays, contexts) is a variant here and an entry in [`Kind::ALL`]; the engine keeps one
/// ledger per entry, and everything that sums or resets goes over all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// A kind indexes the ledgers: as a usize it needs no widening on the alloc/free path.
#[repr(usize)]
pub enum Kind {
    /// Device pointers (`cuMemAlloc`, pools, pitch).
    Pointer,
    /// `cuMemCreate` handles.
    Handle,
    /// CUDA arrays and mipmapped arrays (`CUarray`, `CUmipmappedArray` handles).
    Array,
    /// Stream-ordered allocations from a pool while the quota counts the footprint: their
    /// free moves the charge to the pool cache (see `pool_cache`).
    PoolPointer,
}

impl Kind {
    /// Every kind, in the order of their discriminants (which index the ledgers).
    pub const ALL: [Kind; 4] = [Kind::Pointer, Kind::Handle, Kind::Array, Kind::PoolPointer];
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

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`: with 0, the default streams, which mean
/// the current context.
const LEGACY_STREAM: usize = 1;
const PER_THREAD_STREAM: usize = 2;

/// What [`Engine::context_will_end`] took out of the books before the driver ran the call.
pub struct Ended {
    plain: Vec<(Kind, u64, Charge)>,
    pooled: pool_cache::TakenPooled,
    /// The `context` line was written.
    written: bool,
}

/// Contexts being ended in the driver now, and the stale entries of theirs found meanwhile:
/// (slot, key, bytes), already given back.
struct Ending {
    /// Each with the call that ends it.
    slots: Vec<(Slot, &'static str)>,
    stolen: Vec<(Slot, u64, u64)>,
}

impl Ending {
    const fn new() -> Ending {
        Ending {
            slots: Vec::new(),
            stolen: Vec::new(),
        }
    }

    fn take_stolen(&mut self, slot: Slot) -> Vec<(u64, u64)> {
        let mut taken = Vec::new();
        self.stolen.retain(|&(s, key, bytes)| {
            if s == slot {
                taken.push((key, bytes));
            }
            s != slot
        });
        taken
    }
}

/// What a reservation lets an allocation do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reserved {
    /// Too large to count: call the driver (which will refuse it), charge nothing.
    Uncharged,
    /// Charged: call the driver, then commit or roll back.
    Charged,
    /// Over the quota: refused (and explained) without calling the driver.
    Refused,
}

pub struct Engine {
    pub config: Result<Config, ConfigError>,
    queries: Box<dyn Queries>,
    quotas: [DeviceQuota; MAX_DEVICES],
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
    /// and the charges of theirs found stale meanwhile (see [`Engine::context_ending`]).
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
    /// What contexts take (issue 11): measurements and each context's charge.
    context_memory: ContextMemory,
    /// Executable graphs with memory nodes, and uploads and launches in flight (issue 11).
    graph_books: SpinLock<graph_memory::GraphBooks>,
}

impl Engine {
    pub fn new(config: Result<Config, ConfigError>, queries: Box<dyn Queries>) -> Engine {
        Engine {
            queries,
            quotas: [const { DeviceQuota::new() }; MAX_DEVICES],
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
            context_memory: ContextMemory::new(context_setting(&config)),
            graph_books: SpinLock::new(graph_memory::GraphBooks::new()),
            config,
        }
    }

    fn mode(&self) -> Mode {
        self.config.as_ref().map_or(Mode::Enforce, |c| c.mode)
    }

    /// `Err(CUDA_ERROR_INVALID_VALUE)` when the configuration is bad: fail closed.
    pub fn check_config(&self) -> Result<(), CuResult> {
        self.config
            .as_ref()
            .map(|_| ())
            .map_err(|_| CuResult::INVALID_VALUE)
    }

    fn quota(&self, device: u32) -> Option<&DeviceQuota> {
        self.quotas.get(device as usize)
    }

    fn ledger(&self, kind: Kind) -> &Ledger {
        &self.ledgers[kind as usize]
    }

    /// The limit of `device` in bytes ([`UNLIMITED`] for none), resolved on first use.
    fn limit(&self, device: u32, quota: &DeviceQuota) -> Result<u64, CuResult> {
        quota.limit_or_resolve(|| {
            let limits = self.config.as_ref().map_or(&Limits::None, |c| &c.limits);
            self.check_named_devices(limits);
            match limits.for_device(device, || self.queries.device_uuid(device)) {
                None => Ok(UNLIMITED),
                Some(Size::Bytes(b)) => Ok(b),
                Some(share) => self.queries.total_memory(device).map(|t| share.resolve(t)),
            }
        })
    }

    /// At the first limit resolved (the driver now knows its devices): one warning if a
    /// per-GPU limit names an ordinal or UUID the process does not see (the classic
    /// `CUDA_VISIBLE_DEVICES` renumbering), and at info each device's quota in bytes.
    #[cold]
    fn check_named_devices(&self, limits: &Limits) {
        use std::sync::atomic::Ordering::Relaxed;
        let verbose = self.config.as_ref().is_ok_and(|c| c.verbose());
        let per_device = matches!(limits, Limits::PerDevice(_));
        if !(verbose || per_device) || self.devices_checked.load(Relaxed) {
            return;
        }
        let seen: Vec<(u32, Option<[u8; 16]>)> = self
            .queries
            .devices()
            .into_iter()
            .map(|(d, _, _)| (d, per_device.then(|| self.queries.device_uuid(d)).flatten()))
            .collect();
        // No devices yet (the driver cannot tell): check at the next resolution.
        if seen.is_empty() || self.devices_checked.swap(true, Relaxed) {
            return;
        }
        let unseen = limits.unseen(&seen);
        if !unseen.is_empty() {
            crate::log::line(&crate::messages::unseen_devices(&unseen, &seen));
        }
        if verbose {
            // Resolving the others here re-enters `limit`, which returns at the flag above.
            let quotas: Vec<(u32, Option<u64>)> = seen
                .iter()
                .map(|(d, _)| {
                    let limit = self.quota(*d).and_then(|q| self.limit(*d, q).ok());
                    (*d, limit)
                })
                .collect();
            crate::log::line(&crate::messages::device_quotas(&quotas));
        }
    }

    /// The device an allocation at `place` is charged to and the context that owns it;
    /// `None` for memory that is not charged.
    fn resolve_place(&self, place: Place) -> Result<Option<(u32, Slot)>, CuResult> {
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
    fn current(&self) -> Result<(u32, Slot), CuResult> {
        let context = self.queries.current_context();
        if let Some((slot, device)) = self.contexts.find(context) {
            return Ok((device, slot));
        }
        // A context seen first, or none (then the driver says why: no context).
        let device = self.queries.current_device()?;
        Ok((device, self.contexts.add(context, device)))
    }

    /// A stream's device and the slot of its context.
    fn of_stream(&self, stream: usize) -> Result<(u32, Slot), CuResult> {
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

    /// `cuDevicePrimaryCtxRetain` returned `context` as `device`'s primary context.
    pub fn primary_retained(&self, device: u32, context: usize) {
        if let Some(p) = self.primary.get(device as usize) {
            p.store(context, Relaxed);
        }
        self.contexts.add(context, device);
    }

    /// `device`'s primary context was reset, or released for the last time: the driver
    /// freed every allocation of it. The context handle stays (it is reinitialised on
    /// its next use), so its slot stays too.
    pub fn primary_gone(&self, api: &'static str, device: u32) {
        let context = match self.primary.get(device as usize) {
            Some(p) => p.load(Relaxed),
            None => return,
        };
        if let Some((slot, device)) = self.contexts.find(context) {
            self.credit_context(api, device, slot);
        }
        self.graph_context_gone(api, device); // graph memory (issue 11)
    }

    /// `cuCtxDestroy` / `cuCtxDetach` of `context` succeeded: credit what it held and
    /// forget it.
    pub fn context_destroyed(&self, api: &'static str, context: usize) {
        if let Some((slot, device)) = self.contexts.find(context) {
            self.credit_context(api, device, slot);
            self.contexts.remove(slot);
            self.graph_context_gone(api, device); // graph memory (issue 11)
        }
    }

    /// `cuCtxAttach` added a reference to `context`: one more `cuCtxDetach` before it goes.
    pub fn context_attached(&self, context: usize) {
        *self.attached.lock().entry(context).or_insert(0) += 1;
    }

    /// `cuCtxDetach` succeeded: it destroyed the context unless an attach's reference was
    /// left.
    pub fn context_detached(&self, api: &'static str, context: usize) {
        {
            let mut attached = self.attached.lock();
            if let Some(n) = attached.get_mut(&context) {
                *n -= 1;
                if *n == 0 {
                    attached.remove(&context);
                }
                return;
            }
        }
        self.context_destroyed(api, context);
    }

    /// A call that may end `context` (destroy, detach, primary reset or release) is about to
    /// reach the driver. The driver frees the context's memory before cuquota hears of it,
    /// and may hand an address out again at once, to another thread: the new allocation
    /// then finds the old entry stale. While the context is marked ending, such an entry is
    /// kept for the context's `context` event rather than lost from it. Returns what
    /// [`Engine::context_end_done`] takes once the call and its crediting are over.
    pub fn context_ending(&self, api: &'static str, context: usize) -> Slot {
        let slot = self.contexts.find(context).map_or(NO_CONTEXT, |(s, _)| s);
        if slot != NO_CONTEXT {
            self.ending.lock().slots.push((slot, api));
        }
        slot
    }

    /// A call that certainly ends `context` if it succeeds (`cuCtxDestroy`,
    /// `cuDevicePrimaryCtxReset`) is about to reach the driver. As a free does, its charges
    /// leave the books now, and its `context` line is written now: once the driver has
    /// freed, another thread may be given one of its addresses, and that allocation's line
    /// must come after this one. [`Engine::context_end_settled`] credits them, or puts them
    /// back if the call failed.
    pub fn context_will_end(&self, api: &'static str, context: usize) -> Option<Ended> {
        let (slot, device) = self.contexts.find(context)?;
        let pooled = self.take_context_pool_pointers(slot);
        let mut plain = Vec::new();
        for kind in Kind::ALL {
            if kind != Kind::PoolPointer {
                for (key, charge) in self.ledger(kind).remove_context(slot) {
                    plain.push((kind, key, charge));
                }
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
            let held = self
                .quota(device)
                .map_or(0, |q| q.held().saturating_sub(here));
            self.emit(Event::context_freed(device, api, bytes, held, keys.into()));
        }
        Some(Ended {
            plain,
            pooled,
            written,
        })
    }

    /// The call [`Engine::context_will_end`] prepared for is over: on success what it took
    /// is credited (the pool allocations' charges move into the pool cache), on failure it
    /// is put back, and its lines say it is held again (`alloc` lines through `api`).
    pub fn context_end_settled(&self, api: &'static str, ended: Ended, ok: bool) {
        let Ended {
            plain,
            pooled,
            written,
        } = ended;
        if ok {
            for (_, _, charge) in &plain {
                if let Some(q) = self.quota(charge.device) {
                    q.release(charge.bytes);
                }
            }
            self.settle_context_pool_pointers(api, pooled);
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

    /// The primary context of `device`, for [`Engine::context_ending`].
    pub fn primary_context(&self, device: u32) -> usize {
        self.primary
            .get(device as usize)
            .map_or(0, |p| p.load(Relaxed))
    }

    /// The call that might have ended the context of `slot` is over (credited or not).
    pub fn context_end_done(&self, slot: Slot) {
        if slot != NO_CONTEXT {
            let mut ending = self.ending.lock();
            if let Some(i) = ending.slots.iter().position(|(s, _)| *s == slot) {
                ending.slots.swap_remove(i);
            }
            if !ending.slots.iter().any(|(s, _)| *s == slot) {
                ending.take_stolen(slot);
            }
        }
    }

    /// An entry whose address the driver handed out again, its free never seen: that memory
    /// is gone, and is given back. If its context is ending, that is how it went: traced as
    /// a free by the context's end (before the new allocation's line, so that a reader's
    /// live allocations stay right), and remembered for the context's own line.
    #[cold]
    #[inline(never)]
    fn released_stale(&self, key: u64, stale: Charge) {
        let Some(q) = self.quota(stale.device) else {
            return;
        };
        let held = q.release(stale.bytes);
        let ended_by = {
            let mut ending = self.ending.lock();
            let api = ending
                .slots
                .iter()
                .find(|(s, _)| *s == stale.context)
                .map(|(_, api)| *api);
            if api.is_some() {
                ending.stolen.push((stale.context, key, stale.bytes));
            }
            api
        };
        if let Some(api) = ended_by {
            self.emit(Event::free(stale.device, api, key, stale.bytes, held));
        }
    }

    /// Credits every charge, of every kind, that context `slot` (on `device`) owns, and
    /// records one event for it.
    fn credit_context(&self, api: &'static str, device: u32, slot: Slot) {
        // What the context itself took (issue 11).
        self.context_memory.gone(slot, &self.context_part(api));
        // Its pool allocations first: what their pools keep stays charged (`pool_cache`).
        let (mut keys, mut bytes) = self.context_pool_allocations(api, slot);
        for ledger in &self.ledgers {
            for (key, charge) in ledger.remove_context(slot) {
                if let Some(q) = self.quota(charge.device) {
                    q.release(charge.bytes);
                }
                keys.push(key);
                bytes = bytes.saturating_add(charge.bytes);
            }
        }
        // Those whose address the driver gave out again before this were credited, and
        // traced as frees, then (see `released_stale`); the context still ends with its line.
        let stolen = !self.ending.lock().take_stolen(slot).is_empty();
        if !keys.is_empty() || stolen {
            let held = self.quota(device).map_or(0, |q| q.held());
            let keys = keys.into_boxed_slice();
            self.emit(Event::context_freed(device, api, bytes, held, keys));
        }
    }

    /// An allocation of `bytes` at `place`. `call` runs the real driver function and returns
    /// its result and the new pointer or handle.
    pub fn alloc(
        &self,
        api: &'static str,
        kind: Kind,
        place: Place,
        bytes: u64,
        call: impl FnOnce() -> (CuResult, u64),
    ) -> CuResult {
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
        if !shape.is_backed() {
            return create().0;
        }
        // (Without a context the creation fails, and alloc_settled passes that on.)
        let device = self.queries.current_device().ok();
        let cached = device.and_then(|d| self.array_sizes.lock().get(&(d, shape)).copied());
        let estimate = cached.unwrap_or_else(|| shape.estimate());
        let call = || {
            let (rc, key) = create();
            let size = match (rc.is_ok(), cached, device) {
                (true, None, Some(d)) => true_size(d).inspect(|&bytes| {
                    let mut sizes = self.array_sizes.lock();
                    // A program that makes endless shapes must not grow this without end.
                    if sizes.len() >= ARRAY_SIZES_KEPT {
                        sizes.clear();
                    }
                    sizes.insert((d, shape), bytes);
                }),
                _ => cached,
            };
            (rc, key, size.unwrap_or(estimate))
        };
        self.alloc_settled(api, Kind::Array, Place::Current, estimate, call, undo)
    }

    /// Reserve `estimate`, call the driver, then charge what it actually gave (the third
    /// value `call` returns); `undo` frees an allocation whose true size does not fit.
    fn alloc_settled(
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
        let Some(quota) = self.quota(device) else {
            return call().0; // an ordinal beyond any quota cuquota keeps
        };
        let limit = match self.limit(device, quota) {
            Ok(l) => l,
            Err(rc) => return rc,
        };
        match self.reserve(api, device, quota, estimate, limit) {
            Reserved::Refused => return CuResult::OUT_OF_MEMORY,
            Reserved::Charged => {}
            Reserved::Uncharged => {
                let rc = call().0;
                if !rc.is_ok() {
                    self.driver_failed(api, device, quota, estimate, limit, rc);
                }
                return rc;
            }
        }
        let (rc, key, actual) = call();
        if !rc.is_ok() {
            quota.rollback(estimate);
            self.driver_failed(api, device, quota, estimate, limit, rc);
            return rc;
        }
        if actual > estimate {
            let enforce = self.mode() == Mode::Enforce;
            if let Reservation::Refused { .. } | Reservation::Uncharged =
                quota.reserve(actual - estimate, limit, enforce)
            {
                undo(key);
                let in_use = quota.rollback(estimate);
                self.refused(device, actual, api, limit, in_use);
                return CuResult::OUT_OF_MEMORY;
            }
        } else if actual < estimate {
            quota.rollback(estimate - actual);
        }
        let charge = Charge {
            device,
            bytes: actual,
            context: owner,
        };
        self.committed(api, kind, key, quota, charge);
        rc
    }

    /// Reserves or refuses; explains refusals (and, in observe mode, what would have been).
    /// Inline: it is on the alloc path (left to the compiler, a second caller made it an
    /// out-of-line call there), and its rare branches are out of line.
    #[inline(always)]
    fn reserve(
        &self,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        bytes: u64,
        limit: u64,
    ) -> Reserved {
        let enforce = self.mode() == Mode::Enforce;
        let mut reservation = quota.reserve(bytes, limit, enforce);
        if matches!(reservation, Reservation::Refused { .. }) {
            reservation = self.reserve_after_room(api, device, quota, bytes, limit, reservation);
        }
        match reservation {
            Reservation::Granted { .. } => Reserved::Charged,
            Reservation::Uncharged => Reserved::Uncharged,
            Reservation::Refused { in_use, limit } => {
                self.refused(device, bytes, api, limit, in_use);
                Reserved::Refused
            }
            Reservation::Allowed {
                in_use_before,
                limit,
            } => {
                self.would_refuse(device, bytes, api, limit, in_use_before);
                Reserved::Charged
            }
        }
    }

    /// A refused reservation, tried once more if trimming this process's unused pool and
    /// graph memory made room. Out of line: the retry must not grow `reserve`, which is
    /// inlined on the alloc path.
    #[cold]
    #[inline(never)]
    fn reserve_after_room(
        &self,
        api: &'static str,
        device: u32,
        quota: &DeviceQuota,
        bytes: u64,
        limit: u64,
        refused: Reservation,
    ) -> Reservation {
        if !self.made_room(api, device, bytes) {
            return refused;
        }
        // Not a refusal after all, if it fits now.
        quota.forgive_refusal();
        quota.reserve(bytes, limit, self.mode() == Mode::Enforce)
    }

    /// Observe mode allowed what the quota would have refused: said, and traced as a refusal
    /// marked observed, so that the trace and the report count what the log summary counts.
    /// Not an episode: the caller got its memory. Out of line, so that `reserve` (on the
    /// alloc path) stays small.
    #[cold]
    #[inline(never)]
    fn would_refuse(&self, device: u32, bytes: u64, api: &'static str, limit: u64, in_use: u64) {
        let parts = self.parts_of(device);
        crate::log::line(&messages::would_refuse(
            device, bytes, api, limit, in_use, &parts,
        ));
        self.emit(Event::observed_refusal(device, api, bytes, in_use));
    }

    /// Refused over quota: explain, and remember it for the back-off line.
    fn refused(&self, device: u32, bytes: u64, api: &'static str, limit: u64, in_use: u64) {
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
    fn episode_refusal(&self, device: u32, bytes: u64, api: &'static str) -> bool {
        let refusal = episodes::refused(device, bytes, api);
        self.episodes_ended(refusal.ended);
        refusal.opened || self.config.as_ref().is_ok_and(|c| c.debug())
    }

    /// Episodes that ended: their outcome lines, and the trace's `backoff` events. Cold and
    /// out of line: `committed` (the alloc path) only calls it when an episode was open.
    #[cold]
    #[inline(never)]
    fn episodes_ended(&self, ended: Vec<episodes::Ended>) {
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
    fn driver_failed(
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

    // Inline: its frame cost more than its work on the plain allocation's path.
    #[inline(always)]
    fn committed(
        &self,
        api: &'static str,
        kind: Kind,
        key: u64,
        quota: &DeviceQuota,
        charge: Charge,
    ) {
        let (device, bytes) = (charge.device, charge.bytes);
        let held = quota.commit(bytes);
        if let Some(stale) = self.ledger(kind).insert(key, charge) {
            self.released_stale(key, stale);
        }
        if self.tracing {
            self.emit(Event::alloc(device, api, key, bytes, held));
        }
        if let Some(ended) = episodes::allocated(device, bytes, key, api) {
            self.episodes_ended(ended);
        }
    }

    /// Appends a trace event; the trace module starts the trace at the first one.
    fn emit(&self, event: Event) {
        if self.tracing {
            trace::emit(event, || self.trace_header());
        }
    }

    /// What the trace header needs: the template, the mode, and every device the driver
    /// names with its quota (none before `cuInit`: the trace then holds its events back).
    fn trace_header(&self) -> (&std::ffi::OsStr, trace::StartInfo) {
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

    /// After `fork()`, in the child. It starts afresh: the parent's allocations are not its
    /// own (CUDA does not carry a context across fork), no lock is held, no quota is used.
    ///
    /// # Safety
    /// Only in the child right after `fork()`, while it has one thread.
    pub unsafe fn reset_in_child(&self) {
        for ledger in &self.ledgers {
            // SAFETY: the caller's promise: the child of a fork, with one thread.
            unsafe { ledger.reset_in_child() };
        }
        // SAFETY: as above.
        unsafe { self.pools.reset_in_child(HashMap::new()) };
        // SAFETY: as above.
        unsafe { self.array_sizes.reset_in_child(HashMap::new()) };
        // SAFETY: as above.
        unsafe { self.vmm.reset_in_child(VmmBooks::new()) };
        // SAFETY: as above.
        unsafe {
            self.pool_books
                .reset_in_child(pool_cache::PoolBooks::default())
        };
        // SAFETY: as above.
        unsafe { self.contexts.reset_in_child() };
        // SAFETY: as above.
        unsafe { self.attached.reset_in_child(HashMap::new()) };
        // SAFETY: as above.
        unsafe { self.ending.reset_in_child(Ending::new()) };
        // SAFETY: as above.
        unsafe {
            self.graph_books
                .reset_in_child(graph_memory::GraphBooks::new())
        };
        for p in &self.primary {
            p.store(0, Relaxed);
        }
        for q in &self.quotas {
            q.reset();
        }
        // SAFETY: as above.
        unsafe { self.context_memory.reset_in_child() };
    }

    /// A free of `key`. Unknown keys go to the driver unchanged and its answer comes back
    /// unchanged. The entry leaves the ledger before the driver frees, so another thread
    /// that gets the same address right after cannot lose its entry to us.
    pub fn free(
        &self,
        api: &'static str,
        kind: Kind,
        key: u64,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
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
    fn traced_free(&self, api: &'static str, key: u64, charge: Charge) {
        if let Some(q) = self.quota(charge.device) {
            let held = q.held().saturating_sub(charge.bytes);
            self.emit(Event::free(charge.device, api, key, charge.bytes, held));
        }
    }

    /// The driver failed a free already traced: the allocation is held again, and its line
    /// says so (an `alloc` line through the free's entry point).
    #[cold]
    #[inline(never)]
    fn traced_free_failed(&self, api: &'static str, key: u64, charge: Charge) {
        if let Some(q) = self.quota(charge.device) {
            self.emit(Event::alloc(
                charge.device,
                api,
                key,
                charge.bytes,
                q.held(),
            ));
        }
    }

    /// `cuMemGetInfo`: (free, total) as the caller should see them, from the real ones.
    pub fn memory_info(&self, api: &'static str, real_free: u64, real_total: u64) -> (u64, u64) {
        let Some((device, quota)) = self.virtualized_device(Place::Current) else {
            return (real_free, real_total);
        };
        // What the pools keep may have gone back since (a synchronisation): read it again.
        self.refresh_pools(api, device);
        // NVML's figure for this process corrects the context part (after the other parts
        // are settled, rate-limited).
        self.correct_context_memory(api, device);
        let told = match self.limit(device, quota) {
            Ok(limit) if limit != UNLIMITED => (
                real_free.min(limit.saturating_sub(quota.in_use())),
                real_total.min(limit),
            ),
            _ => (real_free, real_total),
        };
        let real = (real_free, real_total);
        self.emit(Event::mem_info(device, api, told, real, quota.held()));
        told
    }

    /// `cuDeviceTotalMem`: the total the caller should see.
    pub fn total_memory(&self, device: u32, real_total: u64) -> u64 {
        match self.virtualized_device(Place::Device(device)) {
            Some((d, quota)) => match self.limit(d, quota) {
                Ok(limit) => real_total.min(limit),
                Err(_) => real_total,
            },
            None => real_total,
        }
    }

    fn virtualized_device(&self, place: Place) -> Option<(u32, &DeviceQuota)> {
        if !self.config.as_ref().is_ok_and(|c| c.virtualize) {
            return None;
        }
        let (device, _) = self.resolve_place(place).ok()??;
        Some((device, self.quota(device)?))
    }

    /// The exit summary: one line per device that saw an allocation or a refusal. It never
    /// waits for a lock.
    pub fn summary_lines(&self) -> Vec<String> {
        (0..MAX_DEVICES as u32)
            .filter_map(|d| {
                let q = self.quota(d)?;
                if !q.was_used() {
                    return None;
                }
                // The exit handler may run on a thread that holds a ledger lock (exit from a
                // signal handler inside a hook): a few tries each, never a wait.
                let live = self
                    .ledgers
                    .iter()
                    .map(|l| l.try_live_on(d, EXIT_LOCK_ATTEMPTS))
                    .try_fold((0, 0), |(n, b), l| l.map(|(n2, b2)| (n + n2, b + b2)));
                Some(messages::summary(d, &q.usage(), live))
            })
            .collect()
    }
}

// ---- The footprint's other parts -------------------------------------------------------
//
// With `CUQUOTA_COUNT=footprint` (the default) the quota bounds allocations plus each
// [`Part`]: what pools keep, graph memory, what contexts take. A part is charged into the
// same counter as allocations (so one compare-and-swap checks the whole footprint), kept
// apart to say where the room went, and traced as a `footprint` event at every change. With
// `CUQUOTA_COUNT=allocations` every call below does nothing.

/// A part's growth did not fit the quota (nothing was charged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartRefusal {
    /// What the quota held, the refused bytes not included.
    pub in_use: u64,
    pub limit: u64,
}

impl Engine {
    /// Whether the quota bounds the whole footprint (`CUQUOTA_COUNT=footprint`).
    pub fn counts_footprint(&self) -> bool {
        self.config
            .as_ref()
            .is_ok_and(|c| c.count == Count::Footprint)
    }

    /// Each part's bytes on `device` now.
    fn parts_of(&self, device: u32) -> messages::Parts {
        self.quota(device)
            .map_or([0; Part::ALL.len()], |q| q.parts())
    }

    /// Bytes of `part` charged on `device` now.
    pub fn part_total(&self, device: u32, part: Part) -> u64 {
        self.quota(device).map_or(0, |q| q.part(part))
    }

    /// `part` grows by `bytes` on `device`, if the quota has room (after trimming this
    /// process's unused pool and graph memory once). Refused: nothing is charged, the
    /// refusal is counted, and the caller undoes what the driver did and says so with
    /// [`Engine::part_refused`]. Observe mode charges it and says what would have been.
    pub fn part_grow(
        &self,
        api: &'static str,
        device: u32,
        part: Part,
        bytes: u64,
    ) -> Result<(), PartRefusal> {
        if !self.counts_footprint() || bytes == 0 {
            return Ok(());
        }
        let Some(quota) = self.quota(device) else {
            return Ok(());
        };
        let limit = self.limit(device, quota).unwrap_or(UNLIMITED);
        let enforce = self.mode() == Mode::Enforce;
        let mut reservation = quota.reserve(bytes, limit, enforce);
        if matches!(reservation, Reservation::Refused { .. }) && self.made_room(api, device, bytes)
        {
            quota.forgive_refusal();
            reservation = quota.reserve(bytes, limit, enforce);
        }
        match reservation {
            Reservation::Refused { in_use, limit } => return Err(PartRefusal { in_use, limit }),
            Reservation::Uncharged => return Ok(()),
            Reservation::Granted { .. } => {}
            Reservation::Allowed {
                in_use_before,
                limit,
            } => self.would_refuse(device, bytes, api, limit, in_use_before),
        }
        let held = quota.commit_part(part, bytes);
        self.emit(Event::footprint(device, api, part, quota.part(part), held));
        Ok(())
    }

    /// Explains a refused [`Engine::part_grow`] of `bytes`: one line, and a `refused` event.
    #[cold]
    pub fn part_refused(
        &self,
        api: &'static str,
        device: u32,
        part: Part,
        bytes: u64,
        refusal: PartRefusal,
    ) {
        let PartRefusal { in_use, limit } = refusal;
        let parts = self.parts_of(device);
        let line = match part {
            Part::Context => messages::context_refusal(device, bytes, api, limit, in_use, &parts),
            Part::Graph => messages::graph_refusal(device, bytes, api, limit, in_use, &parts),
            Part::PoolCache => messages::quota_refusal(device, bytes, api, limit, in_use, &parts),
        };
        crate::log::line(&line);
        self.emit(Event::refused_by_quota(device, api, bytes, in_use));
    }

    /// `part` grew by `bytes` that the driver already holds and cannot give back: charged
    /// whatever the quota.
    pub fn part_force(&self, api: &'static str, device: u32, part: Part, bytes: u64) {
        if !self.counts_footprint() || bytes == 0 {
            return;
        }
        if let Some(quota) = self.quota(device) {
            let held = quota.force_part(part, bytes);
            self.emit(Event::footprint(device, api, part, quota.part(part), held));
        }
    }

    /// `part` shrank by `bytes` (never below zero).
    pub fn part_shrink(&self, api: &'static str, device: u32, part: Part, bytes: u64) {
        let Some(quota) = self.quota(device) else {
            return;
        };
        if quota.release_part(part, bytes) > 0 {
            let held = quota.held();
            self.emit(Event::footprint(device, api, part, quota.part(part), held));
        }
    }

    /// `part` is `total` on `device` by the driver's own figure: charged (whatever the
    /// quota: the driver holds it) or given back to match.
    pub fn part_set(&self, api: &'static str, device: u32, part: Part, total: u64) {
        let now = self.part_total(device, part);
        if total > now {
            self.part_force(api, device, part, total - now);
        } else if total < now {
            self.part_shrink(api, device, part, now - total);
        }
    }

    /// A request of `wanted` bytes did not fit: trim this process's unused pool and graph
    /// memory on `device` once. True if that gave anything back.
    #[cold]
    #[inline(never)]
    fn made_room(&self, api: &'static str, device: u32, wanted: u64) -> bool {
        if !self.counts_footprint() {
            return false;
        }
        let released =
            self.trim_pools(api, device, wanted) + self.trim_graph_memory(api, device, wanted);
        released > 0
    }

    /// cuquota's own trim of `part` on `device` gave `released` bytes back (already
    /// shrunk from the part): counted for the summary, traced, said at info.
    pub fn trimmed(&self, api: &'static str, device: u32, part: Part, released: u64, wanted: u64) {
        let Some(quota) = self.quota(device) else {
            return;
        };
        quota.count_trim(released);
        self.emit(Event::trim(device, api, part, released, quota.held()));
        if self.config.as_ref().is_ok_and(|c| c.verbose()) {
            crate::log::line(&messages::trimmed(device, part, released, wanted, api));
        }
    }
}

// ---- VMM lifetimes and imports ---------------------------------------------------------
//
// A `cuMemCreate` allocation is charged (in the handle ledger) until its last reference is
// released and its last mapping unmapped; `VmmBooks` says when that is. As in `free`, what a
// call would end leaves the ledger before the driver is called and comes back if it fails.
// Imports are never charged: the exporting process pays.

impl Engine {
    /// `cuMemCreate` succeeded (charged or not): its handle has one reference.
    pub fn vmm_created(&self, handle: u64) {
        self.vmm.lock().created(handle);
    }

    /// `cuMemRelease`.
    pub fn vmm_release(
        &self,
        api: &'static str,
        handle: u64,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        let taken = {
            let mut books = self.vmm.lock();
            match books.release(handle) {
                Some(true) => self.take_handles(&[handle]),
                Some(false) => Vec::new(),
                // Ours, with no reference left (released, still mapped): the driver's to
                // refuse, and it ends nothing.
                None if books.knows(handle) => {
                    drop(books);
                    return call();
                }
                None => {
                    drop(books);
                    // Not in the books: whatever the ledger has under it goes as before.
                    return self.free(api, Kind::Handle, handle, call);
                }
            }
        };
        let rc = call();
        if rc.is_ok() {
            self.credit_all(api, taken);
        } else {
            self.vmm.lock().add_ref(handle);
            self.restore(taken);
        }
        rc
    }

    /// `cuMemMap(base, size, .., handle, ..)`.
    pub fn vmm_map(
        &self,
        api: &'static str,
        base: u64,
        size: u64,
        handle: u64,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        let ours = self.vmm.lock().map_begin(handle);
        let rc = call();
        let taken = {
            let mut books = self.vmm.lock();
            if rc.is_ok() {
                let stale = books.map_done(base, size, handle, ours);
                self.take_handles(&stale)
            } else if ours && books.map_failed(handle) {
                self.take_handles(&[handle])
            } else {
                Vec::new()
            }
        };
        self.credit_all(api, taken);
        rc
    }

    /// `cuMemUnmap(base, size)`, and `cuMemAddressFree` of a reservation: every mapping
    /// inside the range ends.
    pub fn vmm_unmap(
        &self,
        api: &'static str,
        base: u64,
        size: u64,
        call: impl FnOnce() -> CuResult,
    ) -> CuResult {
        let (unmapped, taken) = {
            let mut books = self.vmm.lock();
            let unmapped = books.unmap_begin(base, size);
            let taken = self.take_handles(&unmapped.ended);
            (unmapped, taken)
        };
        let rc = call();
        if rc.is_ok() {
            self.credit_all(api, taken);
        } else {
            self.restore(taken);
            self.vmm.lock().unmap_undo(unmapped);
        }
        rc
    }

    /// `cuMemRetainAllocationHandle(.., address)`; `call` returns the handle it gave.
    pub fn vmm_retain(
        &self,
        api: &'static str,
        address: u64,
        call: impl FnOnce() -> (CuResult, u64),
    ) -> CuResult {
        let counted = self.vmm.lock().retain_begin(address);
        let (rc, got) = call();
        let taken = {
            let mut books = self.vmm.lock();
            let mut ended = Vec::new();
            match counted {
                Some(h) if rc.is_ok() && h == got => {}
                Some(h) => {
                    if books.retain_failed(h) {
                        ended.push(h);
                    }
                    if rc.is_ok() {
                        books.retained(got);
                    }
                }
                None if rc.is_ok() => books.retained(got),
                None => {}
            }
            self.take_handles(&ended)
        };
        self.credit_all(api, taken);
        rc
    }

    /// `cuMemImportFromShareableHandle` gave `handle`: another process's memory, never
    /// charged here. An entry of ours under that value is stale (the driver reused it).
    pub fn imported_handle(&self, api: &'static str, handle: u64) {
        self.vmm.lock().forget(handle);
        let stale = self.take_handles(&[handle]);
        self.credit_all(api, stale);
    }

    /// An import gave device pointer `ptr` (IPC, a pool's exported pointer, external
    /// memory): never charged, so its free credits nothing. An entry under that address is
    /// stale (the driver reused it) and is given back now, so no later free of the import
    /// can credit it.
    pub fn imported_pointer(&self, api: &'static str, ptr: u64) {
        if let Some(stale) = self.ledger(Kind::Pointer).remove(ptr) {
            self.credit(api, ptr, stale);
        }
    }

    /// Takes the charges of ended handles out of the handle ledger (host memory has none).
    fn take_handles(&self, ended: &[u64]) -> Vec<(u64, Charge)> {
        let ledger = self.ledger(Kind::Handle);
        ended
            .iter()
            .filter_map(|&h| ledger.remove(h).map(|c| (h, c)))
            .collect()
    }

    fn restore(&self, taken: Vec<(u64, Charge)>) {
        for (h, c) in taken {
            self.ledger(Kind::Handle).insert(h, c);
        }
    }

    fn credit_all(&self, api: &'static str, taken: Vec<(u64, Charge)>) {
        for (key, charge) in taken {
            self.credit(api, key, charge);
        }
    }

    /// Gives a charge back that the driver no longer holds.
    fn credit(&self, api: &'static str, key: u64, charge: Charge) {
        if let Some(q) = self.quota(charge.device) {
            let in_use = q.release(charge.bytes);
            if self.tracing {
                self.emit(Event::free(charge.device, api, key, charge.bytes, in_use));
            }
        }
    }
}

// ---- context memory (issue 11) -----------------------------------------------------------
//
// The rules are `context_memory`'s; here they meet the driver's answers (`Queries`) and the
// footprint's context part. A context that does not fit is undone by the caller's closure
// (destroyed, released) and refused with one line.

/// `CUQUOTA_CONTEXT` as context memory reads it.
fn context_setting(config: &Result<Config, ConfigError>) -> Setting {
    Setting::from_config(config.as_ref().ok().and_then(|c| c.context))
}

/// The driver and NVML, as context memory measures with them.
struct Meters<'a>(&'a dyn Queries);

impl context_memory::Meter for Meters<'_> {
    fn nvml_free(&self, device: u32) -> Option<u64> {
        self.0.nvml_free(device)
    }
    fn driver_free(&self) -> Option<u64> {
        self.0.memory_info().ok().map(|(free, _)| free)
    }
    fn used_by_process(&self, device: u32) -> Option<u64> {
        self.0.used_by_process(device)
    }
}

/// The footprint's context part, charged through `api`; keeps the last refusal for its
/// line.
struct ContextPart<'a> {
    engine: &'a Engine,
    api: &'static str,
    refusal: std::cell::Cell<Option<PartRefusal>>,
}

impl context_memory::Books for ContextPart<'_> {
    fn grow(&self, device: u32, bytes: u64) -> Result<(), context_memory::OverQuota> {
        let grown = self
            .engine
            .part_grow(self.api, device, Part::Context, bytes);
        grown.map_err(|refusal| {
            self.refusal.set(Some(refusal));
            context_memory::OverQuota
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
    fn counts_context(&self) -> bool {
        self.counts_footprint() && self.context_memory.setting.counts()
    }

    fn context_part(&self, api: &'static str) -> ContextPart<'_> {
        ContextPart {
            engine: self,
            api,
            refusal: std::cell::Cell::new(None),
        }
    }

    /// At `info`, once: NVML is not there, so contexts are not measured.
    fn say_nvml_absence(&self) {
        if let Some(why) = self.queries.nvml_absence() {
            if self.config.as_ref().is_ok_and(|c| c.verbose()) {
                crate::log::line(&messages::nvml_absent(&why));
            }
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
    fn context_made(
        &self,
        api: &'static str,
        device: i32,
        is_new: impl FnOnce() -> bool,
        create: impl FnOnce() -> (CuResult, usize),
        undo: impl FnOnce(usize),
        forget_undone: bool,
    ) -> CuResult {
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
    fn growth_refused(&self, part: &ContextPart<'_>, device: u32, bytes: u64) {
        let Some(PartRefusal { in_use, limit }) = part.refusal.get() else {
            return;
        };
        let parts = self.parts_of(device);
        let api = part.api;
        let line = messages::quota_refusal(device, bytes, api, limit, in_use, &parts);
        crate::log::line(&line);
        self.emit(Event::refused_by_quota(device, api, bytes, in_use));
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
        if !self.counts_context() {
            return call().0;
        }
        let Ok((device, slot)) = self.current() else {
            return call().0;
        };
        let meters = Meters(&*self.queries);
        let part = self.context_part(api);
        let free = || context_memory::Meter::driver_free(&meters);
        let Measured { rc, value, growth } = self.context_memory.measure(device, free, &part, call);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda_abi::{CUDA_ARRAY3D_DEFERRED_MAPPING, CUDA_ARRAY3D_SPARSE};
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;

    /// A pretend driver: one current device per test, 8 GiB cards.
    struct Fake {
        device: AtomicU32,
        free: AtomicU64,
    }

    impl Queries for Arc<Fake> {
        fn current_device(&self) -> Result<u32, CuResult> {
            match self.device.load(Relaxed) {
                u32::MAX => Err(CuResult::INVALID_CONTEXT),
                d => Ok(d),
            }
        }
        /// Context handles are `0x1000 + device` (one per device); none is 0.
        fn current_context(&self) -> usize {
            match self.device.load(Relaxed) {
                u32::MAX => 0,
                d => 0x1000 + d as usize,
            }
        }
        fn context_device(&self, context: usize) -> Result<u32, CuResult> {
            Ok((context - 0x1000) as u32)
        }
        /// Stream handles are `0x10_000 + context`.
        fn stream_context(&self, stream: usize) -> Result<usize, CuResult> {
            Ok(stream - 0x10_000)
        }
        fn total_memory(&self, _device: u32) -> Result<u64, CuResult> {
            Ok(8 << 30)
        }
        fn memory_info(&self) -> Result<(u64, u64), CuResult> {
            Ok((self.free.load(Relaxed), 8 << 30))
        }
    }

    fn engine(limit: &str) -> (Engine, Arc<Fake>) {
        // Refusal lines from these tests are not wanted on the test output.
        crate::log::configure(&crate::config::LogTarget::Off);
        let fake = Arc::new(Fake {
            device: AtomicU32::new(0),
            free: AtomicU64::new(8 << 30),
        });
        let limit = limit.to_string();
        let config = Config::from_vars(|k| match k {
            "CUQUOTA_LIMIT" => Some(limit.clone()),
            "CUQUOTA_LOG" => Some("off".into()),
            _ => None,
        });
        (Engine::new(config, Box::new(fake.clone())), fake)
    }

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn every_kind_has_its_ledger() {
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, i, "Kind::ALL is in discriminant order");
        }
    }

    #[test]
    fn parts_share_the_quota_with_allocations() {
        let (e, _) = engine("1GiB");
        assert!(e.counts_footprint());
        assert_eq!(e.part_grow("ctx", 0, Part::Context, 256 * MIB), Ok(()));
        let ok = || (CuResult::SUCCESS, 0x1000);
        assert_eq!(
            e.alloc("a", Kind::Pointer, Place::Current, 768 * MIB, ok),
            CuResult::SUCCESS
        );
        assert_eq!(
            e.part_grow("ctx", 0, Part::Context, 1),
            Err(PartRefusal {
                in_use: GIB,
                limit: GIB
            })
        );
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (0, GIB));
        e.part_force("load", 0, Part::Context, MIB);
        assert_eq!(e.part_total(0, Part::Context), 257 * MIB);
        e.part_set("sync", 0, Part::Context, 200 * MIB);
        assert_eq!(e.part_total(0, Part::Context), 200 * MIB);
        e.part_shrink("destroy", 0, Part::Context, u64::MAX);
        assert_eq!(e.part_total(0, Part::Context), 0);
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (256 * MIB, GIB));
        let usage = e.quota(0).unwrap().usage();
        assert_eq!(
            (usage.part_peaks[Part::Context as usize], usage.refusals),
            (257 * MIB, 1)
        );
    }

    #[test]
    fn counting_allocations_leaves_the_parts_out() {
        crate::log::configure(&crate::config::LogTarget::Off);
        let fake = Arc::new(Fake {
            device: AtomicU32::new(0),
            free: AtomicU64::new(8 << 30),
        });
        let config = Config::from_vars(|k| match k {
            "CUQUOTA_LIMIT" => Some("1GiB".into()),
            "CUQUOTA_COUNT" => Some("allocations".into()),
            _ => None,
        });
        let e = Engine::new(config, Box::new(fake));
        assert!(!e.counts_footprint());
        assert_eq!(e.part_grow("ctx", 0, Part::Context, 2 * GIB), Ok(()));
        e.part_force("ctx", 0, Part::Context, 2 * GIB);
        assert_eq!(e.part_total(0, Part::Context), 0);
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (GIB, GIB));
    }

    #[test]
    fn quota_refuses_and_free_gives_room_back() {
        let (e, _) = engine("1GiB");
        let ok = |p: u64| move || (CuResult::SUCCESS, p);
        for i in 0..4 {
            assert_eq!(
                e.alloc(
                    "a",
                    Kind::Pointer,
                    Place::Current,
                    256 * MIB,
                    ok(0x1000 * (i + 1))
                ),
                CuResult::SUCCESS
            );
        }
        let mut called = false;
        let rc = e.alloc("a", Kind::Pointer, Place::Current, 1, || {
            called = true;
            (CuResult::SUCCESS, 0x9000)
        });
        assert_eq!(rc, CuResult::OUT_OF_MEMORY);
        assert!(!called, "a refused request never reaches the driver");
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (0, 1 << 30));
        assert_eq!(
            e.free("f", Kind::Pointer, 0x1000, || CuResult::SUCCESS),
            CuResult::SUCCESS
        );
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (256 * MIB, 1 << 30));
        assert_eq!(e.total_memory(0, 8 << 30), 1 << 30);
    }

    #[test]
    fn driver_failure_rolls_back_and_passes_the_code_through() {
        let (e, _) = engine("1GiB");
        for code in [2, 1, 3, 12345] {
            let rc = e.alloc("a", Kind::Pointer, Place::Current, 1 << 30, || {
                (CuResult(code), 0)
            });
            assert_eq!(rc, CuResult(code));
        }
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (1 << 30, 1 << 30));
        assert_eq!(
            e.alloc("a", Kind::Pointer, Place::Current, 1 << 30, || (
                CuResult::SUCCESS,
                0x10
            )),
            CuResult::SUCCESS
        );
        // a failing free keeps the charge; an unknown pointer goes through untouched
        assert_eq!(
            e.free("f", Kind::Pointer, 0x10, || CuResult(999)),
            CuResult(999)
        );
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, 0);
        assert_eq!(
            e.free("f", Kind::Pointer, 0x1234, || CuResult(1)),
            CuResult(1)
        );
        assert_eq!(
            e.free("f", Kind::Pointer, 0x10, || CuResult::SUCCESS),
            CuResult::SUCCESS
        );
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, 1 << 30);
    }

    #[test]
    fn pitch_charges_what_the_driver_gave() {
        let (e, _) = engine("1MiB");
        // 1000 × 1000 fits as an estimate; the driver's pitch of 1024 makes it 1024000 ≤ 1 MiB
        let rc = e.alloc_pitch(
            "p",
            1000,
            1000,
            || (CuResult::SUCCESS, 0x100, 1024),
            |_| panic!("no undo"),
        );
        assert_eq!(rc, CuResult::SUCCESS);
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB - 1_024_000);
        assert_eq!(
            e.free("f", Kind::Pointer, 0x100, || CuResult::SUCCESS),
            CuResult::SUCCESS
        );
        // 1040 × 1000 = 1040000 fits the estimate, but a 1536-byte pitch does not: undone
        let mut undone = 0;
        let rc = e.alloc_pitch(
            "p",
            1040,
            1000,
            || (CuResult::SUCCESS, 0x200, 1536),
            |p| undone = p,
        );
        assert_eq!((rc, undone), (CuResult::OUT_OF_MEMORY, 0x200));
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB);
    }

    #[test]
    fn arrays_settle_to_the_drivers_size_which_is_remembered_per_shape() {
        let (e, _) = engine("2MiB");
        let shape = |w: u64, flags: u32| ArrayShape {
            width: w,
            height: 1000,
            depth: 0,
            format: 1,
            channels: 1,
            flags,
            levels: 1,
        };
        let asked = std::cell::Cell::new(0);
        let truth = |bytes: u64| {
            let asked = &asked;
            move |_device: u32| {
                asked.set(asked.get() + 1);
                Some(bytes)
            }
        };
        let no_undo = |_| panic!("no undo");
        // 1 000 000 estimated, 1 MiB true: settled up
        let ok = |p: u64| move || (CuResult::SUCCESS, p);
        let rc = e.alloc_array("a", shape(1000, 0), ok(0x10), truth(MIB), no_undo);
        assert_eq!((rc, asked.get()), (CuResult::SUCCESS, 1));
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB);
        // the same shape again: reserved at its true size at once, the driver not asked
        let rc = e.alloc_array("a", shape(1000, 0), ok(0x20), truth(0), no_undo);
        assert_eq!((rc, asked.get()), (CuResult::SUCCESS, 1));
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, 0);
        e.free("f", Kind::Array, 0x20, || CuResult::SUCCESS);
        // 1 040 000 estimated fits the 1 MiB left, 1.5 MiB true does not: destroyed, refused
        let mut undone = 0;
        let big = shape(1040, 0);
        let rc = e.alloc_array("a", big, ok(0x30), truth(3 * MIB / 2), |a| undone = a);
        assert_eq!((rc, undone), (CuResult::OUT_OF_MEMORY, 0x30));
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB);
        // now known: refused before the driver is called
        let rc = e.alloc_array("a", big, || panic!("not called"), truth(0), no_undo);
        assert_eq!(rc, CuResult::OUT_OF_MEMORY);
        // deferred-mapping and sparse arrays are not charged, whatever their size
        for flags in [CUDA_ARRAY3D_DEFERRED_MAPPING, CUDA_ARRAY3D_SPARSE] {
            let rc = e.alloc_array("a", shape(1 << 30, flags), ok(0x40), truth(0), no_undo);
            assert_eq!(rc, CuResult::SUCCESS);
        }
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB);
        // a driver that cannot say: the estimate is charged; destroy credits it
        let rc = e.alloc_array("a", shape(10, 0), ok(0x50), |_| None, no_undo);
        assert_eq!(rc, CuResult::SUCCESS);
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, MIB - 10_000);
        e.free("f", Kind::Array, 0x50, || CuResult::SUCCESS);
        e.free("f", Kind::Array, 0x10, || CuResult::SUCCESS);
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, 2 * MIB);
    }

    #[test]
    fn devices_places_and_percentages() {
        let (e, fake) = engine("0:1GiB,1:25%");
        assert_eq!(e.total_memory(1, 8 << 30), 2 << 30);
        assert_eq!(
            e.total_memory(2, 8 << 30),
            8 << 30,
            "unnamed devices are unlimited"
        );
        // cuMemCreate on device 1 from a thread without a context
        fake.device.store(u32::MAX, Relaxed);
        assert_eq!(
            e.alloc("c", Kind::Handle, Place::Device(1), 2 << 30, || (
                CuResult::SUCCESS,
                7
            )),
            CuResult::SUCCESS
        );
        assert_eq!(
            e.alloc("c", Kind::Handle, Place::Device(1), 1, || (
                CuResult::SUCCESS,
                8
            )),
            CuResult::OUT_OF_MEMORY
        );
        // host memory is not charged; no context means nothing to charge
        assert_eq!(
            e.alloc("c", Kind::Handle, Place::Uncharged, 1 << 40, || (
                CuResult::SUCCESS,
                9
            )),
            CuResult::SUCCESS
        );
        assert_eq!(
            e.alloc("a", Kind::Pointer, Place::Current, 1, || (
                CuResult::INVALID_CONTEXT,
                0
            )),
            CuResult::INVALID_CONTEXT
        );
        assert_eq!(
            e.free("f", Kind::Handle, 7, || CuResult::SUCCESS),
            CuResult::SUCCESS
        );
        fake.device.store(1, Relaxed);
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (2 << 30, 2 << 30));
        // pools remember their location; an unknown pool lands on the stream's device
        e.pool_located(0xabc, PoolPlace::Device(0));
        e.pool_located(0xdef, PoolPlace::Host);
        assert_eq!(
            e.pool_place(0xabc, 7),
            Place::Pool {
                device: 0,
                stream: 7
            }
        );
        assert_eq!(e.pool_place(0xdef, 7), Place::Uncharged);
        assert_eq!(e.pool_place(0x123, 7), Place::Stream(7));
        e.pool_destroyed(0xabc);
        assert_eq!(e.pool_place(0xabc, 7), Place::Stream(7));
    }

    /// A stream's context's device, whatever is current; no context: the driver answers.
    #[test]
    fn streams_and_pools_place_on_their_device() {
        let (e, fake) = engine("0:1GiB,1:1GiB");
        let gpu1_stream = 0x10_000 + 0x1001;
        let ok = |p: u64| move || (CuResult::SUCCESS, p);
        // GPU 0 current, GPU 1's stream: charged on GPU 1
        let rc = e.alloc(
            "a",
            Kind::Pointer,
            Place::Stream(gpu1_stream),
            GIB,
            ok(0x10),
        );
        assert_eq!(rc, CuResult::SUCCESS);
        assert_eq!(e.quota(1).unwrap().held(), GIB);
        assert_eq!(e.quota(0).unwrap().held(), 0);
        // the default streams mean the current context
        for s in [0, 1, 2] {
            assert_eq!(
                e.alloc("a", Kind::Pointer, Place::Stream(s), 1, ok(0x20 + s as u64)),
                CuResult::SUCCESS
            );
        }
        assert_eq!(e.quota(0).unwrap().held(), 3);
        // no current context: a pool of GPU 1 on GPU 1's stream is charged there; the
        // default stream cannot be placed and the driver's answer comes back, uncharged
        fake.device.store(u32::MAX, Relaxed);
        e.pool_located(0x9002, PoolPlace::Device(1));
        let place = e.pool_place(0x9002, gpu1_stream);
        assert_eq!(
            e.alloc("p", Kind::Pointer, place, 1, ok(0x40)),
            CuResult::OUT_OF_MEMORY
        );
        for (rc, key) in [(CuResult::SUCCESS, 0x50), (CuResult::INVALID_CONTEXT, 0)] {
            assert_eq!(
                e.alloc("a", Kind::Pointer, Place::Stream(0), 1, || (rc, key)),
                rc,
                "the driver's own answer"
            );
        }
        assert_eq!(e.quota(0).unwrap().held(), 3);
    }

    /// The driver frees a context's memory before cuquota credits it and may give an
    /// address out again at once: the stale entry another context's allocation finds there
    /// is given back and kept for the ending context's event, once.
    #[test]
    fn an_address_given_out_again_while_its_context_ends_stays_the_contexts() {
        let (e, fake) = engine("1GiB");
        let ok = |p: u64| move || (CuResult::SUCCESS, p);
        e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x100)); // context 0x1000
        let slot = e.context_ending("d", 0x1000);
        assert_ne!(slot, NO_CONTEXT);
        fake.device.store(1, Relaxed); // another thread, context 0x1001, gets 0x100
        e.alloc("a", Kind::Pointer, Place::Current, 2 * MIB, ok(0x100));
        assert_eq!(e.ending.lock().stolen, [(slot, 0x100, MIB)]);
        assert_eq!(e.quota(0).unwrap().held(), 0, "given back at once");
        e.context_destroyed("d", 0x1000);
        e.context_end_done(slot);
        let ending = e.ending.lock();
        assert!(ending.stolen.is_empty() && ending.slots.is_empty());
        drop(ending);
        assert_eq!(e.quota(1).unwrap().held(), 2 * MIB, "the new one stays");
        // not ending: a stale entry is only given back
        e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x300));
        fake.device.store(0, Relaxed);
        e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x300));
        assert!(e.ending.lock().stolen.is_empty());
        assert_eq!(e.quota(1).unwrap().held(), 2 * MIB);
    }

    /// Destroying or resetting a context credits every kind it owns, nothing else.
    #[test]
    fn a_context_takes_its_charges_with_it() {
        let (e, fake) = engine("0:1GiB,1:1GiB");
        let ok = |p: u64| move || (CuResult::SUCCESS, p);
        e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x100));
        e.alloc("c", Kind::Handle, Place::Device(0), MIB, ok(0x200));
        e.pool_located(0x9001, PoolPlace::Device(1));
        // GPU 0's context allocates from GPU 1's pool: GPU 1 pays, GPU 0's context owns it
        let place = e.pool_place(0x9001, 0);
        e.alloc("p", Kind::Pointer, place, MIB, ok(0x300));
        fake.device.store(1, Relaxed);
        e.alloc("a", Kind::Pointer, Place::Current, MIB, ok(0x400));
        assert_eq!(e.quota(1).unwrap().held(), 2 * MIB);
        e.context_destroyed("d", 0x1000);
        assert_eq!(
            e.quota(0).unwrap().held(),
            MIB,
            "the handle belongs to the process"
        );
        assert_eq!(
            e.quota(1).unwrap().held(),
            MIB,
            "GPU 1's own context keeps its own"
        );
        assert_eq!(
            e.free("f", Kind::Pointer, 0x100, || CuResult(1)),
            CuResult(1)
        );
        // primary contexts: a reset credits the retained one's charges
        e.primary_retained(1, 0x1001);
        e.primary_gone("r", 1);
        assert_eq!(e.quota(1).unwrap().held(), 0);
        e.primary_gone("r", 5); // never retained: nothing
        assert_eq!(e.quota(0).unwrap().held(), MIB);
    }

    #[test]
    fn the_summary_peak_is_what_was_held() {
        let (e, _) = engine("1GiB");
        // a 512 MiB request in flight, refused by the driver, while 4 KiB commits
        let rc = e.alloc("a", Kind::Pointer, Place::Current, 512 * MIB, || {
            let inner = e.alloc("a", Kind::Pointer, Place::Current, 4096, || {
                (CuResult::SUCCESS, 0x10)
            });
            assert_eq!(inner, CuResult::SUCCESS);
            (CuResult::OUT_OF_MEMORY, 0)
        });
        assert_eq!(rc, CuResult::OUT_OF_MEMORY);
        assert_eq!(e.quota(0).unwrap().usage().peak, 4096);
    }

    #[test]
    fn observe_mode_allows_and_bad_config_fails_closed() {
        let fake = Arc::new(Fake {
            device: AtomicU32::new(0),
            free: AtomicU64::new(8 << 30),
        });
        let observe = Config::from_vars(|k| match k {
            "CUQUOTA_LIMIT" => Some("1KiB".into()),
            "CUQUOTA_MODE" => Some("observe".into()),
            "CUQUOTA_LOG" => Some("off".into()),
            _ => None,
        });
        let e = Engine::new(observe, Box::new(fake.clone()));
        assert_eq!(
            e.alloc("a", Kind::Pointer, Place::Current, 4096, || (
                CuResult::SUCCESS,
                1
            )),
            CuResult::SUCCESS
        );
        assert_eq!(e.memory_info("m", 8 << 30, 8 << 30), (0, 1024));
        let bad = Engine::new(
            Config::from_vars(|k| (k == "CUQUOTA_LIMIT").then(|| "6GBB".into())),
            Box::new(fake),
        );
        assert_eq!(bad.check_config(), Err(CuResult::INVALID_VALUE));
    }

    #[test]
    fn exact_under_threads() {
        let (e, _) = engine("64MiB");
        let e = Arc::new(e);
        let next = Arc::new(AtomicU64::new(1));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (e, next) = (e.clone(), next.clone());
                std::thread::spawn(move || {
                    let mut live = Vec::new();
                    for _ in 0..5000 {
                        let p = next.fetch_add(1, Relaxed) << 12;
                        if e.alloc("a", Kind::Pointer, Place::Current, 4 * MIB, || {
                            (CuResult::SUCCESS, p)
                        })
                        .is_ok()
                        {
                            live.push(p);
                        }
                        assert!(e.quota(0).unwrap().in_use() <= 64 * MIB);
                        if live.len() == 4 {
                            e.free("f", Kind::Pointer, live.remove(0), || CuResult::SUCCESS);
                        }
                    }
                    for p in live {
                        e.free("f", Kind::Pointer, p, || CuResult::SUCCESS);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let u = e.quota(0).unwrap().usage();
        assert_eq!(u.in_use, 0);
        assert_eq!(e.ledger(Kind::Pointer).live_on(0), (0, 0));
        assert!(u.peak <= 64 * MIB);
    }

    // ---- VMM lifetimes and imports ----

    fn create(e: &Engine, handle: u64, bytes: u64) -> CuResult {
        let rc = e.alloc("c", Kind::Handle, Place::Device(0), bytes, || {
            (CuResult::SUCCESS, handle)
        });
        if rc.is_ok() {
            e.vmm_created(handle);
        }
        rc
    }

    fn free_bytes(e: &Engine) -> u64 {
        e.memory_info("m", 8 << 30, 8 << 30).0
    }

    #[test]
    fn vmm_memory_stays_charged_while_mapped() {
        let (e, _) = engine("1GiB");
        let ok = || CuResult::SUCCESS;
        // the samples' pattern: create, map, release
        for (h, base) in [(1, 0x1000_0000), (2, 0x4000_0000)] {
            assert_eq!(create(&e, h, 512 * MIB), CuResult::SUCCESS);
            assert_eq!(e.vmm_map("m", base, 512 * MIB, h, ok), CuResult::SUCCESS);
            assert_eq!(e.vmm_release("r", h, ok), CuResult::SUCCESS);
        }
        assert_eq!(free_bytes(&e), 0, "released but mapped: still charged");
        assert_eq!(create(&e, 3, 512 * MIB), CuResult::OUT_OF_MEMORY);
        // retain + release around the unmap (NCCL's free path)
        let got = e.vmm_retain("t", 0x1000_0000 + 4096, || (CuResult::SUCCESS, 1));
        assert_eq!(got, CuResult::SUCCESS);
        assert_eq!(e.vmm_release("r", 1, ok), CuResult::SUCCESS);
        assert_eq!(free_bytes(&e), 0, "mapped memory is not credited");
        // a failed unmap keeps everything
        let failed = e.vmm_unmap("u", 0x1000_0000, 512 * MIB, || CuResult::INVALID_VALUE);
        assert_eq!(failed, CuResult::INVALID_VALUE);
        assert_eq!(free_bytes(&e), 0);
        assert_eq!(
            e.vmm_unmap("u", 0x1000_0000, 512 * MIB, ok),
            CuResult::SUCCESS
        );
        assert_eq!(free_bytes(&e), 512 * MIB, "the last unmap credits");
        // unmap first, then the release credits, once
        assert_eq!(create(&e, 3, 512 * MIB), CuResult::SUCCESS);
        assert_eq!(
            e.vmm_map("m", 0x7000_0000, 512 * MIB, 3, ok),
            CuResult::SUCCESS
        );
        assert_eq!(
            e.vmm_unmap("u", 0x7000_0000, 512 * MIB, ok),
            CuResult::SUCCESS
        );
        assert_eq!(free_bytes(&e), 0);
        assert_eq!(e.vmm_release("r", 3, ok), CuResult::SUCCESS);
        assert_eq!(free_bytes(&e), 512 * MIB);
        // released but mapped: a second release ends nothing, whatever the driver says
        assert_eq!(create(&e, 9, 2 * MIB), CuResult::SUCCESS);
        assert_eq!(
            e.vmm_map("m", 0xa000_0000, 2 * MIB, 9, ok),
            CuResult::SUCCESS
        );
        assert_eq!(e.vmm_release("r", 9, ok), CuResult::SUCCESS);
        assert_eq!(e.vmm_release("r", 9, ok), CuResult::SUCCESS);
        assert_eq!(free_bytes(&e), 510 * MIB);
        assert_eq!(
            e.vmm_unmap("u", 0xa000_0000, 2 * MIB, ok),
            CuResult::SUCCESS
        );
        assert_eq!(free_bytes(&e), 512 * MIB);
        let again = e.vmm_release("r", 3, || CuResult::INVALID_VALUE);
        assert_eq!(again, CuResult::INVALID_VALUE);
        assert_eq!(free_bytes(&e), 512 * MIB, "credited exactly once");
        // a failed release keeps the reference
        assert_eq!(create(&e, 4, 256 * MIB), CuResult::SUCCESS);
        assert_eq!(e.vmm_release("r", 4, || CuResult(999)), CuResult(999));
        assert_eq!(free_bytes(&e), 256 * MIB);
        assert_eq!(e.vmm_release("r", 4, ok), CuResult::SUCCESS);
        assert_eq!(free_bytes(&e), 512 * MIB);
        assert_eq!(e.ledger(Kind::Handle).live_on(0), (1, 512 * MIB));
    }

    #[test]
    fn imports_are_not_charged_and_drop_stale_entries() {
        let (e, _) = engine("1GiB");
        let ok = || CuResult::SUCCESS;
        // an imported handle: mapping, retaining, unmapping and releasing it credit nothing
        assert_eq!(create(&e, 1, 256 * MIB), CuResult::SUCCESS);
        e.imported_handle("i", 0x77);
        assert_eq!(
            e.vmm_map("m", 0x1000_0000, 64 * MIB, 0x77, ok),
            CuResult::SUCCESS
        );
        assert_eq!(
            e.vmm_retain("t", 0x1000_0000, || (CuResult::SUCCESS, 0x77)),
            CuResult::SUCCESS
        );
        assert_eq!(e.vmm_release("r", 0x77, ok), CuResult::SUCCESS);
        assert_eq!(
            e.vmm_unmap("u", 0x1000_0000, 64 * MIB, ok),
            CuResult::SUCCESS
        );
        assert_eq!(e.vmm_release("r", 0x77, ok), CuResult::SUCCESS);
        assert_eq!(free_bytes(&e), 768 * MIB);
        // an imported pointer at an address the ledger still holds: that entry was stale
        let p = 0x9000_0000;
        let alloc = e.alloc("a", Kind::Pointer, Place::Current, 128 * MIB, || {
            (CuResult::SUCCESS, p)
        });
        assert_eq!(alloc, CuResult::SUCCESS);
        e.imported_pointer("o", p);
        assert_eq!(free_bytes(&e), 768 * MIB);
        assert_eq!(e.free("f", Kind::Pointer, p, ok), CuResult::SUCCESS);
        assert_eq!(
            free_bytes(&e),
            768 * MIB,
            "the import's free credits nothing"
        );
    }

    /// Threads create, map, release and unmap (in both orders, with retains) under a
    /// quota: it is never exceeded, and at rest nothing is charged.
    #[test]
    fn vmm_exact_under_threads() {
        let (e, _) = engine("64MiB");
        let e = Arc::new(e);
        let next = Arc::new(AtomicU64::new(1));
        let ok = || CuResult::SUCCESS;
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (e, next) = (e.clone(), next.clone());
                std::thread::spawn(move || {
                    for i in 0..2000u64 {
                        let h = next.fetch_add(1, Relaxed);
                        let base = h << 24;
                        if !create(&e, h, 4 * MIB).is_ok() {
                            continue;
                        }
                        assert!(e.quota(0).unwrap().in_use() <= 64 * MIB);
                        assert!(e.vmm_map("m", base, 4 * MIB, h, ok).is_ok());
                        if (i + t) % 3 == 0 {
                            let (rc, got) = (CuResult::SUCCESS, h);
                            assert!(e.vmm_retain("t", base + 4096, || (rc, got)).is_ok());
                            e.vmm_release("r", h, ok);
                        }
                        if i % 2 == 0 {
                            e.vmm_release("r", h, ok);
                            e.vmm_unmap("u", base, 4 * MIB, ok);
                        } else {
                            e.vmm_unmap("u", base, 4 * MIB, ok);
                            e.vmm_release("r", h, ok);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(e.quota(0).unwrap().in_use(), 0);
        assert_eq!(e.ledger(Kind::Handle).live_on(0), (0, 0));
    }
}

/// Context memory through the engine (issue 11): the glue between `context_memory`'s rules,
/// the driver's and NVML's answers, and the footprint's context part.
#[cfg(test)]
mod context_memory_tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// One 8 GiB GPU whose free memory NVML and the driver agree on; its current context is
    /// 0x1000; `used` is this process's NVML figure (u64::MAX: not listed).
    struct Gpu {
        free: AtomicU64,
        used: AtomicU64,
        nvml_calls: AtomicU32,
    }

    impl Queries for Arc<Gpu> {
        fn current_device(&self) -> Result<u32, CuResult> {
            Ok(0)
        }
        fn current_context(&self) -> usize {
            0x1000
        }
        fn context_device(&self, _: usize) -> Result<u32, CuResult> {
            Ok(0)
        }
        fn stream_context(&self, _: usize) -> Result<usize, CuResult> {
            Ok(0x1000)
        }
        fn total_memory(&self, _: u32) -> Result<u64, CuResult> {
            Ok(8 * GIB)
        }
        fn memory_info(&self) -> Result<(u64, u64), CuResult> {
            Ok((self.free.load(Relaxed), 8 * GIB))
        }
        fn nvml_free(&self, _: u32) -> Option<u64> {
            self.nvml_calls.fetch_add(1, Relaxed);
            Some(self.free.load(Relaxed))
        }
        fn used_by_process(&self, _: u32) -> Option<u64> {
            self.nvml_calls.fetch_add(1, Relaxed);
            Some(self.used.load(Relaxed)).filter(|u| *u != u64::MAX)
        }
    }

    fn engine(vars: &[(&str, &str)]) -> (Engine, Arc<Gpu>) {
        crate::log::configure(&crate::config::LogTarget::Off);
        let gpu = Arc::new(Gpu {
            free: AtomicU64::new(8 * GIB),
            used: AtomicU64::new(u64::MAX),
            nvml_calls: AtomicU32::new(0),
        });
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain([("CUQUOTA_LOG".into(), "off".into())])
            .collect();
        let config =
            Config::from_vars(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()));
        (Engine::new(config, Box::new(gpu.clone())), gpu)
    }

    /// A retain that makes the primary context, which takes `bytes` of the GPU.
    fn retain(e: &Engine, gpu: &Gpu, bytes: u64, released: &std::cell::Cell<bool>) -> CuResult {
        e.primary_retain(
            "cuDevicePrimaryCtxRetain",
            0,
            || true,
            || {
                gpu.free.fetch_sub(bytes, Relaxed);
                (CuResult::SUCCESS, 0x1000)
            },
            || {
                gpu.free.fetch_add(bytes, Relaxed);
                released.set(true);
            },
        )
    }

    #[test]
    fn the_primary_context_is_charged_and_credited_at_its_reset() {
        let (e, gpu) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
        let released = std::cell::Cell::new(false);
        assert_eq!(retain(&e, &gpu, 300 * MIB, &released), CuResult::SUCCESS);
        assert_eq!(e.part_total(0, Part::Context), 300 * MIB);
        assert_eq!(e.memory_info("m", 8 * GIB, 8 * GIB).0, GIB - 300 * MIB);
        // a retain of the active context measures nothing
        let again = e.primary_retain("r", 0, || false, || (CuResult::SUCCESS, 0x1000), || {});
        assert_eq!(again, CuResult::SUCCESS);
        assert_eq!(e.part_total(0, Part::Context), 300 * MIB);
        e.primary_gone("cuDevicePrimaryCtxReset_v2", 0);
        assert_eq!(e.part_total(0, Part::Context), 0);
        assert!(!released.get());
    }

    #[test]
    fn a_context_that_does_not_fit_is_undone_and_refused() {
        let (e, gpu) = engine(&[("CUQUOTA_LIMIT", "256MiB")]);
        let released = std::cell::Cell::new(false);
        let rc = retain(&e, &gpu, 300 * MIB, &released);
        assert_eq!(rc, CuResult::OUT_OF_MEMORY);
        assert!(released.get(), "released again");
        assert_eq!(e.part_total(0, Part::Context), 0);
        // a created one is destroyed, and its slot is free again
        let destroyed = std::cell::Cell::new(0);
        let rc = e.context_create(
            "cuCtxCreate_v2",
            0,
            || {
                gpu.free.fetch_sub(300 * MIB, Relaxed);
                (CuResult::SUCCESS, 0x2000)
            },
            |c| destroyed.set(c),
        );
        assert_eq!((rc, destroyed.get()), (CuResult::OUT_OF_MEMORY, 0x2000));
        assert_eq!(e.contexts.find(0x2000), None);
    }

    #[test]
    fn a_limit_that_does_not_fit_is_set_back() {
        let (e, gpu) = engine(&[("CUQUOTA_LIMIT", "1GiB")]);
        let released = std::cell::Cell::new(false);
        retain(&e, &gpu, 100 * MIB, &released);
        let gpu = &*gpu;
        let grow = |bytes: u64| {
            move || {
                gpu.free.fetch_sub(bytes, Relaxed);
                (CuResult::SUCCESS, ())
            }
        };
        let ok = e.context_grows("cuCtxSetLimit", grow(64 * MIB), |()| None, |()| false);
        assert_eq!(ok, CuResult::SUCCESS);
        assert_eq!(e.part_total(0, Part::Context), 164 * MIB);
        let set_back = std::cell::Cell::new(false);
        let undo = |()| {
            gpu.free.fetch_add(GIB, Relaxed);
            set_back.set(true);
            true
        };
        let refused = e.context_grows("cuCtxSetLimit", grow(GIB), |()| None, undo);
        assert_eq!((refused, set_back.get()), (CuResult::OUT_OF_MEMORY, true));
        assert_eq!(e.part_total(0, Part::Context), 164 * MIB);
        // a module's load is given back at its unload
        let load = || {
            gpu.free.fetch_sub(8 * MIB, Relaxed);
            (CuResult::SUCCESS, 0xd0d)
        };
        let loaded = e.context_grows("cuModuleLoad", load, Some, |_| true);
        assert_eq!(loaded, CuResult::SUCCESS);
        assert_eq!(e.part_total(0, Part::Context), 172 * MIB);
        e.module_unloaded("cuModuleUnload", 0xd0d);
        assert_eq!(e.part_total(0, Part::Context), 164 * MIB);
        // what cannot be undone is charged anyway
        let kept = e.context_grows("cuCtxSetLimit", grow(GIB), |()| None, |()| false);
        assert_eq!(kept, CuResult::SUCCESS);
        assert_eq!(e.part_total(0, Part::Context), 164 * MIB + GIB);
    }

    /// NVML's figure for the process corrects the context part at `cuMemGetInfo`.
    #[test]
    fn nvml_corrects_the_context_part_at_a_memory_query() {
        let (e, gpu) = engine(&[("CUQUOTA_LIMIT", "2GiB")]);
        let released = std::cell::Cell::new(false);
        gpu.used.store(300 * MIB, Relaxed);
        retain(&e, &gpu, 300 * MIB, &released);
        assert_eq!(e.part_total(0, Part::Context), 300 * MIB);
        // 1 s later, the first kernel launch loaded 200 MiB of modules
        gpu.used.store(500 * MIB, Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(1010));
        assert_eq!(e.memory_info("m", 8 * GIB, 8 * GIB).0, 2 * GIB - 500 * MIB);
        assert_eq!(e.part_total(0, Part::Context), 500 * MIB);
    }

    #[test]
    fn allocations_mode_and_zero_ask_nothing() {
        for vars in [
            [("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_COUNT", "allocations")],
            [("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_CONTEXT", "0")],
        ] {
            let (e, gpu) = engine(&vars);
            let released = std::cell::Cell::new(false);
            assert_eq!(retain(&e, &gpu, 300 * MIB, &released), CuResult::SUCCESS);
            assert_eq!(e.memory_info("m", 8 * GIB, 8 * GIB).0, GIB);
            assert_eq!(gpu.nvml_calls.load(Relaxed), 0);
            assert_eq!(e.contexts.find(0x1000).map(|(_, d)| d), Some(0));
        }
    }
}
