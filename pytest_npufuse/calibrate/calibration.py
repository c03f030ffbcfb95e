"""Calibrating a target to a team's own profile: fit the estimates, then a correction per op type.

The matched kernels (:mod:`.match`) are the measurements. Each is modeled as msprof's ``Duration(us)``
measures it: the kernel's own task time, run alone (the BASELINE plan: no SuperKernel, no gaps). First
the base target's ``estimate`` constants that are part of a kernel's time move (the package's fitter,
:func:`.fit.descend`, from the base target's values), then each op type gets the factor on its modeled
body that makes its median kernel right (``[corrections]``, applied by :func:`pytest_npufuse.cost.body_us`):
the factor is solved per kernel from two simulations, since a kernel's time is its fixed head plus its
body times the factor, and the op type's factor is the median over its kernels. Values are rounded to
four significant digits before the after-times are taken, so what is printed is what is written.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from ..errors import CalibrationError
from ..ir.program import Program
from ..plan.superkernel import plan_variant
from ..plan.tasks import Variant
from ..simulate.timeline import simulate
from ..target.profile import (
    BUILTIN_TARGETS, CORRECTION_RANGE, HardwareProfile, TargetTable, builtin_data, load_profile,
)
from .fit import KERNEL_ESTIMATES, Values, descend, log_error, tables
from .match import Matched, Matching

# A correction within this share of 1 is not written: the fitted constants already explain the op type.
NEGLIGIBLE = 0.01
# Passes of the descent: a profile is small next to the published dataset, so it can afford more.
PASSES = 4


@dataclass(frozen=True)
class KernelFit:
    """One matched kernel: measured, modeled on the base target and on the calibrated one, and whether
    the fit saw it (False for a held-back kernel)."""

    matched: Matched
    before_us: float
    after_us: float
    fitted: bool

    @property
    def op_type(self) -> str:
        return self.matched.profiled.op_type

    @property
    def measured_us(self) -> float:
        return self.matched.profiled.duration_us

    def error(self, modeled: float) -> float:
        """Signed relative error of ``modeled`` against the measurement."""
        return modeled / self.measured_us - 1.0 if self.measured_us > 0 else math.inf


@dataclass(frozen=True)
class Calibration:
    """What a calibration moved and how well each kernel is modeled before and after."""

    name: str
    base: str
    moved: Mapping[tuple[str, str], tuple[float, float]]
    corrections: Mapping[str, tuple[float, int]]
    kernels: tuple[KernelFit, ...]
    matching: Matching

    def at_bound(self, section: str, key: str) -> bool:
        """Whether the fit moved the constant as far as it may: the profile shows something the model
        lacks, and the op types' corrections carry the rest."""
        estimate = next(e for e in KERNEL_ESTIMATES if e.name == (section, key))
        value = self.moved[(section, key)][1]
        return value in (round4(estimate.low), round4(estimate.high))

    def overrides(self) -> dict[str, dict[str, float]]:
        """The calibrated target's tables over its base: moved constants and corrections."""
        found = tables({name: new for name, (_, new) in self.moved.items()})
        if self.corrections:
            found["corrections"] = {op: factor for op, (factor, _) in sorted(self.corrections.items())}
        return found

    def profile(self) -> HardwareProfile:
        """The calibrated target as the rest of the package loads it."""
        return _profile(self.name, self.base, self.overrides())


def _profile(name: str, base: str, overrides: Mapping[str, Mapping[str, float]]) -> HardwareProfile:
    return load_profile(name, {name: TargetTable(dict(overrides), f"calibration of {name}", base)})


def kernel_times(program: Program, profile: HardwareProfile) -> dict[str, float]:
    """Each kernel's modeled task time (msprof's Duration), every kernel run as its own task."""
    report = simulate(program, plan_variant(program, profile, variant=Variant.BASELINE), profile)
    return {run.name: run.end_us - run.start_us for run in report.kernels if run.parent is None}


def round4(value: float) -> float:
    """``value`` to four significant digits (what the target table holds)."""
    return float(f"{value:.4g}")


