"""``torchair.configs.npugraphex_config``: npugraph_ex's flat options as paths of TorchAir's config tree.

npugraph_ex's options (``torch.compile(backend="npugraph_ex", options={...})``) are TorchAir's aclgraph
options under flat names; TorchAir keeps the table here (torchair:
python/torchair/configs/npugraphex_config.py, commit fced8842), and so does the model: npugraph_ex's
``CompilerConfig`` reads it to build the TorchAir config it is modeled by.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError

__all__: list[str] = []

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
INVERTED = frozenset({"inplace_pass", "input_inplace_pass", "reuse_graph_pool_in_same_fx"})


def set_option(config: Any, name: str, value: Any) -> None:
    """Set npugraph_ex option ``name`` on TorchAir ``config`` at its path (inverted where the TorchAir
    option disables what the npugraph_ex option enables)."""
    *parents, leaf = TORCHAIR_PATHS[name].split(".")
    node = config
    for part in parents:
        node = getattr(node, part)
    setattr(node, leaf, _inverted(value) if name in INVERTED else value)


def _inverted(value: Any) -> Any:
    """TorchAir's inversion: a bool or a 0/1 flips, anything else is left for the option to refuse."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int) and value in (0, 1):
        return 1 - value
    return value


def _process_kwargs_options(config: Any, kwargs: Mapping[str, Any]) -> None:
    """Set the ``options`` entry of ``kwargs`` (a ``torch.compile`` call's) on TorchAir ``config``; a key
    that is no npugraph_ex option is TorchAir's ValueError listing the allowed ones."""
    for name, value in dict(kwargs.get("options") or {}).items():
        if name not in TORCHAIR_PATHS:
            raise ConfigError(f"Invalid option '{name}', allowed options: {sorted(TORCHAIR_PATHS)}")
        set_option(config, name, value)
