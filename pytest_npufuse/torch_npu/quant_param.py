"""The int64 "quant param" of torch_npu: a float32 scale and an integer offset packed into one int64.

torch_npu.npu_trans_quant_param (CANN TransQuantParamV2) builds it; npu_quant_matmul and
npu_grouped_matmul accept it as an int64 ``scale`` and the hardware dequantises with the packed
values, so the reference kernels decode it exactly as stored (19-bit scale, 9-bit offset).
"""

from __future__ import annotations

from typing import Optional

import torch

from ..errors import OpArgumentError
from ..numerics.exact import wrap_to_int32

# Layout of the int64 "quant param" built by npu_trans_quant_param / TransQuantParamV2.
SCALE_FIELD_MASK = 0xFFFFE000  # float32 bits of the scale, cut to its top 19 bits
SCALE_FIELD_BITS_DROPPED = 13  # the low mantissa bits the mask clears
LOW32_MASK = 0xFFFFFFFF
QUANT_PARAM_FLAG = 1 << 46
OFFSET_SHIFT = 37
OFFSET_FIELD_MASK = 0x1FF  # 9-bit two's-complement offset
OFFSET_MIN = -256
OFFSET_MAX = 255


def encode_quant_param(scale: torch.Tensor, offset: Optional[torch.Tensor]) -> torch.Tensor:
    """Pack a float32 scale (and optional offset) into the int64 layout of TransQuantParamV2.

    The float32 bits are cut to their top 19 bits (sign, exponent, 10 mantissa bits), bit 46
    is set as a flag, and the offset is rounded half away from zero, clamped to [-256, 255]
    and stored as 9-bit two's complement in bits 37..45.
    """
    bits = scale.to(torch.float32).contiguous().view(torch.int32).to(torch.int64) & LOW32_MASK
    packed = (bits & SCALE_FIELD_MASK) | QUANT_PARAM_FLAG
    if offset is None:
        return packed
    rounded = torch.sign(offset) * torch.floor(offset.abs() + 0.5)
    off9 = rounded.clamp(OFFSET_MIN, OFFSET_MAX).to(torch.int64) & OFFSET_FIELD_MASK
    return packed | (off9 << OFFSET_SHIFT)


def round_scale_to_fp19(scale: torch.Tensor) -> torch.Tensor:
    """float32 rounded to the 19 bits the quant param keeps (TransQuantParamV2's ``round_mode=1``): to
    nearest with ties to even at the lowest kept bit, in float32 layout, so :func:`encode_quant_param`'s
    truncation then drops only zeros. A carry into the exponent is the correct rounding."""
    bits = scale.to(torch.float32).contiguous().view(torch.int32).to(torch.int64) & LOW32_MASK
    dropped = SCALE_FIELD_BITS_DROPPED
    rounded = (bits + (1 << (dropped - 1)) - 1 + ((bits >> dropped) & 1)) & SCALE_FIELD_MASK
    return wrap_to_int32(rounded).view(torch.float32)


def decode_quant_param(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpack an int64 quant param into (float32 scale, float32 integer offset)."""
    if not bool(((packed & QUANT_PARAM_FLAG) != 0).all()):
        raise OpArgumentError(
            "scale is int64 but bit 46 is not set in every element; an int64 scale must be "
            "produced by npu_trans_quant_param", argument="scale"
        )
    low = packed & LOW32_MASK
    scale = wrap_to_int32(low).view(torch.float32)
    off9 = (packed >> OFFSET_SHIFT) & OFFSET_FIELD_MASK
    offset = torch.where(off9 > OFFSET_MAX, off9 - 2 * (OFFSET_MAX + 1), off9)
    return scale, offset.to(torch.float32)
