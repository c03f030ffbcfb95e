"""Candidate SuperKernel layouts of a captured program, planned and simulated without touching the model.

A candidate is a scope label for some kernels. Scopes only ever annotate kernels (the captured graph
is the same whatever they are), so a candidate is the captured program with other annotations: the
model is captured once and every layout is planned and simulated from that one program. The layouts are
those of docs/feature-docs.md#scope-analysis (bottom-up: attention only, MoE / FFN only, the whole decoder layer, all
layers; top-down: all layers, then one scope per layer, then per module), plus the reference with no scope; a
model without decoder layers gets one scope per outermost module and one over the whole forward.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from ..errors import NpufuseError
from ..ir.program import ModuleFrame, Program
from ..plan.compilation import CompileWork, compile_work
from ..plan.superkernel import plan_variant
from ..plan.tasks import ScopePlan, Variant
from ..sanitize.checker import SanitizerReport
from ..simulate.timeline import RunReport, simulate
from ..target.profile import HardwareProfile
from .structure import Role, Structure


class Layout(str, enum.Enum):
    """The scope layouts the advisor tries; the value is how the report names each."""

    NONE = "none"
    AS_WRITTEN = "as written"
    ATTENTION = "attention"
    MOE = "moe"
    FFN = "ffn"
    PER_MODULE = "per module"
    MODULES = "attention + moe/ffn"
    DECODER_LAYER = "decoder_layer"
    PER_LAYER = "per-layer"
    ALL_LAYERS = "all_layers"
    WHOLE_FORWARD = "whole forward"
    TOP_DOWN = "top-down"


# Worst first: a candidate's outcome is its worst scope's.
_SEVERITY = ("error", "aborted", "hang", "bypassed", "unsupported", "unfused", "fused", "none")
FAILED = frozenset({"error", "aborted", "hang"})


@dataclass(frozen=True)
class BreakSite:
    """An op that split a scope, where the user wrote it, and how many times (once per layer)."""

    op_type: str
    source: str
    count: int

    def describe(self) -> str:
        where = f"@{self.source.rsplit('/', 1)[-1]}" if self.source else ""
        return f"{self.op_type}{where}" + (f" x{self.count}" if self.count > 1 else "")


@dataclass(frozen=True)
class Candidate:
    """One layout planned and simulated: its scopes, what became of them, and its modeled time."""

    layout: Layout
    scopes: tuple[str, ...]
    segments: int
    breaks: tuple[BreakSite, ...]
    outcome: str
    bit_exact: bool
    time_us: float
    reason: str = ""
    failed_scopes: tuple[str, ...] = ()
    note: str = ""
    compile: CompileWork = CompileWork()
    compile_limit_s: float = float("inf")

    @property
    def compile_timeout(self) -> bool:
        """The estimated compile time passes the limit (the configured timeout by default): the scope guide's "compiles
        slowly, may time out"."""
        return self.compile.seconds > self.compile_limit_s

    @property
    def valid(self) -> bool:
        """Compiles (within the compile limit), runs to the end, keeps every output bit-exact and fuses
        something (the validation of docs/feature-docs.md#scope-analysis: compile without timeout,
        function, precision; the performance check is the gain)."""
        return self.outcome == "fused" and self.bit_exact and not self.compile_timeout

    def pays(self, reference_us: float) -> bool:
        """Valid and faster than the run with no scope."""
        return self.valid and self.time_us < reference_us

    @property
    def rank_key(self) -> tuple[bool, float, float, int]:
        """Valid layouts first (one whose compile passes the limit is not), faster first; on a tie the one
        that compiles faster (the guide: a small scope "compiles fast"), then the smaller scope ("from
        small to large": less risk for the same time), i.e. the earlier Layout."""
        return (not self.valid, self.time_us, self.compile.seconds, list(Layout).index(self.layout))

    def gain_pct(self, reference_us: float) -> float:
        """How much faster than ``reference_us`` (the run with no scope), in percent of it."""
        if not (self.time_us < float("inf")) or reference_us <= 0:
            return float("-inf")
        return 100.0 * (reference_us - self.time_us) / reference_us


Assignment = Mapping[str, str]


def with_scopes(program: Program, assignment: Assignment, options: str) -> Program:
    """``program`` with every kernel's SuperKernel scope replaced: ``assignment`` maps a kernel name to
    its scope label; kernels not in it are outside any scope. Streams and core limits stay."""
    kernels = []
    for kernel in program.kernels:
        label = assignment.get(kernel.name)
        annotations = kernel.annotations
        if label != annotations.sk_scope or (label is not None and options != annotations.sk_options):
            annotations = replace(annotations, sk_scope=label, sk_options=options if label is not None else "")
            kernel = replace(kernel, annotations=annotations)
        kernels.append(kernel)
    return replace(program, kernels=tuple(kernels))


def _role_assignment(structure: Structure, roles: tuple[Role, ...]) -> dict[str, str]:
    return {name: role.value for role in roles for _, block in structure.kernels_of(role) for name in block.kernels}


def _layer_assignment(structure: Structure, label: Callable[[int], str]) -> dict[str, str]:
    return {name: label(layer.index) for layer in structure.layers for name in layer.kernels}


