"""``torchair.core._backend``: TorchAir's binding to GE's C++ runtime (``TorchNpuGraph``, the graph
engine's start and stop), which TorchAir's tests import at their top and whose compile options they
reset (``_GLOBAL_COMPILE_OPTION = None``). The model runs no graph engine, so every name refuses use by
name, as ``torchair.ge``'s do (torchair: python/torchair/core/_backend.py, commit fced8842).
"""

from __future__ import annotations

from typing import Any

from .._internal import refused_class, refused_function
from ..ge import refusal

__all__: list[str] = []

TorchNpuGraph = refused_class("torchair.core._backend.TorchNpuGraph", ("load", "compile", "run", "summary"), refusal)
initialize_graph_engine = refused_function("torchair.core._backend.initialize_graph_engine", refusal)
finalize_graph_engine = refused_function("torchair.core._backend.finalize_graph_engine", refusal)
# The GE options of the running engine; None until an engine starts, which never happens on the model.
_GLOBAL_COMPILE_OPTION: Any = None
