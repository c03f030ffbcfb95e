"""The one home of the ``torch.compile`` backends that model the NPU, and the run that collects them.

:class:`NpuBackend` captures each graph a user's ``torch.compile`` produces and models it through the
chain (:func:`~.chain.model_program`); :func:`compile_model` is the library's way to get one. Code
written for a real NPU gets its backend through :func:`backend_for` (``torchair.get_npu_backend()`` and
``backend="npugraph_ex"`` call it), which remembers every backend of the current
``python -m pytest_npufuse run`` (:func:`modeled_run`) for its summary.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import torch.fx

from ..frontend.backend import INFERENCE, CaptureBackend, CapturedGraph
from ..frontend.dynamo import compile_static
from ..plan.tasks import Variant
from ..session import Scope, Session, SessionKey, current_session
from ..simulate.host import HostConfig, host_config
from ..errors import ProfileError
from ..target.catalog import OpCatalog, load_catalog
from ..target.profile import CHILD_PYPROJECT_VARIABLE, CHILD_TARGET_VARIABLE, HardwareProfile
from ..target.resolve import Target, profile_of, project_settings
from ..target.running import stated_running_target
from ..target.userconfig import load_user_config
from ..vocabulary import Mode
from .graph import (
    CompiledGraph,
    GraphOptions,
    Settings,
    StaticOutputs,
    compiled_graph,
    graph_options,
    log_compile,
    mode_of_phase,
    model_program,
)


@dataclass
class NpuBackend:
    """A ``torch.compile`` backend bound to one target, graph options and variant (scopes honoured or
    ignored): it captures each graph and models it through :func:`~.chain.model_program`; ``graphs``
    keeps the results."""

    config: GraphOptions
    profile: HardwareProfile
    variant: Variant = Variant.VARIANT
    catalog: OpCatalog = field(default_factory=load_catalog)
    options: Mapping[str, str] = field(default_factory=dict)
    multistream: bool = True
    dynamic: bool = False
    host: HostConfig = field(default_factory=HostConfig)
    graphs: list[CompiledGraph] = field(default_factory=list)
    decompositions: Mapping[Any, Callable[..., Any]] = field(default_factory=dict)
    # What the backend was made from, by keyword, as TorchAir's and npugraph_ex's backends (a
    # functools.partial) expose it: ``keywords["compiler_config"]`` is the config it models.
    keywords: Mapping[str, Any] = field(default_factory=dict)

    @property
    def run_mode(self) -> str:
        """The mode runs are modeled in."""
        return self.config.mode

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        return self._capturer()(gm, example_inputs)

    def compile_aten(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        """Model an aten graph AOTAutograd already produced (a user's own ``aot_module_simplified`` with
        this as its ``fw_compiler``)."""
        return self._capturer().capture_aten(gm, example_inputs)

    def _capturer(self) -> CaptureBackend:
        return CaptureBackend(
            self.catalog, self._model, decompositions=self.decompositions, graph_passes=self.config.graph_passes,
            dynamo_passes=self.config.dynamo_passes,
        )

    def _model(self, graph: CapturedGraph) -> CompiledGraph:
        mode = mode_of_phase(self.config.mode, graph.phase)
        settings = Settings(self.profile, mode, self.dynamic or graph.dynamic, self.host)
        multistream = self.multistream and not self.config.single_stream
        modeled = model_program(graph.program, settings, self.variant, self.options, multistream,
                                self.config.aclgraph_superkernel)
        compiled = compiled_graph(graph, modeled, settings)
        if self.config.log is not None:
            log_compile(self.config.log, graph.gm)
            compiled = replace(compiled, log=self.config.log)
        stream_of = compiled.plan.streams.kernel_stream if compiled.plan.streams is not None else {}
        if self.config.watch is not None:
            compiled = replace(compiled, dump=self.config.watch(settings.mode, graph.gm, graph.program, stream_of))
        if Mode(settings.mode).aclgraph and graph.gm.meta.get(INFERENCE):
            compiled = replace(compiled, static_outputs=StaticOutputs(self.config.output_clone))
        if self.config.dump_graph is not None:
            self.config.dump_graph(settings.mode, graph.gm, graph.program, stream_of)
        self.graphs.append(compiled)
        return compiled

    def __repr__(self) -> str:
        return f"NpuBackend({self.profile.name}, {self.run_mode}, {self.variant})"


def compile_model(
    model: Callable[..., Any],
    *,
    target: str | HardwareProfile | Target | None = None,
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
    (``MAX_RUNTIME_CORE_NUMBER``) and GE's host optimisations. ``target`` and ``catalog`` are as for
    :func:`~pytest_npufuse.compare`.
    """
    variant = Variant.VARIANT if superkernel else Variant.BASELINE
    resolved = Target.resolve(target, catalog=catalog)
    backend = NpuBackend(
        graph_options(mode), resolved.profile, variant, resolved.catalog, multistream=multistream,
        dynamic=dynamic, host=host_config(host),
    )
    return compile_static(model, backend), backend


