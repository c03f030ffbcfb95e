"""``torchair.ops.npu_print``: print tensors from inside a compiled graph, in eager code too.

A ``print()`` inside a compiled function breaks the graph; ``npu_print(*args, summarize_size=3,
tensor_detail=False)`` is instead one side-effecting op, ``air::print``, that stays in the graph and prints
when the graph runs (on the device, GE lowers it to StringFormat + PrintV2 on AI CPU; torchair:
python/torchair/ops/_print_ops.py). The line joins the arguments with spaces; each tensor is printed like
numpy with ``summarize_size`` leading and trailing items per dim (``-1``: all), values as integers when
whole and else with 9 significant digits; ``tensor_detail=True`` prints ``tensor(values, shape=[..],
dtype=...)``. The checks and their errors are TorchAir's.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.fx.node import has_side_effect

from ..errors import OpArgumentError, OpTypeError

_LIB = torch.library.Library("air", "FRAGMENT")
_LIB.define("print(Tensor[] tensors, str msg_format, str placeholder, int summarize_size, bool tensor_detail) -> ()")

_PRINTABLE = (torch.Tensor, str, bool, float, int)


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.9g}"


def _summary(values: Any, size: int, depth: int = 0) -> str:
    """One nested list of numbers as numpy prints it, ``size`` items from each end of every dim."""
    if not isinstance(values, list):
        return _number(float(values))
    cut = size > 0 and len(values) > 2 * size
    kept = values[:size] + [None] + values[-size:] if cut else values
    parts = ["..." if item is None else _summary(item, size, depth + 1) for item in kept]
    inner_is_list = bool(values) and isinstance(values[0], list)
    return "[" + ("\n " if inner_is_list else " ").join(parts) + "]"


def summarize(tensor: torch.Tensor, summarize_size: int) -> str:
    """``tensor``'s values as ``npu_print`` prints them."""
    values = tensor.detach().to(torch.float64 if tensor.is_floating_point() else torch.int64).tolist()
    return _summary(values, summarize_size)


def _print_kernel(
    tensors: Sequence[torch.Tensor], msg_format: str, placeholder: str, summarize_size: int, tensor_detail: bool
) -> None:
    text = msg_format
    for tensor in tensors:
        text = text.replace(placeholder, summarize(tensor, summarize_size), 1)
        if tensor_detail:
            text = text.replace(placeholder, str(list(tensor.shape)), 1)
    print(text, flush=True)


def _print_fake(
    tensors: Sequence[torch.Tensor], msg_format: str, placeholder: str, summarize_size: int, tensor_detail: bool
) -> None:
    """Printing makes no tensor."""


_LIB.impl("print", _print_kernel, "CompositeExplicitAutograd")
torch.library.register_fake("air::print", _print_fake, lib=_LIB)
has_side_effect(torch.ops.air.print.default)


def _check(args: Sequence[Any], summarize_size: Any, tensor_detail: Any) -> None:
    for position, arg in enumerate(args):
        if not isinstance(arg, _PRINTABLE):
            raise OpTypeError(
                "position arguments of npu_print() must be torch.Tensor or basic type in (str, bool, float, int), "
                f"but got '{type(arg).__name__}' at position {position}"
            )
    if not any(isinstance(arg, torch.Tensor) for arg in args):
        raise OpArgumentError("npu_print() requires at least one tensor input", op="npu_print")
    if not isinstance(summarize_size, int) or isinstance(summarize_size, bool):
        raise OpTypeError(
            f"summarize_size must be int, got {type(summarize_size).__name__}",
            op="npu_print", argument="summarize_size",
        )
    if summarize_size < -1 or summarize_size == 0:
        raise OpArgumentError(
            f"summarize_size must be positive or -1 for all elements, got {summarize_size}",
            op="npu_print", argument="summarize_size",
        )
    if not isinstance(tensor_detail, bool):
        raise OpTypeError(
            f"tensor_detail must be bool, got {type(tensor_detail).__name__}",
            op="npu_print", argument="tensor_detail",
        )


def npu_print(*args: Any, summarize_size: int = 3, tensor_detail: bool = False) -> None:
    """Print ``args`` (tensors and str/bool/float/int) joined by spaces when the graph runs."""
    _check(args, summarize_size, tensor_detail)
    plain = " ".join("[]" if isinstance(arg, torch.Tensor) else str(arg) for arg in args)
    placeholder, index = "{}", 0
    while placeholder in plain:  # a placeholder that no argument's own text contains
        placeholder, index = f"{{{index}}}", index + 1
    pieces = [
        (f"tensor({placeholder}, shape={placeholder}, dtype={arg.dtype})" if tensor_detail else placeholder)
        if isinstance(arg, torch.Tensor) else str(arg)
        for arg in args
    ]
    tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
    torch.ops.air.print(tensors, " ".join(pieces), placeholder, summarize_size, tensor_detail)
