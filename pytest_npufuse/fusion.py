"""The SuperKernel planner: which kernels a scope fuses into which SuperKernel tasks.

Rule (seed 000): ops in a scope are scanned in program order; an unfusable op closes the current
segment, runs alone as an ordinary task, and a new segment starts after it. The same scope name used in
several places means the same scope; kernels outside any scope that stand between two uses also close
the current segment, so non-contiguous uses give separate segments of that one scope (they are counted
together in its ``segments``, but they are not reported as breaks, since the op in between was never in
the scope). A SuperKernel launches on the largest block dim of its sub-kernels.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping, Sequence

from . import cost
from .errors import NotModeledError
from .hardware import HardwareProfile
from .program import Kernel, Program
from .skoptions import parse_options

BASELINE = "baseline"
VARIANT = "variant"
MAX_AUTOTUNE = "max-autotune"


@dataclass(frozen=True)
class Segment:
    """One SuperKernel formed from a contiguous run of fusable kernels of a scope."""

    scope: str
    kernels: tuple[str, ...]
    name: str
    te_name: str
    block_dim: int


@dataclass(frozen=True)
class ScopeBreak:
    """An unfusable op inside a scope that split it and ran as an ordinary task."""

    op_type: str
    kernel: str
    source: str


@dataclass(frozen=True)
class ScopePlan:
    """What became of one SuperKernel scope."""

    scope: str
    options: str
    outcome: str
    segments: tuple[Segment, ...]
    breaks: tuple[ScopeBreak, ...]
    reason: str

    @property
    def block_dim(self) -> int:
        return max((segment.block_dim for segment in self.segments), default=0)


@dataclass(frozen=True)
class Task:
    """One device task: an ordinary kernel, or a SuperKernel calling its sub-kernels."""

    name: str
    kernels: tuple[str, ...]
    stream: str
    block_dim: int
    engine: str
    segment: Segment | None = None
    priority: int = 0


@dataclass(frozen=True)
class SyncEdge:
    """A cross-stream event: recorded on the stream of ``record_after`` once that task ends, waited on
    the stream of ``wait_before`` before that task starts (either may name a kernel: its task counts). ``record_after=None`` is an event nobody
    records: the device would wait forever, and the simulator reports a modeled deadlock."""

    event: str
    record_after: str | None
    wait_before: str


@dataclass(frozen=True)
class Plan:
    """The tasks of one variant in issue order (each stream runs its own tasks in this order), the
    events between streams, and the fate of every SuperKernel scope."""

    variant: str
    mode: str
    tasks: tuple[Task, ...]
    scopes: tuple[ScopePlan, ...]
    syncs: tuple[SyncEdge, ...] = ()

    def scope(self, name: str) -> ScopePlan | None:
        return next((scope for scope in self.scopes if scope.scope == name), None)


def _stream_of(kernel: Kernel, multistream: bool) -> tuple[str, int]:
    """The stream tag and priority a kernel runs on: its ``npu_stream_switch`` tag, or the default."""
    if multistream and kernel.annotations.stream is not None:
        return kernel.annotations.stream, kernel.annotations.stream_priority
    return "default", 0


def _kernel_task(kernel: Kernel, profile: HardwareProfile, multistream: bool = False) -> Task:
    stream, priority = _stream_of(kernel, multistream)
    return Task(kernel.name, (kernel.name,), stream, cost.block_dim(kernel, profile), kernel.info.engine, priority=priority)


def _segment(scope: str, kernels: Sequence[Kernel], profile: HardwareProfile) -> Segment:
    """Name the SuperKernel as CANN does: GE node ``sk_<scope>_start_<first>_end_<last>`` and kernel
    ``te_superkernel_<hash>``, the names users grep for in plog."""
    name = f"sk_{scope}_start_{kernels[0].name}_end_{kernels[-1].name}"
    digest = hashlib.sha256("|".join([name, *(k.op_type for k in kernels)]).encode()).hexdigest()
    dim = max(cost.block_dim(kernel, profile) for kernel in kernels)
    return Segment(scope, tuple(k.name for k in kernels), name, f"te_superkernel_{digest}", dim)


def _unsupported_reason(profile: HardwareProfile, mode: str, dynamic: bool) -> str:
    if not profile.superkernel_supported:
        return f"SuperKernel is not supported on {profile.product} (profile '{profile.name}')"
    if mode != MAX_AUTOTUNE:
        return f"SuperKernel works only in max-autotune mode, not {mode}"
    if dynamic:
        return "SuperKernel works only with static shapes (dynamic=False)"
    return ""


def _segment_scopes(program: Program, profile: HardwareProfile) -> tuple[dict[str, list[Segment]], dict[str, list[ScopeBreak]]]:
    segments: dict[str, list[Segment]] = {name: [] for name in program.superkernel_scopes()}
    breaks: dict[str, list[ScopeBreak]] = {name: [] for name in segments}
    run: list[Kernel] = []

    def close() -> None:
        if run:
            scope = run[0].annotations.sk_scope
            segments[scope].append(_segment(scope, run, profile))
            run.clear()

    for kernel in program.kernels:
        scope = kernel.annotations.sk_scope
        if scope is None or (run and run[0].annotations.sk_scope != scope):
            close()
        if scope is None:
            continue
        if kernel.info.fusable:
            run.append(kernel)
        else:
            close()
            breaks[scope].append(ScopeBreak(kernel.op_type, kernel.name, kernel.source))
    close()
    return segments, breaks


def _scope_options(program: Program, overrides: Mapping[str, str]) -> dict[str, str]:
    """The options string of each scope: the marker's override, else what the code passed."""
    options: dict[str, str] = {}
    for kernel in program.kernels:
        scope = kernel.annotations.sk_scope
        if scope is not None:
            options.setdefault(scope, overrides.get(scope, kernel.annotations.sk_options))
    return options


