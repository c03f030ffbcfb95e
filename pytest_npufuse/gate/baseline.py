"""The CI performance gate: baseline files of modeled times, and the judgement of a new time against them.

Modeled times are deterministic, so the gate can be exact: a case is slower or it is not. A baseline
file is one sorted JSON document, so a re-baseline shows up in review as a readable diff::

    {
      "entries": {"cases/test_x.py::test_sp1": {"a3": {"baseline_us": 134.6, "variant_us": 133.6, ...}}},
      "kind": "baseline",
      "model": {"catalog": "...", "profiles": {"a3": "..."}, "simulator": "1"},
      "model_version": "...",
      "schema_version": 1,
      "tool": "pytest-npufuse"
    }

Each entry carries the model version it was measured with, so an entry from an older model is reported
as "model changed, re-baseline" instead of as a regression. A run report (``--npufuse-json``) carries
entries of the same shape, so ``python -m pytest_npufuse compare`` reads either kind.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import BaselineError
from ..files import FileRole, locked, present, read_json, write_text
from ..files.jsonfile import json_path
from ..files.limits import MAX_TIME_US
from ..report.explain import break_key
from ..simulate.version import ModelIdentity

if TYPE_CHECKING:  # the report module needs torch; the compare command must start without it
    from ..report.case import CaseReport

SCHEMA_VERSION = 1
TOOL = "pytest-npufuse"
KINDS = ("baseline", "run")

REGRESSED = "regressed"
IMPROVED = "improved"
UNCHANGED = "unchanged"
NEW = "new"
REMOVED = "removed"
MODEL_CHANGED = "model changed"


@dataclass(frozen=True)
class Entry:
    """The modeled numbers of one test on one target, as a baseline records them.

    ``breaks`` lists, per SuperKernel scope that unfusable ops split, those ops as ``"aten::add at
    models.py:12"`` (:func:`~pytest_npufuse.report.explain.break_key`), so a later failure can say which
    breaking op is new; scopes that are not split are left out. It is None for a case without scopes
    and in entries written before breaks were recorded (then no op is called new).

    ``sites`` holds the VARIANT's device time and kernel count per op type and source line
    (``"aten::mm at model.py:34": [us, count]``, :class:`~pytest_npufuse.report.attribution.SiteTime`),
    so a regression can name the ops whose time changed and their lines. It is None in entries written
    before sites were recorded: such an entry still gates, with a note that per-op detail needs a
    re-baseline.
    """

    mode: str
    baseline_us: float
    variant_us: float | None
    speedup: float
    segments: int
    streams: int
    model_version: str
    breaks: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    sites: tuple[tuple[str, float, int], ...] | None = None

    @classmethod
    def of(cls, report: CaseReport, model_version: str) -> "Entry":
        """Rounded so that the JSON text, and a diff of it, shows no float noise."""
        breaks = tuple(
            (scope.scope, tuple(break_key(site) for site in scope.break_points))
            for scope in report.superkernels.values() if scope.break_points
        ) if report.superkernels else None
        return cls(
            mode=str(report.mode),
            baseline_us=round(report.baseline.time_us, 3),
            variant_us=finite_us(report.variant.time_us),
            speedup=round(report.speedup, 4),
            segments=report.segments,
            streams=len(report.streams),
            model_version=model_version,
            breaks=breaks,
            sites=_sites_of(report),
        )

    def site_times(self) -> dict[str, tuple[float, int]] | None:
        """Device time and kernel count by site key; None when the entry did not record them."""
        return None if self.sites is None else {key: (us, count) for key, us, count in self.sites}

    def break_keys(self) -> dict[str, tuple[str, ...]] | None:
        """The recorded breaking ops by scope; None when the entry did not record them."""
        return None if self.breaks is None else dict(self.breaks)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "mode": self.mode,
            "baseline_us": self.baseline_us,
            "variant_us": self.variant_us,
            "speedup": self.speedup,
            "segments": self.segments,
            "streams": self.streams,
            "model_version": self.model_version,
        }
        if self.breaks is not None:
            data["breaks"] = {scope: list(sites) for scope, sites in self.breaks}
        if self.sites is not None:
            data["sites"] = {key: [us, count] for key, us, count in self.sites}
        return data

    @classmethod
    def from_json(cls, data: Any, where: str, file: str | None = None, entry: str | None = None) -> "Entry":
        """Validate one entry; extra keys are ignored so a run report's rows read as entries too. ``where``
        opens the messages; an error's fields name the ``file`` and the ``entry``'s JSON path in it (with
        the key at fault) and the bound a number broke."""
        if not isinstance(data, Mapping):
            raise BaselineError(f"{where}: an entry must be an object, got {type(data).__name__}.",
                                file=file, entry=entry)
        kinds = {"mode": str, "baseline_us": float, "variant_us": float, "speedup": float, "segments": int,
                 "streams": int, "model_version": str}
        values: dict[str, Any] = {}
        for key, kind in kinds.items():
            value = data.get(key)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            at = f"{entry}.{key}" if entry is not None else None
            if key == "variant_us" and value is None:
                values[key] = None
            elif kind is float and number and math.isfinite(value) and (value > 0 or key == "speedup" and value == 0):
                bound = MAX_SPEEDUP if key == "speedup" else MAX_TIME_US
                if value > bound:
                    unit = "" if key == "speedup" else " us"
                    raise BaselineError(
                        f"{where}: '{key}' is {value!r}{unit}, more than {bound:g}{unit}, which no modeled run "
                        "comes near; the file was not written by pytest-npufuse or was edited. Re-baseline the "
                        "case (--npufuse-update-baseline) or delete the entry.", file=file, entry=at, bound=bound,
                    )
                values[key] = float(value)
            elif kind is int and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                values[key] = value
            elif kind is str and isinstance(value, str):
                values[key] = value
            else:
                expected = {float: "a positive number", int: "an integer >= 0", str: "a string"}[kind]
                expected += " or null (a VARIANT that cannot finish)" if key == "variant_us" else ""
                raise BaselineError(f"{where}: '{key}' is {value!r}, expected {expected}.", file=file, entry=at)
        return cls(
            **values, breaks=_breaks(data["breaks"], where) if "breaks" in data else None,
            sites=_sites(data["sites"], where) if "sites" in data else None,
        )


def _sites_of(report: CaseReport) -> tuple[tuple[str, float, int], ...] | None:
    """The VARIANT's time per op type and line, as an entry stores it (None without an attribution)."""
    attribution = report.attribution.get("variant")
    if attribution is None:
        return None
    merged: dict[str, list[float]] = {}
    for site in attribution.sites:  # two paths with one file name and line share a key
        row = merged.setdefault(site.key, [0.0, 0])
        row[0] += site.total_us
        row[1] += site.count
    return tuple((key, round(us, 3), int(count)) for key, (us, count) in merged.items())


