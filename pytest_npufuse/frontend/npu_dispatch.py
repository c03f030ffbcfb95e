"""What torch_npu runs for plain torch calls that the capture device would lower differently.

``F.scaled_dot_product_attention`` is a composite op: each device picks its backend through
``_fused_sdp_choice``. torch_npu's choice is its own override (op-plugin ``FusedSdpChoiceKernelNpuOpApi.cpp``
returns ``overrideable``), and its ``scaled_dot_product_attention`` (``ScaledDotProductAttentionKernelNpuOpApi.cpp``)
runs FlashAttentionScore (``npu_fusion_attention_v3`` below Ascend 950) on 4-D BNSD float16, bfloat16 or
float32 inputs with a boolean mask or none, at most 2048 query and KV heads, head dims up to 512 and query
heads a multiple of the KV heads: GQA is read natively, no K/V copy. Only float32 with a head dim that is
not a multiple of 4, or a floating-point mask, falls back to the math decomposition.

A model captured on the CPU gets that shape of graph anyway (CPU's choice is its flash kernel,
``_scaled_dot_product_flash_attention_for_cpu``, which the op catalog prices as FlashAttentionScore). A
timing-only model on the meta device does not: Meta's ``_fused_sdp_choice`` always answers "math", which
decomposes the call into casts to float32, a copy of K and V expanded to every query head, two batched
matmuls and a softmax. :func:`route_sdpa` rewrites such calls, where torch_npu would run its fused kernel,
to the flash op, so both devices capture what the NPU runs.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx

_SDPA = torch._C._nn.scaled_dot_product_attention
_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_HEADS_LIMIT, _DIM_LIMIT = 2048, 512  # op-plugin ScaledDotProductAttentionKernelNpuOpApi.cpp N_LIMIT, D_LIMIT


def flash_sdpa(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` as one fused kernel: a boolean mask becomes the additive one
    torch's own CPU path builds (``True`` keeps a score: one ``where`` of two scalars), and the flash op
    reads GQA's KV heads in place."""
    mask = attn_mask
    if mask is not None and mask.dtype == torch.bool:
        keep, drop = (torch.ops.aten.scalar_tensor(v, dtype=query.dtype, device=query.device) for v in (0.0, float("-inf")))
        mask = torch.where(mask, keep, drop)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=mask, scale=scale
    )[0]


def _fake(node: Any) -> torch.Tensor | None:
    value = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def runs_fused(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """op-plugin's condition for FlashAttentionScore (see the module docstring)."""
    if query.dtype not in _FUSED_DTYPES or not query.dtype == key.dtype == value.dtype:
        return False
    if query.dtype == torch.float32 and any(t.shape[-1] % 4 for t in (query, key, value)):
        return False
    if mask is not None and mask.dtype != torch.bool:
        return False
    if not query.dim() == key.dim() == value.dim() == 4:
        return False
    heads, kv_heads = query.shape[1], key.shape[1]
    return heads <= _HEADS_LIMIT and kv_heads <= _HEADS_LIMIT and query.shape[3] <= _DIM_LIMIT and heads % kv_heads == 0


def route_sdpa(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """In a graph traced on the meta device, send every ``scaled_dot_product_attention`` call torch_npu would
    run fused to :func:`flash_sdpa` (in place; a graph on a real device is left as its device lowers it)."""
    if not any(isinstance(x, torch.Tensor) and x.is_meta for x in example_inputs):
        return
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not _SDPA:
            continue
        tensors = [_fake(arg) for arg in node.args[:3]]
        mask_node = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
        mask = _fake(mask_node)
        if mask_node is not None and mask is None or any(t is None for t in tensors):
            continue
        if runs_fused(*tensors, mask):
            node.target = flash_sdpa
            changed = True
    if changed:
        gm.recompile()
