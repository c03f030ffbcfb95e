"""Quantisation ops: int8 matmul with dequantisation, dequant-SwiGLU-quant, SwiGLU."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from ..errors import OpArgumentError, OpTypeError
from ..numerics.exact import cube_addmm, cube_matmul, int_matmul, wrap_to_int32
from .checks import (
    FLOAT_DTYPES,
    dtype_of_code,
    HALF_DTYPES,
    dtype_names,
    kernel_checks_apply,
    require_choice,
    require_dtype,
    INT8_SCALAR_TYPE,
    require_scalar_type_number,
    require_shape,
    require_unused,
)
from .activation import halved
from .fixedorder import round_to_int8, swiglu
from .quant_param import decode_quant_param, encode_quant_param, round_scale_to_fp19
from .registry import Arguments, Derivative, Out, SampleCall, bind, npu_op

DYNAMIC_QUANT_MAX = 127.0
INT4_MAX = 7.0
INT4_PER_INT32 = 8
QMM_MIN_RANK = 2
QMM_MAX_RANK = 6

QMM_OUTPUT_DTYPES = (torch.int8, torch.float16, torch.bfloat16, torch.int32)


def _broadcast_batch(x1: torch.Tensor, x2: torch.Tensor) -> list[int]:
    """Broadcast the batch dimensions (all but the last two) of ``x1`` and ``x2``."""
    try:
        return list(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    except RuntimeError as err:
        raise OpArgumentError(
            f"x1 batch dims {list(x1.shape[:-2])} and x2 batch dims {list(x2.shape[:-2])} do not broadcast",
            argument="x1"
        ) from err


def _resolve_output_dtype(output_dtype: Optional[torch.dtype]) -> torch.dtype:
    """None means int8, as in torch_npu; the other outputs are the doc's int8, float16, bfloat16 and int32."""
    if output_dtype is None:
        return torch.int8
    if output_dtype not in QMM_OUTPUT_DTYPES:
        raise OpArgumentError(
            f"output_dtype={output_dtype} is not implemented; expected None or one of {dtype_names(QMM_OUTPUT_DTYPES)}",
            argument="output_dtype"
        )
    return output_dtype


def _packed_dim(tensor: torch.Tensor) -> Optional[int]:
    """The dim whose int32 words hold eight int4 values each (npu_quantize's quint4x2 output packs the last
    dim of the tensor it quantised): the last one, or the second to last for a transposed view of such a
    tensor (strides ``[1, rows]``: op-plugin's meta function reads transposed int4 operands so); None for int8."""
    if tensor.dtype != torch.int32:
        return None
    transposed = tensor.dim() >= 2 and tensor.stride(-2) == 1 and tensor.stride(-1) == tensor.shape[-2] > 1
    return tensor.dim() - 2 if transposed else tensor.dim() - 1


def _qmm_shape(tensor: torch.Tensor) -> list[int]:
    """The operand's shape in values: its packed dim (:func:`_packed_dim`) eight times as long."""
    shape, packed = list(tensor.shape), _packed_dim(tensor)
    if packed is not None:
        shape[packed] *= INT4_PER_INT32
    return shape


def _qmm_width(tensor: torch.Tensor) -> int:
    return _qmm_shape(tensor)[-1]


def _qmm_levels(tensor: torch.Tensor) -> torch.Tensor:
    packed = _packed_dim(tensor)
    if packed is None:
        return tensor
    return unpack_int4(tensor.movedim(packed, -1)).movedim(-1, packed)


def _check_qmm_operands(x1: torch.Tensor, x2: torch.Tensor) -> None:
    """int8 x int8 (A8W8), or int32 x int32 words of int4 along the last dim (A4W4: x1 [..., m, k / 8],
    x2 [..., k, n / 8]), as the API page's data-type table pairs them."""
    for name, tensor in (("x1", x1), ("x2", x2)):
        require_dtype(name, tensor, (torch.int8, torch.int32), "(int8, or int32 words of eight int4)")
        if not QMM_MIN_RANK <= tensor.dim() <= QMM_MAX_RANK:
            raise OpArgumentError(
                f"{name} has rank {tensor.dim()}; expected {QMM_MIN_RANK} to {QMM_MAX_RANK} dims", argument=name
            )
    if x1.dtype != x2.dtype:
        raise OpArgumentError(
            f"x1 is {x1.dtype} but x2 is {x2.dtype}; both int8 (A8W8) or both int32 words of int4", argument="x1"
        )
    if _qmm_width(x1) != _qmm_shape(x2)[-2]:
        raise OpArgumentError(
            f"x1 has k={_qmm_width(x1)} (shape {list(x1.shape)}) but x2 has k={_qmm_shape(x2)[-2]} "
            f"(shape {list(x2.shape)}); x2 must be [..., k, n]", argument="x1"
        )


def _check_qmm_scale(scale: torch.Tensor, n: int, out_dtype: torch.dtype, has_pertoken: bool) -> None:
    """scale is [1] or [n]; its dtype depends on the output as in the doc's combination table."""
    require_shape("scale", scale, ((1,), (n,)))
    if out_dtype in (torch.bfloat16, torch.int32):
        require_dtype("scale", scale, (torch.float32, torch.bfloat16), f"for a {out_dtype} output")
    elif has_pertoken:
        require_dtype("scale", scale, (torch.float32,), "when pertoken_scale is given")
    else:
        require_dtype("scale", scale, (torch.float32, torch.int64), f"for a {out_dtype} output")


def _check_qmm_offset(offset: Optional[torch.Tensor], scale: torch.Tensor, n: int, out_dtype: torch.dtype) -> None:
    if offset is None:
        return
    if out_dtype != torch.int8:
        raise OpArgumentError(
            f"offset is only allowed for an int8 output, got output_dtype={out_dtype}", argument="offset"
        )
    if scale.dtype == torch.int64:
        raise OpArgumentError(
            "offset must be None when scale is int64: the offset is already packed into scale", argument="offset"
        )
    require_dtype("offset", offset, (torch.float32,))
    require_shape("offset", offset, ((1,), (n,)))


def _check_qmm_pertoken(pertoken_scale: Optional[torch.Tensor], m: int, out_dtype: torch.dtype) -> None:
    if pertoken_scale is None:
        return
    if out_dtype in (torch.int8, torch.int32):
        raise OpArgumentError(
            f"pertoken_scale is only allowed for float16/bfloat16 outputs, got a {out_dtype} output",
            argument="pertoken_scale",
        )
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
    return [*_broadcast_batch(x1, x2), _qmm_shape(x1)[-2], _qmm_width(x2)]


A8W4_OUTPUT_DTYPES = (torch.float16, torch.bfloat16)
A8W4_ACTIVATION_SHIFT = 8  # the golden's low nibble (x & 15) - 8: the kernel multiplies x1 - 8


def _a8w4_group(call: Arguments) -> int:
    """The k-group of the A8W4 mode's scale: ``group_sizes`` [g_m, g_n, g_k] with g_m, g_n 0 or 1 (per token,
    per channel) and g_k > 0 dividing k."""
    g_m, g_n, g_k = (int(size) for size in call.group_sizes)
    k = call.x1.shape[-1]
    if g_m not in (0, 1) or g_n not in (0, 1) or g_k <= 0 or k % g_k:
        raise OpArgumentError(f"group_sizes={list(call.group_sizes)} is not implemented; expected [0 or 1, 0 or 1, "
                              f"g_k] with g_k dividing k={k} (the A8W4 per-group weight scale)")
    return g_k


