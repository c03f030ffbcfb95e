"""``npugraph_ex.inference``: ``cache_compile`` and ``readable_cache`` with npugraph_ex's config, the
same behaviour as :mod:`pytest_npufuse.torchair.inference` (the model compiles afresh in every process
and writes no cache)."""

from __future__ import annotations

from typing import Any, Callable

from ...torchair import inference as _torchair_inference
from ..configs.compiler_config import CompilerConfig
from ..npu_fx_compiler import get_npu_backend

__all__ = ["cache_compile", "readable_cache"]


def cache_compile(
    func: Callable[..., Any],
    *,
    config: CompilerConfig | None = None,
    dynamic: bool = True,
    cache_dir: str | None = None,
    global_rank: int | None = None,
    tp_rank: int | None = None,
    pp_rank: int | None = None,
    **kwargs: Any,
) -> Callable[..., Any]:
    """``func`` (a bound method of an ``nn.Module``) compiled with npugraph_ex's backend for ``config``
    (so its compiles and calls log to the ``npugraph_ex`` logger)."""
    return _torchair_inference._compile_method(func, get_npu_backend(compiler_config=config), dynamic, kwargs)


readable_cache = _torchair_inference.readable_cache
