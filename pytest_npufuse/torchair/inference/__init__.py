"""``torchair.inference``: compiling a module's method once for serving, and GE's shape gears.

Serving code (vllm-ascend's torchair runner, benchmark scripts that time a SuperKernel scope) compiles
through ``torchair.inference.cache_compile(model.forward, config=..., dynamic=..., ge_cache=...)`` rather
than ``torch.compile``; ``set_dim_gears`` lets a dynamic dim take one of a few sizes, each compiled by GE
as a static graph (torchair: python/torchair/inference/__init__.py, _cache_compiler.py, _gear_utils.py).

The model compiles afresh in every process: it writes no cache, so ``cache_dir`` and ``ge_cache`` change
nothing but are checked as TorchAir checks them. ``readable_cache`` reads a cache file, which the model
never writes, so it is refused by name.
"""

from __future__ import annotations

import types
from typing import Any, Callable, Mapping, Sequence

import torch

from ...errors import ConfigError, NotModeledError, OpArgumentError, OpAssertionError, OpTypeError
from ...frontend.shapes import GEARS_ATTRIBUTE
from ..configs.compiler_config import CompilerConfig
from ..npu_fx_compiler import get_npu_backend

__all__ = ["cache_compile", "set_dim_gears", "readable_cache"]



def cache_compile(
    func: Callable[..., Any],
    *,
    config: CompilerConfig | None = None,
    backend: Any = None,
    dynamic: bool = True,
    cache_dir: str | None = None,
    global_rank: int | None = None,
    tp_rank: int | None = None,
    pp_rank: int | None = None,
    custom_decompositions: Mapping[Any, Any] | None = None,
    ge_cache: bool = False,
    **kwargs: Any,
) -> Callable[..., Any]:
    """``func`` (a bound method of an ``nn.Module``) compiled with the NPU backend of ``config``.

    As TorchAir: ``backend`` (from ``get_npu_backend``) stands for its config, which must be ``config``
    when both are given; only a module's method can be cached, and ``ge_cache`` with
    ``experimental_config.frozen_parameter`` is refused. ``fullgraph`` may be passed as in
    ``torch.compile``; ``custom_decompositions`` are applied when lowering, as in ``get_npu_backend``. The
    ranks only name the cache directory on a device, so they change nothing here.
    """
    config = _config_of(config, backend) or CompilerConfig()
    if not isinstance(func, types.MethodType) or not isinstance(func.__self__, torch.nn.Module):
        raise OpArgumentError(
            f"cache_compile caches a method of a torch.nn.Module (e.g. model.forward), got {func!r}; "
            "pass the bound method.", op="cache_compile", argument="func"
        )
    if ge_cache and config.experimental_config.frozen_parameter.raw:
        raise OpArgumentError(
            "cache_compile(ge_cache=True) with config.experimental_config.frozen_parameter = True: TorchAir "
            "allows only one of them; turn one off.", op="cache_compile", argument="ge_cache"
        )
    backend = get_npu_backend(compiler_config=config, custom_decompositions=custom_decompositions)
    return _compile_method(func, backend, dynamic, kwargs)


def _config_of(config: CompilerConfig | None, backend: Any) -> CompilerConfig | None:
    """The config ``cache_compile`` compiles with: ``config``, else the one ``backend`` was made for; both
    given, they must be the same (TorchAir's check and words)."""
    if backend is None:
        return config
    made_for = getattr(backend, "keywords", {}).get("compiler_config")
    if config is not None and made_for is not config:
        raise ConfigError(
            "config in current backend is different from the config during cache generation.", argument="config"
        )
    return config if config is not None else made_for


def _compile_method(func: Callable[..., Any], backend: Any, dynamic: bool, kwargs: dict[str, Any]) -> Callable[..., Any]:
    """``func`` compiled with ``backend``, after TorchAir's checks: a bound method of an ``nn.Module``,
    and no keyword argument but ``fullgraph``. npugraph_ex's ``cache_compile`` shares it."""
    if not isinstance(func, types.MethodType) or not isinstance(func.__self__, torch.nn.Module):
        raise OpArgumentError(
            f"cache_compile caches a method of a torch.nn.Module (e.g. model.forward), got {func!r}; "
            "pass the bound method.", op="cache_compile", argument="func"
        )
    fullgraph = bool(kwargs.pop("fullgraph", False))
    if kwargs:
        raise OpTypeError(
            f"cache_compile() got unexpected keyword argument(s): {', '.join(sorted(kwargs))}",
            op="cache_compile",
        )
    return torch.compile(func, backend=backend, dynamic=dynamic, fullgraph=fullgraph)


