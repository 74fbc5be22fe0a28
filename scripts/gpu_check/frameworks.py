"""PyTorch, JAX and CuPy under the quota: their children (the workloads) and checks."""

from common import CHUNK, MIB, check_child_ran, expect, human, python_child, result

# ---------------------------------------------------------------------------------------
# Children
# ---------------------------------------------------------------------------------------

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

CHILDREN = {
    "torch": lambda a: child_torch(a.quota),
    "jax": lambda a: child_jax(a.quota),
    "cupy-default": lambda a: child_cupy(a.quota, "default"),
    "cupy-async": lambda a: child_cupy(a.quota, "async"),
}

# ---------------------------------------------------------------------------------------
# The checks (run in the parent): each returns (numbers, problems)
# ---------------------------------------------------------------------------------------

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

CHECKS = {
    "torch-default": lambda a: torch_check(a, None, "torch-default"),
    "torch-expandable": lambda a: torch_check(a, "expandable_segments:True", "torch-expandable"),
    "torch-async": lambda a: torch_check(a, "backend:cudaMallocAsync", "torch-async"),
    "jax": jax_check,
    "cupy-default": lambda a: cupy_check(a, "default"),
    "cupy-async": lambda a: cupy_check(a, "async"),
}
