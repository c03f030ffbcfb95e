"""The library entry point and the one place the stages are chained, without pytest.

    from pytest_npufuse import compare
    report = compare(model, x, w, target="a3")
    print(report.summary())

capture (Dynamo -> AOT -> aten graph -> program, once per model) -> plan (BASELINE: scopes ignored,
every kernel its own task, one stream; VARIANT: scopes honoured) -> sanitize (the VARIANT's
happens-before check) -> simulate (the modeled timeline) -> execute (numerics on the CPU) -> report.

When BASELINE and VARIANT come from one model they share one capture and one numerics run: the VARIANT
recomputes only the kernels downstream of a racy read (none when the sanitizer finds no race), and every
other value is the BASELINE's. Outputs are still compared bit for bit. ``reference=`` captures and runs a
second model for the BASELINE.

Numerics are computed on every layer (``numerics="all"``, the default for a model with weights), on a
sample of layers (``"sample"``, :mod:`.sample`) or not at all (``"none"``, the default for a timing-only
model whose weights are on the meta device). Without the full numerics only the program is needed, so
the model is captured as :func:`~pytest_npufuse.frontend.repeat.capture_program` does (a repeated layer
stack from 2 and 3 of its layers).
"""

from __future__ import annotations

import contextlib
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from ..advisor.affinity import find_affinity
from ..errors import CaptureError, GapsError
from ..execute.graph import Execution, cone_run, run_graph, writes_inputs
from ..execute.routing import ExpertCounts
from ..execute.sample import Sampled, SampleGraph, capture_sample, compute_sample
from ..execute.standin import stood_in, uncompared
from ..frontend.backend import Capture
from ..frontend.meta import resident_tensors
from ..frontend.repeat import capture_program
from ..frontend.survey import cpu_kernel_gaps, without_cpu_kernel
from ..ir.program import Program
from ..numerics.compare import compare_outputs, named_leaves
from ..numerics.exact import one_thread, quick_handoffs
from ..plan.superkernel import plan_variant
from ..plan.tasks import Variant
from ..report.attribution import attribute
from ..report.case import CaseReport, ScopeReport
from ..report.contention import stream_contention
from ..report.findings import Finding, Mismatch
from ..report.memory import check_fits, check_peak
from ..report.streams import stream_uses
from ..report.numerics import Numerics, Uncompared, stand_ins
from ..report.trace import write_case_traces
from ..sanitize.checker import sanitize
from ..session import in_session
from ..simulate.ranks import RanksReport
from ..simulate.routing import routed_program, routing_of
from ..target.catalog import OpCatalog
from ..target.profile import HardwareProfile
from ..target.resolve import Target
from ..vocabulary import MissingOps, NumericsStatus
from .graph import (  # noqa: F401  (the per-graph names are importable from the chain too)
    CompiledGraph,
    GraphOptions,
    ModeledProgram,
    Settings,
    compiled_graph,
    fresh,
    graph_options,
    model_program,
    streams_used,
)
from .contributions import contributions
from .deployment import rank_view, ranked
from .spec import CaseSpec, spec_of
from .training import compare_step

def capture(model: Callable[..., Any], *inputs: Any, catalog: OpCatalog | None = None) -> Program:
    """The program IR of ``model`` on ``inputs``, no numerics: one Dynamo + AOT capture, or two short ones
    for a long stack of identical layers; a timing-only model (meta device) is captured the same way."""
    return capture_program(model, *inputs, catalog=catalog)


@dataclass(frozen=True)
class _Outputs:
    """Both runs' model-level outputs, the work the numerics did and the experts the MoE routed to."""

    baseline: Any
    variant: Any
    kernels_executed: int
    experts: tuple[int, ...] = ()
    runs: tuple[tuple[Capture, list[Any], Execution], ...] = ()


def _inputs_for(captured: Capture, inputs: Sequence[Any]) -> Sequence[Any]:
    """The inputs to run on: copies when the graph writes into its inputs, so no run sees another's
    writes and the caller's tensors stay untouched; the caller's own tensors otherwise."""
    return fresh(inputs) if writes_inputs(captured.graph.gm) else inputs


