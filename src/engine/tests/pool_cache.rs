use super::*;
use crate::config::Config;
use crate::engine::Queries;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

const MIB: u64 = 1 << 20;
const CHUNK: u64 = 2 * MIB;
const DEFAULT_POOL: usize = 0x900;
/// One context (0x1000) on device 0; every stream (0x10_000 and up) belongs to it.
const CONTEXT: usize = 0x1000;

/// A pool as the driver keeps it: reservation in chunks, memory kept up to the release
/// threshold until a synchronisation, trims release unused chunks.
#[derive(Clone, Copy, Default)]
struct DriverPool {
    threshold: u64,
    reserved: u64,
    used: u64,
}

/// A pretend driver with pools; counts the pool attribute reads.
#[derive(Default)]
struct Driver {
    pools: Mutex<HashMap<usize, DriverPool>>,
    reads: AtomicU64,
    next_ptr: AtomicU64,
    /// Freed addresses, handed out again first (as a pool does).
    freed: Mutex<Vec<u64>>,
}

impl Driver {
    fn alloc(&self, pool: usize, size: u64) -> (CuResult, u64) {
        let mut pools = self.pools.lock().unwrap();
        let p = pools.entry(pool).or_default();
        if p.used + size > p.reserved {
            p.reserved += (p.used + size - p.reserved).next_multiple_of(CHUNK);
        }
        p.used += size;
        let reused = self.freed.lock().unwrap().pop();
        let ptr = reused.unwrap_or_else(|| (self.next_ptr.fetch_add(1, Relaxed) + 1) << 24);
        (CuResult::SUCCESS, ptr)
    }
    fn free(&self, pool: usize, ptr: u64, size: u64) -> CuResult {
        self.pools.lock().unwrap().get_mut(&pool).unwrap().used -= size;
        self.freed.lock().unwrap().push(ptr);
        CuResult::SUCCESS
    }
    /// A synchronisation: every pool releases unused chunks down to its threshold.
    fn sync(&self) {
        for p in self.pools.lock().unwrap().values_mut() {
            Self::trim_to(p, p.threshold);
        }
    }
    fn trim_to(p: &mut DriverPool, keep: u64) {
        let floor = keep.max(p.used.next_multiple_of(CHUNK)).min(p.reserved);
        p.reserved -= (p.reserved - floor) / CHUNK * CHUNK;
    }
    fn set_threshold(&self, pool: usize, threshold: u64) {
        self.pools
            .lock()
            .unwrap()
            .entry(pool)
            .or_default()
            .threshold = threshold;
    }
    fn reserved(&self) -> u64 {
        self.pools
            .lock()
            .unwrap()
            .values()
            .map(|p| p.reserved)
            .sum()
    }
    fn unused(&self) -> u64 {
        let pools = self.pools.lock().unwrap();
        pools.values().map(|p| p.reserved - p.used).sum()
    }
}

impl Queries for Arc<Driver> {
    fn current_device(&self) -> Result<u32, CuResult> {
        Ok(0)
    }
    fn current_context(&self) -> usize {
        CONTEXT
    }
    fn context_device(&self, _context: usize) -> Result<u32, CuResult> {
        Ok(0)
    }
    fn stream_context(&self, _stream: usize) -> Result<usize, CuResult> {
        Ok(CONTEXT)
    }
    fn total_memory(&self, _device: u32) -> Result<u64, CuResult> {
        Ok(8 << 30)
    }
    fn memory_info(&self) -> Result<(u64, u64), CuResult> {
        Ok((8 << 30, 8 << 30))
    }
    fn pool_usage(&self, pool: usize) -> Result<(u64, u64), CuResult> {
        self.reads.fetch_add(1, Relaxed);
        let pools = self.pools.lock().unwrap();
        let p = pools.get(&pool).ok_or(CuResult::INVALID_VALUE)?;
        Ok((p.reserved, p.used))
    }
    fn trim_pool(&self, pool: usize) -> Result<(), CuResult> {
        let mut pools = self.pools.lock().unwrap();
        Driver::trim_to(pools.get_mut(&pool).ok_or(CuResult::INVALID_VALUE)?, 0);
        Ok(())
    }
    fn current_pool(&self, _device: u32) -> Result<usize, CuResult> {
        Ok(DEFAULT_POOL)
    }
}

fn engine_with(vars: &[(&str, &str)]) -> (Engine, Arc<Driver>) {
    crate::log::configure(&crate::config::LogTarget::Off);
    let driver = Arc::new(Driver::default());
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = Config::from_vars(|k| {
        vars.iter()
            .find(|(name, _)| name == k)
            .map(|(_, v)| v.clone())
            .or_else(|| (k == "CUQUOTA_LOG").then(|| "off".into()))
    });
    (Engine::new(config, Box::new(driver.clone())), driver)
}

