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

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import torch
import torch.fx

from ..advisor.affinity import find_affinity
from ..errors import ArgumentError, CaptureError
from ..execute.graph import Execution, Observer, inputs_of, racy_cone, run_graph, writes_inputs
from ..frontend.backend import Capture, CapturedGraph
from ..ir.program import Program
from ..numerics.compare import compare_outputs, named_leaves
from ..plan.superkernel import plan_variant
from ..plan.tasks import Plan, Variant
from ..report.attribution import attribute
from ..report.case import CaseReport, ScopeReport
from ..report.explain import stream_uses
from ..report.plog import write_plog
from ..report.trace import write_case_traces
from ..sanitize.checker import SanitizerReport, sanitize
from ..simulate.clock import DEVICE_CLOCK
from ..simulate.host import HostConfig, host_config
from ..simulate.timeline import RunReport, simulate
from ..target.catalog import OpCatalog, load_catalog
from ..target.profile import HardwareProfile, resolve_profile
from ..vocabulary import Mode


def _fresh(inputs: Sequence[Any]) -> list[Any]:
    """Copies, so a model that writes to its inputs cannot leak one run into the other. One copy memo
    for all of them keeps inputs that alias (the same tensor twice, a tensor and its view) aliased, as
    Dynamo's guards on the captured graph require."""
    memo: dict[int, Any] = {}
    return [copy.deepcopy(x, memo) if isinstance(x, torch.Tensor) else x for x in inputs]


class CallWatcher(Protocol):
    """What sees the tensors of each call of a compiled graph (TorchAir's data dump is one)."""

    def for_call(self) -> Observer | None: ...


# Plans the watcher of one modeled graph from its mode, aten graph, program and each kernel's stream.
WatchPlanner = Callable[[str, torch.fx.GraphModule, Program, Mapping[str, str]], "CallWatcher | None"]
# Writes a file describing one modeled graph, from the same four (the config's graph dump).
GraphDumper = Callable[[str, torch.fx.GraphModule, Program, Mapping[str, str]], object]


@dataclass(frozen=True)
class GraphOptions:
    """What a compile configuration decides about how its graphs are modeled: the mode, whether every
    kernel stays on one stream (GE's ``enable_single_stream``), and the aclgraph SuperKernel options
    text when aclgraph SuperKernel is switched on; ``watch`` plans a watcher of each graph's calls (the
    config's data dump) and ``dump_graph`` writes each graph once it is modeled (its graph dump). TorchAir's ``CompilerConfig`` gives one through ``graph_options()``; the
    library's ``mode=`` arguments through :func:`graph_options`."""

    mode: Mode = Mode.MAX_AUTOTUNE
    single_stream: bool = False
    aclgraph_superkernel: str | None = None
    watch: WatchPlanner | None = None
    dump_graph: GraphDumper | None = None


def graph_options(mode: str | None) -> GraphOptions:
    """The options of a ``mode=`` argument: one of TorchAir's modes or the ``eager`` reference (default
    max-autotune)."""
    if mode is None:
        return GraphOptions()
    if mode not in set(Mode):
        raise ArgumentError(
            f"mode={mode!r} is not a mode that can be modeled; use one of {', '.join(repr(m.value) for m in Mode)}."
        )
    return GraphOptions(Mode(mode))


@dataclass(frozen=True)
class Settings:
    """How a graph is planned and simulated: the target, the modeled mode and the host."""

    profile: HardwareProfile
    mode: str
    dynamic: bool = False
    host: HostConfig = HostConfig()


@dataclass(frozen=True)
class CompiledGraph:
    """One captured graph planned, checked and simulated; calling it computes the outputs."""

    gm: torch.fx.GraphModule
    program: Program
    plan: Plan
    run: RunReport
    settings: Settings
    plog_path: str | None = None
    sanitizer: SanitizerReport | None = None
    dump: CallWatcher | None = None

    def scopes_ignored(self) -> RunReport:
        """The same program with its SuperKernel scopes ignored (the BASELINE plan), priced with the
        same settings (mode, dynamic-shape host scheduling, host threads)."""
        settings = self.settings
        plan = plan_variant(
            self.program, settings.profile, variant=Variant.BASELINE, mode=self.plan.mode, dynamic=settings.dynamic
        )
        return simulate(self.program, plan, settings.profile, dynamic=settings.dynamic, host=settings.host)

    def poisoned_reads(self) -> Mapping[str, frozenset[str]]:
        """Per kernel, the inputs it reads in a race (none without a sanitizer run)."""
        return self.sanitizer.poisoned_reads() if self.sanitizer is not None else {}

    def __call__(self, *args: Any) -> list[Any]:
        """The outputs a device would produce: kernels in issue order (always a legal order for the
        data), where each read the sanitizer found racing sees poisoned memory. The process's modeled
        device clock advances by the graph's modeled time. With a data dump, the dumped tensors are
        written as the graph runs."""
        observe = self.dump.for_call() if self.dump is not None else None
        outputs = run_graph(self.gm, self.program, args, self.poisoned_reads(), observe=observe).outputs
        DEVICE_CLOCK.run(self.run.time_us * 1e-6)
        return outputs


def model_graph(
    graph: CapturedGraph,
    settings: Settings,
    variant: str,
    options: Mapping[str, str] | None = None,
    multistream: bool = True,
    aclgraph_options: str | None = None,
) -> CompiledGraph:
    """plan -> sanitize -> simulate for one captured graph (the stages between capture and execute);
    ``aclgraph_options`` is the aclgraph SuperKernel options text when that is switched on."""
    plan = plan_variant(
        graph.program,
        settings.profile,
        variant=variant,
        mode=settings.mode,
        dynamic=settings.dynamic,
        options=options,
        multistream=multistream,
        aclgraph_options=aclgraph_options,
    )
    plog = write_plog(plan.log)
    checked = sanitize(graph.program, plan.streams) if plan.streams is not None else None
    deadlock = checked.deadlock.describe() if checked is not None and checked.deadlock is not None else None
    run = simulate(graph.program, plan, settings.profile, dynamic=settings.dynamic, host=settings.host, deadlock=deadlock)
    return CompiledGraph(graph.gm, graph.program, plan, run, settings, plog and str(plog), checked)


def streams_used(graph: CompiledGraph) -> tuple[str, ...]:
    """Streams the VARIANT's kernels ran on, the default first (sub-kernels of a SuperKernel that fuses
    two streams count for their own stream)."""
    plan = graph.plan.streams
    used = set(plan.kernel_stream.values()) if plan is not None else {task.stream for task in graph.plan.tasks}
    return tuple(stream for stream in graph.program.streams() if stream in used) or ("default",)


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
    return _fresh(inputs) if writes_inputs(captured.graph.gm) else inputs


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
) -> CaseReport:
    """Compile and run BASELINE (``reference`` or ``model`` with scopes ignored) and VARIANT, and report.

    ``options`` maps a scope name to an options string that replaces the one in the model code.
    ``mode``, ``dynamic`` and ``host`` are as for :func:`compile_model`. With ``trace_dir``, a
    Perfetto trace and a ``kernel_details.csv`` of each variant are written under
    ``trace_dir/<case>/`` and the report's ``trace_path`` names that directory. ``affinity=True`` adds
    the seed-003 affinity-op findings of the model's graph (``report.findings``).
    """
    catalog = catalog or load_catalog()
    settings = Settings(resolve_profile(target), graph_options(mode).mode, dynamic, host_config(host))
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
