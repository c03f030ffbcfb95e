"""Fitting a profile's ``estimate`` constants: the one fitter of the package and of the benchmarks.

Only constants marked ``estimate`` in the architecture file (``target/data/dav_c220.toml``) move: a cited
hardware fact never does. The search is a deterministic coordinate descent over a multiplicative grid
in a fixed order, so the same measurements give the same constants on every machine:
``benchmarks/calibration.py`` fits it to published rows, ``python -m pytest_npufuse calibrate`` to a
team's own profile. An error is |log(modeled / measured)|, capped at log(4) so one kernel or row the
model cannot explain does not drag every constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

Values = dict[tuple[str, str], float]


@dataclass(frozen=True)
class Estimate:
    """One constant the fit may move: its table and key, its value before any fit (from the profile notes
    of the first cost model, where every published fit starts), its bounds, and whether it is part of a
    kernel's own time (msprof's Duration) rather than a gap between tasks or the host's."""

    section: str
    key: str
    prior: float
    low: float
    high: float
    in_kernel: bool = True

    @property
    def name(self) -> tuple[str, str]:
        return self.section, self.key


# Not fitted: ``[efficiency] cube_tile`` (1.0: a fed tile's MMADs run at the 16x16x16 fractal rate the
# Cube peak is derived from; padding, K fill, MTE1's feed and the rounds of tiles are priced in
# cost/cube.py) and ``[core_memory] ddr_bytes_per_cycle`` (the ini's ddr_rate, read like its l2_read_rate).
# Left free, they traded off against each other and against the group of rows held out of each k-fold fit.
# Nor ``[core_memory] row_copy_cycles`` (msKPP's profiled cost of one GM->L1 DataCopy): only the two
# 80000-deep CATLASS rows read it, so a fit without them left it at its prior.
ESTIMATES = (
    Estimate("efficiency", "compute", 0.7, 0.3, 1.0),
    Estimate("efficiency", "compute_int8", 1.0, 0.2, 1.0),  # from the int8 fractal rate, as cube_tile
    Estimate("efficiency", "memory", 0.8, 0.3, 1.0),
    Estimate("efficiency", "pipeline_overlap", 0.5, 0.0, 1.0),
    Estimate("core_memory", "indexed_access_cycles", 32.0, 0.0, 1000.0),
    Estimate("overhead_us", "kernel_head", 2.0, 0.0, 30.0),
    Estimate("overhead_us", "cold_start", 0.0, 0.0, 40.0),
    Estimate("overhead_us", "fetch_per_core", 0.04, 0.0, 1.0),
    Estimate("overhead_us", "task_gap", 1.0, 0.0, 10.0, in_kernel=False),
    Estimate("overhead_us", "replay_task", 0.0, 0.0, 10.0, in_kernel=False),
    Estimate("overhead_us", "mpmd_task", 1.0, 0.0, 10.0),
    Estimate("mc2", "phase_us", 40.0, 0.0, 100.0),
    Estimate("mc2", "rank_us", 0.0, 0.0, 5.0),
    Estimate("aicpu", "gflops_per_core", 2.0, 0.05, 50.0),
    Estimate("aicpu", "bytes_per_us_per_core", 2000.0, 50.0, 20000.0),
    Estimate("host_us", "eager_dispatch", 10.0, 0.0, 300.0, in_kernel=False),
    Estimate("host_us", "infer_shape", 3.0, 0.5, 200.0, in_kernel=False),
    Estimate("host_us", "launch", 5.0, 1.0, 200.0, in_kernel=False),
    Estimate("host_us", "launch_collective", 5.0, 1.0, 400.0, in_kernel=False),
)
KERNEL_ESTIMATES = tuple(estimate for estimate in ESTIMATES if estimate.in_kernel)
STEPS = (0.25, 0.5, 0.75, 1.33, 2.0, 4.0)
# A constant at zero starts from these shares of its range.
FROM_ZERO = (0.02, 0.1, 0.3)
CAP = math.log(4.0)


def prior(estimates: Iterable[Estimate] = ESTIMATES) -> Values:
    """Every estimate at its value before any fit."""
    return {estimate.name: estimate.prior for estimate in estimates}


def log_error(modeled: float, measured: float) -> float:
    """|log(modeled / measured)|, capped at :data:`CAP` (a non-positive time counts as the cap)."""
    if modeled <= 0 or measured <= 0:
        return CAP
    return min(CAP, abs(math.log(modeled / measured)))


def candidates(estimate: Estimate, current: float) -> list[float]:
    """The values one step of the descent tries for ``estimate`` from ``current``."""
    if current == 0.0:
        return [estimate.low + (estimate.high - estimate.low) * share for share in FROM_ZERO]
    return [min(estimate.high, max(estimate.low, current * step)) for step in STEPS]


def descend(
    start: Values,
    objective: Callable[[Values], float],
    estimates: Sequence[Estimate] = ESTIMATES,
    passes: int = 2,
) -> Values:
    """Coordinate descent from ``start``: each pass tries every step of every estimate in order and keeps
    the best; it stops early when a pass changes nothing. ``objective`` is the loss of a set of values."""
    values = dict(start)
    best = objective(values)
    for _ in range(passes):
        moved = False
        for estimate in estimates:
            for candidate in candidates(estimate, values[estimate.name]):
                trial = {**values, estimate.name: candidate}
                score = objective(trial)
                if score < best - 1e-9:
                    best, values, moved = score, trial, True
        if not moved:
            break
    return values


def tables(values: Values) -> dict[str, dict[str, float]]:
    """The values as profile tables (``{section: {key: value}}``), to lay over a target."""
    tables: dict[str, dict[str, float]] = {}
    for (section, key), value in values.items():
        tables.setdefault(section, {})[key] = value
    return tables
