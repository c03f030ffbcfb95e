"""Later revisions of op-plugin's ATB attention bindings, over the computations of :mod:`.atb`.

``_npu_flash_attention_unpad_v2`` is ``_npu_flash_attention_unpad`` (SelfAttentionOperation, PA_ENCODER,
no mask) with a keyword-only ``kernel_type`` choosing between two ATB kernels of the same attention;
``_npu_flash_attention_v3`` is the same encoder with the compressed causal mask (causal within each
packed sequence), as ``_npu_flash_attention_qlens`` reads it.
"""

from __future__ import annotations

import torch

from .atb import _atb_sample, _attend, _check_heads, _encoder_kernel, _encoder_meta, _lengths, _require_compressed_causal
from .attention import RIGHT_DOWN_CAUSAL
from .checks import require_choice
from .registry import Arguments, SampleCall, npu_op

# SelfAttentionParam::KERNELTYPE_DEFAULT and KERNELTYPE_EXP_M8V2, the two op-plugin accepts.
UNPAD_KERNEL_TYPES = (0, 2)


def _unpad_v2_samples() -> list[SampleCall]:
    """Two packed sequences (2 and 4 tokens) of 2 query heads over 1 KV head, both kernel types."""
    q = _atb_sample(6, 2, 8, seed=0, dtype=torch.bfloat16)
    k, v = (_atb_sample(6, 1, 8, seed=seed, dtype=torch.bfloat16) for seed in (1, 2))
    lengths = torch.tensor([2, 4], dtype=torch.int32)
    return [SampleCall((q, k, v, lengths, 0.3, 2, 1), {"kernel_type": kernel, "out": torch.zeros_like(q)})
            for kernel in (0, 2)]


@npu_op(meta=_encoder_meta, kernel=_encoder_kernel, writes_back={"out": 0}, samples=_unpad_v2_samples)
def _npu_flash_attention_unpad_v2(call: Arguments) -> None:
    """Unmasked self-attention of packed variable-length sequences, writing ``out``; returns None.

    Source: op-plugin ``op_plugin/ops/atb/SelfAttentionUnpadAtbV2.cpp``: the parameters of
    ``_npu_flash_attention_unpad`` (PA_ENCODER, no mask, BSND, ``qkScale = scale_value``) plus
    ``kernelType`` from ``kernel_type``, which must be 0 (KERNELTYPE_DEFAULT) or 2 (KERNELTYPE_EXP_M8V2);
    None means 0. Both compute ``softmax(scale_value * q k^T) v`` per sequence; the binding documents no
    numerical difference between them, so both give the reference result here.
    """
    _check_heads(call.num_heads, call.num_kv_heads)
    kernel = 0 if call.kernel_type is None else call.kernel_type
    require_choice("kernel_type", kernel, UNPAD_KERNEL_TYPES, "0 is KERNELTYPE_DEFAULT, 2 KERNELTYPE_EXP_M8V2")


# SelfAttentionParam::MASK_TYPE_NORM_COMPRESS, the only mask type op-plugin's v3 binding accepts.
V3_MASK_TYPES = (3,)


def _v3_kernel(call: Arguments) -> torch.Tensor:
    _require_compressed_causal(call.mask)
    lengths = _lengths(call.seq_len)
    return _attend(call, len(lengths), lengths, lengths, mode=RIGHT_DOWN_CAUSAL)[0]


def _v3_samples() -> list[SampleCall]:
    """Two packed sequences (3 and 5 tokens), 4 query heads over 2 KV heads, the 128-wide causal marker."""
    q = _atb_sample(8, 4, 16, seed=0)
    k, v = (_atb_sample(8, 2, 16, seed=seed) for seed in (1, 2))
    mask = torch.triu(torch.ones(128, 128), 1).half()
    return [SampleCall((q, k, v, mask, torch.tensor([3, 5], dtype=torch.int32), 0.25, 4, 2),
                       {"out": torch.zeros_like(q)})]


@npu_op(meta=_encoder_meta, kernel=_v3_kernel, writes_back={"out": 0}, samples=_v3_samples)
def _npu_flash_attention_v3(call: Arguments) -> None:
    """Causal self-attention of packed variable-length sequences, writing ``out``; returns None.

    Source: op-plugin ``op_plugin/ops/atb/SelfAttentionAtbV3.cpp`` (ATB SelfAttentionOperation, PA_ENCODER,
    ``maskType`` from ``mask_type``, which must be 3 = MASK_TYPE_NORM_COMPRESS, ``isTriuMask = 1``, BSND,
    ``qkScale = scale_value``). ``query`` / ``key`` / ``value`` as :func:`_npu_flash_attention_unpad_v2`;
    token i of sequence b attends to tokens 0..i of b. ``mask`` is the compressed causal marker (nonzero
    exactly above the diagonal, e.g. ``triu(ones(128, 128), 1)``, checked); None for ``mask_type`` means 3.
    """
    _check_heads(call.num_heads, call.num_kv_heads)
    mask_type = 3 if call.mask_type is None else call.mask_type
    require_choice("mask_type", mask_type, V3_MASK_TYPES, "3 is MASK_TYPE_NORM_COMPRESS, the causal marker")
