"""One captured graph modeled: planned (BASELINE or VARIANT), sanitized and simulated, and called to
compute what a device would. The chain (:mod:`.chain`) and the training step (:mod:`.training`) both
model their graphs through :func:`model_program`; the backends (:mod:`.backend`) call it for every graph a
user's ``torch.compile`` produces."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import torch
import torch.fx

from ..errors import ArgumentError
from ..execute.graph import Observer, is_weightless, run_graph, weightless_outputs
from ..frontend.backend import CapturedGraph, GraphPass
from ..ir.program import Program
from ..plan.superkernel import plan_variant
from ..plan.tasks import Plan, Variant
from ..report.plog import write_plog
from ..sanitize.checker import SanitizerReport, sanitize
from ..simulate.clock import device_clock
from ..simulate.host import HostConfig
from ..simulate.timeline import RunReport, simulate
from ..target.profile import HardwareProfile
from ..torch_npu.profiler import record_graph_call
from ..vocabulary import Mode, Phase


def fresh(inputs: Sequence[Any]) -> list[Any]:
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
    config's data dump) and ``dump_graph`` writes each graph once it is modeled (its graph dump).
    ``graph_passes`` edit each aten graph before its program is built (the config's FX passes);
    ``dynamo_passes`` see each Dynamo graph before it is lowered to aten. ``output_clone``: an aclgraph
    returns copies of its outputs rather than its own output memory (:class:`StaticOutputs`).
    ``log`` is the logger each compile and each call of a graph report to, as TorchAir's and
    npugraph_ex's FX compilers report to their own loggers (:func:`log_compile`, :func:`log_call`).
    TorchAir's ``CompilerConfig`` gives one through ``graph_options()``; the library's ``mode=``
    arguments through :func:`graph_options`."""

    mode: Mode = Mode.MAX_AUTOTUNE
    single_stream: bool = False
    aclgraph_superkernel: str | None = None
    watch: WatchPlanner | None = None
    dump_graph: GraphDumper | None = None
    log: logging.Logger | None = None
    graph_passes: tuple[GraphPass, ...] = ()
    dynamo_passes: tuple[GraphPass, ...] = ()
    output_clone: bool = False


def graph_options(mode: str | None) -> GraphOptions:
    """The options of a ``mode=`` argument: one of TorchAir's modes or the ``eager`` reference (default
    max-autotune)."""
    if mode is None:
        return GraphOptions()
    if mode not in set(Mode):
        raise ArgumentError(
            f"mode={mode!r} is not a mode that can be modeled; use one of {', '.join(repr(m.value) for m in Mode)}.",
            argument="mode",
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
    log: logging.Logger | None = None
    static_outputs: "StaticOutputs | None" = None

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
        data), where each read the sanitizer found racing sees poisoned memory. The session's modeled
        device clock advances by the graph's modeled time, and a profile in progress
        (``torch_npu.profiler.profile``) records the run. With a data dump, the dumped tensors are
        written as the graph runs; with a logger at DEBUG, the call's inputs and outputs are logged."""
        log_call(self.log, "runtime inputs", "input", args)
        if is_weightless(args):
            outputs = weightless_outputs(self.gm, self.program)
        else:
            observe = self.dump.for_call() if self.dump is not None else None
            outputs = run_graph(self.gm, self.program, args, self.poisoned_reads(), observe=observe).outputs
            if self.static_outputs is not None:
                outputs = self.static_outputs.replay(outputs, args)
        device_clock().run(self.run.time_us * 1e-6)
        record_graph_call(self.program, self.run)
        log_call(self.log, "runtime outputs", "output", outputs)
        return outputs


@dataclass
class StaticOutputs:
    """An aclgraph's outputs live in its own memory: every replay of one captured graph writes the same
    tensors, so a call returns the tensors of the call before, overwritten (TorchAir returns its retained
    outputs, python/torchair/_acl_concrete_graph/acl_graph.py reconstruct_outputs). An output in the
    caller's memory (an input, or a view of one) is the caller's, not the graph's. With
    ``debug.aclgraph.enable_output_clone`` (npugraph_ex: ``clone_output``) each call returns copies."""

    clone: bool = False
    kept: list[Any] = field(default_factory=list)

    def replay(self, outputs: Sequence[Any], inputs: Sequence[Any]) -> list[Any]:
        """What one call returns: the graph's own output tensors holding this call's ``outputs``."""
        callers = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
        if self.kept:
            outputs = [_written(kept, new, callers) for kept, new in zip(self.kept, outputs)]
        else:
            self.kept = list(outputs)
        return [x.clone() if self.clone and _graphs(x, callers) else x for x in outputs]


def _graphs(value: Any, callers: set[int]) -> bool:
    """Whether ``value`` is a tensor in the graph's own memory (not in the caller's)."""
    return isinstance(value, torch.Tensor) and value.untyped_storage().data_ptr() not in callers


