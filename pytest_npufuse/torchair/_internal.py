"""TorchAir's private machinery that code imports at its top without using it: importable, refused on use.

TorchAir's own tests (and code that subclasses or wraps TorchAir) import private names at a module's top
(``torchair.inference._cache_compiler.CompiledModel``, ``torchair._acl_concrete_graph.fx2acl_converter
.AclConcreteGraph``, ``torchair.core._backend.TorchNpuGraph``) and save and restore their methods around
each test (``self.call_bak = AclConcreteGraph.__call__`` ... ``AclConcreteGraph.__call__ = self.call_bak``).
The model has no such objects: it compiles each graph into its own program. So each such name is a class
or function of that name whose methods can be read and put back, and constructing it or calling any of
them is a :class:`~pytest_npufuse.errors.NotModeledError` naming it. Where the model does have the
behaviour a private name stands for (``set_dim_gears`` in ``_gear_utils``, the FX passes of
``npu_fx_compiler._optimize_fx``), the module holds the model's own object instead.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable, Iterable, Mapping, NoReturn

from ..errors import NotModeledError


def machinery(path: str) -> str:
    """The one message for a private TorchAir name the model does not reproduce."""
    return (
        f"{path} is TorchAir's internal machinery, which pytest-npufuse does not reproduce: it models the "
        "compiled graph itself (compile with torchair.get_npu_backend, npugraph_ex or cache_compile instead)."
    )


def refused_function(path: str, message: Callable[[str], str] = machinery) -> Callable[..., NoReturn]:
    """A function named after ``path`` that raises ``message(path)`` when called."""
    name = path.rpartition(".")[2]

    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotModeledError(message(path), op=path)

    refused.__name__ = refused.__qualname__ = name
    refused.__doc__ = message(path)
    return refused


def refused_class(path: str, methods: Iterable[str], message: Callable[[str], str] = machinery) -> type:
    """A class named after ``path`` with ``methods`` (and ``__init__``), each refused when called; the
    methods exist, so code that saves one and puts it back (a test's setUp and tearDown) runs."""
    name = path.rpartition(".")[2]
    namespace: dict[str, Any] = {"__doc__": message(path), "__module__": path.rpartition(".")[0]}
    for method in ("__init__", *methods):
        namespace[method] = refused_function(f"{path}.{method}", message)
    return type(name, (), namespace)


def build_modules(
    package: str, tree: Mapping[str, Mapping[str, Any]], missing: Callable[[str], Callable[[str], Any]] | None = None
) -> None:
    """Make each ``package.<relative>`` of ``tree`` a module holding its names, registered in
    ``sys.modules`` and on its parent, so ``from <package>.<relative> import <name>`` works; a relative
    path's parents come before it in ``tree``. ``missing(path)``, when given, is each module's
    ``__getattr__``, ``path`` as user code spells it (GE's modules refuse every name off their list by name, as ``torchair.ge`` does)."""
    for relative, names in tree.items():
        full = f"{package}.{relative}"
        module = types.ModuleType(full, f"{full}: TorchAir's private names, see {__name__}.")
        module.__path__ = []  # type: ignore[attr-defined]  # a package, so deeper paths import
        module.__all__ = []  # type: ignore[attr-defined]  # private: TorchAir's own modules export nothing
        if missing is not None:
            module.__getattr__ = missing(full.partition(".")[2])  # type: ignore[method-assign]
        for name, value in names.items():
            setattr(module, name, value)
        sys.modules[full] = module
        parent, _, leaf = relative.rpartition(".")
        setattr(sys.modules[f"{package}.{parent}"] if parent else sys.modules[package], leaf, module)
