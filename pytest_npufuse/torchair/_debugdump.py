"""TorchAir's and npugraph_ex's debug folder (``TORCH_COMPILE_DEBUG=1``), written from the model's compile.

With the variable set to ``1``, TorchAir and npugraph_ex save what each compile did under torch's debug
directory (``torch._dynamo.utils.get_debug_dir()``, ``torch_compile_debug/run_<time>-pid_<pid>``), in a
folder of their own, ``torchair`` or ``npugraph_ex`` (torchair: docs/zh/ascend_ir/features/basic/
debug_save.md, docs/zh/npugraph_ex/dfx/debug_save.md; python/torchair/_utils/graph_transform_observer.py,
npu_fx_compiler.py and _acl_concrete_graph/fx2acl_converter.py at commit fced8842):

- ``debug.log``: the package logger's records, from the first backend made with the variable set on
  (``get_npu_backend``, ``cache_compile``, npugraph_ex's ``compile_fx``); once per process, unless code
  takes the file handler off the logger again;
- per Dynamo graph a folder ``model__<n>`` holding ``dynamo_out_graph.txt`` (the graph AOTAutograd is
  handed) and one folder per phase (``forward``, ``backward``), where each aten graph is written as AOT
  produced it (``000_aot_<phase>_graph.txt``), then after each FX pass
  (``<nnn>_aot_<phase>_graph_after_<pass>.txt``) and, in the aclgraph modes, with the code the compiled
  graph runs (``output_code.py``). npugraph_ex's ``compile_fx`` writes ``compile__<n>/compile_fx`` instead,
  with no Dynamo graph.

The passes named are TorchAir's, in its order, for the config's mode and options (its documents: the
files "depend on the passes actually enabled"). The model runs fewer of them: the user's pre and post
passes, its pattern replacements and, in the aclgraph modes, the reinplacing of registered ops. Each file
holds the graph as the model has it at that point, so a pass the model does not run leaves its file as
the one before it. ``output_code.py`` is the Python of the aten graph the model runs (TorchAir's is its
aclgraph runner's generated code). In max-autotune GE's own graph files (``*_ge_graph.pbtxt``) are not
written; ``debug.graph_dump`` writes the modeled GE graph (:mod:`._graphdump`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any, Protocol, Sequence

import torch.fx

from ..files import append_text, ensure_directory, write_text
from ..frontend.backend import PHASE
from ..vocabulary import Mode, Phase

DEBUG_VARIABLE = "TORCH_COMPILE_DEBUG"
DEBUG_PHASE = "npufuse_debug_phase"  # gm.meta key: a phase folder set by the caller (npugraph_ex's compile_fx)
ACLGRAPH_STAGES = (
    "remove_cat_ops", "apply_event_closure_with_multi_stream", "apply_event_record", "eliminate_dead_code",
    "reinplace_inplaceable_ops_pass", "reinplace_input_mutated_ops", "decompose_auto_functionalized",
    "eliminate_self_copy", "replace_dynamic_workspace_ops", "replace_core_limit_nodes",
    "resolve_default_stream_markers",
)


def debug_enabled() -> bool:
    """Whether ``TORCH_COMPILE_DEBUG`` is ``1`` now (TorchAir reads it at each compile)."""
    return os.environ.get(DEBUG_VARIABLE, "0") == "1"


def debug_folder(package: str) -> Path:
    """``<torch's debug directory>/<package>``: the folder of ``torchair`` or ``npugraph_ex``."""
    from torch._dynamo.utils import get_debug_dir

    return Path(get_debug_dir()) / package


class DebugLogHandler(logging.FileHandler):
    """``debug.log``: a ``logging.FileHandler`` (so code that takes the file handlers off the logger, as
    TorchAir's tests do between cases, takes it off) whose records reach the file through the file layer."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8", delay=True)
        append_text(path, "", "debug.log")  # the file exists from the start, as TorchAir opens it at once

    def emit(self, record: logging.LogRecord) -> None:
        try:
            append_text(Path(self.baseFilename), self.format(record) + "\n", "debug.log")
        except Exception:  # a log record must never break the compile: logging's own policy
            self.handleError(record)


def init_debug_logging(logger: logging.Logger, package: str, tag: str) -> Path | None:
    """With ``TORCH_COMPILE_DEBUG=1``, ``logger``'s records also go to ``<package folder>/debug.log`` in
    TorchAir's format (``tag``: ``TORCHAIR`` or ``NPUGRAPH_EX``); a logger that has the file already keeps
    it. Returns the file, or None with the variable off."""
    for handler in logger.handlers:
        if isinstance(handler, DebugLogHandler):
            return Path(handler.baseFilename)
    if not debug_enabled():
        return None
    path = ensure_directory(debug_folder(package), "TORCH_COMPILE_DEBUG folder") / "debug.log"
    handler = DebugLogHandler(path)
    handler.setFormatter(logging.Formatter(
        f"[%(levelname)s] {tag}({os.getpid()},{os.path.basename(sys.executable)}):%(asctime)s "
        f"[%(filename)s:%(lineno)d]{threading.get_native_id()} %(message)s"
    ))
    logger.addHandler(handler)
    return path


class Folders(Protocol):
    """Where a package's debug files go (its ``DebugContext``): ``next_path()`` starts the folder of the
    next Dynamo graph and ``current_path(phase)`` is the folder of a phase's files."""

    def next_path(self) -> Path: ...

    def current_path(self, phase: str) -> Path: ...


