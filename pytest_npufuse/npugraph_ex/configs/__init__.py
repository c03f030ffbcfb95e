"""``npugraph_ex.configs``: npugraph_ex's ``CompilerConfig``."""

from . import compiler_config

__all__ = ["compiler_config"]
