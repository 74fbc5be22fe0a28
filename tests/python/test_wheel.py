"""The wheel as a user installs it: scripts/wheel-test.sh builds it, installs it into a fresh
virtual environment and runs these tests with that environment's pytest, from a directory
outside the checkout, with no cuquota variable set. Everything here comes from the installed
package: the `cuquota` command, the library it preloads, the shim and the reader."""

import json
import os
import re
import subprocess
import sys
import sysconfig
import warnings

import pytest

import cuquota
import cuquota.shim

MiB = 1 << 20
GiB = 1 << 30
SITE = sysconfig.get_paths()["purelib"]
COMMAND = os.path.join(sysconfig.get_paths()["scripts"], "cuquota")

# A program of our own making that allocates against the driver through ctypes: each argv
# word a size for cuMemAlloc_v2; then it asks NVML what GPU 0 uses. Prints both as JSON.
CLIENT = r"""
import ctypes, json, sys
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
dev = ctypes.c_int()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p()
assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
results = []
for size in sys.argv[1:]:
    ptr = ctypes.c_uint64()
    results.append(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(size))))
class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
handle = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
memory = Memory()
assert nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0
print(json.dumps({"results": results, "nvml_used": memory.used, "nvml_total": memory.total}))
"""


def test_everything_comes_from_the_installed_package():
    assert cuquota.__file__.startswith(SITE + os.sep), cuquota.__file__
    assert os.path.isfile(COMMAND)
    for place in ("bin/cuquota", "lib/libcuquota.so", "lib/libcuquota_audit.so",
                  "shim/libcuda.so.1", "shim/libcuda.so", "shim/libnvidia-ml.so.1"):
        assert os.path.isfile(os.path.join(os.path.dirname(cuquota.__file__), place)), place
    assert cuquota.LIBRARY == os.path.join(os.path.dirname(cuquota.__file__), "lib", "libcuquota.so")
    # What `python3 -m cuquota.shim` prints is the directory `cuquota run --stand-in` uses.
    assert os.path.isfile(os.path.join(cuquota.shim.DIR, "libcuda.so.1"))
    assert not any(name.startswith("CUQUOTA_") for name in os.environ)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """`cuquota run --stand-in --limit 1GiB` of the client on a 4 GiB simulated GPU (the
    package's shim, for the command alone): 512 MiB and 256 MiB fit, the next 512 MiB does
    not (768 MiB in use, 256 MiB left)."""
    tmp = tmp_path_factory.mktemp("run")
    client = tmp / "client.py"
    client.write_text(CLIENT)
    trace = tmp / "t-%p.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUQUOTA_", "CUDA_", "LD_"))}
    env.update(CUDA_SHIM_MEMORY="4GiB")
    done = subprocess.run(
        [COMMAND, "run", "--stand-in", "--limit", "1GiB", "--trace", str(trace), "--",
         sys.executable, str(client), str(512 * MiB), str(256 * MiB), str(512 * MiB)],
        env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60,
    )
    traces = sorted(tmp.glob("t-*.jsonl"))
    return done, traces


def test_run_enforces_the_limit_on_the_shim(run):
    done, traces = run
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # 2 = CUDA_ERROR_OUT_OF_MEMORY; NVML (the same shim object) sees the two allocations,
    # and under cuquota the quota as the GPU's total.
    assert out == {"results": [0, 0, 2], "nvml_used": 768 * MiB, "nvml_total": 1 * GiB}
    assert len(traces) == 1
    pid = traces[0].name[len("t-"):-len(".jsonl")]
    assert done.stderr.splitlines() == [
        f"cuquota[{pid}]: GPU 0 refused 512.00 MiB (536870912 bytes) via cuMemAlloc_v2: "
        "quota 1.00 GiB, in use 768.00 MiB, 256.00 MiB left",
        f"cuquota[{pid}]: GPU 0: the caller was refused 512.00 MiB (1 refusal) and gave up; it "
        "got CUDA_ERROR_OUT_OF_MEMORY (the process ended before it asked again)",
        f"cuquota[{pid}]: GPU 0 summary: peak 768.00 MiB (805306368 bytes) of quota 1.00 GiB, "
        "2 allocations, 1 refusal, 2 live at exit (768.00 MiB)",
    ]
    # The LD_PRELOAD it set named the packaged library.
    header = cuquota.read_header(traces[0])
    assert header["mode"] == "enforce"
    assert header["devices"][0]["quota"] == GiB


