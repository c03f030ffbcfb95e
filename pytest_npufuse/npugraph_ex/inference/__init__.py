"""``npugraph_ex.inference``: ``cache_compile`` and ``readable_cache`` with npugraph_ex's config, the
same behaviour as :mod:`pytest_npufuse.torchair.inference` (the model compiles afresh in every process
and writes no cache).

npugraph_ex's ``cache_compile`` (npugraph_ex/npugraph_ex/inference/_cache_compiler.py at fced8842) takes
``config`` or a ``backend`` made by ``get_npu_backend``, ``custom_decompositions`` and ``ge_cache``, and
accepts any other keyword without using it; its own smoke tests pass ``options={...}`` that way. The
model does the same, with an :class:`~pytest_npufuse.errors.OptionsWarning` naming what is ignored.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

from ...errors import OpArgumentError, OptionsWarning

from ...torchair import inference as _torchair_inference
from ..configs.compiler_config import CompilerConfig
from ..npu_fx_compiler import get_npu_backend

__all__ = ["cache_compile", "readable_cache"]


# The keywords of TorchAir's cache_compile that npugraph_ex's takes too and that change nothing here (they name
# and key the cache, which the model never writes): accepted silently, unlike any other keyword.
CACHE_KEYWORDS = frozenset({"cache_dir", "global_rank", "tp_rank", "pp_rank", "ge_cache"})


def cache_compile(
    func: Callable[..., Any],
    *,
    config: CompilerConfig | None = None,
    dynamic: bool = True,
    backend: Any = None,
    custom_decompositions: Mapping[Any, Any] | None = None,
    **kwargs: Any,
) -> Callable[..., Any]:
    """``func`` (a bound method of an ``nn.Module``) compiled with ``backend``, else npugraph_ex's backend
    for ``config`` (its compiles and calls log to the ``npugraph_ex`` logger); :data:`CACHE_KEYWORDS` are
    accepted and unused."""
    if backend is not None and (config is not None or custom_decompositions is not None):
        raise OpArgumentError(
            "npugraph_ex.inference.cache_compile: pass either backend= or config=/custom_decompositions=; the "
            "backend already carries its config and decompositions.",
            op="npugraph_ex.inference.cache_compile", argument="backend"
        )
    ignored = sorted(set(kwargs) - CACHE_KEYWORDS)
    if ignored:
        warnings.warn(
            f"npugraph_ex.inference.cache_compile ignores {', '.join(f'{k}=' for k in ignored)}, as npugraph_ex "
            "does; set options on npugraph_ex.CompilerConfig() and pass config=.",
            OptionsWarning,
            stacklevel=2,
        )
    if backend is None:
        backend = get_npu_backend(compiler_config=config, custom_decompositions=custom_decompositions)
    return _torchair_inference._compile_method(func, backend, dynamic, {})


readable_cache = _torchair_inference.readable_cache