def _execute(
    model: Capture, reference: Capture, stale: Mapping[str, frozenset[str]], inputs: Sequence[Any],
    stand_in: Callable[[Capture], frozenset[str]],
) -> _Outputs:
    """BASELINE and VARIANT numerics with each kernel computed once when both come from one capture;
    ``stale`` are the VARIANT's racy reads, ``stand_in`` names a capture's nodes timed without values."""
    gm, program = model.graph.gm, model.graph.program
    shared = reference is model
    cone, keep = cone_run(gm, stale, program) if shared else (frozenset(), frozenset())
    ref = reference.graph
    experts = ExpertCounts(ref.program)
    base_args: list[Any] = []

    def execute_baseline(args: list[Any]) -> Execution:
        base_args.extend(args)
        return run_graph(ref.gm, ref.program, args, {}, keep=keep, observe=experts, stand_in=stand_in(reference))

    baseline, base_run = reference.run(_inputs_for(reference, inputs), execute_baseline)
    runs = ((reference, base_args, base_run),)
    if shared and not cone:
        return _Outputs(baseline, baseline, base_run.kernels_run, experts.shares(), runs)
    variant_args: list[Any] = []

    def execute(args: list[Any]) -> Execution:
        variant_args.extend(args)
        if shared:
            return run_graph(gm, program, args, stale, only=cone, given=base_run.kept, stand_in=stand_in(model))
        return run_graph(gm, program, args, stale, stand_in=stand_in(model))

    variant_out, variant_run = model.run(_inputs_for(model, inputs), execute)
    return _Outputs(baseline, variant_out, base_run.kernels_run + variant_run.kernels_run, experts.shares(),
                    (*runs, (model, variant_args, variant_run)))


def compare(
    model: Callable[..., Any] | CaseSpec,
    *inputs: Any,
    target: str | Path | HardwareProfile | Target | None = None,
    catalog: OpCatalog | None = None,
    **keywords: Any,
) -> CaseReport:
    """Compile and run BASELINE (``reference`` or ``model`` with scopes ignored) and VARIANT, and report.

    ``compare(spec, target=...)`` checks a :class:`~pytest_npufuse.CaseSpec`; ``compare(model, *inputs,
    **keywords)`` builds one from the model, the inputs and the keywords (its fields, documented in the
    Python API reference). ``target`` is resolved by :meth:`~pytest_npufuse.Target.resolve` (a built-in
    target, one of ``./pyproject.toml``'s own such as a calibrated one, or a profile file; default a3),
    and ``catalog`` replaces its op catalog.
    """
    return compare_case(spec_of(model, inputs, keywords), Target.resolve(target, catalog=catalog))


@in_session
def compare_case(spec: CaseSpec, target: Target) -> CaseReport:
    """The chain for one checked spec on one resolved target, in a session of its own (what the check leaves
    behind, its tagged events, streams and device time, goes with it)."""
    settings = Settings(target.profile if spec.ranks is None else ranked(target.profile, spec.ranks), spec.mode,
                        spec.dynamic, spec.host)
    if spec.training:
        return compare_step(spec, settings, target.catalog)
    resident = resident_tensors(spec.model, spec.inputs)
    if spec.ranks is None:  # ranks= shards the experts over dies; one die holds the whole case only without it
        check_fits(resident, settings.profile, "parameters, buffers and inputs")
    # Each case starts from an empty Dynamo cache: a test suite compiles the same forward many times
    # with different backends, and Dynamo would otherwise hit its recompile limit and fall back to eager.
    torch._dynamo.reset()
    racy = _racy_reads(settings, spec.options)
    if spec.numerics != "all":
        programs, result = _timed(spec, target.catalog, racy)
    else:
        programs, result = _computed(spec, target.catalog, racy)
    if spec.ranks is None:
        check_peak(programs[1], resident, settings.profile)
    route = routing_of(spec.routing, result.experts)
    modeled = ModeledCase(
        model_program(routed_program(programs[0], route), settings, Variant.BASELINE),
        model_program(routed_program(programs[1], route), settings, Variant.VARIANT, dict(spec.options)),
    )
    numerics = result.numerics
    if numerics.status in (NumericsStatus.NOT_COMPUTED, NumericsStatus.SAMPLED):
        numerics = replace(numerics, stand_ins=stand_ins(programs[1], route.describe()))
    ranks = rank_view(programs[1], spec.ranks, route, settings, dict(spec.options)) if spec.ranks is not None else None
    findings = find_affinity(modeled.variant.program, settings.profile, target.catalog) if spec.affinity else ()
    report = replace(
        _report(settings, modeled, replace(result, numerics=numerics), ranks, findings),
        contributions=contributions(modeled.baseline.run.time_us, modeled.variant, settings, dict(spec.options)),
    )
    spec.check_scopes(report)
    if spec.trace_dir is None:
        return report
    return replace(report, trace_path=str(write_case_traces(report, Path(spec.trace_dir), spec.case)))


