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
import functools
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.utils._pytree as pytree

from . import fusion
from .advisor.affinity import find_affinity
from .attribution import attribute
from .backend import CompiledGraph, NpuBackend
from .capture import compile_once, value_dependent_capture
from .catalog import OpCatalog, load_catalog
from .errors import CaptureError
from .hardware import HardwareProfile, load_profile
from .host import EAGER, HostConfig, host_config
from .numerics import compare_outputs
from .report import CaseReport, ScopeReport
from .trace import write_case_traces
from .torchair.configs.compiler_config import CompilerConfig


def _config(mode: str | None) -> tuple[CompilerConfig, str | None]:
    """TorchAir's config for ``mode``, and the mode override for the ``"eager"`` single-op reference,
    which is not a TorchAir mode (the config then stays at its default)."""
    config = CompilerConfig()
    if mode == EAGER:
        return config, EAGER
    if mode is not None:
        config.mode = mode
    return config, None


def _profile(target: str | HardwareProfile) -> HardwareProfile:
    """A profile given as itself, or by a built-in target name or a profile file path."""
    return target if isinstance(target, HardwareProfile) else load_profile(target)


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


def _streams_used(graph: CompiledGraph) -> tuple[str, ...]:
    """Streams the VARIANT's kernels ran on, the default first (sub-kernels of a SuperKernel that fuses
    two streams count for their own stream)."""
    plan = graph.plan.streams
    used = set(plan.kernel_stream.values()) if plan is not None else {task.stream for task in graph.plan.tasks}
    return tuple(stream for stream in graph.program.streams() if stream in used) or ("default",)


def compile_model(
    model: Callable[..., Any],
    *,
    target: str | HardwareProfile = "a3",
    mode: str | None = None,
    superkernel: bool = True,
    multistream: bool = True,
    catalog: OpCatalog | None = None,
    dynamic: bool = False,
    host: HostConfig | None = None,
) -> tuple[Callable[..., Any], NpuBackend]:
    """``torch.compile`` the model for ``target``; the backend keeps each graph's plan and modeled run.

    ``superkernel=False`` gives the BASELINE plan (scopes ignored); ``multistream=False`` keeps the
    VARIANT on one stream. ``mode="eager"`` models torch_npu's op-by-op execution, ``dynamic=True``
    the host scheduling of a dynamic-shape max-autotune graph; ``host`` sets the host threads
    (``MAX_RUNTIME_CORE_NUMBER``) and GE's host optimisations.
    """
    profile = _profile(target)
    variant = fusion.VARIANT if superkernel else fusion.BASELINE
    config, override = _config(mode)
    backend = NpuBackend(
        config, profile, variant, catalog or load_catalog(), multistream=multistream, mode=override,
        dynamic=dynamic, host=host_config(host),
    )
    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)

    @functools.wraps(model)
    def run(*args: Any, **kwargs: Any) -> Any:
        with value_dependent_capture():
            return compiled(*args, **kwargs)

    return run, backend


def compare(
    model: Callable[..., Any],
    *inputs: Any,
    target: str | HardwareProfile = "a3",
    mode: str | None = None,
    reference: Callable[..., Any] | None = None,
    options: Mapping[str, str] | None = None,
    catalog: OpCatalog | None = None,
    dynamic: bool = False,
    host: HostConfig | None = None,
    trace_dir: str | Path | None = None,
    case: str = "case",
    affinity: bool = False,
) -> CaseReport:
    """Compile and run BASELINE (``reference`` or ``model`` with scopes ignored) and VARIANT, and report.

    ``options`` maps a scope name to an options string that replaces the one in the model code.
    ``mode``, ``dynamic`` and ``host`` are as for :func:`compile_model`. With ``trace_dir``, a
    Perfetto trace and a ``kernel_details.csv`` of each variant are written under
    ``trace_dir/<case>/`` and the report's ``trace_path`` names that directory. ``affinity=True`` adds
    the seed-003 affinity-op findings of the model's graph (``report.findings``).
    """
    profile = _profile(target)
    catalog = catalog or load_catalog()
    config, override = _config(mode)
    settings = {"mode": override, "dynamic": dynamic, "host": host_config(host)}
    # Each case starts from an empty Dynamo cache: a test suite compiles the same forward many times
    # with different backends, and Dynamo would otherwise hit its recompile limit and fall back to eager.
    torch._dynamo.reset()
    baseline_backend = NpuBackend(config, profile, fusion.BASELINE, catalog, **settings)
    baseline_model = reference if reference is not None else model
    baseline_out = compile_once(baseline_model, _fresh(inputs), baseline_backend)
    variant_backend = NpuBackend(config, profile, fusion.VARIANT, catalog, dict(options or {}), **settings)
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
    report = CaseReport(
        target=profile.name,
        mode=variant_backend.run_mode,
        baseline=baseline_graph.run,
        variant=variant_graph.run,
        mismatches=compare_outputs(names, baseline_leaves, variant_leaves),
        superkernels={scope.scope: ScopeReport.from_plan(scope) for scope in variant_graph.plan.scopes},
        streams=_streams_used(variant_graph),
        races=variant_graph.sanitizer.races if variant_graph.sanitizer is not None else (),
        outputs=tuple(names),
        plog_path=variant_graph.plog_path,
        deadlock=variant_graph.sanitizer.deadlock.describe()
        if variant_graph.sanitizer is not None and variant_graph.sanitizer.deadlock is not None
        else None,
        attribution={
            graph.run.variant: attribute(graph.program, graph.run) for graph in (baseline_graph, variant_graph)
        },
        findings=find_affinity(variant_graph.program, profile, catalog) if affinity else (),
    )
    if trace_dir is None:
        return report
    return replace(report, trace_path=str(write_case_traces(report, Path(trace_dir), case)))
