"""TorchAir's graph dump (``config.debug.graph_dump.type`` / ``.path``), written from the modeled graph.

TorchAir writes each compiled graph to ``<path>/dynamo_original_graph_<id>_rank_<rank>_pid_<pid>_ts_<ts>.<type>``
(torchair: python/torchair/configs/debug_config.py full_path; docs/zh/ascend_ir/features/basic/graph_dump.md):

- max-autotune, ``txt`` / ``pbtxt``: GE's graph as protobuf text (``name``, one ``op {...}`` per node with
  ``type``, ``input: "<producer>:<index>"``, ``attr`` and ``output_desc``). The model writes its own graph
  in that form: a ``Data`` op per input, one op per modeled kernel (its GE-style name and CANN type, the
  stream label, SuperKernel scope and core limits it was planned with, its output dtypes and shapes) and
  a ``NetOutput``. Views are not ops: a view's reader reads the op that wrote the memory.
- max-autotune, ``py``: the Python that builds the GE graph with ``ge_apis`` calls; the model builds no GE
  graph, so it is refused by name.
- aclgraph modes (reduce-overhead, npugraph_ex): TorchAir dumps only ``py``, the FX graph's code (as
  ``dynamo_optimized_graph_...``), and refuses ``txt`` / ``pbtxt``; the model does the same.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path
from typing import Mapping

import torch.fx

from ..errors import NotModeledError
from ..files import ensure_directory, write_text
from ..frontend.backend import STORAGE_FORMATS
from ..ir.program import Kernel, Program, TensorSpec
from ..session import Scope, SessionKey, current_session

# The graph ids in dump file names: one count per process, so no dump overwrites another.
_GRAPH_IDS = SessionKey("graph dump ids", lambda: itertools.count(1), Scope.PROCESS)
_GE_DTYPES = {
    "float32": "DT_FLOAT", "float16": "DT_FLOAT16", "bfloat16": "DT_BF16", "float64": "DT_DOUBLE",
    "int8": "DT_INT8", "uint8": "DT_UINT8", "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64",
    "bool": "DT_BOOL",
}


def _file(path: str | None, stage: str, graph_id: int, suffix: str) -> Path:
    stamp = time.strftime("%Y%m%d%H%M%S") + f"{time.time_ns() // 1000 % 1_000_000:06d}"
    folder = ensure_directory(Path(path or "."), "config.debug.graph_dump.path")
    return folder / f"dynamo_{stage}_graph_{graph_id}_rank_0_pid_{os.getpid()}_ts_{stamp}.{suffix}"


def _desc(spec: TensorSpec, indent: str, layout: str = "ND") -> list[str]:
    dims = " ".join(f"dim: {d}" for d in spec.shape)
    return [
        f"{indent}output_desc {{",
        f'{indent}  dtype: {_GE_DTYPES.get(spec.dtype, "DT_" + spec.dtype.upper())}',
        f"{indent}  shape {{ {dims} }}" if dims else f"{indent}  shape {{ }}",
        f'{indent}  layout: "{layout}"',
        f"{indent}}}",
    ]


def _attrs(kernel: Kernel, stream: str) -> list[tuple[str, str]]:
    notes = kernel.annotations
    attrs = [("_user_stream_label", stream)] if stream != "default" else []
    if notes.sk_scope is not None:
        attrs.append(("_super_kernel_scope", notes.sk_scope))
        attrs.append(("_super_kernel_options", notes.sk_options))
    if notes.aicore_limit is not None:
        attrs.append(("_op_aicore_num", str(notes.aicore_limit)))
    if notes.vectorcore_limit is not None:
        attrs.append(("_op_vectorcore_num", str(notes.vectorcore_limit)))
    return attrs


def graph_text(program: Program, stream_of: Mapping[str, str], name: str, formats: Mapping[str, str] | None = None) -> str:
    """``program`` as GE's graph in protobuf text form (see the module doc); ``stream_of`` maps each
    kernel to the stream it was planned on, ``formats`` an input to the storage format a format cast
    gave it (a weight cast to FRACTAL_NZ is dumped with that layout; every other tensor is ND)."""
    source: dict[str, str] = {}
    lines = [f'name: "{name}"']
    for index, buffer in enumerate(program.inputs):
        source[buffer] = f"{buffer}:0"
        lines += ["op {", f'  name: "{buffer}"', '  type: "Data"']
        lines.append(f'  attr {{ key: "index" value {{ i: {index} }} }}')
        spec = program.buffers.get(buffer)  # a symbolic-size input has no tensor buffer
        layout = (formats or {}).get(buffer, "ND")
        lines += (_desc(spec.spec, "  ", layout) if spec is not None else []) + ["}"]
    for kernel in program.kernels:
        for position, output in enumerate(kernel.outputs):
            source[output] = f"{kernel.name}:{position}"
        lines += ["op {", f'  name: "{kernel.name}"', f'  type: "{kernel.info.kernel_type}"']
        lines += [f'  input: "{source.get(program.storage(b), program.storage(b) + ":0")}"' for b in kernel.inputs]
        attrs = _attrs(kernel, stream_of.get(kernel.name, kernel.stream))
        lines += [f'  attr {{ key: "{key}" value {{ s: {json.dumps(value)} }} }}' for key, value in attrs]
        for spec in kernel.output_specs:
            lines += _desc(spec, "  ")
        lines.append("}")
    outputs = [source.get(program.storage(b), f"{program.storage(b)}:0") for b in program.outputs if b is not None]
    lines += ["op {", '  name: "NetOutput"', '  type: "NetOutput"', *(f'  input: "{o}"' for o in outputs), "}"]
    return "\n".join(lines) + "\n"


def write_graph_dump(
    kind: str | None, path: str | None, mode: str, gm: torch.fx.GraphModule, program: Program,
    stream_of: Mapping[str, str],
) -> Path | None:
    """Write the graph dump ``config.debug.graph_dump`` asks for (``kind``: its type, ``path``: its folder;
    ``stream_of``: each kernel's planned stream), or None when it asks for none."""
    if kind is None:
        return None
    graph_id = next(current_session()[_GRAPH_IDS])
    if mode in ("reduce-overhead", "npugraph_ex"):
        if kind != "py":
            raise NotModeledError(
                f"Graph dump for aclGraph only support 'py' type, but got: {kind}. Please check compile config "
                "setting: config.debug.graph_dump.type (TorchAir's own refusal, kept by pytest-npufuse).",
                argument="config.debug.graph_dump.type"
            )
        target = _file(path, "optimized", graph_id, "py")
        write_text(target, gm.print_readable(False), "graph dump")
        return target
    if kind == "py":
        raise NotModeledError(
            "config.debug.graph_dump.type = 'py' dumps the Python that builds TorchAir's GE graph, which "
            "pytest-npufuse does not build; 'txt' or 'pbtxt' write the modeled graph in GE's text form.",
            argument="config.debug.graph_dump.type"
        )
    target = _file(path, "original", graph_id, kind)
    formats = gm.meta.get(STORAGE_FORMATS, {})
    write_text(target, graph_text(program, stream_of, f"graph_{graph_id}", formats), "graph dump")
    return target
