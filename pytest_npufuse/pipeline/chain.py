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
from ..errors import ArgumentError, CaptureError, GapsError
from ..execute.graph import Execution, cone_run, run_graph, writes_inputs
from ..execute.routing import ExpertCounts
from ..execute.sample import Sampled, SampleGraph, capture_sample, compute_sample
from ..execute.standin import stood_in, uncompared
from ..frontend.backend import Capture
from ..frontend.meta import weightless
from ..frontend.repeat import capture_program
from ..frontend.survey import cpu_kernel_gaps, without_cpu_kernel
from ..ir.program import Program
from ..numerics.compare import compare_outputs, named_leaves
from ..numerics.exact import one_thread, quick_handoffs
from ..plan.superkernel import plan_variant
from ..plan.tasks import Variant
from ..report.attribution import attribute
from ..report.case import CaseReport, ScopeReport
from ..report.explain import stream_uses
from ..report.numerics import Numerics, Uncompared, stand_ins
from ..report.trace import write_case_traces
from ..sanitize.checker import sanitize
from ..session import in_session
from ..simulate.host import HostConfig, host_config
from ..simulate.routing import routed_program, routing_of
from ..target.catalog import OpCatalog, load_catalog
from ..target.profile import HardwareProfile, resolve_profile
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
from .deployment import rank_view, ranked
from .training import compare_step

NUMERICS = ("all", "sample", "none")
"""What ``numerics=`` may ask for: every layer computed, a sample of layers, or timing only."""


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


