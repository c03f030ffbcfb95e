"""Quantisation ops of narrower use: ``npu_matmul_compress_dequant`` (a compressed int8 weight's matmul and
dequantisation), ``npu_kronecker_quant`` (Kronecker-rotated dynamic quantisation) and ``npu_dynamic_mx_quant``
(MX block quantisation to float8/float4 with E8M0 scales)."""

from __future__ import annotations

import torch

from ..errors import OpArgumentError
from ..numerics.exact import cube_matmul, int_matmul
from .checks import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    dtype_of_code,
    require_choice,
    require_dtype,
    require_dtype_code,
    require_shape,
)
from .quant import INT4_PER_INT32
from .quant import _pack_int4 as pack_int4
from .quant_param import decode_quant_param
from .registry import Arguments, Out, SampleCall, npu_op


# ---------------------------------------------------------------------------------------------
# npu_matmul_compress_dequant (MatmulCompressDequant)
# ---------------------------------------------------------------------------------------------


def _compress_dequant_meta(call: Arguments) -> Out:
    x1, x2, bias, scale = call.x1, call.x2, call.bias, call.scale
    require_dtype("x1", x1, (torch.int8,))
    require_dtype("x2", x2, (torch.int8,))
    require_dtype("compress_index", call.compress_index, (torch.int8,))
    if x1.dim() != 2 or bias.dim() != 2 or scale.dim() != 2:
        raise OpArgumentError(f"x1 {list(x1.shape)}, bias {list(bias.shape)} and scale {list(scale.shape)} must be "
                              "2-D (op-plugin MatmulCompressDequantKernelNpuOpApi.cpp)")
    if x2.dim() != 2:
        raise OpArgumentError(
            f"x2 has shape {list(x2.shape)}: the CPU model needs the weight uncompressed, [K, N] (as the torch_npu "
            "docstring's example passes it); msModelSlim's compressed 1-D form has no documented layout to unzip"
        )
    n = bias.shape[1]
    if x2.shape != (x1.shape[1], n):
        raise OpArgumentError(f"x2 has shape {list(x2.shape)}; expected [K={x1.shape[1]}, N={n}] (N from bias)")
    require_dtype("bias", bias, (torch.int32,))
    require_shape("bias", bias, ((1, n),))
    require_dtype("scale", scale, (torch.int64, torch.float32), "(npu_trans_quant_param's int64, or float32)")
    require_shape("scale", scale, ((1, n), (1, 1)))
    return Out([x1.shape[0], n], torch.float16)


def _compress_dequant_kernel(call: Arguments) -> torch.Tensor:
    scale = call.scale
    factor = decode_quant_param(scale)[0] if scale.dtype == torch.int64 else scale
    accumulated = int_matmul(call.x1, call.x2) + call.bias
    return (accumulated.to(torch.float32) * factor).to(torch.float16)


def _compress_dequant_samples() -> list[SampleCall]:
    """The docstring's example at a smaller size (m, k, n = 4, 64, 16) with random values, and an int64 scale
    from npu_trans_quant_param's packing."""
    gen = torch.Generator().manual_seed(0)
    x1 = torch.randint(-8, 8, (4, 64), dtype=torch.int8, generator=gen)
    x2 = torch.randint(-8, 8, (64, 16), dtype=torch.int8, generator=gen)
    index, bias = torch.zeros(8, dtype=torch.int8), torch.randint(-50, 50, (1, 16), dtype=torch.int32, generator=gen)
    scale = torch.rand(1, 16, generator=gen) / 64
    packed = torch.ops.npu.npu_trans_quant_param(scale)
    return [SampleCall((x1, x2, index, bias, scale)), SampleCall((x1, x2, index, bias, packed))]


