"""Re-inplacing: a write into a graph input runs on the device as the in-place op, not as the copies that
functionalisation leaves in the captured graph.

AOTAutograd functionalises an op that updates a graph input in place (a KV-cache write such as
``npu_scatter_nd_update_(cache, slots, rows)``, the MLA prolog's cache update, ``index_copy_``): the op
returns the input's new value as a fresh tensor, a ``copy`` writes that over (a view of) the input, and a
``copy_`` at the end of the graph writes the input back. Priced as captured, one decode step would copy
every layer's whole cache twice. TorchAir undoes this before the device sees the graph, so the hardware
runs one kernel that updates the input's memory:

- aclgraph / npugraph_ex: ``_mutated_input_reinplace`` turns the op into its in-place form and drops the
  ``copy_`` epilogue when nothing reads the input's old value after the op (Ascend/torchair
  ``python/torchair/_acl_concrete_graph/graph_pass.py`` @1b5e48a4);
- GE: ``optimize_reference_op_redundant_copy`` removes the TensorMove before the ref op and the Assign after
  it, "two redundant data copies" (``python/torchair/_ge_concrete_graph/graph_pass.py`` @23db6b55).

And a functional ``copy`` between two tensors of one layout, what an in-place op on an intermediate leaves, is
no kernel either (:func:`_no_op`).

Both keep the copies when the input is used on more than one stream without that order being certain
(TorchAir's ``verify_nodes_on_same_stream``; docs/sources.md#torchair-4-6): here, when
the input is read or written on more than one stream.

:func:`find_writes` finds those writes in an aten graph; lowering then gives the op's new value the input's
memory, emits no kernel for the copies, and prices the op as the in-place update it is.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

import torch
import torch.fx

from .. import cost
from ..ir.op import OpInfo

# ``GraphModule.meta`` key: set by a compile configuration whose device keeps the write-backs (TorchAir's
# aclgraph modes with their mutated-input pass switched off), so :func:`find_writes` finds none
KEEP_WRITE_BACKS = "npufuse_keep_write_backs"
# ``node.meta`` key: the op type pricing a node a pass retargeted to one running the same kernel (TorchAir's
# reinplacing of registered NPU ops, :mod:`pytest_npufuse.torchair._reinplace`)
PRICED_AS = "npufuse_priced_as"
_COPY = torch.ops.aten.copy.default
_COPY_ = torch.ops.aten.copy_.default
# functionalisation's write of a view's new value back into its base (``cache[1]`` updated in place), each
# with the view op it undoes: ``select_scatter(base, new, dim, index)`` places what ``select(base, dim, index)``
# took out
_VIEW_SCATTERS = {
    torch.ops.aten.select_scatter.default: torch.ops.aten.select.int,
    torch.ops.aten.slice_scatter.default: torch.ops.aten.slice.Tensor,
}


@dataclass(frozen=True)
class InPlaceWrites:
    """The graph's re-inplaced input writes.

    ``written``: per op node, its output positions that are a graph input's new value, each with the
    argument node (the input or a view of it) whose memory the op updates. ``elided``: per copy node
    (``copy`` onto the input, the ``copy_`` epilogue), the node whose memory its result already is.
    """

    written: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    elided: Mapping[str, str] = field(default_factory=dict)


NO_WRITES = InPlaceWrites()


def find_writes(
    graph: torch.fx.Graph, is_view: Callable[[torch.fx.Node], bool], stream: Mapping[torch.fx.Node, str]
) -> InPlaceWrites:
    """The functionalised writes into graph inputs that TorchAir re-inplaces (module docstring).
    ``is_view`` tells an aliasing op (lowering's rule, from the schema) from a kernel; ``stream`` is each
    node's stream (:func:`~pytest_npufuse.frontend.scopes.node_streams`). A graph whose configuration
    switched the reinplacing off (:data:`KEEP_WRITE_BACKS`) keeps every copy a kernel."""
    if graph.owning_module is not None and graph.owning_module.meta.get(KEEP_WRITE_BACKS):
        return NO_WRITES
    order = {node: position for position, node in enumerate(graph.nodes)}
    written: dict[str, dict[int, str]] = {}
    elided: dict[str, str] = {}
    for epilogue in graph.nodes:
        if epilogue.target is not _COPY_ or epilogue.args[0].op != "placeholder":
            continue
        graph_input = epilogue.args[0]
        found = _writer(epilogue.args[1], graph_input, is_view)
        if found is None:
            continue
        op, position, destination, copies = found
        views = _aliases(graph_input, is_view)
        readers = {user for view in views for user in view.users if not is_view(user)}
        later = {user for user in readers if order[user] > order[op]} - {*copies, epilogue}
        if later or len({stream[node] for node in readers}) > 1:
            continue
        written.setdefault(op.name, {})[position] = destination.name
        for copy in copies:
            elided[copy.name] = copy.args[0].name
        elided[epilogue.name] = graph_input.name
    for node in graph.nodes:
        if node.target is _COPY and node.name not in elided and _no_op(node, is_view):
            elided[node.name] = node.args[1].name
    return InPlaceWrites(written, elided)


def _no_op(copy: torch.fx.Node, is_view: Callable[[torch.fx.Node], bool]) -> bool:
    """Whether a functional ``copy(dst, src)`` is ``src`` itself: TorchAir's ``remove_noop_ops`` (on by
    default, ``experimental_config.remove_noop_ops``) hands such a copy to Inductor's pass of that name, which
    replaces it by ``src`` when the two have the same metadata (``npu_fx_compiler.py`` ``_optimize_noop_ops``).
    What functionalisation leaves of an in-place op on an intermediate (RoPE applied to q and k in place).
    A copy out of a graph input stays: its result must not alias the caller's tensor."""
    source = copy.args[1]
    new, old = copy.meta.get("val"), source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(new, torch.Tensor) or not isinstance(old, torch.Tensor):
        return False
    if _base(source, is_view).op == "placeholder":
        return False
    return new.shape == old.shape and new.dtype == old.dtype and new.stride() == old.stride()


