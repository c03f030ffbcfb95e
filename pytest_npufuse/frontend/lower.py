"""Lowering, the core of capture: a captured aten graph becomes the program IR, and Dynamo's failures
become errors a user can act on. (:mod:`.backend` drives Dynamo and AOT; ``pytest_npufuse.capture()``
is the public entry point.)

Dynamo hands the backend an FX graph of torch-level calls; AOTAutograd lowers it to functional aten ops
with fake-tensor metadata (shapes and dtypes), which is the level at which an NPU compiler sees kernels.
Scope markers arrive as ``npufuse::scope_enter/exit`` nodes in program order and are resolved into
per-kernel annotations here.
"""

from __future__ import annotations

import math
import operator
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import sympy
import torch
import torch.fx

from .. import cost
from ..errors import CaptureError, NotModeledError, OptionsError, ScopeError
from ..ir.events import Event, EventKind
from ..ir.program import Buffer, Kernel, ModuleFrame, Program, StreamScope, TensorSpec, compute_dtype_of
from ..target.catalog import OpCatalog
from ..vocabulary import Phase
from . import ge_shapes, reinplace, scopes, syncs
from .names import tensor_label
from .source import call_name, call_site, module_path, source_line

# Ops that only reinterpret metadata or order work but whose schemas carry no alias annotation. A
# collective's wait_tensor is no kernel on an NPU: HCCL work is already ordered on its stream.
_METADATA_ONLY = frozenset({"aten::_unsafe_view", "aten::lift_fresh", "_c10d_functional::wait_tensor"})


def op_type_of(node: torch.fx.Node) -> str:
    """``namespace::name`` of a call node, e.g. ``aten::mm`` or ``npu::npu_quant_matmul``."""
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name
    return f"python::{getattr(target, '__name__', str(target))}"


def is_view(node: torch.fx.Node) -> bool:
    """True when the op returns an alias of its input instead of writing new memory.

    Decided from the schema's alias annotation, as PyTorch's CUDA sanitizer does, so new view ops need
    no list here.
    """
    if node.target is operator.getitem:
        return True
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return False
    if schema.name in _METADATA_ONLY:
        return True
    returns = schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


Sizes = Mapping[sympy.Symbol, sympy.Integer]


def _spec(value: Any, node: torch.fx.Node, sizes: Sizes) -> TensorSpec:
    shape = tuple(_static_dim(dim, node, sizes) for dim in value.shape)
    return TensorSpec(shape, str(value.dtype).removeprefix("torch."), math.prod(shape) * value.element_size())


_UNBOUNDED_FIX = {
    # torch_npu computes the output size of repeat_interleave with a repeats tensor on the host (a sum
    # of the repeats read back from the device) unless output_size is given; the aclnnRepeatInterleave
    # APIs take it as an argument.
    "aten::repeat_interleave": "pass output_size= (the sum of the repeats, e.g. x.shape[0] * r), as the aclnn "
    "RepeatInterleave APIs take it and torch_npu otherwise syncs to read it back,",
}


def _static_dim(dim: Any, node: torch.fx.Node, sizes: Sizes) -> int:
    """A dimension as the cost model sees it. A size that follows from the inputs' sizes (a graph
    compiled with ``dynamic=True``) is its value for the call being modeled, ``sizes``. A size a
    value-dependent op decides at run time (``torch.nonzero``, boolean-mask indexing) is priced at its
    upper bound, the memory a device must reserve for it; a size with no upper bound
    (``torch.zeros(int(x.item()))``) cannot be priced."""
    if not isinstance(dim, torch.SymInt):
        return int(dim)
    expr = dim.node.expr.xreplace(sizes) if sizes else dim.node.expr
    if not expr.free_symbols:
        return int(expr)
    upper = dim.node.shape_env.bound_sympy(expr).upper
    if not isinstance(upper, sympy.Integer):  # torch's integer infinity is no sympy Integer
        op_type = op_type_of(node)
        fix = _UNBOUNDED_FIX.get(op_type, "derive the size from input shapes, or clamp it (torch._check(n <= LIMIT))")
        raise CaptureError(
            f"{op_type} at {source_line(node) or 'the model'} has a size that depends on tensor values "
            f"({expr}) with no upper bound, so its cost cannot be modeled; {fix} so npufuse can price the worst case."
        )
    return int(upper)


