"""A comparison of two or more runs (``python -m pytest_npufuse compare``): per case the modeled time in
every run and the verdict of the newest against the one before it, and, where both are run reports,
which op types and which kernels account for the change.

Baselines and run reports hold each case's numbers and its VARIANT time per op type and source line
(``sites``), so any two files say which ops at which lines changed; ``--npufuse-json`` run reports also
hold each check's time per op type (msprof's ``op_statistic``) and its longest device tasks by name,
whose deltas need run reports on both sides. :mod:`.comparison_formats` writes a comparison as text, markdown, JSON, CSV and
HTML.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .baseline import REGRESSED, Change, Entry, Results, compare_results, read_results
from .run_document import read_run_tests

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Run:
    """One compared file: its label (the file name without ``.json``), kind, results and, for a run
    report, each check's record by (test key, target)."""

    path: Path
    label: str
    kind: str
    results: Results
    records: Mapping[tuple[str, str], Row]


def read_run(path: Path) -> Run:
    """A baseline or run report as a compared run; any defect is a BaselineError naming the file."""
    kind, results = read_results(path)
    records: dict[tuple[str, str], Row] = {}
    if kind == "run":
        for _, rows in read_run_tests(path)[1].values():
            records.update(((row["key"], row["target"]), row) for row in rows)
    return Run(path, path.name.removesuffix(".json"), kind, results, records)


@dataclass(frozen=True)
class Delta:
    """One op type or kernel of a case, before and after: time (None where that side has no such op
    type, or does not list the kernel among its longest tasks) and task count."""

    name: str
    old_us: float | None
    new_us: float | None
    old_count: int = 0
    new_count: int = 0

    @property
    def delta_us(self) -> float:
        return (self.new_us or 0.0) - (self.old_us or 0.0)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "old_us": self.old_us, "new_us": self.new_us, "delta_us": round(self.delta_us, 3),
                "old_count": self.old_count, "new_count": self.new_count}


def _op_types(record: Row | None) -> dict[str, tuple[float, int]]:
    """VARIANT time and task count per ``op type (core type)`` of one check's record."""
    rows = ((record or {}).get("attribution", {}).get("variant") or {}).get("op_statistic", [])
    return {f"{row['OP Type']} ({row['Core Type']})": (float(row["Total Time(us)"]), int(row["Count"])) for row in rows}


def _kernels(record: Row | None) -> dict[str, tuple[float, str]]:
    """VARIANT time and kernel type of each of the longest device tasks of one check's record."""
    return {name: (float(us), kind) for name, kind, us in (record or {}).get("kernels", [])}


def _deltas(old: Mapping[str, tuple[float, Any]], new: Mapping[str, tuple[float, Any]], counted: bool) -> list[Delta]:
    """Every name on either side whose time changed, the largest change first (ties by name)."""
    deltas = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        delta = Delta(
            name, before[0] if before else None, after[0] if after else None,
            before[1] if counted and before else 0, after[1] if counted and after else 0,
        )
        if abs(delta.delta_us) >= 5e-4 or delta.old_count != delta.new_count:
            deltas.append(delta)
    return sorted(deltas, key=lambda d: (-abs(d.delta_us), d.name))


def _line_of(key: str) -> tuple[str, int]:
    """A site key's op type and file, and its line (``aten::mm at model.py:34`` -> (``aten::mm at model.py``, 34))."""
    head, _, line = key.rpartition(":")
    return (head, int(line)) if " at " in head and line.isdigit() else (key, 0)


def _moved(old: Mapping[str, tuple[float, int]], new: Mapping[str, tuple[float, int]]) -> dict[str, tuple[float, int]]:
    """``old`` with each site that only moved (code added or removed above it: the same op type in the
    same file, at another line, on one side only) renamed to its new key, paired in line order, so a
    shifted line is not reported as one op gone and another new."""
    gone: dict[str, list[tuple[int, str]]] = {}
    came: dict[str, list[tuple[int, str]]] = {}
    for keys, into in ((set(old) - set(new), gone), (set(new) - set(old), came)):
        for key in keys:
            head, line = _line_of(key)
            into.setdefault(head, []).append((line, key))
    renamed = dict(old)
    for head, left in gone.items():
        for (_, was), (_, now) in zip(sorted(left), sorted(came.get(head, []))):
            renamed[now] = renamed.pop(was)
    return renamed


def site_deltas(before: Entry | None, after: Entry | None) -> tuple[Delta, ...] | None:
    """The VARIANT's change per op type and source line between two entries, largest first; None when
    either entry did not record its sites (an older baseline)."""
    old = before.site_times() if before is not None else None
    new = after.site_times() if after is not None else None
    if old is None or new is None:
        return None
    return tuple(_deltas(_moved(old, new), new, counted=True))


@dataclass(frozen=True)
class CaseHistory:
    """One test on one target across the runs: the newest change (against the run before), the
    VARIANT time in every run (None where absent or never finishing), and the deltas behind the change."""

    change: Change
    variant_us: tuple[float | None, ...]
    present: tuple[bool, ...]
    """Whether each run has the case (a present case with no time never finishes)."""
    speedup: tuple[float | None, ...]
    op_types: tuple[Delta, ...]
    kernels: tuple[Delta, ...]
    detailed: bool
    sites: tuple[Delta, ...] | None = None
    """Per op type and source line (from the entries, so baselines have them too); None when an entry
    predates them."""

    @property
    def label(self) -> str:
        return f"{self.change.key} [{self.change.target}]"

    def times(self) -> list[str]:
        """Each run's VARIANT time as the tables show it: '-' where the run lacks the case, 'never'
        where its VARIANT does not finish."""
        return ["-" if not here else "never" if us is None else f"{us:.3f}" for us, here in zip(self.variant_us, self.present)]


@dataclass(frozen=True)
class Comparison:
    """Runs oldest first; every case of any run; the tolerance the newest change was judged with."""

    runs: tuple[Run, ...]
    cases: tuple[CaseHistory, ...]
    tolerance_pct: float

    @property
    def changes(self) -> list[Change]:
        return [case.change for case in self.cases]

    @property
    def regressed(self) -> list[Change]:
        return [change for change in self.changes if change.status == REGRESSED]


def compare_runs(runs: Sequence[Run], tolerance_pct: float) -> Comparison:
    """Judge the newest run against the one before it; every case of every run gets its history."""
    if len(runs) < 2:
        raise ValueError("a comparison needs at least two runs")
    old, new = runs[-2], runs[-1]
    newest = {(c.key, c.target): c for c in compare_results(old.results, new.results, tolerance_pct)}
    pairs = sorted({pair for run in runs for pair in run.results.pairs()})
    cases = []
    for key, target in pairs:
        change = newest.get((key, target)) or Change(key, target, "absent", None, None)
        entries = [run.results.get(key, target) for run in runs]
        before, after = old.records.get((key, target)), new.records.get((key, target))
        cases.append(CaseHistory(
            change,
            tuple(entry.variant_us if entry else None for entry in entries),
            tuple(entry is not None for entry in entries),
            tuple(entry.speedup if entry else None for entry in entries),
            tuple(_deltas(_op_types(before), _op_types(after), counted=True)),
            tuple(_deltas(_kernels(before), _kernels(after), counted=False)),
            before is not None and after is not None,
            site_deltas(old.results.get(key, target), new.results.get(key, target)),
        ))
    return Comparison(tuple(runs), tuple(cases), tolerance_pct)