def _sites(value: Any, where: str) -> tuple[tuple[str, float, int], ...]:
    """An entry's ``sites``: key -> [device us >= 0, kernel count >= 0]."""
    def valid(row: Any) -> bool:
        return (
            isinstance(row, list) and len(row) == 2 and all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in row)
            and math.isfinite(row[0]) and 0 <= row[0] <= MAX_TIME_US and isinstance(row[1], int) and row[1] >= 0
        )

    if not isinstance(value, Mapping) or not all(valid(row) for row in value.values()):
        raise BaselineError(f"{where}: 'sites' is not an object of op site -> [device us, kernel count].", entry="sites")
    return tuple((key, float(us), count) for key, (us, count) in value.items())


MAX_SPEEDUP = MAX_TIME_US / 1e-3
"""The largest speedup an entry may hold: the longest time over the shortest one stored (a nanosecond)."""


def _breaks(value: Any, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """An entry's ``breaks``: scope -> list of op descriptions."""
    if not isinstance(value, Mapping) or not all(
        isinstance(sites, list) and all(isinstance(site, str) for site in sites) for sites in value.values()
    ):
        raise BaselineError(f"{where}: 'breaks' is {value!r}, expected an object of scope -> list of strings.")
    return tuple((scope, tuple(sites)) for scope, sites in value.items())


Entries = Mapping[str, Mapping[str, Entry]]


@dataclass(frozen=True)
class Results:
    """The entries of a baseline file or a run report, and the model that measured them.

    ``entries`` maps a test key (its node id without the target) to target name to :class:`Entry`.
    """

    model: ModelIdentity | None
    entries: Entries

    def get(self, key: str, target: str) -> Entry | None:
        return self.entries.get(key, {}).get(target)

    def pairs(self) -> list[tuple[str, str]]:
        """Every (test key, target), sorted."""
        return sorted((key, target) for key, targets in self.entries.items() for target in targets)

    def with_entries(self, new: Iterable[tuple[str, str, Entry]], model: ModelIdentity) -> "Results":
        """These results with ``new`` entries written over, every other entry kept."""
        entries = {key: dict(targets) for key, targets in self.entries.items()}
        for key, target, entry in new:
            entries.setdefault(key, {})[target] = entry
        return Results(model.merged_over(self.model), entries)

    def to_json(self, kind: str) -> dict[str, Any]:
        """The document for ``kind`` (baseline or run); a run report adds its own keys to it."""
        model = self.model.to_json() if self.model else None
        return {
            "tool": TOOL,
            "kind": kind,
            "schema_version": SCHEMA_VERSION,
            "model_version": self.model.version if self.model else None,
            "model": model,
            "entries": {
                key: {target: entry.to_json() for target, entry in targets.items()}
                for key, targets in self.entries.items()
            },
        }


def count_line(changes: Sequence[Change]) -> str:
    """How many changes have each status, e.g. ``1 regressed, 3 unchanged`` ('' when there are none)."""
    counts: dict[str, int] = {}
    for change in changes:
        counts[change.status] = counts.get(change.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))


