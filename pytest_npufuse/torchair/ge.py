"""``torchair.ge``: TorchAir's GE graph-building API (converters and custom GE ops).

It builds GE graphs for the device compiler, which a CPU model has no use for. Importing it works, so
scripts that import it run; using any of its names is an error that names it.
"""

from __future__ import annotations

from typing import Any

from ..errors import NotModeledError

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotModeledError(
        f"torchair.ge.{name} is not modeled by pytest-npufuse: GE graph construction (converters, custom GE ops) "
        "has no meaning on the CPU model; keep it out of the code path the tests run."
    )
