"""The ``torch.compile`` backend that captures: Dynamo graph -> AOTAutograd aten graph -> program IR.

A graph that needs gradients (parameters that require grad, outside ``torch.no_grad()``) is split by
AOTAutograd into a forward and the backward it derives; both come through here, each as its own program
(``Phase.FORWARD`` / ``Phase.BACKWARD``), as TorchAir's ``_compile_graph_with_aot`` hands the same
compiler both (``fw_compiler`` and ``bw_compiler``, Ascend/torchair ``python/torchair/npu_fx_compiler.py``).
The backward is compiled when autograd first runs it.

It only captures. What happens when the captured graph is called is decided by whoever asked for the
capture: :class:`Capture` (one model captured once for a check) binds the executor of each run, and the
pipeline's ``NpuBackend`` models every graph a user's ``torch.compile`` produces.
"""

from __future__ import annotations

import contextlib
import re
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import torch.fx
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

from ..cost import check_catalog
from ..errors import CaptureError, GradientsWarning
from ..ir.program import Program
from ..session import Scope, SessionKey, current_session
from ..target.catalog import OpCatalog
from ..vocabulary import Phase
from .dynamo import call_compiled, check_outputs_used, compile_static
from .lower import build_program
from .meta import npu_is_meta, on_meta, weightless
from .names import input_names, note_input_names
from .npu_dispatch import route_sdpa
from .rewrites import apply_rules
from ..torch_npu.formats import get_npu_format, is_base_format
from .source import is_user_path
from .shapes import InputSymbol, gears_of, input_sizes, input_symbols, is_dynamic


@dataclass(frozen=True)
class CapturedGraph:
    """One captured aten graph and its program IR.

    ``dynamic``: the graph was compiled for symbolic input sizes (``torch.compile(dynamic=True)``);
    its program holds the sizes of one call, and the host tiles every call anew.
    """

    gm: torch.fx.GraphModule
    program: Program
    dynamic: bool = False

    @property
    def phase(self) -> Phase:
        return self.program.phase


GraphRunner = Callable[..., list[Any]]
# A pass over an aten graph before its program is built: it edits the graph in place (the graph and its
# example inputs; what it returns is ignored), as TorchAir's post-grad FX passes do.
GraphPass = Callable[[torch.fx.GraphModule, Sequence[Any]], object]


