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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx
import torch.utils._pytree as pytree

from . import fusion
from .advisor.affinity import find_affinity
from .attribution import attribute
from .backend import Capture, CaptureBackend, CapturedGraph
from .lowering import compile_static
from .modeledclock import DEVICE_CLOCK
from .catalog import OpCatalog, load_catalog
from .datadump import DataDump, plan_dump
from .graphdump import write_graph_dump
from .errors import CaptureError
from .execute import Execution, inputs_of, racy_cone, run_graph, writes_inputs
from .hardware import HardwareProfile, load_profile
from .host import EAGER, HostConfig, host_config
from .numerics import compare_outputs
from .plog import write_plog
from .program import Program
from .report import CaseReport, ScopeReport
from .sanitize import SanitizerReport, sanitize
from .simulate import RunReport, simulate
from .trace import write_case_traces
from .torchair.configs.compiler_config import CompilerConfig


def _config(mode: str | None) -> tuple[CompilerConfig, str | None]:
    """TorchAir's config for ``mode``, and the mode override for the ``"eager"`` single-op reference,
    which is not a TorchAir mode (the config then stays at its default)."""
    config = CompilerConfig()
    if mode == EAGER:
        return config, EAGER
    if mode is not None:
        config.mode = mode
    return config, None


def _profile(target: str | HardwareProfile) -> HardwareProfile:
    """A profile given as itself, or by a built-in target name or a profile file path."""
    return target if isinstance(target, HardwareProfile) else load_profile(target)


def _fresh(inputs: Sequence[Any]) -> list[Any]:
    """Independent copies, so a model that writes to its inputs cannot leak one run into the other."""
    return [copy.deepcopy(x) if isinstance(x, torch.Tensor) else x for x in inputs]