@dataclass(frozen=True)
class NumericsResult:
    """The numerics stage's result: the compared outputs' names, those that differ, how the values were
    computed (all, a sample, none), the captures and kernels it took and the experts the MoE routed to."""

    outputs: tuple[str, ...]
    numerics: Numerics
    captures: int
    mismatches: tuple[Mismatch, ...] = ()
    kernels_executed: int = 0
    experts: tuple[int, ...] = ()


@dataclass(frozen=True)
class ModeledCase:
    """The timing stage's result: the BASELINE and VARIANT programs, each planned, sanitized and simulated."""

    baseline: ModeledProgram
    variant: ModeledProgram


Programs = tuple[Program, Program]  # the BASELINE's (the reference's) and the VARIANT's, as captured
RacyReads = Callable[[Program], Mapping[str, frozenset[str]]]


def _computed(spec: CaseSpec, catalog: OpCatalog, racy: RacyReads) -> tuple[Programs, NumericsResult]:
    """Every output of both runs computed and compared bit for bit, except, under ``timing-only``, those
    computed from an op without a CPU kernel."""
    model, inputs, reference, missing = spec.model, spec.inputs, spec.reference, spec.missing_policy
    with _timed_ops_are_no_gaps(missing):
        captured = Capture(model, inputs, catalog)
        reference_capture = Capture(reference, inputs, catalog) if reference is not None else captured
    if missing is MissingOps.ERROR:
        gaps = dict.fromkeys(gap for each in (reference_capture, captured) for gap in cpu_kernel_gaps(each.graph.gm))
        if gaps:
            raise GapsError(tuple(gaps))

    def stand_in(capture: Capture) -> frozenset[str]:
        return frozenset(node.name for node in without_cpu_kernel(capture.graph.gm))

    outputs = _execute(captured, reference_capture, racy(captured.graph.program), inputs, stand_in)
    names, baseline_leaves = named_leaves(outputs.baseline, "the reference" if reference is not None else "the model")
    _, variant_leaves = named_leaves(outputs.variant)
    if len(baseline_leaves) != len(variant_leaves):
        raise CaptureError(
            f"the reference returns {len(baseline_leaves)} outputs but the model returns {len(variant_leaves)}; "
            "they must return the same structure to be compared."
        )
    skipped = _uncompared(outputs.runs, (baseline_leaves, variant_leaves))
    compared = [position for position in range(len(names)) if position not in skipped]
    result = NumericsResult(
        outputs=tuple(names),
        numerics=_partial(names, skipped) if skipped else Numerics(),
        captures=1 if reference is None else 2,
        mismatches=compare_outputs(
            [names[i] for i in compared], [baseline_leaves[i] for i in compared], [variant_leaves[i] for i in compared]
        ),
        kernels_executed=outputs.kernels_executed,
        experts=outputs.experts,
    )
    return (reference_capture.graph.program, captured.graph.program), result


@contextlib.contextmanager
def _timed_ops_are_no_gaps(missing: MissingOps) -> Iterator[None]:
    """Under ``timing-only``, the gaps a capture lists leave out the ops without a CPU kernel: those are timed."""
    try:
        yield
    except GapsError as exc:
        if missing is MissingOps.ERROR:
            raise
        raise GapsError([gap for gap in exc.gaps if gap.kind != "cpu kernel"], exc.stopped) from None


def _partial(names: Sequence[str], skipped: Mapping[int, frozenset[str]]) -> Numerics:
    """Partial numerics: each output left uncompared, with the ops it comes from and why."""
    return Numerics(NumericsStatus.PARTIAL, not_compared=tuple(
        Uncompared(names[position], tuple(sorted(ops)),
                   f"{' and '.join(sorted(ops))} has no CPU kernel, only a fake kernel (missing_ops='timing-only')")
        for position, ops in sorted(skipped.items())
    ))


