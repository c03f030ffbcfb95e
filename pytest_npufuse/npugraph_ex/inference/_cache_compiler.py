"""``npugraph_ex.inference._cache_compiler``: npugraph_ex's compile cache, as TorchAir's
(:mod:`pytest_npufuse.torchair.inference._cache_compiler`): the model writes no cache, so the cache's
classes import and refuse every use by name under npugraph_ex's path; ``cache_compile`` is the model's."""

from __future__ import annotations

from ...torchair._internal import refused_class
from . import cache_compile, readable_cache  # noqa: F401  (npugraph_ex defines them here)

__all__: list[str] = []

_PATH = "npugraph_ex.inference._cache_compiler"
CompiledModel = refused_class(f"{_PATH}.CompiledModel", ("save", "load", "get_cache_bin", "recompile", "rebase", "readable"))
ModelCacheSaver = refused_class(f"{_PATH}.ModelCacheSaver", ("__call__", "save_compiled_fx", "save_compiled_fn", "remove_cache"))
CacheBackend = refused_class(f"{_PATH}.CacheBackend", ("__call__", "fw_compiler", "bw_compiler"))
