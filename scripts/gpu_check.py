"""The checks of scripts/gpu-check.sh, one per invocation (see that script for the list).

    gpu_check.py CHECK --quota BYTES --lib LIBCUQUOTA --work DIR [--dry-run]
    gpu_check.py summary --work DIR --quota BYTES [--json FILE] CHECK...
    gpu_check.py parse-size SIZE

A check runs here without the interposer and starts its workload as a child process of this
same file (`--child`) under LD_PRELOAD, so that it can read the child's trace, which is only
complete once the child has exited. It prints one `PASS name: ...` or `FAIL name: ...` line
and writes DIR/result.json. Uses only the standard library outside the children; installs
nothing.
"""

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time

MIB = 1 << 20
GIB = 1 << 30
# Tensor/array size for the fills: a multiple of 2 MiB (PyTorch's large-segment rounding) and
# of 20 MiB (its expandable-segment page), so every allocator is charged exactly n × CHUNK.
CHUNK = 640 * MIB
OVERHEAD_PAIRS = 10_000
# The interposer may cost at most this factor on a cudaMalloc/cudaFree pair.
OVERHEAD_LIMIT = 1.5
HERE = os.path.abspath(__file__)


def human(n):
    """cuquota's human size: `N B` below 1 KiB, else two decimals of the largest unit."""
    if n < 1024:
        return f"{n} B"
    for unit, size in (("TiB", 1 << 40), ("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    raise AssertionError


def parse_size(text):
    """A size as CUQUOTA_LIMIT takes it (no percentages: the checks need absolute bytes)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(i?)(b?))?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 8GiB, 6144MiB, 8589934592)")
    number, unit, binary, b = m.groups()
    power = "kmgt".index(unit.lower()) + 1 if unit else 0
    base = 1000 if (unit and b and not binary) else 1024
    return int(float(number) * base**power)


# ---------------------------------------------------------------------------------------
# Children: the workloads, run under LD_PRELOAD. Each prints `RESULT {json}` last.
# ---------------------------------------------------------------------------------------


def result(**values):
    print("RESULT " + json.dumps(values), flush=True)


def child_torch(quota):
    import torch

    free0, total = torch.cuda.mem_get_info()
    props_total = torch.cuda.get_device_properties(0).total_memory
    tensors, oom = [], None
    try:
        while len(tensors) <= quota // CHUNK:  # bounded: one more than can fit
            tensors.append(torch.empty(CHUNK, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e:
        oom = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    stats = torch.cuda.memory_stats()
    try:
        segments = [[s["address"], s["total_size"]] for s in torch.cuda.memory_snapshot()]
    except Exception:  # the cudaMallocAsync backend keeps no snapshot
        segments = None
    reserved = torch.cuda.memory_reserved()
    allocated = torch.cuda.memory_allocated()
    # This call is also the trace's marker: its meminfo event comes after every allocation
    # above and before any free below.
    free_full, _ = torch.cuda.mem_get_info()
    n = len(tensors)
    del tensors[:]
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    free_end, _ = torch.cuda.mem_get_info()
    result(
        free0=free0,
        total=total,
        props_total=props_total,
        tensors=n,
        oom=oom,
        segments_allocated=stats.get("segment.all.allocated"),
        segments=segments,
        reserved=reserved,
        allocated=allocated,
        free_full=free_full,
        free_end=free_end,
        device=torch.cuda.get_device_name(0),
    )


def child_jax(quota):
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    small = jnp.ones((MIB,), dtype=jnp.uint8)
    small.block_until_ready()
    stats = dev.memory_stats() or {}
    error = None
    try:
        big = jnp.ones((quota + 256 * MIB,), dtype=jnp.uint8)
        big.block_until_ready()
    except Exception as e:
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    result(
        device=str(dev),
        platform=dev.platform,
        bytes_limit=stats.get("bytes_limit"),
        bytes_in_use=stats.get("bytes_in_use"),
        error=error,
    )


def child_cupy(quota, mode):
    import cupy

    rt = cupy.cuda.runtime
    if mode == "async":
        pool = cupy.cuda.MemoryAsyncPool()
    else:
        pool = cupy.get_default_memory_pool()
    cupy.cuda.set_allocator(pool.malloc)
    free0, total = rt.memGetInfo()
    arrays, oom = [], None
    try:
        while len(arrays) <= quota // CHUNK:
            arrays.append(cupy.empty((CHUNK,), dtype=cupy.uint8))
    except (cupy.cuda.memory.OutOfMemoryError, rt.CUDARuntimeError) as e:
        oom = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    free_full, _ = rt.memGetInfo()
    n = len(arrays)
    del arrays[:]
    pool.free_all_blocks()
    cupy.cuda.Device().synchronize()
    free_end, _ = rt.memGetInfo()
    result(
        free0=free0,
        total=total,
        arrays=n,
        oom=oom,
        free_full=free_full,
        free_end=free_end,
    )


def child_overhead():
    import cupy

    rt = cupy.cuda.runtime
    rt.free(rt.malloc(MIB))  # context creation is not what is measured
    best = math.inf
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(OVERHEAD_PAIRS):
            rt.free(rt.malloc(MIB))
        best = min(best, time.perf_counter() - t)
    result(seconds=best, pairs=OVERHEAD_PAIRS)


# ---- VMM lifetimes (ctypes on libcuda.so.1; no framework) ----

SEGMENT = 512 * MIB


class Driver:
    """The few driver calls the VMM check makes, through ctypes; every call must succeed
    unless `ok` is given a list of acceptable results."""

    def __init__(self):
        import ctypes

        self.c = ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.call("cuInit", 0)
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), 0)
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        self.call("cuCtxSetCurrent", ctx)

        class Location(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

        class Prop(ctypes.Structure):
            _fields_ = [
                ("type", ctypes.c_int),
                ("handle_types", ctypes.c_int),
                ("location", Location),
                ("win32", ctypes.c_void_p),
                ("flags", ctypes.c_ubyte * 8),
            ]

        class Access(ctypes.Structure):
            _fields_ = [("location", Location), ("flags", ctypes.c_int)]

        self.prop = Prop(type=1, location=Location(type=1, id=0))
        self.access = Access(location=Location(type=1, id=0), flags=3)

    def call(self, name, *args, ok=(0,)):
        """`ok=None` accepts any result."""
        rc = getattr(self.lib, name)(*args)
        if ok is not None and rc not in ok:
            raise RuntimeError(f"{name} returned {rc}")
        return rc

    def free(self):
        free, total = self.c.c_size_t(), self.c.c_size_t()
        self.call("cuMemGetInfo_v2", self.c.byref(free), self.c.byref(total))
        return free.value

    def create(self, size, ok=(0,)):
        h = self.c.c_ulonglong()
        rc = self.call("cuMemCreate", self.c.byref(h), self.c.c_size_t(size), self.c.byref(self.prop), self.c.c_ulonglong(0), ok=ok)
        return h.value if rc == 0 else None

    def reserve(self, size):
        va = self.c.c_ulonglong()
        self.call("cuMemAddressReserve", self.c.byref(va), self.c.c_size_t(size), self.c.c_size_t(0), self.c.c_ulonglong(0), self.c.c_ulonglong(0))
        return va.value

    def map(self, va, size, h):
        u64, sz = self.c.c_ulonglong, self.c.c_size_t
        self.call("cuMemMap", u64(va), sz(size), sz(0), u64(h), u64(0))
        self.call("cuMemSetAccess", u64(va), sz(size), self.c.byref(self.access), sz(1))

    def unmap(self, va, size):
        self.call("cuMemUnmap", self.c.c_ulonglong(va), self.c.c_size_t(size))

    def release(self, h):
        self.call("cuMemRelease", self.c.c_ulonglong(h))

    def retain(self, va):
        h = self.c.c_ulonglong()
        self.call("cuMemRetainAllocationHandle", self.c.byref(h), self.c.c_void_p(va))
        return h.value

    def address_free(self, va, size, ok=(0,)):
        return self.call("cuMemAddressFree", self.c.c_ulonglong(va), self.c.c_size_t(size), ok=ok)

    def samples_pattern(self, size, ok=(0,)):
        """cuMemCreate, reserve, map, set access, cuMemRelease: (va) or None if refused."""
        h = self.create(size, ok=ok)
        if h is None:
            return None
        va = self.reserve(size)
        self.map(va, size, h)
        self.release(h)
        return va


def child_vmm_raw():
    """The real driver's VMM lifetimes, without cuquota: when does the memory come back?"""
    d = Driver()
    held = lambda base: base - d.free()
    base = d.free()
    va = d.samples_pattern(SEGMENT)
    after_release = held(base)
    d.unmap(va, SEGMENT)
    after_unmap = held(base)
    d.address_free(va, SEGMENT)
    # retain + release around a mapped allocation (NCCL's free path)
    h = d.create(SEGMENT)
    va = d.reserve(SEGMENT)
    d.map(va, SEGMENT, h)
    d.release(d.retain(va + 4096))
    d.release(h)
    after_retain_release = held(base)
    d.unmap(va, SEGMENT)
    after_retain_unmap = held(base)
    d.address_free(va, SEGMENT)
    # freeing a reservation that is still mapped
    va = d.samples_pattern(SEGMENT)
    rc = d.address_free(va, SEGMENT, ok=None)
    after_address_free = held(base)
    if rc != 0:
        d.unmap(va, SEGMENT)
        d.address_free(va, SEGMENT)
    result(
        after_release=after_release,
        after_unmap=after_unmap,
        after_retain_release=after_retain_release,
        after_retain_unmap=after_retain_unmap,
        address_free_mapped_rc=rc,
        after_address_free=after_address_free,
    )


def child_vmm(quota):
    """Under cuquota: the samples' pattern fills exactly the quota, unmaps give it back."""
    d = Driver()
    fit = quota // SEGMENT
    mapped = []
    refused = 0
    for _ in range(fit + 2):
        va = d.samples_pattern(SEGMENT, ok=(0, 2))
        if va is None:
            refused += 1
        else:
            mapped.append(va)
    for va in mapped:
        d.unmap(va, SEGMENT)
        d.address_free(va, SEGMENT)
    again = 0
    for _ in range(fit):
        va = d.samples_pattern(SEGMENT, ok=(0, 2))
        if va is not None:
            again += 1
            d.unmap(va, SEGMENT)
            d.address_free(va, SEGMENT)
    result(fit=fit, mapped=len(mapped), refused=refused, again=again)


def child_ctx_reset():
    """The driver API through ctypes (as dlsym on libcuda.so.1, which cuquota hooks): a
    plain and a stream-ordered (default pool) allocation of 512 MiB each, then
    cuDevicePrimaryCtxReset; cuMemGetInfo before, while held, and after (the trace's meminfo
    events keep the real figures next to the ones told)."""
    import ctypes

    cu = ctypes.CDLL("libcuda.so.1")
    size_t, ptr = ctypes.c_size_t, ctypes.c_void_p

    def call(name, *args):
        rc = getattr(cu, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} returned {rc}")

    def info():
        free, total = size_t(0), size_t(0)
        call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value

    def make_current():
        ctx = ptr()
        call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), ctypes.c_int(0))
        call("cuCtxSetCurrent", ctx)

    call("cuInit", ctypes.c_uint(0))
    make_current()
    free0 = info()
    plain, pooled = ctypes.c_uint64(0), ctypes.c_uint64(0)
    call("cuMemAlloc_v2", ctypes.byref(plain), size_t(512 * MIB))
    call("cuMemAllocAsync", ctypes.byref(pooled), size_t(512 * MIB), ptr(0))
    call("cuStreamSynchronize", ptr(0))
    free_held = info()
    call("cuDevicePrimaryCtxReset_v2", ctypes.c_int(0))
    make_current()
    free_after = info()
    result(free0=free0, free_held=free_held, free_after=free_after)


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
    "ctx-reset": lambda a: child_ctx_reset(),
    "torch": lambda a: child_torch(a.quota),
    "jax": lambda a: child_jax(a.quota),
    "cupy-default": lambda a: child_cupy(a.quota, "default"),
    "cupy-async": lambda a: child_cupy(a.quota, "async"),
    "overhead": lambda a: child_overhead(),
    "vmm-raw": lambda a: child_vmm_raw(),
    "vmm": lambda a: child_vmm(a.quota),
    "footprint-torch": lambda a: child_footprint(a.quota, "torch"),
    "footprint-torch-async": lambda a: child_footprint(a.quota, "torch-async"),
    "footprint-cupy-async": lambda a: child_footprint(a.quota, "cupy-async"),
    "footprint-jax": lambda a: child_footprint(a.quota, "jax"),
}

