"""CPU reference kernels for the ``torch_npu`` operators of real LLM inference code.

To model an Ascend NPU on a machine without one, this package provides torch_npu's fused operators with
the same Python call signatures, defaults and ``torch.ops.npu`` schemas, organised by op family:

* :mod:`.activation` - ``npu_gelu``, ``npu_fast_gelu``, ``fast_gelu`` (and ``npu_gelu_backward``,
  ``npu_fast_gelu_backward``), ``npu_silu`` (and ``npu_silu_``, ``npu_silu_backward``), ``npu_mish`` (and
  ``npu_mish_backward``), ``npu_gelu_mul``, ``npu_clipped_swiglu``, ``npu_geglu`` (and ``npu_geglu_grad``)
* :mod:`.quant` - ``npu_quant_matmul``, ``npu_dequant_swiglu_quant``, ``npu_swiglu`` (and
  ``npu_swiglu_backward``), ``npu_dynamic_quant``,
  ``npu_quantize``, ``npu_weight_quant_batchmatmul``, ``npu_trans_quant_param``, ``npu_anti_quant``,
  ``npu_dynamic_block_quant``
* :mod:`.norm` - ``npu_rms_norm`` (and ``npu_rms_norm_backward``), ``npu_add_rms_norm`` (and its in-place ``_v2``),
  ``npu_rms_norm_quant``, ``npu_add_layer_norm`` (and ``npu_add_layer_norm_backward``),
  ``npu_add_rms_norm_quant``, ``npu_add_rms_norm_dynamic_quant``, ``npu_layer_norm_eval``,
  ``npu_scaled_masked_softmax`` (and ``npu_scaled_masked_softmax_backward``)
* :mod:`.rope` - ``npu_mrope``, ``npu_rotary_mul`` (and ``npu_rotary_mul_backward``), ``npu_apply_rotary_pos_emb``,
  ``npu_interleave_rope``,
  ``npu_kv_rmsnorm_rope_cache`` and ``_v2``, ``npu_mla_prolog``, ``npu_mla_prolog_v2``, ``npu_mla_prolog_v3``
* :mod:`.moe` - ``npu_moe_gating_top_k`` (and ``npu_moe_gating_top_k_backward``), ``npu_grouped_matmul``,
  ``npu_grouped_matmul_finalize_routing``
* :mod:`.moe_routing` - ``npu_moe_gating_top_k_softmax``, ``npu_moe_init_routing``, ``npu_moe_init_routing_v2``,
  ``npu_moe_init_routing_quant``, ``npu_moe_compute_expert_tokens``, ``npu_moe_finalize_routing``,
  ``npu_moe_re_routing``, ``_npu_group_topk``
* :mod:`.moe_permute` - ``npu_moe_token_permute``, ``npu_moe_token_unpermute`` (and their ``_grad_v2``)
* :mod:`.moe_distribute` - ``npu_moe_distribute_dispatch``, ``npu_moe_distribute_combine`` and their ``_v2``
* :mod:`.attention` - ``npu_fused_infer_attention_score``, ``npu_incre_flash_attention``,
  ``npu_prompt_flash_attention``, ``npu_fusion_attention`` (and ``npu_fusion_attention_grad``),
  ``npu_fused_infer_attention_score_v2``
* :mod:`.atb` - the private ATB ops ``_npu_flash_attention``, ``_npu_flash_attention_unpad``,
  ``_npu_flash_attention_qlens``, ``_npu_paged_attention``, ``_npu_reshape_and_cache``
* :mod:`.dump` - ``save_npugraph_tensor``
* :mod:`.dropout` - ``_npu_dropout_gen_mask``
* :mod:`.weight_pack` - ``npu_convert_weight_to_int4pack``
* :mod:`.layout` - ``npu_transpose``, ``npu_broadcast``, ``npu_slice``, ``npu_pad``
* :mod:`.indexing` - ``npu_max``, ``npu_min`` (and their ``_backward``), ``npu_sort_v2``, ``npu_one_hot``
* :mod:`.loss` - ``npu_cross_entropy_loss`` (and ``npu_cross_entropy_loss_backward``)
* :mod:`.linear_attention` - ``npu_recurrent_gated_delta_rule``, ``npu_chunk_gated_delta_rule``
* :mod:`.matmul` - ``npu_mm_all_reduce_base``, ``npu_transpose_batchmatmul``, ``_npu_matmul_add_fp32``,
  ``npu_linear`` (and ``npu_linear_backward``)
* :mod:`.memory` - ``npu_format_cast``, ``npu_scatter_nd_update``, ``npu_scatter_nd_update_``,
  ``npu_prefetch``, ``npu_top_k_top_p``, ``npu_scatter_pa_kv_cache``, ``npu_confusion_transpose``
  (and ``npu_confusion_transpose_backward``),
  ``scatter_update``, ``scatter_update_``

Each op is declared once through :func:`.registry.npu_op` (schema, argument checks, CPU kernel, fake
kernel, op-catalog entry), so ``torch.compile(..., fullgraph=True)`` leaves one opaque
``npu.<name>.default`` node per call, which is what a scope or fusion pass needs to see.  The kernels
are bit-deterministic on CPU, whatever the thread count (see :mod:`.fixedorder`).

The graph-capture helpers of the attention ops (their ``.out`` forms and the ``_npu_*_get_max_workspace`` /
``_npu_paged_attention_get_workspace`` queries) are attributes here but not ops of their own (they run
the declared op, or return the empty scratch the CPU kernels need), so ``__all__`` lists only ops.

Beside the ops, as torch_npu: its dtype codes (``torch_npu.hifloat8``, ``torch_npu.float4_e2m1fn_x2``,
...: :mod:`.dtypes`) and the submodules ``torch_npu.contrib`` (its quantised Linear modules) and
``torch_npu.onnx`` (ONNX export of the ops), each loaded by its own import, as torch_npu loads them.

An attribute torch_npu has but this package lacks raises :class:`MissingOpError`, which says how to
add the op.
"""

