"""``npugraph_ex.npu_fx_compiler``: npugraph_ex's backend, its FX compiler and ``compile_fx``.

``get_npu_backend()`` is a ``torch.compile`` backend in npugraph_ex mode; ``get_compiler()`` and
``compile_fx(gm, example_inputs, options)`` compile an aten graph that the user's own backend produced
with ``aot_module_simplified`` (torchair: npugraph_ex/npugraph_ex/npu_fx_compiler.py; the npugraph_ex
docs build custom backends this way, docs/zh/npugraph_ex/api/npugraph_ex/compile_fx.md). Each models
the NPU of the current ``python -m pytest_npufuse run`` (else a3).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import torch

from ..pipeline.backend import backend_for
from ..pipeline.graph import GraphOptions
from ..torchair._debugdump import DEBUG_PHASE, GraphTransformObserver, dump_dynamo_graph, init_debug_logging, observer_for
from ._utils.graph_transform_observer import COMPILE_FX, PACKAGE, DebugContext
from .configs.compiler_config import CompilerConfig
from .core.utils import logger

__all__ = ["get_npu_backend", "get_compiler", "compile_fx"]


def get_npu_backend(
    *,
    compiler_config: CompilerConfig | None = None,
    custom_decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> Any:
    """A ``torch.compile`` backend for ``compiler_config`` (npugraph_ex's flat config)."""
    init_debug_logging(logger, PACKAGE, "NPUGRAPH_EX")
    keywords = {"compiler_config": compiler_config, "decompositions": dict(custom_decompositions or {})}
    return backend_for(_graph_options(compiler_config), None, custom_decompositions, keywords)


def get_compiler(compiler_config: CompilerConfig | None = None) -> Callable[..., Any]:
    """The compiler of an aten graph (the ``fw_compiler`` of a user's ``aot_module_simplified``)."""
    return backend_for(_graph_options(compiler_config), None).compile_aten


def _graph_options(compiler_config: CompilerConfig | None) -> GraphOptions:
    """The graph options of ``compiler_config`` (through TorchAir's tree), logging to the
    ``npugraph_ex`` logger as npugraph_ex does; its FX passes are handed ``compiler_config`` itself, and
    its ``TORCH_COMPILE_DEBUG=1`` files go under ``npugraph_ex``."""
    config = compiler_config or CompilerConfig()
    options = config.torchair_config().graph_options()
    return replace(
        options, log=logger, graph_passes=(partial(_run_optimize_fx, config),),
        dynamo_passes=(partial(dump_dynamo_graph, DebugContext),),
    )


def _run_optimize_fx(config: CompilerConfig, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """Look :func:`_optimize_fx` up when each graph compiles, so code that wraps it sees every graph."""
    observer = observer_for(gm, example_inputs, config.torchair_config(), DebugContext, PACKAGE)
    _optimize_fx(gm, config, observer)
    observer.finish(code=True)


def _optimize_fx(
    gm: torch.fx.GraphModule, config: CompilerConfig, observer: GraphTransformObserver
) -> torch.fx.GraphModule:
    """npugraph_ex's FX optimisation of one aten graph, as TorchAir's
    (:func:`pytest_npufuse.torchair.npu_fx_compiler._optimize_fx`): the passes of the TorchAir config
    ``config`` stands for, each user pass handed ``config`` itself and the observer's example inputs."""
    config.torchair_config().fx_passes(config)(gm, observer.example_inputs, observer.reached)
    return gm


def compile_fx(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any] | None = None, options: Mapping[str, Any] | None = None
) -> Callable[..., Any]:
    """The aten graph ``gm`` compiled with npugraph_ex ``options`` (the keys of ``torch.compile(...,
    options=)``); calling the result runs the modeled graph. Its debug files go to ``compile__<n>``."""
    init_debug_logging(logger, PACKAGE, "NPUGRAPH_EX")
    DebugContext.begin_compile_fx()
    gm.meta[DEBUG_PHASE] = COMPILE_FX
    return get_compiler(CompilerConfig().update(options))(gm, list(example_inputs or ()))


def npugraph_ex_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Mapping[str, Any] | None = None
) -> Callable[..., Any]:
    """``torch.compile(model, backend="npugraph_ex", options={...})``: the backend the shim registers."""
    return get_npu_backend(compiler_config=CompilerConfig().update(options))(gm, example_inputs)
