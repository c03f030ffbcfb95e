"""The building blocks of TorchAir's ``CompilerConfig`` tree: option values and config nodes.

TorchAir's config is a tree of nodes (``config.debug.graph_dump.type``) whose leaves check what is
assigned to them: a value outside the option's list is a ValueError, an attribute the node does not have
is a ValueError naming every option (torchair: python/torchair/configs/_option_base.py). We keep those
errors and their wording, and add the nearest real name, since a misspelt option is otherwise silently
ignored by a script that only sets it.
"""

from __future__ import annotations

import difflib
import os
from typing import Any, Callable

from ...errors import ConfigError, ConfigPathError, UnknownOptionError


class OptionValue:
    """One leaf: a default, and the values it may take (None: any value the ``check`` accepts).

    ``raw`` is the value as set, which the model reads. ``value`` is what TorchAir's option returns:
    text (True and False as ``"1"`` and ``"0"``, numbers as their digits, None stays None), since
    TorchAir hands options to GE as strings; ``text=False`` options (dicts, int lists, functions) return
    the object itself, as TorchAir's do (torchair: python/torchair/configs/_option_base.py). npugraph_ex's
    options keep their booleans (:attr:`BOOLS_AS_TEXT` False in its subclass)."""

    BOOLS_AS_TEXT = True

    def __init__(
        self, default: Any, optional: list[Any] | None = None, check: Callable[[Any], str] | None = None, *, text: bool = True
    ) -> None:
        self.default = default
        self.optional = optional
        self._check = check
        self._text = text
        self.raw = default

    @property
    def value(self) -> Any:
        if not self._text or self.raw is None:
            return self.raw
        if isinstance(self.raw, bool):
            return ("1" if self.raw else "0") if self.BOOLS_AS_TEXT else self.raw
        return str(self.raw)

    @value.setter
    def value(self, value: Any) -> None:
        self.set(type(self).__name__, value)

    def set(self, path: str, value: Any) -> None:
        if self.optional is not None and value not in self.optional:
            raise ConfigError(
                f"{path} = {value!r}: Value {value!r} (type: {type(value)}) not in optional list {self.optional!r}.",
                argument=path
            )
        problem = self._check(value) if self._check is not None else ""
        if problem:
            raise ConfigError(f"{path} = {value!r}: {problem}", argument=path)
        self.raw = value

    def __bool__(self) -> bool:
        return bool(self.raw)

    def __eq__(self, other: object) -> bool:
        return self.raw == (other.raw if isinstance(other, OptionValue) else other)

    def __hash__(self) -> int:
        return hash(self.raw)

    def __repr__(self) -> str:
        return repr(self.raw)


class PathValue(OptionValue):
    """A path option whose file or directory must exist when set (TorchAir's ``MustExistedPathValue``,
    ``FileValue``, ``MustExistedFileAddr``): otherwise TorchAir's FileNotFoundError, in its words.
    ``kind`` is ``"dir"``, ``"file"`` or a suffix such as ``".json"``; ``required`` refuses None too."""

    def __init__(self, default: str | None, kind: str, *, required: bool = False) -> None:
        super().__init__(default)
        self._kind = kind
        self._required = required

    def set(self, path: str, value: Any) -> None:
        if value is None and not self._required:
            self.raw = value
            return
        if self._kind == "dir":
            exists, noun, what = value is not None and os.path.isdir(value), "dir", "a file directory"
        elif self._kind == "file":
            exists, noun, what = os.path.isfile(value), "file", "a file"
        else:
            if value == "":
                raise ConfigError(f"{path} = '': File path cannot be empty!")
            exists, noun, what = str(value).endswith(self._kind) and os.path.isfile(value), "file", f"'{self._kind}' file"
        if not exists:
            raise ConfigPathError(f"{path} = {value!r}: Please set legal {noun} path, {value} is not found or is not {what}!")
        self.raw = value