def set_dim_gears(t: torch.Tensor, dim_gears: Mapping[int, Sequence[int]]) -> None:
    """Let the dims of ``t`` named in ``dim_gears`` take any of their listed sizes (2 to 100 each).

    Each dim becomes dynamic for Dynamo; GE compiles one static graph per gear, so a call whose size is
    not a gear is an error when the graph is called, and every call is priced as a static graph. A value
    TorchAir rejects is its AssertionError, with its message, checked in its order (torchair:
    python/torchair/inference/_gear_utils.py); setting the same gears again is allowed.
    """
    if not isinstance(t, torch.Tensor):
        raise OpTypeError(f"set_dim_gears(t, ...) takes a tensor, got {type(t).__name__}", op="set_dim_gears",
        argument="t")
    if not isinstance(dim_gears, Mapping):
        raise OpTypeError(
            f"set_dim_gears(t, dim_gears): dim_gears maps a dim to its sizes, got {dim_gears!r}",
            op="set_dim_gears", argument="dim_gears",
        )
    previous = getattr(t, GEARS_ATTRIBUTE, None)
    if previous is not None and previous != _as_stored(dim_gears):
        raise OpAssertionError(
            f"Tensor {t} already has set dim gears, and it is not supported to set it again.",
            argument="t",
        )
    for dim, gears in dim_gears.items():
        _check_gears(t, dim, gears)
    for dim in dim_gears:
        torch._dynamo.mark_dynamic(t, dim)
    setattr(t, GEARS_ATTRIBUTE, _as_stored(dim_gears))


def _as_stored(dim_gears: Mapping[int, Sequence[int]]) -> dict[int, tuple[int, ...]]:
    """The gears as the model keeps them (a list and a tuple of the same sizes are the same gears)."""
    return {dim: tuple(gears) if isinstance(gears, (list, tuple)) else gears for dim, gears in dim_gears.items()}


def _check_gears(t: torch.Tensor, dim: Any, gears: Any) -> None:
    """TorchAir's checks of one dim's gears, in its order and words."""
    if not isinstance(dim, int):
        raise OpAssertionError(
            f"Dim index in dim_gears must be an integer, but got {type(dim)}.",
            argument="dim_gears",
        )
    if not 0 <= dim < t.dim():
        raise OpAssertionError(
            f"Dim index in dim_gears must be in range [0, {t.dim() - 1}], but got {dim}.",
            argument="dim_gears",
        )
    if not isinstance(gears, (list, tuple)):
        raise OpAssertionError(
            f"Gears for dim index {dim} in dim_gears must be a list or tuple, but got {type(gears)}.",
            argument="dim_gears",
        )
    for index, gear in enumerate(gears):
        if not isinstance(gear, int):
            raise OpAssertionError(
                f"Element at index {index} of value for dim index {dim} "
                f"in dim_gears must be an integer, but got {type(gear)}.",
                argument="dim_gears"
            )
        if gear == 0:
            raise OpAssertionError(
                f"Gear value at index {index} for dim index {dim} must not be 0, but got {gear}.",
                argument="dim_gears",
            )
    if not 2 <= len(gears) <= 100:
        raise OpAssertionError(
            f"Length of gears for dim index {dim} in dim_gears must be in range [2, 100], but got {len(gears)}.",
            argument="dim_gears"
        )


def readable_cache(cache_bin: str, print_output: bool = True, file: Any = None) -> str:
    """Refused: it prints a compiled cache, and the model never writes one."""
    raise NotModeledError(
        "torchair.inference.readable_cache reads a compiled cache file; pytest-npufuse compiles afresh and writes "
        "no cache, so there is nothing to read."
    )
