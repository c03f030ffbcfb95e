"""Fitting the profile's estimates on training rows (with the package's fitter), and k-fold cross-validation.

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
from collections import Counter
from typing import Iterable, Sequence

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
    """Outcomes of rows under sets of constant values, each remembered under the profile values the
    row's evaluation read (:class:`.trace.Memo`): a trial that moves a constant a row never reads reuses
    the row's outcome, so a fit re-simulates only the rows its move can change."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = rows
        self._memo = trace.Memo()

    def outcomes(self, values: Values, rows: Iterable[Row]) -> list[Outcome]:
        profiles = Profiles(tables(values), traced=True)
        return [self._memo.get(row.id, lambda: evaluate(row, profiles), profiles.plain) for row in rows]


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


def cross_validate(
    rows: Sequence[Row], folds: int, evaluator: Evaluator | None = None, jobs: int = 1
) -> list[Outcome]:
    """Every row predicted by a fit (the same search as the shipped one) on the other folds. With
    ``jobs`` > 1 the folds' fits run in that many forked processes, each starting from what the
    evaluator has already simulated; each fit is deterministic, so the outcomes are the same."""
    evaluator = evaluator or Evaluator(rows)
    if jobs > 1:
        evaluator.outcomes(prior(), rows)  # every fit starts here: simulated once, before the fork
        with multiprocessing.get_context("fork").Pool(min(jobs, folds)) as pool:
            parts = pool.map(functools.partial(_held_out, rows, folds, evaluator), range(folds))
    else:
        parts = [_held_out(rows, folds, evaluator, fold) for fold in range(folds)]
    order = {row.id: index for index, row in enumerate(rows)}
    return sorted((outcome for part in parts for outcome in part), key=lambda outcome: order[outcome.row.id])


def _held_out(rows: Sequence[Row], folds: int, evaluator: Evaluator, fold: int) -> list[Outcome]:
    """The rows of ``fold`` predicted by a fit on the other folds."""
    held = [row for row in rows if fold_of(row, folds) == fold]
    values = fit([row for row in rows if fold_of(row, folds) != fold], evaluator)
    return evaluator.outcomes(values, held)