# ---------------------------------------------------------------------------------------
# Running a child and reading what it left
# ---------------------------------------------------------------------------------------

# Settings of cuquota and of the frameworks' allocators that would change what is measured.
SCRUBBED = ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING", "CUPY_GPU_MEMORY_LIMIT")
SCRUBBED_PREFIXES = ("CUQUOTA_", "XLA_PYTHON_CLIENT_")


class Child:
    def __init__(self, proc, trace):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        self.result = json.loads(lines[-1][len("RESULT ") :]) if lines else None
        self.cuquota = [l for l in proc.stderr.splitlines() if l.startswith("cuquota[")]
        self.events = []
        if trace and os.path.exists(trace):
            with open(trace) as f:
                self.events = [json.loads(l) for l in f if l.strip()]
            # Threads' events may reach the file out of order; the replay needs time order.
            self.events.sort(key=lambda e: e.get("t_ns", 0))

    def tail(self):
        return " | ".join((self.stderr.strip().splitlines() or ["(no stderr)"])[-5:])

    def refusals(self):
        """(bytes, api) of each refusal line."""
        out = []
        for line in self.cuquota:
            m = re.search(r"GPU \d+ refused .* \((\d+) bytes\) via (\S+): quota", line)
            if m:
                out.append((int(m.group(1)), m.group(2)))
        return out

    def kinds(self, kind):
        return [e for e in self.events if e.get("type") == kind]


