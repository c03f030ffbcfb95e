"""TorchAir-compatible model-side API: ``from pytest_npufuse import torchair`` (or ``import torchair``
under the shim, see :mod:`pytest_npufuse.shim`).

The names follow TorchAir of today (torchair: python/torchair/__init__.py); a name TorchAir has and we do
not model is an error that names it, never a silent no-op.
"""

from __future__ import annotations

from typing import Any

from ..errors import NotModeledAttributeError
from . import _acl_concrete_graph, configs, core, experimental, ge, ge_concrete_graph, inference, npu_fx_compiler, ops, patterns, scope
from ._hcom import patch_for_hcom
from .configs.compiler_config import CompilerConfig
from .core.utils import logger
from .experimental.inference import use_internal_format_weight
from .npu_fx_compiler import get_compiler, get_npu_backend
from .patterns.pattern_pass_manager import register_replacement

__all__ = [
    "get_compiler", "get_npu_backend", "CompilerConfig", "logger", "register_replacement", "use_internal_format_weight",
    "patch_for_hcom",
]

# TorchAir's public names we do not model (torchair.__all__ and its submodules); each is refused by name.
_NOT_MODELED = frozenset(
    {
        "dynamo_export", "register_fx_node_ge_converter",
        "npu_format_cast_via_cpu", "llm_datadist",
    }
)


def __getattr__(name: str) -> Any:
    if name in _NOT_MODELED:
        raise NotModeledAttributeError(
            f"torchair.{name} is not modeled by pytest-npufuse; it models {', '.join(__all__)} and the modules "
            "configs, core, experimental, ge, ge_concrete_graph, inference, npu_fx_compiler, ops, patterns and scope."
        )
    raise AttributeError(f"module 'torchair' has no attribute {name!r}")
