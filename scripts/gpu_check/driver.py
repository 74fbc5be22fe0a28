"""The checks on the driver itself: the allow_growth workload (bfc-growth), CUDA arrays'
sizes, cuDevicePrimaryCtxReset, VMM lifetimes (ctypes on libcuda.so.1), and the overhead on
cudaMalloc/cudaFree pairs."""

import math
import os
import re
import time

from common import GIB, MIB, check_child_ran, expect, human, python_child, result, run_child

OVERHEAD_PAIRS = 10_000
# The interposer may cost at most this factor on a cudaMalloc/cudaFree pair.
OVERHEAD_LIMIT = 1.5

# ---------------------------------------------------------------------------------------
# Children
# ---------------------------------------------------------------------------------------

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

CHILDREN = {
    "ctx-reset": lambda a: child_ctx_reset(),
    "overhead": lambda a: child_overhead(),
    "vmm-raw": lambda a: child_vmm_raw(),
    "vmm": lambda a: child_vmm(a.quota),
}

# ---------------------------------------------------------------------------------------
# The checks (run in the parent): each returns (numbers, problems)
# ---------------------------------------------------------------------------------------

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

# The programs of scripts/gpu_check/questions/, each one question cuda.h leaves open.
QUESTIONS = ("pool_after_destroy", "pool_after_release", "export_import", "sparse_array", "locality_domain",
             "malloc_heap", "local_array")


def question_answers(stdout):
    """{label: {key: value}} for each moment's line of a questions program ("LABEL k=v ..."),
    and its loose "k=v" words at the top level; values as ints where they are."""
    def value(v):
        try:
            return int(v)
        except ValueError:
            return v

    answers = {}
    for line in stdout.splitlines():
        words = line.split()
        if not words:
            continue
        pairs = [w.split("=", 1) for w in words if "=" in w]
        if "=" in words[0]:
            answers.update({k: value(v) for k, v in pairs})
        else:
            answers[words[0]] = {k: value(v) for k, v in pairs} or True
    return answers


def questions_check(args):
    """The real driver's own answers, without cuquota, to the questions its accounting rests
    on (pool memory after cuCtxDestroy and after the last cuDevicePrimaryCtxRelease, an
    export + self-import + release, a deferred-mapping array's map + release, a
    DEVICE_LOCALITY_DOMAIN allocation, a 256 MiB malloc heap set by cuCtxSetLimit, a kernel
    with a 64 KiB local array per thread): each program's figures (cuMemGetInfo's free, NVML's
    figure for the process) at each moment are recorded. A FAIL only where a program could
    not run; what the answers mean is for the reader (gpu-check.json)."""
    numbers, problems = {}, []
    for name in QUESTIONS:
        child = run_child(args, [os.path.join(args.work, name)], preload=False, trace=False, name=name)
        if child is None:
            continue
        answers = question_answers(child.stdout)
        numbers[name] = answers
        for label, figures in answers.items():
            if isinstance(figures, dict) and "nvml_used" in figures:
                numbers[f"{name}.{label}.nvml_used"] = figures["nvml_used"]
        last = (child.stdout.strip().splitlines() or ["(no output)"])[-1]
        expect(problems, child.rc == 0, f"{name}: exit {child.rc}: {last}")
    return numbers, problems


CHECKS = {
    "questions": questions_check,
    "ctx-reset": ctx_reset_check,
    "bfc-growth": bfc_check,
    "arrays": arrays_check,
    "overhead": overhead_check,
    "vmm": vmm_check,
}
