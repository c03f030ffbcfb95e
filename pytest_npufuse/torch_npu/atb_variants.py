"""Later revisions of op-plugin's ATB attention bindings, over the computations of :mod:`.atb`.

``_npu_flash_attention_unpad_v2`` is ``_npu_flash_attention_unpad`` (SelfAttentionOperation, PA_ENCODER,
no mask) with a keyword-only ``kernel_type`` choosing between two ATB kernels of the same attention.
"""

from __future__ import annotations

import torch

from .atb import _atb_sample, _check_heads, _encoder_kernel, _encoder_meta
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
