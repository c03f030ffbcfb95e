"""``npugraph_ex._utils.graph_transform_observer``: where npugraph_ex's ``TORCH_COMPILE_DEBUG=1`` files go.

As TorchAir's (:mod:`pytest_npufuse.torchair._utils.graph_transform_observer`), under the folder
``npugraph_ex``, with two counts: ``model_cnt`` numbers the Dynamo graphs (``model__<n>``) and
``compile_fx_cnt`` the graphs compiled by ``compile_fx`` (``compile__<n>``); code resets both to -1 to
start over (torchair: npugraph_ex/npugraph_ex/_utils/graph_transform_observer.py, commit fced8842).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from ...torchair._debugdump import GraphTransformObserver, debug_enabled, debug_folder  # noqa: F401  (npugraph_ex's name)

__all__: list[str] = []

PACKAGE = "npugraph_ex"
COMPILE_FX = "compile_fx"


class DebugContext:
    """The numbers of the current debug folders, counted per process as npugraph_ex counts them."""

    model_cnt: ClassVar[int] = -1
    compile_fx_cnt: ClassVar[int] = -1

    @classmethod
    def next_path(cls) -> Path:
        """The folder of the next Dynamo graph (``model__<n>``)."""
        cls.model_cnt += 1
        return cls.current_path()

    @classmethod
    def begin_compile_fx(cls) -> None:
        """A ``compile_fx`` call with ``TORCH_COMPILE_DEBUG=1`` starts the next ``compile__<n>``."""
        if debug_enabled():
            cls.compile_fx_cnt += 1

    @classmethod
    def current_path(cls, phase: str = "forward") -> Path:
        """The folder of ``phase``'s graph: ``compile__<n>`` for ``compile_fx``, else ``model__<n>``."""
        if phase == COMPILE_FX:
            return debug_folder(PACKAGE) / f"compile__{cls.compile_fx_cnt}"
        return debug_folder(PACKAGE) / f"model__{cls.model_cnt}"
