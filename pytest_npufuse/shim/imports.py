"""``import torchair`` / ``import torch_npu`` resolve to pytest-npufuse's modules.

A meta-path finder, first on ``sys.meta_path``, answers for the two package names and every submodule
under them (``torchair.configs.compiler_config``, ``torch_npu.npu``, ...) by importing our module of the
same path and handing it over, so ``torchair.scope`` and ``pytest_npufuse.torchair.scope`` are one object.
A submodule we do not have is a ModuleNotFoundError that says so.

While a module is handed over under the package's name, its public functions and classes report that
name as their ``__module__`` (``torchair.scope.super_kernel.__module__ == "torchair.scope"``), as they do
in the real package; :meth:`AliasFinder.remove_aliases` gives them their own back.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import inspect
import sys
from types import ModuleType
from typing import Callable, Mapping, Sequence


def _public_names(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    return list(names) if names is not None else [name for name in vars(module) if not name.startswith("_")]


def present_as(module: ModuleType, name: str) -> list[Callable[[], None]]:
    """Give the public functions and classes defined in ``module`` the ``__module__`` ``name``; returns
    the undo of each change. A name an earlier shim left presented (one whose undo was lost with its
    finder, e.g. when pytester restored ``sys.meta_path``) is taken over, so this undo restores it."""
    undo: list[Callable[[], None]] = []
    for attribute in _public_names(module):
        value = vars(module).get(attribute)
        if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ in (module.__name__, name):
            value.__module__ = name
            undo.append(lambda value=value, own=module.__name__: setattr(value, "__module__", own))
    return undo


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str, finder: "AliasFinder") -> None:
        self.target = target
        self.finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        try:
            module = importlib.import_module(self.target)
        except ModuleNotFoundError as exc:
            if exc.name is None or not self.target.startswith(exc.name):
                raise
            raise ModuleNotFoundError(
                f"No module named {spec.name!r}: pytest-npufuse's shim does not model {spec.name} "
                f"(it maps {spec.name.partition('.')[0]} to {self.target.rsplit('.', 1)[0]}).",
                name=spec.name,
            ) from None
        self.finder.present_loaded()
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module is ours and already executed."""


class AliasFinder(importlib.abc.MetaPathFinder):
    """Maps each root name (``torchair``) and its submodules to a module path of ours; ``exact`` names
    a module elsewhere for one full name (``torch_npu.npu`` is our ``torch.npu``)."""

    def __init__(self, roots: Mapping[str, str], exact: Mapping[str, str]) -> None:
        self.roots = dict(roots)
        self.exact = dict(exact)
        self.undo: list[Callable[[], None]] = []
        self.presented: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        root, _, rest = fullname.partition(".")
        if root not in self.roots:
            return None
        ours = self.exact.get(fullname) or self.roots[root] + (f".{rest}" if rest else "")
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(ours, self))

    def present_loaded(self) -> None:
        """Present every loaded module of ours under its package's name (``pytest_npufuse.torchair.scope``
        as ``torchair.scope``), once each: the package imports its submodules itself, not via the alias."""
        for alias, target in self.roots.items():
            for name, module in list(sys.modules.items()):
                if name in self.presented or not (name == target or name.startswith(f"{target}.")):
                    continue
                self.presented.add(name)
                self.undo += present_as(module, alias + name[len(target):])

    def remove_aliases(self) -> None:
        """Forget the imported aliases, so a later import finds a real package again, and give the
        presented names their own ``__module__`` back."""
        while self.undo:
            self.undo.pop()()
        self.presented.clear()
        for name in [n for n in sys.modules if n.partition(".")[0] in self.roots]:
            del sys.modules[name]


class _ThenLoader(importlib.abc.Loader):
    """Loads a module with its own loader, then calls ``then`` once the module has run."""

    def __init__(self, loader: importlib.abc.Loader, then: Callable[[], None]) -> None:
        self.loader = loader
        self.then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.then()


class PostImportHook(importlib.abc.MetaPathFinder):
    """Calls ``then`` right after the module ``name`` is first imported (and removes itself)."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        self.remove()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenLoader(spec.loader, self.then)
        return spec

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