def _all_layers(structure: Structure, program: Program) -> dict[str, str]:
    """Every kernel from the first layer's first to the last layer's last: one scope around the loop."""
    indices = [program.kernel(name).index for layer in structure.layers for name in layer.kernels]
    return {kernel.name: "all_layers" for kernel in program.kernels[min(indices): max(indices) + 1]}


def top_modules(program: Program) -> dict[ModuleFrame, list[str]]:
    """The model's outermost module calls that split its kernels, each with its kernels: the first
    module call each kernel was traced in, or the next one down while a single call (a wrapper such as
    ``model.encoder``) holds every kernel."""
    depth = 0
    while True:
        children: dict[ModuleFrame, list[str]] = {}
        for kernel in program.kernels:
            frames = [frame for frame in kernel.modules if frame.path]
            if len(frames) > depth:
                children.setdefault(frames[depth], []).append(kernel.name)
        only = next(iter(children)) if len(children) == 1 else None
        if only is None or len(children[only]) < len(program.kernels):
            return children
        depth += 1


def _other_model(program: Program) -> dict[Layout, dict[str, str]]:
    """The "other models" branch of docs/feature-docs.md#scope-analysis (no decoder layers): one scope per outermost
    module, and one scope over the whole forward, for the automatic analysis to choose from."""
    layouts: dict[Layout, dict[str, str]] = {}
    modules = top_modules(program)
    if len(modules) > 1:
        layouts[Layout.PER_MODULE] = {
            name: frame.path.replace(".", "_") for frame, names in modules.items() for name in names
        }
    if program.kernels:
        layouts[Layout.WHOLE_FORWARD] = {kernel.name: "forward" for kernel in program.kernels}
    return layouts


def assignments(structure: Structure, program: Program) -> dict[Layout, dict[str, str]]:
    """The bottom-up and top-down layouts this model's structure allows, smallest first."""
    if not structure.layers:
        return _other_model(program)
    roles = structure.roles()
    layouts: dict[Layout, dict[str, str]] = {}
    for role in roles:
        layouts[Layout(role.value)] = _role_assignment(structure, (role,))
    if len(roles) > 1:
        layouts[Layout.MODULES] = _role_assignment(structure, roles)
    layouts[Layout.DECODER_LAYER] = _layer_assignment(structure, lambda index: "decoder_layer")
    if len(structure.layers) > 1:
        layouts[Layout.PER_LAYER] = _layer_assignment(structure, lambda index: f"layer_{index}")
    layouts[Layout.ALL_LAYERS] = _all_layers(structure, program)
    return layouts


def _break_sites(scopes: tuple[ScopePlan, ...]) -> tuple[BreakSite, ...]:
    counts: dict[tuple[str, str], int] = {}
    for scope in scopes:
        for found in scope.breaks:
            key = (found.op_type, found.source)
            counts[key] = counts.get(key, 0) + 1
    return tuple(BreakSite(op_type, source, count) for (op_type, source), count in counts.items())


class Evaluator:
    """Plans and simulates candidates of one captured program on one target (capture once, plan many).

    Scopes change no kernel and no event between streams, so the sanitizer's verdict on the program's
    stream plan holds for every candidate: it is computed once (a race makes every layout lose
    bit-exactness, which the report says).
    """

    def __init__(
        self, program: Program, profile: HardwareProfile, options: str, sanitizer: SanitizerReport | None,
        compile_limit_s: float = float("inf"),
    ) -> None:
        self.program = program
        self.compile_limit_s = compile_limit_s
        self.profile = profile
        self.options = options
        self.bit_exact = sanitizer is None or not sanitizer.races
        self.deadlock = sanitizer.deadlock.describe() if sanitizer is not None and sanitizer.deadlock else None

    def evaluate(self, layout: Layout, assignment: Assignment, note: str = "", options: str | None = None) -> Candidate:
        program = with_scopes(self.program, assignment, self.options if options is None else options)
        return self.run(layout, program, note)

    def run(self, layout: Layout, program: Program, note: str = "") -> Candidate:
        """Plan and simulate ``program`` as it is annotated."""
        try:
            plan = plan_variant(program, self.profile, variant=Variant.VARIANT)
        except NpufuseError as exc:
            labels = program.superkernel_scopes()
            return Candidate(layout, labels, 0, (), "error", self.bit_exact, float("inf"), exc.diagnosis, labels, note)
        if self.deadlock and plan.failure is None:
            plan = replace(plan, failure=self.deadlock)
        run: RunReport = simulate(program, plan, self.profile)
        outcomes = [scope.outcome for scope in plan.scopes] or ["none"]
        outcome = min(outcomes, key=_SEVERITY.index)
        failed = tuple(scope.scope for scope in plan.scopes if scope.outcome in FAILED)
        reason = plan.failure or next((scope.reason for scope in plan.scopes if scope.reason), "")
        return Candidate(
            layout, tuple(scope.scope for scope in plan.scopes), sum(len(scope.segments) for scope in plan.scopes),
            _break_sites(plan.scopes), outcome, self.bit_exact, run.time_us, reason, failed, note,
            compile_work(plan, program), self.compile_limit_s,
        )
