"""An op's ``torch.ops`` schema, derived from the annotated Python signature of its public wrapper.

As ``torch.library.infer_schema`` does, but for torch_npu's schemas, which that function cannot spell:
it maps every ``int`` to ``SymInt`` and has no fixed-size lists, no ``int?`` with a non-None default,
no ``Tensor(a!)`` alias names and no ``self`` argument. Here each annotation maps to one schema type:

==========================================  ===============================
annotation                                   schema type
==========================================  ===============================
``torch.Tensor``                             ``Tensor``
``int`` / ``SymInt`` (below)                 ``int`` / ``SymInt``
``float``, ``bool``, ``str``                 ``float``, ``bool``, ``str``
``torch.dtype``                              ``ScalarType``
``Optional[T]``                              ``T?``
``Sequence[T]`` / ``list[T]``                ``T[]``
``Annotated[Sequence[T], n]``                ``T[n]`` (a list of ``n`` values)
``tuple[T1, T2]`` (return)                   ``(T1, T2)``
``None`` (return)                            ``()``
==========================================  ===============================

A default is written as the schema writes it (``None``, ``True``, ``1e-06``, ``"BSH"``, ``[]``).
"""

from __future__ import annotations

import collections.abc
import inspect
import sys
import typing
from typing import Any, Callable, Collection, Optional, Sequence, Union

import torch

# A size that may be symbolic under ``dynamic=True`` (schema ``SymInt``): torch's own stubs spell it so.
SymInt = Union[int, torch.SymInt]

_SCALARS: dict[Any, str] = {
    torch.Tensor: "Tensor",
    int: "int",
    SymInt: "SymInt",
    float: "float",
    bool: "bool",
    str: "str",
    torch.dtype: "ScalarType",
}
_LISTS = (list, collections.abc.Sequence)


def _resolve(annotation: Any, fn: Callable[..., Any]) -> Any:
    """An annotation written as a string (``from __future__ import annotations``), evaluated in ``fn``'s module."""
    if isinstance(annotation, str):
        return eval(annotation, vars(sys.modules[fn.__module__]))  # noqa: S307 - the package's own annotations
    return annotation


def schema_type(annotation: Any) -> str:
    """The schema type of one parameter annotation (see the module's table)."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated and typing.get_origin(args[0]) in _LISTS and isinstance(args[1], int):
        return f"{schema_type(typing.get_args(args[0])[0])}[{args[1]}]"
    if origin is Union and type(None) in args:
        rest = [arg for arg in args if arg is not type(None)]
        return f"{schema_type(Union[tuple(rest)] if len(rest) > 1 else rest[0])}?"
    if origin in _LISTS:
        return f"{schema_type(args[0])}[]"
    raise TypeError(f"npufuse bug: no schema type for the annotation {annotation!r}")


def _default(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(_default(item) for item in value)}]"
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return str(value)


def return_types(annotation: Any) -> tuple[str, ...]:
    """The schema types of a return annotation: one per output (``None`` is no output)."""
    if annotation is None:
        return ()
    if typing.get_origin(annotation) is tuple:
        return tuple(schema_type(arg) for arg in typing.get_args(annotation))
    return (schema_type(annotation),)


def format_returns(types: Sequence[str], single: bool) -> str:
    """``Tensor`` for one output returned bare, else the parenthesised tuple (``()`` for none)."""
    return types[0] if single and len(types) == 1 else f"({', '.join(types)})"


def format_arguments(
    fn: Callable[..., Any], *, self_name: Optional[str] = None, mutated: Collection[str] = ()
) -> str:
    """``(Tensor x, *, float eps=1e-06)`` from ``fn``'s signature: ``self_name`` is the parameter torch_npu's
    schema calls ``self``; each ``mutated`` parameter is marked ``Tensor(a!)``, ``Tensor(b!)``, ... in order."""
    parts: list[str] = []
    aliases = iter("abcdefghijklmnopqrstuvwxyz")
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY and "*" not in parts:
            parts.append("*")
        kind = schema_type(_resolve(parameter.annotation, fn))
        if parameter.name in mutated:
            kind = kind.replace("Tensor", f"Tensor({next(aliases)}!)", 1)
        name = "self" if parameter.name == self_name else parameter.name
        default = "" if parameter.default is parameter.empty else f"={_default(parameter.default)}"
        parts.append(f"{kind} {name}{default}")
    return f"({', '.join(parts)})"


def annotated_returns(fn: Callable[..., Any]) -> tuple[tuple[str, ...], bool]:
    """The schema types ``fn``'s return annotation declares, and whether it is one output returned bare."""
    annotation = _resolve(inspect.signature(fn).return_annotation, fn)
    return return_types(annotation), annotation is not None and typing.get_origin(annotation) is not tuple
