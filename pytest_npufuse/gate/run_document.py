"""The machine-readable report of a whole pytest run (``--npufuse-json``).

It holds every test's outcome, every ``npufuse.check()`` record, and the same ``entries`` a baseline
holds, so ``python -m pytest_npufuse compare`` can compare two runs, or a run with a baseline. No wall
clock, host name or worker id goes in: a serial run and a pytest-xdist run write the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import BaselineError, NpufuseError
from ..files import locked_output, present, write_text
from ..files.jsonfile import json_path
from ..files.kinds import fingerprint
from ..simulate.version import ModelIdentity
from .baseline import DOCUMENT, Entry, Results, dumps, read_document

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


Tests = Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]]


def entries_of(
    rows: Sequence[Mapping[str, Any]], where: str, file: str | None = None, at: Sequence[str] = ()
) -> list[tuple[str, str, Entry]]:
    """(test key, target, entry) for each check record; read from ``file``, the records are the list at
    the JSON path ``at`` in it, which an error names."""
    for row in rows:
        if not (isinstance(row, Mapping) and isinstance(row.get("key"), str) and isinstance(row.get("target"), str)):
            raise BaselineError(
                f"{where}: a check record must be an object with string 'key' and 'target', got {row!r:.80}.",
                file=file,
            )
    return [
        (row["key"], row["target"],
         Entry.from_json(row, f"{where} {row['key']!r}", file, json_path((*at, index)) if file is not None else None))
        for index, row in enumerate(rows)
    ]


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
    write_text(path, dumps(document), "run report", named=True)


def read_run_tests(path: Path) -> tuple[ModelIdentity | None, dict[str, tuple[str, list[Mapping[str, Any]]]]]:
    """The model and the tests (node id -> outcome and check records) of the run report at ``path``."""
    data = read_document(path)
    if data["kind"] != "run":
        raise DOCUMENT.fail(path, f"is a pytest-npufuse {data['kind']} file, not a run report")
    tests = data.get("tests")
    if not isinstance(tests, Mapping):
        raise DOCUMENT.fail(path, "'tests' must be an object of node id -> outcome and records")
    parsed: dict[str, tuple[str, list[Mapping[str, Any]]]] = {}
    for nodeid, test in tests.items():
        outcome = test.get("outcome") if isinstance(test, Mapping) else None
        records = test.get("npufuse") if isinstance(test, Mapping) else None
        if outcome not in OUTCOMES or not isinstance(records, list):
            raise DOCUMENT.fail(
                path, f"test {nodeid!r} must have an 'outcome' of {', '.join(OUTCOMES)} and an 'npufuse' list"
            )
        entries_of(records, f"{path} test {nodeid!r}", str(path), ("tests", nodeid, "npufuse"))
        parsed[nodeid] = (outcome, records)
    model = None if data.get("model") is None else ModelIdentity.from_json(data["model"], str(path))
    return model, parsed


def save_run_report(
    path: Path, model: ModelIdentity, tests: Tests, gate: Mapping[str, Any] | None,
    seen: tuple[int, int, int, int] | None,
) -> list[str]:
    """Write the run's report to ``path`` and return what to tell the user about it.

    ``seen`` is the file's :func:`~pytest_npufuse.files.kinds.fingerprint` when the run started. Under
    the file's lock: a report another process wrote during this run is merged with this one (both
    runs' tests kept; a test both ran keeps this run's result, named as a conflict), while a report from
    before this run is replaced, saying which of its tests this run did not run.
    """
    with locked_output(path, "run report") as regular:
        notes: list[str] = []
        their_model, theirs = None, {}
        concurrent = regular and present(path, DOCUMENT) and fingerprint(path) != seen
        if regular and present(path, DOCUMENT):
            try:
                their_model, theirs = read_run_tests(path)
            except NpufuseError as exc:
                notes.append(f"replaced {path}, which was not a readable run report ({exc})")
        if concurrent and theirs:
            clashes = sorted(
                nodeid for nodeid, (outcome, rows) in tests.items()
                if nodeid in theirs and theirs[nodeid] != (outcome, list(rows))
            )
            model = model.merged_over(their_model)
            tests = {**theirs, **tests}
            notes.append(
                f"merged the run report {path} with the one another process wrote during this run "
                f"({len(theirs)} test(s))"
                + (f"; this run's results replaced theirs for {', '.join(clashes)}" if clashes else "")
            )
        elif theirs:
            dropped = sorted(set(theirs) - set(tests))
            if dropped:
                notes.append(f"replaced the run report {path}; it held {len(dropped)} test(s) this run did not run")
        write_run_report(path, run_document(model, tests, gate))
        return notes + [f"wrote {path}"]
