"""Bit-exact comparison of two runs' outputs.

``torch.equal`` fails on NaN and ``assert_close`` treats 0.0 and -0.0 as equal and ignores NaN payloads;
a SuperKernel must change none of the bits, so we compare the raw bits of every output.
"""

from __future__ import annotations

import dataclasses
import enum
import numbers
from collections.abc import Iterator
from typing import Any, Sequence

import torch
import torch.utils._pytree as pytree

from ..errors import CaptureError
from ..report.findings import Mismatch

_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits as integers of the same width (bool and complex included)."""
    flat = tensor.detach().contiguous()
    if flat.dtype == torch.bool:
        return flat.view(torch.uint8)
    if flat.is_complex():
        flat = torch.view_as_real(flat)
    return flat.view(_SAME_WIDTH_INT[flat.element_size()])


def _show(tensor: torch.Tensor, index: tuple[int, ...]) -> str:
    value = tensor[index]
    if value.is_complex():
        return repr(value.item())
    width = value.element_size()
    raw = _bits(value.reshape(1))[0].item() % (1 << (8 * width))
    return f"{value.item()!r} (bits 0x{raw:0{2 * width}x})"


# Leaves compared by type and repr besides tensors: values whose repr is the value.
_PLAIN = (type(None), bool, numbers.Number, str, bytes, enum.Enum, torch.dtype, torch.device, torch.layout,
          torch.memory_format, torch.SymInt, torch.SymFloat, torch.SymBool, type(Ellipsis))


def named_leaves(outputs: Any, what: str = "the model") -> tuple[list[str], list[Any]]:
    """Flatten outputs of any structure torch's pytree knows (tuples, lists, dicts, namedtuples, and
    registered types) plus dataclasses, and name each leaf by its path, e.g. ``output[0].hidden``.

    A generator or iterator is refused: comparing it would compare nothing, since running it would
    consume it. So is a leaf of any other unknown type, whose repr may hide its tensors."""
    names: list[str] = []
    leaves: list[Any] = []
    _flatten("output", outputs, what, names, leaves)
    return names, leaves


def _flatten(prefix: str, value: Any, what: str, names: list[str], leaves: list[Any]) -> None:
    for path, leaf in pytree.tree_flatten_with_path(value)[0]:
        name = prefix + pytree.keystr(path)
        if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            for field in dataclasses.fields(leaf):
                _flatten(f"{name}.{field.name}", getattr(leaf, field.name), what, names, leaves)
        elif isinstance(leaf, Iterator):
            raise CaptureError(
                f"{what} returns an iterator ({type(leaf).__name__}) at {name}: a generator or iterator cannot be "
                "compared without consuming it, so no output would be checked; return a tuple or list "
                "(e.g. tuple(...)) of its tensors."
            )
        elif isinstance(leaf, (torch.Tensor, *_PLAIN)):
            names.append(name)
            leaves.append(leaf)
        else:
            raise CaptureError(
                f"{what} returns a {type(leaf).__module__}.{type(leaf).__qualname__} at {name}, which pytest-npufuse "
                "cannot look inside; return its tensors in tuples, lists, dicts, namedtuples or dataclasses, or "
                "register the type with torch.utils._pytree.register_pytree_node."
            )


def compare_output(name: str, baseline: Any, variant: Any) -> Mismatch | None:
    """The first bit difference between two values of one output, or None when identical.

    One object holds the same bits as itself: a VARIANT whose values are its BASELINE's (no racy read,
    so it computed the same kernels on the same inputs) hands the very same tensors, and reading a
    training step's every gradient and updated parameter twice to find that out cost seconds."""
    if baseline is variant:
        return None
    if not isinstance(baseline, torch.Tensor) or not isinstance(variant, torch.Tensor):
        # Plain values (ints, floats, None, or a tensor on one side only) compare by type and repr, which
        # is exact for floats (nan equals nan) and never asks a tensor for its truth value.
        same = type(baseline) is type(variant) and repr(baseline) == repr(variant)
        return None if same else Mismatch(name, None, repr(baseline), repr(variant), 1)
    if baseline.dtype != variant.dtype or baseline.shape != variant.shape:
        return Mismatch(
            name, None, f"{baseline.dtype} {list(baseline.shape)}", f"{variant.dtype} {list(variant.shape)}", 1
        )
    differ = _bits(baseline) != _bits(variant)
    if baseline.is_complex():
        differ = differ.any(dim=-1)
    count = int(differ.sum())
    if count == 0:
        return None
    index = tuple(int(i) for i in differ.nonzero()[0])
    return Mismatch(name, index, _show(baseline, index), _show(variant, index), count)


def compare_outputs(names: Sequence[str], baseline: Sequence[Any], variant: Sequence[Any]) -> tuple[Mismatch, ...]:
    """Every output that differs, in output order."""
    found = (compare_output(name, b, v) for name, b, v in zip(names, baseline, variant))
    return tuple(m for m in found if m is not None)
