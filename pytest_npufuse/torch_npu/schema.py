"""torch_npu's op schemas, each stated once in ``schemas.toml`` and read here into what the registry builds.

As PyTorch's ``native_functions.yaml`` declares each ATen op once, ``schemas.toml`` holds one table per op:
torch_npu's schema of the public op in torch's schema syntax, with the argument names torch_npu registers
(its code generator renames op-plugin's ``self`` to ``input``, so the public callable and the registered
schema both say ``input``), and the document the CPU kernel follows. From that one statement come the public callable's ``inspect.signature``, each
call's bound :class:`~.registry.Arguments` record, the argument type checks and the registered
``torch.ops.npu`` schema. Each schema type has one Python annotation:

==========================================  ===============================
schema type                                  annotation
==========================================  ===============================
``Tensor``                                   ``torch.Tensor``
``int`` / ``SymInt``                         ``int`` / :data:`SymInt`
``float``, ``bool``, ``str``                 ``float``, ``bool``, ``str``
``ScalarType``                               ``torch.dtype``
``Scalar``                                   :data:`Scalar` (an int or a float)
``Layout``                                   ``torch.layout``
``Device``                                   :data:`Device` (a ``torch.device`` or its name)
``T?``                                       ``Optional[T]``
``T[]``                                      ``Sequence[T]`` (a returned list: ``list[T]``)
``T[n]``                                     ``Annotated[Sequence[T], n]`` (a list of ``n`` values)
``(T1, T2)`` / ``()`` (returns)              ``tuple[T1, T2]`` / ``None``
==========================================  ===============================

A returned type may carry a name (``(Tensor values, Tensor indices)``); the registered schema keeps it.
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Collection, Mapping, Optional, Sequence, Union

import torch

from ..errors import ProfileError
from ..files.toml import read_toml

# A size that may be symbolic under ``dynamic=True`` (schema ``SymInt``): torch's own stubs spell it so.
SymInt = Union[int, torch.SymInt]

# A number (schema ``Scalar``), e.g. npu_one_hot's on_value: torch's own stubs spell it ``Union[int, float]``.
Scalar = Union[int, float]

# A device (schema ``Device``, a factory's ``device=``): torch's own stubs take a torch.device or its name.
Device = Union[torch.device, str]

SCHEMAS_FILE = Path(__file__).parent / "schemas.toml"

_SCALARS: dict[str, Any] = {
    "Tensor": torch.Tensor,
    "int": int,
    "SymInt": SymInt,
    "float": float,
    "bool": bool,
    "str": str,
    "ScalarType": torch.dtype,
    "Scalar": Scalar,
    "Layout": torch.layout,
    "Device": Device,
}
_SCHEMA = re.compile(r"(?P<name>\w+)\((?P<arguments>.*)\) -> (?P<returns>.+)")


def annotation(schema_type: str, *, returned: bool = False) -> Any:
    """The Python annotation of one schema type (see the module's table); a returned type's name is dropped."""
    if returned:
        schema_type = schema_type.split()[0]
    if schema_type.endswith("?"):
        return Optional[annotation(schema_type[:-1], returned=returned)]
    if schema_type.endswith("]"):
        element, _, size = schema_type[:-1].partition("[")
        if returned:
            return list[annotation(element)]
        listed = Sequence[annotation(element)]
        return Annotated[listed, int(size)] if size else listed
    return _SCALARS[schema_type]


def _split(text: str) -> list[str]:
    """The comma-separated items of an argument list, commas inside ``[...]`` / ``(...)`` kept."""
    items, depth, start = [], 0, 0
    for position, char in enumerate(text):
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:position].strip())
            start = position + 1
    rest = text[start:].strip()
    return [*items, rest] if rest else items


@dataclass(frozen=True)
class Parameter:
    """One argument of an op: its name and type, and its default (as written and as a value)."""

    name: str
    type: str
    default_text: Optional[str]
    default: Any
    keyword_only: bool

    def formatted(self, mutated_alias: str = "") -> str:
        """The argument as the schema writes it; ``mutated_alias`` marks its tensor ``Tensor(a!)``."""
        kind = self.type.replace("Tensor", f"Tensor({mutated_alias}!)", 1) if mutated_alias else self.type
        default = "" if self.default_text is None else f"={self.default_text}"
        return f"{kind} {self.name}{default}"


def format_returns(types: Sequence[str], single: bool) -> str:
    """``Tensor`` for one output returned bare, else the parenthesised tuple (``()`` for none)."""
    return types[0] if single and len(types) == 1 else f"({', '.join(types)})"


@dataclass(frozen=True)
class Overload:
    """Another schema torch_npu declares under the op's name (op-plugin's ``npu_grouped_matmul.List`` takes
    ``int[]? group_list`` where the default takes a tensor): its overload name, its schema as written, and
    its parameters, which are among the op's own (the op's checks, meta function and kernel take the
    op's record either way)."""

    name: str
    schema: str
    parameters: tuple[Parameter, ...]


