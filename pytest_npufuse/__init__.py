"""pytest-npufuse: regression-test Ascend SuperKernel scopes and multi-stream code on a CPU.

The pipeline works without pytest: :func:`compare` compiles a model for a modeled Atlas target with its
scopes ignored and honoured, runs both, and returns a :class:`CaseReport`.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .errors import NpufuseError

if TYPE_CHECKING:
    from .advisor import Advice, advise
    from .frontend.meta import init_empty_weights
    from .gating import superkernel_scope
    from .pipeline.backend import compile_model
    from .pipeline.chain import capture, compare
    from .pipeline.spec import CaseSpec
    from .report.case import CaseReport, ScopeReport
    from .session import Session, current_session
    from .target.resolve import Target

__all__ = [
    "capture", "compare", "CaseSpec", "Target", "compile_model", "CaseReport", "ScopeReport", "NpufuseError", "advise",
    "Advice", "superkernel_scope", "install_shims", "uninstall_shims", "init_empty_weights", "Session", "current_session",
]

# The pipeline needs torch, which takes seconds to import; loading it on first use keeps
# `python -m pytest_npufuse compare` (two JSON files, no model) quick in a CI step.
_LAZY = {
    "capture": "pipeline.chain", "compare": "pipeline.chain", "CaseSpec": "pipeline.spec", "Target": "target.resolve",
    "compile_model": "pipeline.backend",
    "CaseReport": "report.case", "ScopeReport": "report.case",
    "advise": "advisor", "Advice": "advisor", "superkernel_scope": "gating",
    "install_shims": "shim", "uninstall_shims": "shim", "init_empty_weights": "frontend.meta",
    "Session": "session", "current_session": "session",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