def int_range(low: int, high: int) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"Please set integer type, but got {type(value)}"
        return "" if low <= value <= high else f"Please set value in [{low}, {high}], {value} is out of range."

    return check


def of_type(*types: type) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        ok = value is None or isinstance(value, types)
        return "" if ok else f"value must be {' or '.join(t.__name__ for t in types)} or None, got {type(value)}"

    return check


def callable_or_none(value: Any) -> str:
    """TorchAir's ``CallableValue`` rule (its FX pass options): a function, or None."""
    return "" if value is None or callable(value) else f"value must be Callable or None, got {type(value)}"


class CallableValue(OptionValue):
    """TorchAir's option class for a function or None (its FX pass options); any other default or value
    is its TypeError."""

    def __init__(self, default: Callable[..., Any] | None = None) -> None:
        if callable_or_none(default):
            raise TypeError(f"default must be Callable or None, got {type(default)}")
        super().__init__(default, check=callable_or_none, text=False)


class ConfigNode:
    """A node of the config tree. Its options are fixed at construction; assigning a leaf checks the
    value, assigning or reading an unknown name raises :class:`UnknownOptionError` with the nearest one."""

    def __init__(self, node_path: str, /, **children: Any) -> None:
        object.__setattr__(self, "_node_path", node_path)
        object.__setattr__(self, "_children", dict(children))

    def _option_names(self) -> list[str]:
        return list(self._children)

    def _unknown(self, name: str) -> UnknownOptionError:
        options = self._option_names()
        near = difflib.get_close_matches(name, options, n=1)
        hint = f"; did you mean {self._node_path}.{near[0]}?" if near else ""
        return UnknownOptionError(
            f"{self._node_path} has no option {name}, all options {options}{hint}",
            argument=f"{self._node_path}.{name}",
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_node_path":
            raise AttributeError(name)
        children = object.__getattribute__(self, "_children")
        if name not in children:
            raise self._unknown(name)
        return children[name]

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._children:
            raise self._unknown(name)
        child = self._children[name]
        if isinstance(child, OptionValue):
            child.set(f"{self._node_path}.{name}", value)
        elif isinstance(child, ConfigNode):
            raise ConfigError(f"{self._node_path}.{name} is a group of options; set one of {list(child._children)}.")
        else:
            self._children[name] = value

    def leaves(self) -> dict[str, Any]:
        """Every option set to something other than its default, by dotted path (for reports)."""
        changed: dict[str, Any] = {}
        for name, child in self._children.items():
            if isinstance(child, ConfigNode):
                changed.update(child.leaves())
            elif isinstance(child, OptionValue) and child.raw != child.default:
                changed[f"{self._node_path}.{name}"] = child.raw
        return changed


class DebugDumpNode(ConfigNode):
    """TorchAir's debug dump nodes (its ``_DebugBase``: ``debug.graph_dump``, ``debug.data_dump``,
    ``debug.fx_summary``), whose folder is the option ``_path`` (None: the working directory); code sets
    it directly (``config.debug.data_dump._path = "dumps"``). ``graph_dump`` and ``data_dump`` also have
    ``path``, which reads ``_path`` and stores the real path of what is assigned (torchair:
    python/torchair/configs/debug_config.py)."""

    def __init__(self, node_path: str, /, *, with_path: bool, **children: Any) -> None:
        kind = {"type": children.pop("type")}
        super().__init__(node_path, **kind, _path=OptionValue(None), **children)
        object.__setattr__(self, "_with_path", with_path)

    def __getattr__(self, name: str) -> Any:
        if name == "path" and object.__getattribute__(self, "_with_path"):
            return self._children["_path"].raw
        return super().__getattr__(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "path" and self._with_path:
            self._children["_path"].set(f"{self._node_path}.path", os.path.realpath(value))
            return
        super().__setattr__(name, value)

    def _option_names(self) -> list[str]:
        """TorchAir lists ``path`` among the node's options, after the others."""
        return [*self._children, "path"] if self._with_path else list(self._children)
