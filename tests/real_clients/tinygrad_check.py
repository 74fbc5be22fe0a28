"""tinygrad (DEV=CUDA: ctypes on the libcuda.so it finds through LD_LIBRARY_PATH) under cuquota.

Usage: tinygrad_check.py QUOTA0_BYTES QUOTA1_BYTES CHUNK_BYTES, run with DEV=CUDA, two GPUs
and CUQUOTA_LIMIT=0:QUOTA0,1:QUOTA1. Fills GPU 0's quota with CHUNK_BYTES tensors until
tinygrad raises its own MemoryError (the driver's out-of-memory as the cause), reads the
memory info through the driver, frees (tinygrad caches freed buffers: its cache is emptied),
allocates again, moves a small tensor to CUDA:1 and back, and then a CHUNK_BYTES one that
GPU 1's quota refuses. No kernel is compiled. Prints one `name key=value...` line per step for
tests/integration/real_clients.rs; exits non-zero (with the reason on stderr) when a check fails.
"""

import ctypes
import sys

import numpy as np
from tinygrad import Device, Tensor, dtypes
from tinygrad.runtime.autogen import cuda


def emit(what, /, **values):
    print(what, *(f"{k}={v}" for k, v in values.items()), flush=True)


def check(cond, what):
    if not cond:
        sys.exit(f"tinygrad_check: FAILED: {what}")


def meminfo(gpu, when, quota, in_use):
    """cuMemGetInfo_v2 through tinygrad's own bindings, in the device's context."""
    dev = Device[f"CUDA:{gpu}" if gpu else "CUDA"]
    check(cuda.cuCtxSetCurrent(dev.context) == 0, "cuCtxSetCurrent")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0, "cuMemGetInfo_v2")
    emit("meminfo", gpu=gpu, when=when, free=free.value, total=total.value)
    check(total.value == quota, f"total {total.value} is not the quota {quota}")
    check(free.value == quota - in_use, f"free {free.value} is not {quota} - {in_use}")


def chunk_tensor(chunk, device="CUDA"):
    """A tensor whose device buffer is allocated now (an empty one is allocated lazily)."""
    t = Tensor.empty(chunk, dtype=dtypes.uint8, device=device).realize()
    t.uop.buffer.ensure_allocated()
    return t


def refused(what, make):
    """Runs make(), which must raise tinygrad's MemoryError caused by the driver's OOM."""
    try:
        make()
    except MemoryError as e:
        cause = e.__cause__
        emit("refused", what=what)
        print(f"message {e}", flush=True)
        print(f"cause {type(cause).__name__}: {cause}", flush=True)
        return
    sys.exit(f"tinygrad_check: FAILED: {what} was not refused")


def main():
    quota0, quota1, chunk = (int(a) for a in sys.argv[1:4])
    check(Device.DEFAULT == "CUDA", f"default device {Device.DEFAULT}")
    fits = quota0 // chunk
    meminfo(0, "start", quota0, 0)

    held = [chunk_tensor(chunk) for _ in range(fits)]
    emit("fill", gpu=0, chunk=chunk, ok=len(held))
    refused("fill", lambda: chunk_tensor(chunk))
    meminfo(0, "full", quota0, fits * chunk)

    # A freed buffer stays in tinygrad's cache, charged; emptying the cache frees it.
    held.pop()
    meminfo(0, "one-dropped", quota0, fits * chunk)
    Device["CUDA"].allocator.free_cache()
    meminfo(0, "one-freed", quota0, (fits - 1) * chunk)
    held.append(chunk_tensor(chunk))
    emit("realloc", gpu=0)
    meminfo(0, "full-again", quota0, fits * chunk)
    held.clear()
    Device["CUDA"].allocator.free_cache()
    meminfo(0, "empty", quota0, 0)

    # Data through both GPUs: host -> CUDA:0 -> CUDA:1 -> host.
    data = np.arange(1 << 16, dtype=np.float32)
    t0 = Tensor(data).realize()
    t1 = t0.to("CUDA:1").realize()
    same = bool((t1.numpy() == data).all())
    emit("to", src=0, dst=1, bytes=data.nbytes, same=int(same))
    check(same, "the data came back different")
    del t0, t1

    big = chunk_tensor(chunk)
    refused("to", lambda: big.to("CUDA:1").realize())
    del big
    emit("done")


main()
