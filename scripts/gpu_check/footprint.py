"""Under CUQUOTA_COUNT=footprint: what NVML says a process holds never passes the quota
(by more than FOOTPRINT_TOLERANCE), whatever the framework keeps cached."""

import os
import subprocess
import sys
import time

from common import CHUNK, HERE, MIB, Child, check_child_ran, child_env, describe, expect, human, nvidia_smi, result

# ---- Footprint: what NVML says the process holds, against the quota ----


def driver_fill(quota):
    """Plain cuMemAlloc_v2 of CHUNK through ctypes (dlsym on libcuda.so.1) until refused:
    how many fit after a framework has "freed" its memory. Returns the count."""
    import ctypes

    cu = ctypes.CDLL("libcuda.so.1")
    held, n = [], 0
    while n <= quota // CHUNK:
        p = ctypes.c_uint64(0)
        if cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(CHUNK)) != 0:
            break
        held.append(p)
        n += 1
    time.sleep(0.5)  # the parent samples NVML while this is held
    for p in held:
        cu.cuMemFree_v2(p)
    return n


def child_footprint(quota, framework):
    """Fills the quota through a framework, lets the framework "free" it (its pool may keep
    it), then fills again with plain cuMemAlloc: the second fill must find the first's
    memory still counted (or trimmed), never twice the quota on the card."""
    if framework in ("torch", "torch-async"):
        import torch

        tensors = []
        try:
            while len(tensors) <= quota // CHUNK:
                tensors.append(torch.empty(CHUNK, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            pass
        first = len(tensors)
        time.sleep(0.5)
        del tensors[:]
        torch.cuda.synchronize()  # no empty_cache: the allocator keeps what it has
    elif framework == "cupy-async":
        import cupy

        pool = cupy.cuda.MemoryAsyncPool()
        cupy.cuda.set_allocator(pool.malloc)
        arrays = []
        try:
            while len(arrays) <= quota // CHUNK:
                arrays.append(cupy.empty((CHUNK,), dtype=cupy.uint8))
        except (cupy.cuda.memory.OutOfMemoryError, cupy.cuda.runtime.CUDARuntimeError):
            pass
        first = len(arrays)
        time.sleep(0.5)
        del arrays[:]
        cupy.cuda.Device().synchronize()
    elif framework == "jax":
        import jax.numpy as jnp

        x = jnp.ones((quota // 2,), dtype=jnp.uint8)
        x.block_until_ready()
        first = 1
        time.sleep(0.5)
        del x
    else:
        raise ValueError(framework)
    second = driver_fill(quota)
    result(first=first, second=second)

CHILDREN = {
    "footprint-torch": lambda a: child_footprint(a.quota, "torch"),
    "footprint-torch-async": lambda a: child_footprint(a.quota, "torch-async"),
    "footprint-cupy-async": lambda a: child_footprint(a.quota, "cupy-async"),
    "footprint-jax": lambda a: child_footprint(a.quota, "jax"),
}

def run_sampled(args, kind, extra):
    """Runs a python child under cuquota while sampling what NVML says it holds: the
    process's own used memory (compute apps, by pid) and the device's used memory above what
    it was before the child started. Returns (child, samples)."""
    cmd = [sys.executable, HERE, "--child", kind, "--quota", str(args.quota)]
    trace_path = os.path.join(args.work, f"{kind}.trace.jsonl")
    env = child_env(args, True, dict(extra, CUQUOTA_TRACE=trace_path))
    if args.dry_run:
        print("  " + describe(cmd, env) + "   (nvidia-smi sampled every 0.1 s)")
        return None, None
    if os.path.exists(trace_path):
        os.remove(trace_path)
    base = nvidia_smi("--query-gpu=memory.used")
    base = int(base[0][0]) if base else None
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples = {"process_mib": 0, "device_mib": 0, "pid_seen": False, "count": 0}
    deadline = time.monotonic() + args.timeout
    while proc.poll() is None and time.monotonic() < deadline:
        apps = nvidia_smi("--query-compute-apps=pid,used_memory") or []
        for pid, used in (row[:2] for row in apps if len(row) >= 2):
            if pid == str(proc.pid) and used.isdigit():
                samples["pid_seen"] = True
                samples["process_mib"] = max(samples["process_mib"], int(used))
        dev = nvidia_smi("--query-gpu=memory.used")
        if dev and base is not None and dev[0][0].isdigit():
            samples["device_mib"] = max(samples["device_mib"], int(dev[0][0]) - base)
        samples["count"] += 1
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    stdout, stderr = proc.communicate()
    with open(os.path.join(args.work, f"{kind}.stderr"), "w") as f:
        f.write(stderr)
    done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    return Child(done, trace_path), samples

# NVML figures are whole MiB, sampled every ~0.1 s, and a context's memory is measured once
# at its creation (lazy module loading can add to it later, corrected from NVML at most once a
# second): the footprint may pass the quota by this much before the check fails.
FOOTPRINT_TOLERANCE = 128 * MIB


def footprint_check(args, framework, extra=None):
    """Under the default CUQUOTA_COUNT=footprint, what NVML says the process holds never
    passes the quota (by more than FOOTPRINT_TOLERANCE), though the framework keeps freed
    memory cached and a plain cuMemAlloc fill follows; cuquota's own figure is printed
    beside NVML's."""
    kind = f"footprint-{framework}"
    extra = dict(extra or {}, CUQUOTA_COUNT="footprint", CUQUOTA_LOG_LEVEL="info")
    child, samples = run_sampled(args, kind, extra)
    if child is None:
        return {}, []
    problems = []
    if not check_child_ran(child, problems):
        return {"nvml": samples}, problems
    summary = next((e for e in child.events if e.get("type") == "summary"), None)
    dev0 = (summary or {}).get("devices", [{}])[0] if summary else {}
    q = args.quota
    nvml_bytes = (samples["process_mib"] if samples["pid_seen"] else samples["device_mib"]) * MIB
    numbers = {
        "first_fill_chunks": child.result["first"],
        "second_fill_chunks": child.result["second"],
        "nvml_peak_bytes": nvml_bytes,
        "nvml_source": "compute-apps pid" if samples["pid_seen"] else "device used - baseline",
        "nvml_samples": samples["count"],
        "cuquota_footprint_peak": dev0.get("peak"),
        "cuquota_context_peak": dev0.get("context_peak"),
        "cuquota_pool_cache_peak": dev0.get("pool_cache_peak"),
        "cuquota_trims": dev0.get("trims"),
        "tolerance_bytes": FOOTPRINT_TOLERANCE,
    }
    expect(problems, samples["count"] >= 3, f"only {samples['count']} NVML samples")
    expect(problems, nvml_bytes > 0, "NVML never saw the process's memory")
    expect(
        problems,
        nvml_bytes <= q + FOOTPRINT_TOLERANCE,
        f"NVML saw {human(nvml_bytes)} held, over the quota {human(q)} by more than {human(FOOTPRINT_TOLERANCE)}",
    )
    expect(problems, summary is not None, "no summary line in the trace")
    return numbers, problems

CHECKS = {
    "footprint-torch": lambda a: footprint_check(a, "torch"),
    "footprint-torch-async": lambda a: footprint_check(
        a, "torch-async", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    ),
    "footprint-cupy-async": lambda a: footprint_check(a, "cupy-async"),
    "footprint-jax": lambda a: footprint_check(a, "jax", {"JAX_PLATFORMS": "cuda", "TF_CPP_MIN_LOG_LEVEL": "2"}),
}
