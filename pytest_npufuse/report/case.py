"""The case report: everything a test or a CI gate needs to know about one compared case."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from ..plan.tasks import ScopeBreak, ScopePlan
from ..sanitize.checker import Race
from ..simulate.ranks import RanksReport
from ..simulate.timeline import RunReport
from .attribution import Attribution
from .contention import Contention
from .contributions import describe as describe_contributions
from .contributions import own_speedup, scope_key, streams_contribution
from .findings import Finding, Mismatch
from .gain import GainError, GainWhy, explain_gain, gain_error, gain_kinds
from .memory import StepMemory
from .numerics import Numerics
from .streams import StreamUse


@dataclass(frozen=True)
class ScopeReport:
    """The outcome of one SuperKernel scope in the VARIANT. Each op that split it is one
    :class:`~pytest_npufuse.plan.tasks.ScopeBreak` in ``break_points`` (the op, its kernel, its source
    line, why a SuperKernel cannot call it); ``breaks`` and ``break_sites`` are views of them."""

    scope: str
    outcome: str
    segments: int
    block_dim: int
    names: tuple[str, ...]
    kernel_names: tuple[str, ...]
    kernel_type: str
    options: str
    reason: str
    break_points: tuple[ScopeBreak, ...] = ()
    splits: tuple[str, ...] = ()

    @property
    def breaks(self) -> tuple[str, ...]:
        """The op type of each break, in program order (what the ``superkernel`` marker's ``breaks=`` names)."""
        return tuple(site.op_type for site in self.break_points)

    @property
    def break_sites(self) -> tuple[str, ...]:
        """Each break in words: its op type, kernel and source line."""
        return tuple(site.describe() for site in self.break_points)

    @classmethod
    def from_plan(cls, scope: ScopePlan) -> "ScopeReport":
        return cls(
            scope=scope.scope,
            outcome=scope.outcome,
            segments=len(scope.segments),
            block_dim=scope.block_dim,
            names=tuple(segment.name for segment in scope.segments),
            kernel_names=tuple(segment.te_name for segment in scope.segments),
            kernel_type=scope.segments[0].kernel_type if scope.segments else "",
            options=scope.options,
            reason=scope.reason,
            break_points=scope.breaks,
            splits=scope.splits,
        )


@dataclass(frozen=True)
class CaseReport:
    """BASELINE (scopes ignored) against VARIANT (scopes honoured) for one model on one target.

    ``attribution`` summarises each run (keyed ``baseline`` / ``variant``) per module path, per op type
    and by overlap (:mod:`~pytest_npufuse.report.attribution`); ``findings`` are the affinity-op
    findings (docs/feature-docs.md#affinity-ops) when they were asked for.
    """

    target: str
    mode: str
    baseline: RunReport
    variant: RunReport
    mismatches: tuple[Mismatch, ...]
    superkernels: Mapping[str, ScopeReport]
    streams: tuple[str, ...]
    races: tuple[Race, ...]
    outputs: tuple[str, ...]
    trace_path: str | None = None
    plog_path: str | None = None
    deadlock: str | None = None
    captures: int = 1
    """Dynamo + AOT captures the check made: one per model (two with a ``reference=`` model)."""
    kernels_executed: int = 0
    """Kernels the numerics computed: the BASELINE's, plus the VARIANT's racy cone (or, with a
    ``reference=`` model, the whole VARIANT)."""
    attribution: Mapping[str, Attribution] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    stream_uses: tuple[StreamUse, ...] = ()
    """Per stream of the VARIANT, its kernels and those a SuperKernel on another stream took in."""
    ranks: RanksReport | None = None
    """With ``ranks=N``: each rank's step of the deployment and the cost of routing imbalance."""
    numerics: Numerics = field(default_factory=Numerics)
    """Which outputs were computed (all, a sample of layers, none: a timing-only model) and the stand-in
    values the timing used where none were computed."""
    memory: StepMemory | None = None
    """A training step's modeled device memory (:mod:`.memory`); None for an inference check."""
    phases: tuple[str, ...] = ()
    """A training step's graphs in the order they ran (``forward``, ``backward``, ``optimizer``); empty
    for an inference check. Gradients and updated parameters are among ``outputs`` (``grad[<name>]``,
    ``param[<name>]``)."""
    contention: Contention | None = None
    """Streams of the VARIANT whose kernels each wanted every core of one unit (docs/feature-docs.md#multi-stream),
    with the share of their possible overlap lost, measured against the core counts of the profile the case
    ran on (:func:`~.contention.stream_contention`); None on one stream or without such kernels."""
    contributions: Mapping[str, float] = field(default_factory=dict)
    """The modeled microseconds each scope (``scope:sp1``) and the side streams (``stream:1``) save, all
    else equal (negative: cost), with the ``interaction`` and ``other`` terms that make the sum BASELINE
    minus VARIANT (:mod:`pytest_npufuse.pipeline.contributions`); empty for a training step and a VARIANT
    that cannot run."""

    @property
    def speedup(self) -> float:
        """Baseline time over variant time: above 1 means the scopes pay off. Two runs that take no
        modeled time at all (a profile whose costs are all zero) are equally fast, 1.0."""
        if self.variant.time_us == 0:
            return 1.0 if self.baseline.time_us == 0 else math.inf
        return self.baseline.time_us / self.variant.time_us

    def scope_speedup(self, scope: str) -> float | None:
        """The scope's own speedup: the VARIANT with only this scope ignored over the VARIANT (None when
        the report has no contributions, a training step)."""
        saved = self.contributions.get(scope_key(scope))
        return None if saved is None else own_speedup(self.variant.time_us, saved)

    def streams_speedup(self) -> float | None:
        """The side streams' own speedup: the VARIANT with them merged onto the main stream over the
        VARIANT; 1.0 when it ran on one stream, None when the report has no contributions."""
        if not self.contributions:
            return None
        saved = streams_contribution(self.contributions)
        return own_speedup(self.variant.time_us, saved or 0.0)

    def contributions_text(self) -> str:
        """Each contribution as a share of the BASELINE's time: "scope sp1: -4.6%, stream 1: +10.9% (whole +5.6%)"."""
        return describe_contributions(self.contributions, self.baseline.time_us)

    @property
    def bit_exact(self) -> bool:
        """No computed output differs (true when nothing was computed: see ``numerics``)."""
        return not self.mismatches

    @property
    def segments(self) -> int:
        """SuperKernel segments formed over all scopes."""
        return sum(scope.segments for scope in self.superkernels.values())

    def scope_not_found(self, scope: str) -> str:
        """That the model defines no SuperKernel scope ``scope``, with the scopes it does define: a marker
        expecting it and ``options=`` naming it say so in the same words."""
        seen = ", ".join(repr(name) for name in self.superkernels) or "none"
        return f"super_kernel scope '{scope}' was not found in the captured graph (scopes seen: {seen})"

    @property
    def why(self) -> GainWhy | None:
        """Where the VARIANT's saved (or lost) time came from, by mechanism (:mod:`.gain`); None when a
        run never finishes (no time to split)."""
        if not (math.isfinite(self.baseline.time_us) and math.isfinite(self.variant.time_us)):
            return None
        return explain_gain(self.baseline, self.variant)

    @property
    def trust(self) -> tuple[GainError, ...]:
        """The model's measured error on published gains of each kind this VARIANT makes (SuperKernel
        segments, a second stream), from the held-out figures of docs/fidelity.md."""
        return tuple(error for kind in gain_kinds(self.segments, len(self.streams)) if (error := gain_error(kind)))

    def stream_notes(self) -> list[str]:
        """Where the kernels of a stream went when the timeline shows no lane (or a short one) for it."""
        return [note for use in self.stream_uses if (note := use.note())]

    def _fused_streams(self) -> str:
        """How many streams run (wholly) inside a SuperKernel on another stream, for the summary."""
        inside = sum(1 for use in self.stream_uses if use.kernels and use.fused_elsewhere == use.kernels)
        return f" ({inside} inside a SuperKernel)" if inside else ""

    def _precision(self) -> str:
        if not self.numerics.computed:
            return self.numerics.describe()
        exact = "bit-exact" if self.bit_exact else f"{len(self.mismatches)} output(s) differ"
        return exact if self.numerics.status == "computed" else f"{exact} ({self.numerics.describe()})"

    def summary(self) -> str:
        """One line a person reads first."""
        return (
            f"{self.target} {self.mode}: baseline {self.baseline.time_us:.1f} us, variant {self.variant.time_us:.1f} us, "
            f"speedup {self.speedup:.3f}x, {self.segments} SuperKernel segment(s), {self._precision()}"
            + (f", {len(self.streams)} streams{self._fused_streams()}, {len(self.races)} race(s)" if len(self.streams) > 1 else "")
            + (f"; {self.ranks.describe()}" if self.ranks is not None else "")
            + (f"; contention: {contention.describe()}" if (contention := self.contention) is not None else "")
            + (f"; gain by {self.contributions_text()}" if len(self.contributions) > 1 else "")
        )