def _tensor_nodes(args: Any) -> Iterator[torch.fx.Node]:
    """Every graph node among (possibly nested) call arguments, in argument order."""
    for arg in ge_shapes.leaves(args):
        if isinstance(arg, torch.fx.Node):
            yield arg


class _Entered(NamedTuple):
    """A scope entered and not yet exited: its attributes, the user's line, the kernels issued before it."""

    attrs: Mapping[str, str]
    source: str
    first: int


class _ProgramBuilder:
    """Walks an aten graph once in program order, keeping the scope stack as TorchAir's converter does."""

    def __init__(
        self, gm: torch.fx.GraphModule, catalog: OpCatalog, sizes: Sizes, phase: Phase, size_ops: bool = False
    ) -> None:
        self.gm = gm
        self.catalog = catalog
        self.sizes = sizes
        self.phase = phase
        self.size_ops = size_ops
        self.stack = scopes.ScopeStack()
        self.buffers: dict[str, Buffer] = {}
        self.in_place_writes: list[tuple[str, str]] = []  # (kernel's node, argument it writes in place)
        self.kernels: list[Kernel] = []
        self.index_of_node: dict[str, int] = {}
        self.index_of_name: dict[str, int] = {}
        self.recorded_after: set[str] = set()
        self.names: dict[str, int] = {}
        self.syncs: list[Event] = []
        self.record_tokens: dict[str, str] = {}
        self.prefetched: set[str] = set()
        self.stream_scopes: list[StreamScope] = []
        self.entered: list[_Entered] = []
        self.scope_uses: list[ScopeUse] = []
        self.frames: dict[tuple[str, str], ModuleFrame] = {}
        self.native_superkernels: list[torch.fx.Node] = []
        self.streams = scopes.node_streams(gm.graph)  # the stream of each sync point (kernels: their annotations)
        self.writes = reinplace.find_writes(gm.graph, is_view, self.streams)

    def build(self) -> Program:
        inputs: list[str] = []
        outputs: tuple[str | None, ...] = ()
        dynamic = self.size_ops
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self._add_buffer(node, producer=None)
                inputs.append(node.name)
                if dynamic and ge_shapes.is_symbolic(node):
                    shape = self._ge_kernel(ge_shapes.SHAPE, (), f"{node.name}_shape", node)
                    self._ge_kernel(ge_shapes.SIZE, (shape,), node.name, node)
            elif node.op == "get_attr":
                self._add_buffer(node, producer=None)
            elif node.op == "output":
                outputs = tuple(
                    n.name if isinstance(n, torch.fx.Node) else None for n in ge_shapes.leaves(node.args[0])
                )
            elif scopes.is_scope_node(node):
                self._scope_marker(node)
            elif syncs.is_sync_node(node):
                self._sync(node)
            elif dynamic and ge_shapes.is_symbolic(node):
                self._ge_kernel(ge_shapes.ARITHMETIC, self._sizes_of(node), node.name, node)
            elif node.name in self.writes.elided:
                self._add_buffer(node, producer=None, alias_of=self.writes.elided[node.name])
            elif is_view(node):
                if dynamic:
                    self._pack(node)
                self._add_view(node)
            else:
                self._add_kernel(node, self._pack(node) if dynamic else ())
        for kernel_node, argument in self.in_place_writes:  # after its other outputs, as its functional form
            buffer = f"{kernel_node}.{argument}"  # an output aliasing the argument: the sanitizer sees the write
            self.buffers[buffer] = Buffer(buffer, self.buffers[argument].spec, None, argument, self.buffers[argument].label)
            self._attach_output(kernel_node, buffer)
        if self.native_superkernels:
            names = [n.args[0] if n.args else None for n in self.native_superkernels]
            raise CaptureError(
                "After you call the torch.npu.super_kernel_scope_begin operator, there is no paired call to the "
                f"torch.npu.super_kernel_scope_end operator. The parameters for these torch.npu.super_kernel_scope_begin "
                f"calls are:{names} (first at {source_line(self.native_superkernels[0]) or 'the model'}). "
                "Call super_kernel_scope_end(name) for each, and keep graph breaks out of the range."
            )
        open_scopes = self.stack.open_scopes()
        if open_scopes and self.stack.switched_by_set_stream():
            raise CaptureError(
                "When use npugraph_ex, you must make sure at the end of your code set stream to the same stream as "
                f"the begin of your code: {open_scopes[-1]}"
                f"{f' at {self.entered[-1].source}' if self.entered[-1].source else ''} is still in effect where the "
                "function returns. Call torch.npu.set_stream with the stream current when the function began "
                "(torch.npu.current_stream() read first) before returning.", where=self.entered[-1].source or None
            )
        if open_scopes:
            raise CaptureError(
                f"{open_scopes[-1]}{f' entered at {self.entered[-1].source}' if self.entered[-1].source else ''} is never "
                "exited in the captured "
                "graph: a graph break inside the block (print, .item(), a data-dependent if) ended the graph there. "
                "Use scopes only as `with` blocks and keep graph breaks out of them (torch.compile(fullgraph=True) "
                "names the break).", where=self.entered[-1].source or None
            )
        program = Program(
            tuple(self.kernels),
            MappingProxyType(dict(self.buffers)),
            tuple(inputs),
            outputs,
            tuple(self.syncs),
            tuple(sorted(self.stream_scopes, key=lambda scope: (scope.enter, scope.exit))),
            self.phase,
        )
        check_scope_uses(self.scope_uses, copies_allowed=self.phase != Phase.FORWARD)
        _check_kept_alive_streams(program)
        return program

    def _native_superkernel(self, node: torch.fx.Node) -> None:
        """torch.npu.super_kernel_scope_begin/end: paired by name in any order, as TorchAir checks them."""
        name = node.args[0] if node.args else None
        if node.target is scopes.SK_BEGIN:
            self.native_superkernels.append(node)
            return
        begun = [n.args[0] if n.args else None for n in self.native_superkernels]
        if name not in begun:
            where, problem = source_line(node) or None, (
                f"No matching torch.npu.super_kernel_scope_begin found; available unmatched scope_names are: {begun}"
                if begun else "you must first call the torch.npu.super_kernel_scope_begin, as they must be called in pairs"
            )
            raise CaptureError(
                f"When you call the torch.npu.super_kernel_scope_end operator ({name!r} at {where or 'the model'}), "
                f"{problem}. Give super_kernel_scope_end the name its begin was given.", argument="name", where=where
            )
        del self.native_superkernels[begun.index(name)]

    def _annotations(self) -> scopes.Annotations:
        """The kernel's scope attributes; an open native SuperKernel range (the latest begun) wins."""
        annotations = self.stack.resolve()
        if not self.native_superkernels:
            return annotations
        latest = self.native_superkernels[-1]
        name = latest.args[0] if latest.args else None
        return replace(annotations, sk_scope=name, sk_options="", sk_native=True)

    def _scope_marker(self, node: torch.fx.Node) -> None:
        if node.target in (scopes.SK_BEGIN, scopes.SK_END):
            self._native_superkernel(node)
        elif node.target is scopes.SCOPE_ENTER:
            keys, values = node.args[:2]
            self.stack.enter(keys, values)
            attrs = dict(zip(keys, values))
            self.entered.append(_Entered(attrs, source_line(node), len(self.kernels)))
            if scopes.NATIVE_STREAM in attrs:
                self._sync_point(EventKind.NOOP, "", "torch.npu.stream", node)
            if attrs.get(scopes.INNER_PARALLEL) == "False":
                self._sync_point(EventKind.NOOP, "", "npu_stream_switch(enable_inner_parallel=False)", node)
        else:
            self.stack.exit(f"the graph at {source_line(node) or 'the model'}", source_line(node) or None)
            self._close(self.entered.pop())

    def _close(self, entered: _Entered) -> None:
        """A scope exited: its stream scope spans the kernels issued inside it; a SuperKernel scope
        records how many of them it holds."""
        stream = entered.attrs.get(scopes.STREAM_LABEL)
        if stream:
            self.stream_scopes.append(StreamScope(stream, entered.first, len(self.kernels)))
        name = entered.attrs.get(scopes.SK_SCOPE)
        if name:
            kernels = sum(1 for kernel in self.kernels[entered.first :] if kernel.annotations.sk_scope == name)
            self.scope_uses.append(ScopeUse(name, entered.attrs.get(scopes.SK_OPTIONS, ""), entered.source, kernels))

    def _sync_point(
        self, kind: EventKind, event: str, api: str, node: torch.fx.Node, stream: str | None = None, buffer: str | None = None
    ) -> None:
        """An event request at the current point of the issue order, on ``stream`` (default: the current one)."""
        self.syncs.append(Event(
            event, kind=kind, stream=stream or self.streams[node], position=len(self.kernels), api=api,
            source=source_line(node), buffer=buffer,
        ))

    def _storage(self, name: str) -> str:
        """The buffer that owns the memory ``name`` lives in (itself unless it is a view)."""
        while (alias := self.buffers[name].alias_of) is not None:
            name = alias
        return name

    def _wait_for(self, dependency: torch.fx.Node, api: str, node: torch.fx.Node) -> None:
        """Wait for a ``record()`` token, or for the kernel that produced a tensor (after it ends)."""
        if dependency.name in self.record_tokens:
            self._sync_point(EventKind.WAIT, self.record_tokens[dependency.name], api, node)
            return
        storage = self._storage(dependency.name) if dependency.name in self.buffers else None
        producer = None if storage is None else self.buffers[storage].producer
        if producer is None:
            # A graph input is ready before the graph starts: nothing to wait for, but the API was used.
            self._sync_point(EventKind.NOOP, "", api, node)
            return
        kernel = self.kernels[self.index_of_name[producer]]
        event = f"after:{kernel.name}"
        if event not in self.recorded_after:
            self.recorded_after.add(event)
            self.syncs.append(
                Event(event, kind=EventKind.RECORD, stream=kernel.stream, position=kernel.index + 1, api=api, source=kernel.source)
            )
        self._sync_point(EventKind.WAIT, event, api, node)

    def _sync(self, node: torch.fx.Node) -> None:
        """Turn a synchronisation op into sync points at the current place of the issue order."""
        target = node.target
        if target is syncs.TAGGED_RECORD:
            self._sync_point(EventKind.RECORD, f"tag:{node.args[0]}", "npu_tagged_event_record", node)
        elif target is syncs.TAGGED_WAIT:
            self._sync_point(EventKind.WAIT, f"tag:{node.args[0]}", "npu_tagged_event_wait", node)
        elif target is syncs.RECORD:
            self.record_tokens[node.name] = f"record:{node.name}"
            self._sync_point(EventKind.RECORD, f"record:{node.name}", "record", node)
        elif target is syncs.WAIT:
            for dependency in _tensor_nodes(node.args):
                self._wait_for(dependency, "wait", node)
        elif target is syncs.WAIT_TENSOR:
            self._wait_for(node.args[1], "npu_wait_tensor", node)
            self._add_buffer(node, producer=None, alias_of=node.args[0].name if node.args[0].name in self.buffers else None)
        elif target is syncs.RECORD_STREAM:
            buffer, tag = node.args
            self._sync_point(EventKind.KEEP_ALIVE, "", "npu_record_tagged_stream", node, stream=tag, buffer=buffer.name)
        elif target in (syncs.EVENT_RECORD, syncs.EVENT_WAIT):
            tag, stream = node.args
            kind, api = (
                (EventKind.RECORD, "torch.npu.Event.record") if target is syncs.EVENT_RECORD
                else (EventKind.WAIT, "torch.npu.Event.wait")
            )
            self._sync_point(kind, f"event:{tag}", api, node, stream=stream or None)
        elif target is syncs.NATIVE_RECORD_STREAM:
            buffer, stream = node.args
            self._sync_point(EventKind.KEEP_ALIVE, "", "Tensor.record_stream", node, stream=stream, buffer=buffer.name)

    def _add_buffer(self, node: torch.fx.Node, producer: str | None, alias_of: str | None = None) -> None:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            label = tensor_label(node, op_type_of)
            self.buffers[node.name] = Buffer(node.name, _spec(value, node, self.sizes), producer, alias_of, label)

    def _add_view(self, node: torch.fx.Node) -> None:
        base = next(_tensor_nodes(node.args), None)
        if node.target is operator.getitem and base is not None and base.name not in self.buffers:
            # A projection out of a multi-output kernel is that kernel's output buffer, not a view; a
            # re-inplaced output is the memory of the input it updates.
            updated = self.writes.written.get(base.name, {}).get(node.args[1])
            self._add_buffer(node, producer=None if updated else self._producer_of(base), alias_of=updated)
            self._attach_output(base.name, node.name)
            return
        self._add_buffer(node, producer=None, alias_of=base.name if base is not None else None)

    def _producer_of(self, node: torch.fx.Node) -> str | None:
        index = self.index_of_node.get(node.name)
        return None if index is None else self.kernels[index].name

    def _attach_output(self, kernel_node: str, buffer: str) -> None:
        index = self.index_of_node.get(kernel_node)
        if index is not None:
            kernel = self.kernels[index]
            self.kernels[index] = replace(kernel, outputs=(*kernel.outputs, buffer))

    def _modules(self, node: torch.fx.Node) -> tuple[ModuleFrame, ...]:
        """The module calls ``node`` was traced inside, outermost first; one frame object per module,
        shared by all its kernels (a 61-layer model has thousands)."""
        frames = []
        for key, owner in (node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}).values():
            path = module_path(key)
            kind = (owner if isinstance(owner, str) else getattr(owner, "__name__", str(owner))).rsplit(".", 1)[-1]
            frame = self.frames.get((path, kind))
            if frame is None:
                site = call_site(node.meta.get("stack_trace") or "", owner)
                frame = self.frames[(path, kind)] = ModuleFrame(path, kind, site)
            frames.append(frame)
        return tuple(frames)

    def _kernel_name(self, kernel_type: str) -> str:
        """GE-style: the kernel type, numbered from its second use; a backward or optimizer graph's
        kernels carry the phase (``backward/MatMulV3_2``), so one step's kernels never share a name."""
        count = self.names.get(kernel_type, 0)
        self.names[kernel_type] = count + 1
        name = kernel_type if count == 0 else f"{kernel_type}_{count}"
        return name if self.phase == Phase.FORWARD else f"{self.phase}/{name}"

    def _sizes_of(self, node: torch.fx.Node) -> tuple[str, ...]:
        return tuple(name for name in ge_shapes.size_arguments(node) if name in self.buffers)

    def _pack(self, node: torch.fx.Node) -> tuple[str, ...]:
        """GE's Pack of the symbolic sizes ``node`` is given; the shape tensor it reads (none without)."""
        sizes = self._sizes_of(node)
        if not sizes:
            return ()
        length = ge_shapes.packed_length(node)
        return (self._ge_kernel(ge_shapes.PACK, sizes, f"{node.name}_sizes", node, length=length),)

    def _ge_kernel(
        self, op_type: str, inputs: tuple[str, ...], buffer: str, node: torch.fx.Node, length: int = 1
    ) -> str:
        """One of GE's size kernels (:mod:`.ge_shapes`) writing the int64 buffer ``buffer``."""
        info = self.catalog.lookup(op_type)
        name = self._kernel_name(info.kernel_type)
        output = TensorSpec((length,), "int64", 8 * length)
        input_specs = [self.buffers[n].spec for n in inputs]
        flops, nbytes = cost.kernel_work(info, input_specs, [output], list(inputs))
        self.buffers[buffer] = Buffer(buffer, output, name)
        self.kernels.append(Kernel(
            index=len(self.kernels), name=name, node=buffer, op_type=op_type, info=info, inputs=inputs,
            outputs=(buffer,), output_specs=(output,), annotations=self._annotations(), flops=flops, bytes=nbytes,
            compute_dtype="int64",
            source=source_line(node), input_specs=tuple(input_specs), modules=self._modules(node),
        ))
        self.index_of_name[name] = len(self.kernels) - 1
        return buffer

    def _add_kernel(self, node: torch.fx.Node, shape_inputs: tuple[str, ...] = ()) -> None:
        op_type = op_type_of(node)
        value = node.meta.get("val")
        known = self.catalog.entries.get(op_type)
        if ge_shapes.is_size_check(node) or _is_scalar(value) and not (known is not None and known.value_dependent):
            return  # host-side size arithmetic (sym_size, int(), trunc) or a check of a size, not a kernel
        if _draws_random(node):
            raise NotModeledError(
                f"{op_type} at {source_line(node) or 'the model'} draws random numbers, so BASELINE and VARIANT would "
                "draw different ones and could never match bit for bit; create the random tensor outside forward "
                "and pass it in as an input."
            )
        values = value if isinstance(value, (tuple, list)) else (value,)
        specs = [(position, _spec(v, node, self.sizes)) for position, v in enumerate(values) if isinstance(v, torch.Tensor)]
        output_specs = tuple(spec for _, spec in specs)
        inputs = tuple(n.name for n in _tensor_nodes((node.args, node.kwargs)) if n.name in self.buffers
                       and not ge_shapes.is_symbolic(n)) + shape_inputs
        input_specs = [self.buffers[name].spec for name in inputs]
        compute_dtype = compute_dtype_of(input_specs, output_specs)
        call = call_name(node)
        # A form (docs/feature-docs.md#affinity-ops: nn.Linear's cast to FRACTAL_NZ) is how torch_npu runs the user's
        # forward call; the backward of that call is other kernels, priced as their own op types.
        form = call if self.phase == Phase.FORWARD else ""
        priced_as = node.meta.get(reinplace.PRICED_AS, op_type)
        info = self.catalog.lookup(priced_as, form).for_dtypes(spec.dtype for spec in (*input_specs, *output_specs))
        name = self._kernel_name(info.kernel_type)
        in_place = self.writes.written.get(node.name, {})
        untouched = reinplace.untouched(info, in_place)
        priced = [spec for position, spec in specs if position not in untouched]
        resident = self.prefetched | {self._storage(in_place[position]) for position in untouched}
        attrs = scalar_arguments(node)
        flops, nbytes = cost.kernel_work(info, input_specs, priced, [self._storage(n) for n in inputs], resident,
                                         attrs)
        if info.cost == "prefetch":
            self.prefetched.update(self._storage(n) for n in inputs[:1])
        single = isinstance(value, torch.Tensor)
        mutated = mutated_arguments(node)
        if single:
            written = mutated[0] if mutated else in_place.get(0)
            self._add_buffer(node, producer=None if written else name, alias_of=written)
        self.index_of_node[node.name] = self.index_of_name[name] = len(self.kernels)
        self.kernels.append(
            Kernel(
                index=len(self.kernels), name=name, node=node.name, op_type=op_type, info=info, inputs=inputs,
                outputs=(node.name,) if single else (),
                output_specs=output_specs,
                annotations=self._annotations(),
                flops=flops,
                bytes=nbytes,
                compute_dtype=compute_dtype,
                source=source_line(node),
                input_specs=tuple(input_specs),
                modules=self._modules(node),
                call=call,
                attrs=attrs,
                symbolic_sizes=self.size_ops and ge_shapes.sized_at_run_time(node),
            )
        )
        if mutated and not single:  # a multi-output in-place op (a reinplaced npu_mla_prolog_v3), see build()
            self.in_place_writes += [(node.name, argument) for argument in mutated if argument in self.buffers]


