"""Merging the JSON documents of several CI shards (``python -m pytest_npufuse merge OUT IN...``).

A suite split over several machines (``pytest --splits``-style sharding, pytest-xdist on each) writes
one ``--npufuse-json`` run report per shard; merged, they are one run report that ``compare`` gates
once against the committed baseline, or (``as_baseline``) the new baseline itself. Baselines merge the
same way. Numbers of two models never mix, and a test found in two shards is a sharding mistake, so
both are refused with the files and the key named; nothing is written then.
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


def _model(shards: Sequence[_Shard]) -> ModelIdentity | None:
    """The one model every shard was measured with (targets may differ between shards); a shard of
    another simulator, op catalog or profile of a shared target is an error naming both files."""
    merged: ModelIdentity | None = None
    first: _Shard | None = None
    for shard in shards:
        model = shard.results.model
        if model is None:
            continue
        if merged is not None and first is not None:
            changes = model.changes_from(merged)
            if changes:
                raise BaselineError(
                    f"{shard.path} was measured with another model version than {first.path} ({'; '.join(changes)}); "
                    "run every shard with the same pytest-npufuse, profiles and op catalog (same pyproject.toml), "
                    "then merge again."
                )
        merged, first = model.merged_over(merged), first or shard
    return merged


def _overlap(seen: dict[str, Path], key: str, path: Path, what: str) -> None:
    if key in seen:
        raise BaselineError(
            f"{what} {key} is in both {seen[key]} and {path}; each shard must run different tests (check the "
            "sharding: a test selected twice, or the same file given twice). Nothing was written."
        )
    seen[key] = path


def merge_documents(paths: Sequence[Path], as_baseline: bool = False) -> dict[str, Any]:
    """The document that combines ``paths``: all baselines, or all run reports (written as a run
    report, or as a baseline with ``as_baseline``). Raises BaselineError naming the file and the key
    on mixed kinds, mismatched models or an entry or test found in two inputs."""
    shards = [_read(path) for path in paths]
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
        return results.to_json("baseline")
    gates = [shard.gate for shard in shards if shard.gate is not None]
    gate = gates[0] if gates and all(g == gates[0] for g in gates) else None
    assert model is not None  # a run report always names its model
    return run_document(model, tests, gate)