@npu_op(meta=_compress_dequant_meta, kernel=_compress_dequant_kernel, samples=_compress_dequant_samples)
def npu_matmul_compress_dequant(call: Arguments) -> None:
    """``(x1 @ unzip(x2) + bias) * scale`` to float16: the matmul and dequantisation of a weight stored
    compressed.

    Sources: torch_npu's docstring of npu_matmul_compress_dequant (op-plugin
    codegen/templates/_op_plugin_docs.py: x1 int8 [M, K], bias int32 (1, N), scale (1, n), output float16
    [M, N], offsetW None and offsetX 0 only), op-plugin MatmulCompressDequantKernelNpuOpApi.cpp (the checks,
    compressInfo {8, 8, k, n, 1}) and CANN's aclnnMatmulCompressDequant (formula; deqScale the UINT64 of
    npu_trans_quant_param, (1, n) or (1, 1); Atlas inference products only).

    The CPU model takes ``x2`` uncompressed, ``[K, N]`` int8 (the docstring's example passes it so, calling it
    the reconstructed weight): msModelSlim's lossless compression, whose 1-D output the device unzips with
    ``compress_index``, has no public layout, so a compressed ``x2`` is refused and ``compress_index`` is
    not read. The int32 accumulation is exact; an int64 ``scale`` is decoded to its float32 factor, a
    float32 one (the docstring's example) used as it is, and the product is rounded once to float16.
    """
    if call.offsetW is not None:
        raise OpArgumentError("offsetW currently only supports None (op-plugin MatmulCompressDequantKernelNpuOpApi.cpp)")
    require_choice("offsetX", 0 if call.offsetX is None else call.offsetX, (0,), "the only supported offset")


# ---------------------------------------------------------------------------------------------
# npu_kronecker_quant (FlatQuant)
# ---------------------------------------------------------------------------------------------

INT4_LEVEL = 7.0  # the int4 target's largest level: quantScale = max|x''| / (7 / clip_ratio)