from __future__ import annotations

from ..errors import MissingOpError
from .activation import (
    fast_gelu,
    npu_clipped_swiglu,
    npu_fast_gelu,
    npu_fast_gelu_backward,
    npu_geglu,
    npu_geglu_grad,
    npu_gelu,
    npu_gelu_backward,
    npu_gelu_mul,
    npu_mish,
    npu_mish_backward,
    npu_silu,
    npu_silu_,
    npu_silu_backward,
)
from .atb import (
    _npu_flash_attention,
    _npu_flash_attention_qlens,
    _npu_flash_attention_unpad,
    _npu_paged_attention,
    _npu_paged_attention_get_workspace,
    _npu_reshape_and_cache,
)
from .attention import (
    _npu_fused_infer_attention_score_get_max_workspace,
    _npu_fused_infer_attention_score_v2_get_max_workspace,
    npu_fused_infer_attention_score,
    npu_fused_infer_attention_score_v2,
    npu_fusion_attention,
    npu_fusion_attention_grad,
    npu_incre_flash_attention,
    npu_prompt_flash_attention,
)
from .dropout import _npu_dropout_gen_mask
from .dtypes import DTYPE_CODES
from .dump import save_npugraph_tensor
from .indexing import npu_max, npu_max_backward, npu_min, npu_min_backward, npu_one_hot, npu_sort_v2
from .layout import npu_broadcast, npu_pad, npu_slice, npu_transpose
from .loss import npu_cross_entropy_loss, npu_cross_entropy_loss_backward
from .linear_attention import npu_chunk_gated_delta_rule, npu_recurrent_gated_delta_rule
from .matmul import (
    _npu_matmul_add_fp32,
    npu_linear,
    npu_linear_backward,
    npu_mm_all_reduce_base,
    npu_transpose_batchmatmul,
)
from .memory import (
    npu_confusion_transpose,
    npu_confusion_transpose_backward,
    npu_format_cast,
    npu_prefetch,
    npu_scatter_nd_update,
    npu_scatter_nd_update_,
    npu_scatter_pa_kv_cache,
    npu_top_k_top_p,
    scatter_update,
    scatter_update_,
)
from .moe import (
    npu_grouped_matmul,
    npu_grouped_matmul_finalize_routing,
    npu_moe_gating_top_k,
    npu_moe_gating_top_k_backward,
)
from .moe_distribute import (
    npu_moe_distribute_combine,
    npu_moe_distribute_combine_v2,
    npu_moe_distribute_dispatch,
    npu_moe_distribute_dispatch_v2,
)
from .moe_routing import (
    _npu_group_topk,
    npu_moe_compute_expert_tokens,
    npu_moe_finalize_routing,
    npu_moe_gating_top_k_softmax,
    npu_moe_init_routing,
    npu_moe_init_routing_quant,
    npu_moe_init_routing_v2,
    npu_moe_re_routing,
)
from .moe_permute import (
    npu_moe_token_permute,
    npu_moe_token_permute_grad_v2,
    npu_moe_token_unpermute,
    npu_moe_token_unpermute_grad_v2,
)
from .norm import (
    npu_add_layer_norm,
    npu_add_layer_norm_backward,
    npu_add_rms_norm,
    npu_add_rms_norm_dynamic_quant,
    npu_add_rms_norm_quant,
    npu_add_rms_norm_v2,
    npu_layer_norm_eval,
    npu_rms_norm,
    npu_rms_norm_quant,
    npu_rms_norm_backward,
    npu_scaled_masked_softmax,
    npu_scaled_masked_softmax_backward,
)
from .quant import (
    npu_anti_quant,
    npu_dequant_swiglu_quant,
    npu_dynamic_block_quant,
    npu_dynamic_quant,
    npu_quant_matmul,
    npu_quantize,
    npu_swiglu,
    npu_swiglu_backward,
    npu_trans_quant_param,
    npu_weight_quant_batchmatmul,
)
from . import optim, profiler
from .registry import OPS
from .rope import (
    npu_apply_rotary_pos_emb,
    npu_interleave_rope,
    npu_kv_rmsnorm_rope_cache,
    npu_kv_rmsnorm_rope_cache_v2,
    npu_mla_prolog,
    npu_mla_prolog_v2,
    npu_mla_prolog_v3,
    npu_mrope,
    npu_rotary_mul,
    npu_rotary_mul_backward,
)
from .weight_pack import npu_convert_weight_to_int4pack