def child_env(args, preload, extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in SCRUBBED and not k.startswith(SCRUBBED_PREFIXES)
    }
    if preload:
        env["LD_PRELOAD"] = args.lib
        env["CUQUOTA_LIMIT"] = str(args.quota)
        # The checks before the footprint ones compare the trace's allocations with what the
        # frameworks hold: the quota counts allocations only there (the footprint
        # checks set footprint, the default).
        env["CUQUOTA_COUNT"] = "allocations"
    env.update(extra)
    return env


def describe(cmd, env, base=None):
    base = base if base is not None else os.environ
    changed = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()) if base.get(k) != v]
    removed = sorted(k for k in base if k not in env)
    unset = ["env"] + [f"-u {k}" for k in removed] if removed else []
    return " ".join(unset + changed + [shlex.quote(c) for c in cmd])


def run_child(args, cmd, preload=True, extra=None, trace=True, name="child"):
    extra = dict(extra or {})
    trace_path = os.path.join(args.work, f"{name}.trace.jsonl")
    if preload and trace:
        extra["CUQUOTA_TRACE"] = trace_path
    env = child_env(args, preload, extra)
    if args.dry_run:
        print("  " + describe(cmd, env))
        return None
    if os.path.exists(trace_path):
        os.remove(trace_path)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    with open(os.path.join(args.work, f"{name}.stderr"), "w") as f:
        f.write(proc.stderr)
    return Child(proc, trace_path if preload and trace else None)