def _kronecker_meta(call: Arguments) -> tuple[Out, Out]:
    x, p1, p2 = call.x, call.kronecker_p1, call.kronecker_p2
    require_dtype("x", x, HALF_DTYPES)
    for name, matrix in (("kronecker_p1", p1), ("kronecker_p2", p2)):
        require_dtype(name, matrix, (x.dtype,), "(x's dtype)")
    if x.dim() != 3 or x.shape[-1] % INT4_PER_INT32:
        raise OpArgumentError(f"x has shape {list(x.shape)}; expected [K, M, N] with N a multiple of 8")
    require_shape("kronecker_p1", p1, ((x.shape[1], x.shape[1]),))
    require_shape("kronecker_p2", p2, ((x.shape[2], x.shape[2]),))
    return Out([x.shape[0], x.shape[1], x.shape[2] // INT4_PER_INT32], torch.int32), Out([x.shape[0]], torch.float32)


def _kronecker_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """op-plugin's golden: ``x'' = p1 @ (x @ p2)`` (each product the Cube's, rounded to x's dtype),
    ``factor = 7 * clip_ratio / max|x''[k]|``, levels ``int(half(x'' * factor))`` (truncated toward
    zero, as the golden's cast), ``quant_scale = max|x''[k]| / (7 * clip_ratio)``."""
    x = call.x
    rotated = cube_matmul(call.kronecker_p1, cube_matmul(x, call.kronecker_p2))
    amax = rotated.to(torch.float32).abs().flatten(1).amax(dim=1)
    ratio = INT4_LEVEL * (1.0 if call.clip_ratio is None else call.clip_ratio)
    factor = torch.full_like(amax, ratio) / amax
    levels = (rotated.to(torch.float32) * factor[:, None, None]).to(torch.float16).to(torch.int8)
    return pack_int4(levels.clamp(-8, 7)), amax / ratio


def _kronecker_samples() -> list[SampleCall]:
    """The docstring's example shapes, smaller: x [4, 3, 16] with p1 [3, 3] and p2 [16, 16], with and without
    a clip ratio."""
    gen = torch.Generator().manual_seed(0)
    x, p1, p2 = (torch.rand(*shape, generator=gen).bfloat16() for shape in ((4, 3, 16), (3, 3), (16, 16)))
    return [SampleCall((x, p1, p2, 0.7848)), SampleCall((x.half(), p1.half(), p2.half()))]


@npu_op(meta=_kronecker_meta, kernel=_kronecker_kernel, samples=_kronecker_samples)
def npu_kronecker_quant(call: Arguments) -> None:
    """Rotate each [M, N] slice by two small matrices, then quantise it per slice to int4:
    returns (int32 words of eight int4 [K, M, N / 8], float32 quant_scale [K]).

    Sources: torch_npu's docstring of npu_kronecker_quant (op-plugin codegen/templates/_op_plugin_docs.py:
    shapes, dtypes, clip_ratio in (0, 1], dst_dtype int32), CANN's FlatQuant (hicann/ops-nn
    quant/flat_quant/README.md: ``x'' = p1 @ (x @ p2)``, per-token ``quantScale = max|x''[k]| / (7 /
    clipRatio)``, ``out = x'' / quantScale``) and op-plugin's golden in
    test/test_custom_ops/test_npu_kronecker_quant.py (which multiplies by ``7 * clip_ratio / max`` and
    truncates through float16; eight int4 to an int32, element 0 in the low nibble).

    Refused: the float4_e2m1 per-group target (``dst_dtype`` other than int32) and ``dst_type_max``
    other than 0.
    """
    if call.clip_ratio is not None and not 0 < call.clip_ratio <= 1:
        raise OpArgumentError(f"clip_ratio={call.clip_ratio} must lie in (0, 1]")
    if call.dst_dtype is not None:
        require_choice("dst_dtype", dtype_of_code(call.dst_dtype), (torch.int32,), "int4 packed in int32; the "
                       "float4_e2m1 target is not implemented")
    require_choice("dst_type_max", call.dst_type_max or 0.0, (0.0,), "the int4 target's default")


# ---------------------------------------------------------------------------------------------
# npu_dynamic_mx_quant (DynamicMxQuant)
# ---------------------------------------------------------------------------------------------

# The element formats torch has a dtype for, each with its emax (the exponent of its largest normal number,
# aclnnDynamicMxQuant's table) and its largest finite value.
MX_EMAX = {torch.float8_e4m3fn: 8, torch.float8_e5m2: 15, torch.float4_e2m1fn_x2: 2}
FP4_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # the magnitudes of codes 0..7 (sign in bit 3)
E8M0_BIAS = 127
MX_SCALE_PAIR = 2  # mxscale holds the scales of two consecutive blocks in its last dim


def _mx_target(call: Arguments) -> torch.dtype:
    target = dtype_of_code(call.dst_type)
    if target not in MX_EMAX:
        raise OpArgumentError(
            f"dst_type={call.dst_type} is not implemented; expected torch_npu.float4_e2m1fn_x2 (296, the default), "
            "torch.float8_e4m3fn or torch.float8_e5m2 (float4_e1m2 has no torch dtype)"
        )
    return target


def _mx_meta(call: Arguments) -> tuple[Out, Out]:
    x, target = call.input, _mx_target(call)
    require_dtype("input", x, FLOAT_DTYPES)
    if not -x.dim() <= call.axis < x.dim():
        raise OpArgumentError(f"axis={call.axis} is out of input's dimension range [{-x.dim()}, {x.dim() - 1}]")
    axis = call.axis % x.dim()
    scale_shape = [*x.shape, MX_SCALE_PAIR]
    scale_shape[axis] = -(-(-(-x.shape[axis] // call.block_size)) // MX_SCALE_PAIR)
    if target == torch.float4_e2m1fn_x2:
        if x.shape[-1] % 2:
            raise OpArgumentError(f"input's last dim {x.shape[-1]} must be even for a float4 output (two per byte)")
        return Out([*x.shape[:-1], x.shape[-1] // 2], torch.uint8), Out(scale_shape, torch.uint8)
    return Out(list(x.shape), target), Out(scale_shape, torch.uint8)


def _fp4_e2m1_codes(values: torch.Tensor) -> torch.Tensor:
    """float32 values (already scaled) as float4_e2m1 codes (uint8 0..15): the nearest representable
    magnitude, ties to the even code, saturated at 6, the sign in bit 3."""
    grid = torch.tensor(FP4_E2M1_VALUES, dtype=torch.float64)
    distance = (values.abs().to(torch.float64).clamp(max=grid[-1]).unsqueeze(-1) - grid).abs()
    nearest = distance == distance.amin(dim=-1, keepdim=True)
    even = nearest & (torch.arange(len(FP4_E2M1_VALUES)) % 2 == 0)
    code = torch.where(even.any(dim=-1), even.to(torch.int8).argmax(dim=-1), nearest.to(torch.int8).argmax(dim=-1))
    return (code + torch.where(values < 0, 8, 0)).to(torch.uint8)


def _mx_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """OCP MX (scale_alg 0): per block of ``block_size`` values along ``axis`` (the last one padded with
    zeros), ``shared_exp = floor(log2(max|v|)) - emax``, clamped to the E8M0 range [-127, 127] (an all-zero
    block gets the smallest scale), ``mxscale = 2^shared_exp`` stored as its E8M0 byte, and
    ``y = cast(v / mxscale)`` rounding to nearest even and saturating at the format's largest value."""
    x, target, size = call.input, _mx_target(call), call.block_size
    axis = call.axis % x.dim()
    moved = x.to(torch.float32).movedim(axis, -1)
    length = moved.shape[-1]
    blocks = -(-length // size)
    padded_blocks = blocks + blocks % MX_SCALE_PAIR
    padded = torch.nn.functional.pad(moved, (0, padded_blocks * size - length)).unflatten(-1, (padded_blocks, size))
    amax = padded.abs().amax(dim=-1)
    exponent = (torch.floor(torch.log2(amax)) - MX_EMAX[target]).nan_to_num(neginf=-E8M0_BIAS)
    exponent = exponent.clamp(-E8M0_BIAS, E8M0_BIAS)
    exponent[..., blocks:] = -E8M0_BIAS  # the pad block's scale: byte 0, as the page pads with 0
    scaled = (padded / torch.exp2(exponent).unsqueeze(-1)).flatten(-2)[..., :length].movedim(-1, axis)
    scale = (exponent + E8M0_BIAS).to(torch.uint8).unflatten(-1, (-1, MX_SCALE_PAIR)).movedim(-2, axis)
    if target == torch.float4_e2m1fn_x2:
        codes = _fp4_e2m1_codes(scaled).unflatten(-1, (-1, 2))
        return codes[..., 0] | (codes[..., 1] << 4), scale
    limit = torch.finfo(target).max
    return scaled.clamp(-limit, limit).to(target), scale


def _mx_samples() -> list[SampleCall]:
    """The aclnn page's example row (0, 8, 64, 512 in bfloat16 to float8_e4m3fn), a [4, 40] float16 input to
    the default float4_e2m1 in blocks of 32 along the last axis (two blocks, the second partial), and
    float8_e5m2 blocks along axis 0."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 40, generator=gen) * 3).half()
    page = torch.tensor([[0.0, 8.0, 64.0, 512.0]]).bfloat16()
    return [
        SampleCall((page,), {"dst_type": torch.float8_e4m3fn}),
        SampleCall((x,)),
        SampleCall((x.bfloat16(),), {"axis": 0, "dst_type": torch.float8_e5m2}),
    ]


@npu_op(meta=_mx_meta, kernel=_mx_kernel, argument_checks={"dst_type": require_dtype_code}, samples=_mx_samples)
def npu_dynamic_mx_quant(call: Arguments) -> None:
    """MX quantisation: per block of ``block_size`` values along ``axis``, one power-of-two scale (E8M0) and
    the values divided by it in a float8 or float4 format; returns (y, mxscale).

    Sources: CANN aclnnDynamicMxQuant (hicann/ops-nn quant/dynamic_mx_quant/docs/aclnnDynamicMxQuant.md:
    scale_alg 0's formula and emax table, round modes, mxscale's shape with its axis dim
    ``ceil(ceil(n / block_size) / 2)`` and a last dim of 2 holding two consecutive blocks' scales, padded
    with 0) and op-plugin's DynamicMxQuantKernelNpuOpApi.cpp and meta function (y in the float8 dtype, or
    uint8 bytes of two float4 values for float4 with the last dim halved; mxscale uint8 holding E8M0 bytes;
    dst_type codes).

    Modeled: float16/bfloat16/float32 input; ``dst_type`` float4_e2m1 (torch_npu's 296, the default),
    float8_e4m3fn or float8_e5m2 (torch_npu's 292/291 or the torch dtypes); ``round_mode="rint"``;
    ``scale_alg=0`` (OCP); ``block_size`` a multiple of 32 up to 1024. Assumptions (the page does not say):
    a value past the format's largest is saturated to it, an all-zero block's scale is 2^-127, and a float4
    byte holds element 2i in its low nibble. Refused: float4_e1m2 (torch has no such dtype), scale_alg 1/2,
    the round modes "floor"/"round", and non-zero ``dst_type_max``/``max_low_bound``.
    """
    require_choice("round_mode", call.round_mode, ("rint",), "the round mode modeled")
    require_choice("scale_alg", 0 if call.scale_alg is None else call.scale_alg, (0,), "OCP's scale (scale_alg 0)")
    if call.block_size <= 0 or call.block_size % 32 or call.block_size > 1024:
        raise OpArgumentError(f"block_size={call.block_size} must be a multiple of 32 in [32, 1024]")
    require_choice("dst_type_max", call.dst_type_max, (0.0,), "the format's own largest value")
    require_choice("max_low_bound", call.max_low_bound, (0.0,), "no lower bound on the scale")