def test_reader_on_the_run(run):
    _, traces = run
    events = list(cuquota.read_trace(traces[0]))
    assert [e["type"] for e in events] == ["alloc", "alloc", "refused", "backoff", "summary"]
    assert [e["bytes"] for e in events[:4]] == [512 * MiB, 256 * MiB, 512 * MiB, 512 * MiB]
    assert [e["in_use"] for e in events[:4]] == [512 * MiB, 768 * MiB, 768 * MiB, 768 * MiB]
    refused = events[2]
    assert (refused["reason"], refused["result"]) == ("quota", "CUDA_ERROR_OUT_OF_MEMORY")
    assert events[3]["sizes"] == [512 * MiB]
    summary = events[4]
    assert (summary["end"], summary["events"], summary["dropped"]) == ("exit", 4, 0)
    assert summary["devices"][0]["peak"] == 768 * MiB
    start = cuquota.read_header(traces[0])["start_unix_ns"]
    assert all(e["t_unix_ns"] == start + e["t_ns"] for e in events)
    assert all(e["file"] == str(traces[0]) and str(e["pid"]) in traces[0].name for e in events)


def test_frame_on_the_run(run):
    import pandas as pd  # installed with the wheel's extra: cuquota[pandas]

    _, traces = run
    df = cuquota.trace_frame(traces)
    assert len(df) == 5
    assert str(df["bytes"].dtype) == "Int64" and str(df["in_use"].dtype) == "Int64"
    assert str(df["type"].dtype) == "string" and str(df["observed"].dtype) == "boolean"
    assert str(df["time"].dtype) == "datetime64[ns, UTC]"
    assert df["bytes"].isna().tolist() == [False, False, False, False, True]
    held = df[df.type.isin(["alloc", "free"])]
    assert held.groupby("dev").in_use.max().to_dict() == {0: 768 * MiB}
    refusals = df[df.type == "refused"].set_index("time").resample("1s").size()
    assert refusals.sum() == 1
    assert df["time"].iloc[0] == pd.Timestamp(int(df["t_unix_ns"].iloc[0]), unit="ns", tz="UTC")


def header(start, pid):
    return json.dumps({"type": "header", "schema": 1, "version": "0.1.0", "pid": pid,
                       "host": "h", "rank": pid % 10, "argv": ["x"], "start_unix_ns": start,
                       "mode": "enforce", "devices": []})


def alloc(t_ns, size):
    return json.dumps({"type": "alloc", "t_ns": t_ns, "tid": 1, "dev": 0, "api": "cuMemAlloc_v2",
                       "ptr": "0x1", "bytes": size, "result": "CUDA_SUCCESS", "in_use": size})


def test_files_merge_by_absolute_time(tmp_path):
    # Rank 1 started 1 ms after rank 0: its t_ns 500 µs is 1.5 ms after rank 0's start.
    a, b = tmp_path / "r0.jsonl", tmp_path / "r1.jsonl"
    a.write_text("\n".join([header(10_000_000, 100), alloc(1_000_000, 1), alloc(2_000_000, 2)]) + "\n")
    b.write_text("\n".join([header(11_000_000, 201), alloc(500_000, 3), alloc(1_500_000, 4)]) + "\n")
    events = list(cuquota.read_trace([a, b]))
    assert [(e["pid"], e["bytes"], e["t_unix_ns"]) for e in events] == [
        (100, 1, 11_000_000), (201, 3, 11_500_000), (100, 2, 12_000_000), (201, 4, 12_500_000)]


def test_torn_last_line_is_skipped_with_a_warning(tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text(header(0, 1) + "\n" + alloc(1, 5) + "\n" + '{"type":"alloc","t_ns":2,"by')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        events = list(cuquota.read_trace(t))
    assert [e["bytes"] for e in events] == [5]
    assert [str(w.message) for w in caught] == [
        f"{t}:3: incomplete last line (the process was killed while writing it?); skipped"]
    assert caught[0].category is cuquota.TraceWarning


def test_a_bad_line_before_the_last_is_an_error(tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text(header(0, 1) + "\n" + "not json\n" + alloc(1, 5) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{t}:2: ")):
        list(cuquota.read_trace(t))
    u = tmp_path / "u.jsonl"
    u.write_text(alloc(1, 5) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{u}:1: not a cuquota trace (no header line")):
        list(cuquota.read_trace(u))
    v = tmp_path / "v.jsonl"
    v.write_text(header(0, 1).replace('"schema": 1', '"schema": 2') + "\n")
    with pytest.raises(ValueError, match="trace schema 2 is newer"):
        list(cuquota.read_trace(v))