def _writer(
    value: torch.fx.Node, graph_input: torch.fx.Node, is_view: Callable[[torch.fx.Node], bool]
) -> tuple[torch.fx.Node, int, torch.fx.Node, tuple[torch.fx.Node, ...]] | None:
    """(op, output position, the argument it updates, the copies that place its value in the input: a
    ``copy`` onto it or its view, and the ``select_scatter`` / ``slice_scatter`` of a view's value into
    it) when ``value`` (what the epilogue writes back) is an op's new value of ``graph_input``, or None."""
    value = _base(value, is_view)
    copies: list[torch.fx.Node] = []
    view = None
    while True:  # a view's update: select_scatter(input, copy(select(input), op's value)) written back
        if value.target is _COPY and _base(value.args[0], is_view) is graph_input:
            copies.append(value)
        elif value.target in _VIEW_SCATTERS and value.args[0] is graph_input and view is None:
            copies.append(value)
            view = value
        else:
            break
        value = _base(value.args[1], is_view)
    position = 0
    if value.target is operator.getitem:
        value, position = value.args
    if value.op != "call_function" or value.target in (_COPY, _COPY_) or is_view(value):
        return None
    new = _output(value, position)
    for argument in _arguments(value):
        old = argument.meta.get("val")
        if _base(argument, is_view) is graph_input and isinstance(old, torch.Tensor) and new is not None \
                and old.numel() == new.numel() and (view is None or _same_view(argument, view)):
            return value, position, argument, tuple(copies)
    return None


def _same_view(argument: torch.fx.Node, scatter: torch.fx.Node) -> bool:
    """Whether ``scatter`` (a ``select_scatter`` / ``slice_scatter`` into the graph input) puts its value back
    where ``argument``, a view of that input the op updated (``cache[1]``, the view
    ``npu_scatter_nd_update_(kv_cache[1], ...)`` writes), took it from: the same view op with the same
    dims and bounds, taken of the input itself. Anything else keeps its copies."""
    return (argument.target is _VIEW_SCATTERS[scatter.target] and argument.args[0] is scatter.args[0]
            and tuple(argument.args[1:]) == tuple(scatter.args[2:]))


def _output(op: torch.fx.Node, position: int) -> torch.Tensor | None:
    value = op.meta.get("val")
    values = value if isinstance(value, (tuple, list)) else (value,)
    result = values[position] if position < len(values) else None
    return result if isinstance(result, torch.Tensor) else None


def _arguments(node: torch.fx.Node) -> Iterator[torch.fx.Node]:
    for argument in (*node.args, *node.kwargs.values()):
        if isinstance(argument, torch.fx.Node):
            yield argument


def _base(node: torch.fx.Node, is_view: Callable[[torch.fx.Node], bool]) -> torch.fx.Node:
    """The node a chain of views (not a projection out of a multi-output op) starts from."""
    while node.target is not operator.getitem and is_view(node) and node.args \
            and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def _aliases(graph_input: torch.fx.Node, is_view: Callable[[torch.fx.Node], bool]) -> list[torch.fx.Node]:
    """The input and every view of it (views of views included)."""
    found, pending = [], [graph_input]
    while pending:
        node = pending.pop()
        found.append(node)
        pending.extend(user for user in node.users if user.target is not operator.getitem and is_view(user))
    return found


def untouched(info: OpInfo, in_place: Mapping[int, str]) -> frozenset[int]:
    """Outputs of a re-inplaced op (:func:`find_writes`) whose input it does not stream whole: an update
    (a cache write, index_copy, the MLA prolog's cache) reads and writes only the slots it changes, priced
    with its other operands; a pointwise op in place still reads and writes every element."""
    if not in_place or cost.pointwise(info):
        return frozenset()
    return frozenset(in_place)