class ScopeUse(NamedTuple):
    """One ``with super_kernel(scope, options)`` block as captured: where, and how many kernels it got."""

    scope: str
    options: str
    line: str
    kernels: int


def check_scope_uses(uses: Sequence[ScopeUse], copies_allowed: bool = False) -> None:
    """Options that would be ignored without a word are errors: options on a scope that encloses no
    kernel, and different options on a later use of a scope name (a scope takes its first use's).

    ``copies_allowed``: AOTAutograd's partitioner copies the forward's scope markers, which nothing
    consumes, to the start of the backward graph, where they enclose no kernel (the forward was
    checked already)."""
    by_scope: dict[str, list[ScopeUse]] = {}
    for use in uses:
        by_scope.setdefault(use.scope, []).append(use)
    for scope, group in by_scope.items():
        first = group[0]
        with_options = [use for use in group if use.options]
        if with_options and not any(use.kernels for use in group) and not copies_allowed:
            use = with_options[0]
            raise OptionsError(
                f"super_kernel({scope!r}, {use.options!r}) at {use.line or 'the model'} encloses no kernel (only views, "
                "or ops whose results are never used), so its options apply to nothing; move the ops into the "
                "scope or drop the options.", op="super_kernel", where=use.line or None
            )
        for use in with_options:
            if use.options != first.options:
                raise OptionsError(
                    f"super_kernel({scope!r}, {use.options!r}) at {use.line or 'the model'} passes other options than the "
                    f"first use of {scope!r} at {first.line or 'the model'} ({first.options!r}); one scope name is one "
                    "SuperKernel range with one options string: pass the same options on every use, or none after the first."
                )