def _uncompared(
    runs: Sequence[tuple[Capture, list[Any], Execution]], leaves: tuple[Sequence[Any], Sequence[Any]]
) -> dict[int, frozenset[str]]:
    """The output positions either run computed from a stand-in, with the ops they come from."""
    skipped: dict[int, frozenset[str]] = {}
    for (capture, args, run), run_leaves in zip(runs, leaves):
        seeds = without_cpu_kernel(capture.graph.gm)
        if not seeds:
            continue
        from_ops = stood_in(capture.graph.gm, seeds)
        for position, ops in uncompared(capture.graph.gm, from_ops, args, run.outputs, run_leaves).items():
            skipped[position] = skipped.get(position, frozenset()) | ops
    return skipped


def _timed(spec: CaseSpec, catalog: OpCatalog, racy: RacyReads) -> tuple[Programs, NumericsResult]:
    """The program, for pricing in full; numerics on a sample of layers or none. The sample is captured
    first and computed on a worker thread while the model is captured for its timing: the numbers are
    mostly torch's kernels, which leave the interpreter to the tracing, so the two share the cores."""
    model, inputs, reference, choice = spec.model, spec.inputs, spec.reference, spec.numerics
    handoffs = quick_handoffs() if choice == "sample" else contextlib.nullcontext()
    with ThreadPoolExecutor(max_workers=1) as worker, handoffs:
        sampled = None
        if choice == "sample":
            sample = capture_sample(model, inputs, catalog)
            sampled = worker.submit(_compute_beside_capture, sample, racy(sample.program))
        program = capture_program(model, *inputs, catalog=catalog)
        reference_program = capture_program(reference, *inputs, catalog=catalog) if reference is not None else program
        result = sampled.result() if sampled is not None else None
    programs = (reference_program, program)
    if result is None:
        outputs = tuple(f"output[{position}]" for position, name in enumerate(program.outputs) if name is not None)
        return programs, NumericsResult(outputs, Numerics(NumericsStatus.NOT_COMPUTED), 1 if reference is None else 2)
    return programs, NumericsResult(
        outputs=result.outputs,
        numerics=Numerics(NumericsStatus.SAMPLED, result.layers, result.weights),
        captures=2,
        mismatches=result.mismatches,
        kernels_executed=result.kernels_executed,
        experts=result.experts,
    )


def _compute_beside_capture(sample: SampleGraph, stale: Mapping[str, frozenset[str]]) -> Sampled:
    """The sample's numerics on one intra-op thread: the capture runs beside them on the other core, and a
    pool of OpenMP threads on top of both spins against it (twice the CPU time, and a far longer wall
    time on a loaded machine). The kernels' bits never depend on the thread count."""
    with one_thread():
        return compute_sample(sample, stale)


def _racy_reads(settings: Settings, options: Mapping[str, str]) -> RacyReads:
    """Per program, the reads its VARIANT plan makes in a race (plan and sanitizer, no timeline). The numerics
    need them before the timing's own plan of the program, which warns about the scopes and options: this
    early plan keeps quiet so each warning is given once."""

    def reads(program: Program) -> Mapping[str, frozenset[str]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            plan = plan_variant(program, settings.profile, variant=Variant.VARIANT, mode=settings.mode,
                                dynamic=settings.dynamic, options=options)
        return sanitize(program, plan.streams).poisoned_reads() if plan.streams is not None else {}

    return reads


def _report(
    settings: Settings, modeled: ModeledCase, numerics: NumericsResult, ranks: RanksReport | None,
    findings: tuple[Finding, ...],
) -> CaseReport:
    """The case report of the timing stage's two modeled programs and the numerics stage's result."""
    baseline, variant = modeled.baseline, modeled.variant
    sanitizer = variant.sanitizer
    return CaseReport(
        target=settings.profile.name,
        mode=settings.mode,
        baseline=baseline.run,
        variant=variant.run,
        mismatches=numerics.mismatches,
        superkernels={scope.scope: ScopeReport.from_plan(scope) for scope in variant.plan.scopes},
        streams=streams_used(variant),
        races=sanitizer.races if sanitizer is not None else (),
        outputs=numerics.outputs,
        plog_path=variant.plog_path,
        deadlock=sanitizer.deadlock.describe() if sanitizer is not None and sanitizer.deadlock is not None else None,
        captures=numerics.captures,
        kernels_executed=numerics.kernels_executed,
        attribution={graph.run.variant: attribute(graph.program, graph.run) for graph in (baseline, variant)},
        findings=findings,
        stream_uses=stream_uses(variant.plan),
        ranks=ranks,
        numerics=numerics.numerics,
        contention=stream_contention(variant.run, settings.profile),
    )
