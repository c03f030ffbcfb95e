"""``npugraph_ex.inference``: ``cache_compile`` and ``readable_cache`` with npugraph_ex's config, the
same behaviour as :mod:`pytest_npufuse.torchair.inference` (the model compiles afresh in every process
and writes no cache)."""

from __future__ import annotations

from typing import Any, Callable

from ...torchair import inference as _torchair_inference
from ..configs.compiler_config import CompilerConfig

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
    """``func`` (a bound method of an ``nn.Module``) compiled in npugraph_ex mode with ``config``."""
    return _torchair_inference.cache_compile(
        func, config=(config or CompilerConfig()).torchair_config(), dynamic=dynamic, cache_dir=cache_dir,
        global_rank=global_rank, tp_rank=tp_rank, pp_rank=pp_rank, **kwargs,
    )


readable_cache = _torchair_inference.readable_cache
