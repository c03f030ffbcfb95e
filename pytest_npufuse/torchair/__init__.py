"""TorchAir-compatible model-side API: ``from pytest_npufuse import torchair``."""

from __future__ import annotations

from . import ops, scope
from .configs.compiler_config import CompilerConfig

__all__ = ["ops", "scope", "CompilerConfig", "get_npu_backend"]


def get_npu_backend(*, compiler_config: CompilerConfig | None = None, target: str = "a3"):
    """A ``torch.compile`` backend that models ``target`` with SuperKernel scopes and streams honoured."""
    from ..pipeline import NpuBackend
    from ..hardware import load_profile

    return NpuBackend(compiler_config or CompilerConfig(), load_profile(target))
