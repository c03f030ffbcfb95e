"""Merging the JSON documents of several CI shards (``python -m pytest_npufuse merge OUT IN...``).

A suite split over several machines (``pytest --splits``-style sharding, pytest-xdist on each) writes
one ``--npufuse-json`` run report per shard; merged, they are one run report that ``compare`` gates
once against the committed baseline, or (``as_baseline``) the new baseline itself. Baselines merge the
same way. Numbers of two models never mix, shards run with other gate options do not make one run, and
a test found in two shards is a sharding mistake, so each is refused with the files and the key or
option named; nothing is written then. A shard given twice (the same file, or one with the same
content) is merged once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import BaselineError
from ..simulate.version import ModelIdentity
from .baseline import Entry, Results, read_document, read_results
from .run_document import read_run_tests, run_document


@dataclass(frozen=True)
class _Shard:
    """One input: its kind, results and (for a run report) its tests and gate description."""

    path: Path
    kind: str
    results: Results
    tests: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]]
    gate: Mapping[str, Any] | None


def _read(path: Path) -> _Shard:
    kind, results = read_results(path)
    if kind != "run":
        return _Shard(path, kind, results, {}, None)
    _, tests = read_run_tests(path)
    return _Shard(path, kind, results, tests, read_document(path).get("gate"))


def _distinct(shards: Sequence[_Shard]) -> tuple[list[_Shard], list[str]]:
    """The shards without repeats, and a note per repeat: the same file given twice (after symlinks), or
    a file with the same content as an earlier one (a shard's report copied twice)."""
    kept: list[_Shard] = []
    notes = []
    for shard in shards:
        same = next(
            (k for k in kept if k.path.resolve() == shard.path.resolve() or _content(k) == _content(shard)), None
        )
        if same is None:
            kept.append(shard)
        else:
            notes.append(f"skipped {shard.path}: the same shard as {same.path}, merged once")
    return kept, notes


def _content(shard: _Shard) -> tuple[Any, ...]:
    return (shard.kind, shard.results, dict(shard.tests), shard.gate)


def _gate(shards: Sequence[_Shard]) -> Mapping[str, Any] | None:
    """The one set of gate options (baseline file, tolerance, update) every run report's shard ran with;
    shards run with different ones are not one run, an error naming both files and the options."""
    first = shards[0]
    for shard in shards[1:]:
        if shard.gate != first.gate:
            raise BaselineError(
                f"{shard.path} was run with other gate options than {first.path} ({_options(shard.gate)} against "
                f"{_options(first.gate)}); run every shard with the same --npufuse-baseline, --npufuse-tolerance "
                "and --npufuse-update-baseline (none on the shards when one final job gates), then merge again.",
                file=str(shard.path), entry=".gate",
            )
    return first.gate


def _options(gate: Mapping[str, Any] | None) -> str:
    if gate is None:
        return "no gate"
    return ", ".join(f"{key} {gate[key]!r}" for key in sorted(gate))


def _model(shards: Sequence[_Shard]) -> ModelIdentity | None:
    """The one model every shard was measured with (targets may differ between shards); a shard of
    another simulator, op catalog or profile of a shared target is an error naming both files, and so
    is a run report, or a baseline with entries, that names no model (its entries would be lost)."""
    merged: ModelIdentity | None = None
    first: _Shard | None = None
    for shard in shards:
        model = shard.results.model
        if model is None and (shard.kind == "run" or shard.results.entries):
            raise BaselineError(
                f"{shard.path} has no 'model' (null), so its numbers cannot be told from another model's; "
                "pytest-npufuse always writes it: write the file again with pytest-npufuse.",
                file=str(shard.path), entry=".model",
            )
        if model is None:
            continue
        if merged is not None and first is not None:
            changes = model.changes_from(merged)
            if changes:
                raise BaselineError(
                    f"{shard.path} was measured with another model version than {first.path} ({'; '.join(changes)}); "
                    "run every shard with the same pytest-npufuse, profiles and op catalog (same pyproject.toml), "
                    "then merge again.", file=str(shard.path), entry=".model",
                )
        merged, first = model.merged_over(merged), first or shard
    return merged


def _overlap(seen: dict[str, Path], key: str, path: Path, what: str) -> None:
    if key in seen:
        raise BaselineError(
            f"{what} {key} is in both {seen[key]} and {path}; each shard must run different tests (check the "
            "sharding: a test selected twice). Nothing was written.", file=str(path), entry=key,
        )
    seen[key] = path


def merge_documents(paths: Sequence[Path], as_baseline: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The document that combines ``paths``: all baselines, or all run reports (written as a run
    report, or as a baseline with ``as_baseline``), and a note per repeated shard it merged once.
    Raises BaselineError naming the files and the key or option on mixed kinds, mismatched models or
    gate options, or an entry or test found in two inputs."""
    shards, notes = _distinct([_read(path) for path in paths])
    kinds = {shard.kind for shard in shards}
    if len(kinds) > 1:
        listing = ", ".join(f"{shard.path} ({shard.kind})" for shard in shards)
        raise BaselineError(
            f"cannot merge baselines with run reports: {listing}; merge files of one kind (a merged run report "
            "becomes a baseline with --baseline)."
        )
    model = _model(shards)
    entries: list[tuple[str, str, Entry]] = []
    seen_entries: dict[str, Path] = {}
    tests: dict[str, tuple[str, Sequence[Mapping[str, Any]]]] = {}
    seen_tests: dict[str, Path] = {}
    for shard in shards:
        for key, target in shard.results.pairs():
            _overlap(seen_entries, f"{key} [{target}]", shard.path, "entry")
            entries.append((key, target, shard.results.entries[key][target]))
        for nodeid, test in shard.tests.items():
            _overlap(seen_tests, nodeid, shard.path, "test")
            tests[nodeid] = test
    results = Results(model, {})
    if model is not None:
        results = results.with_entries(entries, model)
    if kinds == {"baseline"} or as_baseline:
        return results.to_json("baseline"), notes
    gate = _gate(shards)
    assert model is not None  # a run report always names its model
    return run_document(model, tests, gate), notes
