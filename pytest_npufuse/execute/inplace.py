"""Which functional ``_foreach_*`` kernels the CPU may compute in place, with the same bits.

AOTAutograd functionalizes a compiled optimizer step: ``exp_avg_sq.mul_(beta2)`` becomes a
``_foreach_mul`` that returns new tensors, and each mutated input gets a ``copy_`` at the end of the
graph. Computed as written, every such kernel allocates parameter-sized tensors and the ``copy_``
epilogue copies them back: for BERT-base most of the step's optimizer time and gigabytes of memory.
An elementwise kernel writes the same bits into its first operand as into a fresh tensor, so the
executor computes a node with the op's in-place overload whenever no later node can see the difference:

- each tensor of its first operand is a value no other node reads (a dead intermediate), or a graph
  input that the ``copy_`` overwriting it with the end of that in-place chain reads (the copy becomes a
  copy onto itself) and otherwise only functional ``_foreach_*`` kernels that ran before it, into new
  tensors;
- each output has its operand's dtype, shape and strides (no type promotion or broadcast of ``self``).

AdamW's ``lerp`` decomposed fills a parameter-sized tensor with its weight (``full_like``) that one
``_foreach_addcmul`` reads as a factor. Such a fill, read only by elementwise ``_foreach_*`` kernels and
never as the operand they write, is held as its one value broadcast to its shape (a stride-0 view):
each element the kernel reads is the same value, so it computes the same bits, without the fill's
parameter-sized write and read.

The program is unchanged: the device runs the kernels the graph names, this only changes where the CPU
stores their values.
"""

from __future__ import annotations

import operator
from collections import Counter
from typing import Any, Mapping

import torch
import torch.fx

_ATEN = torch.ops.aten
_COPY = _ATEN.copy_.default
_FULL_LIKE = _ATEN.full_like.default


def in_place_overloads(gm: torch.fx.GraphModule) -> Mapping[str, Any]:
    """Node name -> the in-place overload to compute it with, for every node that may run in place."""
    graph = _Uses(gm)
    intermediates = {
        node.name: op for node in gm.graph.nodes
        if (op := _in_place_overload(node)) is not None and all(graph.dead_after(arg, node) for arg in node.args[0])
    }
    chosen = dict(intermediates)
    for node in gm.graph.nodes:
        op = _in_place_overload(node)
        if op is None or node.name in intermediates:
            continue
        if all(
            graph.dead_after(arg, node) or graph.overwritten_by_own_chain(arg, node, intermediates)
            for arg in node.args[0]
        ):
            chosen[node.name] = op
    return chosen


def broadcast_fills(gm: torch.fx.GraphModule) -> frozenset[str]:
    """The ``full_like`` nodes that every reader reads as a factor of an elementwise ``_foreach_*`` kernel,
    never as the list it writes: each may be held as its value broadcast to its shape."""
    return frozenset(
        node.name for node in gm.graph.nodes
        if node.target is _FULL_LIKE and not isinstance(node.args[1], torch.fx.Node) and node.users
        and all(_reads_as_factor(user, node) for user in node.users)
    )


def broadcast_fill(node: torch.fx.Node) -> torch.Tensor:
    """A ``full_like`` of :func:`broadcast_fills` computed as a stride-0 view of its fill value (the
    fill's dtype and shape, from the capture)."""
    out = node.meta["val"]
    return torch.full((), node.args[1], dtype=out.dtype).expand(out.shape)


def _reads_as_factor(user: torch.fx.Node, fill: torch.fx.Node) -> bool:
    return _functional_foreach(user) and not any(fill is element for element in user.args[0])


