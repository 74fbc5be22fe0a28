"""NVIDIA's cuda-bindings under CUQUOTA_STACKS: one cuMemAlloc, for the call-stack test
(tests/integration/stacks.rs). The allocation's nearest frame outside cuquota and the driver
is the binding's own native code (its Cython module), which the report must name by module.
Prints `done` at the end; exits non-zero (with the reason) when a call fails.
"""

import sys

from cuda.bindings import driver as cu


def ok(result, what):
    err, *values = result
    if err != cu.CUresult.CUDA_SUCCESS:
        sys.exit(f"stacks_check: {what} returned {err!r}")
    return values[0] if len(values) == 1 else values


def load_weights():
    return ok(cu.cuMemAlloc(64 << 20), "cuMemAlloc")


ok(cu.cuInit(0), "cuInit")
device = ok(cu.cuDeviceGet(0), "cuDeviceGet")
context = ok(cu.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
ok(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
load_weights()
print("done", flush=True)
