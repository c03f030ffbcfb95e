"""A training step compared like an inference graph (docs/training.md).

    report = compare(model, ids, labels, loss=lambda out: F.cross_entropy(out, labels),
                     optimizer=torch.optim.AdamW(model.parameters(), foreach=True))

``loss=`` turns a check into a training step: the model's forward and the loss are one compiled graph,
``loss.backward()`` runs the backward AOTAutograd derives, and ``optimizer=`` (optional) is stepped,
compiled too. Each graph is one program, planned, sanitized and simulated for BASELINE (scopes
ignored) and VARIANT (scopes honoured); the step's time is its graphs' times end to end
(:func:`~pytest_npufuse.simulate.step.chain_runs`).

Numerics: the first run of the step captures its graphs and computes the BASELINE. When no graph of
the VARIANT has a racy read, the VARIANT computes the same kernels on the same inputs and its values
are the BASELINE's; otherwise (or with ``reference=``) the whole step runs again on a fresh copy of the
model and optimizer, each graph's racy reads poisoned, because a wrong value in the forward reaches the
backward and the update. Compared bit for bit: the model's outputs, the loss, every parameter's
gradient and, with an optimizer, every parameter after the update.

The report also carries the step's modeled device memory (:mod:`~pytest_npufuse.report.memory`: resident
parameters and optimizer state, gradients, the activations the backward keeps, and the peak) and, with
``affinity=True``, the forms of docs/feature-docs.md#affinity-ops found in every graph of the step and priced on the
whole step.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from ..advisor.affinity import find_affinity
from ..errors import CaptureError, GapsError
from ..execute.graph import Execution, run_graph
from ..frontend.backend import CapturedGraph
from ..frontend.step import StepCapture, StepValues
from ..frontend.survey import cpu_kernel_gaps
from ..numerics.compare import compare_outputs, named_leaves
from ..plan.tasks import Variant
from ..report.attribution import attribute_step
from ..report.case import CaseReport, ScopeReport
from ..report.contention import stream_contention
from ..report.findings import Finding, Mismatch
from ..report.memory import StepMemory, check_fits, step_memory
from ..report.streams import stream_uses
from ..report.trace import write_case_traces
from ..simulate.step import chain_runs
from ..target.catalog import OpCatalog
from .graph import CompiledGraph, Settings, compiled_graph, mode_of_phase, model_program, streams_used
from .spec import CaseSpec


@dataclass
class _Modeled:
    """The graphs of a step modeled for one variant, each the first time it is seen (a graph captured
    in a later run, an optimizer's for the copy's instance, is modeled then)."""

    settings: Settings
    variant: Variant
    options: Mapping[str, str] = field(default_factory=dict)
    graphs: dict[int, CompiledGraph] = field(default_factory=dict)

    def of(self, graph: CapturedGraph) -> CompiledGraph:
        key = id(graph)
        if key not in self.graphs:
            settings = replace(self.settings, mode=mode_of_phase(self.settings.mode, graph.phase))
            modeled = model_program(graph.program, settings, self.variant, self.options)
            self.graphs[key] = compiled_graph(graph, modeled, settings)
        return self.graphs[key]

    def execute(self, graph: CapturedGraph, args: list[Any]) -> Execution:
        """The graph's values as this variant's device would compute them (racy reads poisoned); a graph
        with ops that have no CPU kernel stops the step, listing them (a training step compares every value)."""
        gaps = cpu_kernel_gaps(graph.gm)
        if gaps:
            raise GapsError(gaps)
        return run_graph(graph.gm, graph.program, args, self.of(graph).poisoned_reads())

    def racy(self, graphs: Sequence[CapturedGraph]) -> bool:
        return any(self.of(graph).poisoned_reads() for graph in graphs)


def _values(values: StepValues, with_params: bool) -> tuple[list[str], list[Any]]:
    """Every compared value of a step, named: outputs, ``loss``, ``grad[<param>]``, ``param[<param>]``."""
    names, leaves = named_leaves(values.outputs)
    names, leaves = [*names, "loss"], [*leaves, values.loss]
    names += [f"grad[{name}]" for name, _ in values.grads]
    leaves += [grad for _, grad in values.grads]
    if with_params:
        names += [f"param[{name}]" for name, _ in values.params]
        leaves += [param for _, param in values.params]
    return names, leaves


def compare_step(spec: CaseSpec, settings: Settings, catalog: OpCatalog) -> CaseReport:
    """BASELINE (``reference`` or ``model`` with scopes ignored) against VARIANT for one training step
    (``spec`` has ``loss=``)."""
    torch._dynamo.reset()
    model, inputs, reference, loss, optimizer = spec.model, spec.inputs, spec.reference, spec.loss, spec.optimizer
    step = StepCapture(model, inputs, loss, optimizer, catalog)
    ref_step = StepCapture(reference, inputs, loss, optimizer, catalog) if reference is not None else step
    baseline = _Modeled(settings, Variant.BASELINE)
    variant = _Modeled(settings, Variant.VARIANT, dict(spec.options))
    baseline_values = ref_step.run(baseline.execute)
    ref_graphs = list(ref_step.graphs)
    if reference is None:
        graphs = ref_graphs
        rerun = variant.racy(graphs)
        variant_values = step.run(variant.execute) if rerun else baseline_values
    else:
        variant_values = step.run(variant.execute)
        graphs = list(step.graphs)
    names, baseline_leaves = _values(baseline_values, optimizer is not None)
    _, variant_leaves = _values(variant_values, optimizer is not None)
    if len(baseline_leaves) != len(variant_leaves):
        raise CaptureError(
            f"the reference returns {len(baseline_leaves)} values but the model returns {len(variant_leaves)}; "
            "they must return the same outputs and have the same parameters to be compared."
        )
    executed = baseline_values.kernels_run
    if variant_values is not baseline_values:
        executed += variant_values.kernels_run
    values = StepNumerics(
        tuple(names), compare_outputs(names, baseline_leaves, variant_leaves),
        len(step.graphs) + (len(ref_step.graphs) if reference is not None else 0), executed,
    )
    base_graphs = [baseline.of(graph) for graph in ref_graphs]
    var_graphs = [variant.of(graph) for graph in graphs]
    programs = [graph.program for graph in var_graphs]
    memory = step_memory(programs, variant_values.parameter_bytes, variant_values.gradient_bytes,
                         variant_values.state_bytes)
    check_fits({"parameters": memory.parameters, "gradients": memory.gradients,
                "optimizer state": memory.optimizer_state}, settings.profile, "parameters, gradients and optimizer state")
    findings = find_affinity(programs, settings.profile, catalog) if spec.affinity else ()
    report = _report(settings, base_graphs, var_graphs, values, memory, findings)
    spec.check_scopes(report)
    if spec.trace_dir is None:
        return report
    return replace(report, trace_path=str(write_case_traces(report, Path(spec.trace_dir), spec.case)))


@dataclass(frozen=True)
class StepNumerics:
    """A step's numerics result: every compared value's name (outputs, ``loss``, ``grad[...]``,
    ``param[...]``), those that differ, and the captures and kernels it took."""

    outputs: tuple[str, ...]
    mismatches: tuple[Mismatch, ...]
    captures: int
    kernels_executed: int


def _report(
    settings: Settings,
    base_graphs: Sequence[CompiledGraph],
    var_graphs: Sequence[CompiledGraph],
    values: StepNumerics,
    memory: StepMemory,
    findings: tuple[Finding, ...],
) -> CaseReport:
    """The step's case report: its graphs end to end for each variant, and what its numerics found."""
    baseline_run = chain_runs([graph.run for graph in base_graphs])
    variant_run = chain_runs([graph.run for graph in var_graphs])
    checked = [graph.sanitizer for graph in var_graphs if graph.sanitizer is not None]
    deadlock = next((s.deadlock.describe() for s in checked if s.deadlock is not None), None)
    streams = dict.fromkeys(stream for graph in var_graphs for stream in streams_used(graph))
    return CaseReport(
        target=settings.profile.name,
        mode=settings.mode,
        baseline=baseline_run,
        variant=variant_run,
        mismatches=values.mismatches,
        superkernels={
            scope.scope: ScopeReport.from_plan(scope) for graph in var_graphs for scope in graph.plan.scopes
        },
        streams=tuple(streams),
        races=tuple(race for s in checked for race in s.races),
        outputs=values.outputs,
        plog_path=next((graph.plog_path for graph in var_graphs if graph.plog_path), None),
        deadlock=deadlock,
        attribution={
            baseline_run.variant: attribute_step([graph.program for graph in base_graphs], baseline_run),
            variant_run.variant: attribute_step([graph.program for graph in var_graphs], variant_run),
        },
        captures=values.captures,
        kernels_executed=values.kernels_executed,
        findings=findings,
        phases=tuple(str(graph.program.phase) for graph in var_graphs),
        stream_uses=tuple(use for graph in var_graphs for use in stream_uses(graph.plan)),
        memory=memory,
        contention=stream_contention(variant_run, settings.profile),
    )
