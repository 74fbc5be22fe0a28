"""What every check shares: sizes, the children's RESULT line, running a child under
LD_PRELOAD and reading what it left (stdout, cuquota's stderr lines, the trace), and the
checks' bookkeeping. Standard library only."""

import json
import os
import re
import shlex
import subprocess
import sys

MIB = 1 << 20
GIB = 1 << 30

# Tensor/array size for the fills: a multiple of 2 MiB (PyTorch's large-segment rounding) and
# of 20 MiB (its expandable-segment page), so every allocator is charged exactly n × CHUNK.
CHUNK = 640 * MIB

# The package's directory: `python3 HERE --child KIND` runs a workload.
HERE = os.path.dirname(os.path.abspath(__file__))

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

def python_child(args, kind, **kw):
    cmd = [sys.executable, HERE, "--child", kind, "--quota", str(args.quota)]
    return run_child(args, cmd, name=kw.pop("name", kind), **kw)

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