def parse_percent(text: str) -> float | None:
    """A tolerance written ``2.5`` or ``2.5%``; None when it is not a finite percentage >= 0."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def finite_us(value: float) -> float | None:
    """A modeled time as stored: rounded to the nanosecond, or None for a run that never finishes (JSON
    has no infinity)."""
    return round(value, 3) if math.isfinite(value) else None


def dumps(document: Mapping[str, Any]) -> str:
    """Sorted keys, one value per line and a final newline: stable bytes and readable diffs. A stray
    infinity or nan is an error here rather than invalid JSON in the user's file."""
    return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# Baselines and run reports: errors are BaselineErrors that say the file was not changed.
DOCUMENT = FileRole(
    "pytest-npufuse JSON", BaselineError,
    "fix or delete the file, or give another path (under pytest, with --npufuse-baseline); the file was left untouched",
)


def read_document(path: Path) -> dict[str, Any]:
    """Parse ``path`` and check it is a pytest-npufuse document of a schema this version reads."""
    data = read_json(path, DOCUMENT)
    if not isinstance(data, dict) or data.get("tool") != TOOL or data.get("kind") not in KINDS:
        raise DOCUMENT.fail(
            path, f"not a pytest-npufuse baseline or run report (no \"tool\": \"{TOOL}\" with a kind of "
            f"{' or '.join(KINDS)})"
        )
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BaselineError(
            f"{path}: schema_version {version!r}, but this pytest-npufuse reads schema_version {SCHEMA_VERSION}; "
            "use the pytest-npufuse version that wrote it, or re-baseline into a new file.",
            file=str(path), entry=".schema_version",
        )
    return data


def read_results(path: Path) -> tuple[str, Results]:
    """The kind and the results of a baseline file or run report; any defect is a BaselineError."""
    data = read_document(path)
    model = None if data.get("model") is None else ModelIdentity.from_json(data["model"], str(path))
    entries = data.get("entries")
    if not isinstance(entries, Mapping) or not all(isinstance(t, Mapping) for t in entries.values()):
        raise BaselineError(f"{path}: 'entries' must be an object of test -> target -> entry.",
                            file=str(path), entry=".entries")
    parsed = {
        key: {
            target: Entry.from_json(
                entry, f"{path} entry {key!r} [{target}]", str(path), json_path(("entries", key, target))
            )
            for target, entry in targets.items()
        }
        for key, targets in entries.items()
    }
    return data["kind"], Results(model, parsed)


def load_baseline(path: Path) -> Results:
    """A baseline file's results; a file that does not exist yet is an empty baseline (a FIFO, a device
    or a symlink loop there is an error, never taken for a missing file and replaced)."""
    if not present(path, DOCUMENT):
        return Results(None, {})
    kind, results = read_results(path)
    if kind != "baseline":
        raise BaselineError(
            f"{path}: is a pytest-npufuse {kind} report, not a baseline; point --npufuse-baseline at a baseline "
            "file (a new path creates one). The file was left untouched.", file=str(path), entry=".kind",
        )
    return results


def write_baseline(path: Path, results: Results) -> None:
    write_text(path, dumps(results.to_json("baseline")), "baseline")


