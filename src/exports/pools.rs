//! Pools' placement: where each pool keeps its memory (made, returned by a query, or set as
//! a device's or a location's pool), so that a pool allocation is charged to the right
//! device, or to none; and a pool's destruction.

use super::{hook, hooked, table, watched};
use crate::cuda_abi::{
    CuDevice, CuMemLocation, CuMemPoolPropsHead, CuMemoryPool, CuResult, Located,
};
use crate::engine::PoolPlace;
use crate::ffi::{self, Out};
use crate::in_hook;
use crate::lookup::Real;
use crate::real_driver as real;
use std::ffi::c_int;

/// `CU_MEM_ALLOCATION_TYPE_MANAGED` (CUDA 13).
const ALLOCATION_MANAGED: i32 = 2;

/// Where a pool of `alloc_type` at `location` keeps its memory: a device (`DEVICE`, or a
/// `DEVICE_LOCALITY_DOMAIN` of it), the host (the three host types), or, for a location
/// cuquota cannot place, `Err` (a pool made there is refused; one returned by a query is not
/// located, so its allocations land on the stream's device: charged, never free).
fn pool_place(alloc_type: i32, location: CuMemLocation) -> Result<PoolPlace, CuMemLocation> {
    if alloc_type == ALLOCATION_MANAGED {
        return Ok(PoolPlace::Managed);
    }
    match location.located() {
        Located::Device(device) => Ok(PoolPlace::Device(device)),
        Located::Host => Ok(PoolPlace::Host),
        Located::Unknown => Err(location),
    }
}

hooked!(
    cuMemPoolCreate,
    |pool: *mut CuMemoryPool, props: *const CuMemPoolPropsHead| {
        // SAFETY: `props` is null or the caller's valid CUmemPoolProps.
        let place = unsafe { ffi::input(props) }.map(|p| pool_place(p.alloc_type, p.location));
        hook(
            &real::cuMemPoolCreate,
            |real, e| {
                let place = match place {
                    Some(Err(location)) => {
                        return e.unknown_location(real::cuMemPoolCreate.name(), location)
                    }
                    Some(Ok(place)) => Some(place),
                    // No properties: the driver's answer.
                    None => None,
                };
                // SAFETY: the caller's arguments, passed on.
                let rc = in_hook::driver(|| unsafe { real(pool, props) });
                // SAFETY: `pool` is the caller's out-pointer, null or valid.
                if let (true, Some(pool)) = (rc.is_ok(), unsafe { Out::new(pool) }) {
                    if let Some(place) = place {
                        e.pool_located(pool.get() as usize, place);
                    }
                }
                rc
            },
            // SAFETY: the caller's arguments, passed on.
            |real| unsafe { real(pool, props) },
        )
    }
);

/// A default or current pool query: the pool returned keeps its memory on `dev`.
fn device_pool(
    real: &'static Real<real::cuDeviceGetMemPool>,
    pool: *mut CuMemoryPool,
    dev: CuDevice,
) -> CuResult {
    watched(
        real,
        // SAFETY: the caller's arguments, passed on.
        |f| unsafe { f(pool, dev) },
        |e| {
            // SAFETY: `pool` is the caller's out-pointer, null or valid.
            if let (Some(p), Ok(d)) = (unsafe { Out::new(pool) }, u32::try_from(dev)) {
                e.pool_located(p.get() as usize, PoolPlace::Device(d));
            }
        },
    )
}

hooked!(
    cuDeviceGetDefaultMemPool,
    |pool: *mut CuMemoryPool, dev: CuDevice| {
        device_pool(&real::cuDeviceGetDefaultMemPool, pool, dev)
    }
);

hooked!(
    cuDeviceGetMemPool,
    |pool: *mut CuMemoryPool, dev: CuDevice| { device_pool(&real::cuDeviceGetMemPool, pool, dev) }
);

// The driver accepts only a pool of `dev` as its current pool.
hooked!(cuDeviceSetMemPool, |dev: CuDevice, pool: CuMemoryPool| {
    watched(
        &real::cuDeviceSetMemPool,
        // SAFETY: the caller's arguments, passed on.
        |f| unsafe { f(dev, pool) },
        |e| {
            if let Ok(d) = u32::try_from(dev) {
                e.pool_located(pool as usize, PoolPlace::Device(d));
            }
        },
    )
});

/// CUDA 13: a pool by location and allocation type; the pool returned keeps its memory
/// there.
fn pool_by_location(
    real: &'static Real<real::cuMemGetMemPool>,
    pool: *mut CuMemoryPool,
    location: *mut CuMemLocation,
    alloc_type: c_int,
) -> CuResult {
    watched(
        real,
        // SAFETY: the caller's arguments, passed on.
        |f| unsafe { f(pool, location, alloc_type) },
        |e| {
            // SAFETY: `pool` and `location` are the caller's, null or valid.
            let (out, at) = unsafe { (Out::new(pool), ffi::input(location)) };
            let place = at.and_then(|l| pool_place(alloc_type, *l).ok());
            if let (Some(p), Some(place)) = (out, place) {
                e.pool_located(p.get() as usize, place);
            }
        },
    )
}

hooked!(
    cuMemGetDefaultMemPool,
    |pool: *mut CuMemoryPool, location: *mut CuMemLocation, alloc_type: c_int| {
        pool_by_location(&real::cuMemGetDefaultMemPool, pool, location, alloc_type)
    }
);

hooked!(
    cuMemGetMemPool,
    |pool: *mut CuMemoryPool, location: *mut CuMemLocation, alloc_type: c_int| {
        pool_by_location(&real::cuMemGetMemPool, pool, location, alloc_type)
    }
);

hooked!(
    cuMemSetMemPool,
    |location: *mut CuMemLocation, alloc_type: c_int, pool: CuMemoryPool| {
        // SAFETY: `location` is null or the caller's valid CUmemLocation (the call only reads
        // it).
        let place = unsafe { ffi::input(location) }.and_then(|l| pool_place(alloc_type, *l).ok());
        watched(
            &real::cuMemSetMemPool,
            // SAFETY: the caller's arguments, passed on.
            |f| unsafe { f(location, alloc_type, pool) },
            |e| {
                if let Some(place) = place {
                    e.pool_located(pool as usize, place);
                }
            },
        )
    }
);

hooked!(cuMemPoolDestroy, |pool: CuMemoryPool| {
    watched(
        &real::cuMemPoolDestroy,
        // SAFETY: the caller's argument, passed on.
        |f| unsafe { f(pool) },
        |e| e.pool_destroyed(pool as usize),
    )
});

table!(
    cuMemPoolCreate,
    cuDeviceGetDefaultMemPool,
    cuDeviceGetMemPool,
    cuDeviceSetMemPool,
    cuMemGetDefaultMemPool,
    cuMemGetMemPool,
    cuMemSetMemPool,
    cuMemPoolDestroy
);
