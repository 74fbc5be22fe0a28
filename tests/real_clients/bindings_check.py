"""NVIDIA's cuda-bindings (cuda.bindings.driver) under cuquota.

Usage: bindings_check.py QUOTA_BYTES CHUNK_BYTES, run with LD_PRELOAD=libcuquota.so and
CUQUOTA_LIMIT=QUOTA_BYTES. Fills the quota in CHUNK_BYTES pieces three ways (cuMemAlloc,
cuMemAllocAsync on the device's default pool, cuMemAllocFromPoolAsync on a pool of its own),
each time checking that the first request over the quota gets CUDA_ERROR_OUT_OF_MEMORY,
that cuMemGetInfo and cuDeviceTotalMem show the quota, and that a free gives the room back.
Prints one `name key=value...` line per step for tests/real_clients.rs; exits non-zero
(with the reason on stderr) when a check fails.
"""

import sys

from cuda.bindings import driver as cu

SUCCESS = cu.CUresult.CUDA_SUCCESS
OOM = cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY


def emit(what, /, **values):
    print(what, *(f"{k}={v}" for k, v in values.items()), flush=True)


def check(cond, what):
    if not cond:
        sys.exit(f"bindings_check: FAILED: {what}")


def ok(result, what):
    """The values of a bindings call's (CUresult, values...) tuple; exits on an error."""
    err, *values = result
    check(err == SUCCESS, f"{what} returned {err!r}")
    return values[0] if len(values) == 1 else values


def meminfo(when, quota, in_use):
    free, total = ok(cu.cuMemGetInfo(), "cuMemGetInfo")
    emit("meminfo", when=when, free=free, total=total)
    check(total == quota, f"cuMemGetInfo total {total} is not the quota {quota}")
    check(free == quota - in_use, f"cuMemGetInfo free {free} is not {quota} - {in_use}")


def fill(api, alloc, quota, chunk):
    """Allocates `chunk` until refused; the refusal must be OUT_OF_MEMORY, exactly when the
    next chunk would pass the quota."""
    ptrs = []
    while True:
        err, ptr = alloc()
        if err != SUCCESS:
            break
        ptrs.append(ptr)
        check(len(ptrs) <= quota // chunk, f"{api}: chunk #{len(ptrs)} went past the quota")
    emit("fill", api=api, chunk=chunk, ok=len(ptrs), rc=int(err), err=err.name)
    check(err == OOM, f"{api} over the quota returned {err!r}, not CUDA_ERROR_OUT_OF_MEMORY")
    check(len(ptrs) == quota // chunk, f"{api}: {len(ptrs)} chunks fit, not {quota // chunk}")
    return ptrs


def exercise(api, alloc, free, sync, quota, chunk):
    """Fill, check the memory info, free one and take it again, free all."""
    ptrs = fill(api, alloc, quota, chunk)
    meminfo(f"{api}-full", quota, len(ptrs) * chunk)
    ok(free(ptrs.pop()), f"free after {api}")
    sync()
    meminfo(f"{api}-one-freed", quota, len(ptrs) * chunk)
    ptrs.append(ok(alloc(), f"{api} after a free"))
    emit("realloc", api=api, rc=0)
    for p in ptrs:
        ok(free(p), f"free after {api}")
    sync()
    meminfo(f"{api}-empty", quota, 0)


def main():
    quota, chunk = int(sys.argv[1]), int(sys.argv[2])
    ok(cu.cuInit(0), "cuInit")
    dev = ok(cu.cuDeviceGet(0), "cuDeviceGet")
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    total = ok(cu.cuDeviceTotalMem(dev), "cuDeviceTotalMem")
    emit("total_mem", bytes=total)
    check(total == quota, f"cuDeviceTotalMem {total} is not the quota {quota}")
    meminfo("start", quota, 0)

    def no_sync():
        pass

    exercise(
        "cuMemAlloc",
        lambda: cu.cuMemAlloc(chunk),
        cu.cuMemFree,
        no_sync,
        quota,
        chunk,
    )

    stream = ok(cu.cuStreamCreate(0), "cuStreamCreate")
    exercise(
        "cuMemAllocAsync",
        lambda: cu.cuMemAllocAsync(chunk, stream),
        lambda p: cu.cuMemFreeAsync(p, stream),
        lambda: ok(cu.cuStreamSynchronize(stream), "cuStreamSynchronize"),
        quota,
        chunk,
    )

    props = cu.CUmemPoolProps()
    props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = int(dev)
    pool = ok(cu.cuMemPoolCreate(props), "cuMemPoolCreate")
    exercise(
        "cuMemAllocFromPoolAsync",
        lambda: cu.cuMemAllocFromPoolAsync(chunk, pool, stream),
        lambda p: cu.cuMemFreeAsync(p, stream),
        lambda: ok(cu.cuStreamSynchronize(stream), "cuStreamSynchronize"),
        quota,
        chunk,
    )
    ok(cu.cuMemPoolDestroy(pool), "cuMemPoolDestroy")
    ok(cu.cuStreamDestroy(stream), "cuStreamDestroy")
    ok(cu.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")
    emit("done")


main()
