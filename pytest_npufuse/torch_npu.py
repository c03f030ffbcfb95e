"""CPU reference kernels for the ``torch_npu`` operators used by the seed example and the decoder-layer cases.

The feature document fuses ``npu_quant_matmul`` and ``npu_dequant_swiglu_quant`` into one
SuperKernel and checks that the outputs are bit-identical with and without the scope.  The
bundled regression cases add the ops of a decoder layer (norm, attention, MoE routing, expert
FFN).  To model them on a machine without an Ascend NPU, this module provides those operators
with the same Python call signatures as Huawei's ``torch_npu``:

* :func:`npu_quant_matmul` (registered as ``torch.ops.npu.npu_quant_matmul``)
* :func:`npu_dequant_swiglu_quant` (``torch.ops.npu.npu_dequant_swiglu_quant``)
* :func:`npu_format_cast` (``torch.ops.npu.npu_format_cast``)
* :func:`npu_rms_norm`, :func:`npu_swiglu`, :func:`npu_moe_gating_top_k`,
  :func:`npu_grouped_matmul` and :func:`npu_fused_infer_attention_score` (same pattern)

Each operator is defined in the ``npu`` namespace with torch_npu's schema, a CPU kernel and a
fake kernel.  ``torch.compile(..., fullgraph=True)`` followed by ``aot_module_simplified``
therefore leaves one opaque ``npu.<name>.default`` node per call in the aten graph, which is
what a graph-level scope or fusion pass needs to see.

The kernels are bit-deterministic on CPU, whatever the thread count.  Integer matrix products
accumulate in int32, which is exact.  Float sums (norms, softmax, float matmuls, attention)
use fixed-order float32 pairwise trees built from element-wise operations.  Every other float
step is a single element-wise float32 operation in a fixed order.  Maxima and sorts are exact.
"""

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

# The public functions check their arguments before calling the op, for an error that names the
# torch_npu argument. While Dynamo traces a model they skip that check: the op's fake kernel runs the
# same checks natively, and tracing them in Python would double capture time for every case.
__all__ = [
    "npu_dequant_swiglu_quant",
    "npu_format_cast",
    "npu_fused_infer_attention_score",
    "npu_grouped_matmul",
    "npu_moe_gating_top_k",
    "npu_quant_matmul",
    "npu_rms_norm",
    "npu_swiglu",
]

INT8_MIN = -128
INT8_MAX = 127
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
FLOAT_X_DTYPES = (torch.float16, torch.bfloat16)

# The schemas are torch_npu's own, keyword-only markers included, so that graphs traced here
# carry the same arguments as graphs traced with the real torch_npu.  torch.library.custom_op
# cannot express keyword-only tensors, hence an explicit FRAGMENT library.  It must stay
# referenced for the lifetime of the module: dropping it would unregister the ops.
_LIB = torch.library.Library("npu", "FRAGMENT")
QUANT_MATMUL_SCHEMA = (
    "npu_quant_matmul(Tensor x1, Tensor x2, Tensor scale, *, Tensor? offset=None, "
    "Tensor? pertoken_scale=None, Tensor? bias=None, ScalarType? output_dtype=None) -> Tensor"
)
DEQUANT_SWIGLU_QUANT_SCHEMA = (
    "npu_dequant_swiglu_quant(Tensor x, *, Tensor? weight_scale=None, Tensor? activation_scale=None, "
    "Tensor? bias=None, Tensor? quant_scale=None, Tensor? quant_offset=None, Tensor? group_index=None, "
    "bool activate_left=False, int quant_mode=0) -> (Tensor, Tensor)"
)
FORMAT_CAST_SCHEMA = "npu_format_cast(Tensor x, int acl_format) -> Tensor"
for _schema in (QUANT_MATMUL_SCHEMA, DEQUANT_SWIGLU_QUANT_SCHEMA, FORMAT_CAST_SCHEMA):
    _LIB.define(_schema)


# ---------------------------------------------------------------------------------------------
# Shared validation helpers
# ---------------------------------------------------------------------------------------------


def _dtype_names(dtypes: Sequence[torch.dtype]) -> str:
    return ", ".join(str(d) for d in dtypes)


def _require_tensor(name: str, value: object) -> torch.Tensor:
    """Return ``value`` if it is a tensor, otherwise raise a TypeError naming the argument."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _require_optional_tensor(name: str, value: object) -> Optional[torch.Tensor]:
    if value is None:
        return None
    return _require_tensor(name, value)


def _require_dtype(name: str, tensor: torch.Tensor, allowed: Sequence[torch.dtype], why: str = "") -> None:
    if tensor.dtype not in allowed:
        context = f" {why}" if why else ""
        raise ValueError(f"{name} has dtype {tensor.dtype}; expected one of {_dtype_names(allowed)}{context}")


def _require_shape(name: str, tensor: torch.Tensor, allowed: Sequence[Sequence[int]]) -> None:
    shapes = [tuple(s) for s in allowed]
    if tuple(tensor.shape) not in shapes:
        expected = " or ".join(str(list(s)) for s in shapes)
        raise ValueError(f"{name} has shape {list(tensor.shape)}; expected {expected}")


def _require_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return value


def _require_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def _require_float(name: str, value: object) -> float:
    """A Python int or float (a schema ``float``); bools are refused as in :func:`_require_int`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} {value!r}")
    return float(value)


def _require_choice(name: str, value: int, allowed: Sequence[int], meaning: str) -> None:
    """An int argument limited to the listed values; ``meaning`` says what the values select."""
    if value not in allowed:
        choices = ", ".join(str(v) for v in allowed)
        raise ValueError(f"{name}={value} is not implemented; expected one of {choices} ({meaning})")


def _require_unused(op: str, **values: object) -> None:
    """Refuse optional inputs of a feature the CPU model does not implement (None or [] pass)."""
    for name, value in values.items():
        if value is not None and not (isinstance(value, (list, tuple)) and len(value) == 0):
            raise ValueError(f"{name} is not implemented by the CPU model of {op}; pass None")


def _keyword_arguments(arguments: dict[str, Any], positional: Sequence[str]) -> dict[str, Any]:
    """A wrapper's keyword-only arguments, from ``locals()`` taken first thing in its body.

    The wrappers with dozens of schema keywords pass them on unchanged; collecting them this
    way keeps the list in one place, the signature.
    """
    return {name: value for name, value in arguments.items() if name not in positional}


def _round_to_int8(values: torch.Tensor) -> torch.Tensor:
    """Round float32 values half-to-even and saturate them to int8.

    Half-to-even (``rint``) is the rounding mode the CANN golden models use for int8
    quantisation; saturation follows from the int8 output type.
    """
    return torch.round(values).clamp_(INT8_MIN, INT8_MAX).to(torch.int8)


# ---------------------------------------------------------------------------------------------
# npu_quant_matmul
# ---------------------------------------------------------------------------------------------


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
    if not isinstance(output_dtype, torch.dtype):
        raise TypeError(f"output_dtype must be a torch.dtype or None, got {type(output_dtype).__name__}")
    if output_dtype not in QMM_OUTPUT_DTYPES:
        raise ValueError(
            f"output_dtype={output_dtype} is not implemented; expected None or one of {_dtype_names(QMM_OUTPUT_DTYPES)}"
        )
    return output_dtype


def _check_qmm_operands(x1: torch.Tensor, x2: torch.Tensor) -> None:
    for name, tensor in (("x1", x1), ("x2", x2)):
        if tensor.dtype == torch.int32:
            raise ValueError(f"{name} is int32 (int4 packed 8 per int32); only int8 x int8 is implemented")
        _require_dtype(name, tensor, (torch.int8,))
        if not QMM_MIN_RANK <= tensor.dim() <= QMM_MAX_RANK:
            raise ValueError(f"{name} has rank {tensor.dim()}; expected {QMM_MIN_RANK} to {QMM_MAX_RANK} dims")
    if x1.shape[-1] != x2.shape[-2]:
        raise ValueError(
            f"x1 has k={x1.shape[-1]} (shape {list(x1.shape)}) but x2 has k={x2.shape[-2]} "
            f"(shape {list(x2.shape)}); x2 must be [..., k, n]"
        )


def _check_qmm_scale(scale: torch.Tensor, n: int, out_dtype: torch.dtype, has_pertoken: bool) -> None:
    """scale is [1] or [n]; its dtype depends on the output as in the doc's combination table."""
    _require_shape("scale", scale, ((1,), (n,)))
    if out_dtype == torch.bfloat16:
        _require_dtype("scale", scale, (torch.float32, torch.bfloat16), "for a bfloat16 output")
    elif has_pertoken:
        _require_dtype("scale", scale, (torch.float32,), "when pertoken_scale is given")
    else:
        _require_dtype("scale", scale, (torch.float32, torch.int64), f"for a {out_dtype} output")


def _check_qmm_offset(offset: Optional[torch.Tensor], scale: torch.Tensor, n: int, out_dtype: torch.dtype) -> None:
    if offset is None:
        return
    if out_dtype != torch.int8:
        raise ValueError(f"offset is only allowed for an int8 output, got output_dtype={out_dtype}")
    if scale.dtype == torch.int64:
        raise ValueError("offset must be None when scale is int64: the offset is already packed into scale")
    _require_dtype("offset", offset, (torch.float32,))
    _require_shape("offset", offset, ((1,), (n,)))


