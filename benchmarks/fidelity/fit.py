"""Fitting the profile's estimates on training rows (with the package's fitter), k-fold cross-validation and
leave-one-source-out validation.

Only constants marked ``estimate`` are fitted (cited hardware facts never move). The objective is the
mean of |log(modeled / published)| over the rows, capped at log(4) so one row the model cannot explain
does not drag every constant, plus a penalty per gain whose sign comes out wrong; each row weighs
1/sqrt(rows of its kind) (:func:`loss`). The search is a
deterministic coordinate descent over a multiplicative grid, in a fixed order: the same rows give the same
constants on every machine.
"""

from __future__ import annotations

import functools
import hashlib
import math
import multiprocessing
import sys
from collections import Counter
from typing import Callable, Iterable, Iterator, Sequence

from pytest_npufuse.calibrate.fit import ESTIMATES, Values, descend, log_error, prior, tables
from pytest_npufuse.target.profile import builtin_data

from . import trace
from .evaluate import Outcome, evaluate
from .rows import Profiles, Row

SIGN_PENALTY = 1.0


def loss(outcomes: Sequence[Outcome]) -> float:
    """Weighted mean of the capped |log ratio| (plus the sign penalty). A row weighs 1/sqrt(rows of its
    kind), so the 38 kernel rows of a few CATLASS tables do not outvote the steps, the SuperKernel and
    stream pairs and the collectives, while a kind with more rows still counts for more."""
    kinds = Counter(outcome.row.kind for outcome in outcomes)
    total = weights = 0.0
    for outcome in outcomes:
        if outcome.modeled is None:
            continue
        weight = 1.0 / math.sqrt(kinds[outcome.row.kind])
        error = log_error(outcome.modeled, outcome.published)
        if outcome.sign_right is False:
            error += SIGN_PENALTY
        total += weight * error
        weights += weight
    return total / max(weights, 1e-9)


class Evaluator:
    """Outcomes of rows under sets of constant values, each remembered under the values of the constants
    that can change what the row's evaluation read (:class:`.trace.ValuesMemo`): a trial that moves a
    constant a row never reads reuses the row's outcome, so a fit re-simulates only the rows its move can
    change, and the leave-one-source-out and k-fold fits share every outcome their trials have in common."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = rows
        influence = trace.Influence([estimate.name for estimate in ESTIMATES], _moves, _profile_with)
        self._memo = trace.ValuesMemo(influence)

    def outcomes(self, values: Values, rows: Iterable[Row]) -> list[Outcome]:
        profiles = Profiles(tables(values), traced=True)
        return [self._memo.get(row.id, values, functools.partial(evaluate, row, profiles)) for row in rows]


_BY_NAME = {estimate.name: estimate for estimate in ESTIMATES}


@functools.cache
def _shipped(target: str) -> Values:
    """Every estimate at its value in the target's built-in profile."""
    data = builtin_data(target)
    return {estimate.name: float(data[estimate.section][estimate.key]) for estimate in ESTIMATES}


def _moves(name: tuple[str, str]) -> tuple[float, ...]:
    """Two values of a constant away from its shipped value (inside an estimate's bounds), to see what it
    changes."""
    section, key = name
    shipped = float(builtin_data("910c")[section][key])
    estimate = _BY_NAME.get(name)
    low, high = (estimate.low, estimate.high) if estimate else (0.0, float("inf"))
    tried = (shipped * 0.5, shipped * 2.0) if shipped else (0.1 * min(high, 10.0), 0.3 * min(high, 10.0))
    return tuple(value for value in (min(high, max(low, v)) for v in tried) if value != shipped)


def _profile_with(target: str, changes: Values):
    """The target's profile with every estimate laid over it at its shipped value, ``changes`` on top."""
    return Profiles(tables({**_shipped(target), **changes})).plain(target)


def fit(rows: Sequence[Row], evaluator: Evaluator | None = None, passes: int = 2) -> Values:
    """The library's coordinate descent (:func:`pytest_npufuse.calibrate.fit.descend`) from the prior of
    every estimate, on the loss of these rows."""
    evaluator = evaluator or Evaluator(rows)
    return descend(prior(), lambda values: loss(evaluator.outcomes(values, rows)), ESTIMATES, passes)