@dataclass(frozen=True)
class Conflict:
    """An entry another process changed while this run was updating it, to another value than this
    run's: what the file held when this run read it, what the other process wrote, and this run's
    value, which is the one written (the last writer wins)."""

    key: str
    target: str
    read: Entry | None
    theirs: Entry | None
    ours: Entry

    def describe(self) -> str:
        def variant(entry: Entry | None) -> str:
            return "no entry" if entry is None else _time(entry.variant_us)

        return (f"{self.key} [{self.target}]: {variant(self.read)} when this run started, {variant(self.theirs)} "
                f"from the other process, {variant(self.ours)} from this run")


@dataclass(frozen=True)
class BaselineUpdate:
    """What one run's update of a baseline did: the results written (None when the file already held
    them), and what another process wrote in the meantime: entries this run also wrote, to other values
    (``conflicts``, written over) or to the same ones (``agreed``), and entries this run left alone
    (``kept``); the last two as ``key [target]``."""

    results: Results | None
    conflicts: tuple[Conflict, ...] = ()
    agreed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()

    def describe(self, path: Path) -> str | None:
        """What happened to ``path`` and what to do about it, when another process wrote it during this
        run; None when nobody else did."""
        if self.conflicts:
            return (
                f"{path} was updated by another process during this run, and {_entries(len(self.conflicts))} "
                f"both runs wrote differ: {'; '.join(c.describe() for c in self.conflicts)}. This run's values "
                "were written (the last writer wins); every other entry of both runs was kept. If the other run's "
                "values are the right ones, re-run those tests with --npufuse-update-baseline. To avoid this, let "
                "concurrent runs update disjoint tests, or give each its own --npufuse-baseline and combine the "
                "files with 'python -m pytest_npufuse merge OUT.json A.json B.json --baseline'"
            )
        if not (self.agreed or self.kept):
            return None
        done = [f"it wrote the same values as this run for {_listed(self.agreed)}"] if self.agreed else []
        done += [f"its {_listed(self.kept)} were kept"] if self.kept else []
        merged = "this run's entries were merged in" if self.results is not None else "the file was not rewritten"
        return f"{path} was updated by another process during this run: {'; '.join(done)}; {merged}, nothing was lost"


_LISTED_ENTRIES = 5


def _entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


def _listed(names: Sequence[str]) -> str:
    """``3 entries (a, b, c)``, the names cut after a few."""
    more = len(names) - _LISTED_ENTRIES
    shown = ", ".join(names[:_LISTED_ENTRIES]) + (f", and {more} more" if more > 0 else "")
    return f"{_entries(len(names))} ({shown})"


def update_baseline(
    path: Path, read: Results, written: Sequence[tuple[str, str, Entry]], model: ModelIdentity
) -> BaselineUpdate:
    """Write ``written`` (test key, target, entry) into the baseline at ``path`` without losing anything
    another process wrote since this run ``read`` the file: under the file's lock it is read again,
    merged and rewritten, so runs updating disjoint entries all keep theirs. An entry that changed
    since it was read, to another value than this run's, is a conflict: this run's value wins, named."""
    with locked(path, "baseline"):
        current = load_baseline(path)
        changed = {pair for pair in {*current.pairs(), *read.pairs()} if current.get(*pair) != read.get(*pair)}
        conflicts = tuple(
            Conflict(key, target, read.get(key, target), current.get(key, target), entry)
            for key, target, entry in written if (key, target) in changed and current.get(key, target) != entry
        )
        mine = {(key, target) for key, target, _ in written}
        agreed = tuple(f"{key} [{target}]" for key, target, entry in written
                       if (key, target) in changed and current.get(key, target) == entry)
        kept = tuple(f"{key} [{target}]" for key, target in sorted(changed - mine) if current.get(key, target))
        results = current.with_entries(written, model)
        written_results = None if results == current else results
        if written_results is not None:
            write_baseline(path, results)
        return BaselineUpdate(written_results, conflicts, agreed, kept)


@dataclass(frozen=True)
class Change:
    """One test on one target, before (the baseline) and after (this run)."""

    key: str
    target: str
    status: str
    before: Entry | None
    after: Entry | None

    @property
    def change_pct(self) -> float | None:
        """Percent change of the VARIANT time; None when a side is missing or does not finish."""
        if self.before is None or self.after is None or None in (self.before.variant_us, self.after.variant_us):
            return None
        return (self.after.variant_us / self.before.variant_us - 1.0) * 100.0

    def numbers(self) -> str:
        """Before and after, in the units a person compares: variant time, change and speedup."""
        if self.before is None or self.after is None:
            only = self.after or self.before
            assert only is not None
            return f"variant {_time(only.variant_us)}, speedup {only.speedup:.3f}x"
        change = f" ({self.change_pct:+.2f}%)" if self.change_pct is not None else ""
        return (
            f"variant {_time(self.before.variant_us)} -> {_time(self.after.variant_us)}{change}, "
            f"speedup {self.before.speedup:.3f}x -> {self.after.speedup:.3f}x"
        )

    def describe(self) -> str:
        return f"{self.key} [{self.target}]: {self.numbers()}"