__all__ = [
    "fast_gelu",
    "npu_fast_gelu",
    "npu_fast_gelu_backward",
    "npu_gelu",
    "npu_gelu_backward",
    "npu_gelu_mul",
    "npu_geglu",
    "npu_geglu_grad",
    "npu_linear",
    "npu_linear_backward",
    "npu_clipped_swiglu",
    "npu_mish",
    "npu_mish_backward",
    "npu_silu",
    "npu_silu_",
    "npu_silu_backward",
    "_npu_dropout_gen_mask",
    "_npu_group_topk",
    "_npu_matmul_add_fp32",
    "_npu_flash_attention",
    "_npu_flash_attention_qlens",
    "_npu_flash_attention_unpad",
    "_npu_paged_attention",
    "_npu_reshape_and_cache",
    "npu_add_layer_norm",
    "npu_add_layer_norm_backward",
    "npu_add_rms_norm",
    "npu_add_rms_norm_dynamic_quant",
    "npu_add_rms_norm_quant",
    "npu_add_rms_norm_v2",
    "npu_rms_norm_quant",
    "npu_apply_rotary_pos_emb",
    "npu_chunk_gated_delta_rule",
    "npu_confusion_transpose",
    "npu_confusion_transpose_backward",
    "npu_cross_entropy_loss",
    "npu_cross_entropy_loss_backward",
    "npu_convert_weight_to_int4pack",
    "npu_dequant_swiglu_quant",
    "npu_dynamic_block_quant",
    "npu_dynamic_quant",
    "npu_format_cast",
    "npu_fused_infer_attention_score",
    "npu_fused_infer_attention_score_v2",
    "npu_fusion_attention",
    "npu_fusion_attention_grad",
    "npu_grouped_matmul",
    "npu_grouped_matmul_finalize_routing",
    "npu_incre_flash_attention",
    "npu_interleave_rope",
    "npu_kv_rmsnorm_rope_cache",
    "npu_kv_rmsnorm_rope_cache_v2",
    "npu_layer_norm_eval",
    "npu_mm_all_reduce_base",
    "npu_mla_prolog",
    "npu_mla_prolog_v2",
    "npu_mla_prolog_v3",
    "npu_moe_compute_expert_tokens",
    "npu_moe_distribute_combine",
    "npu_moe_distribute_combine_v2",
    "npu_moe_distribute_dispatch",
    "npu_moe_distribute_dispatch_v2",
    "npu_moe_finalize_routing",
    "npu_moe_gating_top_k",
    "npu_moe_gating_top_k_backward",
    "npu_moe_gating_top_k_softmax",
    "npu_moe_init_routing",
    "npu_moe_init_routing_quant",
    "npu_moe_init_routing_v2",
    "npu_moe_re_routing",
    "npu_moe_token_permute",
    "npu_moe_token_permute_grad_v2",
    "npu_moe_token_unpermute",
    "npu_moe_token_unpermute_grad_v2",
    "npu_prefetch",
    "npu_prompt_flash_attention",
    "npu_quant_matmul",
    "npu_quantize",
    "npu_recurrent_gated_delta_rule",
    "npu_rms_norm",
    "npu_rms_norm_backward",
    "npu_mrope",
    "npu_rotary_mul",
    "npu_rotary_mul_backward",
    "npu_scaled_masked_softmax",
    "npu_scaled_masked_softmax_backward",
    "npu_scatter_nd_update",
    "npu_scatter_nd_update_",
    "npu_scatter_pa_kv_cache",
    "npu_swiglu",
    "npu_swiglu_backward",
    "npu_top_k_top_p",
    "npu_transpose_batchmatmul",
    "npu_trans_quant_param",
    "npu_anti_quant",
    "npu_weight_quant_batchmatmul",
    "npu_max",
    "npu_max_backward",
    "npu_min",
    "npu_min_backward",
    "npu_one_hot",
    "npu_sort_v2",
    "npu_broadcast",
    "npu_pad",
    "npu_slice",
    "npu_transpose",
    "save_npugraph_tensor",
    "scatter_update",
    "scatter_update_",
]