@dataclass
class CaptureBackend:
    """A Dynamo backend that lowers each graph to aten (input mutations stay in the graph as ``copy_``
    kernels, where a device would run them), builds its program and keeps it in ``graphs``.

    ``on_graph`` turns a captured graph into the callable Dynamo runs for it. ``decompositions`` are
    extra aten decompositions AOT applies (TorchAir's ``custom_decompositions``); ``dynamo_passes`` see
    each Dynamo graph before AOT lowers it (TorchAir's debug dump of it), ``graph_passes`` edit each aten
    graph, in order, before its program is built (TorchAir's FX passes; the graph's phase is in its
    ``meta[PHASE]``). ``phase`` is what the
    graphs AOT hands its forward compiler are (a compiled optimizer step is ``Phase.OPTIMIZER``); a
    backward is always ``Phase.BACKWARD``.
    """

    catalog: OpCatalog
    on_graph: Callable[[CapturedGraph], GraphRunner]
    graphs: list[CapturedGraph] = field(default_factory=list)
    decompositions: Mapping[Any, Callable[..., Any]] = field(default_factory=dict)
    phase: Phase = Phase.FORWARD
    graph_passes: Sequence[GraphPass] = ()
    dynamo_passes: Sequence[GraphPass] = ()

    def __post_init__(self) -> None:
        check_catalog(self.catalog)  # a catalog a library user loaded with their own entries is checked here

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        route_sdpa(gm, example_inputs)
        for dynamo_pass in self.dynamo_passes:
            dynamo_pass(gm, example_inputs)
        self._layouts = storage_layouts(example_inputs)
        self._input_names = input_names(gm)
        with explained_gradients():
            return aot_module_simplified(
                gm, example_inputs, fw_compiler=self.capture_aten, bw_compiler=self.capture_backward,
                inference_compiler=self.capture_inference,
                decompositions=dict(self.decompositions) or None, keep_inference_input_mutations=True,
            )

    def capture_aten(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], phase: Phase | None = None
    ) -> GraphRunner:
        """Capture an aten graph AOTAutograd produced (what AOT hands its ``fw_compiler``): also the entry
        of TorchAir's ``get_compiler()`` and npugraph_ex's ``compile_fx``, which users put under their own
        ``aot_module_simplified``."""
        phase = phase or self.phase
        _note_layouts(gm, storage_layouts(example_inputs) if _real(example_inputs) else getattr(self, "_layouts", ()))
        gm.meta[PHASE] = phase
        if phase != Phase.BACKWARD:  # a backward takes saved tensors and gradients, not the graph's inputs
            note_input_names(gm, getattr(self, "_input_names", ()))
        for graph_pass in self.graph_passes:
            graph_pass(gm, example_inputs)
        symbols = input_symbols(gm)
        if is_dynamic(symbols):
            return self._per_call_sizes(gm, symbols, phase)
        return self._keep(CapturedGraph(gm, build_program(gm, self.catalog, phase=phase)))

    def capture_inference(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> GraphRunner:
        """A graph AOTAutograd lowered for inference (no gradients: its ``inference_compiler``), marked so in
        its ``meta[INFERENCE]``: nothing outside the graph keeps its outputs for a backward."""
        gm.meta[INFERENCE] = True
        return self.capture_aten(gm, example_inputs)

    def capture_backward(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> GraphRunner:
        """The backward graph AOTAutograd derived (its ``bw_compiler``), compiled on the first backward.
        AOT calls a backward with its arguments in one list it may free early (boxed). A second-order
        backward through it is refused by torch itself ("torch.compile with aot_autograd does not
        currently support double backward")."""
        return make_boxed_func(self.capture_aten(gm, example_inputs, Phase.BACKWARD))

    def _keep(self, graph: CapturedGraph) -> GraphRunner:
        self.graphs.append(graph)
        return self.on_graph(graph)

    def _per_call_sizes(self, gm: torch.fx.GraphModule, symbols: Sequence[InputSymbol], phase: Phase) -> GraphRunner:
        """A dynamic-shape graph costs what its call's sizes cost: its program is built when it is
        called, once for every distinct set of input sizes (the device runs one graph and tiles each
        call on the host; the model prices each call at its own sizes)."""
        runners: dict[tuple[tuple[str, int], ...], GraphRunner] = {}

        def run(*args: Any) -> list[Any]:
            sizes = input_sizes(symbols, args)
            key = tuple(sorted((str(symbol), int(value)) for symbol, value in sizes.items()))
            if key not in runners:
                dynamic = not _on_gears(symbols, args)
                program = build_program(gm, self.catalog, sizes, phase, size_ops=dynamic)
                runners[key] = self._keep(CapturedGraph(gm, program, dynamic=dynamic))
            return runners[key](*args)

        return run


PHASE = "npufuse_phase"
"""``gm.meta`` key: the :class:`~pytest_npufuse.vocabulary.Phase` of an aten graph, set before its graph
passes run (TorchAir's FX passes name their debug files after it)."""

INFERENCE = "npufuse_inference"
"""``gm.meta`` key: True on an aten graph AOTAutograd lowered for inference (its ``inference_compiler``)."""

STORAGE_FORMATS = "npufuse_storage_formats"
"""``gm.meta`` key: placeholder name -> the storage format a format cast gave its tensor (``FRACTAL_NZ``),
for the inputs that are not in their shape's base format; read by the graph dump."""


def storage_layouts(inputs: Sequence[Any]) -> tuple[tuple[tuple[int, ...], str] | None, ...]:
    """Per input: its shape and the storage format a format cast gave it (``npu_format_cast(w, 29)``), or
    None for one in its shape's base format or not a tensor. Only the real inputs Dynamo hands the
    backend carry it; AOT's graph sees fake copies."""
    layouts = []
    for value in inputs:
        fmt = get_npu_format(value) if isinstance(value, torch.Tensor) and not _fake(value) else None
        layouts.append((tuple(value.shape), fmt.name) if fmt is not None and not is_base_format(fmt) else None)
    return tuple(layouts)


def _fake(value: torch.Tensor) -> bool:
    return isinstance(value, torch._subclasses.FakeTensor) or value.is_meta


def _real(inputs: Sequence[Any]) -> bool:
    return any(isinstance(v, torch.Tensor) and not _fake(v) for v in inputs)


def _note_layouts(gm: torch.fx.GraphModule, layouts: Sequence[tuple[tuple[int, ...], str] | None]) -> None:
    """Record on ``gm`` the storage formats of its placeholders, matched by position and shape (AOT keeps
    the flat inputs' order); nothing when the counts differ."""
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(layouts):
        return
    formats = {}
    for node, layout in zip(placeholders, layouts):
        value = node.meta.get("val")
        if layout is not None and isinstance(value, torch.Tensor) and tuple(value.shape) == layout[0]:
            formats[node.name] = layout[1]
    gm.meta[STORAGE_FORMATS] = formats


# torch's autograd fallback (autograd_not_implemented_fallback.cpp), when AOT traces a backward through
# an op that has no autograd kernel: "<op>: an autograd kernel was not registered to the Autograd key(s)
# but we are trying to backprop through it. ..."
_NO_AUTOGRAD = re.compile(r"^(\S+): an autograd kernel was not registered to the Autograd key\(s\) but we are trying to backprop")
_EXPLAINED: SessionKey[set[str]] = SessionKey("ops whose missing autograd kernel was explained", set, Scope.INHERITED)


@contextlib.contextmanager
def explained_gradients() -> Iterator[None]:
    """Trace with torch's "trying to backprop" warnings replaced by one :class:`GradientsWarning` per op
    and run (pytest run or script). A model run with gradients on (parameters require grad, no ``torch.no_grad()``) makes
    AOT trace its backward even for an inference script; torch's warning then points into torch's
    autograd and repeats per graph, while the cause and the fix are the user's."""
    held: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            held = caught
            yield
    finally:
        _reemit(held)


def _reemit(held: Sequence[warnings.WarningMessage]) -> None:
    """The warnings of a trace raised again, torch's backprop warning as a GradientsWarning once per op."""
    for each in held:
        match = _NO_AUTOGRAD.match(str(each.message))
        if match is None:
            warnings.warn_explicit(each.message, each.category, each.filename, each.lineno, source=each.source)
        elif match.group(1) not in current_session()[_EXPLAINED]:
            current_session()[_EXPLAINED].add(match.group(1))
            where = next((f for f in reversed(traceback.extract_stack()) if is_user_path(f.filename)), None)
            warnings.warn_explicit(GradientsWarning(
                f"{match.group(1)} has no autograd kernel, and the model was compiled with gradients on, so torch "
                "traced a backward through it. For inference, call the compiled model under torch.no_grad() or "
                "torch.inference_mode() (no backward is traced); to train through it, register its backward with "
                "torch.library.register_autograd."
            ), GradientsWarning, where.filename if where else "<model>", where.lineno or 0 if where else 0)


def _on_gears(symbols: Sequence[InputSymbol], args: Sequence[Any]) -> bool:
    """Whether every symbolic input size of this call is a dim given gears by ``set_dim_gears``: GE
    compiled a static graph per gear and runs that one. A size that is no gear fails as on the device."""
    free: set[Any] = set()
    geared: set[Any] = set()
    for position, dim, expr in symbols:
        free |= expr.free_symbols
        gears = gears_of(args[position]) if dim is not None else None
        if gears is None or dim not in gears:
            continue
        size = int(args[position].shape[dim])
        if size not in gears[dim]:
            raise CaptureError(
                f"an input of shape {list(args[position].shape)} has size {size} in dim {dim}, which is not one of "
                f"its gears {list(gears[dim])} "
                "(torchair.inference.set_dim_gears); pad the input to a gear or add the size to the gears.",
                argument=f"input {position} dim {dim}", bound=size
            )
        geared |= expr.free_symbols
    return free <= geared


class _Captured(Exception):
    """Raised by the graph on the capturing call: capture needs the graph, not its values."""


def _aliased_pairs(inputs: Sequence[Any]) -> list[str]:
    """The pairs of tensor inputs that alias (share memory), as ``"0 and 1"``."""
    tensors = [(index, x) for index, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    return [
        f"{a} and {b}" for n, (a, x) in enumerate(tensors) for b, y in tensors[n + 1:]
        if x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    ]


def _aliasing(pairs: Sequence[str]) -> str:
    """The aliased input ``pairs``, worded for the "captured again" error: Dynamo guards on aliasing, so a
    model that writes in place into aliased inputs is the usual cause."""
    if not pairs:
        return ""
    return (
        f"; inputs {', '.join(pairs)} are aliases (they share memory), and Dynamo guards on aliasing, so writing "
        "in place into aliased inputs recaptures the graph: pass separate tensors (x.clone()) to model the "
        "unaliased case"
    )


class Capture:
    """A model captured once (one Dynamo + AOT pass). :meth:`run` calls the compiled model again with an
    executor bound to the graph; Dynamo's cached graph is reused, and its wrappers rebuild the model's
    own output structure (nested tuples, dicts, outputs that alias inputs) around the executor's values.

    A weightless model (a parameter, buffer or input on the meta device, :mod:`.meta`) is captured on
    meta copies of its inputs: ``inputs`` are what it was captured on, ``real_inputs`` maps each meta copy
    back to the real tensor it stands for. ``graph_args`` are the flat graph inputs (parameters and
    inputs) of the capturing call: what the graph computes on, without calling the model again."""

    def __init__(self, model: Callable[..., Any], inputs: Sequence[Any], catalog: OpCatalog) -> None:
        self._executor: Callable[[list[Any]], list[Any]] | None = None
        self._backend = CaptureBackend(catalog, self._runner, graph_passes=(apply_rules,))
        self._compiled = compile_static(model, self._backend)
        self.weightless = weightless(model, inputs)
        self.real_inputs: dict[int, Any] = {}
        if self.weightless:
            inputs, self.real_inputs = on_meta(inputs)
        self.inputs = list(inputs)
        self.graph_args: list[Any] = []
        try:
            # A timing-only model's forward puts the tensors it creates "on the NPU" on the meta device too.
            with npu_is_meta() if self.weightless else contextlib.nullcontext():
                call_compiled(model, self._compiled, inputs, self.weightless)
        except _Captured:
            pass
        if len(self._backend.graphs) != 1:
            name = getattr(type(model), "__name__", repr(model))
            raise CaptureError(
                f"{name} compiled into {len(self._backend.graphs)} graphs, expected exactly one; "
                "a model with no tensor operations, or one Dynamo could not trace, cannot be modeled."
            )
        self.graph = self._backend.graphs[0]
        check_outputs_used(self.graph.program)

    def run(self, inputs: Sequence[Any], execute: Callable[[list[Any]], Any]) -> tuple[Any, Any]:
        """The model's outputs for ``inputs`` with the graph computed by ``execute`` (flat graph inputs ->
        a result whose ``outputs`` are the flat graph outputs), and that result."""
        results: list[Any] = []

        def bound(args: list[Any]) -> list[Any]:
            results.append(execute(args))
            return results[-1].outputs

        self._executor = bound
        try:
            with torch.no_grad(), npu_is_meta() if self.weightless else contextlib.nullcontext():
                outputs = self._compiled(*inputs)
        finally:
            self._executor = None
        if len(self._backend.graphs) != 1 or len(results) != 1:
            pairs = _aliased_pairs(inputs)
            raise CaptureError(
                "the model was captured again when run a second time on copies of its inputs (Dynamo "
                f"recompiled it){_aliasing(pairs)}; a modeled model must be a pure function of its inputs and "
                "parameters.", argument=f"inputs {', '.join(pairs)}" if pairs else None,
            )
        return outputs, results[0]

    def _runner(self, graph: CapturedGraph) -> GraphRunner:
        def run(*args: Any) -> list[Any]:
            if self._executor is None:
                self.graph_args = list(args)
                raise _Captured()
            return self._executor(list(args))

        return run
