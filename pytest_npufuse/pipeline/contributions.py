"""What each SuperKernel scope and the side streams contribute to the VARIANT's gain, all else equal.

A factor's contribution is the modeled time the VARIANT saves by it (negative: costs): the same captured
program re-planned and simulated with only that factor taken away, minus the VARIANT's own time. A scope
is taken away by ignoring it (its kernels run as their own tasks, every stream kept); the side streams by
merging them onto the main stream, as the BASELINE's plan does (every scope kept). The program is not
captured again and the numerics do not run again: each factor costs one plan and one simulation.

Why "all else equal" (each factor taken away last) and not Shapley values: each contribution is then
exactly the figure its marker judges (``superkernel(min_speedup=)`` a scope's, ``multistream(min_speedup=)``
the streams'), so a report and a gate never disagree, and it costs one plan per factor instead of one per
subset of factors. What the factors do together is not lost: it is the ``interaction`` term, the whole gain
of all factors (against the program with every scope ignored and every stream merged) minus the sum of
their own; and ``other`` is what separates that program from the BASELINE (a ``reference=`` model, or the
BASELINE plan's own differences). So the mapping sums to the whole, BASELINE minus VARIANT, by
construction, and every number in it is deterministic (a plan and a simulation are).

The side streams count as one factor, keyed ``stream:<tag>`` (``stream:1+2`` for two side streams): the
``multistream`` marker judges them together, and merging one of several side streams leaves events
between the others that no compiler would emit.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import Mapping, Sequence

from ..ir.program import DEFAULT_STREAM, Program
from ..plan.superkernel import plan_variant
from ..plan.tasks import ScopeOutcome, Variant
from ..report.contributions import INTERACTION, OTHER, scope_key, stream_key
from ..simulate.timeline import simulate
from .graph import ModeledProgram, Settings, streams_used

# Outcomes in which a scope forms no SuperKernel: ignoring it plans the same tasks, so it saves nothing.
_NO_EFFECT = (ScopeOutcome.UNFUSED, ScopeOutcome.BYPASSED, ScopeOutcome.UNSUPPORTED)


def without_scopes(program: Program, scopes: Sequence[str]) -> Program:
    """``program`` with the SuperKernel scopes ``scopes`` ignored: their kernels carry no scope (as if the
    ``super_kernel`` block were not written); streams, events and every other scope stay."""
    kernels = tuple(
        replace(kernel, annotations=replace(kernel.annotations, sk_scope=None, sk_options=""))
        if kernel.annotations.sk_scope in scopes else kernel
        for kernel in program.kernels
    )
    return replace(program, kernels=kernels)


def _time_us(program: Program, settings: Settings, options: Mapping[str, str], multistream: bool) -> float:
    """The modeled time of ``program`` planned as a VARIANT (quietly: the VARIANT's own plan already gave
    each warning about its scopes and options)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        plan = plan_variant(program, settings.profile, variant=Variant.VARIANT, mode=settings.mode,
                            dynamic=settings.dynamic, options=options, multistream=multistream)
    return simulate(program, plan, settings.profile, dynamic=settings.dynamic, host=settings.host).time_us


def contributions(
    baseline_us: float, variant: ModeledProgram, settings: Settings, options: Mapping[str, str]
) -> dict[str, float]:
    """Microseconds saved by each scope (``scope:<name>``) and by the side streams (``stream:<tags>``),
    each all else equal, then ``interaction`` (with two factors or more) and ``other`` (when not zero):
    together BASELINE minus VARIANT. Empty when the VARIANT cannot run to the end (it has no time to share)."""
    whole = baseline_us - variant.run.time_us
    if variant.run.failure is not None or not math.isfinite(whole):
        return {}
    program = variant.program
    scopes = [scope.scope for scope in variant.plan.scopes]
    side = [stream for stream in streams_used(variant) if stream != DEFAULT_STREAM]
    saved = {
        scope_key(scope.scope): 0.0 if scope.outcome in _NO_EFFECT
        else _time_us(without_scopes(program, [scope.scope]), settings, options, True) - variant.run.time_us
        for scope in variant.plan.scopes
    }
    if side:
        saved[stream_key(side)] = _time_us(program, settings, options, False) - variant.run.time_us
    if not saved:
        return {}
    if len(saved) > 1:
        none_us = _time_us(without_scopes(program, scopes), settings, options, False)
        saved[INTERACTION] = none_us - variant.run.time_us - sum(saved.values())
    else:
        none_us = variant.run.time_us + next(iter(saved.values()))
    other = baseline_us - none_us
    if other != 0.0:
        saved[OTHER] = other
    return saved
