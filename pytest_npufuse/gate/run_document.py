"""The machine-readable report of a whole pytest run (``--npufuse-json``).

It holds every test's outcome, every ``npufuse.check()`` record, and the same ``entries`` a baseline
holds, so ``python -m pytest_npufuse compare`` can compare two runs, or a run with a baseline. No wall
clock, host name or worker id goes in: a serial run and a pytest-xdist run write the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ..files.atomic import write_text_atomic
from ..simulate.version import ModelIdentity
from .baseline import Entry, Results, dumps

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def entries_of(rows: Sequence[Mapping[str, Any]], where: str) -> list[tuple[str, str, Entry]]:
    """(test key, target, entry) for each check record."""
    return [(row["key"], row["target"], Entry.from_json(row, f"{where} {row['key']!r}")) for row in rows]


def run_document(
    model: ModelIdentity,
    tests: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]],
    gate: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The report: ``tests`` maps a node id to its outcome and its check records.

    ``gate`` describes the baseline gate of the run (file, tolerance, update), or is None without one.
    """
    rows = [row for nodeid in sorted(tests) for row in tests[nodeid][1]]
    results = Results(None, {}).with_entries(entries_of(rows, "check record"), model)
    counts = {outcome: sum(1 for o, _ in tests.values() if o == outcome) for outcome in OUTCOMES}
    return {
        **results.to_json("run"),
        "gate": dict(gate) if gate is not None else None,
        "summary": {outcome: count for outcome, count in counts.items() if count},
        "tests": {nodeid: {"outcome": outcome, "npufuse": list(records)} for nodeid, (outcome, records) in tests.items()},
    }


def write_run_report(path: Path, document: Mapping[str, Any]) -> None:
    write_text_atomic(path, dumps(document), "run report")
