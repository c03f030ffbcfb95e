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
* :mod:`.atb_variants` - ``_npu_flash_attention_unpad_v2``, ``_npu_flash_attention_v3``,
  ``_npu_paged_attention_splitfuse`` (later ATB bindings)
* :mod:`.rotary_embedding` - the private ATB op ``_npu_rotary_embedding`` (vLLM's in-place RoPE)
* :mod:`.attention_merge` - ``npu_attention_update`` (merging SP parts' attention outputs)
* :mod:`.sparse_attention` - DeepSeek sparse attention's ``npu_lightning_indexer``, ``npu_quant_lightning_indexer``,
  ``npu_sparse_flash_attention``, ``npu_kv_quant_sparse_flash_attention``
* :mod:`.tensors` - ``npu_dtype_cast`` (and ``npu_dtype_cast_backward``), ``empty_with_format``
* :mod:`.quant_extra` - ``npu_matmul_compress_dequant``, ``npu_kronecker_quant``, ``npu_dynamic_mx_quant``
* :mod:`.paged_cache` - ``npu_gather_pa_kv_cache``, ``npu_scatter_pa_cache``
* :mod:`.dump` - ``save_npugraph_tensor``
* :mod:`.adam` - ``npu_apply_adam_w`` (its ``out=`` form)
* :mod:`.dropout` - ``_npu_dropout_gen_mask``
* :mod:`.weight_pack` - ``npu_convert_weight_to_int4pack``
* :mod:`.layout` - ``npu_transpose``, ``npu_broadcast``, ``npu_slice``, ``npu_pad``
* :mod:`.indexing` - ``npu_max``, ``npu_min`` (and their ``_backward``), ``npu_sort_v2``, ``npu_one_hot``
* :mod:`.loss` - ``npu_cross_entropy_loss`` (and ``npu_cross_entropy_loss_backward``)
* :mod:`.linear_attention` - ``npu_recurrent_gated_delta_rule``, ``npu_chunk_gated_delta_rule``
* :mod:`.matmul` - ``npu_mm_all_reduce_base``, ``npu_mm_reduce_scatter_base``, ``npu_all_gather_base_mm``, ``npu_transpose_batchmatmul``, ``npu_transpose_quant_batchmatmul``,
  ``_npu_matmul_add_fp32``,
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
...: :mod:`.dtypes`), ``__version__`` (the torch_npu release the shim stands in for, :mod:`.release`),
``get_npu_format`` and ``Format`` (a tensor's storage format, :mod:`.formats`), and the submodules
``torch_npu.contrib`` (its quantised Linear modules), ``torch_npu.onnx`` (ONNX export of the ops),
``torch_npu.utils`` and ``torch_npu.testing`` (torch_npu's test helpers, for its own op tests), each
loaded by its own import, as torch_npu loads them.

An attribute torch_npu has but this package lacks raises :class:`MissingOpError`, which says how to
add the op.
"""

from __future__ import annotations

import importlib.util

import torch

from ..errors import GAPS_DOCS, MissingOpError, NotModeledAttributeError
from ..gaps import MODULE_FIX, StandIn, missing
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
from .adam import _apply_adam_w_out as npu_apply_adam_w
from .atb import (
    _npu_flash_attention,
    _npu_flash_attention_qlens,
    _npu_flash_attention_unpad,
    _npu_paged_attention,
    _npu_paged_attention_get_workspace,
    _npu_reshape_and_cache,
)
from .atb_variants import _npu_flash_attention_unpad_v2, _npu_flash_attention_v3, _npu_paged_attention_splitfuse
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
from .attention_merge import npu_attention_update
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
    npu_mm_reduce_scatter_base,
    npu_all_gather_base_mm,
    npu_transpose_batchmatmul,
    npu_transpose_quant_batchmatmul,
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
    npu_add_rms_norm_cast,
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
from .formats import Format, get_npu_format
from .registry import OPS
from .release import release
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
from .paged_cache import npu_gather_pa_kv_cache, npu_scatter_pa_cache
from .quant_extra import npu_dynamic_mx_quant, npu_kronecker_quant, npu_matmul_compress_dequant
from .rotary_embedding import _npu_rotary_embedding
from .tensors import empty_with_format, npu_dtype_cast, npu_dtype_cast_backward
from .sparse_attention import (
    npu_kv_quant_sparse_flash_attention,
    npu_lightning_indexer,
    npu_quant_lightning_indexer,
    npu_sparse_flash_attention,
)
from .weight_pack import npu_convert_weight_to_int4pack

__all__ = [
    "empty_with_format",
    "npu_dtype_cast",
    "npu_dtype_cast_backward",
    "npu_gather_pa_kv_cache",
    "npu_scatter_pa_cache",
    "npu_kronecker_quant",
    "npu_dynamic_mx_quant",
    "npu_matmul_compress_dequant",
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
    "npu_apply_adam_w",
    "_npu_group_topk",
    "_npu_matmul_add_fp32",
    "_npu_flash_attention",
    "_npu_flash_attention_qlens",
    "_npu_flash_attention_unpad",
    "_npu_paged_attention",
    "_npu_paged_attention_splitfuse",
    "_npu_reshape_and_cache",
    "npu_add_layer_norm",
    "npu_add_layer_norm_backward",
    "npu_add_rms_norm",
    "npu_add_rms_norm_cast",
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
    "npu_mm_reduce_scatter_base",
    "npu_all_gather_base_mm",
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
    "npu_lightning_indexer",
    "npu_quant_lightning_indexer",
    "npu_sparse_flash_attention",
    "npu_kv_quant_sparse_flash_attention",
    "npu_attention_update",
    "_npu_rotary_embedding",
    "_npu_flash_attention_unpad_v2",
    "_npu_flash_attention_v3",
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
    "npu_transpose_quant_batchmatmul",
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

__version__ = release().torch_npu
# torch_npu sets one attribute per dtype name when it loads (torch_npu/_init/core/_exports.py), the
# standard names too: ``torch_npu.float32`` is the code 256, not ``torch.float32``.
globals().update(DTYPE_CODES)

DOCS_SECTION = GAPS_DOCS

SUBPACKAGES = frozenset({
    "_afd", "_compat", "_compiler", "_inductor", "_init", "_logging", "asd", "contrib", "csrc", "distributed",
    "dynamo", "jit", "multiprocessing", "npu", "onnx", "optim", "profiler", "testing", "utils",
})
"""The subpackages of the real torch_npu (Ascend/pytorch ``torch_npu/`` @9e73e70): a missing one of these is
a missing module, not a missing op."""


def missing_op_message(name: str, spelled: str = "") -> str:
    """The one message for a missing op (``spelled`` as the model wrote it: ``torch_npu.<name>`` by default,
    or ``torch.ops.npu.<name>``): what is missing and the steps that add it."""
    return (
        f"{spelled or f'torch_npu.{name}'} is not among the CPU kernels pytest-npufuse provides "
        f"({len(OPS)} ops; `python -m pytest_npufuse ops` lists them). {_add_op(name)}\n"
        f"See {DOCS_SECTION}."
    )


def missing_op(name: str, spelled: str) -> StandIn:
    """An op of torch_npu's ``npu`` namespace that neither this package nor the user defined, asked for as
    ``spelled``: its :class:`MissingOpError` at once, or in a check's survey a stand-in (:mod:`..gaps`)."""
    fix = (
        f'define npu::{name} with torch.library (schema, fake kernel, CPU kernel) and describe it under '
        f'[tool.npufuse.ops."npu::{name}"]'
    )
    return missing(MissingOpError(missing_op_message(name, spelled)), "op", spelled, fix)


def _user_op(name: str) -> object | None:
    """``torch.ops.npu.<name>`` when the user defined it: the packet torch keeps once it is looked up, else
    torch's own lookup (which keeps it), not the shim's gap."""
    known = vars(torch.ops.npu).get(name)
    if known is not None:
        return known
    try:
        return torch._ops._OpNamespace.__getattr__(torch.ops.npu, name)
    except AttributeError:
        return None


def _add_op(name: str) -> str:
    """How a user adds a missing op: torch_npu exposes each ``torch.ops.npu.<op>`` as ``torch_npu.<op>``
    (Ascend/pytorch ``torch_npu/_init/core/_exports.py``), and so does this package."""
    return (
        f'To add it: define npu::{name} with torch.library (a schema, a fake kernel for its shapes and a CPU '
        f'kernel as its reference, e.g. @torch.library.custom_op("npu::{name}", mutates_args=()) and '
        f"register_fake), so the model's torch_npu.{name} calls it, and describe it in pyproject.toml under "
        f'[tool.npufuse.ops."npu::{name}"] (engine, fusable, sync_all, block_dim).'
    )


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in SUBPACKAGES:
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            # Provided, but loaded by its own import, as torch_npu loads it (contrib, onnx).
            raise AttributeError(f"module 'torch_npu' has no attribute {name!r}; import torch_npu.{name} first")
        error = NotModeledAttributeError(
            f"torch_npu.{name} is a module of torch_npu that pytest-npufuse's shim does not model; {MODULE_FIX}."
        )
        return missing(error, "module", f"torch_npu.{name}", MODULE_FIX)
    registered = _user_op(name)
    return registered if registered is not None else missing_op(name, f"torch_npu.{name}")
