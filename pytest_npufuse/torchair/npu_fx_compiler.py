"""``torchair.npu_fx_compiler``: TorchAir's ``torch.compile`` backend and its FX graph compiler.

``get_npu_backend()`` is what scripts pass to ``torch.compile``; ``get_compiler()`` is the compiler of
the aten graph alone, for a user's own backend built on ``aot_module_simplified`` (torchair:
python/torchair/npu_fx_compiler.py). Both model the NPU ``target`` (default: the target of the current
``python -m pytest_npufuse run``, else ``a3``) with scopes and streams honoured.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

from ..pipeline.backend import backend_for
from .configs.compiler_config import CompilerConfig

__all__ = ["get_npu_backend", "get_compiler"]


def get_npu_backend(
    *,
    compiler_config: CompilerConfig | None = None,
    custom_decompositions: Mapping[Any, Callable[..., Any]] | None = None,
    target: str | None = None,
) -> Any:
    """A ``torch.compile`` backend for ``compiler_config``; ``custom_decompositions`` (aten op ->
    function) are applied when the graph is lowered to aten, as TorchAir passes them to AOTAutograd."""
    config = compiler_config or CompilerConfig()
    if config.run_mode == "reduce-overhead":
        warnings.warn(
            'The "reduce-overhead" mode configuration will be deprecated. Please use the "npugraph_ex" backend.',
            DeprecationWarning,
            stacklevel=2,
        )
    return backend_for(config.graph_options(), target, custom_decompositions)


def get_compiler(compiler_config: CompilerConfig | None = None, *, target: str | None = None) -> Callable[..., Any]:
    """The compiler of an aten graph (``fw_compiler`` of a user's ``aot_module_simplified``), modeling it
    as ``get_npu_backend(compiler_config=...)`` would."""
    return backend_for((compiler_config or CompilerConfig()).graph_options(), target).compile_aten