def nvidia_smi(query):
    """Rows of `nvidia-smi --query-…=… --format=csv,noheader,nounits` (MiB figures), or
    None when it cannot be run."""
    try:
        out = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


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


def python_child(args, kind, **kw):
    cmd = [sys.executable, HERE, "--child", kind, "--quota", str(args.quota)]
    return run_child(args, cmd, name=kw.pop("name", kind), **kw)


def live_at_marker(events, marker_free):
    """Replays the trace's alloc/free events up to the first meminfo event, after the last
    refusal, that told `marker_free` as free: the live allocations then, {ptr: (bytes, api)}."""
    last_refusal = max((i for i, e in enumerate(events) if e["type"] == "refused"), default=-1)
    live = {}
    for i, e in enumerate(events):
        if e["type"] == "alloc":
            live[e["ptr"]] = (e["bytes"], e["api"])
        elif e["type"] == "free":
            live.pop(e["ptr"], None)
        elif e["type"] == "meminfo" and i > last_refusal and e.get("told_free") == marker_free:
            return live
    return None


# ---------------------------------------------------------------------------------------
# The checks (run in the parent): each returns (numbers, problems)
# ---------------------------------------------------------------------------------------


def expect(problems, cond, text):
    if not cond:
        problems.append(text)


def check_child_ran(child, problems):
    if child.result is None:
        problems.append(f"the workload did not finish (rc {child.rc}): {child.tail()}")
        return False
    return True


def torch_check(args, alloc_conf, name):
    extra = {"PYTORCH_CUDA_ALLOC_CONF": alloc_conf} if alloc_conf else {}
    child = python_child(args, "torch", extra=extra, name=name)
    if child is None:
        return {}, []
    problems = []
    if not check_child_ran(child, problems):
        return {}, problems
    r = child.result
    q = args.quota
    fit = r["free0"] // CHUNK
    refusals = child.refusals()
    numbers = {
        "device": r["device"],
        "mem_get_info_total": r["total"],
        "props_total_memory": r["props_total"],
        "free_at_start": r["free0"],
        "tensors": r["tensors"],
        "tensor_bytes": CHUNK,
        "oom": r["oom"],
        "reserved": r["reserved"],
        "in_use_by_cuquota": r["total"] - r["free_full"],
        "free_after_empty_cache": r["free_end"],
        "refusals": [f"{human(b)} via {api}" for b, api in refusals],
        "trace_allocs": len(child.kinds("alloc")),
        "trace_apis": sorted({e["api"] for e in child.kinds("alloc")}),
        "segment.all.allocated": r["segments_allocated"],
    }
    expect(problems, r["total"] == q, f"mem_get_info total {r['total']} != quota {q}")
    expect(problems, r["props_total"] == q, f"total_memory {r['props_total']} != quota {q}")
    expect(problems, r["tensors"] == fit, f"{r['tensors']} tensors fit, expected {fit}")
    expect(problems, (r["oom"] or "").startswith("OutOfMemoryError"), f"no OutOfMemoryError: {r['oom']}")
    expect(problems, refusals, "no refusal line on stderr")
    expect(problems, r["free_end"] == r["free0"], f"free after empty_cache {r['free_end']} != {r['free0']} at start")

    live = live_at_marker(child.events, r["free_full"])
    if live is None:
        problems.append("no meminfo marker in the trace")
        return numbers, problems
    live_bytes = sum(b for b, _ in live.values())
    numbers["trace_live_bytes"] = live_bytes
    # What torch holds, by its own count, is what the trace says is charged.
    held = r["allocated"] if "cudaMallocAsync" in (alloc_conf or "") else r["reserved"]
    expect(problems, live_bytes == held, f"trace live {live_bytes} != torch's {held}")
    expect(problems, live_bytes == r["total"] - r["free_full"], "trace live bytes != total - free")
    if r["segments"] is not None and not alloc_conf:
        # Native allocator: each segment is one cudaMalloc, so each must be a live alloc.
        by_addr = {int(p, 16): b for p, (b, _) in live.items()}
        missing = [s for s in r["segments"] if by_addr.get(s[0]) != s[1]]
        numbers["segments_in_trace"] = f"{len(r['segments']) - len(missing)}/{len(r['segments'])}"
        expect(problems, not missing, f"segments missing from the trace: {missing[:3]}")
        expect(
            problems,
            len(child.kinds("alloc")) == r["segments_allocated"],
            f"{len(child.kinds('alloc'))} trace allocs != segment.all.allocated {r['segments_allocated']}",
        )
    return numbers, problems