def _functional_foreach(node: torch.fx.Node) -> bool:
    """A functional ``_foreach_*`` aten op: it returns new tensors, one per element of its first operand."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or not node.args:
        return False
    name = target.overloadpacket.__name__
    return name.startswith("_foreach_") and not name.endswith("_")


def _in_place_overload(node: torch.fx.Node) -> Any:
    """The in-place twin of a functional ``_foreach_*`` aten overload whose outputs keep their operands'
    layout, else None."""
    if not _functional_foreach(node):
        return None
    target = node.target
    packet = getattr(_ATEN, f"{target.overloadpacket.__name__}_", None)
    op = getattr(packet, target._overloadname, None) if packet is not None else None
    selves, outs = node.args[0], node.meta.get("val")
    if op is None or not isinstance(selves, (list, tuple)) or not isinstance(outs, (list, tuple)):
        return None
    if len(selves) != len(outs) or not all(_same_layout(arg, out) for arg, out in zip(selves, outs)):
        return None
    return op


def _same_layout(arg: Any, out: Any) -> bool:
    value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return (
        isinstance(value, torch.Tensor) and isinstance(out, torch.Tensor) and value.dtype == out.dtype
        and value.shape == out.shape and value.stride() == out.stride()
    )


class _Uses:
    """Who reads what in one graph, counted once: an optimizer's ``_foreach_*`` kernels take lists of every
    parameter (BERT-base: 157), and asking these questions by scanning the lists again for each element is
    quadratic in the parameters."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.order = {node: position for position, node in enumerate(gm.graph.nodes)}
        self._elements: dict[torch.fx.Node, Counter[torch.fx.Node]] = {}
        self._others: dict[torch.fx.Node, set[torch.fx.Node]] = {}
        self._items: dict[torch.fx.Node, Counter[Any] | None] = {}

    def read_elsewhere(self, arg: torch.fx.Node, node: torch.fx.Node) -> bool:
        """Whether ``node`` reads ``arg`` besides as the one element of its first operand that it writes."""
        if node not in self._elements:
            others: list[torch.fx.Node] = []
            torch.fx.node.map_arg((node.args[1:], node.kwargs), others.append)
            self._elements[node] = Counter(element for element in node.args[0] if isinstance(element, torch.fx.Node))
            self._others[node] = set(others)
        return self._elements[node][arg] > 1 or arg in self._others[node]

    def _getitems(self, source: torch.fx.Node) -> Counter[Any] | None:
        """How many ``getitem`` nodes read each index of ``source``'s outputs; None when another kind of
        node reads its outputs too."""
        if source not in self._items:
            users = list(source.users)
            only_items = all(user.target is operator.getitem for user in users)
            self._items[source] = Counter(user.args[1] for user in users) if only_items else None
        return self._items[source]

    def dead_after(self, arg: Any, node: torch.fx.Node) -> bool:
        """A computed value (one element of an earlier op's list) that ``node`` alone reads."""
        if not isinstance(arg, torch.fx.Node) or arg.target is not operator.getitem or list(arg.users) != [node]:
            return False
        source, index = arg.args
        if not _functional_foreach(source):
            return False  # a view's element (split, unbind) shares memory that other nodes read
        items = self._getitems(source)
        return items is not None and items[index] == 1 and not self.read_elsewhere(arg, node)

    def overwritten_by_own_chain(self, arg: Any, node: torch.fx.Node, intermediates: Mapping[str, Any]) -> bool:
        """A graph input read by ``node``, by the one ``copy_`` that overwrites it with the value that ends
        the chain of in-place kernels starting at ``node`` (which then already is its memory), and otherwise
        only by functional ``_foreach_*`` kernels that run before ``node``: they have read it into new
        tensors by the time ``node`` writes it (AdamW's ``lerp`` decomposed, ``grad - exp_avg`` before
        ``exp_avg`` is updated)."""
        if not isinstance(arg, torch.fx.Node) or arg.op != "placeholder" or self.read_elsewhere(arg, node):
            return False
        copies = [user for user in arg.users if user.target is _COPY and user.args[0] is arg]
        earlier = [user for user in arg.users if user is not node and user not in copies]
        if len(copies) != 1 or not all(
            _functional_foreach(user) and self.order[user] < self.order[node] for user in earlier
        ):
            return False
        index = node.args[0].index(arg)
        return copies[0].args[1] is _chain_end(node, index, intermediates)


def _chain_end(node: torch.fx.Node, index: int, intermediates: Mapping[str, Any]) -> torch.fx.Node | None:
    """The value an in-place chain from ``node``'s ``index``-th output ends at: follow the output while
    the one node reading it computes in place on it."""
    while True:
        out = next((user for user in node.users if user.target is operator.getitem and user.args[1] == index), None)
        if out is None:
            return None
        readers = list(out.users)
        if any(reader.op == "output" for reader in readers):
            return None  # the caller gets the value: it must not be the input's memory
        if len(readers) != 1 or readers[0].name not in intermediates or not any(out is e for e in readers[0].args[0]):
            return out
        node, index = readers[0], next(i for i, element in enumerate(readers[0].args[0]) if element is out)