def dump_graph(gm: torch.fx.GraphModule, path: Path) -> None:
    """One graph file as TorchAir writes it: ``gm.print_readable(False)``."""
    ensure_directory(path.parent, "TORCH_COMPILE_DEBUG folder")
    write_text(path, gm.print_readable(False), "TORCH_COMPILE_DEBUG graph file")


def dump_dynamo_graph(folders: Folders, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """A Dynamo graph's ``model__<n>/dynamo_out_graph.txt`` (the next ``n``), with the variable on."""
    if debug_enabled():
        dump_graph(gm, folders.next_path() / "dynamo_out_graph.txt")


def phase_name(gm: torch.fx.GraphModule) -> str:
    """TorchAir's phase folder of an aten graph: the caller's (``compile_fx``), else ``backward`` for a
    backward and ``forward`` for the rest."""
    if gm.meta.get(DEBUG_PHASE):
        return gm.meta[DEBUG_PHASE]
    return "backward" if gm.meta.get(PHASE) == Phase.BACKWARD else "forward"


def fx_stages(config: Any, package: str) -> tuple[str, ...]:
    """TorchAir's FX passes on an aten graph, in its order, for TorchAir config ``config`` (the common
    passes of ``_optimize_fx``, then the aclgraph ones of ``AclConcreteGraph.optimize_graph_without_runtime``;
    npugraph_ex's package adds ``eliminate_self_copy``). ``decompose_auto_functionalized`` is there since
    torch 2.6, and the model runs on a newer torch."""
    experimental = config.experimental_config
    mode = Mode(config.run_mode)
    stages = [
        *(["post_grad_custom_pre_pass"] if config.post_grad_custom_pre_pass.raw is not None else []),
        *(["optimize_noop_ops"] if experimental.remove_noop_ops.raw else []),
        "recover_view_inplace_pattern",
        *(["optimize_sym_input"] if mode == Mode.MAX_AUTOTUNE else []),
        *(["apply_pattern_passes"] if experimental.pattern_fusion_pass.raw else []),
        "view_to_reshape",
        *(["post_grad_custom_post_pass"] if config.post_grad_custom_post_pass.raw is not None else []),
    ]
    if mode.aclgraph:
        debug = config.debug.aclgraph
        skipped = {
            "remove_cat_ops": not debug.remove_cat_ops.raw,
            "reinplace_inplaceable_ops_pass": debug.disable_reinplace_inplaceable_ops_pass.raw,
            "reinplace_input_mutated_ops": debug.disable_reinplace_input_mutated_ops_pass.raw,
            "decompose_auto_functionalized": debug.disable_reinplace_input_mutated_ops_pass.raw,
            "eliminate_self_copy": package != "npugraph_ex",
        }
        stages += [stage for stage in ACLGRAPH_STAGES if not skipped.get(stage, False)]
    return tuple(stages)


class GraphTransformObserver:
    """TorchAir's observer of one aten graph's FX passes (the third argument of ``_optimize_fx``): it holds
    the graph's example inputs and, with ``TORCH_COMPILE_DEBUG=1``, writes the graph's files in the
    phase's ``folder`` as the passes run. ``reached(stage)`` writes every file up to that pass; the
    model calls it after each pass it runs."""

    def __init__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], config: Any, folder: Path | None,
        stages: Sequence[str], phase: str,
    ) -> None:
        self.gm = gm
        self.example_inputs = example_inputs
        self.config = config
        self.folder = folder
        self.phase = phase
        self._pending = list(stages)
        self._count = 0

    def dump_gm(self, gm: torch.fx.GraphModule, file_name: str) -> None:
        """``<nnn>_aot_<phase>_<file_name>.txt``, numbered in order of writing (TorchAir's names)."""
        if self.folder is None:
            return
        dump_graph(gm, self.folder / f"{self._count:03d}_aot_{self.phase}_{file_name}.txt")
        self._count += 1

    def reached(self, stage: str) -> None:
        """The files of the passes up to ``stage`` (a pass not in the config's list writes nothing)."""
        if stage not in self._pending:
            return
        while self._pending:
            done = self._pending.pop(0)
            self.dump_gm(self.gm, f"graph_after_{done}")
            if done == stage:
                return

    def finish(self, code: bool) -> None:
        """The files of the remaining passes and, with ``code`` (the aclgraph modes), ``output_code.py``."""
        while self._pending:
            self.reached(self._pending[0])
        if self.folder is not None and code:
            self.gm.recompile()
            write_text(self.folder / "output_code.py", self.gm.code, "TORCH_COMPILE_DEBUG code file")


def observer_for(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], config: Any, folders: Folders, package: str,
    phase: str | None = None,
) -> GraphTransformObserver:
    """The observer of ``gm``'s passes under TorchAir config ``config`` (``phase``: its folder's name,
    default from the graph), having written ``000_aot_<phase>_graph.txt`` when the variable is on."""
    phase = phase or phase_name(gm)
    folder = folders.current_path(phase) / phase if debug_enabled() else None
    observer = GraphTransformObserver(gm, example_inputs, config, folder, fx_stages(config, package), phase)
    observer.dump_gm(gm, "graph")
    return observer
