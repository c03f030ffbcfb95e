"""Fitting the profile's estimates on training rows, and k-fold cross-validation of that fit.

Only constants marked ``estimate`` are fitted (cited hardware facts never move). The objective is the
mean of |log(modeled / published)| over the rows, capped at log(4) so one row the model cannot explain
does not drag every constant, plus a penalty per gain whose sign comes out wrong; each row weighs
1/sqrt(rows of its kind) (:func:`loss`). The search is a
deterministic coordinate descent over a multiplicative grid, in a fixed order: the same rows give the same
constants on every machine.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from typing import Iterable, Sequence

from .evaluate import Outcome, evaluate
from .rows import Profiles, Row

# (section, key, prior, lower bound, upper bound): the estimates the fit may move, shared by every A2/A3
# die (they live in dav_c220.toml). The prior is each estimate's value before any fit (from the profile
# notes of the first cost model): every fit, the shipped one and each k-fold one, starts there.
PARAMETERS = (
    ("efficiency", "compute", 0.7, 0.3, 1.0),
    ("efficiency", "compute_int8", 0.7, 0.2, 1.0),
    ("efficiency", "memory", 0.8, 0.3, 1.0),
    ("efficiency", "pipeline_overlap", 0.5, 0.0, 1.0),
    ("core_memory", "ddr_bytes_per_cycle", 32.0, 8.0, 110.0),
    ("overhead_us", "kernel_head", 2.0, 0.0, 30.0),
    ("overhead_us", "cold_start", 0.0, 0.0, 40.0),
    ("overhead_us", "fetch_per_core", 0.04, 0.0, 1.0),
    ("overhead_us", "task_gap", 0.6, 0.0, 10.0),
    ("overhead_us", "replay_task", 0.0, 0.0, 10.0),
    ("mc2", "phase_us", 40.0, 0.0, 100.0),
    ("mc2", "rank_us", 0.0, 0.0, 5.0),
    ("aicpu", "gflops_per_core", 2.0, 0.05, 50.0),
    ("aicpu", "bytes_per_us_per_core", 2000.0, 50.0, 20000.0),
    ("host_us", "eager_dispatch", 10.0, 0.0, 300.0),
)
STEPS = (0.25, 0.5, 0.75, 1.33, 2.0, 4.0)
# A constant whose prior is zero starts from these shares of its range.
FROM_ZERO = (0.02, 0.1, 0.3)
CAP = math.log(4.0)
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
        ratio = outcome.modeled / outcome.published
        error = CAP if ratio <= 0 else min(CAP, abs(math.log(ratio)))
        if outcome.sign_right is False:
            error += SIGN_PENALTY
        total += weight * error
        weights += weight
    return total / max(weights, 1e-9)


Values = dict[tuple[str, str], float]


class Evaluator:
    """Outcomes of every row under a set of constant values, remembered: the k-fold fits start from the
    same prior and try mostly the same values, so each set of values is simulated once for all rows."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = rows
        self._seen: dict[tuple, dict[str, Outcome]] = {}

    def outcomes(self, values: Values, rows: Iterable[Row]) -> list[Outcome]:
        key = tuple(sorted(values.items()))
        known = self._seen.get(key)
        if known is None:
            tables: dict[str, dict[str, float]] = {}
            for (section, name), value in values.items():
                tables.setdefault(section, {})[name] = value
            profiles = Profiles(tables)
            known = self._seen[key] = {row.id: evaluate(row, profiles) for row in self.rows}
        return [known[row.id] for row in rows]


def prior() -> Values:
    return {(section, key): value for section, key, value, _, _ in PARAMETERS}


def fit(rows: Sequence[Row], evaluator: Evaluator | None = None, passes: int = 2) -> Values:
    """Coordinate descent from the prior; each pass tries every step of every constant and keeps the best,
    stopping early when a pass changes nothing."""
    evaluator = evaluator or Evaluator(rows)
    values = prior()
    best = loss(evaluator.outcomes(values, rows))
    for _ in range(passes):
        moved = False
        for section, key, _, low, high in PARAMETERS:
            current = values[(section, key)]
            if current == 0.0:
                candidates = [low + (high - low) * share for share in FROM_ZERO]
            else:
                candidates = [min(high, max(low, current * step)) for step in STEPS]
            for candidate in candidates:
                trial = {**values, (section, key): candidate}
                score = loss(evaluator.outcomes(trial, rows))
                if score < best - 1e-9:
                    best, values, moved = score, trial, True
        if not moved:
            break
    return values


def fold_of(row: Row, folds: int) -> int:
    """A row's fold, by the hash of its group, so rows that are not independent stay together."""
    return int(hashlib.sha256(row.group.encode()).hexdigest(), 16) % folds


def cross_validate(rows: Sequence[Row], folds: int, evaluator: Evaluator | None = None) -> list[Outcome]:
    """Every row predicted by a fit (the same search as the shipped one) on the other folds."""
    evaluator = evaluator or Evaluator(rows)
    outcomes: list[Outcome] = []
    for fold in range(folds):
        held = [row for row in rows if fold_of(row, folds) == fold]
        values = fit([row for row in rows if fold_of(row, folds) != fold], evaluator)
        outcomes += evaluator.outcomes(values, held)
    order = {row.id: index for index, row in enumerate(rows)}
    return sorted(outcomes, key=lambda outcome: order[outcome.row.id])
