"""``torchair._utils.graph_transform_observer``: where TorchAir's ``TORCH_COMPILE_DEBUG=1`` files go.

``DebugContext`` numbers the folder of each Dynamo graph (``torchair/model__<n>``, from 0, as TorchAir's
class counter does; code resets ``DebugContext.COUNT`` to -1 to start over) and ``GraphTransformObserver``
writes an aten graph's files as its FX passes run (:mod:`pytest_npufuse.torchair._debugdump`; torchair:
python/torchair/_utils/graph_transform_observer.py, commit fced8842).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from .._debugdump import GraphTransformObserver, debug_folder  # noqa: F401  (TorchAir's name, imported by code)

__all__: list[str] = []

PACKAGE = "torchair"


class DebugContext:
    """The number of the current Dynamo graph's debug folder, counted per process as TorchAir counts it."""

    COUNT: ClassVar[int] = -1

    @classmethod
    def next_path(cls) -> Path:
        """The folder of the next Dynamo graph (``model__<n>``)."""
        cls.COUNT += 1
        return cls.current_path()

    @classmethod
    def current_path(cls, phase: str = "forward") -> Path:
        """The current graph's folder (every phase of it shares one)."""
        return debug_folder(PACKAGE) / f"model__{cls.COUNT}"
