"""``torchair.npu_fx_compiler``: TorchAir's ``torch.compile`` backend and its FX graph compiler.

``get_npu_backend()`` is what scripts pass to ``torch.compile``; ``get_compiler()`` is the compiler of
the aten graph alone, for a user's own backend built on ``aot_module_simplified`` (torchair:
python/torchair/npu_fx_compiler.py). Both model the NPU ``target`` (default: the target of the current
``python -m pytest_npufuse run``, else ``a3``) with scopes and streams honoured.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import torch

from ..pipeline.backend import NpuBackend, backend_for
from ..vocabulary import Mode
from ._debugdump import GraphTransformObserver, dump_dynamo_graph, init_debug_logging, observer_for
from ._utils.graph_transform_observer import PACKAGE, DebugContext
from .configs.compiler_config import CompilerConfig
from .core.utils import logger

__all__ = ["get_npu_backend", "get_compiler"]


def get_npu_backend(
    *,
    compiler_config: CompilerConfig | None = None,
    custom_decompositions: Mapping[Any, Callable[..., Any]] | None = None,
    target: str | None = None,
) -> Any:
    """A ``torch.compile`` backend for ``compiler_config``; ``custom_decompositions`` (aten op ->
    function) are applied when the graph is lowered to aten, as TorchAir passes them to AOTAutograd."""
    init_debug_logging(logger, PACKAGE, "TORCHAIR")
    config = compiler_config or CompilerConfig()
    if config.run_mode == "reduce-overhead":
        warnings.warn(
            'The "reduce-overhead" mode configuration will be deprecated. Please use the "npugraph_ex" backend.',
            DeprecationWarning,
            stacklevel=2,
        )
    return _backend(config, target, custom_decompositions)


def get_compiler(compiler_config: CompilerConfig | None = None, *, target: str | None = None) -> Callable[..., Any]:
    """The compiler of an aten graph (``fw_compiler`` of a user's ``aot_module_simplified``), modeling it
    as ``get_npu_backend(compiler_config=...)`` would."""
    return _backend(compiler_config or CompilerConfig(), target, None).compile_aten


def _backend(
    config: CompilerConfig, target: str | None, decompositions: Mapping[Any, Callable[..., Any]] | None
) -> NpuBackend:
    """The backend of ``config``, whose FX passes run through :func:`_optimize_fx` as TorchAir's do, with
    TorchAir's ``TORCH_COMPILE_DEBUG=1`` files (:mod:`._debugdump`)."""
    options = replace(
        config.graph_options(), graph_passes=(partial(_run_optimize_fx, config),),
        dynamo_passes=(partial(dump_dynamo_graph, DebugContext),),
    )
    keywords = {"compiler_config": config, "decompositions": dict(decompositions or {})}
    return backend_for(options, target, decompositions, keywords)


def _run_optimize_fx(config: CompilerConfig, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """Look :func:`_optimize_fx` up when each graph compiles: code that wraps it (TorchAir's tests assert
    on the optimised graph this way) sees every graph. Its observer writes the graph's debug files."""
    observer = observer_for(gm, example_inputs, config, DebugContext, PACKAGE)
    _optimize_fx(gm, config, observer)
    observer.finish(code=Mode(config.run_mode).aclgraph)


def _optimize_fx(
    gm: torch.fx.GraphModule, config: CompilerConfig, observer: GraphTransformObserver
) -> torch.fx.GraphModule:
    """TorchAir's FX optimisation of one aten graph (torchair: python/torchair/npu_fx_compiler.py): here the
    config's passes as the model runs them (:meth:`CompilerConfig.fx_passes`, handed the observer's
    example inputs); TorchAir's built-in passes are not modeled. The observer, TorchAir's third argument,
    is told each pass done."""
    config.fx_passes(config)(gm, observer.example_inputs, observer.reached)
    return gm