def _check_kept_alive_streams(program: Program) -> None:
    """``npu_record_tagged_stream(t, tag)`` for a stream no op runs on would keep nothing alive."""
    streams = set(program.streams()) | {scope.stream for scope in program.stream_scopes}
    for point in program.syncs:
        if point.kind == EventKind.KEEP_ALIVE and point.stream not in streams:
            raise ScopeError(
                f"npu_record_tagged_stream(..., {point.stream!r}) at {point.source or 'the model'}: no op runs on a "
                f"stream {point.stream!r} (streams: {', '.join(sorted(streams))}); name the tag of the "
                "npu_stream_switch that uses the tensor, or 'default' for the main stream."
            )


def _draws_random(node: torch.fx.Node) -> bool:
    """Whether the op draws random numbers. Attention with ``dropout_p=0`` (every inference call of
    ``scaled_dot_product_attention``) carries torch's seeded tag but draws nothing."""
    if torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
        return False
    schema = node.target._schema
    for position, argument in enumerate(schema.arguments):
        if argument.name == "dropout_p":
            value = node.kwargs.get("dropout_p", node.args[position] if position < len(node.args) else argument.default_value)
            return value != 0
    return True


def _is_scalar(value: Any) -> bool:
    """A Python number or symbolic number: what size arithmetic on the host produces."""
    return isinstance(value, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool))


