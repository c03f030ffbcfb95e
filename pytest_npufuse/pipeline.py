"""The library entry point: compare a model's BASELINE and VARIANT on a modeled target, without pytest.

    from pytest_npufuse import compare
    report = compare(model, x, w, target="a3")
    print(report.summary())

The model is compiled twice through :class:`~pytest_npufuse.backend.NpuBackend`: once with its scopes
ignored (every kernel its own task, one stream) and once with them honoured. Both runs compute real
outputs on the CPU, which are compared bit for bit.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.utils._pytree as pytree

from . import fusion
from .backend import CompiledGraph, NpuBackend
from .capture import compile_once
from .catalog import OpCatalog, load_catalog
from .errors import CaptureError
from .hardware import HardwareProfile, load_profile
from .numerics import compare_outputs
from .report import CaseReport, ScopeReport
from .torchair.configs.compiler_config import CompilerConfig


def _config(mode: str | None) -> CompilerConfig:
    config = CompilerConfig()
    if mode is not None:
        config.mode = mode
    return config


def _fresh(inputs: Sequence[Any]) -> list[Any]:
    """Independent copies, so a model that writes to its inputs cannot leak one run into the other."""
    return [copy.deepcopy(x) if isinstance(x, torch.Tensor) else x for x in inputs]


def _single_graph(backend: NpuBackend, model: Callable[..., Any]) -> CompiledGraph:
    if len(backend.graphs) != 1:
        name = getattr(type(model), "__name__", repr(model))
        raise CaptureError(
            f"{name} compiled into {len(backend.graphs)} graphs, expected exactly one; "
            "a model with no tensor operations, or one Dynamo could not trace, cannot be modeled."
        )
    return backend.graphs[0]


def _output_names(outputs: Any) -> tuple[list[str], list[Any]]:
    """Flatten the model's outputs and name each leaf by its path, e.g. ``output[0][1]``."""
    leaves, _ = pytree.tree_flatten_with_path(outputs)
    return ["output" + pytree.keystr(path) for path, _ in leaves], [leaf for _, leaf in leaves]


def compile_model(
    model: Callable[..., Any],
    *,
    target: str | HardwareProfile = "a3",
    mode: str | None = None,
    superkernel: bool = True,
    multistream: bool = True,
    catalog: OpCatalog | None = None,
) -> tuple[Callable[..., Any], NpuBackend]:
    """``torch.compile`` the model for ``target``; the backend keeps each graph's plan and modeled run.

    ``superkernel=False`` gives the BASELINE plan (scopes ignored); ``multistream=False`` keeps the
    VARIANT on one stream.
    """
    profile = target if isinstance(target, HardwareProfile) else load_profile(target)
    variant = fusion.VARIANT if superkernel else fusion.BASELINE
    backend = NpuBackend(_config(mode), profile, variant, catalog or load_catalog(), multistream=multistream)
    return torch.compile(model, backend=backend, fullgraph=True, dynamic=False), backend


def compare(
    model: Callable[..., Any],
    *inputs: Any,
    target: str | HardwareProfile = "a3",
    mode: str | None = None,
    reference: Callable[..., Any] | None = None,
    options: Mapping[str, str] | None = None,
    catalog: OpCatalog | None = None,
) -> CaseReport:
    """Compile and run BASELINE (``reference`` or ``model`` with scopes ignored) and VARIANT, and report.

    ``options`` maps a scope name to an options string that replaces the one in the model code.
    """
    profile = target if isinstance(target, HardwareProfile) else load_profile(target)
    catalog = catalog or load_catalog()
    config = _config(mode)
    # Each case starts from an empty Dynamo cache: a test suite compiles the same forward many times
    # with different backends, and Dynamo would otherwise hit its recompile limit and fall back to eager.
    torch._dynamo.reset()
    baseline_backend = NpuBackend(config, profile, fusion.BASELINE, catalog)
    baseline_model = reference if reference is not None else model
    baseline_out = compile_once(baseline_model, _fresh(inputs), baseline_backend)
    variant_backend = NpuBackend(config, profile, fusion.VARIANT, catalog, dict(options or {}))
    variant_out = compile_once(model, _fresh(inputs), variant_backend)
    baseline_graph = _single_graph(baseline_backend, baseline_model)
    variant_graph = _single_graph(variant_backend, model)
    names, baseline_leaves = _output_names(baseline_out)
    _, variant_leaves = _output_names(variant_out)
    if len(baseline_leaves) != len(variant_leaves):
        raise CaptureError(
            f"the reference returns {len(baseline_leaves)} outputs but the model returns {len(variant_leaves)}; "
            "they must return the same structure to be compared."
        )
    return CaseReport(
        target=profile.name,
        mode=config.mode,
        baseline=baseline_graph.run,
        variant=variant_graph.run,
        mismatches=compare_outputs(names, baseline_leaves, variant_leaves),
        superkernels={scope.scope: ScopeReport.from_plan(scope) for scope in variant_graph.plan.scopes},
        streams=tuple(sorted({task.stream for task in variant_graph.plan.tasks})),
        races=(),
        outputs=tuple(names),
        plog_path=variant_graph.plog_path,
    )
