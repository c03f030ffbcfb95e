"""Symbolic input sizes of a graph compiled with ``dynamic=True``: read once per graph, valued per call."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import sympy
import torch
import torch.fx

InputSymbol = tuple[int, "int | None", sympy.Expr]  # (input position, dim or None for an int input, size)


def input_symbols(gm: torch.fx.GraphModule) -> tuple[InputSymbol, ...]:
    """(input position, dim or None for a symbolic int input, its size expression) of every input
    size that is symbolic: what ``torch.compile(dynamic=True)`` leaves open until a call. Read once per
    graph; each call then only indexes its arguments (:func:`input_sizes`)."""
    symbols: list[InputSymbol] = []
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    for position, node in enumerate(placeholders):
        value = node.meta.get("val")
        if isinstance(value, torch.SymInt):
            symbols.append((position, None, value.node.expr))
        elif isinstance(value, torch.Tensor):
            symbols += [(position, dim, size.node.expr) for dim, size in enumerate(value.shape) if isinstance(size, torch.SymInt)]
    return tuple(symbols)


def is_dynamic(symbols: Sequence[InputSymbol]) -> bool:
    """Whether a graph with these input sizes was compiled for symbolic sizes, so each call has its own costs."""
    return any(expr.free_symbols for _, _, expr in symbols)


def input_sizes(symbols: Sequence[InputSymbol], args: Sequence[Any]) -> dict[sympy.Symbol, sympy.Integer]:
    """The value of each symbolic input size in one call of a dynamic-shape graph, read from the
    call's arguments, as the device reads the shapes of the tensors it is launched with."""
    sizes: dict[sympy.Symbol, sympy.Integer] = {}
    for position, dim, expr in symbols:
        if isinstance(expr, sympy.Symbol):
            arg = args[position]
            sizes[expr] = sympy.Integer(int(arg) if dim is None else arg.shape[dim])
    return sizes


GEARS_ATTRIBUTE = "dim_gears"  # where TorchAir keeps a tensor's gears, read again when the graph is called


def gears_of(value: Any) -> Mapping[int, tuple[int, ...]] | None:
    """The gears ``torchair.inference.set_dim_gears`` gave a tensor, if any."""
    return getattr(value, GEARS_ATTRIBUTE, None) if isinstance(value, torch.Tensor) else None
