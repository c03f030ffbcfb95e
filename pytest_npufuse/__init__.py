"""pytest-npufuse: regression-test Ascend SuperKernel scopes and multi-stream code on a CPU.

The pipeline works without pytest: :func:`compare` compiles a model for a modeled Atlas target with its
scopes ignored and honoured, runs both, and returns a :class:`CaseReport`.
"""

from .errors import NpufuseError
from .pipeline import compare, compile_model
from .report import CaseReport, ScopeReport

__all__ = ["compare", "compile_model", "CaseReport", "ScopeReport", "NpufuseError"]
