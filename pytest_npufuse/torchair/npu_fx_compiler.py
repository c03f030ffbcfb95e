"""``torchair.get_npu_backend``: the ``torch.compile`` backend of a TorchAir config, where TorchAir
defines it (torchair: python/torchair/npu_fx_compiler.py)."""

from __future__ import annotations

import warnings
from typing import Any

from ..pipeline.backend import backend_for
from .configs.compiler_config import CompilerConfig


def get_npu_backend(*, compiler_config: CompilerConfig | None = None, target: str | None = None) -> Any:
    """A ``torch.compile`` backend that models the NPU ``target`` (default: the target of the current
    ``python -m pytest_npufuse run``, else ``a3``) with scopes and streams honoured."""
    config = compiler_config or CompilerConfig()
    if config.run_mode == "reduce-overhead":
        warnings.warn(
            'The "reduce-overhead" mode configuration will be deprecated. Please use the "npugraph_ex" backend.',
            DeprecationWarning,
            stacklevel=2,
        )
    return backend_for(config.graph_options(), target)