fn engine(limit: &str) -> (Engine, Arc<Driver>) {
    engine_with(&[("CUQUOTA_LIMIT", limit)])
}

/// `cuMemAllocAsync` of `size` from the device's current pool (the default one).
fn alloc_async(e: &Engine, d: &Driver, size: u64) -> (CuResult, u64) {
    alloc_from(e, d, PoolOf::Current, size)
}

fn alloc_from(e: &Engine, d: &Driver, pool: PoolOf, size: u64) -> (CuResult, u64) {
    let handle = match pool {
        PoolOf::Current => DEFAULT_POOL,
        PoolOf::Given(p) => p,
    };
    let got = std::cell::Cell::new(0);
    let rc = e.alloc_pooled(
        "cuMemAllocAsync",
        pool,
        0x10_000,
        size,
        || {
            let (rc, ptr) = d.alloc(handle, size);
            got.set(ptr);
            (rc, ptr)
        },
        |ptr| {
            d.free(handle, ptr, size);
        },
    );
    (rc, if rc.is_ok() { got.get() } else { 0 })
}

fn free_async(e: &Engine, d: &Driver, pool: usize, ptr: u64, size: u64) -> CuResult {
    e.free("cuMemFreeAsync", Kind::Pointer, ptr, || {
        d.free(pool, ptr, size)
    })
}

fn usage(e: &Engine) -> crate::quota::Usage {
    e.quota(0).unwrap().usage()
}

fn pool_cache(e: &Engine) -> u64 {
    e.part_total(0, Part::PoolCache)
}

#[test]
fn books_follow_pools_pointers_and_destruction() {
    let mut b = PoolBooks::default();
    let a = b.pool(0x10, 0);
    assert_eq!(b.pool(0x10, 0), a, "one number per live handle");
    b.allocated(0x100, a);
    b.allocated(0x200, a);
    let id = b.take_pointer(0x100);
    assert_eq!(b.freed(id, 5), Freed::Kept);
    assert_eq!(b.cached(a), 5);
    let none = b.take_pointer(0x999);
    assert_eq!(b.freed(none, 5), Freed::Untracked);
    // destroyed with an allocation live: its memory goes with that allocation
    assert_eq!(b.destroyed(0x10), None);
    let again = b.pool(0x10, 1);
    assert_ne!(again, a, "the handle came back for another pool");
    assert_eq!(b.readable(None), vec![(again, 0x10, 0)]);
    let id = b.take_pointer(0x200);
    assert_eq!(b.freed(id, 7), Freed::PoolGone { cached: 5 });
    assert!(b.get(a).is_none());
    // a pool with nothing live goes at once
    b.set_cached(again, 9);
    assert_eq!(b.destroyed(0x10), Some((1, 9)));
    assert_eq!(b.destroyed(0x10), None);
}

#[test]
fn settled_to_the_pools_chunk_growth() {
    let (e, d) = engine("1GiB");
    let (rc, p) = alloc_async(&e, &d, 3 * MIB);
    assert_eq!(rc, CuResult::SUCCESS);
    // 4 MiB reserved (two chunks) for 3 MiB used: the pool keeps 1 MiB
    assert_eq!(pool_cache(&e), MIB);
    assert_eq!(usage(&e).in_use, 4 * MIB);
    let (_, q) = alloc_async(&e, &d, MIB);
    assert_eq!(pool_cache(&e), 0, "the second fits in what the pool kept");
    // freed: the pool keeps it
    assert_eq!(
        free_async(&e, &d, DEFAULT_POOL, p, 3 * MIB),
        CuResult::SUCCESS
    );
    assert_eq!((pool_cache(&e), usage(&e).in_use), (3 * MIB, 4 * MIB));
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, GIB - 4 * MIB);
    // after a synchronisation the pool gave back what no allocation uses
    d.sync();
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, GIB - 2 * MIB);
    assert_eq!(pool_cache(&e), MIB);
    assert_eq!(free_async(&e, &d, DEFAULT_POOL, q, MIB), CuResult::SUCCESS);
    d.sync();
    assert_eq!(e.memory_info("m", 8 << 30, 8 << 30).0, GIB);
    assert_eq!((usage(&e).in_use, usage(&e).part_peaks[0]), (0, 3 * MIB));
}

const GIB: u64 = 1 << 30;