# torch_npu sets one attribute per dtype name when it loads (torch_npu/_init/core/_exports.py), the
# standard names too: ``torch_npu.float32`` is the code 256, not ``torch.float32``.
globals().update(DTYPE_CODES)

DOCS_SECTION = "docs/howto/write-a-case.md, section 'An op pytest-npufuse does not provide'"


def missing_op_message(name: str) -> str:
    """The one message for a missing op: what is missing and the two steps that add it."""
    return (
        f"torch_npu.{name} is not among the CPU kernels pytest-npufuse provides "
        f"({len(OPS)} ops; `python -m pytest_npufuse ops` lists them). To add it:\n"
        f"  1. register it as a torch.library.custom_op with a CPU kernel and a fake kernel, e.g.\n"
        f'       @torch.library.custom_op("mylib::{name}", mutates_args=())\n'
        f"       def {name}(x: torch.Tensor) -> torch.Tensor: ...   # the CPU reference\n"
        f"       @{name}.register_fake\n"
        f"       def _(x): return torch.empty_like(x)             # shapes and dtypes only\n"
        f"     and call it where the model calls torch_npu.{name};\n"
        f'  2. describe it in pyproject.toml under [tool.npufuse.ops."mylib::{name}"] '
        f"(engine, fusable, sync_all, block_dim).\n"
        f"See {DOCS_SECTION}."
    )


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise MissingOpError(missing_op_message(name))
