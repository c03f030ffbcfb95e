"""``torchair.configs``: the ``CompilerConfig`` tree."""

from . import compiler_config

__all__ = ["compiler_config"]
