"""cuquota: a per-GPU memory quota for any CUDA program, set from outside (LD_PRELOAD).

The wheel holds the `cuquota` command (`cuquota run --limit 6GiB -- python train.py`), the
preloaded library and its audit module, and the shim (`python3 -m cuquota.shim` prints its
directory). This module reads the traces `cuquota run --trace` writes:

    import cuquota
    for e in cuquota.read_trace("t.jsonl"):        # dicts, in time order
        ...
    df = cuquota.trace_frame(["r0.jsonl", "r1.jsonl"])   # pandas (cuquota[pandas])
"""

import os as _os

from cuquota._trace import SCHEMA_VERSION, TraceWarning, read_header, read_trace, trace_frame

__all__ = ["read_trace", "read_header", "trace_frame", "TraceWarning", "SCHEMA_VERSION", "LIBRARY"]
__version__ = "0.1.0"

#: The preloaded library in this install (what `cuquota run` puts in LD_PRELOAD).
LIBRARY = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "lib", "libcuquota.so")