def _a8w4_meta(call: Arguments) -> Out:
    """A8W4: int8 x1 [m, k], x2 int32 words of eight int4 [k, n / 8] (npu_convert_weight_to_int4pack), an
    int64 or float32 scale [k / g_k, n], float32 pertoken_scale [m] or [m, 1], optional float32 offset [n]."""
    x1, x2, scale = call.x1, call.x2, call.scale
    require_dtype("x1", x1, (torch.int8,), "(the A8W4 mode with group_sizes)")
    require_dtype("x2", x2, (torch.int32,), "(int32 words of eight int4, the A8W4 mode)")
    if x1.dim() != 2 or x2.dim() != 2 or x2.shape[0] != x1.shape[1]:
        raise OpArgumentError(f"x1 {list(x1.shape)} and x2 {list(x2.shape)} must be [m, k] and [k, n / 8] in the "
                              "A8W4 mode")
    m, k, n = x1.shape[0], x1.shape[1], x2.shape[1] * INT4_PER_INT32
    out_dtype = call.output_dtype or torch.float16
    require_choice("output_dtype", out_dtype, A8W4_OUTPUT_DTYPES, "the A8W4 mode's outputs")
    require_dtype("scale", scale, (torch.int64, torch.float32))
    require_shape("scale", scale, ((k // _a8w4_group(call), n),))
    if call.pertoken_scale is None:
        raise OpArgumentError("the A8W4 mode needs pertoken_scale, float32 [m] or [m, 1]")
    require_dtype("pertoken_scale", call.pertoken_scale, (torch.float32,))
    require_shape("pertoken_scale", call.pertoken_scale, ((m,), (m, 1)))
    if call.offset is not None:
        require_dtype("offset", call.offset, (torch.float32,))
        require_shape("offset", call.offset, ((n,),))
    return Out([m, n], out_dtype)


def _a8w4_kernel(call: Arguments) -> torch.Tensor:
    """op-plugin's A8W4 golden (test_npu_quant_matmul.py ``a8w4_quant_golden``), in exact arithmetic where the
    golden accumulates in float16. The golden splits each int8 of x1 into a high nibble ``x // 16`` and a
    low one ``(x & 15) - 8`` (offset binary) and recombines them as ``16 * high + low``, which is ``x - 8``:
    the kernel multiplies ``x1 - 8``, and ``offset`` is where a caller compensates. Per k-group g,
    ``((x1 - 8)_g @ w_g)`` (int32, exact) times its scale row, summed over groups in float32, plus
    ``offset``, times the per-token scale, rounded once to the output dtype. An int64 scale is
    npu_trans_quant_param's, decoded."""
    group = _a8w4_group(call)
    # float64 holds every integer product sum exactly (|x1 - 8| <= 136, |w| <= 8), independent of BLAS order
    x1 = call.x1.to(torch.float64) - A8W4_ACTIVATION_SHIFT
    weight = unpack_int4(call.x2).to(torch.float64)
    scale = decode_quant_param(call.scale)[0] if call.scale.dtype == torch.int64 else call.scale
    total = torch.zeros(x1.shape[0], weight.shape[1], dtype=torch.float32)
    for g in range(x1.shape[1] // group):
        part = x1[:, g * group:(g + 1) * group] @ weight[g * group:(g + 1) * group]
        total = total + part.to(torch.float32) * scale[g]
    if call.offset is not None:
        total = total + call.offset
    total = total * call.pertoken_scale.reshape(-1, 1)
    return total.to(call.output_dtype or torch.float16)


def _float8_x1_meta(call: Arguments) -> Out:
    """The float8 modes (float8_e4m3fn ``x1``; ``y_scale`` belongs to them), whose kernels are not modeled,
    as op-plugin's meta function gives their output (op_plugin/python/meta/_meta_registrations.py
    ``npu_quant_matmul_meta``): the broadcast batch dims, x1's m and x2's n, that n times eight where
    ``x2`` is float32 words of eight FP4 values without pertoken_scale, in ``output_dtype`` (None: int8)."""
    x1, x2 = call.x1, call.x2
    n = x2.shape[-1] * (INT4_PER_INT32 if x2.dtype == torch.float32 and call.pertoken_scale is None else 1)
    return Out([*_broadcast_batch(x1, x2), x1.shape[-2], n], call.output_dtype or torch.int8)


def _quant_matmul_meta(call: Arguments) -> Out:
    """Validate the npu_quant_matmul tensors from metadata: ``[batch..., m, n]`` in the output dtype. On fake
    tensors a float8 x1 gets op-plugin's meta shapes (:func:`_float8_x1_meta`); real ones are refused."""
    if call.x1.dtype == torch.float8_e4m3fn and not kernel_checks_apply(call.x1):
        return _float8_x1_meta(call)
    require_unused("npu_quant_matmul (float8 modes)", y_scale=call.y_scale)
    if call.group_sizes is not None:
        return _a8w4_meta(call)
    out_dtype = _resolve_output_dtype(call.output_dtype)
    _check_qmm_operands(call.x1, call.x2)
    out_shape = _qmm_output_shape(call.x1, call.x2)
    has_pertoken = call.pertoken_scale is not None
    _check_qmm_scale(call.scale, out_shape[-1], out_dtype, has_pertoken)
    _check_qmm_offset(call.offset, call.scale, out_shape[-1], out_dtype)
    _check_qmm_pertoken(call.pertoken_scale, out_shape[-2], out_dtype)
    _check_qmm_bias(call.bias, out_shape, out_dtype, has_pertoken)
    return Out(out_shape, out_dtype)


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
        return decode_quant_param(scale)
    if out_dtype == torch.int8 or (out_dtype == torch.float16 and not has_pertoken):
        return decode_quant_param(encode_quant_param(scale, offset))
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


def _quant_matmul_kernel(call: Arguments) -> torch.Tensor:
    """acc = x1 @ x2 (int32); [+ int32 bias]; * scale; [* pertoken]; [+ float bias]; [+ offset]."""
    if call.group_sizes is not None:
        return _a8w4_kernel(call)
    pertoken_scale, bias = call.pertoken_scale, call.bias
    out_dtype = _resolve_output_dtype(call.output_dtype)
    acc = int_matmul(_qmm_levels(call.x1), _qmm_levels(call.x2))
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias
    if out_dtype == torch.int32:
        return acc
    scale_f32, offset_f32 = _dequant_params(call.scale, call.offset, out_dtype, pertoken_scale is not None)
    values = acc.to(torch.float32) * scale_f32
    if pertoken_scale is not None:
        values = values * pertoken_scale.unsqueeze(-1)
    if bias is not None and bias.dtype != torch.int32:
        values = values + bias.to(torch.float32)
    return _cast_quant_matmul_output(values, offset_f32, out_dtype)

def _quant_matmul_samples() -> list[SampleCall]:
    """int8 x int8 to the int32 accumulator with an int32 bias, to bfloat16 with a per-token scale, and A8W4
    with a weight scale per 16 rows of k."""
    gen = torch.Generator().manual_seed(0)
    x1 = torch.randint(-128, 128, (6, 32), dtype=torch.int8, generator=gen)
    x2 = torch.randint(-128, 128, (32, 8), dtype=torch.int8, generator=gen)
    bias = torch.randint(-1000, 1000, (8,), dtype=torch.int32, generator=gen)
    return [
        SampleCall((x1, x2, torch.full((8,), 0.5)), {"bias": bias, "output_dtype": torch.int32}),
        SampleCall((x1, x2, torch.rand(8, generator=gen)),
                   {"pertoken_scale": torch.rand(6, generator=gen), "output_dtype": torch.bfloat16}),
        SampleCall((x1, _pack_int4(torch.randint(-8, 8, (32, 16), generator=gen).float()),
                    torch.rand(2, 16, generator=gen) / 64),
                   {"pertoken_scale": torch.rand(6, 1, generator=gen), "offset": torch.randn(16, generator=gen),
                    "output_dtype": torch.float16, "group_sizes": [0, 0, 16]}),
    ]


@npu_op(
    meta=_quant_matmul_meta,
    kernel=_quant_matmul_kernel,
    unmodeled=("x1_dtype", "x2_dtype", "pertoken_scale_dtype", "scale_dtype"),
    samples=_quant_matmul_samples,
)
def npu_quant_matmul(call: Arguments) -> None:
    """Quantised matmul: int8 ``x1 [..., m, k]`` times int8 ``x2 [..., k, n]``, then dequantise.

    A4W4: ``x1`` and ``x2`` int32, each word eight int4 values of the last dim (``[..., m, k / 8]`` and
    ``[..., k, n / 8]``, as npu_quantize(..., torch.quint4x2) returns them; element 0 in the low nibble,
    the order :func:`unpack_int4` assumes), or of the second to last for a transposed view (``x2`` as
    ``w.t()`` of an ``[n, k / 8]`` quantised weight); the int4 values multiply exactly as int8 ones do. The
    op-plugin schema's ``x1_dtype``/``x2_dtype``/``scale_dtype``/``pertoken_scale_dtype`` (float8, hifloat8
    and FP4 operands), ``group_sizes`` (per-block scales) and ``y_scale`` must be None.

    Source: torch_npu.npu_quant_matmul (Ascend Extension for PyTorch API reference, 6.0/7.0,
    https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000172.html),
    the QuantBatchMatmulV4 formulas (hicann/ops-nn, matmul/quant_batch_matmul_v4/README.md) and
    the TransQuantParamV2 bit layout (hicann/ops-nn, quant/trans_quant_param_v2/README.md).

    Semantics, with ``acc = x1 @ x2`` accumulated exactly in int32 (:func:`pytest_npufuse.numerics.exact.int_matmul`):

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
    * int32 output: scale float32/bfloat16, int32 bias, no offset, no pertoken_scale.

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
    * int32 output (the last row of the combination table in op-plugin's
      docs/context/torch_npu-npu_quant_matmul.md: int8 x int8, scale float32/bfloat16, int32
      bias, no offset, no pertoken_scale) is the int32 accumulator plus the int32 bias: the
      scale is checked but not applied, as the golden of op-plugin's
      test/test_custom_ops/test_npu_quant_matmul.py (test_npu_quant_matmul_int32) computes
      ``matmul(x1, x2)`` with a scale given.  The accumulator wraps around modulo 2**32 like an
      int32 register.
    * A8W4 (``group_sizes`` [g_m, g_n, g_k], op-plugin's test_npu_quant_matmul_A8W4_*): int8 ``x1`` [m, k],
      ``x2`` int32 words of eight int4 [k, n / 8] (npu_convert_weight_to_int4pack), ``scale`` [k / g_k, n]
      (npu_trans_quant_param's int64, or float32) per k-group and column, ``pertoken_scale`` [m] / [m, 1],
      ``offset`` [n] added before the per-token scale: ``(sum_g ((x1 - 8)_g @ x2_g) * scale[g] + offset) *
      pertoken_scale`` (:func:`_a8w4_kernel`: the golden's nibble split shifts x1 by 8), float16 or bfloat16.
    """


# ---------------------------------------------------------------------------------------------
# npu_dequant_swiglu_quant
# ---------------------------------------------------------------------------------------------


def _dsq_group_count(group_index: Optional[torch.Tensor]) -> int:
    if group_index is None:
        return 1
    require_dtype("group_index", group_index, (torch.int32, torch.int64))
    if group_index.dim() != 1 or group_index.shape[0] < 1:
        raise OpArgumentError(
            f"group_index has shape {list(group_index.shape)}; expected a non-empty 1-D [groupNum]",
            argument="group_index",
        )
    return group_index.shape[0]


def _check_dsq_x(x: torch.Tensor) -> None:
    require_dtype("x", x, (torch.int32, *HALF_DTYPES))
    if x.dim() < 2:
        raise OpArgumentError(f"x has rank {x.dim()} (shape {list(x.shape)}); expected at least 2 dims", argument="x")
    if x.shape[-1] % 2 != 0:
        raise OpArgumentError(
            f"x has last dim {x.shape[-1]}; it must be even (it is split in two halves)", argument="x"
        )


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
        raise OpArgumentError(
            "weight_scale is required when x is int32 (it marks the dequantisation)", argument="weight_scale"
        )
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
            raise OpArgumentError(
                "quant_offset is only used by static quantisation (quant_mode=0), got quant_mode=1",
                argument="quant_offset",
            )
        require_dtype("quant_offset", quant_offset, (torch.float32,))
        require_shape("quant_offset", quant_offset, shapes)


def _dequant_swiglu_quant_meta(call: Arguments) -> tuple[Out, Out]:
    """Validate the npu_dequant_swiglu_quant tensors: y int8 ``[..., H]``, scale float32 ``[...]``."""
    x = call.x
    _check_dsq_x(x)
    groups = _dsq_group_count(call.group_index)
    if x.dtype == torch.int32:
        _check_dsq_dequant_inputs(x, call.weight_scale, call.activation_scale, call.bias, groups)
    _check_dsq_quant_inputs(x, call.quant_scale, call.quant_offset, call.quant_mode, groups)
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
        raise OpArgumentError(f"group_index holds negative token counts: {counts.tolist()}", argument="group_index")
    if int(counts.sum()) > rows:
        raise OpArgumentError(
            f"group_index counts sum to {int(counts.sum())} but x has only {rows} token rows", argument="group_index"
        )
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


def symmetric_levels(values: torch.Tensor, level_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric quantisation to ``[-level_max - 1, level_max]``: ``(levels as float32, scale)``.

    scale = rowmax|v| / level_max (1 for an all-zero row, as in the dequant-swiglu-quant golden model);
    levels = round(v / scale), half to even.
    """
    row_max = values.abs().amax(dim=-1)
    scale = torch.where(row_max > 0, row_max / level_max, torch.ones_like(row_max))
    return torch.round(values / scale.unsqueeze(-1)).clamp_(-level_max - 1, level_max), scale


def _dynamic_quant(
    values: torch.Tensor, row_group: torch.Tensor, quant_scale: Optional[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric int8 quantisation: scale = rowmax|v| / 127 (1 for all-zero rows)."""
    if quant_scale is not None:
        values = values * _per_row(quant_scale, row_group)
    levels, scale = symmetric_levels(values, DYNAMIC_QUANT_MAX)
    return levels.to(torch.int8), scale


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


def _dequant_swiglu_quant_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    x = call.x
    two_h = x.shape[-1]
    x_rows = x.reshape(-1, two_h)
    rows = x_rows.shape[0]
    row_group = _row_groups(call.group_index, rows)
    covered = row_group.shape[0]
    values = _dequantize(x_rows[:covered], row_group, call.weight_scale, call.activation_scale, call.bias)
    activated = swiglu(values, call.activate_left)
    y = torch.zeros(rows, two_h // 2, dtype=torch.int8)
    scale = torch.zeros(rows, dtype=torch.float32)
    if call.quant_mode == 1:
        y[:covered], scale[:covered] = _dynamic_quant(activated, row_group, call.quant_scale)
    else:
        y[:covered] = _static_quant(activated, row_group, call.quant_scale, call.quant_offset)
    return y.reshape(*x.shape[:-1], two_h // 2), scale.reshape(x.shape[:-1])
def _dequant_swiglu_quant_samples() -> list[SampleCall]:
    """A bfloat16 activation quantised statically, and an int32 accumulator dequantised per group."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(8, 64, generator=gen) * 4).bfloat16()
    accumulator = torch.randint(-200, 200, (7, 8), dtype=torch.int32, generator=gen)
    return [
        SampleCall((x,), {"quant_scale": torch.tensor([0.25]), "quant_offset": torch.tensor([3.0])}),
        SampleCall((accumulator,), {"weight_scale": torch.rand(2, 8, generator=gen) * 0.1,
                                    "activation_scale": torch.rand(7, generator=gen),
                                    "group_index": torch.tensor([2, 3]), "quant_mode": 1}),
    ]


@npu_op(meta=_dequant_swiglu_quant_meta, kernel=_dequant_swiglu_quant_kernel, samples=_dequant_swiglu_quant_samples)
def npu_dequant_swiglu_quant(call: Arguments) -> None:
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
    if call.quant_mode not in (0, 1):
        raise OpArgumentError(
            f"quant_mode={call.quant_mode} is not supported; expected 0 (static) or 1 (dynamic)", argument="quant_mode"
        )


# ---------------------------------------------------------------------------------------------
# npu_swiglu
# ---------------------------------------------------------------------------------------------


def _swiglu_meta(call: Arguments) -> Out:
    """Validate the npu_swiglu input: x's dtype, ``dim`` halved."""
    return halved("input", call.input, call.dim)


def _swiglu_kernel(call: Arguments) -> torch.Tensor:
    return swiglu(call.input.to(torch.float32), activate_left=True, dim=call.dim).to(call.input.dtype)


def _swiglu_samples() -> list[SampleCall]:
    """The gate and up halves along the last dim, and along dim 0."""
    gen = torch.Generator().manual_seed(0)
    return [
        SampleCall((torch.randn(2, 3, 16, generator=gen),)),
        SampleCall((torch.randn(8, 6, generator=gen).bfloat16(), 0)),
    ]

def _swiglu_backward_meta(call: Arguments) -> Out:
    """The input's gradient (x's shape and dtype) from the output's (x's dtype, ``dim`` halved)."""
    out = _swiglu_meta(bind(npu_swiglu, call.input, call.dim))
    require_dtype("grad_output", call.grad_output, (call.input.dtype,), "(input's dtype)")
    require_shape("grad_output", call.grad_output, (tuple(out.shape),))
    return Out(list(call.input.shape), call.input.dtype)


def _swiglu_backward_kernel(call: Arguments) -> torch.Tensor:
    """With A, B the halves and ``s = sigmoid(A)``: ``dA = dy * B * s * (1 + A (1 - s))`` (swish's
    derivative) and ``dB = dy * A * s``, float32, concatenated along ``dim`` and rounded once."""
    gate, linear = call.input.to(torch.float32).chunk(2, dim=call.dim)
    dy = call.grad_output.to(torch.float32)
    sigmoid = 1.0 / (1.0 + torch.exp(-gate))
    d_gate = dy * linear * sigmoid * (1.0 + gate * (1.0 - sigmoid))
    return torch.cat((d_gate, dy * gate * sigmoid), dim=call.dim).to(call.input.dtype)


def _swiglu_backward_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(1)
    calls = []
    for sample in _swiglu_samples():
        out = torch.ops.npu.npu_swiglu(*sample.args)
        calls.append(SampleCall((torch.randn(out.shape, generator=gen).to(out.dtype), *sample.args)))
    return calls


@npu_op(meta=_swiglu_backward_meta, kernel=_swiglu_backward_kernel, samples=_swiglu_backward_samples)
def npu_swiglu_backward(call: Arguments) -> None:
    """SwiGluGrad: the gradient of :func:`npu_swiglu`'s input from its output's gradient ``grad_output``.

    Source: op-plugin derivatives.yaml (``npu_swiglu -> npu_swiglu_backward(grad, self, dim)``) and its
    meta function (the gradient is like ``self``).
    """


def _swiglu_setup(ctx: object, call: Arguments, output: torch.Tensor) -> None:
    ctx.save_for_backward(call.input)
    ctx.dim = call.dim


def _swiglu_grad(ctx: object, grad: torch.Tensor) -> tuple:
    (x,) = ctx.saved_tensors
    return torch.ops.npu.npu_swiglu_backward(grad, x, ctx.dim), None


@npu_op(meta=_swiglu_meta, kernel=_swiglu_kernel, derivative=Derivative(_swiglu_setup, _swiglu_grad),
        samples=_swiglu_samples)
def npu_swiglu(call: Arguments) -> None:
    """SwiGLU: split ``x`` in halves A (first) and B (second) along ``dim``; return ``swish(A) * B``.

    Source: torch_npu.npu_swiglu (Ascend Extension for PyTorch API reference, 6.0 and 7.2;
    schema ``npu_swiglu(Tensor self, int dim=-1) -> Tensor``).  The doc defines the output as
    ``A * sigmoid(A) * B`` with A the first half, i.e. vLLM's SiluAndMul for ``dim=-1``.  Note
    that this is the opposite default to npu_dequant_swiglu_quant (activate_left=False).

    ``x`` is float16, bfloat16 or float32 with an even size in ``dim``; the output has x's dtype
    and half that size.  Swish is computed in float32 as ``a / (1 + exp(-a))`` (the form the
    dequant-swiglu-quant golden model uses), then multiplied by B and cast to x's dtype.
    """


# ---------------------------------------------------------------------------------------------
# int4 packing (quint4x2 outputs)
# ---------------------------------------------------------------------------------------------


def _pack_int4(levels: torch.Tensor) -> torch.Tensor:
    """Pack int4 levels (float32 in [-8, 7]) eight to an int32 along the last dim, element 0 in the low nibble.

    torch_npu returns quint4x2 results as int32 with the last dim divided by 8 (npu_dynamic_quant and
    npu_quantize docs).  The nibble order within the int32 is not documented; low-nibble-first is the
    order of torch_npu.npu_convert_weight_to_int4pack's CPU reference and is an assumption here.
    """
    nibbles = levels.to(torch.int64).reshape(*levels.shape[:-1], -1, INT4_PER_INT32) & 0xF
    shifts = torch.arange(INT4_PER_INT32, dtype=torch.int64) * 4
    return wrap_to_int32((nibbles << shifts).sum(dim=-1))


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The int4 values (int8, in [-8, 7]) of int32 words holding eight each, the inverse of :func:`_pack_int4`
    (element 0 in the low nibble, the same assumption)."""
    shifts = torch.arange(INT4_PER_INT32, dtype=torch.int64) * 4
    nibbles = (packed.to(torch.int64).unsqueeze(-1) >> shifts) & 0xF
    values = torch.where(nibbles >= 8, nibbles - 16, nibbles)
    return values.flatten(-2).to(torch.int8)


def _check_int4_width(name: str, x: torch.Tensor) -> None:
    if x.shape[-1] % INT4_PER_INT32 != 0:
        raise OpArgumentError(
            f"{name} has last dim {x.shape[-1]}; a quint4x2 output packs 8 values per int32", argument=name
        )


def _packed_shape(x: torch.Tensor) -> list[int]:
    return [*x.shape[:-1], x.shape[-1] // INT4_PER_INT32]


# ---------------------------------------------------------------------------------------------
# npu_dynamic_quant
# ---------------------------------------------------------------------------------------------

DYNAMIC_QUANT_DST = (torch.int8, torch.quint4x2)


def _dynamic_quant_meta(call: Arguments) -> tuple[Out, Out]:
    """y int8 like input (int32 [..., H/8] for quint4x2), scale float32 [...]."""
    input, smooth_scales, group_index = call.input, call.smooth_scales, call.group_index
    require_dtype("input", input, HALF_DTYPES)
    if input.dim() < 2:
        raise OpArgumentError(
            f"input has rank {input.dim()}; npu_dynamic_quant needs at least 2 dims", argument="input"
        )
    hidden = input.shape[-1]
    if group_index is None and smooth_scales is not None:
        require_dtype("smooth_scales", smooth_scales, HALF_DTYPES)
        require_shape("smooth_scales", smooth_scales, ((hidden,),))
    if group_index is not None:
        if smooth_scales is None:
            raise OpArgumentError(
                "group_index selects rows of smooth_scales; pass smooth_scales [groups, H] with it",
                argument="group_index",
            )
        require_dtype("group_index", group_index, (torch.int32, torch.int64))
        require_dtype("smooth_scales", smooth_scales, HALF_DTYPES)
        if group_index.dim() != 1 or smooth_scales.dim() != 2 or tuple(smooth_scales.shape) != (group_index.shape[0], hidden):
            raise OpArgumentError(
                f"with group_index {list(group_index.shape)}, smooth_scales must be [groups, {hidden}], "
                f"got {list(smooth_scales.shape)}"
            )
    scale = Out(list(input.shape[:-1]), torch.float32)
    if call.dst_type == torch.quint4x2:
        _check_int4_width("input", input)
        return Out(_packed_shape(input), torch.int32), scale
    return Out(list(input.shape), torch.int8), scale


def _group_rows(group_index: torch.Tensor, rows: int) -> torch.Tensor:
    """Group id of each row from cumulative row ends (npu_dynamic_quant's MoE group_index)."""
    ends = [int(v) for v in group_index.tolist()]
    if any(b < a for a, b in zip([0, *ends], ends)) or (ends and ends[-1] != rows):
        raise OpArgumentError(
            f"group_index {ends} must be non-decreasing cumulative row ends whose last value is the row count {rows}",
            argument="group_index"
        )
    counts = torch.tensor([b - a for a, b in zip([0, *ends], ends)], dtype=torch.int64)
    return torch.repeat_interleave(torch.arange(len(ends)), counts)


def _dynamic_quant_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    input = call.input
    rows = input.reshape(-1, input.shape[-1]).to(torch.float32)
    if call.smooth_scales is not None:
        row_group = torch.zeros(rows.shape[0], dtype=torch.int64) if call.group_index is None else _group_rows(
            call.group_index, rows.shape[0]
        )
        rows = rows * _per_row(call.smooth_scales, row_group)
    int4 = call.dst_type == torch.quint4x2
    levels, scale = symmetric_levels(rows, INT4_MAX if int4 else DYNAMIC_QUANT_MAX)
    levels = levels.reshape(input.shape)
    y = _pack_int4(levels) if int4 else levels.to(torch.int8)
    return y, scale.reshape(input.shape[:-1])


def _dynamic_quant_samples() -> list[SampleCall]:
    """Per-token int8 of a bfloat16 activation; with per-group smooth scales; packed int4."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 32, generator=gen).bfloat16()
    rows = torch.randn(5, 32, generator=gen).half()
    smooth = (torch.rand(3, 32, generator=gen) + 0.5).half()
    return [
        SampleCall((x,)),
        SampleCall((rows,), {"smooth_scales": smooth, "group_index": torch.tensor([2, 4, 5], dtype=torch.int32)}),
        SampleCall((x,), {"dst_type": torch.quint4x2}),
    ]


@npu_op(meta=_dynamic_quant_meta, kernel=_dynamic_quant_kernel, samples=_dynamic_quant_samples)
def npu_dynamic_quant(call: Arguments) -> None:
    """Per-token symmetric dynamic quantisation: returns ``(y, scale)``.

    Source: torch_npu.npu_dynamic_quant (op-plugin docs/context/torch_npu-npu_dynamic_quant.md):
    ``v = x * smooth_scales`` (when given), ``scale = rowMax(|v|) / DTYPE_MAX``,
    ``y = round(v / scale)``, with DTYPE_MAX 127 for int8 and 7 for int4.

    * ``input``: float16/bfloat16, rank >= 2; ``scale`` is float32 ``input.shape[:-1]``.
    * per token: ``smooth_scales`` [H] (optional);  per group (MoE): ``smooth_scales``
      [groups, H] and ``group_index`` [groups] of cumulative row ends (monotonic, last = rows),
      rows ``group_index[g-1]:group_index[g]`` use ``smooth_scales[g]`` (doc).
    * ``dst_type`` None/int8: int8 ``y`` like input; ``torch.quint4x2``: int4 levels in
      [-8, 7], eight packed per int32 (last dim / 8; nibble order: see ``_pack_int4``).
    * float32 math, round half to even.  An all-zero row gets scale 1 and y 0 (the device
      divides by zero there; the value it writes is not documented).
    * ``quant_mode`` and ``dst_type_max`` are op-plugin's schema arguments for the float8/hifloat8
      outputs, which the API page does not document: only their defaults (``"pertoken"``, 0.0) are
      accepted.
    """
    if call.dst_type is not None:
        require_choice("dst_type", call.dst_type, DYNAMIC_QUANT_DST, "int8, or quint4x2 for packed int4")
    require_choice("quant_mode", call.quant_mode, ("pertoken",), "per-token scales, the documented mode")
    require_choice("dst_type_max", call.dst_type_max, (0.0,), "the output dtype's own maximum")


# ---------------------------------------------------------------------------------------------
# npu_quantize
# ---------------------------------------------------------------------------------------------

QUANTIZE_OUTPUTS = {
    torch.qint8: (torch.int8, -128.0, 127.0),
    torch.quint8: (torch.uint8, 0.0, 255.0),
    torch.int8: (torch.int8, -128.0, 127.0),
    torch.qint32: (torch.int32, -(2.0**31), 2.0**31 - 1),
    torch.int32: (torch.int32, -(2.0**31), 2.0**31 - 1),
    torch.quint4x2: (torch.int32, -8.0, 7.0),
}


def _require_quantize_dtype(name: str, value: object) -> torch.dtype:
    """npu_quantize's ``dtype`` names the output type by its torch dtype; the message lists the ones torch_npu
    documents, since a string (``"qint8"``) or an output tensor's dtype name is the usual mistake."""
    if not isinstance(value, torch.dtype):
        choices = ", ".join(str(dtype) for dtype in QUANTIZE_OUTPUTS)
        raise OpTypeError(
            f"{name} must be a torch.dtype, one of {choices}; got {type(value).__name__} {value!r}", argument=name
        )
    return value


def _quantize_axis(input: torch.Tensor, axis: int, div_mode: bool) -> int:
    """The element-wise axis as a non-negative dim: div_mode=False uses the last axis unless axis is -2 (doc)."""
    if not div_mode:
        return input.dim() - 2 if axis == -2 else input.dim() - 1
    if not -input.dim() <= axis < input.dim():
        raise OpArgumentError(f"axis={axis} is out of range for input of shape {list(input.shape)}", argument="axis")
    return axis % input.dim()


def _broadcast_param(param: torch.Tensor, input: torch.Tensor, dim: int) -> torch.Tensor:
    """A 1-D per-axis (or single-value) parameter as float32, shaped to broadcast along ``dim``."""
    shape = [1] * input.dim()
    shape[dim] = -1
    return param.to(torch.float32).reshape(shape)


def _check_quantize_param(name: str, param: torch.Tensor, input: torch.Tensor, dim: int) -> None:
    if param.numel() not in (1, input.shape[dim]) or param.dim() not in (1, input.dim()):
        raise OpArgumentError(
            f"{name} has shape {list(param.shape)}; expected "
            f"[{input.shape[dim]}] or [1] (the size of input's axis {dim})",
            argument=name
        )


def _quantize_meta(call: Arguments) -> Out:
    input, zero_points = call.input, call.zero_points
    require_dtype("input", input, FLOAT_DTYPES)
    require_dtype("scales", call.scales, FLOAT_DTYPES)
    dim = _quantize_axis(input, call.axis, call.div_mode)
    _check_quantize_param("scales", call.scales, input, dim)
    if zero_points is not None:
        require_dtype("zero_points", zero_points, (torch.int8, torch.uint8, torch.int32, *FLOAT_DTYPES))
        _check_quantize_param("zero_points", zero_points, input, dim)
    if call.dtype == torch.quint4x2:
        if call.div_mode:
            raise OpArgumentError("dtype=torch.quint4x2 needs div_mode=False (doc)", argument="dtype")
        _check_int4_width("input", input)
        return Out(_packed_shape(input), torch.int32)
    return Out(list(input.shape), QUANTIZE_OUTPUTS[call.dtype][0])


def _quantize_kernel(call: Arguments) -> torch.Tensor:
    input = call.input
    dim = _quantize_axis(input, call.axis, call.div_mode)
    scale = _broadcast_param(call.scales, input, dim)
    values = input.to(torch.float32)
    values = values / scale if call.div_mode else values * scale
    if call.zero_points is not None:
        values = values + _broadcast_param(call.zero_points, input, dim)
    out_dtype, low, high = QUANTIZE_OUTPUTS[call.dtype]
    levels = torch.round(values).clamp_(low, high)
    return _pack_int4(levels) if call.dtype == torch.quint4x2 else levels.to(out_dtype)


def _quantize_samples() -> list[SampleCall]:
    """Per-channel quantisation on axis 1 with zero points, and packed int4 on the last axis."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 16, generator=gen) * 4
    scales = torch.rand(16, generator=gen) + 0.5
    return [
        SampleCall((x.t().contiguous(), torch.rand(3, generator=gen) + 0.5, torch.zeros(3), torch.qint8, 1)),
        SampleCall((x, scales, None, torch.quint4x2, -1, False)),
    ]


@npu_op(
    meta=_quantize_meta,
    kernel=_quantize_kernel,
    argument_checks={"dtype": _require_quantize_dtype},
    samples=_quantize_samples,
)
def npu_quantize(call: Arguments) -> None:
    """Static quantisation: ``round(input / scales + zero_points)`` (``input * scales`` when not div_mode).

    Source: torch_npu.npu_quantize (op-plugin docs/context/torch_npu-npu_quantize.md).

    * ``scales``/``zero_points`` hold one value per element of ``input``'s ``axis`` (or one
      value) and broadcast over the other axes.  With ``div_mode=False`` the axis is the last
      one unless ``axis=-2`` (doc).
    * ``dtype``: torch.qint8/int8 -> int8, torch.quint8 -> uint8, torch.qint32/int32 -> int32,
      torch.quint4x2 (div_mode=False only) -> int4 levels packed eight per int32.
    * float32 math, round half to even, saturated to the output range.
    """
    require_choice("dtype", call.dtype, tuple(QUANTIZE_OUTPUTS), "the output types torch_npu documents")


# ---------------------------------------------------------------------------------------------
# npu_weight_quant_batchmatmul
# ---------------------------------------------------------------------------------------------

WQBMM_BIAS_DTYPES = {torch.float16: torch.float16, torch.bfloat16: torch.float32}


def antiquant_param_shapes(k: int, n: int, group_size: int) -> tuple[tuple[int, ...], ...]:
    """Per-tensor, per-channel, or (with a group size) per-group [ceil(k / group), n] shapes."""
    if group_size > 0:
        return ((math.ceil(k / group_size), n),)
    return ((1,), (1, 1), (n,), (1, n))


def _weight_quant_batchmatmul_meta(call: Arguments) -> Out:
    x, weight, bias = call.x, call.weight, call.bias
    require_dtype("x", x, HALF_DTYPES)
    require_dtype("weight", weight, (torch.int8,), "(int4 packed in int32 is not implemented)")
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[0]:
        raise OpArgumentError(
            f"x {list(x.shape)} and weight {list(weight.shape)} must be [m, k] and [k, n]", argument="x"
        )
    k, n = weight.shape
    shapes = antiquant_param_shapes(k, n, call.antiquant_group_size)
    for name, param in (("antiquant_scale", call.antiquant_scale), ("antiquant_offset", call.antiquant_offset)):
        if param is not None:
            require_dtype(name, param, (x.dtype,), "(x's dtype)")
            require_shape(name, param, shapes)
    if bias is not None:
        require_dtype("bias", bias, (WQBMM_BIAS_DTYPES[x.dtype],), f"for {x.dtype} x (doc)")
        require_shape("bias", bias, ((n,), (1, n)))
    return Out([x.shape[0], n], x.dtype)


def antiquant_weight(
    weight: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor], group_size: int, dtype: torch.dtype
) -> torch.Tensor:
    """``(weight + offset) * scale`` in float32, rounded once to x's dtype (the Cube's input dtype)."""
    k, n = weight.shape

    def expand(param: torch.Tensor) -> torch.Tensor:
        values = param.to(torch.float32).reshape(-1, n) if param.numel() > 1 else param.to(torch.float32).reshape(1, 1)
        return values.repeat_interleave(group_size, dim=0)[:k] if group_size > 0 else values

    values = weight.to(torch.float32)
    if offset is not None:
        values = values + expand(offset)
    return (values * expand(scale)).to(dtype)


def _weight_quant_batchmatmul_kernel(call: Arguments) -> torch.Tensor:
    x = call.x
    w = antiquant_weight(call.weight, call.antiquant_scale, call.antiquant_offset, call.antiquant_group_size, x.dtype)
    if call.bias is None:
        return cube_matmul(x, w)
    return cube_addmm(call.bias.reshape(-1), x, w)


def _wqbmm_samples() -> list[SampleCall]:
    """An int8 weight dequantised per channel with an offset and bias, and per group of 32 rows."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 96, generator=gen).bfloat16()
    weight = torch.randint(-8, 8, (96, 24), dtype=torch.int8, generator=gen)
    scale = (torch.rand(1, 24, generator=gen) * 0.1).bfloat16()
    grouped = (torch.rand(3, 24, generator=gen) * 0.1).bfloat16()
    return [
        SampleCall((x, weight, scale, torch.ones(1, 24).bfloat16()), {"bias": torch.randn(24, generator=gen)}),
        SampleCall((x, weight, grouped), {"antiquant_group_size": 32}),
    ]


@npu_op(meta=_weight_quant_batchmatmul_meta, kernel=_weight_quant_batchmatmul_kernel, samples=_wqbmm_samples)
def npu_weight_quant_batchmatmul(call: Arguments) -> None:
    """Weight-only quantised matmul (W8A16): ``y = x @ ((weight + antiquant_offset) * antiquant_scale) + bias``.

    Source: torch_npu.npu_weight_quant_batchmatmul (op-plugin
    docs/context/torch_npu-npu_weight_quant_batchmatmul.md; WeightQuantBatchMatmulV2 formula).

    * ``x`` float16/bfloat16 [m, k]; ``weight`` int8 [k, n]; output [m, n] in x's dtype.
    * ``antiquant_scale``/``antiquant_offset`` in x's dtype: per tensor [1] or [1, 1], per channel
      [n] or [1, n], or per group [ceil(k / antiquant_group_size), n] when ``antiquant_group_size``
      > 0.  ``bias`` [n] or [1, n]: float16 for float16 x, float32 for bfloat16 x (doc).
    * The dequantised weight is computed in float32 and rounded once to x's dtype (the Cube
      multiplies fp16/bf16 operands); the product accumulates in float32 with the bias
      (x's dtype or float32) added before one rounding (:func:`pytest_npufuse.numerics.exact.cube_addmm`).
    * ``weight_dtype`` (op-plugin's schema: the format the weight tensor holds, a torch.dtype or torch_npu
      code) may name int8, the weight's own dtype; hifloat8, float8 and float4 weights are refused by name
      on real tensors (on fake ones op-plugin's meta gives their ``[m, n]`` output in x's dtype).
    * Not implemented (ValueError): int4 weights (int32-packed), int64 (trans_quant_param)
      antiquant scales, and the int8 output quantisation ``quant_scale``/``quant_offset``.  ``inner_precise`` selects a device
      precision/performance mode and does not change this model's values.
    """
    require_unused("npu_weight_quant_batchmatmul (int8 output)", quant_scale=call.quant_scale,
                   quant_offset=call.quant_offset)
    if call.weight_dtype is not None and kernel_checks_apply(call.x):
        require_choice("weight_dtype", dtype_of_code(call.weight_dtype), (torch.int8,),
                       "the int8 weight the model dequantises; hifloat8, float8 and float4 weights are not modeled")
    if call.antiquant_group_size < 0:
        raise OpArgumentError(
            f"antiquant_group_size={call.antiquant_group_size} must be >= 0 (0: no groups)",
            argument="antiquant_group_size",
        )
    require_choice("inner_precise", call.inner_precise, (0, 1), "device precision modes")


# ---------------------------------------------------------------------------------------------
# npu_trans_quant_param
# ---------------------------------------------------------------------------------------------

def _trans_quant_param_shape(scale: torch.Tensor, offset: Optional[torch.Tensor]) -> list[int]:
    """scale's shape; a 1-D scale with an offset gives the longer of the two (t = 1 or n)."""
    if scale.dim() == 1 and offset is not None:
        return [max(scale.shape[0], offset.shape[0])]
    return list(scale.shape)


def _mismatched(t_scale: int, t_offset: int) -> bool:
    """Lengths t of a 1-D scale and offset that do not pair (each is 1 or n)."""
    return t_scale != t_offset and 1 not in (t_scale, t_offset)


def _trans_quant_param_meta(call: Arguments) -> Out:
    scale, offset = call.scale, call.offset
    require_dtype("scale", scale, (torch.float32,))
    if scale.dim() not in (1, 2) or (scale.dim() == 2 and scale.shape[0] != 1):
        raise OpArgumentError(f"scale has shape {list(scale.shape)}; expected (t,) or (1, n)", argument="scale")
    if offset is not None:
        require_dtype("offset", offset, (torch.float32,))
        if scale.dim() == 2 and offset.shape != scale.shape:
            raise OpArgumentError(
                f"offset has shape {list(offset.shape)}; with a (1, n) scale it must be {list(scale.shape)}",
                argument="offset"
            )
        if scale.dim() == 1 and (offset.dim() != 1 or _mismatched(scale.shape[0], offset.shape[0])):
            raise OpArgumentError(
                f"offset has shape {list(offset.shape)}; with scale (t,) it must be (1,) or (t,)", argument="offset"
            )
    return Out(_trans_quant_param_shape(scale, offset), torch.int64)


def _trans_quant_param_kernel(call: Arguments) -> torch.Tensor:
    scale, offset = call.scale, call.offset
    shape = _trans_quant_param_shape(scale, offset)
    values = round_scale_to_fp19(scale) if call.round_mode == 1 else scale
    rounded_offset = None if offset is None else torch.round(offset).expand(shape)  # ties to even
    return encode_quant_param(values.expand(shape), rounded_offset)


def _trans_quant_param_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(0)
    return [SampleCall((torch.rand(8, generator=gen), torch.randn(8, generator=gen))),
            SampleCall((torch.rand(1, 8, generator=gen),), {"round_mode": 1})]


@npu_op(meta=_trans_quant_param_meta, kernel=_trans_quant_param_kernel, samples=_trans_quant_param_samples)
def npu_trans_quant_param(call: Arguments) -> None:
    """The int64 "quant param" npu_quant_matmul and npu_grouped_matmul take as an int64 ``scale``.

    Sources: torch_npu.npu_trans_quant_param (schema ``npu_trans_quant_param(Tensor scale, Tensor?
    offset=None, int? round_mode=0) -> Tensor``) and TransQuantParamV2 (hicann/ops-nn
    quant/trans_quant_param_v2/README.md):

    * ``scale`` float32 (t,) or (1, n), t = 1 or n; ``offset`` float32 of the same form.
    * The scale's float32 bits keep their top 19 bits (``round_mode=0`` truncates, ``1`` rounds to
      nearest even first), bit 46 is set, and the offset, rounded to nearest even and clamped to
      [-256, 255], is stored as 9 bits at 37..45 (:mod:`.quant_param`).
    * The device returns uint64; torch has none, so the result is int64 with the same bits.
    """
    mode = 0 if call.round_mode is None else call.round_mode
    require_choice("round_mode", mode, (0, 1), "truncate or round to nearest even")


# ---------------------------------------------------------------------------------------------
# npu_anti_quant
# ---------------------------------------------------------------------------------------------

ANTI_QUANT_DST = (torch.float16, torch.bfloat16)
ANTI_QUANT_SRC = (torch.int8, torch.quint4x2)


def _anti_quant_values(x: torch.Tensor) -> torch.Tensor:
    """The integers x holds: int8 as is, int32 words as eight int4 values each."""
    return unpack_int4(x) if x.dtype == torch.int32 else x


def _anti_quant_meta(call: Arguments) -> Out:
    """out like x (int32 words widened eight times), in dst_dtype (float16 by default)."""
    x, scale, offset = call.x, call.scale, call.offset
    require_dtype("x", x, (torch.int8, torch.int32))
    if call.src_dtype is not None and (x.dtype == torch.int32) != (call.src_dtype == torch.quint4x2):
        raise OpArgumentError(
            f"x is {x.dtype} but src_dtype is {call.src_dtype}; pass src_dtype=None (read from x), torch.int8 "
            "for int8 x or torch.quint4x2 for int32 words of int4", argument="x"
        )
    width = x.shape[-1] * (INT4_PER_INT32 if x.dtype == torch.int32 else 1) if x.dim() else 1
    require_dtype("scale", scale, (torch.float32, torch.bfloat16))
    if scale.dim() != 1 or scale.shape[0] not in (1, width):
        raise OpArgumentError(
            f"scale has shape {list(scale.shape)}; expected (1,) or ({width},), x's last dim in values",
            argument="scale"
        )
    if offset is not None and (offset.dtype != scale.dtype or offset.shape != scale.shape):
        raise OpArgumentError(
            f"offset is {offset.dtype} {list(offset.shape)}; it must match scale ({scale.dtype} {list(scale.shape)})",
            argument="offset"
        )
    return Out([*x.shape[:-1], width] if x.dim() else [], call.dst_dtype or torch.float16)


def _anti_quant_kernel(call: Arguments) -> torch.Tensor:
    values = _anti_quant_values(call.x).to(torch.float32)
    if call.offset is not None:
        values = values + call.offset.to(torch.float32)
    return (values * call.scale.to(torch.float32)).to(call.dst_dtype or torch.float16)


def _anti_quant_samples() -> list[SampleCall]:
    """int8 with a per-channel scale and offset to bfloat16, and int4 words with the default float16."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-128, 127, (3, 16), dtype=torch.int8, generator=gen)
    words = torch.randint(-2**31, 2**31 - 1, (2, 2), dtype=torch.int32, generator=gen)
    return [
        SampleCall((x, torch.rand(16, generator=gen) * 0.1), {"offset": torch.randn(16, generator=gen),
                                                             "dst_dtype": torch.bfloat16}),
        SampleCall((words, torch.ones(16)), {"src_dtype": torch.quint4x2}),
    ]


@npu_op(meta=_anti_quant_meta, kernel=_anti_quant_kernel, samples=_anti_quant_samples)
def npu_anti_quant(call: Arguments) -> None:
    """Dequantise integers to float16/bfloat16: ``out = dst((x + offset) * scale)``.

    Source: torch_npu.npu_anti_quant (op-plugin docs/context/torch_npu-npu_anti_quant.md).

    * ``x`` int8, or int32 words of eight int4 values (element 0 in the low nibble: the packing order
      :func:`unpack_int4` assumes); ``src_dtype`` None reads the kind from x's dtype, a given one must
      agree with it (torch.int8, or torch.quint4x2 for int32 words: op-plugin's
      AntiQuantKernelNpuOpApi.cpp); ``scale`` float32/bfloat16 (n,) with
      n = 1 or x's last dim in values; ``offset`` like scale; ``dst_dtype`` float16 (default) or bfloat16.
    * The sum and product are float32, rounded once to ``dst_dtype``.
    """
    if call.dst_dtype is not None:
        require_choice("dst_dtype", call.dst_dtype, ANTI_QUANT_DST, "the float outputs")
    if call.src_dtype is not None:
        require_choice("src_dtype", call.src_dtype, ANTI_QUANT_SRC, "int8 or packed int4")


# ---------------------------------------------------------------------------------------------
# npu_dynamic_block_quant
# ---------------------------------------------------------------------------------------------

# dst_type is torch's ScalarType number (op-plugin's meta maps it with TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_TYPE_MAP):
# int8, the only value the API page supports on A2/A3.
BLOCK_QUANT_SIZES = (1, 128)  # the page: row_block_size 1 and col_block_size 128 only


def _block_quant_meta(call: Arguments) -> tuple[Out, Out]:
    x = call.x
    require_dtype("x", x, HALF_DTYPES)
    if x.dim() not in (2, 3):
        raise OpArgumentError(f"x has shape {list(x.shape)}; the page supports 2 or 3 dims", argument="x")
    scale = list(x.shape)
    scale[-2] = -(-scale[-2] // call.row_block_size)
    scale[-1] = -(-scale[-1] // call.col_block_size)
    return Out(list(x.shape), torch.int8), Out(scale, torch.float32)


def _block_quant_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocks of one row by ``col_block_size`` columns (the last one padded with zeros): ``factor =
    min(127 / amax, 1 / min_scale)``, ``y = clamp(rint(x * factor), -127, 127)``, ``scale = 1 / factor``
    (op-plugin's golden: ``x * (127 / amax)`` rounded, ``scale = amax / 127``). An all-zero block without
    ``min_scale`` gives zeros and scale 0."""
    x, width = call.x, call.col_block_size
    rows, columns = math.prod(x.shape[:-1]), x.shape[-1]
    padded = torch.nn.functional.pad(x.to(torch.float32).reshape(rows, columns), (0, -columns % width))
    blocks = padded.reshape(rows, -1, width)
    amax = blocks.abs().amax(dim=-1)
    limit = math.inf if call.min_scale == 0 else 1 / call.min_scale
    factor = torch.minimum(DYNAMIC_QUANT_MAX / amax, torch.tensor(limit))
    finite = torch.isfinite(factor)
    levels = torch.where(finite[..., None], blocks * factor.nan_to_num(posinf=0)[..., None], 0.0)
    y = levels.round().clamp(-DYNAMIC_QUANT_MAX, DYNAMIC_QUANT_MAX).to(torch.int8)
    scale = torch.where(finite, 1 / factor, 0.0)
    scale_shape = [*x.shape[:-1], blocks.shape[1]]
    return y.reshape(rows, -1)[:, :columns].contiguous().reshape(x.shape), scale.reshape(scale_shape)


def _block_quant_samples() -> list[SampleCall]:
    """A [6, 300] float16 tensor in 128-column blocks (the last one partial) to int8."""
    x = (4 * torch.rand(6, 300, generator=torch.Generator().manual_seed(0)) - 2).half()
    return [SampleCall((x,), {"dst_type": torch.int8}), SampleCall((x.bfloat16(),), {"min_scale": 0.001})]


@npu_op(
    meta=_block_quant_meta,
    kernel=_block_quant_kernel,
    unmodeled=("dst_type_max",),
    argument_checks={"dst_type": require_scalar_type_number},
    samples=_block_quant_samples,
)
def npu_dynamic_block_quant(call: Arguments) -> None:
    """Per-block symmetric int8 quantisation: returns (y int8 in x's shape, scale float32 per block).

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_dynamic_block_quant.md (formula; x float16
    or bfloat16 with 2 or 3 dims; round_mode "rint", dst_type 1 = int8, row_block_size 1, col_block_size
    128 the only supported values), test/test_custom_ops/test_npu_dynamic_block_quant.py (golden) and
    op-plugin's meta function (scale shape: the last two dims divided by the block sizes, rounded up). The
    FP8/HiF8 targets (other dst_type values) and ``dst_type_max`` are not implemented.
    """
    require_choice("round_mode", call.round_mode, ("rint",), "the only rounding the page supports")
    require_choice("dst_type", call.dst_type, INT8_SCALAR_TYPE, "int8; the FP8/HiF8 targets are not implemented")
    require_choice("row_block_size", call.row_block_size, BLOCK_QUANT_SIZES[:1], "the page supports only 1")
    require_choice("col_block_size", call.col_block_size, BLOCK_QUANT_SIZES[1:], "the page supports only 128")
    if call.min_scale < 0:
        raise OpArgumentError(f"min_scale={call.min_scale}; it must be >= 0", argument="min_scale")
