"""Quantisation ops: int8 matmul with dequantisation, dequant-SwiGLU-quant, SwiGLU."""

from __future__ import annotations

import math
from typing import Optional

import torch

from .checks import (
    FLOAT_DTYPES, HALF_DTYPES, dtype_names, require_bool, require_dtype, require_int, require_optional_dtype,
    require_shape, require_tensor, require_tensors,
)
from .fixedorder import round_to_int8, swiglu
from .registry import Out, npu_op

DYNAMIC_QUANT_MAX = 127.0
QMM_MIN_RANK = 2
QMM_MAX_RANK = 6

# Layout of the int64 "quant param" built by npu_trans_quant_param / TransQuantParamV2.
SCALE_FIELD_MASK = 0xFFFFE000  # float32 bits of the scale, cut to its top 19 bits
LOW32_MASK = 0xFFFFFFFF
QUANT_PARAM_FLAG = 1 << 46
OFFSET_SHIFT = 37
OFFSET_FIELD_MASK = 0x1FF  # 9-bit two's-complement offset
OFFSET_MIN = -256
OFFSET_MAX = 255

QMM_OUTPUT_DTYPES = (torch.int8, torch.float16, torch.bfloat16)
DEQUANT_SWIGLU_QUANT_DOC = (
    "https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_002367.html"
)
SWIGLU_DOC = "torch_npu.npu_swiglu, Ascend Extension for PyTorch API reference 6.0 and 7.2"
QUANT_MATMUL_DOC = "https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000172.html"