def _check_qmm_pertoken(pertoken_scale: Optional[torch.Tensor], m: int, out_dtype: torch.dtype) -> None:
    if pertoken_scale is None:
        return
    if out_dtype == torch.int8:
        raise ValueError("pertoken_scale is only allowed for float16/bfloat16 outputs, got an int8 output")
    _require_dtype("pertoken_scale", pertoken_scale, (torch.float32,))
    _require_shape("pertoken_scale", pertoken_scale, ((m,),))


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
    _require_dtype("bias", bias, _allowed_bias_dtypes(out_dtype, has_pertoken), f"for a {out_dtype} output")
    n = out_shape[-1]
    allowed = [(n,)]
    if len(out_shape) == 3:
        allowed.append((out_shape[0], 1, n))
    _require_shape("bias", bias, allowed)


def _qmm_output_shape(x1: torch.Tensor, x2: torch.Tensor) -> list[int]:
    return [*_broadcast_batch(x1, x2), x1.shape[-2], x2.shape[-1]]


def _check_quant_matmul(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    offset: Optional[torch.Tensor],
    pertoken_scale: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    output_dtype: Optional[torch.dtype],
) -> tuple[list[int], torch.dtype]:
    """Validate all npu_quant_matmul inputs from metadata only; return (output shape, dtype).

    Uses shapes and dtypes only, so the fake kernel can run it on fake tensors.
    """
    _require_tensor("x1", x1)
    _require_tensor("x2", x2)
    _require_tensor("scale", scale)
    for name, value in (("offset", offset), ("pertoken_scale", pertoken_scale), ("bias", bias)):
        _require_optional_tensor(name, value)
    out_dtype = _resolve_output_dtype(output_dtype)
    _check_qmm_operands(x1, x2)
    out_shape = _qmm_output_shape(x1, x2)
    has_pertoken = pertoken_scale is not None
    _check_qmm_scale(scale, out_shape[-1], out_dtype, has_pertoken)
    _check_qmm_offset(offset, scale, out_shape[-1], out_dtype)
    _check_qmm_pertoken(pertoken_scale, out_shape[-2], out_dtype)
    _check_qmm_bias(bias, out_shape, out_dtype, has_pertoken)
    return out_shape, out_dtype


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
    return _round_to_int8(values)


