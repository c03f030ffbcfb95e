"""``torchair.inference._cache_compiler``: TorchAir's compile cache (the artifacts ``cache_compile``
saves and loads, the backend that saves them), which TorchAir's tests import at their top.

The model compiles afresh in every process and writes no cache (:mod:`pytest_npufuse.torchair.inference`),
so its artifact classes import and refuse every use by name; ``cache_compile`` is the model's own
(torchair: python/torchair/inference/_cache_compiler.py, commit fced8842).
"""

from __future__ import annotations

from .._internal import refused_class
from . import cache_compile, readable_cache  # noqa: F401  (TorchAir defines them here)

__all__: list[str] = []

_PATH = "torchair.inference._cache_compiler"
CompiledModel = refused_class(f"{_PATH}.CompiledModel", ("save", "load", "get_cache_bin", "recompile", "rebase", "readable"))
ModelCacheSaver = refused_class(f"{_PATH}.ModelCacheSaver", ("__call__", "save_compiled_fx", "save_compiled_fn", "remove_cache"))
CacheBackend = refused_class(f"{_PATH}.CacheBackend", ("__call__", "fw_compiler", "bw_compiler"))
LazyCompiledModel = refused_class(f"{_PATH}.LazyCompiledModel", ("__call__", "compile"))
_NoGuardCompiledFunction = refused_class(f"{_PATH}._NoGuardCompiledFunction", ("for_inputs", "save_to", "load"))
_NoGuardCompiledMethod = refused_class(f"{_PATH}._NoGuardCompiledMethod", ("for_inputs", "save_to", "load"))
