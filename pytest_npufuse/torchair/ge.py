"""``torchair.ge``: TorchAir's GE graph-building API (converters and custom GE ops).

It builds GE graphs for the device compiler, which a CPU model has no use for. Importing it works, so
scripts that import it run; using any of its names is an error that names it. :class:`RefusedName` is
that behaviour for one name that must exist to be imported (``from torchair.ge_concrete_graph.ge_graph
import Tensor``): importing it works, calling it or reading from it is the same error.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ..errors import NotModeledAttributeError, NotModeledError

__all__: list[str] = []


def refusal(path: str) -> str:
    """The one message for a GE name."""
    return (
        f"{path} is not modeled by pytest-npufuse: GE graph construction (converters, custom GE ops) "
        "has no meaning on the CPU model; keep it out of the code path the tests run."
    )


class RefusedName:
    """A GE name that imports but refuses every use with :func:`refusal`."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotModeledError(refusal(self._path))

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotModeledAttributeError(refusal(f"{self._path}.{name}"))

    def __repr__(self) -> str:
        return f"<{self._path}: not modeled by pytest-npufuse>"


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotModeledAttributeError(refusal(f"torchair.ge.{name}"))
