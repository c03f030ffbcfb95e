"""npugraph_ex's ``CompilerConfig``: one flat set of options, the same keys ``torch.compile(model,
backend="npugraph_ex", options={...})`` takes.

npugraph_ex is TorchAir's successor backend, shipped as its own package (torchair:
npugraph_ex/npugraph_ex/configs/compiler_config.py, snapshot fced8842). Its options are TorchAir's aclgraph
options under flat names, so each one is a path of TorchAir's ``CompilerConfig`` tree
(:data:`TORCHAIR_PATHS`, the table TorchAir keeps in python/torchair/configs/npugraphex_config.py) and
the model honours exactly what it honours there: the SuperKernel options, and ``dump_tensor_data`` (the
data dump is written, see :mod:`pytest_npufuse.torchair.dump`). The options with no TorchAir path
(``capture_error_mode``, ``force_recapture``, ``deadlock_check``, ...) steer how a device captures and
replays the graph, which changes nothing a CPU model can observe; they are checked and recorded.
"""

from __future__ import annotations

import difflib
import os
from typing import Any, Mapping

from ...errors import ConfigError
from ...torchair.configs.compiler_config import CompilerConfig as TorchairConfig
from ...torchair.configs._options import ConfigNode, OptionValue, callable_or_none, int_range, of_type

__all__ = ["CompilerConfig"]

INT64_MAX = 2**63 - 1
_BOOL = [True, False]

# npugraph_ex option -> its path in TorchAir's config tree; the inverted ones say "do the pass" where
# TorchAir's option says "disable it".
TORCHAIR_PATHS: Mapping[str, str] = {
    "static_kernel_compile": "experimental_config.aclgraph._aclnn_static_shape_kernel",
    "super_kernel_optimize": "experimental_config.aclgraph._super_kernel_optimize",
    "super_kernel_optimize_options": "experimental_config.aclgraph._super_kernel_optimize_options",
    "super_kernel_debug_options": "experimental_config.aclgraph._super_kernel_debug_options",
    "_vllm_aclnn_static_kernel_sym_index": "experimental_config.aclgraph._aclnn_static_shape_kernel_sym_index",
    "_vllm_aclnn_static_kernel_sym_range": "experimental_config.aclgraph._aclnn_static_shape_kernel_sym_value_range",
    "inplace_pass": "debug.aclgraph.disable_reinplace_inplaceable_ops_pass",
    "input_inplace_pass": "debug.aclgraph.disable_reinplace_input_mutated_ops_pass",
    "remove_noop_ops": "experimental_config.remove_noop_ops",
    "remove_cat_ops": "debug.aclgraph.remove_cat_ops",
    "force_eager": "debug.run_eagerly",
    "pattern_fusion_pass": "experimental_config.pattern_fusion_pass",
    "clone_input": "debug.aclgraph.clone_input",
    "frozen_parameter": "experimental_config.frozen_parameter",
    "post_grad_custom_pre_pass": "post_grad_custom_pre_pass",
    "post_grad_custom_post_pass": "post_grad_custom_post_pass",
    "use_graph_pool": "aclgraph_config.use_custom_pool",
    "reuse_graph_pool_in_same_fx": "debug.aclgraph.disable_mempool_reuse_in_same_fx",
    "capture_limit": "debug.aclgraph.static_capture_size_limit",
    "clone_output": "debug.aclgraph.enable_output_clone",
    "dump_tensor_data": "dump_config.enable_dump",
    "data_dump_stage": "dump_config.data_dump_stage",
    "data_dump_dir": "dump_config.dump_path",
    "deadlock_check": "debug.deadlock_check",
}
_INVERTED = frozenset({"inplace_pass", "input_inplace_pass", "reuse_graph_pool_in_same_fx"})


def _existing_dir(value: Any) -> str:
    """npugraph_ex's ``data_dump_dir`` must name a directory that exists."""
    if not isinstance(value, str) or not os.path.isdir(value):
        return f"Please set legal dir path, {value} is not found or is not a file directory!"
    return ""


def _int_list(value: Any) -> str:
    if value is not None and not (isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value)):
        return f"the set value must be an int list or None, got {value!r}"
    return ""