def _output_names(outputs: Any) -> tuple[list[str], list[Any]]:
    """Flatten the model's outputs and name each leaf by its path, e.g. ``output[0][1]``."""
    leaves, _ = pytree.tree_flatten_with_path(outputs)
    return ["output" + pytree.keystr(path) for path, _ in leaves], [leaf for _, leaf in leaves]


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
    plan: fusion.Plan
    run: RunReport
    settings: Settings
    plog_path: str | None = None
    sanitizer: SanitizerReport | None = None
    dump: DataDump | None = None

    def scopes_ignored(self) -> RunReport:
        """The same program with its SuperKernel scopes ignored (the BASELINE plan), priced with the
        same settings (mode, dynamic-shape host scheduling, host threads)."""
        settings = self.settings
        plan = fusion.plan(
            self.program, settings.profile, variant=fusion.BASELINE, mode=self.plan.mode, dynamic=settings.dynamic
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
    plan = fusion.plan(
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


@dataclass
class NpuBackend:
    """A ``torch.compile`` backend bound to one target, mode and variant (scopes honoured or ignored):
    it captures each graph and models it through :func:`model_graph`; ``graphs`` keeps the results."""

    config: CompilerConfig
    profile: HardwareProfile
    variant: str = fusion.VARIANT
    catalog: OpCatalog = field(default_factory=load_catalog)
    options: Mapping[str, str] = field(default_factory=dict)
    multistream: bool = True
    mode: str | None = None
    dynamic: bool = False
    host: HostConfig = field(default_factory=HostConfig)
    graphs: list[CompiledGraph] = field(default_factory=list)
    decompositions: Mapping[Any, Callable[..., Any]] = field(default_factory=dict)

    @property
    def run_mode(self) -> str:
        """The mode runs are modeled in: ``mode`` when set (``"eager"``), else the config's."""
        return self.mode or self.config.run_mode

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        return self._capturer()(gm, example_inputs)

    def compile_aten(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        """Model an aten graph AOTAutograd already produced (a user's own ``aot_module_simplified`` with
        this as its ``fw_compiler``)."""
        return self._capturer().capture_aten(gm, example_inputs)

    def _capturer(self) -> CaptureBackend:
        return CaptureBackend(self.catalog, self._model, decompositions=self.decompositions)

    def _model(self, graph: CapturedGraph) -> CompiledGraph:
        settings = Settings(self.profile, self.run_mode, self.dynamic or graph.dynamic, self.host)
        single_stream = bool(self.config.ge_config.enable_single_stream.value)
        compiled = model_graph(
            graph, settings, self.variant, self.options, self.multistream and not single_stream,
            self.config.superkernel_options(),
        )
        stream_of = compiled.plan.streams.kernel_stream if compiled.plan.streams is not None else {}
        compiled = replace(compiled, dump=plan_dump(self.config, settings.mode, graph.gm, graph.program, stream_of))
        write_graph_dump(self.config, settings.mode, graph.gm, graph.program, compiled.plan)
        self.graphs.append(compiled)
        return compiled

    def __repr__(self) -> str:
        return f"NpuBackend({self.profile.name}, {self.run_mode}, {self.variant})"


def _streams_used(graph: CompiledGraph) -> tuple[str, ...]:
    """Streams the VARIANT's kernels ran on, the default first (sub-kernels of a SuperKernel that fuses
    two streams count for their own stream)."""
    plan = graph.plan.streams
    used = set(plan.kernel_stream.values()) if plan is not None else {task.stream for task in graph.plan.tasks}
    return tuple(stream for stream in graph.program.streams() if stream in used) or ("default",)


def capture(model: Callable[..., Any], *inputs: Any, catalog: OpCatalog | None = None) -> Program:
    """The program IR of ``model`` on ``inputs``: one Dynamo + AOT capture, no numerics."""
    torch._dynamo.reset()
    return Capture(model, inputs, catalog or load_catalog()).graph.program


def compile_model(
    model: Callable[..., Any],
    *,
    target: str | HardwareProfile = "a3",
    mode: str | None = None,
    superkernel: bool = True,
    multistream: bool = True,
    catalog: OpCatalog | None = None,
    dynamic: bool = False,
    host: HostConfig | None = None,
) -> tuple[Callable[..., Any], NpuBackend]:
    """``torch.compile`` the model for ``target``; the backend keeps each graph's plan and modeled run.

    ``superkernel=False`` gives the BASELINE plan (scopes ignored); ``multistream=False`` keeps the
    VARIANT on one stream. ``mode="eager"`` models torch_npu's op-by-op execution, ``dynamic=True``
    the host scheduling of a dynamic-shape max-autotune graph; ``host`` sets the host threads
    (``MAX_RUNTIME_CORE_NUMBER``) and GE's host optimisations.
    """
    profile = _profile(target)
    variant = fusion.VARIANT if superkernel else fusion.BASELINE
    config, override = _config(mode)
    backend = NpuBackend(
        config, profile, variant, catalog or load_catalog(), multistream=multistream, mode=override,
        dynamic=dynamic, host=host_config(host),
    )
    return compile_static(model, backend), backend


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
    target: str | HardwareProfile = "a3",
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
    config, override = _config(mode)
    settings = Settings(_profile(target), override or config.run_mode, dynamic, host_config(host))
    # Each case starts from an empty Dynamo cache: a test suite compiles the same forward many times
    # with different backends, and Dynamo would otherwise hit its recompile limit and fall back to eager.
    torch._dynamo.reset()
    captured = Capture(model, inputs, catalog)
    reference_capture = Capture(reference, inputs, catalog) if reference is not None else captured
    baseline_graph = model_graph(reference_capture.graph, settings, fusion.BASELINE)
    variant_graph = model_graph(captured.graph, settings, fusion.VARIANT, dict(options or {}))
    outputs = _execute(captured, reference_capture, variant_graph, inputs)
    names, baseline_leaves = _output_names(outputs.baseline)
    _, variant_leaves = _output_names(outputs.variant)
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
        streams=_streams_used(variant_graph),
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
    )
    if trace_dir is None:
        return report
    return replace(report, trace_path=str(write_case_traces(report, Path(trace_dir), case)))
