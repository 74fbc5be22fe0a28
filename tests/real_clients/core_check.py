"""NVIDIA's cuda.core under cuquota: its device memory resources (stream-ordered pools,
allocated from with cuMemAllocFromPoolAsync) and its virtual memory resource (cuMemCreate
and cuMemMap).

Usage: core_check.py QUOTA_BYTES CHUNK_BYTES, run with LD_PRELOAD=libcuquota.so and
CUQUOTA_LIMIT=QUOTA_BYTES. For the device's default resource and for one that owns a pool
of its own: buffers up to the quota succeed, the next raises cuda.core's CUDAError for
CUDA_ERROR_OUT_OF_MEMORY, closing a buffer gives its room back; then a fill through a
VirtualMemoryResource, whose closed buffers keep their memory (see exercise_leaking). cuda.core has no
memory-info call of its own, so the figures come from cuMemGetInfo through the
cuda.bindings underneath it. One `name key=value...` line per step for
tests/real_clients.rs; exits non-zero (with the reason on stderr) when a check fails.
"""

import sys

from cuda.bindings import driver as cu
from cuda.core import (
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    VirtualMemoryResource,
    VirtualMemoryResourceOptions,
)

# Not re-exported publicly by cuda.core 1.2; the version is pinned.
from cuda.core._utils.cuda_utils import CUDAError


def emit(what, /, **values):
    print(what, *(f"{k}={v}" for k, v in values.items()), flush=True)


def check(cond, what):
    if not cond:
        sys.exit(f"core_check: FAILED: {what}")


def meminfo(when, quota, in_use):
    err, free, total = cu.cuMemGetInfo()
    check(err == cu.CUresult.CUDA_SUCCESS, f"cuMemGetInfo returned {err!r}")
    emit("meminfo", when=when, free=free, total=total)
    check(total == quota, f"total {total} is not the quota {quota}")
    check(free == quota - in_use, f"free {free} is not {quota} - {in_use}")


def pool_reserved(mr):
    """What the resource's pool reserves (its live buffers and what it keeps beyond them, up
    to its release threshold): the quota bounds the footprint, so that is what the quota
    holds while every allocation comes from this pool."""
    err, value = cu.cuMemPoolGetAttribute(
        cu.CUmemoryPool(int(mr.handle)), cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
    )
    check(err == cu.CUresult.CUDA_SUCCESS, f"cuMemPoolGetAttribute returned {err!r}")
    return int(value)


def exercise(name, mr, stream, quota, chunk):
    buffers = []
    while True:
        try:
            buffers.append(mr.allocate(chunk, stream=stream))
        except CUDAError as e:
            # cuda.core turns the driver's CUresult into "NAME: description".
            error = str(e).split(":")[0]
            break
        check(len(buffers) <= quota // chunk, f"{name}: buffer #{len(buffers)} passed the quota")
    emit("fill", api=name, chunk=chunk, ok=len(buffers), err=error)
    check(error == "CUDA_ERROR_OUT_OF_MEMORY", f"{name}: over the quota raised {error}")
    check(len(buffers) == quota // chunk, f"{name}: {len(buffers)} buffers fit")
    meminfo(f"{name}-full", quota, len(buffers) * chunk)

    buffers.pop().close(stream)
    stream.sync()
    # The pool may keep the closed buffer's memory (cuda.core sets the default pool's
    # release threshold): still the process's, and the quota's.
    kept = pool_reserved(mr)
    check(kept >= len(buffers) * chunk, f"{name}: the pool reserves {kept}")
    meminfo(f"{name}-one-freed", quota, kept)
    buffers.append(mr.allocate(chunk, stream=stream))
    emit("realloc", api=name, size=buffers[-1].size)
    check(buffers[-1].size == chunk, "the buffer after a close has the wrong size")

    for b in buffers:
        b.close(stream)
    stream.sync()
    meminfo(f"{name}-empty", quota, pool_reserved(mr))


def exercise_leaking(name, mr, stream, quota, chunk):
    """cuda.core 1.2's VirtualMemoryResource never releases the reference cuMemCreate gave
    (deallocate retains, unmaps and releases only its own; NVIDIA/cuda-python#2882): the
    driver keeps every buffer's memory after close, so cuquota keeps it charged and the
    room does not come back."""
    buffers = []
    while True:
        try:
            buffers.append(mr.allocate(chunk, stream=stream))
        except CUDAError as e:
            error = str(e).split(":")[0]
            break
        check(len(buffers) <= quota // chunk, f"{name}: buffer #{len(buffers)} passed the quota")
    emit("fill", api=name, chunk=chunk, ok=len(buffers), err=error)
    check(error == "CUDA_ERROR_OUT_OF_MEMORY", f"{name}: over the quota raised {error}")
    check(len(buffers) == quota // chunk, f"{name}: {len(buffers)} buffers fit")
    held = len(buffers) * chunk
    meminfo(f"{name}-full", quota, held)
    buffers.pop().close(stream)
    stream.sync()
    meminfo(f"{name}-one-closed", quota, held)
    try:
        buffers.append(mr.allocate(chunk, stream=stream))
        error = "none"
    except CUDAError as e:
        error = str(e).split(":")[0]
    emit("realloc", api=name, err=error)
    check(error == "CUDA_ERROR_OUT_OF_MEMORY", f"{name}: a closed buffer's memory came back")
    for b in buffers:
        b.close(stream)
    stream.sync()
    meminfo(f"{name}-all-closed", quota, held)


def main():
    quota, chunk = int(sys.argv[1]), int(sys.argv[2])
    dev = Device(0)
    dev.set_current()
    emit("device", id=dev.device_id, name=dev.name.replace(" ", "_"))
    meminfo("start", quota, 0)
    stream = dev.create_stream()

    exercise("default", dev.memory_resource, stream, quota, chunk)
    owned = DeviceMemoryResource(dev, DeviceMemoryResourceOptions())
    check(owned.is_handle_owned, "DeviceMemoryResource with options did not create a pool")
    exercise("owned", owned, stream, quota, chunk)
    owned.close()
    exercise_leaking("vmm", VirtualMemoryResource(dev, VirtualMemoryResourceOptions()), stream, quota, chunk)
    stream.close()
    emit("done")


main()