def scalar_arguments(node: torch.fx.Node) -> tuple[tuple[str, Any], ...]:
    """The call's non-tensor arguments by schema name: numbers, flags, strings and tuples of them (what
    decides the sizes and the work beyond the tensors, e.g. an MC2 dispatch's EP world size)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return ()
    values = {argument.name: value for argument, value in zip(schema.arguments, node.args)}
    values.update(node.kwargs)
    return tuple((name, plain) for name, value in values.items() if (plain := _plain_scalar(value)) is not _NOT_SCALAR)


_NOT_SCALAR = object()


def _plain_scalar(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = tuple(_plain_scalar(item) for item in value)
        return _NOT_SCALAR if any(item is _NOT_SCALAR for item in items) else items
    return _NOT_SCALAR


def mutated_arguments(node: torch.fx.Node) -> tuple[str, ...]:
    """Buffers an in-place op writes (schema ``Tensor(a!)``), e.g. the ``copy_`` that writes a mutated
    graph input back; its output is that same memory, not a new buffer."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return ()
    written = []
    for argument, value in zip(schema.arguments, node.args):
        if argument.alias_info is not None and argument.alias_info.is_write and isinstance(value, torch.fx.Node):
            written.append(value.name)
    return tuple(written)


def build_program(
    gm: torch.fx.GraphModule,
    catalog: OpCatalog,
    sizes: Sizes | None = None,
    phase: Phase = Phase.FORWARD,
    size_ops: bool = False,
) -> Program:
    """The program IR of one aten graph; ``sizes`` gives the symbolic input sizes of a dynamic-shape
    graph their values for one call (see :func:`input_sizes`); ``phase`` is the graph's part of a
    training step; ``size_ops`` adds the size kernels GE runs for a graph it host-schedules
    (:mod:`.ge_shapes`; a graph on gears is static per gear)."""
    return _ProgramBuilder(gm, catalog, sizes or {}, phase, size_ops).build()