def _quant_matmul_kernel(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    offset: Optional[torch.Tensor],
    pertoken_scale: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """acc = x1 @ x2 (int32); [+ int32 bias]; * scale; [* pertoken]; [+ float bias]; [+ offset]."""
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


@torch.library.impl("npu::npu_quant_matmul", "CPU", lib=_LIB)
def _quant_matmul_op(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    *,
    offset: Optional[torch.Tensor] = None,
    pertoken_scale: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    output_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Eager CPU kernel of ``npu::npu_quant_matmul``; see :func:`npu_quant_matmul`."""
    _, out_dtype = _check_quant_matmul(x1, x2, scale, offset, pertoken_scale, bias, output_dtype)
    return _quant_matmul_kernel(x1, x2, scale, offset, pertoken_scale, bias, out_dtype)


@torch.library.register_fake("npu::npu_quant_matmul", lib=_LIB)
def _quant_matmul_fake(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    *,
    offset: Optional[torch.Tensor] = None,
    pertoken_scale: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    output_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """Shape/dtype-only kernel: [batch..., m, n] in the resolved output dtype."""
    out_shape, out_dtype = _check_quant_matmul(x1, x2, scale, offset, pertoken_scale, bias, output_dtype)
    return x1.new_empty(out_shape, dtype=out_dtype)


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
    if not torch.compiler.is_compiling():
        _check_quant_matmul(x1, x2, scale, offset, pertoken_scale, bias, output_dtype)
    return torch.ops.npu.npu_quant_matmul(
        x1, x2, scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias, output_dtype=output_dtype
    )


# ---------------------------------------------------------------------------------------------
# npu_dequant_swiglu_quant
# ---------------------------------------------------------------------------------------------


def _dsq_group_count(group_index: Optional[torch.Tensor]) -> int:
    if group_index is None:
        return 1
    _require_dtype("group_index", group_index, (torch.int32, torch.int64))
    if group_index.dim() != 1 or group_index.shape[0] < 1:
        raise ValueError(f"group_index has shape {list(group_index.shape)}; expected a non-empty 1-D [groupNum]")
    return group_index.shape[0]


def _check_dsq_x(x: torch.Tensor) -> None:
    _require_dtype("x", x, (torch.int32, *FLOAT_X_DTYPES))
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
    _require_dtype("weight_scale", weight_scale, (torch.float32,))
    _require_shape("weight_scale", weight_scale, ((two_h,), (1, two_h), (groups, two_h)))
    if activation_scale is not None:
        _require_dtype("activation_scale", activation_scale, (torch.float32,))
        tokens = tuple(x.shape[:-1])
        _require_shape("activation_scale", activation_scale, (tokens, (*tokens, 1), (math.prod(tokens),)))
    if bias is not None:
        _require_dtype("bias", bias, (torch.float32, torch.float16, torch.bfloat16, torch.int32))
        _require_shape("bias", bias, ((two_h,),))


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
        _require_dtype("quant_scale", quant_scale, (torch.float32, torch.float16, torch.bfloat16))
        _require_shape("quant_scale", quant_scale, shapes)
    if quant_offset is not None:
        if quant_mode == 1:
            raise ValueError("quant_offset is only used by static quantisation (quant_mode=0), got quant_mode=1")
        _require_dtype("quant_offset", quant_offset, (torch.float32,))
        _require_shape("quant_offset", quant_offset, shapes)


def _check_dequant_swiglu_quant(
    x: torch.Tensor,
    weight_scale: Optional[torch.Tensor],
    activation_scale: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    quant_scale: Optional[torch.Tensor],
    quant_offset: Optional[torch.Tensor],
    group_index: Optional[torch.Tensor],
    activate_left: bool,
    quant_mode: int,
) -> tuple[list[int], list[int]]:
    """Validate npu_dequant_swiglu_quant inputs from metadata; return (y shape, scale shape)."""
    _require_tensor("x", x)
    for name, value in (
        ("weight_scale", weight_scale),
        ("activation_scale", activation_scale),
        ("bias", bias),
        ("quant_scale", quant_scale),
        ("quant_offset", quant_offset),
        ("group_index", group_index),
    ):
        _require_optional_tensor(name, value)
    _require_bool("activate_left", activate_left)
    if _require_int("quant_mode", quant_mode) not in (0, 1):
        raise ValueError(f"quant_mode={quant_mode} is not supported; expected 0 (static) or 1 (dynamic)")
    _check_dsq_x(x)
    groups = _dsq_group_count(group_index)
    if x.dtype == torch.int32:
        _check_dsq_dequant_inputs(x, weight_scale, activation_scale, bias, groups)
    _check_dsq_quant_inputs(x, quant_scale, quant_offset, quant_mode, groups)
    tokens = list(x.shape[:-1])
    return [*tokens, x.shape[-1] // 2], tokens


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


def _swiglu(values: torch.Tensor, activate_left: bool, dim: int = -1) -> torch.Tensor:
    """Swish of the activated half times the other half along ``dim``; activate_left picks the left half."""
    left, right = values.chunk(2, dim=dim)
    gate, linear = (left, right) if activate_left else (right, left)
    return gate / (1.0 + torch.exp(-gate)) * linear


def _dynamic_quant(
    values: torch.Tensor, row_group: torch.Tensor, quant_scale: Optional[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric int8 quantisation: scale = rowmax|v| / 127 (1 for all-zero rows)."""
    if quant_scale is not None:
        values = values * _per_row(quant_scale, row_group)
    row_max = values.abs().amax(dim=-1)
    scale = torch.where(row_max > 0, row_max / DYNAMIC_QUANT_MAX, torch.ones_like(row_max))
    return _round_to_int8(values / scale.unsqueeze(-1)), scale


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
    return _round_to_int8(values)


def _dequant_swiglu_quant_kernel(
    x: torch.Tensor,
    weight_scale: Optional[torch.Tensor],
    activation_scale: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    quant_scale: Optional[torch.Tensor],
    quant_offset: Optional[torch.Tensor],
    group_index: Optional[torch.Tensor],
    activate_left: bool,
    quant_mode: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    two_h = x.shape[-1]
    x_rows = x.reshape(-1, two_h)
    rows = x_rows.shape[0]
    row_group = _row_groups(group_index, rows)
    covered = row_group.shape[0]
    values = _dequantize(x_rows[:covered], row_group, weight_scale, activation_scale, bias)
    activated = _swiglu(values, activate_left)
    y = torch.zeros(rows, two_h // 2, dtype=torch.int8)
    scale = torch.zeros(rows, dtype=torch.float32)
    if quant_mode == 1:
        y[:covered], scale[:covered] = _dynamic_quant(activated, row_group, quant_scale)
    else:
        y[:covered] = _static_quant(activated, row_group, quant_scale, quant_offset)
    return y.reshape(*x.shape[:-1], two_h // 2), scale.reshape(x.shape[:-1])


@torch.library.impl("npu::npu_dequant_swiglu_quant", "CPU", lib=_LIB)
def _dequant_swiglu_quant_op(
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
    """Eager CPU kernel of ``npu::npu_dequant_swiglu_quant``; see :func:`npu_dequant_swiglu_quant`."""
    args = (x, weight_scale, activation_scale, bias, quant_scale, quant_offset, group_index, activate_left, quant_mode)
    _check_dequant_swiglu_quant(*args)
    return _dequant_swiglu_quant_kernel(*args)


@torch.library.register_fake("npu::npu_dequant_swiglu_quant", lib=_LIB)
def _dequant_swiglu_quant_fake(
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
    """Shape/dtype-only kernel: y int8 [..., H/2] and scale float32 [...]."""
    y_shape, scale_shape = _check_dequant_swiglu_quant(
        x, weight_scale, activation_scale, bias, quant_scale, quant_offset, group_index, activate_left, quant_mode
    )
    return x.new_empty(y_shape, dtype=torch.int8), x.new_empty(scale_shape, dtype=torch.float32)


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
    if not torch.compiler.is_compiling():
        _check_dequant_swiglu_quant(
            x, weight_scale, activation_scale, bias, quant_scale, quant_offset, group_index, activate_left, quant_mode
        )
    y, scale = torch.ops.npu.npu_dequant_swiglu_quant(
        x,
        weight_scale=weight_scale,
        activation_scale=activation_scale,
        bias=bias,
        quant_scale=quant_scale,
        quant_offset=quant_offset,
        group_index=group_index,
        activate_left=activate_left,
        quant_mode=quant_mode,
    )
    return y, scale


# ---------------------------------------------------------------------------------------------
# npu_format_cast
# ---------------------------------------------------------------------------------------------


@torch.library.impl("npu::npu_format_cast", "CPU", lib=_LIB)
def _format_cast_op(x: torch.Tensor, acl_format: int) -> torch.Tensor:
    """Eager CPU kernel of ``npu::npu_format_cast``: a value-preserving copy."""
    return x.clone()


@torch.library.register_fake("npu::npu_format_cast", lib=_LIB)
def _format_cast_fake(x: torch.Tensor, acl_format: int) -> torch.Tensor:
    return torch.empty_like(x)


def npu_format_cast(x: torch.Tensor, acl_format: int) -> torch.Tensor:
    """Change the device memory format of ``x``; on CPU this returns a copy equal to ``x``.

    Source: torch_npu.npu_format_cast (Ascend Extension for PyTorch API reference) and the
    feature example, which casts the [k, n] int8 weight to format 29 (FRACTAL_NZ) before
    npu_quant_matmul.

    An ACL format such as 29 = FRACTAL_NZ (or 2 = ND) only changes how the NPU lays the
    tensor out in device memory, for example in fractal tiles for the Cube unit.  The logical
    shape, dtype and values stay the same, and every op in this module reads logical values.
    So the CPU model keeps the layout and returns a copy.  It copies rather than returning
    ``x`` itself because an op without alias annotations may not return its input, and the real op
    also returns a new tensor.  ``acl_format`` must be an int, as in the real schema.
    """
    _require_tensor("x", x)
    _require_int("acl_format", acl_format)
    return torch.ops.npu.npu_format_cast(x, acl_format)


# ---------------------------------------------------------------------------------------------
# Fixed-order float32 reductions
# ---------------------------------------------------------------------------------------------
# torch.sum, torch.matmul (MKL) and even torch.rsqrt/torch.sigmoid give different bits with a
# different thread count on CPU, because they split reductions across threads or send tail
# elements to a scalar path.  The float kernels below therefore use only element-wise IEEE
# operations (+, -, *, /, sqrt, which are correctly rounded on every code path), exp and log
# (vector and scalar paths agree, checked on this torch build by the thread-count tests), max,
# stable sorts and copies, and build every sum as a fixed pairwise tree.

SUM_CHUNK = 64  # reduced elements summed as one pairwise tree before the sequential running sum
PRODUCT_BLOCK_ELEMENTS = 1 << 22  # bound on the temporary products tensor of _fixed_matmul


def _pairwise_sum(values: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Sum along ``dim`` as a fixed pairwise tree: pad with zeros to a power of two, add halves.

    Every step is an element-wise add, so the order of additions is a function of the length
    alone, never of the thread count.
    """
    dim = dim % values.dim()
    length = values.shape[dim]
    width = 1 << max(0, (length - 1).bit_length())
    if width != length:
        pad_shape = list(values.shape)
        pad_shape[dim] = width - length
        values = torch.cat([values, values.new_zeros(pad_shape)], dim=dim)
    while values.shape[dim] > 1:
        half = values.shape[dim] // 2
        values = values.narrow(dim, 0, half) + values.narrow(dim, half, half)
    return values if keepdim else values.squeeze(dim)


def _fixed_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float32 ``a [..., m, k] @ b [..., k, n]`` (same batch dims) in a fixed summation order.

    Each output element sums its k products in chunks of SUM_CHUNK: a pairwise tree inside a
    chunk, then chunk after chunk.  The order depends on k only.  Rows are processed in blocks
    so the temporary products stay below PRODUCT_BLOCK_ELEMENTS elements.
    """
    *batch, m, k = a.shape
    n = b.shape[-1]
    if 0 in (m, k, n) or 0 in batch:
        return a.new_zeros(*batch, m, n)
    a3 = a.reshape(-1, m, k)
    b3 = b.reshape(-1, k, n)
    rows_per_block = max(1, PRODUCT_BLOCK_ELEMENTS // max(1, a3.shape[0] * SUM_CHUNK * n))
    blocks = []
    for r0 in range(0, m, rows_per_block):
        rows = a3[:, r0 : r0 + rows_per_block]
        acc: Optional[torch.Tensor] = None
        for k0 in range(0, k, SUM_CHUNK):
            products = rows[:, :, k0 : k0 + SUM_CHUNK, None] * b3[:, None, k0 : k0 + SUM_CHUNK, :]
            partial = _pairwise_sum(products, dim=2)
            acc = partial if acc is None else acc + partial
        blocks.append(acc)
    return torch.cat(blocks, dim=1).reshape(*batch, m, n)


def _softmax(values: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim: exp(v - rowmax) / pairwise sum (float32, fixed order)."""
    exps = torch.exp(values - values.amax(dim=-1, keepdim=True))
    return exps / _pairwise_sum(exps, dim=-1, keepdim=True)


def _sigmoid(values: torch.Tensor) -> torch.Tensor:
    """1 / (1 + exp(-v)); torch.sigmoid is avoided because its tail path rounds differently."""
    return 1.0 / (1.0 + torch.exp(-values))


def _top_indices(values: torch.Tensor, count: int) -> torch.Tensor:
    """Indices of the ``count`` largest values of the last dim, largest first, ties to the lower index."""
    return torch.sort(values, dim=-1, descending=True, stable=True).indices[..., :count]


# ---------------------------------------------------------------------------------------------
# npu_rms_norm
# ---------------------------------------------------------------------------------------------

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
RMS_NORM_SCHEMA = "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)"
_LIB.define(RMS_NORM_SCHEMA)


def _check_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float) -> tuple[list[int], list[int]]:
    """Validate npu_rms_norm inputs from metadata; return (y shape, rstd shape)."""
    _require_tensor("x", x)
    _require_tensor("gamma", gamma)
    _require_float("epsilon", epsilon)
    _require_dtype("x", x, FLOAT_DTYPES)
    _require_dtype("gamma", gamma, (x.dtype, torch.float32), "(x's dtype or float32)")
    norm_dims = gamma.dim()
    if not 1 <= norm_dims <= x.dim() or tuple(x.shape[x.dim() - norm_dims :]) != tuple(gamma.shape):
        raise ValueError(
            f"gamma has shape {list(gamma.shape)}; it must equal the trailing dims of x (shape {list(x.shape)}), "
            f"usually [{x.shape[-1] if x.dim() else 'H'}]"
        )
    lead = list(x.shape[: x.dim() - norm_dims])
    return list(x.shape), [*lead, *([1] * norm_dims)]


def _rms_norm_kernel(x: torch.Tensor, gamma: torch.Tensor, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    _, rstd_shape = _check_rms_norm(x, gamma, epsilon)
    values = x.to(torch.float32)
    rows = values.reshape(math.prod(rstd_shape), gamma.numel())
    mean_square = _pairwise_sum(rows * rows, dim=-1) / gamma.numel()
    rstd = (1.0 / torch.sqrt(mean_square + epsilon)).reshape(rstd_shape)
    y = values * rstd * gamma.to(torch.float32)
    return y.to(x.dtype), rstd


@torch.library.impl("npu::npu_rms_norm", "CPU", lib=_LIB)
def _rms_norm_op(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager CPU kernel of ``npu::npu_rms_norm``; see :func:`npu_rms_norm`."""
    return _rms_norm_kernel(x, gamma, epsilon)


@torch.library.register_fake("npu::npu_rms_norm", lib=_LIB)
def _rms_norm_fake(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Shape/dtype-only kernel: y like x, rstd float32 with the normalised dims kept as 1."""
    y_shape, rstd_shape = _check_rms_norm(x, gamma, epsilon)
    return x.new_empty(y_shape), x.new_empty(rstd_shape, dtype=torch.float32)


def npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """RMS normalisation over the trailing ``gamma.dim()`` dims of ``x``: returns ``(y, rstd)``.

    Sources: torch_npu.npu_rms_norm (Ascend Extension for PyTorch API reference; schema
    ``npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)``) and
    op-plugin's meta function, which fixes the output shapes used by the fake kernel.

    * ``x``: float16, bfloat16 or float32, any rank >= 1.  ``gamma``: the trailing dims of
      ``x`` (usually ``[H]``), in x's dtype or float32.
    * ``rstd = 1 / sqrt(mean(x**2) + epsilon)`` over the normalised dims, float32, with shape
      ``x.shape`` where the normalised dims are 1 (e.g. ``[B, S, 1]``).
    * ``y = x * rstd * gamma`` in float32, cast to x's dtype (round half to even).

    All math is float32; the mean of squares is a fixed pairwise sum, so the bits do not
    depend on the thread count.
    """
    if not torch.compiler.is_compiling():
        _check_rms_norm(x, gamma, epsilon)
    y, rstd = torch.ops.npu.npu_rms_norm(x, gamma, epsilon)
    return y, rstd


# ---------------------------------------------------------------------------------------------
# npu_swiglu
# ---------------------------------------------------------------------------------------------

SWIGLU_SCHEMA = "npu_swiglu(Tensor self, int dim=-1) -> Tensor"
_LIB.define(SWIGLU_SCHEMA)


def _check_swiglu(x: torch.Tensor, dim: int) -> list[int]:
    """Validate npu_swiglu inputs from metadata; return the output shape."""
    _require_tensor("x", x)
    _require_int("dim", dim)
    _require_dtype("x", x, FLOAT_DTYPES)
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for x of shape {list(x.shape)}")
    if x.shape[dim] % 2 != 0:
        raise ValueError(f"x has size {x.shape[dim]} in dim {dim}; it must be even (it is split in two halves)")
    shape = list(x.shape)
    shape[dim] //= 2
    return shape


@torch.library.impl("npu::npu_swiglu", "CPU", lib=_LIB)
def _swiglu_op(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Eager CPU kernel of ``npu::npu_swiglu``; see :func:`npu_swiglu`."""
    _check_swiglu(x, dim)
    return _swiglu(x.to(torch.float32), activate_left=True, dim=dim).to(x.dtype)


@torch.library.register_fake("npu::npu_swiglu", lib=_LIB)
def _swiglu_fake(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shape/dtype-only kernel: x's dtype, ``dim`` halved."""
    return x.new_empty(_check_swiglu(x, dim))


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
    if not torch.compiler.is_compiling():
        _check_swiglu(x, dim)
    return torch.ops.npu.npu_swiglu(x, dim)


# ---------------------------------------------------------------------------------------------
# npu_moe_gating_top_k
# ---------------------------------------------------------------------------------------------

MOE_GATING_TOP_K_SCHEMA = (
    "npu_moe_gating_top_k(Tensor x, int k, *, Tensor? bias=None, int k_group=1, int group_count=1, "
    "int group_select_mode=0, int renorm=0, int norm_type=0, bool out_flag=False, "
    "float routed_scaling_factor=1.0, float eps=1e-20) -> (Tensor, Tensor, Tensor)"
)
_LIB.define(MOE_GATING_TOP_K_SCHEMA)


def _check_gating_groups(experts: int, k: int, k_group: int, group_count: int, group_select_mode: int) -> None:
    """Group arguments: group_count divides the experts, 1 <= k_group <= group_count, k fits the kept groups."""
    if group_count < 1 or experts % group_count != 0:
        raise ValueError(f"group_count={group_count} must be >= 1 and divide the expert count {experts}")
    if not 1 <= k_group <= group_count:
        raise ValueError(f"k_group={k_group} must be between 1 and group_count={group_count}")
    per_group = experts // group_count
    if not 1 <= k <= per_group * k_group:
        raise ValueError(
            f"k={k} must be between 1 and experts / group_count * k_group = {per_group * k_group} "
            "(the experts left after group selection)"
        )
    if group_count > 1 and group_select_mode == 1 and per_group < 2:
        raise ValueError("group_select_mode=1 scores a group by its two best experts; each group needs >= 2 experts")


def _check_moe_gating_top_k(
    x: torch.Tensor,
    k: int,
    bias: Optional[torch.Tensor],
    k_group: int,
    group_count: int,
    group_select_mode: int,
    renorm: int,
    norm_type: int,
    out_flag: bool,
    routed_scaling_factor: float,
    eps: float,
) -> tuple[int, int]:
    """Validate npu_moe_gating_top_k inputs from metadata; return (tokens, experts)."""
    _require_tensor("x", x)
    _require_optional_tensor("bias", bias)
    for name, value in (("k", k), ("k_group", k_group), ("group_count", group_count)):
        _require_int(name, value)
    for name, value in (("group_select_mode", group_select_mode), ("renorm", renorm), ("norm_type", norm_type)):
        _require_int(name, value)
    _require_bool("out_flag", out_flag)
    _require_float("routed_scaling_factor", routed_scaling_factor)
    _require_float("eps", eps)
    _require_dtype("x", x, FLOAT_DTYPES)
    if x.dim() != 2:
        raise ValueError(f"x has shape {list(x.shape)}; expected 2-D [tokens, experts]")
    tokens, experts = x.shape
    if bias is not None:
        _require_dtype("bias", bias, (x.dtype,), "(bias must have x's dtype)")
        _require_shape("bias", bias, ((experts,),))
    _require_choice("norm_type", norm_type, (0, 1), "0 softmax, 1 sigmoid")
    _require_choice("group_select_mode", group_select_mode, (0, 1), "0 group max, 1 sum of the group's top two")
    _require_choice("renorm", renorm, (0, 1), "1 renormalises softmax weights after top-k")
    _check_gating_groups(experts, k, k_group, group_count, group_select_mode)
    return tokens, experts


def _keep_best_groups(values: torch.Tensor, k_group: int, group_count: int, group_select_mode: int) -> torch.Tensor:
    """Set the experts of all but the ``k_group`` best-scoring groups to -inf."""
    tokens, experts = values.shape
    grouped = values.reshape(tokens, group_count, experts // group_count)
    if group_select_mode == 0:
        score = grouped.amax(dim=-1)
    else:
        best_two = torch.sort(grouped, dim=-1, descending=True, stable=True).values
        score = best_two[..., 0] + best_two[..., 1]
    keep = torch.zeros(tokens, group_count, dtype=torch.bool)
    keep.scatter_(1, _top_indices(score, k_group), True)
    return grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).reshape(tokens, experts)


def _moe_gating_top_k_kernel(
    x: torch.Tensor,
    k: int,
    bias: Optional[torch.Tensor],
    k_group: int,
    group_count: int,
    group_select_mode: int,
    renorm: int,
    norm_type: int,
    out_flag: bool,
    routed_scaling_factor: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    values = x.to(torch.float32)
    norm_out = _softmax(values) if norm_type == 0 else _sigmoid(values)
    select = norm_out if bias is None else norm_out + bias.to(torch.float32)
    if group_count > 1:
        select = _keep_best_groups(select, k_group, group_count, group_select_mode)
    expert_idx = _top_indices(select, k)
    weights = norm_out.gather(1, expert_idx)
    if norm_type == 1 or renorm == 1:
        weights = weights / (_pairwise_sum(weights, dim=-1, keepdim=True) + eps)
    y = weights * routed_scaling_factor
    out = norm_out if out_flag else torch.zeros_like(norm_out)
    return y.to(x.dtype), expert_idx.to(torch.int32), out


@torch.library.impl("npu::npu_moe_gating_top_k", "CPU", lib=_LIB)
def _moe_gating_top_k_op(
    x: torch.Tensor,
    k: int,
    *,
    bias: Optional[torch.Tensor] = None,
    k_group: int = 1,
    group_count: int = 1,
    group_select_mode: int = 0,
    renorm: int = 0,
    norm_type: int = 0,
    out_flag: bool = False,
    routed_scaling_factor: float = 1.0,
    eps: float = 1e-20,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eager CPU kernel of ``npu::npu_moe_gating_top_k``; see :func:`npu_moe_gating_top_k`."""
    args = (x, k, bias, k_group, group_count, group_select_mode, renorm, norm_type, out_flag)
    _check_moe_gating_top_k(*args, routed_scaling_factor, eps)
    return _moe_gating_top_k_kernel(*args, routed_scaling_factor, eps)


@torch.library.register_fake("npu::npu_moe_gating_top_k", lib=_LIB)
def _moe_gating_top_k_fake(
    x: torch.Tensor,
    k: int,
    *,
    bias: Optional[torch.Tensor] = None,
    k_group: int = 1,
    group_count: int = 1,
    group_select_mode: int = 0,
    renorm: int = 0,
    norm_type: int = 0,
    out_flag: bool = False,
    routed_scaling_factor: float = 1.0,
    eps: float = 1e-20,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Shape/dtype-only kernel: y [T, k] in x's dtype, expert_idx int32 [T, k], out float32 [T, E]."""
    tokens, experts = _check_moe_gating_top_k(
        x, k, bias, k_group, group_count, group_select_mode, renorm, norm_type, out_flag, routed_scaling_factor, eps
    )
    return (
        x.new_empty(tokens, k),
        x.new_empty(tokens, k, dtype=torch.int32),
        x.new_empty(tokens, experts, dtype=torch.float32),
    )


def npu_moe_gating_top_k(
    x: torch.Tensor,
    k: int,
    *,
    bias: Optional[torch.Tensor] = None,
    k_group: int = 1,
    group_count: int = 1,
    group_select_mode: int = 0,
    renorm: int = 0,
    norm_type: int = 0,
    out_flag: bool = False,
    routed_scaling_factor: float = 1.0,
    eps: float = 1e-20,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MoE routing: score experts, keep the best groups, pick the top ``k``: returns ``(y, expert_idx, out)``.

    Sources: torch_npu.npu_moe_gating_top_k (API reference 7.0,
    https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_002365.html),
    aclnnMoeGatingTopK (CANN 8.3/8.5 and the newer ops-transformer doc, which spells the steps
    out), op-plugin's MoeGatingTopKKernelNpuOpApi.cpp and its meta function (output shapes).
    The schema default ``norm_type=0`` is op-plugin's and GE's; the 7.0 API page prints 1.

    ``x`` is ``[T, E]`` (float16, bfloat16, float32); all math is float32.

    1. ``norm = softmax(x)`` over experts for ``norm_type=0``, ``sigmoid(x)`` for 1.
    2. Selection scores: ``norm + bias`` (bias ``[E]`` in x's dtype), else ``norm``.
    3. If ``group_count > 1``: the E experts form ``group_count`` equal groups.  A group's score
       is its best expert (``group_select_mode=0``) or its two best summed (1).  Only the
       ``k_group`` best groups stay; the others are set to -inf.
    4. ``expert_idx`` (int32 ``[T, k]``): the k best selection scores, best first.
    5. Weights are taken from ``norm`` (without bias) at those experts.  They are divided by
       ``(their sum + eps)`` for sigmoid scoring, and for softmax only when ``renorm=1``.  Then
       they are multiplied by ``routed_scaling_factor`` and cast to x's dtype to give ``y``.
       This is DeepSeek-V3's routing (sigmoid, correction bias, group-limited, normalised
       top-k).  The newest aclnn page writes the divisor as a sum over all of ``norm``.  Its
       older pages, the 7.0 page and DeepSeek all divide by the sum of the k chosen weights,
       which is what is done here.
    6. ``out`` (float32 ``[T, E]``) is ``norm`` when ``out_flag`` is True.  Otherwise it is
       zeros; the device leaves it unspecified.

    Ties are broken towards the lower group/expert index (stable sorts), so the result is a
    function of the inputs alone.  Not implemented, rejected with ValueError: ``norm_type=2``
    (sqrt-softplus, Ascend 950 only) and the hash-routing inputs of newer releases.  The
    device limits of A2/A3 (E = 256, k_group = 4, k <= 32) are not imposed, so small test
    shapes work.
    """
    if not torch.compiler.is_compiling():
        _check_moe_gating_top_k(
            x, k, bias, k_group, group_count, group_select_mode, renorm, norm_type, out_flag, routed_scaling_factor, eps
        )
    y, expert_idx, out = torch.ops.npu.npu_moe_gating_top_k(
        x,
        k,
        bias=bias,
        k_group=k_group,
        group_count=group_count,
        group_select_mode=group_select_mode,
        renorm=renorm,
        norm_type=norm_type,
        out_flag=out_flag,
        routed_scaling_factor=routed_scaling_factor,
        eps=eps,
    )
    return y, expert_idx, out


# ---------------------------------------------------------------------------------------------
# npu_grouped_matmul
# ---------------------------------------------------------------------------------------------

GROUPED_MATMUL_SCHEMA = (
    "npu_grouped_matmul(Tensor[] x, Tensor[] weight, *, Tensor[]? bias=None, Tensor[]? scale=None, "
    "Tensor[]? offset=None, Tensor[]? antiquant_scale=None, Tensor[]? antiquant_offset=None, "
    "Tensor[]? per_token_scale=None, Tensor? group_list=None, Tensor[]? activation_input=None, "
    "Tensor[]? activation_quant_scale=None, Tensor[]? activation_quant_offset=None, int? split_item=0, "
    "int? group_type=None, int? group_list_type=0, int? act_type=0, int[]? tuning_config=None, "
    "ScalarType? output_dtype=None) -> Tensor[]"
)
_LIB.define(GROUPED_MATMUL_SCHEMA)

SPLIT_OUTPUT_ITEMS = (2, 3)  # split_item values whose output is one tensor (rows of all groups)
GMM_BIAS_DTYPES = {torch.float16: torch.float16, torch.bfloat16: torch.float32, torch.float32: torch.float32}


def _tensor_list(name: str, value: object) -> list[torch.Tensor]:
    if not isinstance(value, (list, tuple)) or len(value) == 0:
        raise TypeError(f"{name} must be a non-empty list of tensors, got {type(value).__name__}")
    return [_require_tensor(f"{name}[{i}]", item) for i, item in enumerate(value)]


def _gmm_weights(weight: object, dtype: torch.dtype) -> list[torch.Tensor]:
    """One [K, N] matrix per group, from a list of 2-D tensors or a single [E, K, N] tensor."""
    tensors = _tensor_list("weight", weight)
    if len(tensors) == 1 and tensors[0].dim() == 3:
        tensors = list(tensors[0].unbind(0))
    for i, w in enumerate(tensors):
        _require_dtype(f"weight[{i}]", w, (dtype,), "(the weights must have x's dtype)")
        if w.dim() != 2:
            raise ValueError(f"weight[{i}] has shape {list(w.shape)}; expected [K, N] (or one [E, K, N] tensor)")
    return tensors


def _gmm_biases(bias: object, weights: Sequence[torch.Tensor], x_dtype: torch.dtype) -> Optional[list[torch.Tensor]]:
    """One [N] bias per group (a list, or one [E, N] tensor); float16 for float16 x, float32 otherwise."""
    if bias is None or (isinstance(bias, (list, tuple)) and len(bias) == 0):
        return None
    tensors = _tensor_list("bias", bias)
    if len(tensors) == 1 and tensors[0].dim() == 2 and len(weights) > 1:
        tensors = list(tensors[0].unbind(0))
    if len(tensors) != len(weights):
        raise ValueError(f"bias has {len(tensors)} tensors for {len(weights)} weight groups; give one [N] per group")
    for i, (b, w) in enumerate(zip(tensors, weights, strict=True)):
        _require_dtype(f"bias[{i}]", b, (GMM_BIAS_DTYPES[x_dtype],), f"for {x_dtype} x")
        _require_shape(f"bias[{i}]", b, ((w.shape[1],),))
    return tensors


def _check_gmm_modes(
    split_item: Optional[int], group_type: Optional[int], group_list_type: Optional[int], act_type: Optional[int]
) -> tuple[int, int]:
    """Return (split_item, group_list_type) with torch_npu's defaults for None."""
    split = 0 if split_item is None else _require_int("split_item", split_item)
    _require_choice("split_item", split, (0, 1, 2, 3), "0/1 one output per group, 2/3 one output")
    if group_type is None:
        raise ValueError(
            "group_type is required (torch_npu refuses None too): pass 0 to split x by rows with "
            "group_list, or -1 for one x per weight"
        )
    _require_choice("group_type", _require_int("group_type", group_type), (-1, 0), "-1 no grouping, 0 split rows")
    list_type = 0 if group_list_type is None else _require_int("group_list_type", group_list_type)
    _require_choice("group_list_type", list_type, (0, 1), "0 cumulative row ends, 1 row counts")
    activation = 0 if act_type is None else _require_int("act_type", act_type)
    _require_choice("act_type", activation, (0,), "fused activations are not implemented")
    return split, list_type


def _gmm_single_x_shape(
    x: Sequence[torch.Tensor], weights: Sequence[torch.Tensor], group_list: torch.Tensor, group_type: int, split: int
) -> list[list[int]]:
    """The MoE form: one [M, K] x split by group_list rows, one weight per group, one [M, N] output."""
    if group_type != 0:
        raise ValueError(f"group_list needs group_type=0 (split x by rows), got group_type={group_type}")
    if len(x) != 1 or x[0].dim() != 2:
        raise ValueError("group_list needs x to be a list of one 2-D [M, K] tensor")
    _require_dtype("group_list", group_list, (torch.int64,))
    _require_shape("group_list", group_list, ((len(weights),),))
    if split not in SPLIT_OUTPUT_ITEMS:
        raise ValueError(
            f"split_item={split} with group_list gives one output per group whose row counts are the "
            "values of group_list, which a traced graph cannot know; use split_item=2 or 3 (one [M, N] output)"
        )
    widths = {w.shape[1] for w in weights}
    if len(widths) != 1:
        raise ValueError(f"all weights must have the same N for a single output, got N values {sorted(widths)}")
    return [[x[0].shape[0], weights[0].shape[1]]]


def _gmm_multi_x_shapes(x: Sequence[torch.Tensor], weights: Sequence[torch.Tensor], split: int) -> list[list[int]]:
    """One x per weight: per-group outputs (split_item 0/1) or their rows concatenated (2/3)."""
    if len(x) != len(weights):
        raise ValueError(
            f"without group_list, x needs one tensor per weight: got {len(x)} x and {len(weights)} weights"
        )
    shapes = [[*xi.shape[:-1], w.shape[1]] for xi, w in zip(x, weights, strict=True)]
    if split not in SPLIT_OUTPUT_ITEMS:
        return shapes
    if any(xi.dim() != 2 for xi in x) or len({s[-1] for s in shapes}) != 1:
        raise ValueError("split_item 2/3 concatenates rows: every x must be 2-D and every weight must have the same N")
    return [[sum(s[0] for s in shapes), shapes[0][1]]]


def _check_grouped_matmul(
    x: object,
    weight: object,
    *,
    bias: object = None,
    group_list: Optional[torch.Tensor] = None,
    split_item: Optional[int] = 0,
    group_type: Optional[int] = None,
    group_list_type: Optional[int] = 0,
    act_type: Optional[int] = 0,
    tuning_config: Optional[list[int]] = None,
    output_dtype: Optional[torch.dtype] = None,
    **unsupported: object,
) -> tuple[list[list[int]], torch.dtype, int]:
    """Validate npu_grouped_matmul inputs from metadata; return (output shapes, dtype, group_list_type).

    Takes the op's keyword arguments as they are.  The quantisation and activation inputs
    arrive in ``unsupported`` and must be None.  ``tuning_config`` is a device tiling hint and
    does not change values, so it is accepted and ignored.
    """
    xs = _tensor_list("x", x)
    dtype = xs[0].dtype
    for i, xi in enumerate(xs):
        _require_dtype(f"x[{i}]", xi, FLOAT_DTYPES, "(int8/int4 quantised grouped matmul is not implemented)")
        if xi.dtype != dtype or xi.dim() < 2:
            raise ValueError(f"x[{i}] is {xi.dtype} {list(xi.shape)}; every x must be >= 2-D with x[0]'s dtype")
    weights = _gmm_weights(weight, dtype)
    pairs = zip(xs, weights) if len(xs) == len(weights) else ((xs[0], w) for w in weights)
    for i, (xi, w) in enumerate(pairs):
        if xi.shape[-1] != w.shape[0]:
            raise ValueError(f"x has K={xi.shape[-1]} but weight[{i}] has K={w.shape[0]}; weights are [K, N]")
    _gmm_biases(bias, weights, dtype)
    _require_unused("npu_grouped_matmul (quantised/activation inputs)", **unsupported)
    _require_optional_tensor("group_list", group_list)
    split, list_type = _check_gmm_modes(split_item, group_type, group_list_type, act_type)
    if output_dtype is not None and output_dtype != dtype:
        raise ValueError(f"output_dtype={output_dtype} is only for quantised inputs; use None (x's dtype {dtype})")
    if group_list is not None:
        shapes = _gmm_single_x_shape(xs, weights, group_list, group_type, split)
    else:
        shapes = _gmm_multi_x_shapes(xs, weights, split)
    return shapes, dtype, list_type


def _group_row_counts(group_list: torch.Tensor, list_type: int, rows: int) -> list[int]:
    """Rows per group from group_list: cumulative row ends (type 0) or counts (type 1)."""
    values = [int(v) for v in group_list.tolist()]
    counts = values if list_type == 1 else [end - start for start, end in zip([0, *values[:-1]], values)]
    if any(c < 0 for c in counts):
        kind = "counts" if list_type == 1 else "cumulative row ends (non-decreasing)"
        raise ValueError(f"group_list {values} is not valid {kind} for group_list_type={list_type}")
    if sum(counts) > rows:
        raise ValueError(f"group_list covers {sum(counts)} rows but x has only {rows}")
    return counts


def _linear_f32(x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """float32 x @ w (+ bias) in the fixed summation order of _fixed_matmul."""
    out = _fixed_matmul(x.reshape(-1, x.shape[-1]).to(torch.float32), w.to(torch.float32))
    out = out.reshape(*x.shape[:-1], w.shape[1])
    return out if bias is None else out + bias.to(torch.float32)


def _grouped_matmul_kernel(
    xs: list[torch.Tensor],
    weights: list[torch.Tensor],
    biases: Optional[list[torch.Tensor]],
    group_list: Optional[torch.Tensor],
    list_type: int,
    split: int,
    dtype: torch.dtype,
) -> list[torch.Tensor]:
    groups = range(len(weights))
    bias_of = [None] * len(weights) if biases is None else biases
    if group_list is not None:
        x = xs[0]
        out = torch.zeros(x.shape[0], weights[0].shape[1], dtype=torch.float32)
        start = 0
        for g, count in zip(groups, _group_row_counts(group_list, list_type, x.shape[0]), strict=True):
            out[start : start + count] = _linear_f32(x[start : start + count], weights[g], bias_of[g])
            start += count
        return [out.to(dtype)]
    outs = [_linear_f32(xs[g], weights[g], bias_of[g]).to(dtype) for g in groups]
    return [torch.cat(outs)] if split in SPLIT_OUTPUT_ITEMS else outs


@torch.library.impl("npu::npu_grouped_matmul", "CPU", lib=_LIB)
def _grouped_matmul_op(x: list[torch.Tensor], weight: list[torch.Tensor], **options: Any) -> list[torch.Tensor]:
    """Eager CPU kernel of ``npu::npu_grouped_matmul``; see :func:`npu_grouped_matmul`.

    The eighteen keyword arguments of the schema arrive in ``options`` and go unchanged to the
    shared validation, so the eager and fake kernels cannot drift apart.
    """
    _, dtype, list_type = _check_grouped_matmul(x, weight, **options)
    weights = _gmm_weights(weight, dtype)
    biases = _gmm_biases(options.get("bias"), weights, dtype)
    split = options.get("split_item") or 0
    return _grouped_matmul_kernel(list(x), weights, biases, options.get("group_list"), list_type, split, dtype)


@torch.library.register_fake("npu::npu_grouped_matmul", lib=_LIB)
def _grouped_matmul_fake(x: list[torch.Tensor], weight: list[torch.Tensor], **options: Any) -> list[torch.Tensor]:
    """Shape/dtype-only kernel: the output list from the split mode and the x/weight shapes."""
    shapes, dtype, _ = _check_grouped_matmul(x, weight, **options)
    return [x[0].new_empty(shape, dtype=dtype) for shape in shapes]


def npu_grouped_matmul(
    x: list[torch.Tensor],
    weight: list[torch.Tensor],
    *,
    bias: Optional[list[torch.Tensor]] = None,
    scale: Optional[list[torch.Tensor]] = None,
    offset: Optional[list[torch.Tensor]] = None,
    antiquant_scale: Optional[list[torch.Tensor]] = None,
    antiquant_offset: Optional[list[torch.Tensor]] = None,
    per_token_scale: Optional[list[torch.Tensor]] = None,
    group_list: Optional[torch.Tensor] = None,
    activation_input: Optional[list[torch.Tensor]] = None,
    activation_quant_scale: Optional[list[torch.Tensor]] = None,
    activation_quant_offset: Optional[list[torch.Tensor]] = None,
    split_item: Optional[int] = 0,
    group_type: Optional[int] = None,
    group_list_type: Optional[int] = 0,
    act_type: Optional[int] = 0,
    tuning_config: Optional[list[int]] = None,
    output_dtype: Optional[torch.dtype] = None,
) -> list[torch.Tensor]:
    """Grouped matmul: group ``g`` multiplies its rows of x by ``weight[g]`` ([K, N]); returns a list.

    Sources: torch_npu.npu_grouped_matmul (API reference 6.0 and 7.0,
    https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000524.html)
    and op-plugin's GroupedMatmulKernelNpuOpApi.cpp (output shapes per split_item, the
    required group_type, the single [E, K, N] weight form).  The schema is the torch_npu one
    with a tensor group_list.

    Implemented (non-quantised float16/bfloat16/float32, weights in x's dtype):

    * MoE form: ``x = [x_all]`` ([M, K]), one weight per expert (a list of [K, N] or a single
      [E, K, N] tensor), ``group_type=0`` and an int64 ``group_list`` [E].  The list holds
      cumulative row ends (``group_list_type=0``) or row counts (1).  Group ``g`` takes the
      next ``count_g`` rows.  ``split_item`` 2 or 3 gives one ``[M, N]`` output.  Rows past the
      last group are zeros (the device leaves them unspecified).
    * Per-tensor form (no group_list): ``x[g] @ weight[g]``.  ``split_item`` 0/1 returns one
      output per group (``x[g]`` may have batch dims); 2/3 returns the 2-D results
      concatenated by rows.
    * ``bias``: one ``[N]`` per group (or one ``[E, N]``), float16 for float16 x and float32
      for bfloat16/float32 x, as in the doc's table; added after the product.

    Each output is ``x_rows @ w (+ bias)`` in float32, cast to x's dtype.  Products of
    float16/bfloat16 values are exact in float32, and the k-sum follows the fixed order of
    ``_fixed_matmul``, so the bits do not depend on threads.  torch's matmul (MKL) does not
    give that guarantee on CPU.

    Rejected with ValueError: any quantisation or activation input (scale, offset,
    antiquant_*, per_token_scale, activation_*), int8/int4 x, ``act_type != 0``, an
    ``output_dtype`` other than x's, and ``group_type`` None (torch_npu also requires it)
    or not -1/0.  Also rejected: ``group_list_type=2`` and ``split_item`` 0/1 with group_list.
    Those outputs have row counts that are the values of group_list, which a fake kernel
    cannot know.  A Python list as group_list is refused with TypeError (the schema takes
    an int64 tensor).  ``tuning_config`` is a tiling hint and is ignored.
    """
    if isinstance(group_list, (list, tuple)):
        raise TypeError("group_list must be an int64 tensor (e.g. torch.tensor(counts)), not a Python list")
    options = _keyword_arguments(locals(), ("x", "weight"))
    if not torch.compiler.is_compiling():
        _check_grouped_matmul(x, weight, **options)
    return list(torch.ops.npu.npu_grouped_matmul(x, weight, **options))


# ---------------------------------------------------------------------------------------------
# npu_fused_infer_attention_score
# ---------------------------------------------------------------------------------------------

FUSED_INFER_ATTENTION_SCORE_SCHEMA = (
    "npu_fused_infer_attention_score(Tensor query, Tensor key, Tensor value, *, Tensor? pse_shift=None, "
    "Tensor? atten_mask=None, SymInt[]? actual_seq_lengths=None, SymInt[]? actual_seq_lengths_kv=None, "
    "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
    "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? antiquant_scale=None, "
    "Tensor? antiquant_offset=None, Tensor? key_antiquant_scale=None, Tensor? key_antiquant_offset=None, "
    "Tensor? value_antiquant_scale=None, Tensor? value_antiquant_offset=None, Tensor? block_table=None, "
    "Tensor? query_padding_size=None, Tensor? kv_padding_size=None, Tensor? key_shared_prefix=None, "
    "Tensor? value_shared_prefix=None, SymInt[]? actual_shared_prefix_len=None, Tensor? query_rope=None, "
    "Tensor? key_rope=None, Tensor? key_rope_antiquant_scale=None, int num_heads=1, float scale=1.0, "
    "int pre_tokens=2147483647, int next_tokens=2147483647, str input_layout=\"BSH\", "
    "int num_key_value_heads=0, int sparse_mode=0, int inner_precise=0, int block_size=0, "
    "int antiquant_mode=0, int key_antiquant_mode=0, int value_antiquant_mode=0, "
    "bool softmax_lse_flag=False) -> (Tensor, Tensor)"
)
_LIB.define(FUSED_INFER_ATTENTION_SCORE_SCHEMA)

FIA_LAYOUTS = ("BSH", "BSND", "BNSD")
FIA_DTYPES = (torch.float16, torch.bfloat16)
FIA_MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)
FIA_NO_BAND = 2147483647  # pre_tokens/next_tokens default: no band limit
CAUSAL_MASK_SIZE = 2048  # sparse_mode 2/3 take this fixed upper-triangular mask


@dataclass(frozen=True)
class _AttentionDims:
    """Sizes of one attention call, read from the layouts."""

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    value_dim: int


def _layout_sizes(name: str, tensor: torch.Tensor, layout: str, heads: int) -> tuple[int, int, int]:
    """(batch, sequence, head dim) of a BSH / BSND / BNSD tensor with ``heads`` heads."""
    if layout == "BSH":
        if tensor.dim() != 3 or tensor.shape[2] % heads != 0:
            raise ValueError(f"{name} has shape {list(tensor.shape)}; BSH needs [B, S, {heads} x D]")
        return tensor.shape[0], tensor.shape[1], tensor.shape[2] // heads
    heads_dim = 2 if layout == "BSND" else 1
    if tensor.dim() != 4 or tensor.shape[heads_dim] != heads:
        raise ValueError(
            f"{name} has shape {list(tensor.shape)}; {layout} needs 4 dims with {heads} heads at dim {heads_dim}"
        )
    seq = tensor.shape[1] if layout == "BSND" else tensor.shape[2]
    return tensor.shape[0], seq, tensor.shape[3]


def _attention_dims(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: str, heads: int, kv_heads: int
) -> _AttentionDims:
    batch, q_len, head_dim = _layout_sizes("query", query, layout, heads)
    key_batch, kv_len, key_dim = _layout_sizes("key", key, layout, kv_heads)
    value_batch, value_len, value_dim = _layout_sizes("value", value, layout, kv_heads)
    if (key_batch, value_batch) != (batch, batch) or value_len != kv_len or key_dim != head_dim:
        raise ValueError(
            f"query {list(query.shape)}, key {list(key.shape)} and value {list(value.shape)} do not match in "
            f"{layout}: batch, KV sequence and query/key head dim must agree"
        )
    return _AttentionDims(batch, heads, kv_heads, q_len, kv_len, head_dim, value_dim)


def _check_fia_mask(mask: Optional[torch.Tensor], sparse_mode: int, dims: _AttentionDims) -> None:
    if mask is None:
        if sparse_mode in (2, 3):
            raise ValueError(
                f"sparse_mode={sparse_mode} needs the compressed causal mask atten_mask="
                f"torch.triu(torch.ones({CAUSAL_MASK_SIZE}, {CAUSAL_MASK_SIZE}, dtype=torch.bool), diagonal=1)"
            )
        return
    _require_dtype("atten_mask", mask, FIA_MASK_DTYPES)
    size = CAUSAL_MASK_SIZE
    if sparse_mode in (2, 3):
        _require_shape("atten_mask", mask, ((size, size), (1, size, size), (1, 1, size, size)))
        return
    b, sq, skv = dims.batch, dims.q_len, dims.kv_len
    shapes = [(b, sq, skv), (1, sq, skv), (b, 1, sq, skv), (1, 1, sq, skv), (b, skv) if sq == 1 else (sq, skv)]
    _require_shape("atten_mask", mask, shapes)


def _seq_lengths(name: str, values: Optional[Sequence[int]], batch: int, limit: int) -> list[int]:
    """Per-batch valid lengths (one value is broadcast); None means the full length."""
    if values is None:
        return [limit] * batch
    lengths = [_require_int(f"{name}[{i}]", v) for i, v in enumerate(values)]
    if len(lengths) not in (1, batch) or any(not 0 <= v <= limit for v in lengths):
        raise ValueError(f"{name}={lengths} must hold 1 or {batch} (batch) values between 0 and {limit}")
    return lengths * batch if len(lengths) == 1 else lengths


def _check_fia_options(
    num_heads: int,
    num_key_value_heads: int,
    input_layout: str,
    sparse_mode: int,
    inner_precise: int,
    pre_tokens: int,
    next_tokens: int,
) -> int:
    """Scalar options; returns the KV head count (0 means num_heads)."""
    if _require_int("num_heads", num_heads) < 1:
        raise ValueError(f"num_heads={num_heads} must be >= 1")
    kv_heads = _require_int("num_key_value_heads", num_key_value_heads) or num_heads
    if kv_heads < 0 or num_heads % kv_heads != 0:
        raise ValueError(f"num_key_value_heads={num_key_value_heads} must divide num_heads={num_heads} (GQA groups)")
    if input_layout not in FIA_LAYOUTS:
        raise ValueError(f"input_layout={input_layout!r} is not implemented; expected one of {', '.join(FIA_LAYOUTS)}")
    _require_choice("sparse_mode", _require_int("sparse_mode", sparse_mode), (0, 2, 3), "0 mask as given, 2/3 causal")
    _require_choice("inner_precise", _require_int("inner_precise", inner_precise), (0, 1), "device precision modes")
    if (_require_int("pre_tokens", pre_tokens), _require_int("next_tokens", next_tokens)) != (FIA_NO_BAND, FIA_NO_BAND):
        raise ValueError(
            "pre_tokens/next_tokens bands are not implemented; keep the defaults (2147483647) and express "
            "causality with atten_mask or sparse_mode 2/3"
        )
    return kv_heads


def _check_fused_infer_attention_score(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    atten_mask: Optional[torch.Tensor] = None,
    actual_seq_lengths: Optional[Sequence[int]] = None,
    actual_seq_lengths_kv: Optional[Sequence[int]] = None,
    num_heads: int = 1,
    scale: float = 1.0,
    pre_tokens: int = FIA_NO_BAND,
    next_tokens: int = FIA_NO_BAND,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    inner_precise: int = 0,
    block_size: int = 0,
    antiquant_mode: int = 0,
    key_antiquant_mode: int = 0,
    value_antiquant_mode: int = 0,
    softmax_lse_flag: bool = False,
    **unsupported: object,
) -> tuple[list[int], list[int], _AttentionDims]:
    """Validate npu_fused_infer_attention_score inputs from metadata; return (out shape, lse shape, dims).

    Takes the op's keyword arguments as they are.  Every optional tensor of an unimplemented
    feature (quantisation, paged KV, shared prefix, rope split, pse) arrives in
    ``unsupported`` and must be None.  block_size and the antiquant modes only configure
    those features and are checked as ints only.
    """
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        _require_tensor(name, tensor)
        _require_dtype(name, tensor, FIA_DTYPES, "(int8 quantised attention is not implemented)")
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise ValueError(f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, {value.dtype}")
    _require_optional_tensor("atten_mask", atten_mask)
    _require_unused("npu_fused_infer_attention_score", **unsupported)
    for name, value_ in (("block_size", block_size), ("antiquant_mode", antiquant_mode)):
        _require_int(name, value_)
    for name, value_ in (("key_antiquant_mode", key_antiquant_mode), ("value_antiquant_mode", value_antiquant_mode)):
        _require_int(name, value_)
    _require_float("scale", scale)
    _require_bool("softmax_lse_flag", softmax_lse_flag)
    kv_heads = _check_fia_options(
        num_heads, num_key_value_heads, input_layout, sparse_mode, inner_precise, pre_tokens, next_tokens
    )
    dims = _attention_dims(query, key, value, input_layout, num_heads, kv_heads)
    _check_fia_mask(atten_mask, sparse_mode, dims)
    _seq_lengths("actual_seq_lengths", actual_seq_lengths, dims.batch, dims.q_len)
    _seq_lengths("actual_seq_lengths_kv", actual_seq_lengths_kv, dims.batch, dims.kv_len)
    out_shape = {
        "BSH": [dims.batch, dims.q_len, num_heads * dims.value_dim],
        "BSND": [dims.batch, dims.q_len, num_heads, dims.value_dim],
        "BNSD": [dims.batch, num_heads, dims.q_len, dims.value_dim],
    }[input_layout]
    lse_shape = [dims.batch, num_heads, dims.q_len, 1] if softmax_lse_flag else [0]
    return out_shape, lse_shape, dims


def _to_bnsd(tensor: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    """float32 [B, N, S, D] view of a BSH / BSND / BNSD tensor."""
    if layout == "BSH":
        tensor = tensor.reshape(tensor.shape[0], tensor.shape[1], heads, -1)
    if layout != "BNSD":
        tensor = tensor.transpose(1, 2)
    return tensor.to(torch.float32)


def _from_bnsd(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "BNSD":
        return tensor
    bsnd = tensor.transpose(1, 2)
    return bsnd.reshape(*bsnd.shape[:2], -1) if layout == "BSH" else bsnd.contiguous()


def _masked_out(mask: torch.Tensor, dims: _AttentionDims) -> torch.Tensor:
    """A mode-0 atten_mask as bool [B or 1, 1, Sq, Skv]; True (nonzero) means "do not attend"."""
    masked = mask != 0
    if masked.dim() == 2:
        return masked.reshape(-1, 1, 1, dims.kv_len) if dims.q_len == 1 else masked.reshape(1, 1, dims.q_len, -1)
    return masked.unsqueeze(1) if masked.dim() == 3 else masked


def _visible(
    mask: Optional[torch.Tensor], sparse_mode: int, dims: _AttentionDims, q_lens: list[int], kv_lens: list[int]
) -> torch.Tensor:
    """bool [B, 1, Sq, Skv]: which key each query row may attend to."""
    q_pos = torch.arange(dims.q_len).reshape(1, 1, -1, 1)
    kv_pos = torch.arange(dims.kv_len).reshape(1, 1, 1, -1)
    q_len = torch.tensor(q_lens).reshape(-1, 1, 1, 1)
    kv_len = torch.tensor(kv_lens).reshape(-1, 1, 1, 1)
    visible = (q_pos < q_len) & (kv_pos < kv_len)
    if sparse_mode == 2:
        return visible & (kv_pos <= q_pos)
    if sparse_mode == 3:
        return visible & (kv_pos <= q_pos + (kv_len - q_len))
    return visible if mask is None else visible & ~_masked_out(mask, dims)


def _require_causal_mask(mask: torch.Tensor) -> None:
    """sparse_mode 2/3 read causality from the mode; the mask must still be the documented one."""
    expected = torch.ones(CAUSAL_MASK_SIZE, CAUSAL_MASK_SIZE, dtype=torch.bool).triu(diagonal=1)
    if not torch.equal(mask.reshape(CAUSAL_MASK_SIZE, CAUSAL_MASK_SIZE) != 0, expected):
        raise ValueError(
            "sparse_mode 2/3 need atten_mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)"
        )


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float) -> tuple[
    torch.Tensor, torch.Tensor
]:
    """softmax(scale * q k^T, masked) v in float32 [B, N, Sq, *]; returns (out, lse [B, N, Sq, 1])."""
    scores = (_fixed_matmul(q, k.transpose(-1, -2)) * scale).masked_fill(~visible, float("-inf"))
    any_visible = visible.any(dim=-1, keepdim=True)
    row_max = torch.where(any_visible, scores.amax(dim=-1, keepdim=True), 0.0)
    exps = torch.exp(scores - row_max)
    denom = _pairwise_sum(exps, dim=-1, keepdim=True)
    has_mass = denom > 0
    probs = exps / torch.where(has_mass, denom, 1.0)
    lse = torch.where(has_mass, row_max + torch.log(torch.where(has_mass, denom, 1.0)), float("inf"))
    return _fixed_matmul(probs, v), lse


def _fused_infer_attention_score_kernel(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, options: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor]:
    _, lse_shape, dims = _check_fused_infer_attention_score(query, key, value, **options)
    layout = options.get("input_layout", "BSH")
    sparse_mode = options.get("sparse_mode", 0)
    mask = options.get("atten_mask")
    if sparse_mode in (2, 3):
        _require_causal_mask(mask)
    q_lens = _seq_lengths("actual_seq_lengths", options.get("actual_seq_lengths"), dims.batch, dims.q_len)
    kv_lens = _seq_lengths("actual_seq_lengths_kv", options.get("actual_seq_lengths_kv"), dims.batch, dims.kv_len)
    group = dims.heads // dims.kv_heads
    q = _to_bnsd(query, layout, dims.heads)
    k = _to_bnsd(key, layout, dims.kv_heads).repeat_interleave(group, dim=1)
    v = _to_bnsd(value, layout, dims.kv_heads).repeat_interleave(group, dim=1)
    visible = _visible(mask, sparse_mode, dims, q_lens, kv_lens)
    out, lse = _attention(q, k, v, visible, float(options.get("scale", 1.0)))
    lse_out = lse if options.get("softmax_lse_flag", False) else lse.new_zeros(lse_shape)
    return _from_bnsd(out, layout).to(query.dtype), lse_out


@torch.library.impl("npu::npu_fused_infer_attention_score", "CPU", lib=_LIB)
def _fused_infer_attention_score_op(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **options: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager CPU kernel of ``npu::npu_fused_infer_attention_score``; see :func:`npu_fused_infer_attention_score`.

    The forty keyword arguments of the schema arrive in ``options`` and go unchanged to the
    shared validation, so the eager and fake kernels cannot drift apart.
    """
    return _fused_infer_attention_score_kernel(query, key, value, options)


@torch.library.register_fake("npu::npu_fused_infer_attention_score", lib=_LIB)
def _fused_infer_attention_score_fake(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **options: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shape/dtype-only kernel: attention_out in query's layout and dtype, softmax_lse float32."""
    out_shape, lse_shape, _ = _check_fused_infer_attention_score(query, key, value, **options)
    return query.new_empty(out_shape), query.new_empty(lse_shape, dtype=torch.float32)


def npu_fused_infer_attention_score(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    pse_shift: Optional[torch.Tensor] = None,
    atten_mask: Optional[torch.Tensor] = None,
    actual_seq_lengths: Optional[Sequence[int]] = None,
    actual_seq_lengths_kv: Optional[Sequence[int]] = None,
    dequant_scale1: Optional[torch.Tensor] = None,
    quant_scale1: Optional[torch.Tensor] = None,
    dequant_scale2: Optional[torch.Tensor] = None,
    quant_scale2: Optional[torch.Tensor] = None,
    quant_offset2: Optional[torch.Tensor] = None,
    antiquant_scale: Optional[torch.Tensor] = None,
    antiquant_offset: Optional[torch.Tensor] = None,
    key_antiquant_scale: Optional[torch.Tensor] = None,
    key_antiquant_offset: Optional[torch.Tensor] = None,
    value_antiquant_scale: Optional[torch.Tensor] = None,
    value_antiquant_offset: Optional[torch.Tensor] = None,
    block_table: Optional[torch.Tensor] = None,
    query_padding_size: Optional[torch.Tensor] = None,
    kv_padding_size: Optional[torch.Tensor] = None,
    key_shared_prefix: Optional[torch.Tensor] = None,
    value_shared_prefix: Optional[torch.Tensor] = None,
    actual_shared_prefix_len: Optional[Sequence[int]] = None,
    query_rope: Optional[torch.Tensor] = None,
    key_rope: Optional[torch.Tensor] = None,
    key_rope_antiquant_scale: Optional[torch.Tensor] = None,
    num_heads: int = 1,
    scale: float = 1.0,
    pre_tokens: int = FIA_NO_BAND,
    next_tokens: int = FIA_NO_BAND,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    inner_precise: int = 0,
    block_size: int = 0,
    antiquant_mode: int = 0,
    key_antiquant_mode: int = 0,
    value_antiquant_mode: int = 0,
    softmax_lse_flag: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inference attention (prefill and decode): returns ``(attention_out, softmax_lse)``.

    Sources: torch_npu.npu_fused_infer_attention_score (API reference 6.0,
    https://www.hiascend.com/document/detail/zh/Pytorch/600/apiref/apilist/ptaoplist_000837.html,
    where the scale argument was still called scale_value), op-plugin's function schema (which
    calls it ``scale``, as here) and op-plugin's meta function for the output shapes.

    Semantics implemented, per batch b and head h, in float32:
    ``out = softmax(scale * q k^T + mask) v``, with key/value head ``h // (N / N_kv)``
    (GQA; ``num_key_value_heads=0`` means N).

    * Layouts: BSH (``[B, S, N*D]``), BSND and BNSD, float16/bfloat16.  key/value use the
      same layout with N_kv heads, and value may have its own head dim.  ``attention_out``
      has query's layout and dtype, with value's head dim.
    * Decode (``S_q = 1``) and prefill are the same computation.
    * ``sparse_mode=0``: ``atten_mask`` (bool/int8/uint8, nonzero = masked out) is
      ``[S_q, S_kv]``, ``[B, S_kv]`` for decode, ``[B|1, S_q, S_kv]`` or
      ``[B|1, 1, S_q, S_kv]``; no mask means full attention.
    * ``sparse_mode=2`` (causal from the top left: key j <= query i) and ``3`` (causal from
      the bottom right: j <= i + S_kv - S_q, the usual prefill-with-cache mask).  Both need
      the documented compressed mask ``triu(ones(2048, 2048), 1)`` and check it.
    * ``actual_seq_lengths`` / ``actual_seq_lengths_kv`` (1 or B ints): only the first L
      query rows / keys of each batch are valid.  Invalid query rows get zeros.  For mode 3
      the causal offset uses the actual lengths.
    * ``softmax_lse`` (``softmax_lse_flag=True``): float32 ``[B, N, S_q, 1]``, the
      log-sum-exp of the scaled, masked scores.  For a row with nothing to attend to, the
      output is 0 and lse is +inf (my choice; the value the device writes there was not
      confirmed).  Without the flag, lse is an empty float32 ``[0]``, as in the meta function.
    * Order of float steps: scores = (q.k) * scale; exp(score - rowmax);
      probs = exp / pairwise-sum; out = probs . v; every dot product uses _fixed_matmul's
      fixed order, so bits do not depend on threads.  The device's online-softmax (flash)
      order differs in the last bits; both variants of a case use this same kernel.

    Rejected with ValueError: other layouts (SBH, TND, BSH_NBSD, ...), int8 / quantised
    inputs and every quant/antiquant/paged (block_table)/shared-prefix/rope/pse input,
    sparse modes other than 0/2/3, non-default pre_tokens/next_tokens and inner_precise
    other than 0/1.  block_size and the antiquant modes only configure the rejected
    features; they must be ints and are otherwise ignored.
    """
    options = _keyword_arguments(locals(), ("query", "key", "value"))
    if not torch.compiler.is_compiling():
        _check_fused_infer_attention_score(query, key, value, **options)
    out, lse = torch.ops.npu.npu_fused_infer_attention_score(query, key, value, **options)
    return out, lse
