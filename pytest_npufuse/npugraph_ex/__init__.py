"""``import npugraph_ex``: TorchAir's successor backend as its own package (also ``torch.npu.npugraph_ex``).

npugraph_ex captures a model as an aclgraph (torchair: npugraph_ex/npugraph_ex/, snapshot fced8842). Under
the shim (:mod:`pytest_npufuse.shim`) ``import npugraph_ex`` is this package, and
``torch.compile(model, backend="npugraph_ex", options={...})`` uses :func:`.npu_fx_compiler.npugraph_ex_backend`.
Its public names:

- ``get_npu_backend(compiler_config=..., custom_decompositions=...)``, ``get_compiler(config)``,
  ``compile_fx(gm, example_inputs, options)`` (:mod:`.npu_fx_compiler`);
- ``CompilerConfig`` (:mod:`.configs.compiler_config`), whose options are the ``options={...}`` keys;
- ``logger`` (:mod:`.core.utils`), ``inference.cache_compile`` / ``readable_cache``, ``scope.limit_core_num``.

- ``register_replacement``: a user's own pattern-fusion rule, applied to each aten graph unless the
  ``pattern_fusion_pass`` option is False (:mod:`pytest_npufuse.torchair.patterns.pattern_pass_manager`,
  whose rules it shares).
"""

from __future__ import annotations

from . import _utils, configs, core, inference, npu_fx_compiler, scope  # noqa: F401  (_utils: reached as an attribute)
from .configs.compiler_config import CompilerConfig
from .core.utils import logger
from ..torchair.patterns.pattern_pass_manager import register_replacement
from .npu_fx_compiler import compile_fx, get_compiler, get_npu_backend

__all__ = ["get_npu_backend", "get_compiler", "compile_fx", "CompilerConfig", "logger", "register_replacement"]