def jax_check(args):
    child = python_child(
        args,
        "jax",
        extra={"JAX_PLATFORMS": "cuda", "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    if child is None:
        return {}, []
    problems = []
    if not check_child_ran(child, problems):
        return {}, problems
    r = child.result
    q = args.quota
    allocs = child.kinds("alloc")
    biggest = max(allocs, key=lambda e: e["bytes"], default=None)
    numbers = {
        "device": r["device"],
        "bytes_limit": r["bytes_limit"],
        "bytes_limit_over_quota": r["bytes_limit"] / q if r["bytes_limit"] else None,
        "error": r["error"],
        "largest_trace_alloc": biggest and f"{biggest['bytes']} via {biggest['api']}",
    }
    expect(problems, r["platform"] in ("gpu", "cuda"), f"JAX runs on {r['platform']}")
    limit = r["bytes_limit"] or 0
    expect(problems, abs(limit - 0.75 * q) <= 0.01 * q, f"bytes_limit {limit} is not 0.75 × {q}")
    err = r["error"] or ""
    expect(problems, "RESOURCE_EXHAUSTED" in err, f"no RESOURCE_EXHAUSTED for {human(q + 256 * MIB)}: {err}")
    return numbers, problems


def cupy_check(args, mode):
    child = python_child(args, f"cupy-{mode}")
    if child is None:
        return {}, []
    problems = []
    if not check_child_ran(child, problems):
        return {}, problems
    r = child.result
    q = args.quota
    fit = r["free0"] // CHUNK
    refusals = child.refusals()
    numbers = {
        "mem_info_total": r["total"],
        "arrays": r["arrays"],
        "array_bytes": CHUNK,
        "oom": r["oom"],
        "in_use_by_cuquota": r["total"] - r["free_full"],
        "free_at_end": r["free_end"],
        "refusals": [f"{human(b)} via {api}" for b, api in refusals],
    }
    expect(problems, r["total"] == q, f"memGetInfo total {r['total']} != quota {q}")
    expect(problems, r["arrays"] == fit, f"{r['arrays']} arrays fit, expected {fit}")
    oom = r["oom"] or ""
    expect(
        problems,
        oom.startswith("OutOfMemoryError") or "cudaErrorMemoryAllocation" in oom,
        f"no out-of-memory error: {oom}",
    )
    expect(problems, r["total"] - r["free_full"] == r["arrays"] * CHUNK, "charged != arrays × size")
    expect(problems, refusals and refusals[0][0] == CHUNK, f"refusal lines: {refusals}")
    expect(problems, r["free_end"] == r["free0"], f"free at end {r['free_end']} != {r['free0']}")
    return numbers, problems


def bfc_expectation(limit, target):
    """What tests/clients/bfc_growth.c does under `limit` (nothing else on the GPU): the
    region refused first, the sizes refused, and the size it got (None: gave up)."""
    total, region, n = 0, 2 * MIB, 0
    while total < target and n < 64:
        if total + region <= limit:
            total += region
            region *= 2
            n += 1
            continue
        refused, ask = [], region
        while total + ask > limit:
            refused.append(ask)
            ask = ask * 9 // 10
            if ask < 2 * MIB:
                return n + 1, region, refused, None
        return n + 1, region, refused, ask
    return n, None, [], None


def bfc_check(args):
    binary = os.path.join(args.work, "bfc_growth")
    # 3/4 of the quota: at 8 GiB, the README's demo numbers (6 GiB, region 12 of 4 GiB
    # refused with 2050 MiB left), here on the real driver.
    limit = args.quota * 3 // 4
    target = 2 * limit  # grow until refused
    cmd = [binary, str(target)]
    extra = {"CUQUOTA_LIMIT": str(limit)}
    child = run_child(args, cmd, extra=extra, name="bfc")
    if child is None:
        return {}, []
    problems = []
    n, region, refused, got = bfc_expectation(limit, target)
    numbers = {
        "quota": limit,
        "refusal_lines": len(child.refusals()),
        "stdout": [l for l in child.stdout.splitlines() if "refusal" in l or "training" in l],
        "backoff_line": next((l for l in child.cuquota if "backed off" in l), None),
    }
    expect(problems, child.rc == 0, f"exit status {child.rc}: {child.tail()}")
    if got is None:
        problems.append(f"quota {limit}: this workload would give up; pick another quota")
        return numbers, problems
    said = f"bfc: region {n}: asked {human(region)}, got {human(got)} after {len(refused)} refusal{'s' if len(refused) != 1 else ''}"
    expect(problems, said in child.stdout.splitlines(), f"stdout lacks: {said}")
    expect(problems, "5 ok, 0 refused" in child.stdout, "training steps were refused")
    first = child.refusals()[:1]
    expect(problems, first == [(region, "cuMemAlloc_v2")], f"first refusal {first}, expected {region} via cuMemAlloc_v2")
    # The outcome line names the time the fit came after; the rest is exact. (Only the
    # episode's first refusal has a line of its own at the default log level.)
    count = f"{len(refused)} refusal{'s' if len(refused) != 1 else ''}"
    backoff = (
        f"GPU 0: the caller backed off {' → '.join(human(b) for b in refused)} ({count}) and got {human(got)} ",
        " later; it keeps running (likely an allocator shrinking its request, e.g. TensorFlow allow_growth)",
    )
    expect(problems, any(backoff[0] in l and l.endswith(backoff[1]) for l in child.cuquota), f"no back-off line: {backoff}")
    expect(problems, len(child.refusals()) == 1, f"{len(child.refusals())} refusal lines, expected the episode's first only")
    return numbers, problems


def array_lines(child):
    """{shape: {rc, drop, twin, twin_rc, destroy_rc}} from tests/clients/array_sizes.c."""
    shapes = {}
    for line in child.stdout.splitlines():
        words = line.split()
        if words[:1] == ["shape"] and len(words) > 2:
            shapes[words[1]] = {k: int(v) for k, v in (w.split("=", 1) for w in words[2:])}
    return shapes


def arrays_check(args):
    binary = os.path.join(args.work, "array_sizes")
    raw = run_child(args, [binary], preload=False, trace=False, name="arrays-raw")
    hooked = run_child(args, [binary], name="arrays-cuquota")
    if raw is None:
        return {}, []
    problems = []
    shapes, charged = array_lines(raw), array_lines(hooked)
    expect(problems, raw.rc == 0 and len(shapes) == 5, f"raw run: exit {raw.rc}, {len(shapes)} shapes: {raw.tail()}")
    numbers = {"shapes": shapes}
    for name, s in shapes.items():
        if s["twin_rc"] != 0:
            problems.append(f"{name}: the driver gives no requirements for a deferred-mapping twin (rc {s['twin_rc']}): cuquota charges the estimate")
            continue
        # The driver's free memory moves in pages of its own: allow 4 MiB or 2 %.
        slack = max(4 * MIB, s["twin"] // 50)
        expect(problems, abs(s["drop"] - s["twin"]) <= slack, f"{name}: free memory dropped {s['drop']}, the twin says {s['twin']}")
        numbers[f"{name}_drop_minus_twin"] = s["drop"] - s["twin"]
    # Under cuquota the virtualised free memory drops by exactly what it charged, and the
    # trace charges each array its twin's size and credits it at the destroy.
    expect(problems, hooked.rc == 0, f"under cuquota: exit {hooked.rc}: {hooked.tail()}")
    allocs = [e for e in hooked.kinds("alloc") if e["api"] in ("cuArray3DCreate_v2", "cuMipmappedArrayCreate")]
    frees = [e for e in hooked.kinds("free") if e["api"] in ("cuArrayDestroy", "cuMipmappedArrayDestroy")]
    expect(problems, [e["bytes"] for e in allocs] == [s["twin"] for s in shapes.values()], f"charged {[e['bytes'] for e in allocs]}, twins {[s['twin'] for s in shapes.values()]}")
    expect(problems, len(frees) == len(allocs), f"{len(allocs)} arrays charged, {len(frees)} credited")
    for name, s in charged.items():
        expect(problems, s["drop"] == s["twin"], f"{name} under cuquota: told free dropped {s['drop']}, charged {s['twin']}")
    return numbers, problems


def overhead_check(args):
    raw = python_child(args, "overhead", preload=False, trace=False, name="overhead-raw")
    hooked = python_child(args, "overhead", trace=False, name="overhead-cuquota")
    if raw is None:
        return {}, []
    problems = []
    if not (check_child_ran(raw, problems) and check_child_ran(hooked, problems)):
        return {}, problems
    t0, t1 = raw.result["seconds"], hooked.result["seconds"]
    ratio = t1 / t0
    summary = next((l for l in hooked.cuquota if " summary: " in l), "")
    m = re.search(r", (\d+) allocations,", summary)
    counted = int(m.group(1)) if m else 0
    numbers = {
        "pairs": OVERHEAD_PAIRS,
        "us_per_pair_without": round(t0 / OVERHEAD_PAIRS * 1e6, 3),
        "us_per_pair_with": round(t1 / OVERHEAD_PAIRS * 1e6, 3),
        "ratio": round(ratio, 3),
        "allocations_counted": counted,
    }
    # 1 warm-up + 3 rounds: proof that the pairs went through the interposer at all.
    expect(problems, counted >= 3 * OVERHEAD_PAIRS, f"cuquota counted {counted} allocations")
    expect(problems, ratio <= OVERHEAD_LIMIT, f"ratio {ratio:.3f} > {OVERHEAD_LIMIT}")
    return numbers, problems


def vmm_check(args):
    """The real driver frees a cuMemCreate allocation only once it is released and unmapped
    (what the shim models and cuquota charges); under cuquota the samples' pattern fits
    exactly quota / 512 MiB times, and the unmaps give it all back."""
    raw = python_child(args, "vmm-raw", preload=False, trace=False, name="vmm-raw")
    hooked = python_child(args, "vmm", name="vmm")
    if raw is None:
        return {}, []
    problems = []
    if not (check_child_ran(raw, problems) and check_child_ran(hooked, problems)):
        return {}, problems
    r, h = raw.result, hooked.result
    numbers = {**{f"raw_{k}": v for k, v in r.items()}, **h}
    # The card's free memory moves in pages; a margin of 64 MiB tells held from freed.
    held = lambda n: n >= SEGMENT - 64 * MIB
    expect(problems, held(r["after_release"]), "released but mapped memory was freed at the release")
    expect(problems, not held(r["after_unmap"]), "the unmap did not free it")
    expect(problems, held(r["after_retain_release"]), "retain + release freed mapped memory")
    expect(problems, not held(r["after_retain_unmap"]), "the unmap after retain + release did not free it")
    expect(problems, h["mapped"] == h["fit"], f"{h['mapped']} of {h['fit']} samples-pattern creations fit")
    expect(problems, h["refused"] == 2, f"{h['refused']} refusals, not 2")
    expect(problems, h["again"] == h["fit"], f"after the unmaps only {h['again']} fit again")
    return numbers, problems


def ctx_reset_check(args):
    """cuDevicePrimaryCtxReset frees every allocation of the context, the stream-ordered
    pool's included (cuquota credits both at the reset; this checks that reading
    against the driver's own free memory)."""
    child = python_child(args, "ctx-reset")
    if child is None:
        return {}, []
    problems = []
    if not check_child_ran(child, problems):
        return {}, problems
    meminfo = child.kinds("meminfo")
    contexts = child.kinds("context")
    numbers = {
        "told_free_before": child.result["free0"],
        "told_free_held": child.result["free_held"],
        "told_free_after": child.result["free_after"],
        "context_events": len(contexts),
    }
    expect(problems, len(meminfo) == 3, f"{len(meminfo)} meminfo events, expected 3")
    if len(meminfo) == 3:
        real = [e["real_free"] for e in meminfo]
        numbers.update(real_free_before=real[0], real_free_held=real[1], real_free_after=real[2])
        # Held: at least the 1 GiB asked (the pool may reserve more); after: all of it back,
        # give or take the context's own bookkeeping.
        expect(problems, real[0] - real[1] >= GIB, f"the driver's free fell by {real[0] - real[1]} < 1 GiB")
        expect(problems, real[2] >= real[0] - 64 * MIB, f"the reset gave back {real[2] - real[1]} of {real[0] - real[1]}: pool memory outlived it")
    expect(problems, child.result["free_held"] == child.result["free0"] - GIB, "cuquota did not charge 1 GiB")
    expect(problems, child.result["free_after"] == child.result["free0"], "cuquota did not credit the reset")
    expect(problems, len(contexts) == 1, f"{len(contexts)} context events, expected 1")
    if contexts:
        c = contexts[0]
        numbers.update(context_count=c.get("count"), context_bytes=c.get("bytes"))
        expect(problems, (c.get("count"), c.get("bytes")) == (2, GIB), f"context event {c}")
    return numbers, problems


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
    "ctx-reset": ctx_reset_check,
    "torch-default": lambda a: torch_check(a, None, "torch-default"),
    "torch-expandable": lambda a: torch_check(a, "expandable_segments:True", "torch-expandable"),
    "torch-async": lambda a: torch_check(a, "backend:cudaMallocAsync", "torch-async"),
    "jax": jax_check,
    "cupy-default": lambda a: cupy_check(a, "default"),
    "cupy-async": lambda a: cupy_check(a, "async"),
    "bfc-growth": bfc_check,
    "arrays": arrays_check,
    "overhead": overhead_check,
    "vmm": vmm_check,
    "footprint-torch": lambda a: footprint_check(a, "torch"),
    "footprint-torch-async": lambda a: footprint_check(
        a, "torch-async", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    ),
    "footprint-cupy-async": lambda a: footprint_check(a, "cupy-async"),
    "footprint-jax": lambda a: footprint_check(a, "jax", {"JAX_PLATFORMS": "cuda", "TF_CPP_MIN_LOG_LEVEL": "2"}),
}


def short(numbers):
    """The PASS/FAIL line's numbers: scalars only, sizes in bytes."""
    return " ".join(f"{k}={v}" for k, v in numbers.items() if isinstance(v, (int, float)) and not isinstance(v, bool))


def run_check(args):
    os.makedirs(args.work, exist_ok=True)
    if args.dry_run:
        print(f"  [{args.check}] runs:")
    start = time.monotonic()
    try:
        numbers, problems = CHECKS[args.check](args)
    except subprocess.TimeoutExpired:
        numbers, problems = {}, [f"the workload ran past {args.timeout} s"]
    except Exception as e:  # a bug here must be a FAIL line, not a missing one
        numbers, problems = {}, [f"the check itself failed: {type(e).__name__}: {e}"]
    if args.dry_run:
        return 0
    seconds = round(time.monotonic() - start, 1)
    status = "FAIL" if problems else "PASS"
    record = {"name": args.check, "status": status, "seconds": seconds, "numbers": numbers, "problems": problems}
    with open(os.path.join(args.work, "result.json"), "w") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
    why = f" -- {'; '.join(problems)}" if problems else ""
    print(f"{status} {args.check} ({seconds} s): {short(numbers)}{why}", flush=True)
    return 0 if status == "PASS" else 1


def summary(args):
    """Collects DIR/CHECK/result.json of each check (a missing one is a FAIL) into one JSON."""
    checks = []
    for name in args.names:
        path = os.path.join(args.work, name, "result.json")
        try:
            with open(path) as f:
                checks.append(json.load(f))
        except (OSError, ValueError):
            rc_file = os.path.join(args.work, name, "rc")
            rc = open(rc_file).read().strip() if os.path.exists(rc_file) else "unknown"
            if rc == "not run":
                why = "not run: the 8-minute budget was spent"
            else:
                why = f"timed out or crashed before writing a result (exit status {rc})"
            checks.append({"name": name, "status": "FAIL", "numbers": {}, "problems": [why]})
    passed = sum(c["status"] == "PASS" for c in checks)
    doc = {"quota": args.quota, "passed": passed, "failed": len(checks) - passed, "checks": checks}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
    print(f"{passed} passed, {len(checks) - passed} failed")
    return 0 if passed == len(checks) else 1


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "parse-size":
        try:
            print(parse_size(sys.argv[2]))
            return 0
        except ValueError as e:
            print(f"gpu_check: {e}", file=sys.stderr)
            return 2
    p = argparse.ArgumentParser()
    p.add_argument("check", nargs="?")
    p.add_argument("names", nargs="*")
    p.add_argument("--child")
    p.add_argument("--quota", type=int, required=True)
    p.add_argument("--lib")
    p.add_argument("--work")
    p.add_argument("--json")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_intermixed_args()
    if args.child:
        CHILDREN[args.child](args)
        return 0
    if args.check == "summary":
        return summary(args)
    if args.check not in CHECKS:
        p.error(f"unknown check {args.check!r}; one of {', '.join(CHECKS)}")
    args.lib = os.path.abspath(args.lib)
    args.work = os.path.abspath(args.work)
    return run_check(args)


sys.exit(main())
