"""TorchAir's data dump, written from the modeled run: the tensors of a graph's ops, where TorchAir puts them.

``dump_config.enable_dump = True`` (npugraph_ex: ``options={"dump_tensor_data": True}``) makes every
call of a compiled graph write files under ``<dump_path>/worldsize1_global_rank0/`` (one modeled rank).
The layout depends on the mode, as on a device:

- aclgraph modes (``reduce-overhead``, ``npugraph_ex``): TorchAir puts a ``save_npugraph_tensor`` after
  every tensor of the FX graph (inputs included) and the files are ``<node name>_device_0_<count>.pt``,
  ``torch.save`` of the tensor (torchair: python/torchair/_acl_concrete_graph/utils.py
  insert_save_npugraph_tensor; docs/zh/npugraph_ex/dfx/data_dump.md). A tensor the model already saves
  with ``torch_npu.save_npugraph_tensor`` is skipped. With ``super_kernel_optimize`` on, TorchAir turns
  the dump off with a warning, and so does the model.
- max-autotune (GE): GE writes one file per op under ``<timestamp>/0/graph_<id>/1/<iteration>/``, named
  ``<op type>.<op name>.<task id>.<stream id>.<timestamp>`` (docs/zh/ascend_ir/features/advanced/
  data_dump.md). The model writes the same names with ``.pt``: ``torch.save`` of ``{"input": [...],
  "output": [...]}`` (``dump_mode`` picks which), since GE's own binary format carries device
  addresses the model has not got. ``dump_layer`` (op names, space separated) and ``torchair.scope.
  data_dump()`` pick the ops (their union; neither: every op); ``dump_step`` (``"0|3-5"``) the calls.

In max-autotune TorchAir also hands GE the dump options as a JSON file, and so does the model:
``ge_dump_data_json/dump_options_worldsize1_rank0_pid<pid>.json`` in the working directory, holding
``{"dump": {"dump_path", "dump_mode", "dump_data", "dump_step", "quant_dumpable", "dump_list": [...]}}``
with one ``{"model_name": "graph_<id>", "layer": [...]}`` entry per graph compiled in the process (the
``dump_layer`` names and the op types inside ``torchair.scope.data_dump()``), rewritten as each graph
compiles (torchair: python/torchair/_ge_concrete_graph/fx2ge_converter.py _set_dump_options_json).

``dump_data = "stats"`` and ``dump_config_path`` are refused by name: they select outputs (csv
statistics, a JSON-driven dump) the model does not write. The dump changes no modeled time.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch
import torch.fx

from ..errors import NotModeledError
from ..execute.graph import Observer
from ..files import ensure_directory, write_text
from ..ir.program import Program
from ..session import Scope, SessionKey, current_session
from ..torch_npu.dump import save_file, saved_path

RANK_DIR = "worldsize1_global_rank0"
GE_MODE = "max-autotune"
ACLGRAPH_MODES = ("reduce-overhead", "npugraph_ex")
# The graph ids in dump folder names: one count per process, so no dump overwrites another.
_GE_GRAPH_IDS = SessionKey("GE data dump graph ids", lambda: itertools.count(1), Scope.PROCESS)
_SAVE = torch.ops.npu.save_npugraph_tensor.default
OPTIONS_DIR = "ge_dump_data_json"
# The dump options JSON of the process: its options (from the first GE graph dumped) and one entry per graph.
_GE_DUMP_OPTIONS = SessionKey("GE data dump options JSON", lambda: {}, Scope.PROCESS)


@dataclass(frozen=True)
class DumpRequest:
    """What a config's ``dump_config`` asks for, read when a graph is compiled (the config stays
    mutable until then); ``super_kernel_optimize`` is ``experimental_config.aclgraph._super_kernel_optimize``,
    which turns an aclgraph dump off."""

    enable_dump: bool
    dump_data: str | None
    dump_config_path: str | None
    dump_path: str
    dump_mode: str | None
    dump_layer: str | None
    dump_step: str | None
    super_kernel_optimize: bool
    quant_dumpable: bool = False


@dataclass(frozen=True)
class DumpedOp:
    """One op GE dumps: its graph node and the file name GE gives it (without the call's timestamp)."""

    node: str
    name: str


@dataclass(frozen=True)
class DataDump:
    """What one compiled graph dumps and where. Each call of the graph asks :meth:`for_call` for the
    observer the executor hands every node as it runs (``calls`` numbers the calls, for ``dump_step``)."""

    directory: Path
    aclgraph_nodes: frozenset[str] = frozenset()
    ge_ops: Mapping[str, DumpedOp] = field(default_factory=dict)
    dump_inputs: bool = True
    dump_outputs: bool = True
    steps: frozenset[int] | None = None
    calls: Iterator[int] = field(default_factory=itertools.count, compare=False)

    def for_call(self) -> Observer | None:
        """The observer of the next call of the graph, or None when ``dump_step`` leaves this call out."""
        call = next(self.calls)
        if self.steps is not None and call not in self.steps:
            return None
        return lambda node, inputs, value: self._write(node, inputs, value, call)

    def _write(self, node: torch.fx.Node, inputs: Sequence[Any], value: Any, call: int) -> None:
        """Write the files of ``node`` (its tensor ``inputs`` and its result ``value``) for this call."""
        if node.name in self.aclgraph_nodes and isinstance(value, torch.Tensor):
            save_file(value.detach().clone(), saved_path(str(self.directory / f"{node.name}.pt")), "data dump file")
        dumped = self.ge_ops.get(node.name)
        if dumped is not None:
            outputs = [v for v in (value if isinstance(value, (tuple, list)) else (value,)) if isinstance(v, torch.Tensor)]
            record = {
                "input": [t.detach().clone() for t in inputs] if self.dump_inputs else [],
                "output": [t.detach().clone() for t in outputs] if self.dump_outputs else [],
            }
            path = self.directory / str(call) / f"{dumped.name}.{int(time.time() * 1e6)}.pt"
            save_file(record, path, "data dump file")


def _steps(text: str) -> frozenset[int] | None:
    """``dump_step`` as a set of call indexes: ``"0|3-5"``; empty: every call."""
    if not text:
        return None
    steps: set[int] = set()
    for part in text.split("|"):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise NotModeledError(f"dump_config.dump_step = {text!r}: write call numbers and ranges like '0|3-5'.")
        steps.update(range(int(low), int(high or low) + 1))
    return frozenset(steps)


def _aclgraph_nodes(gm: torch.fx.GraphModule) -> frozenset[str]:
    """Every tensor node TorchAir puts a save after: not the output, not a save, not a tensor already saved."""
    nodes = set()
    for node in gm.graph.nodes:
        if node.op == "output" or node.target is _SAVE:
            continue
        if any(user.target is _SAVE for user in node.users):
            continue
        if isinstance(node.meta.get("val"), torch.Tensor):
            nodes.add(node.name)
    return frozenset(nodes)


def _ge_ops(program: Program, stream_of: Mapping[str, str], layer: str) -> dict[str, DumpedOp]:
    """The kernels GE dumps: those named in ``dump_layer`` or inside ``data_dump()``; all without either."""
    named = set(layer.split())
    chosen = [k for k in program.kernels if k.name in named or k.annotations.data_dump] or list(program.kernels)
    streams = {stream: index for index, stream in enumerate(dict.fromkeys(stream_of.values()))}
    return {
        k.node: DumpedOp(k.node, f"{k.info.kernel_type}.{k.name}.{k.index}.{streams.get(stream_of.get(k.name, ''), 0)}")
        for k in chosen
    }


def plan_dump(
    dump: DumpRequest, mode: str, gm: torch.fx.GraphModule, program: Program, stream_of: Mapping[str, str]
) -> DataDump | None:
    """What one graph dumps in ``mode`` as ``dump`` asks (``stream_of``: kernel -> stream), or None."""
    if not dump.enable_dump:
        return None
    if dump.dump_data == "stats":
        raise NotModeledError(
            "dump_config.dump_data = 'stats' (per-op statistics in csv) is not modeled by pytest-npufuse; "
            "dump_data = 'tensor' writes the modeled tensors.", argument="dump_config.dump_data"
        )
    if dump.dump_config_path is not None:
        raise NotModeledError(
            f"dump_config.dump_config_path = {dump.dump_config_path!r}: a JSON-configured dump (acl.json) is "
            "not modeled by pytest-npufuse; set dump_mode, dump_layer and dump_step on the config instead.",
            argument="dump_config.dump_config_path"
        )
    root = Path(dump.dump_path) / RANK_DIR
    if mode in ACLGRAPH_MODES:
        if dump.super_kernel_optimize:
            warnings.warn(
                "When super_kernel_optimize is enabled, the dump_config.enable_dump configuration becomes invalid.",
                stacklevel=3,  # the model code that compiles the graph, past CompilerConfig._plan_dump
            )
            return None
        ensure_directory(root, "dump_config.dump_path")
        return DataDump(root, aclgraph_nodes=_aclgraph_nodes(gm))
    if mode != GE_MODE:
        return None
    graph_id = next(current_session()[_GE_GRAPH_IDS])
    write_dump_options(dump, root, f"graph_{graph_id}", _layers(program, dump.dump_layer or ""))
    folder = root / time.strftime("%Y%m%d%H%M%S") / "0" / f"graph_{graph_id}" / "1"
    return DataDump(
        folder,
        ge_ops=_ge_ops(program, stream_of, dump.dump_layer or ""),
        dump_inputs=dump.dump_mode in ("input", "all"),
        dump_outputs=dump.dump_mode in ("output", "all"),
        steps=_steps(dump.dump_step or ""),
    )



def _layers(program: Program, layer: str) -> list[str]:
    """The layers a GE graph's entry of the dump options names: the ``dump_layer`` names, then the op
    types of the kernels inside ``torchair.scope.data_dump()``, each once."""
    return list(dict.fromkeys([*layer.split(), *(k.info.kernel_type for k in program.kernels if k.annotations.data_dump)]))


def write_dump_options(dump: DumpRequest, root: Path, model_name: str, layers: Sequence[str]) -> Path:
    """Add ``model_name``'s entry to the process's dump options and write them where TorchAir does; the
    options themselves are those of the first graph dumped, as TorchAir keeps them."""
    options = current_session()[_GE_DUMP_OPTIONS]
    if not options:
        values = {
            "dump_path": os.path.join(dump.dump_path, RANK_DIR), "dump_mode": dump.dump_mode,
            "dump_data": dump.dump_data, "dump_step": dump.dump_step, "quant_dumpable": "1" if dump.quant_dumpable else "0",
        }
        options["dump"] = {key: str(value) for key, value in values.items() if value is not None and str(value).strip()}
        options["dump"]["dump_list"] = []
    entry: dict[str, Any] = {"model_name": model_name}
    if layers:
        entry["layer"] = list(layers)
    options["dump"]["dump_list"].append(entry)
    path = ensure_directory(Path.cwd() / OPTIONS_DIR, "ge_dump_data_json") / f"dump_options_worldsize1_rank0_pid{os.getpid()}.json"
    write_text(path, json.dumps(options, indent=4, ensure_ascii=False), "dump options file")
    return path