def _written(kept: Any, new: Any, callers: set[int]) -> Any:
    """``new`` written into the graph's output tensor ``kept`` of an earlier call, when both are the
    graph's and alike; else ``new``."""
    if not (_graphs(kept, callers) and _graphs(new, callers)):
        return new
    if (kept.shape, kept.dtype, kept.stride()) != (new.shape, new.dtype, new.stride()):
        return new
    kept.copy_(new)
    return kept


def describe_value(value: Any) -> str:
    """One graph input or output in a log line: a tensor by its type, shape, dtype and layout (its
    values would flood the log), anything else by its value."""
    if isinstance(value, torch.Tensor):
        return f"{type(value)}({value.size()}, {value.dtype}, contiguous={value.is_contiguous()})"
    return f"{type(value)}({value})"


def log_compile(log: logging.Logger | None, gm: torch.fx.GraphModule) -> None:
    """Report one compile as TorchAir's FX compiler does: its inputs and graph at INFO, the aten
    graph the model runs at DEBUG (TorchAir's graph after its FX passes)."""
    if log is None:
        return
    if log.isEnabledFor(logging.INFO):
        log.info("compiler inputs")
        placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
        for index, node in enumerate(placeholders):
            log.info("  input %s: %s", index, node.meta.get("val", node.name))
        log.info("  graph: %s", gm.graph)
    log.debug("after fx graph optimization, graph is %s", gm.graph)


def log_call(log: logging.Logger | None, title: str, kind: str, values: Sequence[Any]) -> None:
    """Report a call's inputs or outputs at DEBUG (TorchAir logs each call of a compiled graph so)."""
    if log is None or not log.isEnabledFor(logging.DEBUG):
        return
    log.debug(title)
    for index, value in enumerate(values):
        log.debug("  %s %s: %s", kind, index, describe_value(value))


@dataclass(frozen=True)
class ModeledProgram:
    """One program planned, checked and simulated: what a report needs of it, with or without a graph."""

    program: Program
    plan: Plan
    run: RunReport
    sanitizer: SanitizerReport | None = None
    plog_path: str | None = None

    def poisoned_reads(self) -> Mapping[str, frozenset[str]]:
        """Per kernel, the inputs it reads in a race (none without a sanitizer run)."""
        return self.sanitizer.poisoned_reads() if self.sanitizer is not None else {}


def compiled_graph(graph: CapturedGraph, modeled: ModeledProgram, settings: Settings) -> CompiledGraph:
    """A captured graph with its program modeled under ``settings`` (:func:`model_program`), as the backend
    hands it on."""
    return CompiledGraph(graph.gm, graph.program, modeled.plan, modeled.run, settings, modeled.plog_path,
                         modeled.sanitizer)


def model_program(
    program: Program,
    settings: Settings,
    variant: str,
    options: Mapping[str, str] | None = None,
    multistream: bool = True,
    aclgraph_options: str | None = None,
) -> ModeledProgram:
    """plan -> sanitize -> simulate for one program (the stages between capture and execute);
    ``aclgraph_options`` is the aclgraph SuperKernel options text when that is switched on."""
    plan = plan_variant(
        program,
        settings.profile,
        variant=variant,
        mode=settings.mode,
        dynamic=settings.dynamic,
        options=options,
        multistream=multistream,
        aclgraph_options=aclgraph_options,
    )
    plog = write_plog(plan.log)
    checked = sanitize(program, plan.streams) if plan.streams is not None else None
    deadlock = checked.deadlock.describe() if checked is not None and checked.deadlock is not None else None
    run = simulate(program, plan, settings.profile, dynamic=settings.dynamic, host=settings.host, deadlock=deadlock)
    return ModeledProgram(program, plan, run, checked, plog and str(plog))


def streams_used(graph: ModeledProgram) -> tuple[str, ...]:
    """Streams the VARIANT's kernels ran on, the default first (sub-kernels of a SuperKernel that fuses
    two streams count for their own stream)."""
    plan = graph.plan.streams
    used = set(plan.kernel_stream.values()) if plan is not None else {task.stream for task in graph.plan.tasks}
    return tuple(stream for stream in graph.program.streams() if stream in used) or ("default",)



def mode_of_phase(mode: str, phase: Phase) -> str:
    """The mode a graph of ``phase`` runs in when its step is compiled in ``mode``. npugraph_ex
    captures no backward into an aclgraph (Ascend/torchair ``docs/zh/npugraph_ex/quick_start.md``: for
    online inference, the backward is not captured as a graph), so its backward runs op by op, as the
    ``eager`` reference does."""
    if phase == Phase.BACKWARD and mode == Mode.NPUGRAPH_EX:
        return Mode.EAGER.value
    return mode

