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
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from ..advisor.affinity import find_affinity
from ..errors import ArgumentError, CaptureError
from ..execute.graph import Execution, inputs_of, racy_cone, run_graph, writes_inputs
from ..frontend.backend import Capture
from ..ir.program import Program
from ..numerics.compare import compare_outputs, named_leaves
from ..plan.tasks import Variant
from ..report.attribution import attribute
from ..report.case import CaseReport, ScopeReport
from ..report.explain import stream_uses
from ..report.trace import write_case_traces
from ..simulate.host import HostConfig, host_config
from ..target.catalog import OpCatalog, load_catalog
from ..target.profile import HardwareProfile, resolve_profile
from .graph import CompiledGraph, GraphOptions, Settings, fresh, graph_options, model_graph, streams_used  # noqa: F401  (GraphOptions and the per-graph names are importable from the chain too)
from .training import compare_step


def capture(model: Callable[..., Any], *inputs: Any, catalog: OpCatalog | None = None) -> Program:
    """The program IR of ``model`` on ``inputs``: one Dynamo + AOT capture, no numerics."""
    torch._dynamo.reset()
    return Capture(model, inputs, catalog or load_catalog()).graph.program


@dataclass(frozen=True)
class _Outputs:
    """Both runs' model-level outputs and the work the numerics did."""

    baseline: Any
    variant: Any
    kernels_executed: int


def _inputs_for(captured: Capture, inputs: Sequence[Any]) -> Sequence[Any]:
    """The inputs to run on: copies when the graph writes into its inputs, so no run sees another's
    writes and the caller's tensors stay untouched; the caller's own tensors otherwise."""
    return fresh(inputs) if writes_inputs(captured.graph.gm) else inputs


def _execute(model: Capture, reference: Capture, variant: CompiledGraph, inputs: Sequence[Any]) -> _Outputs:
    """BASELINE and VARIANT numerics with each kernel computed once when both come from one capture."""
    stale = variant.poisoned_reads()
    gm, program = model.graph.gm, model.graph.program
    shared = reference is model
    cone = racy_cone(gm, stale, program) if shared else frozenset()
    keep = inputs_of(gm, cone) | {arg.name for arg in gm.graph.output_node().all_input_nodes} if cone else frozenset()
    ref = reference.graph
    baseline, base_run = reference.run(
        _inputs_for(reference, inputs), lambda args: run_graph(ref.gm, ref.program, args, {}, keep=keep)
    )
    if shared and not cone:
        return _Outputs(baseline, baseline, base_run.kernels_run)

    def execute(args: list[Any]) -> Execution:
        if shared:
            return run_graph(gm, program, args, stale, only=cone, given=base_run.kept)
        return run_graph(gm, program, args, stale)

    variant_out, variant_run = model.run(_inputs_for(model, inputs), execute)
    return _Outputs(baseline, variant_out, base_run.kernels_run + variant_run.kernels_run)


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
    loss: Callable[[Any], Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> CaseReport:
    """Compile and run BASELINE (``reference`` or ``model`` with scopes ignored) and VARIANT, and report.

    ``options`` maps a scope name to an options string that replaces the one in the model code.
    ``mode``, ``dynamic`` and ``host`` are as for :func:`compile_model`. With ``trace_dir``, a
    Perfetto trace and a ``kernel_details.csv`` of each variant are written under
    ``trace_dir/<case>/`` and the report's ``trace_path`` names that directory. ``affinity=True`` adds
    the seed-003 affinity-op findings of the model's graph (``report.findings``).

    ``loss`` makes the check a training step (:mod:`.training`): ``loss(outputs)`` is the scalar the
    backward starts from, and ``optimizer`` (built over ``model.parameters()``, optional) is stepped; the
    outputs, the loss, every gradient and every updated parameter are compared bit for bit. The
    user's model and optimizer are never changed: each run works on a copy.
    """
    catalog = catalog or load_catalog()
    settings = Settings(resolve_profile(target), graph_options(mode).mode, dynamic, host_config(host))
    if loss is not None:
        return compare_step(
            model, inputs, loss=loss, optimizer=optimizer, settings=settings, catalog=catalog, reference=reference,
            options=options, trace_dir=trace_dir, case=case, affinity=affinity,
        )
    if optimizer is not None:
        raise ArgumentError(
            "optimizer= needs loss=: a training step runs backward from the loss before the optimizer steps; pass "
            "loss=lambda outputs: <the scalar loss>."
        )
    # Each case starts from an empty Dynamo cache: a test suite compiles the same forward many times
    # with different backends, and Dynamo would otherwise hit its recompile limit and fall back to eager.
    torch._dynamo.reset()
    captured = Capture(model, inputs, catalog)
    reference_capture = Capture(reference, inputs, catalog) if reference is not None else captured
    baseline_graph = model_graph(reference_capture.graph, settings, Variant.BASELINE)
    variant_graph = model_graph(captured.graph, settings, Variant.VARIANT, dict(options or {}))
    outputs = _execute(captured, reference_capture, variant_graph, inputs)
    names, baseline_leaves = named_leaves(outputs.baseline, "the reference" if reference is not None else "the model")
    _, variant_leaves = named_leaves(outputs.variant)
    if len(baseline_leaves) != len(variant_leaves):
        raise CaptureError(
            f"the reference returns {len(baseline_leaves)} outputs but the model returns {len(variant_leaves)}; "
            "they must return the same structure to be compared."
        )
    report = CaseReport(
        target=settings.profile.name,
        mode=settings.mode,
        baseline=baseline_graph.run,
        variant=variant_graph.run,
        mismatches=compare_outputs(names, baseline_leaves, variant_leaves),
        superkernels={scope.scope: ScopeReport.from_plan(scope) for scope in variant_graph.plan.scopes},
        streams=streams_used(variant_graph),
        races=variant_graph.sanitizer.races if variant_graph.sanitizer is not None else (),
        outputs=tuple(names),
        plog_path=variant_graph.plog_path,
        deadlock=variant_graph.sanitizer.deadlock.describe()
        if variant_graph.sanitizer is not None and variant_graph.sanitizer.deadlock is not None
        else None,
        captures=1 if reference is None else 2,
        kernels_executed=outputs.kernels_executed,
        attribution={
            graph.run.variant: attribute(graph.program, graph.run) for graph in (baseline_graph, variant_graph)
        },
        findings=find_affinity(variant_graph.program, settings.profile, catalog) if affinity else (),
        stream_uses=stream_uses(variant_graph.plan),
    )
    if trace_dir is None:
        return report
    return replace(report, trace_path=str(write_case_traces(report, Path(trace_dir), case)))
