"""Quantisation ops of narrower use: ``npu_matmul_compress_dequant`` (a compressed int8 weight's matmul and
dequantisation) and ``npu_kronecker_quant`` (Kronecker-rotated dynamic quantisation)."""

from __future__ import annotations

import torch

from ..errors import OpArgumentError
from ..numerics.exact import cube_matmul, int_matmul
from .checks import HALF_DTYPES, dtype_of_code, require_choice, require_dtype, require_shape
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
