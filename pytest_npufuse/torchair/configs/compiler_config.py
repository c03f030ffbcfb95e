"""``CompilerConfig``: TorchAir's whole config tree, attribute-compatible with ``torchair.CompilerConfig``.

The tree follows TorchAir of today (torchair: python/torchair/configs/*.py, snapshot fced8842): every
option real code sets is accepted with TorchAir's value rules, so a script moves between a CPU CI and an
NPU unchanged; a misspelt option is an error naming the nearest real one. The options that change what
the modeled NPU does are honoured (see :meth:`CompilerConfig.honoured`):

- ``mode``: max-autotune (GE graph sink), reduce-overhead (aclgraph replay, deprecated by TorchAir) or
  npugraph_ex;
- ``experimental_config.aclgraph._aclnn_static_shape_kernel`` + ``_super_kernel_optimize`` (with
  ``_super_kernel_optimize_options`` / ``_super_kernel_debug_options``): SuperKernel in the aclgraph
  modes, for ``torch.npu.super_kernel_scope_begin/end`` ranges;
- ``ge_config.enable_single_stream``: every op on one stream in max-autotune;
- ``debug.aclgraph.disable_reinplace_input_mutated_ops_pass``: off, the aclgraph modes reinplace the
  registered functional ops that update graph inputs (:mod:`pytest_npufuse.torchair._reinplace`).

Every other option is accepted and recorded (``CompilerConfig.leaves()``) with no modeled effect: dump
paths, passes and caches change nothing a CPU model can observe.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping

import torch.fx

from ...frontend.rewrites import apply_rules
from ...ir.program import Program
from ...pipeline.graph import GraphOptions
from ...vocabulary import CONFIG_MODES, Mode
from ..core.utils import logger
from .._datadump import DataDump, DumpRequest, plan_dump
from .._fxpass import run_passes
from .._graphdump import write_graph_dump
from .._reinplace import keep_write_backs, reinplace_inplaceable_ops
from ._options import CallableValue, ConfigNode, DebugDumpNode, OptionValue, PathValue, int_range, of_type

__all__ = ["CompilerConfig"]

INT64_MAX = 2**63 - 1
_BOOL = [True, False]


def _debug(path: str) -> ConfigNode:
    return ConfigNode(
        path,
        graph_dump=DebugDumpNode(f"{path}.graph_dump", with_path=True, type=OptionValue(None, [None, "txt", "pbtxt", "py"])),
        data_dump=DebugDumpNode(f"{path}.data_dump", with_path=True, type=OptionValue(None, [None, "npy"]), filter=None),
        fx_summary=DebugDumpNode(
            f"{path}.fx_summary", with_path=False, type=OptionValue(None, [None, "csv"]), skip_compile=OptionValue(True, _BOOL)
        ),
        run_eagerly=OptionValue(False, _BOOL),
        deadlock_check=OptionValue(False, _BOOL),
        aclgraph=ConfigNode(
            f"{path}.aclgraph",
            disable_reinplace_inplaceable_ops_pass=OptionValue(False, _BOOL),
            disable_reinplace_input_mutated_ops_pass=OptionValue(False, _BOOL),
            disable_mempool_reuse_in_same_fx=OptionValue(False, _BOOL),
            enable_output_clone=OptionValue(False, _BOOL),
            static_capture_size_limit=OptionValue(64, check=int_range(1, INT64_MAX)),
            clone_input=OptionValue(True, _BOOL),
            remove_cat_ops=OptionValue(True, _BOOL),
        ),
    )


def _experimental(path: str) -> ConfigNode:
    return ConfigNode(
        path,
        cc_parallel_enable=OptionValue(False, _BOOL),
        keep_inference_input_mutations=OptionValue(True, _BOOL),
        memory_efficiency=OptionValue(False, _BOOL),
        frozen_parameter=OptionValue(False, _BOOL),
        static_model_ops_lower_limit=OptionValue(None, check=lambda v: "" if v is None else int_range(-1, INT64_MAX)(v)),
        jit_compile=OptionValue("auto", ["auto"]),
        npu_fx_pass=OptionValue(False, _BOOL),
        aot_config_enable_joint_graph=OptionValue(False, _BOOL),
        aot_config_output_loss_index=OptionValue(0),
        topology_sorting_strategy=OptionValue("DFS", ["BFS", "DFS", "RDFS", "StableRDFS"]),
        enable_ref_data=OptionValue(False, _BOOL),
        enable_view_optimize=OptionValue(True, _BOOL),
        remove_noop_ops=OptionValue(True, _BOOL),
        tiling_schedule_optimize=OptionValue(False, _BOOL),
        pattern_fusion_pass=OptionValue(True, _BOOL),
        aclgraph=ConfigNode(
            f"{path}.aclgraph",
            _aclnn_static_shape_kernel=OptionValue(False, _BOOL),
            _aclnn_static_shape_kernel_build_dir=OptionValue(None, check=of_type(str)),
            _aclnn_static_shape_kernel_sym_value_range=OptionValue(None, check=of_type(list, tuple), text=False),
            _aclnn_static_shape_kernel_sym_index=OptionValue(0, check=int_range(0, INT64_MAX)),
            _super_kernel_optimize=OptionValue(False, _BOOL),
            _super_kernel_optimize_options=OptionValue(None, check=of_type(dict), text=False),
            _super_kernel_debug_options=OptionValue(None, check=of_type(dict), text=False),
        ),
    )


def _ge_config(path: str) -> ConfigNode:
    return ConfigNode(
        path,
        enable_single_stream=OptionValue(False, _BOOL),
        oo_level=OptionValue("O3", ["O1", "O3"]),
        oo_constant_folding=OptionValue(None, [None, True, False]),
        oo_dead_code_elimination=OptionValue(None, [None, True, False]),
        export_compile_stat=OptionValue("2", ["0", "1", "2"]),
        aicore_num=OptionValue(None, check=of_type(str)),
        optimization_switch=OptionValue(None, check=of_type(str)),
    )


def _export(path: str) -> ConfigNode:
    return ConfigNode(
        path,
        export_mode=OptionValue(False, _BOOL),
        export_path_dir=PathValue("./", "dir", required=True),
        export_name=None,
        weight_name=None,
        inputs_name=None,
        experimental=ConfigNode(
            f"{path}.experimental",
            enable_record_nn_module_stack=OptionValue(False, _BOOL),
            auto_atc_config_generated=OptionValue(False, _BOOL),
            enable_lite_export=OptionValue(False, _BOOL),
        ),
    )


def _dump_config(path: str) -> ConfigNode:
    return ConfigNode(
        path,
        enable_dump=OptionValue(False, _BOOL),
        dump_path=PathValue("./", "dir", required=True),
        dump_mode=OptionValue("all", ["input", "output", "all"]),
        quant_dumpable=OptionValue(False, _BOOL),
        dump_step=OptionValue("", check=of_type(str)),
        dump_layer=OptionValue("", check=of_type(str)),
        dump_data=OptionValue("tensor", ["tensor", "stats"]),
        dump_config_path=PathValue(None, ".json"),
        data_dump_stage=OptionValue("optimized", ["original", "optimized"]),
    )


class CompilerConfig(ConfigNode):
    """Compiler settings, attribute-compatible with ``torchair.CompilerConfig`` (see the module doc)."""

    def __init__(self) -> None:
        super().__init__(
            "config",
            debug=_debug("config.debug"),
            aoe_config=ConfigNode(
                "config.aoe_config", aoe_mode=OptionValue(None, [None, "2"]), work_path=PathValue("./", "dir", required=True),
                aoe_config_file=PathValue(None, "file"),
            ),
            export=_export("config.export"),
            dump_config=_dump_config("config.dump_config"),
            fusion_config=ConfigNode("config.fusion_config", fusion_switch_file=PathValue(None, "file")),
            experimental_config=_experimental("config.experimental_config"),
            inference_config=ConfigNode("config.inference_config", dynamic_gears_merge_policy=OptionValue("zip", ["zip", "product"])),
            ge_config=_ge_config("config.ge_config"),
            aclgraph_config=ConfigNode("config.aclgraph_config", use_custom_pool=None),
            mode=OptionValue(Mode.MAX_AUTOTUNE.value, list(CONFIG_MODES)),
            post_grad_custom_pre_pass=CallableValue(),
            post_grad_custom_post_pass=CallableValue(),
        )

    @property
    def run_mode(self) -> str:
        return self.mode.raw

    def graph_options(self) -> GraphOptions:
        """What this config decides about how its graphs are modeled; its data dump, when enabled,
        watches each call of every graph (:mod:`pytest_npufuse.torchair._datadump`), and its graph dump
        writes each graph (:mod:`pytest_npufuse.torchair._graphdump`); compiles and calls are logged to
        the ``torchair`` logger, as TorchAir logs them; its FX passes edit each aten graph
        (:mod:`pytest_npufuse.torchair._fxpass`); with ``debug.aclgraph.enable_output_clone`` an aclgraph
        returns copies of its outputs."""
        watch = self._plan_dump if self.dump_config.enable_dump.raw else None
        dump_graph = self._write_graph_dump if self.debug.graph_dump.type.raw is not None else None
        return GraphOptions(
            Mode(self.run_mode), bool(self.ge_config.enable_single_stream.raw), self.superkernel_options(), watch,
            dump_graph, logger, (self.fx_passes(self),),
            output_clone=bool(self.debug.aclgraph.enable_output_clone.raw),
        )

    def _plan_dump(
        self, mode: str, gm: torch.fx.GraphModule, program: Program, stream_of: Mapping[str, str]
    ) -> DataDump | None:
        """The data dump of one graph, as ``dump_config`` asks when the graph is compiled."""
        dump = self.dump_config
        request = DumpRequest(
            dump.enable_dump.raw, dump.dump_data.raw, dump.dump_config_path.raw, dump.dump_path.raw, dump.dump_mode.raw,
            dump.dump_layer.raw, dump.dump_step.raw, self.experimental_config.aclgraph._super_kernel_optimize.raw,
            dump.quant_dumpable.raw,
        )
        return plan_dump(request, mode, gm, program, stream_of)

    def _write_graph_dump(
        self, mode: str, gm: torch.fx.GraphModule, program: Program, stream_of: Mapping[str, str]
    ) -> Path | None:
        """The graph dump of one graph, as ``debug.graph_dump`` asks when the graph is compiled."""
        dump = self.debug.graph_dump
        return write_graph_dump(dump.type.raw, dump.path, mode, gm, program, stream_of)

    def fx_passes(self, handed: Any) -> Callable[[Any, Any], None]:
        """The graph pass running this config's ``post_grad_custom_pre_pass`` and ``_post_pass``, each
        handed ``handed`` as its config (npugraph_ex hands its own), and between them the user's pattern
        replacements (``register_replacement``) unless ``experimental_config.pattern_fusion_pass`` is
        False, then TorchAir's reinplacing of registered ops into the graph inputs they update, which the
        aclgraph modes run unless ``debug.aclgraph.disable_reinplace_input_mutated_ops_pass`` (npugraph_ex:
        ``input_inplace_pass=False``) turns it off."""
        aclgraph = Mode(self.run_mode).aclgraph
        kept = aclgraph and self.debug.aclgraph.disable_reinplace_input_mutated_ops_pass.raw
        reinplace = [("", keep_write_backs if kept else reinplace_inplaceable_ops)] if aclgraph else []
        patterns = [("apply_pattern_passes", apply_rules)] if self.experimental_config.pattern_fusion_pass.raw else []
        return partial(
            run_passes, self.post_grad_custom_pre_pass.raw, self.post_grad_custom_post_pass.raw, handed,
            (*patterns, *reinplace),
        )

    def superkernel_options(self) -> str | None:
        """The aclgraph SuperKernel options text CANN receives (``k=v:k=v``, as TorchAir formats the
        two option dicts), or None when aclgraph SuperKernel is off (it needs static kernel compilation
        and ``_super_kernel_optimize``)."""
        aclgraph = self.experimental_config.aclgraph
        if not (aclgraph._aclnn_static_shape_kernel.raw and aclgraph._super_kernel_optimize.raw):
            return None
        return ":".join(
            f"{key}={_option_text(value)}"
            for table in (aclgraph._super_kernel_optimize_options.raw, aclgraph._super_kernel_debug_options.raw)
            for key, value in (table or {}).items()
        )

    def honoured(self) -> Mapping[str, Any]:
        """The options that change the model, as set (for reports)."""
        return {
            "mode": self.run_mode,
            "superkernel_options": self.superkernel_options(),
            "single_stream": bool(self.ge_config.enable_single_stream.raw),
        }

    def __repr__(self) -> str:
        return f"CompilerConfig(mode={self.run_mode!r})"


def _option_text(value: Any) -> str:
    """One option value as CANN reads it: lists comma-joined, booleans as 1/0."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return str(value)
