"""npugraph_ex's options, as TorchAir maps them onto its config (torchair:
python/torchair/configs/npugraphex_config.py), and the ``backend="npugraph_ex"`` backend they configure.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ...pipeline.backend import backend_for
from .compiler_config import CompilerConfig

# npugraph_ex's options -> CompilerConfig paths (torchair: python/torchair/configs/npugraphex_config.py);
# the inverted ones say "do the pass" where the config says "disable it".
NPUGRAPH_EX_OPTIONS: Mapping[str, str] = {
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
}
_INVERTED = frozenset({"inplace_pass", "input_inplace_pass", "reuse_graph_pool_in_same_fx"})


def npugraph_ex_config(options: Mapping[str, Any] | None) -> CompilerConfig:
    """The TorchAir config an npugraph_ex ``options={...}`` dict stands for; an unknown key is
    TorchAir's ValueError."""
    config = CompilerConfig()
    config.mode = "npugraph_ex"
    for key, value in (options or {}).items():
        if key not in NPUGRAPH_EX_OPTIONS:
            raise ValueError(f"Invalid option '{key}', allowed options: {sorted(NPUGRAPH_EX_OPTIONS)}")
        *parents, leaf = NPUGRAPH_EX_OPTIONS[key].split(".")
        node: Any = config
        for part in parents:
            node = getattr(node, part)
        setattr(node, leaf, (not value) if key in _INVERTED and isinstance(value, bool) else value)
    return config


def npugraph_ex_backend(gm: Any, example_inputs: Sequence[Any], options: Mapping[str, Any] | None = None) -> Callable[..., Any]:
    """``torch.compile(model, backend="npugraph_ex", options={...})`` under the shim."""
    return backend_for(npugraph_ex_config(options).graph_options(), None)(gm, example_inputs)