@in_session
def compare(
    model: Callable[..., Any],
    *inputs: Any,
    target: str | HardwareProfile | None = None,
    mode: str | None = None,
    reference: Callable[..., Any] | None = None,
    options: Mapping[str, str] | None = None,
    catalog: OpCatalog | None = None,
    dynamic: bool = False,
    host: HostConfig | None = None,
    trace_dir: str | Path | None = None,
    case: str = "case",
    affinity: bool = False,
    numerics: str | None = None,
    routing: str | Sequence[float] | None = None,
    ranks: int | None = None,
    loss: Callable[[Any], Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    missing_ops: str | None = None,
) -> CaseReport:
    """Compile and run BASELINE (``reference`` or ``model`` with scopes ignored) and VARIANT, and report.

    ``options`` maps a scope name to an options string that replaces the one in the model code.
    ``mode``, ``dynamic`` and ``host`` are as for :func:`compile_model`. With ``trace_dir``, a
    Perfetto trace and a ``kernel_details.csv`` of each variant are written under
    ``trace_dir/<case>/`` and the report's ``trace_path`` names that directory. ``affinity=True`` adds
    the seed-003 affinity-op findings of the model's graph (``report.findings``). ``numerics`` is
    ``"all"`` (every output computed and compared; the default with weights), ``"sample"`` (a few layers
    computed at their real sizes, seeded weights where the model has none) or ``"none"`` (timing only;
    the default for a model on the meta device); ``report.numerics`` says which.

    ``routing`` prices MoE layers by the rows each EP rank receives (:mod:`~pytest_npufuse.simulate.routing`:
    ``"uniform"``, the default; ``"zipf:S"``; ``"computed"``, the model's own gating where computed; or one
    weight per expert). ``ranks=N`` models N ranks of the deployment, joined at every collective, with
    collectives over N ranks: ``report.ranks`` has each rank's step and the imbalance cost.

    ``loss`` makes the check a training step (:mod:`.training`): ``loss(outputs)`` is the scalar the
    backward starts from, and ``optimizer`` (built over ``model.parameters()``, optional) is stepped; the
    outputs, the loss, every gradient and every updated parameter are compared bit for bit. The
    user's model and optimizer are never changed: each run works on a copy.

    ``missing_ops`` says what to do about an op the model calls that has a fake kernel but no CPU kernel:
    ``"error"`` (the default) stops, listing it with every other gap of the model
    (:class:`~pytest_npufuse.errors.GapsError`); ``"timing-only"`` times it and leaves the outputs computed
    from it uncompared (``report.numerics`` is ``partial`` and lists them).
    """
    missing = _missing_ops(missing_ops)
    catalog = catalog or load_catalog()
    profile = resolve_profile(target)
    settings = Settings(profile if ranks is None else ranked(profile, ranks), graph_options(mode).mode, dynamic,
                        host_config(host))
    if loss is not None:
        if routing is not None or ranks is not None:
            raise ArgumentError(
                "routing= and ranks= model a decode deployment's MoE ranks; a training step (loss=) is modeled on "
                "one rank. Drop routing=/ranks=, or check the forward without loss=."
            )
        if missing is MissingOps.TIMING_ONLY:
            raise ArgumentError(
                "missing_ops='timing-only' with loss=: a training step compares every gradient, and an op without a "
                "CPU kernel has none; register its CPU kernel (torch.library.impl), or check the forward without loss=."
            )
        if numerics not in (None, "all"):
            raise ArgumentError(
                f"numerics={numerics!r} with loss=: a training step computes every value it compares (the loss, "
                "each gradient, each updated parameter); drop numerics= or pass numerics='all'."
            )
        return compare_step(
            model, inputs, loss=loss, optimizer=optimizer, settings=settings, catalog=catalog, reference=reference,
            options=options, trace_dir=trace_dir, case=case, affinity=affinity,
        )
    if optimizer is not None:
        raise ArgumentError(
            "optimizer= needs loss=: a training step runs backward from the loss before the optimizer steps; pass "
            "loss=lambda outputs: <the scalar loss>."
        )
    choice = _numerics(numerics, model, inputs, reference)
    if routing is not None and routing != "computed":
        routing = routing_of(routing)  # refused before anything is captured; an iterator is read once
    # Each case starts from an empty Dynamo cache: a test suite compiles the same forward many times
    # with different backends, and Dynamo would otherwise hit its recompile limit and fall back to eager.
    torch._dynamo.reset()
    racy = _racy_reads(settings, dict(options or {}))
    if choice != "all":
        programs, found = _timed(model, inputs, reference, catalog, choice, racy)
    else:
        programs, found = _computed(model, inputs, reference, catalog, racy, missing)
    route = routing_of(routing, found.pop("experts"))
    baseline = model_program(routed_program(programs[0], route), settings, Variant.BASELINE)
    variant = model_program(routed_program(programs[1], route), settings, Variant.VARIANT, dict(options or {}))
    if found["numerics"].status in (NumericsStatus.NOT_COMPUTED, NumericsStatus.SAMPLED):
        found["numerics"] = replace(found["numerics"], stand_ins=stand_ins(programs[1], route.describe()))
    if ranks is not None:
        found["ranks"] = rank_view(programs[1], ranks, route, settings, dict(options or {}))
    report = _report(settings, baseline, variant, catalog, affinity, **found)
    if trace_dir is None:
        return report
    return replace(report, trace_path=str(write_case_traces(report, Path(trace_dir), case)))


def _missing_ops(missing_ops: str | None) -> MissingOps:
    """The check's policy for ops without a CPU kernel; a value off the vocabulary is refused."""
    if missing_ops is None:
        return MissingOps.ERROR
    if missing_ops not in set(MissingOps):
        choices = ", ".join(repr(each.value) for each in MissingOps)
        raise ArgumentError(f"missing_ops={missing_ops!r} is not a choice; use one of {choices}.")
    return MissingOps(missing_ops)


def _numerics(numerics: str | None, model: Callable[..., Any], inputs: Sequence[Any], reference: Any) -> str:
    """The numerics a check computes: as asked, else all of them unless the model has no weights."""
    if numerics is not None and numerics not in NUMERICS:
        raise ArgumentError(f"numerics={numerics!r} is not a choice; use one of {', '.join(map(repr, NUMERICS))}.")
    empty = weightless(model, inputs)
    if numerics == "all" and empty:
        raise ArgumentError(
            "numerics='all' needs weights, but the model's parameters or inputs are on the meta device; use "
            "numerics='sample' (a few layers computed with seeded weights) or 'none' (timing only)."
        )
    if numerics == "sample" and reference is not None:
        raise ArgumentError(
            "numerics='sample' compares the model's layers with their scopes ignored and honoured; it takes no "
            "reference= model. Drop reference=, or compute every layer (numerics='all')."
        )
    return numerics or ("none" if empty else "all")


Programs = tuple[Program, Program]  # the BASELINE's (the reference's) and the VARIANT's, as captured
RacyReads = Callable[[Program], Mapping[str, frozenset[str]]]


def _computed(
    model: Callable[..., Any], inputs: Sequence[Any], reference: Callable[..., Any] | None, catalog: OpCatalog,
    racy: RacyReads, missing: MissingOps,
) -> tuple[Programs, dict[str, Any]]:
    """Every output of both runs computed and compared bit for bit, except, under ``timing-only``, those
    computed from an op without a CPU kernel."""
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
    found = {
        "mismatches": compare_outputs(
            [names[i] for i in compared], [baseline_leaves[i] for i in compared], [variant_leaves[i] for i in compared]
        ),
        "outputs": tuple(names), "captures": 1 if reference is None else 2,
        "kernels_executed": outputs.kernels_executed, "experts": outputs.experts,
        "numerics": _partial(names, skipped) if skipped else Numerics(),
    }
    return (reference_capture.graph.program, captured.graph.program), found


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


def _timed(
    model: Callable[..., Any], inputs: Sequence[Any], reference: Callable[..., Any] | None, catalog: OpCatalog,
    choice: str, racy: RacyReads,
) -> tuple[Programs, dict[str, Any]]:
    """The program, for pricing in full; numerics on a sample of layers or none. The sample is captured
    first and computed on a worker thread while the model is captured for its timing: the numbers are
    mostly torch's kernels, which leave the interpreter to the tracing, so the two share the cores."""
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
        return programs, {"outputs": outputs, "numerics": Numerics(NumericsStatus.NOT_COMPUTED),
                          "captures": 1 if reference is None else 2, "experts": ()}
    return programs, {
        "mismatches": result.mismatches, "outputs": result.outputs, "captures": 2,
        "kernels_executed": result.kernels_executed, "experts": result.experts,
        "numerics": Numerics(NumericsStatus.SAMPLED, result.layers, result.weights),
    }


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
    settings: Settings, baseline: ModeledProgram, variant: ModeledProgram, catalog: OpCatalog, affinity: bool,
    **fields: Any,
) -> CaseReport:
    """The case report of two modeled programs; ``fields`` are the numerics' (mismatches, outputs, ...)."""
    sanitizer = variant.sanitizer
    return CaseReport(
        target=settings.profile.name,
        mode=settings.mode,
        baseline=baseline.run,
        variant=variant.run,
        superkernels={scope.scope: ScopeReport.from_plan(scope) for scope in variant.plan.scopes},
        streams=streams_used(variant),
        races=sanitizer.races if sanitizer is not None else (),
        plog_path=variant.plog_path,
        deadlock=sanitizer.deadlock.describe() if sanitizer is not None and sanitizer.deadlock is not None else None,
        attribution={graph.run.variant: attribute(graph.program, graph.run) for graph in (baseline, variant)},
        findings=find_affinity(variant.program, settings.profile, catalog) if affinity else (),
        stream_uses=stream_uses(variant.plan),
        **{"mismatches": (), **fields},
    )
