"""``torchair.ge``: TorchAir's GE graph-building API (converters and custom GE ops).

It builds GE graphs for the device compiler, which a CPU model has no use for. Importing it works, so
scripts that import it run; using any of its names is an error that names it. :class:`RefusedName` is
that behaviour for one name that must exist to be imported (``from torchair.ge_concrete_graph.ge_graph
import Tensor``): importing it works, calling it or reading from it is the same error.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn

from ..errors import NotModeledAttributeError, NotModeledError
from ._internal import build_modules, refused_class, refused_function

__all__: list[str] = []
__path__: list[str] = []  # its private submodule ``torchair.ge._ge_graph`` (below) imports


def refusal(path: str) -> str:
    """The one message for a GE name."""
    return (
        f"{path} is not modeled by pytest-npufuse: GE graph construction (converters, custom GE ops) "
        "has no meaning on the CPU model; keep it out of the code path the tests run."
    )


def refuse_in(path: str) -> Callable[[str], NoReturn]:
    """A GE module's ``__getattr__`` for ``path``: a name off its list is a GE name too, refused by name
    (``ge_apis.Add`` inside a converter)."""

    def missing(name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotModeledAttributeError(refusal(f"{path}.{name}"), op=f"{path}.{name}")

    return missing


class RefusedName:
    """A GE name that imports but refuses every use with :func:`refusal`."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotModeledError(refusal(self._path), op=self._path)

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotModeledAttributeError(refusal(f"{self._path}.{name}"), op=f"{self._path}.{name}")

    def __repr__(self) -> str:
        return f"<{self._path}: not modeled by pytest-npufuse>"


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotModeledAttributeError(refusal(f"torchair.ge.{name}"), op=f"torchair.ge.{name}")


# torchair.ge._ge_graph: the GE graph TorchAir builds, whose names TorchAir's tests import at their top
# (torchair: python/torchair/ge/_ge_graph.py, commit fced8842).
_GE_GRAPH = "torchair.ge._ge_graph"
build_modules(
    __name__,
    {
        "_ge_graph": {
            **{name: refused_class(f"{_GE_GRAPH}.{name}", (), refusal) for name in ("GeGraph", "DataType", "Tensor", "TensorSpec")},
            **{
                name: refused_function(f"{_GE_GRAPH}.{name}", refusal)
                for name in (
                    "Const", "_ValueType", "_GeInputInfo", "_ge_dtype_to_ge_proto_dtype", "torch_type_to_ge_type",
                    "torch_dtype_value_to_ge_type", "dont_prune_me", "get_default_ge_graph",
                )
            },
        }
    },
    refuse_in,
)