@dataclass
class ModeledRun:
    """The target a script's backends model, and the backends it created (in order)."""

    profile: HardwareProfile
    backends: list[NpuBackend] = field(default_factory=list)

    def graphs(self) -> list[CompiledGraph]:
        return [graph for backend in self.backends for graph in backend.graphs]


# The sessions inside a script's (a pytest run the script starts, its tests) add their backends to its run.
RUN: SessionKey[ModeledRun | None] = SessionKey("the script run", lambda: None, Scope.INHERITED)


@contextlib.contextmanager
def modeled_run(profile: HardwareProfile) -> Iterator[ModeledRun]:
    """Collect the backends of one ``python -m pytest_npufuse run``, whose script runs inside, in a session
    that starts a modeled process (no tagged events yet, the device clock at zero)."""
    with Session(current_session(), process=True) as session:
        run = session[RUN] = ModeledRun(profile)
        yield run


def current_profile(target: str | None = None) -> HardwareProfile:
    """``target``'s profile; by default the running script's target: the one a test runner states
    (pytest's ``--npu-target``, :mod:`pytest_npufuse.target.running`), else ``run``'s (in a process the
    script started, the target its ``run`` named), else the default target."""
    if target is not None:
        return profile_of(target, project_settings())
    stated = stated_running_target()
    if stated is not None:
        return stated
    run = current_session()[RUN]
    if run is None:
        return _child_profile()
    return run.profile


def _child_profile() -> HardwareProfile:
    """The target a process started by ``run`` was given (a project's own target read from the same
    pyproject.toml as in its parent), or the default target outside ``run``."""
    pyproject = os.environ.get(CHILD_PYPROJECT_VARIABLE)
    target = os.environ.get(CHILD_TARGET_VARIABLE) or None
    try:
        return profile_of(target, load_user_config(Path(pyproject) if pyproject else None))
    except ProfileError as exc:
        raise ProfileError(
            f"environment variable {CHILD_TARGET_VARIABLE}={target!r} (with {CHILD_PYPROJECT_VARIABLE}={pyproject!r}), "
            f"which `python -m pytest_npufuse run` sets for the processes it starts, names no target: {exc.problem}",
            argument=CHILD_TARGET_VARIABLE, file=exc.file or pyproject, entry=exc.entry,
        ) from None


def backend_for(
    options: GraphOptions,
    target: str | None,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
    keywords: Mapping[str, Any] | None = None,
) -> NpuBackend:
    """A backend for ``options`` on ``target`` (default: the running script's target, else the default
    target), applying ``decompositions`` when lowering to aten (``keywords``: what it was made from, see
    :attr:`NpuBackend.keywords`); inside ``python -m pytest_npufuse run`` it is remembered for the summary."""
    backend = NpuBackend(
        options, current_profile(target), decompositions=dict(decompositions or {}), keywords=dict(keywords or {})
    )
    run = current_session()[RUN]
    if run is not None:
        run.backends.append(backend)
    return backend