/// The 12-GiB example at 64 MiB: a pool that never gives memory back holds 64 MiB it
/// freed; a plain 64 MiB allocation trims it and fits, never above the quota.
#[test]
fn a_pool_that_keeps_memory_is_trimmed_for_a_plain_allocation() {
    let (e, d) = engine("64MiB");
    d.set_threshold(DEFAULT_POOL, u64::MAX);
    let (_, p) = alloc_async(&e, &d, 64 * MIB);
    free_async(&e, &d, DEFAULT_POOL, p, 64 * MIB);
    d.sync();
    assert_eq!(usage(&e).in_use, 64 * MIB, "the pool keeps it");
    let plain = e.alloc(
        "cuMemAlloc_v2",
        Kind::Pointer,
        Place::Current,
        64 * MIB,
        || (CuResult::SUCCESS, 0x7000_0000),
    );
    assert_eq!(plain, CuResult::SUCCESS);
    assert_eq!(d.reserved(), 0, "trimmed");
    let u = usage(&e);
    assert_eq!((u.in_use, u.peak, u.refusals), (64 * MIB, 64 * MIB, 0));
    assert_eq!((u.trims, u.trimmed), (1, 64 * MIB));
    assert_eq!(pool_cache(&e), 0);
}

#[test]
fn live_pool_memory_is_not_trimmed_and_the_request_is_refused() {
    let (e, d) = engine("64MiB");
    let (_, _p) = alloc_async(&e, &d, 64 * MIB);
    let plain = e.alloc(
        "cuMemAlloc_v2",
        Kind::Pointer,
        Place::Current,
        64 * MIB,
        || panic!("not called"),
    );
    assert_eq!(plain, CuResult::OUT_OF_MEMORY);
    let u = usage(&e);
    assert_eq!((u.in_use, u.refusals, u.trims), (64 * MIB, 1, 0));
}

/// Growth beyond the quota: the device's pools are trimmed first; when that is not
/// enough the allocation is freed and refused, and nothing of it stays charged.
#[test]
fn pool_growth_that_does_not_fit_is_undone() {
    let (e, d) = engine("7680KiB");
    let other = 0x901;
    let (_, a) = alloc_async(&e, &d, 2 * MIB);
    let (_, _b) = alloc_async(&e, &d, 2 * MIB);
    let (_, c) = alloc_from(&e, &d, PoolOf::Given(other), MIB);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (6 * MIB, MIB));
    free_async(&e, &d, DEFAULT_POOL, a, 2 * MIB);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (6 * MIB, 3 * MIB));
    // 2 MiB more from the other pool fits the quota, but the pool grows by a chunk
    // beyond it: trimming the default pool (which keeps 2 MiB) makes room
    let (rc, _) = alloc_from(&e, &d, PoolOf::Given(other), 2 * MIB);
    assert_eq!(rc, CuResult::SUCCESS);
    let u = usage(&e);
    assert_eq!(
        (u.in_use, u.trims, u.trimmed, u.refusals),
        (6 * MIB, 1, 2 * MIB, 0)
    );
    assert_eq!(d.reserved(), 6 * MIB);
    // now nothing is left to trim: the allocation is undone and refused
    let (rc, _) = alloc_from(&e, &d, PoolOf::Given(other), 3 * MIB / 2);
    assert_eq!(rc, CuResult::OUT_OF_MEMORY);
    assert_eq!((usage(&e).in_use, d.reserved()), (6 * MIB, 6 * MIB));
    assert_eq!(usage(&e).refusals, 1);
    assert_eq!(e.ledger(Kind::PoolPointer).live_on(0), (3, 5 * MIB));
    free_async(&e, &d, other, c, MIB);
    assert_eq!(usage(&e).in_use, d.reserved());
}

#[test]
fn a_plain_free_of_pool_memory_moves_it_to_the_cache() {
    let (e, d) = engine("1GiB");
    let (_, p) = alloc_async(&e, &d, 2 * MIB);
    let rc = e.free("cuMemFree_v2", Kind::Pointer, p, || {
        d.free(DEFAULT_POOL, p, 2 * MIB)
    });
    assert_eq!(rc, CuResult::SUCCESS);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (2 * MIB, 2 * MIB));
    // unknown pointers still reach the driver, unchanged
    let rc = e.free("cuMemFree_v2", Kind::Pointer, 0x1234, || CuResult(1));
    assert_eq!(rc, CuResult(1));
    // a failed free keeps the charge where it was
    let (_, q) = alloc_async(&e, &d, 2 * MIB);
    let rc = e.free("cuMemFree_v2", Kind::Pointer, q, || CuResult(1));
    assert_eq!(rc, CuResult(1));
    assert_eq!(e.ledger(Kind::PoolPointer).live_on(0), (1, 2 * MIB));
}