def _time(variant_us: float | None) -> str:
    return "does not finish" if variant_us is None else f"{variant_us:.3f} us"


def _slower(before: float | None, after: float | None, tolerance_pct: float) -> bool:
    """A VARIANT that stopped finishing is slower; one that still does not finish is not."""
    if after is None or before is None:
        return after is None and before is not None
    return after > before * (1.0 + tolerance_pct / 100.0)


def judge(key: str, target: str, before: Entry | None, after: Entry | None, tolerance_pct: float) -> Change:
    """Compare one entry: slower than ``tolerance_pct`` allows is a regression, any speed-up an improvement.

    Entries measured with different model versions are not compared at all: their difference says
    nothing about the code under test.
    """
    if before is None:
        status = NEW
    elif after is None:
        status = REMOVED
    elif before.model_version != after.model_version:
        status = MODEL_CHANGED
    elif _slower(before.variant_us, after.variant_us, tolerance_pct):
        status = REGRESSED
    elif _slower(after.variant_us, before.variant_us, 0.0):
        status = IMPROVED
    else:
        status = UNCHANGED
    return Change(key, target, status, before, after)


def compare_results(old: Results, new: Results, tolerance_pct: float) -> list[Change]:
    """Every test and target of either side, sorted, judged old against new."""
    pairs = sorted(set(old.pairs()) | set(new.pairs()))
    return [judge(key, target, old.get(key, target), new.get(key, target), tolerance_pct) for key, target in pairs]


def model_notice(changes: Iterable[Change], current: ModelIdentity, stored: ModelIdentity | None) -> str | None:
    """The single "model changed, re-baseline" message of a run, or None if every entry's model matched."""
    stale = [change for change in changes if change.status == MODEL_CHANGED]
    if not stale:
        return None
    what = current.changes_from(stored) if stored else []
    because = f" ({'; '.join(what)})" if what else ""
    return (
        f"model changed, re-baseline: {len(stale)} entr{'y was' if len(stale) == 1 else 'ies were'} measured with "
        f"another model version{because}, so they were not compared"
    )


@dataclass(frozen=True)
class Gate:
    """The baseline gate of one pytest run.

    Every process (the controller and each xdist worker) reads the file once, read-only, so a test can
    judge its own numbers while it runs and fail by itself; only the controller writes, after the run.
    """

    path: Path
    tolerance_pct: float
    update: bool
    model: ModelIdentity
    stored: Results

    @classmethod
    def open(cls, path: Path, tolerance_pct: float, update: bool, model: ModelIdentity) -> "Gate":
        return cls(path, tolerance_pct, update, model, load_baseline(path))

    def judge(self, key: str, target: str, after: Entry) -> Change:
        return judge(key, target, self.stored.get(key, target), after, self.tolerance_pct)

    def failure(self, change: Change) -> str | None:
        """Why the test fails, naming before and after; None unless it regressed outside an update."""
        if change.status != REGRESSED or self.update:
            return None
        return (
            f"modeled time regressed on {change.target} against the baseline {self.path} "
            f"(tolerance {self.tolerance_pct:g}%): {change.numbers()}. If the slowdown is intended, "
            "re-baseline with --npufuse-update-baseline."
        )

    def missing(self, change: Change) -> str:
        assert change.after is not None
        return (
            f"npufuse: no baseline entry for {change.key} [{change.target}] in {self.path}; recording "
            f"variant {_time(change.after.variant_us)} as its baseline if the test passes. Commit the file to gate on it."
        )

    def save(self, changes: Iterable[Change]) -> BaselineUpdate:
        """Write the run's entries into the baseline file, merged with what is there now.

        Missing entries are always recorded; with ``update`` every entry of the run is rewritten.
        Entries of tests that did not run, and those other processes wrote meanwhile, are kept.
        """
        written = [
            (c.key, c.target, c.after) for c in changes if c.after is not None and (self.update or c.status == NEW)
        ]
        if not written:
            return BaselineUpdate(None)
        return update_baseline(self.path, self.stored, written, self.model)
