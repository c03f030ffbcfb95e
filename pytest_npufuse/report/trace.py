"""Timelines of modeled runs: a Chrome/Perfetto trace and an msprof-like ``kernel_details.csv``.

The trace has one process for the host (a track per host thread) and one for the NPU (a track per
stream). A SuperKernel is a parent slice with its sub-kernels nested inside; each cross-stream event is
a record slice and a wait slice joined by a flow arrow. ``kernel_details.csv`` has the columns an Ascend
engineer knows from msprof's file of that name, so the same scripts read both. Files are written
atomically, so a reader never sees half a file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

from ..errors import NpufuseError
from ..files import locked, write_text
from ..simulate.timeline import RunReport
from .attribution import accelerator_core
from .case import CaseReport

HOST_PID = 1
NPU_PID = 2
CSV_COLUMNS = (
    "Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "Accelerator Core", "Start Time(us)",
    "Duration(us)", "Wait Time(us)", "Block Dim", "Parent",
)
_HOST_THREADS = ("ordinary", "memory", "launch")


def host_thread_label(thread: int) -> str:
    """A host thread's name: GE's pipelined threads are ordinary, memory and launch, in that order."""
    return f"host thread {thread} ({_HOST_THREADS[min(thread, 2)]})"


def _meta(pid: int, name: str, tid: int | None = None) -> dict[str, Any]:
    if tid is None:
        return {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def _slice(name: str, pid: int, tid: int, start: float, end: float, cat: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": round(start, 6),
            "dur": round(end - start, 6), "args": args}


def trace_events(run: RunReport) -> list[dict[str, Any]]:
    """The Chrome trace events of one run (timestamps in microseconds)."""
    stream_id = {name: index for index, name in enumerate(run.streams)}
    events = [_meta(HOST_PID, f"Host ({run.execution})"), _meta(NPU_PID, f"NPU {run.target} ({run.variant})")]
    threads = sorted({piece.thread for piece in run.host}) or [0]
    events += [_meta(HOST_PID, host_thread_label(t), t) for t in threads]
    events += [_meta(NPU_PID, f"Stream {stream_id[s]} ({s})", stream_id[s]) for s in run.streams]
    for piece in run.host:
        events.append(_slice(piece.name, HOST_PID, piece.thread, piece.start_us, piece.end_us, "host", {"op": piece.kernel}))
    for kernel in sorted(run.kernels, key=lambda k: (k.start_us, k.parent is not None)):
        args = {"op_type": kernel.op_type, "block_dim": kernel.block_dim, "engine": kernel.engine}
        if kernel.parent is not None:
            args["superkernel"] = kernel.parent
        events.append(_slice(kernel.name, NPU_PID, stream_id[kernel.stream], kernel.start_us, kernel.end_us, "kernel", args))
    for number, event in enumerate(run.events, start=1):
        record_tid, wait_tid = stream_id[event.record_stream], stream_id[event.wait_stream]
        args = {"event": event.event}
        events.append(_slice("EventRecord", NPU_PID, record_tid, event.record_start_us, event.record_end_us, "event", args))
        events.append(_slice("EventWait", NPU_PID, wait_tid, event.wait_start_us, event.wait_end_us, "event", args))
        flow = {"name": event.event, "cat": "event", "id": number, "pid": NPU_PID}
        events.append({**flow, "ph": "s", "tid": record_tid, "ts": round(event.record_start_us, 6)})
        events.append({**flow, "ph": "f", "bp": "e", "tid": wait_tid, "ts": round(event.wait_start_us, 6)})
    return events


def trace_json(run: RunReport) -> str:
    """The trace as Chrome's JSON object format, which Perfetto and chrome://tracing open."""
    return json.dumps({"traceEvents": trace_events(run), "displayTimeUnit": "ns"}, indent=None, sort_keys=True)


def kernel_details_csv(run: RunReport) -> str:
    """msprof-like ``kernel_details.csv`` rows, one per kernel (sub-kernels name their SuperKernel)."""
    stream_id = {name: index for index, name in enumerate(run.streams)}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    last_end: dict[str, float] = {}
    task_id = 0
    for kernel in run.kernels:
        if kernel.parent is None:
            task_id += 1
            wait = max(0.0, kernel.start_us - last_end.get(kernel.stream, kernel.start_us))
            last_end[kernel.stream] = kernel.end_us
        else:
            wait = 0.0
        writer.writerow((
            1, 1, task_id, stream_id[kernel.stream], kernel.name, kernel.kernel_type or kernel.op_type,
            accelerator_core(kernel.engine, kernel.op_type), f"{kernel.start_us:.3f}", f"{kernel.duration_us:.3f}",
            f"{wait:.3f}", kernel.block_dim, kernel.parent or "",
        ))
    return buffer.getvalue()


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_LONGEST = 100


def case_directory_name(case: str) -> str:
    """A file-system-safe directory name for a case id such as ``tests/x.py::test_y[a3]``, different for
    different ids: when making it safe loses information (a character replaced, an upper-case letter a
    case-insensitive file system would fold, a name cut short), a hash of the whole id is appended, so
    ``a/b``, ``a b``, ``a_b`` and ``A_b`` get four directories instead of overwriting one."""
    safe = _UNSAFE.sub("_", case).strip("_.") or "case"
    if safe == case and case == case.lower() and len(case) <= _LONGEST:
        return safe
    digest = hashlib.sha256(case.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{safe[:_LONGEST]}-{digest}"


def write_case_traces(report: CaseReport, directory: Path, case: str) -> Path:
    """Write ``<variant>/trace_view.json``, ``kernel_details.csv``, ``op_statistic.csv`` and
    ``module_statistic.csv`` for both variants. The case's directory is locked while they are written,
    so two processes writing one case leave one run's complete set, never a mix."""
    root = directory / case_directory_name(case)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with locked(root, "trace directory", directory=True):
            for run in (report.baseline, report.variant):
                files = {"trace_view.json": trace_json(run), "kernel_details.csv": kernel_details_csv(run)}
                attribution = report.attribution.get(run.variant)
                if attribution is not None:
                    files["op_statistic.csv"] = attribution.op_statistic_csv()
                    files["module_statistic.csv"] = attribution.module_csv()
                for name, text in files.items():
                    write_text(root / run.variant / name, text, "trace file")
    except OSError as exc:
        raise NpufuseError(
            f"cannot write traces under {directory}: {exc.strerror or exc} ({exc.filename}); give a directory "
            "you can write to (--npufuse-trace-dir under pytest).", file=str(exc.filename or directory)
        ) from None
    return root
