"""numba-cuda under cuquota: cuda.device_array through numba's own memory manager.

Usage: numba_check.py QUOTA_BYTES CHUNK_BYTES, run with LD_PRELOAD=libcuquota.so and
CUQUOTA_LIMIT=QUOTA_BYTES. Arrays up to the quota succeed, the next raises numba's
CudaAPIError for CUDA_ERROR_OUT_OF_MEMORY (after numba has flushed its pending
deallocations and retried once), get_memory_info() shows the quota, and freeing an array
(and flushing numba's deferred deallocations) gives its room back. One `name key=value...`
line per step for tests/real_clients.rs; exits non-zero (with the reason on stderr) when a
check fails.
"""

import sys

import numpy as np
from cuda.bindings.driver import CUresult
from numba import cuda
from numba.cuda.cudadrv.driver import CudaAPIError


def emit(what, /, **values):
    print(what, *(f"{k}={v}" for k, v in values.items()), flush=True)


def check(cond, what):
    if not cond:
        sys.exit(f"numba_check: FAILED: {what}")


def meminfo(ctx, when, quota, in_use):
    info = ctx.get_memory_info()
    emit("meminfo", when=when, free=info.free, total=info.total)
    check(info.total == quota, f"get_memory_info total {info.total} is not the quota {quota}")
    check(info.free == quota - in_use, f"get_memory_info free {info.free} is not {quota} - {in_use}")


def loaded(fragment):
    """The path of the first mapped library whose path contains `fragment`."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if fragment in path:
                return path
    return "none"


def main():
    quota, chunk = int(sys.argv[1]), int(sys.argv[2])
    ctx = cuda.current_context()
    # Which driver numba bound to (the shim) and the libcudart it insisted on finding.
    emit("libs", driver=loaded("libcuda.so"), cudart=loaded("libcudart.so"))
    meminfo(ctx, "start", quota, 0)

    arrays = []
    while True:
        try:
            arrays.append(cuda.device_array(chunk, dtype=np.uint8))
        except CudaAPIError as e:
            # numba-cuda runs on cuda.bindings: the code is its CUresult.
            code = CUresult(e.code)
            break
        check(len(arrays) <= quota // chunk, f"array #{len(arrays)} passed the quota")
    emit("fill", api="device_array", chunk=chunk, ok=len(arrays), rc=int(code), err=code.name)
    check(code == CUresult.CUDA_ERROR_OUT_OF_MEMORY, f"over the quota raised CudaAPIError {code!r}")
    check(len(arrays) == quota // chunk, f"{len(arrays)} arrays fit, not {quota // chunk}")
    meminfo(ctx, "full", quota, len(arrays) * chunk)

    # numba defers frees; clear() makes them happen now.
    del arrays[-1]
    ctx.deallocations.clear()
    meminfo(ctx, "one-freed", quota, len(arrays) * chunk)
    arrays.append(cuda.device_array(chunk, dtype=np.uint8))
    emit("realloc", api="device_array", size=arrays[-1].nbytes)

    arrays.clear()
    ctx.deallocations.clear()
    meminfo(ctx, "empty", quota, 0)
    emit("done")


main()
