"""NVML under the quota, read by processes that never call CUDA: nvidia-smi with the
variables shows total = the quota and used = its group's in-use (one PyTorch member's
footprint), or 0 used outside a group; pynvml's nvmlDeviceGetMemoryInfo in a group of two
PyTorch members shows total = the quota and used = their footprints summed; without the
variables, the real figures. The footprints are what each member's trace summary says."""

import importlib.util
import os
import re
import select
import subprocess
import sys
import tempfile
import time

from common import GIB, HERE, MIB, Child, child_env, describe, expect, result

# What each PyTorch member holds while NVML is read.
HOLD = GIB
SMI_QUERY = ["--query-gpu=memory.total,memory.used", "--format=csv,noheader,nounits"]


# ---------------------------------------------------------------------------------------
# Children
# ---------------------------------------------------------------------------------------


def child_hold():
    """Holds HOLD bytes in one tensor until a line comes on stdin, then exits still holding
    them (no empty_cache): the trace summary's peak is the footprint while held."""
    import torch

    x = torch.empty(HOLD, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("HOLDING", flush=True)
    sys.stdin.readline()
    result(held=x.numel())


def child_pynvml():
    """nvmlDeviceGetMemoryInfo of the GPU named by GPU_CHECK_UUID, through pynvml (no CUDA)."""
    import pynvml

    pynvml.nvmlInit()
    uuid = os.environ["GPU_CHECK_UUID"]
    try:
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except TypeError:  # older pynvml takes bytes
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())
    m = pynvml.nvmlDeviceGetMemoryInfo(handle)
    result(total=m.total, used=m.used, free=m.free)
    pynvml.nvmlShutdown()


CHILDREN = {
    "nvml-hold": lambda a: child_hold(),
    "nvml-pynvml": lambda a: child_pynvml(),
}


# ---------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------


def gpu_uuid(args):
    """The first GPU's UUID as `nvidia-smi -L` prints it, or None."""
    if args.dry_run:
        print("  nvidia-smi -L   (the first GPU's UUID: GPU-…)")
        return "GPU-<uuid>"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\(UUID: (GPU-[0-9A-Fa-f-]+)\)", out)
    return m.group(1) if m else None


def smi(args, env, uuid):
    """(total MiB, used MiB) that nvidia-smi shows for `uuid` run with `env`, or None."""
    cmd = ["nvidia-smi", "-i", uuid] + SMI_QUERY
    if args.dry_run:
        print("  " + describe(cmd, env))
        return None
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = [[c.strip() for c in l.split(",")] for l in out.splitlines() if l.strip()]
    if not rows or len(rows[0]) < 2 or not all(c.isdigit() for c in rows[0][:2]):
        return None
    return int(rows[0][0]), int(rows[0][1])


def pynvml_reading(args, env, name):
    """The pynvml child's {total, used, free} with `env`, or None."""
    cmd = [sys.executable, HERE, "--child", "nvml-pynvml", "--quota", str(args.quota)]
    if args.dry_run:
        print("  " + describe(cmd, env))
        return None
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    with open(os.path.join(args.work, f"{name}.stderr"), "w") as f:
        f.write(proc.stderr)
    return Child(proc, None).result