#[test]
fn a_destroyed_pool_keeps_its_memory_until_its_last_allocation_goes() {
    let (e, d) = engine("1GiB");
    let pool = 0x902;
    let (_, p) = alloc_from(&e, &d, PoolOf::Given(pool), 3 * MIB);
    let (_, q) = alloc_from(&e, &d, PoolOf::Given(pool), MIB);
    free_async(&e, &d, pool, p, 3 * MIB);
    e.pool_destroyed(pool);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (4 * MIB, 3 * MIB));
    free_async(&e, &d, pool, q, MIB);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (0, 0));
    // one with nothing live goes at once (a new pool, by the same handle)
    d.pools.lock().unwrap().remove(&pool);
    let (_, r) = alloc_from(&e, &d, PoolOf::Given(pool), MIB);
    free_async(&e, &d, pool, r, MIB);
    assert_eq!(usage(&e).in_use, 2 * MIB);
    e.pool_destroyed(pool);
    assert_eq!(usage(&e).in_use, 0);
}

#[test]
fn a_context_gone_takes_its_pointers_and_the_pools_are_read_again() {
    let (e, d) = engine("1GiB");
    d.set_threshold(DEFAULT_POOL, u64::MAX);
    let (_, _p) = alloc_async(&e, &d, 3 * MIB);
    // the driver frees the context's allocations; the pool keeps the memory
    d.free(DEFAULT_POOL, 0, 3 * MIB);
    e.context_destroyed("cuCtxDestroy_v2", CONTEXT);
    assert_eq!(e.ledger(Kind::PoolPointer).live_on(0), (0, 0));
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (4 * MIB, 4 * MIB));
    assert!(e.pool_books.lock().pointers.is_empty());
    // threshold 0: the teardown gave it back, and so does the quota
    let (e, d) = engine("1GiB");
    let (_, _p) = alloc_async(&e, &d, 3 * MIB);
    d.free(DEFAULT_POOL, 0, 3 * MIB);
    d.sync();
    e.context_destroyed("cuCtxDestroy_v2", CONTEXT);
    assert_eq!((usage(&e).in_use, pool_cache(&e)), (0, 0));
}

#[test]
fn counting_allocations_reads_no_pool() {
    let (e, d) = engine_with(&[("CUQUOTA_LIMIT", "1GiB"), ("CUQUOTA_COUNT", "allocations")]);
    let (rc, p) = alloc_async(&e, &d, 3 * MIB);
    assert_eq!(rc, CuResult::SUCCESS);
    assert_eq!(usage(&e).in_use, 3 * MIB);
    free_async(&e, &d, DEFAULT_POOL, p, 3 * MIB);
    assert_eq!(usage(&e).in_use, 0);
    e.memory_info("m", 8 << 30, 8 << 30);
    assert_eq!(d.reads.load(Relaxed), 0);
    assert_eq!(e.ledger(Kind::Pointer).live_on(0), (0, 0));
}

/// Threads mix stream-ordered and plain allocations under a quota: the quota holds at
/// every step, and at rest cuquota's figure is the pools' reservation exactly.
#[test]
fn exact_under_threads() {
    let (e, d) = engine("64MiB");
    let (e, d) = (Arc::new(e), d);
    let plain = Arc::new(AtomicU64::new(1));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (e, d, plain) = (e.clone(), d.clone(), plain.clone());
            std::thread::spawn(move || {
                let pool = [PoolOf::Current, PoolOf::Given(0x903)][t as usize % 2];
                let handle = match pool {
                    PoolOf::Current => DEFAULT_POOL,
                    PoolOf::Given(p) => p,
                };
                let mut live = Vec::new();
                for i in 0..400u64 {
                    let size = MIB / 2 + (i % 5) * MIB / 4;
                    if i % 3 == 0 {
                        let p = plain.fetch_add(1, Relaxed) << 40;
                        let rc = e.alloc("a", Kind::Pointer, Place::Current, 4 * MIB, || {
                            (CuResult::SUCCESS, p)
                        });
                        if rc.is_ok() {
                            e.free("f", Kind::Pointer, p, || CuResult::SUCCESS);
                        }
                    } else if let (CuResult::SUCCESS, p) = alloc_from(&e, &d, pool, size) {
                        live.push((p, size));
                    }
                    assert!(e.quota(0).unwrap().in_use() <= 64 * MIB);
                    if live.len() > 3 {
                        let (p, size) = live.remove(0);
                        free_async(&e, &d, handle, p, size);
                    }
                    if i % 50 == 0 {
                        d.sync();
                    }
                }
                for (p, size) in live {
                    free_async(&e, &d, handle, p, size);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(usage(&e).peak <= 64 * MIB);
    assert_eq!(usage(&e).in_use, pool_cache(&e), "no allocation live");
    assert!(
        pool_cache(&e) >= d.unused(),
        "never below what the pools keep"
    );
    e.memory_info("m", 8 << 30, 8 << 30);
    assert_eq!(pool_cache(&e), d.unused(), "read again: exact");
}