def fit_only(rows: Sequence[Row], names: Sequence[str], evaluator: Evaluator | None = None, passes: int = 2) -> Values:
    """The same descent over only the estimates ``names`` (``section.key``), each from its shipped value and
    every other constant as shipped: a re-fit of the constants one mechanism reads, after the others
    were fitted."""
    chosen = [estimate for estimate in ESTIMATES if f"{estimate.section}.{estimate.key}" in names]
    unknown = sorted(set(names) - {f"{estimate.section}.{estimate.key}" for estimate in chosen})
    if unknown:
        known = ", ".join(f"{estimate.section}.{estimate.key}" for estimate in ESTIMATES)
        raise SystemExit(f"--fit-only: {', '.join(unknown)} is not a fitted estimate; choose from {known}")
    shipped = builtin_data("910c")
    start = {estimate.name: float(shipped[estimate.section][estimate.key]) for estimate in chosen}
    evaluator = evaluator or Evaluator(rows)
    return descend(start, lambda values: loss(evaluator.outcomes(values, rows)), chosen, passes)


def fold_of(row: Row, folds: int) -> int:
    """A row's fold, by the hash of its group, so rows that are not independent stay together."""
    return int(hashlib.sha256(row.group.encode()).hexdigest(), 16) % folds


def source_of(row: Row) -> str:
    """The document a row was published in: a web page, a repository file, or a commit (a PR's merge
    message). Rows of one source share its authors, setup and way of measuring, so a prediction of one of
    them is honest only when no row of the same source was fitted."""
    source = row.get("source", {})
    if "url" in source:
        return source["url"]
    return f"{source.get('repo', '?')}:{source.get('path') or '@' + source.get('commit', '?')}"


def fold_name(folds: int, row: Row) -> str:
    """A row's fold as a part name (a module-level function, so a forked pool can pickle it)."""
    return str(fold_of(row, folds))


def cross_validate(
    rows: Sequence[Row], folds: int, evaluator: Evaluator | None = None, jobs: int = 1
) -> list[Outcome]:
    """Every row predicted by a fit (the same search as the shipped one) on the other folds."""
    return held_out_by(rows, functools.partial(fold_name, folds), evaluator, jobs)


def leave_one_source_out(rows: Sequence[Row], evaluator: Evaluator | None = None, jobs: int = 1) -> list[Outcome]:
    """Every row predicted by a fit on the rows of every other source (:func:`source_of`)."""
    return held_out_by(rows, source_of, evaluator, jobs)


def held_out_by(
    rows: Sequence[Row], part_of: Callable[[Row], str], evaluator: Evaluator | None = None, jobs: int = 1
) -> list[Outcome]:
    """Every row predicted by a fit on the rows of the other parts ``part_of`` puts them in. With ``jobs`` > 1
    the fits run in that many forked processes, each starting from what the evaluator has already
    simulated; each fit is deterministic, so the outcomes are the same."""
    evaluator = evaluator or Evaluator(rows)
    parts = sorted({part_of(row) for row in rows})
    if jobs > 1:
        evaluator.outcomes(prior(), rows)  # every fit starts here: simulated once, before the fork
        with multiprocessing.get_context("fork").Pool(min(jobs, len(parts))) as pool:
            predicted = list(_noting(pool.imap(functools.partial(_held_out, rows, part_of, evaluator), parts), parts))
    else:
        predicted = list(_noting((_held_out(rows, part_of, evaluator, part) for part in parts), parts))
    order = {row.id: index for index, row in enumerate(rows)}
    return sorted((outcome for part in predicted for outcome in part), key=lambda outcome: order[outcome.row.id])


def _noting(predicted: Iterable[list[Outcome]], parts: Sequence[str]) -> Iterator[list[Outcome]]:
    """The parts' predictions as they come, each noted on stderr (a leave-one-source-out run takes a fit per
    source, so its progress is shown)."""
    for done, outcomes in enumerate(predicted, 1):
        print(f"  held out {done}/{len(parts)}: {len(outcomes)} rows of {parts[done - 1]}", file=sys.stderr, flush=True)
        yield outcomes


def _held_out(rows: Sequence[Row], part_of: Callable[[Row], str], evaluator: Evaluator, part: str) -> list[Outcome]:
    """The rows of ``part`` predicted by a fit on the rows of the other parts."""
    held = [row for row in rows if part_of(row) == part]
    values = fit([row for row in rows if part_of(row) != part], evaluator)
    return evaluator.outcomes(values, held)
