"""NVML clients nobody on this project wrote, as they show a GPU under cuquota.

Usage: nvml_check.py monitor   — pynvml (nvidia-ml-py), nvitop's Python API, `gpustat --json`
                                  and `nvitop -1` (as subprocesses): a process that never
                                  calls CUDA.
       nvml_check.py torch BYTES — allocates BYTES through cuda-bindings, then reads its own
                                  usedGpuMemory as PyTorch's C++ out-of-memory message does
                                  (ctypes: nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 with
                                  the "%08X:%02X:%02X.0" id, the unversioned
                                  nvmlDeviceGetComputeRunningProcesses with the 16-byte v1
                                  struct, looping on NVML_ERROR_INSUFFICIENT_SIZE).
Prints one line per reading ("name key=value ..."), then "done". Checks nothing itself:
the test compares the numbers.
"""
import ctypes
import json
import os
import subprocess
import sys


def out(name, **kv):
    print(name, " ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def monitor():
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    m = pynvml.nvmlDeviceGetMemoryInfo(h)
    out("pynvml_v1", total=m.total, used=m.used, free=m.free)
    m = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    out("pynvml_v2", total=m.total, used=m.used, free=m.free, reserved=m.reserved)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    out("pynvml_procs", n=len(procs), used=sum(p.usedGpuMemory or 0 for p in procs))
    pynvml.nvmlShutdown()

    from nvitop import Device

    d = Device(0)
    out("nvitop_api", total=d.memory_total(), used=d.memory_used(), free=d.memory_free())

    bindir = os.path.dirname(sys.executable)
    g = subprocess.run([os.path.join(bindir, "gpustat"), "--json"], capture_output=True,
                       text=True, check=True)
    gpu = json.loads(g.stdout)["gpus"][0]
    out("gpustat", total_mib=gpu["memory.total"], used_mib=gpu["memory.used"])
    sys.stderr.write(g.stdout)
    n = subprocess.run([os.path.join(bindir, "nvitop"), "-1"], capture_output=True,
                       text=True, check=True)
    sys.stderr.write(n.stdout + n.stderr)
    # The memory cell of the device line, e.g. "300.0MiB / 1024MiB" or "0B / 16384MiB".
    cell = [l for l in n.stdout.splitlines() if "MiB │" in l][0].split("│")[2].strip()
    out("nvitop_cli", memory=cell.replace(" ", ""))


class ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


def torch(nbytes):
    from cuda.bindings import driver as cu

    (err,) = cu.cuInit(0)
    assert err == cu.CUresult.CUDA_SUCCESS, err
    err, dev = cu.cuDeviceGet(0)
    err, ctx = cu.cuDevicePrimaryCtxRetain(dev)
    (err,) = cu.cuCtxSetCurrent(ctx)
    err, ptr = cu.cuMemAlloc(nbytes)
    assert err == cu.CUresult.CUDA_SUCCESS, err

    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0
    bus_id = "%08X:%02X:%02X.0" % (0, 0, 0)
    handle = ctypes.c_void_p()
    rc = nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), ctypes.byref(handle))
    assert rc == 0, rc
    count = ctypes.c_uint(0)
    infos = None
    while True:
        rc = nvml.nvmlDeviceGetComputeRunningProcesses(handle, ctypes.byref(count), infos)
        if rc != 7:  # NVML_ERROR_INSUFFICIENT_SIZE
            break
        infos = (ProcessInfoV1 * count.value)()
    assert rc == 0, rc
    mine = [infos[i].usedGpuMemory for i in range(count.value) if infos[i].pid == os.getpid()]
    out("torch_procs", rc=rc, n=count.value, mine=sum(mine))
    cu.cuMemFree(ptr)


if __name__ == "__main__":
    if sys.argv[1] == "monitor":
        monitor()
    else:
        torch(int(sys.argv[2]))
    print("done", flush=True)