def _require_modeled(scope: str, text: str) -> None:
    parsed = parse_options(scope, text)
    if parsed.values:
        set_options = ", ".join(f"{k}={v}" for k, v in parsed.values.items())
        raise NotModeledError(
            f"super_kernel scope '{scope}': options {set_options} are valid but their effect is not modeled by "
            "this version of pytest-npufuse; remove them (or override with options='') to test the scope."
        )


def plan(
    program: Program,
    profile: HardwareProfile,
    *,
    variant: str,
    mode: str = MAX_AUTOTUNE,
    dynamic: bool = False,
    options: Mapping[str, str] | None = None,
    multistream: bool = True,
) -> Plan:
    """Plan BASELINE (every kernel its own task, scopes ignored) or VARIANT (scopes honoured).

    With ``multistream=False`` the VARIANT ignores stream switches and keeps every kernel on the
    default stream, which isolates the SuperKernel effect.
    """
    if variant == VARIANT and multistream and len(program.streams()) > 1:
        raise NotModeledError(
            f"the model switches streams ({', '.join(program.streams()[1:])}); multi-stream execution is not "
            "modeled by this version of pytest-npufuse."
        )
    plain_tasks = tuple(_kernel_task(kernel, profile) for kernel in program.kernels)
    if variant == BASELINE:
        return Plan(variant, mode, plain_tasks, ())
    scope_options = _scope_options(program, options or {})
    for scope, text in scope_options.items():
        _require_modeled(scope, text)
    reason = _unsupported_reason(profile, mode, dynamic)
    if reason:
        scopes = tuple(ScopePlan(s, o, "unsupported", (), (), reason) for s, o in scope_options.items())
        return Plan(variant, mode, plain_tasks, scopes)
    segments, breaks = _segment_scopes(program, profile)
    return Plan(variant, mode, fused_tasks(program, segments, profile), _scope_plans(scope_options, segments, breaks))


def _scope_plans(
    scope_options: Mapping[str, str], segments: Mapping[str, list[Segment]], breaks: Mapping[str, list[ScopeBreak]]
) -> tuple[ScopePlan, ...]:
    plans = []
    for scope, text in scope_options.items():
        formed = tuple(segments[scope])
        outcome = "fused" if formed else "unfused"
        reason = "" if formed else "no kernel in the scope is fusable"
        plans.append(ScopePlan(scope, text, outcome, formed, tuple(breaks[scope]), reason))
    return tuple(plans)


def segment_scopes(program: Program, profile: HardwareProfile) -> Mapping[str, list[Segment]]:
    """The SuperKernel segments every scope of ``program`` forms (no checks of modes or options)."""
    return _segment_scopes(program, profile)[0]


def fused_tasks(
    program: Program, segments: Mapping[str, list[Segment]], profile: HardwareProfile, multistream: bool = False
) -> tuple[Task, ...]:
    """Issue order: each segment takes the place of its first sub-kernel, on that kernel's stream.
    With ``multistream`` every task runs on the stream its scope annotations name."""
    owner = {kernel: seg for segs in segments.values() for seg in segs for kernel in seg.kernels}
    tasks: list[Task] = []
    for kernel in program.kernels:
        segment = owner.get(kernel.name)
        if segment is None:
            tasks.append(_kernel_task(kernel, profile, multistream))
        elif segment.kernels[0] == kernel.name:
            engines = {program.kernel(name).info.engine for name in segment.kernels}
            engine = "cube" if "cube" in engines else "vector"
            stream, priority = _stream_of(kernel, multistream)
            tasks.append(Task(segment.te_name, segment.kernels, stream, segment.block_dim, engine, segment, priority))
    return tuple(tasks)
