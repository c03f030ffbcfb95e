"""The record of one check in the run report: its baseline entry, precision, host/device split, where
the time went and the gate's verdict.

Built where a check runs (the fixture's library side), so the pytest entry point never imports the
report modules it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..report.attribution import longest_tasks
from ..report.contributions import to_json as contributions_json
from ..report.findings import findings_json
from .baseline import Change, Entry, finite_us

if TYPE_CHECKING:
    from ..report.case import CaseReport


def check_row(key: str, report: CaseReport, entry: Entry, change: Change | None) -> dict[str, Any]:
    """The record of one check: its baseline entry, precision, host/device split and gate verdict.

    Plain builtins only (``str()`` of a vocabulary member): pytest-xdist's wire format refuses enums."""
    row: dict[str, Any] = {
        "key": key,
        "target": report.target,
        **entry.to_json(),
        "bit_exact": report.bit_exact,
        "numerics": report.numerics.to_json(),
        "host_us": round(report.variant.host_us, 3),
        "device_us": finite_us(report.variant.device_us),
        "bound": str(report.variant.bound),
        "attribution": {str(variant): attribution.to_json() for variant, attribution in report.attribution.items()},
        "affinity": findings_json(report.findings),
        "kernels": longest_tasks(report.variant),
        "contributions": contributions_json(report.contributions),
        "why": None if (why := report.why) is None else why.to_json(),
        "trust": [error.to_json() for error in report.trust],
    }
    if report.ranks is not None:
        row["ranks"] = report.ranks.to_json()
    if report.memory is not None:
        row["memory"] = report.memory.to_json()
    if change is not None:
        row["gate"] = change.status
    return row