def _broadcast_batch(x1: torch.Tensor, x2: torch.Tensor) -> list[int]:
    """Broadcast the batch dimensions (all but the last two) of ``x1`` and ``x2``."""
    try:
        return list(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    except RuntimeError as err:
        raise ValueError(
            f"x1 batch dims {list(x1.shape[:-2])} and x2 batch dims {list(x2.shape[:-2])} do not broadcast"
        ) from err


def _resolve_output_dtype(output_dtype: Optional[torch.dtype]) -> torch.dtype:
    """None means int8, as in torch_npu; int32 and other dtypes are rejected.

    The torch_npu doc (versions 6.0 and 7.0) lists int8, float16 and bfloat16 outputs.  Newer
    releases also accept int32 for some products, but with rules this model does not cover, so
    it is refused rather than guessed.
    """
    if output_dtype is None:
        return torch.int8
    if output_dtype not in QMM_OUTPUT_DTYPES:
        raise ValueError(
            f"output_dtype={output_dtype} is not implemented; expected None or one of {dtype_names(QMM_OUTPUT_DTYPES)}"
        )
    return output_dtype


def _check_qmm_operands(x1: torch.Tensor, x2: torch.Tensor) -> None:
    for name, tensor in (("x1", x1), ("x2", x2)):
        if tensor.dtype == torch.int32:
            raise ValueError(f"{name} is int32 (int4 packed 8 per int32); only int8 x int8 is implemented")
        require_dtype(name, tensor, (torch.int8,))
        if not QMM_MIN_RANK <= tensor.dim() <= QMM_MAX_RANK:
            raise ValueError(f"{name} has rank {tensor.dim()}; expected {QMM_MIN_RANK} to {QMM_MAX_RANK} dims")
    if x1.shape[-1] != x2.shape[-2]:
        raise ValueError(
            f"x1 has k={x1.shape[-1]} (shape {list(x1.shape)}) but x2 has k={x2.shape[-2]} "
            f"(shape {list(x2.shape)}); x2 must be [..., k, n]"
        )


def _check_qmm_scale(scale: torch.Tensor, n: int, out_dtype: torch.dtype, has_pertoken: bool) -> None:
    """scale is [1] or [n]; its dtype depends on the output as in the doc's combination table."""
    require_shape("scale", scale, ((1,), (n,)))
    if out_dtype == torch.bfloat16:
        require_dtype("scale", scale, (torch.float32, torch.bfloat16), "for a bfloat16 output")
    elif has_pertoken:
        require_dtype("scale", scale, (torch.float32,), "when pertoken_scale is given")
    else:
        require_dtype("scale", scale, (torch.float32, torch.int64), f"for a {out_dtype} output")


def _check_qmm_offset(offset: Optional[torch.Tensor], scale: torch.Tensor, n: int, out_dtype: torch.dtype) -> None:
    if offset is None:
        return
    if out_dtype != torch.int8:
        raise ValueError(f"offset is only allowed for an int8 output, got output_dtype={out_dtype}")
    if scale.dtype == torch.int64:
        raise ValueError("offset must be None when scale is int64: the offset is already packed into scale")
    require_dtype("offset", offset, (torch.float32,))
    require_shape("offset", offset, ((1,), (n,)))


def _check_qmm_pertoken(pertoken_scale: Optional[torch.Tensor], m: int, out_dtype: torch.dtype) -> None:
    if pertoken_scale is None:
        return
    if out_dtype == torch.int8:
        raise ValueError("pertoken_scale is only allowed for float16/bfloat16 outputs, got an int8 output")
    require_dtype("pertoken_scale", pertoken_scale, (torch.float32,))
    require_shape("pertoken_scale", pertoken_scale, ((m,),))


def _allowed_bias_dtypes(out_dtype: torch.dtype, has_pertoken: bool) -> tuple[torch.dtype, ...]:
    """Bias dtypes per output, from the doc's combination table (float bias needs a float output)."""
    if out_dtype == torch.bfloat16:
        return (torch.int32, torch.bfloat16, torch.float32)
    if out_dtype == torch.float16 and has_pertoken:
        return (torch.int32, torch.float16, torch.float32)
    return (torch.int32,)


def _check_qmm_bias(
    bias: Optional[torch.Tensor], out_shape: Sequence[int], out_dtype: torch.dtype, has_pertoken: bool
) -> None:
    """bias is [n], or [batch, 1, n] when the output is 3-D."""
    if bias is None:
        return
    require_dtype("bias", bias, _allowed_bias_dtypes(out_dtype, has_pertoken), f"for a {out_dtype} output")
    n = out_shape[-1]
    allowed = [(n,)]
    if len(out_shape) == 3:
        allowed.append((out_shape[0], 1, n))
    require_shape("bias", bias, allowed)


def _qmm_output_shape(x1: torch.Tensor, x2: torch.Tensor) -> list[int]:
    return [*_broadcast_batch(x1, x2), x1.shape[-2], x2.shape[-1]]


def _quant_matmul_meta(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    *,
    offset: Optional[torch.Tensor] = None,
    pertoken_scale: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    output_dtype: Optional[torch.dtype] = None,
) -> Out:
    """Validate the npu_quant_matmul tensors from metadata: ``[batch..., m, n]`` in the output dtype."""
    out_dtype = _resolve_output_dtype(output_dtype)
    _check_qmm_operands(x1, x2)
    out_shape = _qmm_output_shape(x1, x2)
    has_pertoken = pertoken_scale is not None
    _check_qmm_scale(scale, out_shape[-1], out_dtype, has_pertoken)
    _check_qmm_offset(offset, scale, out_shape[-1], out_dtype)
    _check_qmm_pertoken(pertoken_scale, out_shape[-2], out_dtype)
    _check_qmm_bias(bias, out_shape, out_dtype, has_pertoken)
    return Out(out_shape, out_dtype)


def _int_mm_supported(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``torch._int_mm`` handles this product on CPU.

    The CPU kernel needs two 2-D int8 matrices with matching k; empty dimensions are sent to
    the fallback so that no corner case of the fast path has to be trusted.
    """
    return (
        a.dim() == 2
        and b.dim() == 2
        and a.dtype == torch.int8
        and b.dtype == torch.int8
        and a.shape[1] == b.shape[0]
        and min(a.shape[0], a.shape[1], b.shape[1]) > 0
    )


def _wrap_to_int32(values: torch.Tensor) -> torch.Tensor:
    """Reduce int64 values modulo 2**32 into int32, as an int32 accumulator would wrap."""
    low = values & LOW32_MASK
    return torch.where(low >= 2**31, low - 2**32, low).to(torch.int32)


def _exact_int_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Fallback int8 x int8 product: exact int64 matmul, then int32 wrap-around like _int_mm."""
    return _wrap_to_int32(a.to(torch.int64) @ b.to(torch.int64))


def _int8_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2-D int8 x int8 -> int32 product, with _int_mm when possible (identical results)."""
    if _int_mm_supported(a, b):
        return torch._int_mm(a.contiguous(), b.contiguous())
    return _exact_int_mm(a, b)


def _int8_matmul(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """Batched, broadcast int8 matmul with int32 accumulation: [..., m, k] x [..., k, n]."""
    batch = _broadcast_batch(x1, x2)
    m, k, n = x1.shape[-2], x1.shape[-1], x2.shape[-1]
    if x2.dim() == 2:
        return _int8_mm(x1.reshape(-1, k), x2).reshape(*batch, m, n)
    a = x1.expand(*batch, m, k).reshape(-1, m, k)
    b = x2.expand(*batch, k, n).reshape(-1, k, n)
    products = [_int8_mm(a[i], b[i]) for i in range(a.shape[0])]
    return torch.stack(products).reshape(*batch, m, n)


def _encode_quant_param(scale: torch.Tensor, offset: Optional[torch.Tensor]) -> torch.Tensor:
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


def _decode_quant_param(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpack an int64 quant param into (float32 scale, float32 integer offset)."""
    if not bool(((packed & QUANT_PARAM_FLAG) != 0).all()):
        raise ValueError(
            "scale is int64 but bit 46 is not set in every element; an int64 scale must be "
            "produced by npu_trans_quant_param"
        )
    low = packed & LOW32_MASK
    scale = _wrap_to_int32(low).view(torch.float32)
    off9 = (packed >> OFFSET_SHIFT) & OFFSET_FIELD_MASK
    offset = torch.where(off9 > OFFSET_MAX, off9 - 2 * (OFFSET_MAX + 1), off9)
    return scale, offset.to(torch.float32)


def _dequant_params(
    scale: torch.Tensor, offset: Optional[torch.Tensor], out_dtype: torch.dtype, has_pertoken: bool
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Return the float32 (scale, offset) the dequantisation really applies.

    An int64 scale is decoded.  A float32 scale for an int8 or float16 output without
    pertoken_scale goes through the same packing first, because torch_npu converts it with
    npu_trans_quant_param before calling the kernel; the hardware therefore sees a 19-bit
    scale and an integer offset.  In the other cases (bfloat16 output, pertoken path) the
    scale is used as float32 unchanged.
    """
    if scale.dtype == torch.int64:
        return _decode_quant_param(scale)
    if out_dtype == torch.int8 or (out_dtype == torch.float16 and not has_pertoken):
        return _decode_quant_param(_encode_quant_param(scale, offset))
    return scale.to(torch.float32), None


def _cast_quant_matmul_output(
    values: torch.Tensor, offset: Optional[torch.Tensor], out_dtype: torch.dtype
) -> torch.Tensor:
    """Cast to a float output, or add the integer offset, round and saturate for int8."""
    if out_dtype != torch.int8:
        return values.to(out_dtype)
    if offset is not None:
        values = values + offset
    return round_to_int8(values)


def _quant_matmul_kernel(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    *,
    offset: Optional[torch.Tensor] = None,
    pertoken_scale: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    output_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """acc = x1 @ x2 (int32); [+ int32 bias]; * scale; [* pertoken]; [+ float bias]; [+ offset]."""
    out_dtype = _resolve_output_dtype(output_dtype)
    acc = _int8_matmul(x1, x2)
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias
    scale_f32, offset_f32 = _dequant_params(scale, offset, out_dtype, pertoken_scale is not None)
    values = acc.to(torch.float32) * scale_f32
    if pertoken_scale is not None:
        values = values * pertoken_scale.unsqueeze(-1)
    if bias is not None and bias.dtype != torch.int32:
        values = values + bias.to(torch.float32)
    return _cast_quant_matmul_output(values, offset_f32, out_dtype)

@npu_op(
    "(Tensor x1, Tensor x2, Tensor scale, *, Tensor? offset=None, Tensor? pertoken_scale=None, "
    "Tensor? bias=None, ScalarType? output_dtype=None) -> Tensor",
    source=QUANT_MATMUL_DOC,
    meta=_quant_matmul_meta,
    kernel=_quant_matmul_kernel,
)
def npu_quant_matmul(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    *,
    offset: Optional[torch.Tensor] = None,
    pertoken_scale: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    output_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Quantised matmul: int8 ``x1 [..., m, k]`` times int8 ``x2 [..., k, n]``, then dequantise.

    Source: torch_npu.npu_quant_matmul (Ascend Extension for PyTorch API reference, 6.0/7.0,
    https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000172.html),
    the QuantBatchMatmulV4 formulas (hicann/ops-nn, matmul/quant_batch_matmul_v4/README.md) and
    the TransQuantParamV2 bit layout (hicann/ops-nn, quant/trans_quant_param_v2/README.md).

    Semantics, with ``acc = x1 @ x2`` accumulated exactly in int32:

    * without pertoken_scale: ``out = (acc [+ int32 bias]) * scale [+ float bias] [+ offset]``
    * with pertoken_scale [m]: ``out = (acc [+ int32 bias]) * scale * pertoken_scale[:, None]
      [+ float bias]``

    Accepted combinations, following the doc's table (anything else raises ValueError):

    * int8 output (the default when ``output_dtype`` is None): scale float32 or int64, optional
      float32 offset, int32 bias, no pertoken_scale.
    * float16 output: scale float32/int64 and int32 bias; or, with pertoken_scale, a float32
      scale and an int32/float16/float32 bias.
    * bfloat16 output: scale float32/bfloat16, optional pertoken_scale, int32/bfloat16/float32
      bias, no offset.

    Choices and why:

    * Batch dims broadcast; bias is [n] or, for a 3-D output, [batch, 1, n] (doc).
    * ``x2`` is the logical [k, n] matrix.  A FRACTAL_NZ ``npu_format_cast`` only changes the
      device layout, so the CPU model reads the values directly.
    * The int32 bias is added to the accumulator before scaling; a float bias is added after
      scaling (the doc formulas differ by bias dtype).
    * A float32 scale for an int8/float16 output without pertoken is first packed the way
      torch_npu packs it (npu_trans_quant_param): the scale keeps only its top 19 bits and the
      offset becomes an integer.  This imitates the precision the hardware really applies.
    * An int64 scale must come from npu_trans_quant_param (bit 46 set).  Its low 32 bits are
      the float32 scale and bits 37..45 a signed 9-bit offset, which is applied for int8 outputs.
    * Every float step is one float32 operation in the order above, and the result is cast to
      the output dtype with round-half-to-even.  An int8 output is rounded half-to-even and
      saturated to [-128, 127].  The NPU's fixpipe rounding is not documented; this is the
      usual IEEE choice.
    * int4 inputs (int32 packed) and int32 output are not implemented and raise ValueError.
    """
    for name, value in (("x1", x1), ("x2", x2), ("scale", scale)):
        require_tensor(name, value)
    require_tensors(offset=offset, pertoken_scale=pertoken_scale, bias=bias)
    require_optional_dtype("output_dtype", output_dtype)


# ---------------------------------------------------------------------------------------------
# npu_dequant_swiglu_quant
# ---------------------------------------------------------------------------------------------


def _dsq_group_count(group_index: Optional[torch.Tensor]) -> int:
    if group_index is None:
        return 1
    require_dtype("group_index", group_index, (torch.int32, torch.int64))
    if group_index.dim() != 1 or group_index.shape[0] < 1:
        raise ValueError(f"group_index has shape {list(group_index.shape)}; expected a non-empty 1-D [groupNum]")
    return group_index.shape[0]


def _check_dsq_x(x: torch.Tensor) -> None:
    require_dtype("x", x, (torch.int32, *HALF_DTYPES))
    if x.dim() < 2:
        raise ValueError(f"x has rank {x.dim()} (shape {list(x.shape)}); expected at least 2 dims")
    if x.shape[-1] % 2 != 0:
        raise ValueError(f"x has last dim {x.shape[-1]}; it must be even (it is split in two halves)")


def _check_dsq_dequant_inputs(
    x: torch.Tensor,
    weight_scale: Optional[torch.Tensor],
    activation_scale: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    groups: int,
) -> None:
    """Dequantisation inputs, checked only for an int32 ``x`` (ignored for float ``x``)."""
    two_h = x.shape[-1]
    if weight_scale is None:
        raise ValueError("weight_scale is required when x is int32 (it marks the dequantisation)")
    require_dtype("weight_scale", weight_scale, (torch.float32,))
    require_shape("weight_scale", weight_scale, ((two_h,), (1, two_h), (groups, two_h)))
    if activation_scale is not None:
        require_dtype("activation_scale", activation_scale, (torch.float32,))
        tokens = tuple(x.shape[:-1])
        require_shape("activation_scale", activation_scale, (tokens, (*tokens, 1), (math.prod(tokens),)))
    if bias is not None:
        require_dtype("bias", bias, (torch.float32, torch.float16, torch.bfloat16, torch.int32))
        require_shape("bias", bias, ((two_h,),))


def _check_dsq_quant_inputs(
    x: torch.Tensor,
    quant_scale: Optional[torch.Tensor],
    quant_offset: Optional[torch.Tensor],
    quant_mode: int,
    groups: int,
) -> None:
    """quant_scale/quant_offset are [H/2]-wide for dynamic mode and 1-wide for static mode."""
    width = x.shape[-1] // 2 if quant_mode == 1 else 1
    shapes = ((width,), (1, width), (groups, width))
    if quant_scale is not None:
        require_dtype("quant_scale", quant_scale, (torch.float32, torch.float16, torch.bfloat16))
        require_shape("quant_scale", quant_scale, shapes)
    if quant_offset is not None:
        if quant_mode == 1:
            raise ValueError("quant_offset is only used by static quantisation (quant_mode=0), got quant_mode=1")
        require_dtype("quant_offset", quant_offset, (torch.float32,))
        require_shape("quant_offset", quant_offset, shapes)


def _dequant_swiglu_quant_meta(
    x: torch.Tensor,
    *,
    weight_scale: Optional[torch.Tensor] = None,
    activation_scale: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    quant_scale: Optional[torch.Tensor] = None,
    quant_offset: Optional[torch.Tensor] = None,
    group_index: Optional[torch.Tensor] = None,
    activate_left: bool = False,
    quant_mode: int = 0,
) -> tuple[Out, Out]:
    """Validate the npu_dequant_swiglu_quant tensors: y int8 ``[..., H]``, scale float32 ``[...]``."""
    _check_dsq_x(x)
    groups = _dsq_group_count(group_index)
    if x.dtype == torch.int32:
        _check_dsq_dequant_inputs(x, weight_scale, activation_scale, bias, groups)
    _check_dsq_quant_inputs(x, quant_scale, quant_offset, quant_mode, groups)
    tokens = list(x.shape[:-1])
    return Out([*tokens, x.shape[-1] // 2], torch.int8), Out(tokens, torch.float32)


def _row_groups(group_index: Optional[torch.Tensor], rows: int) -> torch.Tensor:
    """Group id of each covered row; group_index holds token counts per group (count mode).

    Rows past the sum of the counts belong to no group and are not returned.
    """
    if group_index is None:
        return torch.zeros(rows, dtype=torch.int64)
    counts = group_index.to(torch.int64)
    if bool((counts < 0).any()):
        raise ValueError(f"group_index holds negative token counts: {counts.tolist()}")
    if int(counts.sum()) > rows:
        raise ValueError(f"group_index counts sum to {int(counts.sum())} but x has only {rows} token rows")
    return torch.repeat_interleave(torch.arange(counts.shape[0]), counts)


def _per_row(param: torch.Tensor, row_group: torch.Tensor) -> torch.Tensor:
    """Expand a [W], [1, W] or [groupNum, W] parameter to float32 rows matching ``row_group``."""
    values = param.to(torch.float32)
    if values.dim() == 1 or values.shape[0] == 1:
        return values.reshape(1, -1)
    return values[row_group]


def _dequantize(
    x_rows: torch.Tensor,
    row_group: torch.Tensor,
    weight_scale: Optional[torch.Tensor],
    activation_scale: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
) -> torch.Tensor:
    """int32 rows: (x [+ int32 bias]) * weight_scale [* activation_scale] [+ float bias]; float rows: cast."""
    if x_rows.dtype != torch.int32:
        return x_rows.to(torch.float32)
    if bias is not None and bias.dtype == torch.int32:
        x_rows = x_rows + bias
    values = x_rows.to(torch.float32) * _per_row(weight_scale, row_group)
    if activation_scale is not None:
        values = values * activation_scale.reshape(-1, 1)[: x_rows.shape[0]]
    if bias is not None and bias.dtype != torch.int32:
        values = values + bias.to(torch.float32)
    return values


def _dynamic_quant(
    values: torch.Tensor, row_group: torch.Tensor, quant_scale: Optional[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric int8 quantisation: scale = rowmax|v| / 127 (1 for all-zero rows)."""
    if quant_scale is not None:
        values = values * _per_row(quant_scale, row_group)
    row_max = values.abs().amax(dim=-1)
    scale = torch.where(row_max > 0, row_max / DYNAMIC_QUANT_MAX, torch.ones_like(row_max))
    return round_to_int8(values / scale.unsqueeze(-1)), scale


def _static_quant(
    values: torch.Tensor,
    row_group: torch.Tensor,
    quant_scale: Optional[torch.Tensor],
    quant_offset: Optional[torch.Tensor],
) -> torch.Tensor:
    """Static int8 quantisation: v / quant_scale + quant_offset (defaults 1 and 0)."""
    if quant_scale is not None:
        values = values / _per_row(quant_scale, row_group)
    if quant_offset is not None:
        values = values + _per_row(quant_offset, row_group)
    return round_to_int8(values)


def _dequant_swiglu_quant_kernel(
    x: torch.Tensor,
    *,
    weight_scale: Optional[torch.Tensor] = None,
    activation_scale: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    quant_scale: Optional[torch.Tensor] = None,
    quant_offset: Optional[torch.Tensor] = None,
    group_index: Optional[torch.Tensor] = None,
    activate_left: bool = False,
    quant_mode: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    two_h = x.shape[-1]
    x_rows = x.reshape(-1, two_h)
    rows = x_rows.shape[0]
    row_group = _row_groups(group_index, rows)
    covered = row_group.shape[0]
    values = _dequantize(x_rows[:covered], row_group, weight_scale, activation_scale, bias)
    activated = swiglu(values, activate_left)
    y = torch.zeros(rows, two_h // 2, dtype=torch.int8)
    scale = torch.zeros(rows, dtype=torch.float32)
    if quant_mode == 1:
        y[:covered], scale[:covered] = _dynamic_quant(activated, row_group, quant_scale)
    else:
        y[:covered] = _static_quant(activated, row_group, quant_scale, quant_offset)
    return y.reshape(*x.shape[:-1], two_h // 2), scale.reshape(x.shape[:-1])
@npu_op(
    "(Tensor x, *, Tensor? weight_scale=None, Tensor? activation_scale=None, Tensor? bias=None, "
    "Tensor? quant_scale=None, Tensor? quant_offset=None, Tensor? group_index=None, bool activate_left=False, "
    "int quant_mode=0) -> (Tensor, Tensor)",
    source=DEQUANT_SWIGLU_QUANT_DOC,
    meta=_dequant_swiglu_quant_meta,
    kernel=_dequant_swiglu_quant_kernel,
)
def npu_dequant_swiglu_quant(
    x: torch.Tensor,
    *,
    weight_scale: Optional[torch.Tensor] = None,
    activation_scale: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    quant_scale: Optional[torch.Tensor] = None,
    quant_offset: Optional[torch.Tensor] = None,
    group_index: Optional[torch.Tensor] = None,
    activate_left: bool = False,
    quant_mode: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dequantise, apply SwiGLU over the last dim, then quantise to int8: returns ``(y, scale)``.

    Sources: torch_npu.npu_dequant_swiglu_quant (API reference 7.0,
    https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_002367.html),
    aclnnDequantSwigluQuant (hicann/ops-nn, quant/dequant_swiglu_quant/docs/), the CANN golden
    model of the op (quant/dequant_swiglu_quant/tests/assets/golden.py) and op-plugin's
    DequantSwigluQuantOpApi.cpp (quant_mode mapping, output shapes).

    ``x`` is ``[..., 2H]`` (rank >= 2, even last dim), int32 / float16 / bfloat16.  Outputs are
    ``y`` int8 ``[..., H]`` and ``scale`` float32 ``[...]``.  All math is float32.

    1. Dequantisation:
       * int32 ``x``: ``(x [+ int32 bias]) * weight_scale [* activation_scale] [+ float bias]``.
         weight_scale ([2H], [1, 2H] or [groupNum, 2H], float32) is required because it marks
         the dequant step.  activation_scale (one value per token) is optional, as in aclnn.
       * float16/bfloat16 ``x`` is already dequantised and only cast to float32.
         ``weight_scale``, ``activation_scale`` and ``bias`` are accepted and **ignored**.
         This is what the CANN golden model does, and it is why the feature example's
         ``weight_scale`` of shape [m, n] with a bfloat16 ``x`` is legal.  The newest aclnn doc
         even asks for those inputs to be null for float ``x`` (Ascend 950), so they cannot
         change the result.
    2. SwiGLU: the last dim is split into halves.  ``activate_left=True`` applies Swish to the
       left half and multiplies by the right half.  The default ``False`` applies Swish to the
       right half and multiplies by the left half.  Swish is computed as ``a / (1 + exp(-a))``,
       the form of the golden model.
    3. Quantisation.  op-plugin maps ``quant_mode`` 0 to "static" and 1 to "dynamic", so the
       default is static:
       * static (0): ``round(v / quant_scale + quant_offset)``, defaults 1 and 0, with
         quant_scale/quant_offset 1 wide.  The returned ``scale`` is all zeros (the golden
         model fills it with zeros; the device leaves it unspecified).
       * dynamic (1): optionally ``v *= quant_scale`` (smooth scale, [H] or [groupNum, H]),
         then per token ``scale = max|v| / 127`` (1.0 for an all-zero row) and
         ``y = round(v / scale)``.  quant_offset is rejected here because the golden model
         does not use it.
       Rounding is half-to-even (rint, the golden default), saturated to [-128, 127].
    4. ``group_index`` (count mode, int32/int64 [groupNum]) gives the number of tokens in each
       group.  Row ``r`` uses row ``g`` of any 2-D [groupNum, ...] parameter.  Rows past the
       sum of the counts get ``y = 0`` and ``scale = 0``, as in the golden model.

    Rows are independent, and the only float reduction is a max, so the result does not
    depend on the thread count.
    """
    require_tensor("x", x)
    require_tensors(
        weight_scale=weight_scale, activation_scale=activation_scale, bias=bias, quant_scale=quant_scale,
        quant_offset=quant_offset, group_index=group_index,
    )
    require_bool("activate_left", activate_left)
    if require_int("quant_mode", quant_mode) not in (0, 1):
        raise ValueError(f"quant_mode={quant_mode} is not supported; expected 0 (static) or 1 (dynamic)")


# ---------------------------------------------------------------------------------------------
# npu_swiglu
# ---------------------------------------------------------------------------------------------


def _swiglu_meta(x: torch.Tensor, dim: int = -1) -> Out:
    """Validate the npu_swiglu input: x's dtype, ``dim`` halved."""
    require_dtype("x", x, FLOAT_DTYPES)
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for x of shape {list(x.shape)}")
    if x.shape[dim] % 2 != 0:
        raise ValueError(f"x has size {x.shape[dim]} in dim {dim}; it must be even (it is split in two halves)")
    shape = list(x.shape)
    shape[dim] //= 2
    return Out(shape, x.dtype)


def _swiglu_kernel(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return swiglu(x.to(torch.float32), activate_left=True, dim=dim).to(x.dtype)


@npu_op("(Tensor self, int dim=-1) -> Tensor", source=SWIGLU_DOC, meta=_swiglu_meta, kernel=_swiglu_kernel)
def npu_swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """SwiGLU: split ``x`` in halves A (first) and B (second) along ``dim``; return ``swish(A) * B``.

    Source: torch_npu.npu_swiglu (Ascend Extension for PyTorch API reference, 6.0 and 7.2;
    schema ``npu_swiglu(Tensor self, int dim=-1) -> Tensor``).  The doc defines the output as
    ``A * sigmoid(A) * B`` with A the first half, i.e. vLLM's SiluAndMul for ``dim=-1``.  Note
    that this is the opposite default to npu_dequant_swiglu_quant (activate_left=False).

    ``x`` is float16, bfloat16 or float32 with an even size in ``dim``; the output has x's dtype
    and half that size.  Swish is computed in float32 as ``a / (1 + exp(-a))`` (the form the
    dequant-swiglu-quant golden model uses), then multiplied by B and cast to x's dtype.
    """
    require_tensor("x", x)
    require_int("dim", dim)