@dataclass(frozen=True)
class Declaration:
    """One op as ``schemas.toml`` declares it."""

    name: str
    parameters: tuple[Parameter, ...]
    returns: tuple[str, ...]
    single: bool  # one output, returned bare (not a one-element tuple)
    source: str
    overloads: tuple[Overload, ...] = ()

    def arguments(self, mutated: Collection[str] = ()) -> str:
        """``(Tensor input, *, float eps=1e-06)``; each ``mutated`` parameter is marked ``Tensor(a!)``,
        ``Tensor(b!)``, ... in order."""
        parts: list[str] = []
        aliases = iter("abcdefghijklmnopqrstuvwxyz")
        for parameter in self.parameters:
            if parameter.keyword_only and "*" not in parts:
                parts.append("*")
            parts.append(parameter.formatted(next(aliases) if parameter.name in mutated else ""))
        return f"({', '.join(parts)})"

    @property
    def schema(self) -> str:
        return f"{self.name}{self.arguments()} -> {format_returns(self.returns, self.single)}"

    def signature(self) -> inspect.Signature:
        """The public callable's signature: torch_npu's Python names, kinds, defaults and annotations."""
        parameters = [
            inspect.Parameter(
                parameter.name,
                inspect.Parameter.KEYWORD_ONLY if parameter.keyword_only else inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=parameter.default,
                annotation=annotation(parameter.type),
            )
            for parameter in self.parameters
        ]
        if not self.returns:
            returned: Any = None
        elif self.single:
            returned = annotation(self.returns[0], returned=True)
        else:
            returned = tuple[tuple(annotation(kind, returned=True) for kind in self.returns)]
        return inspect.Signature(parameters, return_annotation=returned)


def _immutable(default: Any) -> Any:
    """A list default as a tuple: a signature's default is shared by every call, so it must not be mutable."""
    return tuple(default) if isinstance(default, list) else default


def _parameters(schema: str) -> tuple[Parameter, ...]:
    """The parameters of ``schema``; torch's own parser reads the default values."""
    match = _SCHEMA.fullmatch(schema)
    parsed = torch._C.parse_schema(schema)
    written = [item for item in _split(match["arguments"]) if item != "*"]
    parameters = []
    for text, argument in zip(written, parsed.arguments, strict=True):
        declared, _, default_text = text.partition("=")
        kind, name = declared.split()
        parameters.append(Parameter(
            name=name,
            type=kind,
            default_text=default_text or None,
            default=_immutable(argument.default_value) if argument.has_default_value() else inspect.Parameter.empty,
            keyword_only=argument.kwarg_only,
        ))
    return tuple(parameters)


def _overload(name: str, schema: str, known: Sequence[Parameter]) -> Overload:
    """One entry of a table's ``overloads``: ``<name>.<Overload>(<arguments>) -> <returns>``, whose every
    parameter must be one of the op's own (``known``), as the op's record holds those, or a positional one
    in the place of the op's positional parameter there (``npu_format_cast.Tensor``'s ``Tensor dst`` where
    the op takes ``int acl_format``): the record holds its value under the op's name."""
    head, dot, rest = schema.partition(".")
    overload = rest.partition("(")[0]
    plain = f"{name}{rest[len(overload):]}"
    if head != name or not dot or not overload.isidentifier() or _SCHEMA.fullmatch(plain) is None:
        raise ProfileError(
            f"{SCHEMAS_FILE.name} [{name}]: an overload must read '{name}.<Overload>(<arguments>) -> <returns>'"
        )
    parameters = _parameters(plain)
    names = {parameter.name for parameter in known}
    positional = [parameter for parameter in known if not parameter.keyword_only]
    unknown = [
        parameter.name for index, parameter in enumerate(parameters)
        if parameter.name not in names
        and (parameter.keyword_only or index >= len(positional) or positional[index].keyword_only)
    ]
    if unknown:
        raise ProfileError(f"{SCHEMAS_FILE.name} [{name}]: overload {overload} has parameters {unknown} the op lacks")
    return Overload(overload, schema, parameters)


def parse(name: str, table: Mapping[str, Any]) -> Declaration:
    """The declaration of ``name`` from its table (``schema``, ``source`` and ``overloads``, torch_npu's
    other schemas of the op)."""
    match = _SCHEMA.fullmatch(table["schema"])
    if match is None or match["name"] != name:
        raise ProfileError(f"{SCHEMAS_FILE.name} [{name}]: schema must read '{name}(<arguments>) -> <returns>'")
    returns = match["returns"]
    single = not returns.startswith("(")
    types = (returns,) if single else tuple(_split(returns[1:-1]))
    parameters = _parameters(table["schema"])
    overloads = tuple(_overload(name, text, parameters) for text in table.get("overloads", ()))
    return Declaration(name, parameters, types, single, table["source"], overloads)


@functools.cache
def declarations() -> Mapping[str, Declaration]:
    """Every op of ``schemas.toml``, by its public name."""
    return MappingProxyType({name: parse(name, table) for name, table in read_toml(SCHEMAS_FILE).items()})
