"""A case as plain data for the HTML report: lanes, kernels, SuperKernels, events, breaks, races, tables.

Only lists, dicts, strings and numbers, so the view travels from a pytest-xdist worker to the
controller in ``user_properties`` and the page can be written once there. Times are in microseconds,
rounded to nanoseconds; lanes and kernels are referred to by index.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from ...sanitize.checker import Access
from ...simulate.timeline import RunReport
from ..attribution import Attribution
from ..case import CaseReport
from ..contributions import to_json as contributions_json
from ..trace import host_thread_label

# Column order of a kernel row in a run view.
KERNEL_FIELDS = ("name", "op_type", "lane", "start_us", "end_us", "block_dim", "engine", "parent")


def _us(value: float) -> float:
    return round(value, 3)


def run_view(run: RunReport, attribution: Attribution | None) -> dict[str, Any]:
    """One variant's timeline (host-thread lanes first, then one lane per stream in the run's order) and
    its time tables."""
    threads = sorted({piece.thread for piece in run.host})
    lanes = [{"kind": "host", "label": host_thread_label(t)} for t in threads]
    lanes += [{"kind": "stream", "label": f"stream {stream}"} for stream in run.streams]
    host_lane = {t: index for index, t in enumerate(threads)}
    stream_lane = {stream: len(threads) + index for index, stream in enumerate(run.streams)}
    index_of: dict[str, int] = {}
    kernels = []
    for kernel in run.kernels:
        if kernel.parent is None:
            index_of[kernel.name] = len(kernels)
        parent = index_of.get(kernel.parent, -1) if kernel.parent is not None else -1
        kernels.append([kernel.name, kernel.op_type, stream_lane[kernel.stream], _us(kernel.start_us), _us(kernel.end_us),
                        kernel.block_dim, kernel.engine, parent])
    return {
        "variant": run.variant,
        "time_us": _us(run.time_us) if math.isfinite(run.time_us) else None,
        "host_us": _us(run.host_us),
        "bound": run.bound,
        "execution": run.execution,
        "failure": run.failure,
        "lanes": lanes,
        "kernels": kernels,
        "host": [[piece.name, host_lane[piece.thread], _us(piece.start_us), _us(piece.end_us)] for piece in run.host],
        "events": [
            [event.event, stream_lane[event.record_stream], _us(event.record_start_us), _us(event.record_end_us),
             stream_lane[event.wait_stream], _us(event.wait_start_us), _us(event.wait_end_us)]
            for event in run.events
        ],
        **time_tables(attribution),
    }


def time_tables(attribution: Attribution | None) -> dict[str, Any]:
    """The run's time attribution: device time per op type (msprof's op_statistic rows), per module
    path (inclusive and self), and the computing / exposed communication / free shares."""
    if attribution is None:
        return {"op_types": [], "modules": [], "overlap": {}}
    return {
        "op_types": [
            {"op_type": row.op_type, "core_type": row.core_type, "count": row.count, "total_us": _us(row.total_us),
             "ratio_pct": round(row.ratio_pct, 2)}
            for row in attribution.op_types
        ],
        "modules": [
            {"path": row.label, "type": row.type, "depth": row.depth, "kernels": row.kernels,
             "total_us": _us(row.total_us), "self_us": _us(row.self_us), "ratio_pct": round(row.ratio_pct, 2)}
            for row in attribution.modules
        ],
        "overlap": {name: round(share, 2) for name, share in attribution.overlap.shares().items()},
    }


def _access(access: Access) -> dict[str, str]:
    return {"kernel": access.kernel, "op_type": access.op_type, "stream": access.stream, "action": access.action,
            "source": access.source}


def case_view(report: CaseReport, case: str, gate: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The HTML report's view of one check. ``gate`` is the baseline gate's verdict on it
    (``status`` and ``text``), or None without a gate."""
    view = {
        "case": case,
        "target": report.target,
        "mode": report.mode,
        "summary": report.summary(),
        "speedup": round(report.speedup, 4) if math.isfinite(report.speedup) else None,
        "segments": report.segments,
        "streams": list(report.streams),
        "bit_exact": report.bit_exact,
        "numerics": report.numerics.to_json(),
        "mismatches": [mismatch.describe() for mismatch in report.mismatches],
        "deadlock": report.deadlock,
        "stream_notes": report.stream_notes(),
        "contributions": contributions_json(report.contributions),
        "why": None if (why := report.why) is None else why.describe(),
        "trust": [error.describe() for error in report.trust],
        "gate": dict(gate) if gate is not None else None,
        "scopes": [
            {"scope": scope.scope, "outcome": scope.outcome, "segments": scope.segments, "block_dim": scope.block_dim,
             "reason": scope.reason, "names": list(scope.kernel_names),
             "breaks": [{"kernel": b.kernel, "op_type": b.op_type, "source": b.source, "why": b.why}
                        for b in scope.break_points]}
            for scope in report.superkernels.values()
        ],
        "races": [
            {"kind": race.kind, "tensor": race.tensor, "text": race.describe(), "first": _access(race.first),
             "second": _access(race.second)}
            for race in report.races
        ],
        "runs": [run_view(run, report.attribution.get(run.variant)) for run in (report.baseline, report.variant)],
    }
    # Outcomes, race kinds, engines and modes are str enums; a JSON round trip leaves plain str, which
    # pytest-xdist's wire format needs (it takes builtins only).
    return json.loads(json.dumps(view))