class CompilerConfig(ConfigNode):
    """npugraph_ex's options with their defaults and value rules; ``torchair_config()`` is the TorchAir
    config the backend models it by."""

    def __init__(self) -> None:
        super().__init__(
            "CompilerConfig",
            force_eager=OptionValue(False, _BOOL),
            use_graph_pool=None,
            reuse_graph_pool_in_same_fx=OptionValue(True, _BOOL),
            capture_limit=OptionValue(64, check=int_range(1, INT64_MAX)),
            clone_input=OptionValue(True, _BOOL),
            clone_output=OptionValue(False, _BOOL),
            disable_static_kernel_compile_cache=OptionValue(False, _BOOL),
            static_kernel_compile=OptionValue(False, _BOOL),
            frozen_parameter=OptionValue(False, _BOOL),
            remove_noop_ops=OptionValue(True, _BOOL),
            remove_cat_ops=OptionValue(True, _BOOL),
            inplace_pass=OptionValue(True, _BOOL),
            input_inplace_pass=OptionValue(True, _BOOL),
            pattern_fusion_pass=OptionValue(True, _BOOL),
            post_grad_custom_pre_pass=OptionValue(None, check=callable_or_none),
            post_grad_custom_post_pass=OptionValue(None, check=callable_or_none),
            dump_tensor_data=OptionValue(False, _BOOL),
            data_dump_stage=OptionValue("optimized", ["original", "optimized"]),
            data_dump_dir=OptionValue("./", check=_existing_dir),
            _vllm_aclnn_static_kernel_sym_index=OptionValue(0, check=int_range(0, INT64_MAX)),
            _vllm_aclnn_static_kernel_sym_range=OptionValue(None, check=_int_list),
            super_kernel_optimize=OptionValue(False, _BOOL),
            super_kernel_optimize_options=OptionValue(None, check=of_type(dict)),
            super_kernel_debug_options=OptionValue(None, check=of_type(dict)),
            deadlock_check=OptionValue(False, _BOOL),
            capture_error_mode=OptionValue("global", ["global", "thread_local", "relaxed"]),
            mode=OptionValue("npugraph_ex", ["npugraph_ex"]),
            force_recapture=OptionValue(False, _BOOL),
        )

    def update(self, options: Mapping[str, Any] | None) -> "CompilerConfig":
        """Set the ``options={...}`` of ``torch.compile(backend="npugraph_ex")``, each checked as npugraph_ex
        checks it; a key that is no option is npugraph_ex's ValueError listing the options. Returns self."""
        for name, value in (options or {}).items():
            if name not in self._children:
                near = difflib.get_close_matches(name, list(self._children), n=1)
                raise ConfigError(
                    f"Invalid option '{name}'{f' (did you mean {near[0]!r}?)' if near else ''}. The 'CompilerConfig' "
                    f"object does not have attribute '{name}'. Supported attributes are: {sorted(self._children)}"
                )
            setattr(self, name, value)
        return self

    def as_dict(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(local options, global options) as npugraph_ex reports them: every option that is set, by name."""
        local = {
            name: child.value if isinstance(child, OptionValue) else child
            for name, child in self._children.items()
        }
        return {name: value for name, value in local.items() if value is not None}, {}

    def torchair_config(self) -> TorchairConfig:
        """The TorchAir ``CompilerConfig`` in npugraph_ex mode with every mapped option set."""
        config = TorchairConfig()
        config.mode = "npugraph_ex"
        for name, path in TORCHAIR_PATHS.items():
            child = self._children[name]
            value = child.value if isinstance(child, OptionValue) else child
            if isinstance(child, OptionValue) and value == child.default:
                continue
            *parents, leaf = path.split(".")
            node: Any = config
            for part in parents:
                node = getattr(node, part)
            setattr(node, leaf, (not value) if name in _INVERTED else value)
        return config

    def __repr__(self) -> str:
        return f"npugraph_ex.CompilerConfig({self.leaves()})"


def options_config(options: Mapping[str, Any] | None) -> TorchairConfig:
    """The TorchAir config an npugraph_ex ``options={...}`` dict stands for."""
    return CompilerConfig().update(options).torchair_config()

