"""Reading cuquota traces (JSON Lines, schema 1; the README's "Trace format") from Python.

The rules are the `cuquota` command's (crates/format/src/read.rs): the first line is the
header; a schema newer than 1 is an error; a last line without its newline that does not
parse (the process was killed while writing it) is skipped with a warning; any other bad
line is an error naming the file and line; blank lines are ignored; fields and line types
this reader does not know are passed through.
"""

import heapq
import json
import os
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Tuple, Union

SCHEMA_VERSION = 1

Path = Union[str, "os.PathLike[str]"]


class TraceWarning(UserWarning):
    """A torn last line was skipped."""


def _paths(paths: Union[Path, Iterable[Path]]) -> List[str]:
    if isinstance(paths, (str, bytes, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def read_header(path: Path) -> Dict[str, Any]:
    """The header line of one trace, as a dict."""
    for record in _records(os.fspath(path)):
        return record
    raise ValueError(f"{os.fspath(path)}: not a cuquota trace (it is empty)")


def _records(name: str) -> Iterator[Dict[str, Any]]:
    """The file's records in file order, the header first."""
    seen_header = False
    with open(name, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            complete = raw.endswith(b"\n")
            text = raw.strip()
            if not text:
                continue
            try:
                record = json.loads(text)
                if not isinstance(record, dict) or not isinstance(record.get("type"), str):
                    raise ValueError("not a trace line (an object with a \"type\")")
            except ValueError as e:
                if not complete:
                    warnings.warn(
                        f"{name}:{line_no}: incomplete last line (the process was killed "
                        "while writing it?); skipped",
                        TraceWarning,
                        stacklevel=4,
                    )
                    break
                raise ValueError(f"{name}:{line_no}: {e}") from None
            if record["type"] == "header":
                schema = record.get("schema")
                if isinstance(schema, int) and schema > SCHEMA_VERSION:
                    raise ValueError(
                        f"{name}:{line_no}: trace schema {schema} is newer than this "
                        f"cuquota reads ({SCHEMA_VERSION}); use a newer cuquota"
                    )
                seen_header = True
            elif not seen_header:
                raise ValueError(
                    f"{name}:{line_no}: not a cuquota trace (no header line before the events)"
                )
            yield record
    if not seen_header:
        raise ValueError(f"{name}: not a cuquota trace (it is empty)")


def _events(name: str) -> Iterator[Tuple[int, Dict[str, Any]]]:
    start = 0
    origin: Dict[str, Any] = {}
    for record in _records(name):
        if record["type"] == "header":
            start = int(record.get("start_unix_ns", 0))
            origin = {
                "file": name,
                "host": record.get("host"),
                "rank": record.get("rank"),
                "pid": record.get("pid"),
            }
            continue
        t_ns = record.get("t_ns")
        at = start + int(t_ns) if isinstance(t_ns, int) else start
        event = dict(record)
        for key, value in origin.items():
            event.setdefault(key, value)
        event["t_unix_ns"] = at
        yield at, event


def read_trace(paths: Union[Path, Iterable[Path]]) -> Iterator[Dict[str, Any]]:
    """Every line after the header of one trace or several, as dicts, in time order.

    Each event is the line's own fields plus `file`, `host`, `rank`, `pid` (from its file's
    header) and `t_unix_ns` (the header's `start_unix_ns` + `t_ns`): several files (ranks,
    hosts) are merged by that absolute time; within a file the order is the file's. The
    `summary` line (last, when the process ended normally or by SIGTERM/SIGINT) is yielded
    too, with `type == "summary"`. Streams: memory stays flat on a trace of any length.
    """
    streams = [_events(name) for name in _paths(paths)]
    if len(streams) == 1:
        for _, event in streams[0]:
            yield event
        return
    # Ties keep the files' order (heapq.merge is stable over its inputs).
    for _, event in heapq.merge(*streams, key=lambda item: item[0]):
        yield event


# Columns of trace_frame: name → pandas dtype. Byte counts and ids are nullable integers
# (a field a line type does not have is <NA>); other fields of the lines are kept as objects.
_COLUMNS = {
    "type": "string",
    "t_ns": "Int64",
    "t_unix_ns": "Int64",
    "file": "string",
    "host": "string",
    "rank": "Int64",
    "pid": "Int64",
    "tid": "Int64",
    "dev": "Int64",
    "api": "string",
    "ptr": "string",
    "bytes": "Int64",
    "result": "string",
    "in_use": "Int64",
    "reason": "string",
    "observed": "boolean",
    "part": "string",
    "count": "Int64",
    "told_free": "Int64",
    "told_total": "Int64",
    "real_free": "Int64",
    "real_total": "Int64",
}


def trace_frame(paths: Union[Path, Iterable[Path]]):  # -> pandas.DataFrame
    """The events of `read_trace(paths)` as a pandas DataFrame, one row per line after the
    header (summary lines included), in the same order: typed columns (`Int64` for byte
    counts, times and ids, `string` for names, `boolean` for `observed`), `time` (the event's
    wall-clock time, UTC) and any other field as an object column (`sizes`, `ptrs`,
    `devices`, ...). Needs pandas (`pip install cuquota[pandas]`)."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError(
            "cuquota.trace_frame needs pandas: pip install 'cuquota[pandas]'"
        ) from e
    rows = list(read_trace(paths))
    columns: Dict[str, Any] = {}
    for name, dtype in _COLUMNS.items():
        values = [row.get(name) for row in rows]
        if dtype == "boolean":
            values = [None if v is None else bool(v) for v in values]
        columns[name] = pd.array(values, dtype=dtype)
    extra: List[str] = []
    for row in rows:
        for key in row:
            if key not in _COLUMNS and key not in extra:
                extra.append(key)
    for name in extra:
        columns[name] = pd.Series([row.get(name) for row in rows], dtype=object)
    frame = pd.DataFrame(columns)
    # Every row has t_unix_ns; nanoseconds since 1970 do not fit a float exactly.
    frame.insert(2, "time", pd.to_datetime(frame["t_unix_ns"].astype("int64"), unit="ns", utc=True))
    return frame