class Holder:
    """A PyTorch member holding HOLD bytes under cuquota until released."""

    def __init__(self, args, name, env):
        self.args, self.name = args, name
        self.trace = env.get("CUQUOTA_TRACE")
        self.cmd = [sys.executable, HERE, "--child", "nvml-hold", "--quota", str(args.quota)]
        self.proc = None
        if args.dry_run:
            print("  " + describe(self.cmd, env) + "   (holds 1 GiB until released)")
            return
        self.proc = subprocess.Popen(
            self.cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def wait_holding(self):
        """Whether the child said HOLDING before the timeout."""
        deadline = time.monotonic() + self.args.timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = self.proc.stdout.readline()
            if not line:
                return False
            if line.strip() == "HOLDING":
                return True
        return False

    def release(self):
        """Lets the child exit; its Child (stdout, stderr, trace), or None if never started."""
        if self.proc is None:
            return None
        try:
            stdout, stderr = self.proc.communicate(input="\n", timeout=self.args.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            stdout, stderr = self.proc.communicate()
        with open(os.path.join(self.args.work, f"{self.name}.stderr"), "w") as f:
            f.write(stderr)
        done = subprocess.CompletedProcess(self.cmd, self.proc.returncode, stdout, stderr)
        return Child(done, self.trace)


def footprint_of(child):
    """(peak, context_peak) of GPU 0 in the child's trace summary, or None."""
    summary = next((e for e in (child.events if child else []) if e.get("type") == "summary"), None)
    devices = (summary or {}).get("devices") or []
    return (devices[0].get("peak"), devices[0].get("context_peak", 0)) if devices else None


def nvml_check(args):
    """(a) nvidia-smi in the group of one PyTorch member: total = the quota, used = the
    member's footprint; outside the group: the quota and 0 used. (b) pynvml in the group of
    two members: total = the quota, used = both footprints; without the variables, the real
    figures."""
    problems, numbers = [], {}
    q = args.quota
    uuid = gpu_uuid(args)
    if uuid is None:
        return {}, ["nvidia-smi -L names no GPU"]
    have_pynvml = importlib.util.find_spec("pynvml") is not None
    group = f"gpucheck-{os.getpid()}"
    if args.dry_run:
        state = os.path.join(args.work, "state-…")
    else:
        state = tempfile.mkdtemp(prefix="state-", dir=args.work)
    quota_var = {"CUQUOTA_LIMIT": f"{uuid}:{q}"}
    grouped = dict(quota_var, CUQUOTA_GROUP=group, CUQUOTA_STATE_DIR=state)
    member_env = lambda name: child_env(
        args,
        True,
        dict(
            grouped,
            CUQUOTA_COUNT="footprint",
            CUDA_VISIBLE_DEVICES=uuid,
            CUQUOTA_TRACE=os.path.join(args.work, f"{name}.trace.jsonl"),
        ),
    )
    reader_env = child_env(args, True, dict(grouped, GPU_CHECK_UUID=uuid))
    del reader_env["CUQUOTA_COUNT"]
    own_env = child_env(args, True, quota_var)
    del own_env["CUQUOTA_COUNT"]
    real_env = child_env(args, False, {"GPU_CHECK_UUID": uuid})

    a = Holder(args, "member-a", member_env("member-a"))
    b = None
    try:
        if a.proc is not None and not a.wait_holding():
            problems.append("member a never held its 1 GiB")
            return numbers, problems
        smi_group = smi(args, reader_env, uuid)
        smi_own = smi(args, own_env, uuid)
        if args.dry_run or have_pynvml:
            b = Holder(args, "member-b", member_env("member-b"))
            if b.proc is not None and not b.wait_holding():
                problems.append("member b never held its 1 GiB")
                return numbers, problems
            told = pynvml_reading(args, reader_env, "pynvml-group")
            real = pynvml_reading(args, real_env, "pynvml-real")
            smi_real = smi(args, real_env, uuid)
    finally:
        ca, cb = a.release(), b.release() if b else None
    if args.dry_run:
        return {}, []

    fa, fb = footprint_of(ca), footprint_of(cb)
    expect(problems, fa is not None, f"no summary in member a's trace (exit {ca.rc}): {ca.tail()}")
    # (a) nvidia-smi: whole MiB, as it rounds.
    quota_mib = q / MIB
    numbers["quota_mib"] = q // MIB
    if smi_group is None or smi_own is None:
        problems.append("nvidia-smi gave no memory.total,memory.used under cuquota")
    else:
        numbers.update(smi_group_total_mib=smi_group[0], smi_group_used_mib=smi_group[1])
        numbers.update(smi_own_total_mib=smi_own[0], smi_own_used_mib=smi_own[1])
        expect(problems, abs(smi_group[0] - quota_mib) <= 1, f"nvidia-smi in the group: total {smi_group[0]} MiB, quota {quota_mib:.1f} MiB")
        expect(problems, abs(smi_own[0] - quota_mib) <= 1, f"nvidia-smi outside the group: total {smi_own[0]} MiB, quota {quota_mib:.1f} MiB")
        expect(problems, smi_own[1] == 0, f"nvidia-smi outside the group: used {smi_own[1]} MiB, not 0")
        if fa is not None:
            numbers["member_a_footprint"] = fa[0]
            expect(
                problems,
                abs(smi_group[1] * MIB - fa[0]) <= MIB,
                f"nvidia-smi in the group: used {smi_group[1]} MiB, member a's footprint {fa[0]} ({fa[0] / MIB:.1f} MiB)",
            )
    if not have_pynvml:
        numbers["skipped"] = "(b) not run: pynvml is not importable in this python3 (pip install nvidia-ml-py)"
        return numbers, problems
    # (b) pynvml in the group of two, and without the variables.
    expect(problems, fb is not None, f"no summary in member b's trace (exit {cb.rc}): {cb.tail()}")
    if told is None or real is None:
        problems.append("the pynvml reader gave no figures (see pynvml-*.stderr)")
        return numbers, problems
    numbers.update(pynvml_total=told["total"], pynvml_used=told["used"], pynvml_free=told["free"])
    numbers.update(pynvml_real_total=real["total"], pynvml_real_used=real["used"])
    expect(problems, told["total"] == q, f"pynvml in the group: total {told['total']}, quota {q}")
    if fa is not None and fb is not None:
        both, contexts = fa[0] + fb[0], fa[1] + fb[1]
        numbers.update(members_footprint=both, members_context=contexts)
        # The group's in-use is both footprints; allow the contexts the summaries name.
        expect(
            problems,
            both - contexts - MIB <= told["used"] <= both + MIB,
            f"pynvml in the group: used {told['used']}, the members' footprints {both} (contexts {contexts})",
        )
    expect(problems, real["total"] > q and real["total"] != told["total"], f"pynvml without the variables: total {real['total']} (the quota's {q}?)")
    expect(problems, real["used"] >= 2 * HOLD, f"pynvml without the variables: used {real['used']} < the 2 GiB held")
    if smi_real is not None:
        numbers.update(smi_real_total_mib=smi_real[0], smi_real_used_mib=smi_real[1])
        expect(problems, abs(smi_real[0] * MIB - real["total"]) <= MIB, f"nvidia-smi without the variables: total {smi_real[0]} MiB, pynvml's {real['total']}")
    return numbers, problems


CHECKS = {"nvml": nvml_check}
