"""``torch_npu.npu_convert_weight_to_int4pack``: int4 weights, one per int32, packed eight to an int32.

W4A16 and W4A8 code quantises a weight to int4 levels held in an int32 tensor, then packs it once, when
the weights load, into the layout ``npu_weight_quant_batchmatmul`` and ``npu_quant_matmul`` read: eight
levels per int32 along the last dimension.
"""

from __future__ import annotations

import torch

from ..errors import OpArgumentError
from .checks import require_dtype
from .quant import INT4_PER_INT32, _pack_int4
from .registry import Arguments, Out, SampleCall, npu_op

WEIGHT_DIMS = 2  # the A2/A3 path packs a 2-D (k, n) or (n, k) weight


def _meta(call: Arguments) -> Out:
    weight = call.weight
    require_dtype("weight", weight, (torch.int32,), "(int4 levels, one per int32)")
    if weight.dim() != WEIGHT_DIMS:
        raise OpArgumentError(
            f"weight has shape {list(weight.shape)}; expected a 2-D (k, n) or (n, k) weight", argument="weight"
        )
    if weight.shape[-1] % INT4_PER_INT32 != 0:
        raise OpArgumentError(
            f"weight has last dim {weight.shape[-1]}; it must be a multiple of 8 (eight int4 per int32)",
            argument="weight"
        )
    if not weight.is_contiguous():
        raise OpArgumentError(
            "weight is not contiguous; pass weight.contiguous() (torch_npu refuses strided weights)", argument="weight"
        )
    return Out([weight.shape[0], weight.shape[1] // INT4_PER_INT32], torch.int32)


def _kernel(call: Arguments) -> torch.Tensor:
    return _pack_int4(call.weight)


def _samples() -> list[SampleCall]:
    """A (k, n) weight of int4 levels in [-8, 7]."""
    levels = torch.randint(-8, 8, (16, 32), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    return [SampleCall((levels,)), SampleCall((levels, 2))]


@npu_op(meta=_meta, kernel=_kernel, samples=_samples)
def npu_convert_weight_to_int4pack(call: Arguments) -> None:
    """Pack a 2-D int32 tensor of int4 levels eight to an int32: shape ``(k, n) -> (k, n / 8)``.

    Word ``j`` of a row holds elements ``8j .. 8j + 7`` of that row, element ``8j + i`` in bits
    ``4i .. 4i + 3`` (its low four bits, two's complement). Levels belong in [-8, 7], as the page
    says; like torch_npu, the op keeps the low four bits of any other value. ``inner_k_tiles`` is
    reserved and unused. The weight must be ND (an NZ weight is packed to an NZ layout of its own on
    the device, which this model does not provide).

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_convert_weight_to_int4pack.md and
    op_plugin/ops/opapi/ConvertWeightToINT4PackKernelNpuOpApi.cpp (``convert_to_int4_pack``: the nibble
    order; the Atlas A2/A3 path takes int32 only), schema in op_plugin_functions.yaml.
    """
