"""The checks of scripts/gpu-check.sh, one per invocation (see that script for the list).

    python3 scripts/gpu_check CHECK --quota BYTES --lib LIBCUQUOTA --work DIR [--dry-run]
    python3 scripts/gpu_check summary --work DIR --quota BYTES [--json FILE] CHECK...
    python3 scripts/gpu_check parse-size SIZE

A check runs here without the interposer and starts its workload as a child process of this
same package (`--child`) under LD_PRELOAD, so that it can read the child's trace, which is only
complete once the child has exited. It prints one `PASS name: ...` or `FAIL name: ...` line
(or, when part of it cannot run here, `SKIPPED name: ... -- why`) and writes DIR/result.json. Uses only the standard library outside the children; installs
nothing.

common.py: sizes, running children, reading what they left; frameworks.py: PyTorch, JAX,
CuPy; driver.py: bfc-growth, arrays, ctx-reset, vmm, overhead; footprint.py: the footprint
checks against nvidia-smi; nvml.py: NVML's figures under the quota (nvidia-smi, pynvml).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import driver
import footprint
import frameworks
import nvml
from common import parse_size

CHILDREN = {**driver.CHILDREN, **frameworks.CHILDREN, **footprint.CHILDREN, **nvml.CHILDREN}

_checks = {**frameworks.CHECKS, **driver.CHECKS, **footprint.CHECKS, **nvml.CHECKS}
# In the order the checks were always listed in.
CHECKS = {
    name: _checks[name]
    for name in (
        "ctx-reset", "torch-default", "torch-expandable", "torch-async", "jax", "cupy-default",
        "cupy-async", "bfc-growth", "arrays", "overhead", "vmm", "footprint-torch",
        "footprint-torch-async", "footprint-cupy-async", "footprint-jax", "nvml", "questions",
    )
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
    # A check that could not run all of itself says so in numbers["skipped"]: never a PASS.
    skipped = numbers.get("skipped")
    status = "FAIL" if problems else "SKIPPED" if skipped else "PASS"
    record = {"name": args.check, "status": status, "seconds": seconds, "numbers": numbers, "problems": problems}
    with open(os.path.join(args.work, "result.json"), "w") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
    why = f" -- {'; '.join(problems)}" if problems else f" -- {skipped}" if skipped else ""
    print(f"{status} {args.check} ({seconds} s): {short(numbers)}{why}", flush=True)
    return 1 if status == "FAIL" else 0


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
    skipped = sum(c["status"] == "SKIPPED" for c in checks)
    failed = len(checks) - passed - skipped
    doc = {"quota": args.quota, "passed": passed, "failed": failed, "checks": checks}
    if skipped:
        doc["skipped"] = skipped
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, ensure_ascii=False)
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return 0 if failed == 0 else 1


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