def calibrate(
    program: Program,
    matching: Matching,
    base: str,
    name: str,
    fit_on: Callable[[Matched], bool] = lambda matched: True,
) -> Calibration:
    """Fit ``base``'s kernel estimates and per-op-type corrections to the matched kernels ``fit_on``
    selects (all by default; the benchmark holds half back) and name the result ``name``."""
    if base not in BUILTIN_TARGETS:
        raise CalibrationError(
            f"--npu-target {base!r}: calibrate lays its fit over a built-in target; give one of "
            f"{', '.join(BUILTIN_TARGETS)} (the SKU the profile was measured on).", argument="base"
        )
    fitted = [m for m in matching.matched if fit_on(m) and m.profiled.duration_us > 0]
    if not fitted:
        timeless = [m.profiled for m in matching.matched if m.profiled.duration_us <= 0]
        if timeless:
            lines = ", ".join(str(k.line) for k in timeless[:8]) + (", ..." if len(timeless) > 8 else "")
            raise CalibrationError(
                f"every matched kernel of the profile has Duration(us) 0 (lines {lines}), so there is no time to fit "
                "the target to; profile the model again (a kernel runs for some time) and give that profile.",
                entry=f"line {timeless[0].line}",
            )
        raise CalibrationError("no matched kernel to fit; the profile and the model share no kernel.")
    data = builtin_data(base)
    start = {e.name: float(data[e.section][e.key]) for e in KERNEL_ESTIMATES}
    times = _Times(program, name, base, fitted)
    found = descend(start, times.loss, KERNEL_ESTIMATES, PASSES)
    values = {key: round4(value) for key, value in found.items()}
    moved = {key: (start[key], value) for key, value in values.items() if value != start[key]}
    corrections = {op: (round4(factor), count) for op, (factor, count) in times.corrections(values).items()
                   if abs(round4(factor) - 1.0) > NEGLIGIBLE}
    before = kernel_times(program, load_profile(base))
    after = times.of(values, {op: factor for op, (factor, _) in corrections.items()})
    kernels = tuple(
        KernelFit(m, before[m.kernel.name], after[m.kernel.name], fit_on(m)) for m in matching.matched
    )
    return Calibration(name, base, MappingProxyType(moved), MappingProxyType(corrections), kernels, matching)


class _Times:
    """Kernel times under trial values, remembered. A kernel's time is linear in its op type's correction
    (a fixed head plus the factor times its body), so two simulations of a set of values (every factor 1,
    then 2) give each kernel's head and body, hence the best factor per op type and the times with it:
    the descent fits the constants to the shape of each op type's times, the correction to their level."""

    def __init__(self, program: Program, name: str, base: str, fitted: Sequence[Matched]) -> None:
        self.program, self.name, self.base, self.fitted = program, name, base, fitted
        self.op_types = sorted({m.profiled.op_type for m in fitted})
        self._seen: dict[tuple, dict[str, float]] = {}

    def of(self, values: Values, corrections: Mapping[str, float]) -> dict[str, float]:
        key = (tuple(sorted(values.items())), tuple(sorted(corrections.items())))
        known = self._seen.get(key)
        if known is None:
            overrides = tables(values) | ({"corrections": dict(corrections)} if corrections else {})
            known = self._seen[key] = kernel_times(self.program, _profile(self.name, self.base, overrides))
        return known

    def _parts(self, values: Values) -> list[tuple[Matched, float, float]]:
        """(matched kernel, fixed head, body) of every fitted kernel under ``values``."""
        once, twice = self.of(values, {}), self.of(values, {op: 2.0 for op in self.op_types})
        parts = []
        for m in self.fitted:
            body = twice[m.kernel.name] - once[m.kernel.name]
            parts.append((m, once[m.kernel.name] - body, body))
        return parts

    def corrections(self, values: Values) -> dict[str, tuple[float, int]]:
        """Per op type, the median over its fitted kernels of the body factor that makes each kernel's
        modeled time its measured one, and how many kernels it rests on (kernels with no body, such as
        host-side work, have no factor)."""
        low, high = CORRECTION_RANGE
        factors: dict[str, list[float]] = {}
        for m, fixed, body in self._parts(values):
            if body > 1e-9:
                factor = (m.profiled.duration_us - fixed) / body
                factors.setdefault(m.profiled.op_type, []).append(min(high, max(low, factor)))
        return {op: (statistics.median(found), len(found)) for op, found in sorted(factors.items())}

    def loss(self, values: Values) -> float:
        """Mean capped |log error| of the fitted kernels once each op type has its best correction."""
        factors = {op: factor for op, (factor, _) in self.corrections(values).items()}
        return statistics.fmean(
            log_error(fixed + factors.get(m.profiled.op_type, 1.0) * body, m.profiled.duration_us)
            for m, fixed, body in self._parts(values)
        )
