"""GE's size computation in a dynamic-shape graph, as the kernels it adds to the execution graph.

docs/feature-docs.md#host-scheduling: in a dynamic-shape graph GE reads every symbolic size from its input's shape
(Shape, then Gather), runs size arithmetic as small int64 ops and packs the sizes an op is given into a shape tensor
(Pack, Concat). They are the "Pack, Gather, Concat" small-shape ops (650+ in LLaMA2) that GE computes on the host
instead of launching them. An AOT graph of ``torch.compile(dynamic=True)`` shows the same computation as
symbolic-size placeholders, SymInt arithmetic nodes and ops whose size arguments hold them; capture turns
each into the ``ge::*`` catalog entries (``ge_shape``: they exist only under GE host scheduling).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

SIZE = "ge::gather"
SHAPE = "ge::shape"
PACK = "ge::pack"
ARITHMETIC = "ge::size_arith"


def symbolic(value: Any) -> bool:
    """A size the graph only knows at run time."""
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def is_symbolic(node: torch.fx.Node) -> bool:
    return symbolic(node.meta.get("val"))


def _symbolic_dim(dim: Any) -> bool:
    return isinstance(dim, torch.SymInt) and bool(dim.node.expr.free_symbols)


def sized_at_run_time(node: torch.fx.Node) -> bool:
    """Whether a call's input shapes or scalar arguments hold a size the graph only knows at run time: then
    what GE tiles the call on changes with that size (a decode step's KV length)."""
    for arg in leaves((node.args, node.kwargs)):
        value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg
        if isinstance(value, torch.Tensor) and any(_symbolic_dim(dim) for dim in value.shape):
            return True
        if _symbolic_dim(value):
            return True
    return False


# Checks torch puts in a graph on a data-dependent size (nonzero's row count lies within its input's numel).
_SIZE_CHECKS = frozenset({
    torch.ops.aten._assert_scalar.default, torch.ops.aten.sym_constrain_range_for_size.default,
    torch.ops.aten.sym_constrain_range.default,
})


def is_size_check(node: torch.fx.Node) -> bool:
    """A check of a size the host read back: evaluated on the host, no device kernel."""
    return node.target in _SIZE_CHECKS


def leaves(args: Any) -> Iterator[Any]:
    """Every value in a node's nested arguments (lists, tuples and dicts opened), in order."""
    if isinstance(args, (list, tuple)):
        for arg in args:
            yield from leaves(arg)
    elif isinstance(args, dict):
        for arg in args.values():
            yield from leaves(arg)
    else:
        yield args


def size_arguments(node: torch.fx.Node) -> list[str]:
    """The symbolic sizes among ``node``'s arguments, each once, in argument order."""
    names = [
        arg.name for arg in leaves((node.args, node.kwargs)) if isinstance(arg, torch.fx.Node) and is_symbolic(arg)
    ]
    return list(dict.fromkeys(names))


def packed_length(node: torch.fx.Node) -> int:
    """How many sizes the shape tensor of ``node`` holds: the length of the size list that carries a
    symbolic size (``view(x, [s0, 4096])`` packs two), else the symbolic arguments themselves."""
    for arg in (*node.args, *node.kwargs.values()):
        if isinstance(arg, (list, tuple)) and any(
            isinstance(item, torch.fx.Node) and is_symbolic(item) for item in arg
        ):
            return len(arg)
    return max(1, len(size_arguments(node)))
