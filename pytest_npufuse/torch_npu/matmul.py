"""Matmul ops: the fused matmul + all-reduce / reduce-scatter of tensor parallelism and the transposing batched
matmuls of MLA.

Both multiply through :mod:`pytest_npufuse.numerics.exact` (the Cube: fp32 products and accumulation, one rounding).
``npu_mm_all_reduce_base`` sums the ranks' products over the ``"hccl"`` group its ``hcom`` names
(:mod:`.distributed`), and computes a world of one rank (where the all-reduce is the identity) for any
other name; the op catalog prices its all-reduce on the profile's communication link for
the configured world (``[comm] ranks``), so a larger world costs more, as on the device.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..errors import OpArgumentError
from ..numerics.exact import cube_addmm, cube_matmul, int_matmul
from .checks import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    comm_domain_name,
    dtype_of_code,
    kernel_checks_apply,
    require_choice,
    require_dtype,
    require_dtype_code,
    require_shape,
    require_unused,
)
from .distributed import all_gather_rows, all_reduce_sum, comm_domain
from .quant import antiquant_param_shapes, antiquant_weight
from .quant_param import decode_quant_param
from .registry import Arguments, Derivative, Out, SampleCall, npu_op


# ---------------------------------------------------------------------------------------------
# npu_mm_all_reduce_base (MatmulAllReduce)
# ---------------------------------------------------------------------------------------------

MM_ALL_REDUCE_UNMODELED = (
    "pertoken_scale", "comm_quant_scale_1", "comm_quant_scale_2", "group_sizes", "y_dtype",
    "x1_dtype", "x2_dtype", "dequant_scale_dtype", "pertoken_scale_dtype", "comm_mode",
)


def _mm_all_reduce_quant_meta(call: Arguments) -> Out:
    """The fully quantised mode (int8 ``x1``/``x2`` with ``dequant_scale``) as op-plugin's meta function gives
    it (op_plugin/python/meta/_meta_registrations.py ``npu_mm_all_reduce_base_forward``): x1's shape with
    x2's n, in bfloat16 for a bfloat16 ``dequant_scale``, else float16. Its kernel is not modeled, so a call
    on real tensors is refused; on fake tensors the shapes are what a traced graph needs."""
    if kernel_checks_apply(call.x1):
        require_unused("npu_mm_all_reduce_base", dequant_scale=call.dequant_scale)
    dtype = torch.bfloat16 if call.dequant_scale.dtype == torch.bfloat16 else torch.float16
    return Out([*call.x1.shape[:-1], call.x2.shape[-1]], dtype)


def _mm_all_reduce_meta(call: Arguments) -> Out:
    """Shapes and dtypes of the non-quantised and weight-only-quantised (antiquant) rows of the page."""
    if call.dequant_scale is not None:
        return _mm_all_reduce_quant_meta(call)
    x1, x2 = call.x1, call.x2
    require_dtype("x1", x1, HALF_DTYPES, "(int8 x1, the fully quantised mode, is not implemented)")
    antiquant = x2.dtype == torch.int8
    require_dtype("x2", x2, (x1.dtype, torch.int8), "(x1's dtype, or int8 with antiquant_scale)")
    if x1.dim() not in (2, 3) or x2.dim() != 2 or x1.shape[-1] != x2.shape[0]:
        raise OpArgumentError(
            f"x1 {list(x1.shape)} and x2 {list(x2.shape)} must be [m, k] or [b, s, k] and [k, n]", argument="x1"
        )
    k, n = x2.shape
    out_shape = [*x1.shape[:-1], n]
    scale, offset, group = call.antiquant_scale, call.antiquant_offset, call.antiquant_group_size
    if antiquant != (scale is not None):
        raise OpArgumentError(
            "an int8 x2 needs antiquant_scale (weight-only quantisation), and only an int8 x2 takes it"
        )
    for name, param in (("antiquant_scale", scale), ("antiquant_offset", offset)):
        if param is not None:
            require_dtype(name, param, (x1.dtype,), "(x1's dtype)")
            require_shape(name, param, antiquant_param_shapes(k, n, group))
    if call.bias is not None:
        require_dtype("bias", call.bias, (x1.dtype,), "(x1's dtype)")
        require_shape("bias", call.bias, ((n,),))
    if call.x3 is not None:
        require_dtype("x3", call.x3, (x1.dtype,), "(the output's dtype)")
        require_shape("x3", call.x3, (out_shape,))
    return Out(out_shape, x1.dtype)


def _mm_all_reduce_kernel(call: Arguments) -> torch.Tensor:
    x1, x2, bias, x3 = call.x1, call.x2, call.bias, call.x3
    if x2.dtype == torch.int8:
        x2 = antiquant_weight(x2, call.antiquant_scale, call.antiquant_offset,
                               call.antiquant_group_size, x1.dtype)
    rows = x1.reshape(-1, x1.shape[-1])
    addend = torch.zeros(x2.shape[1], dtype=torch.float32) if bias is None else bias.to(torch.float32)
    if x3 is not None:
        addend = addend + x3.reshape(rows.shape[0], -1).to(torch.float32)
    domain = comm_domain(call.hcom)
    if domain is None or domain.size == 1:
        out = cube_addmm(addend.expand(rows.shape[0], -1), rows, x2, out_dtype=x1.dtype)
        return out.reshape(*x1.shape[:-1], x2.shape[1])
    # Several ranks: each rank's fp32 partial (x1 @ x2 + bias + x3) is summed across the group, then rounded
    # once (the page's formula puts bias and x3 inside the all-reduce).
    partial = cube_addmm(addend.expand(rows.shape[0], -1), rows, x2, out_dtype=torch.float32)
    total = all_reduce_sum(domain, partial.contiguous(), "torch_npu.npu_mm_all_reduce_base")
    return total.to(x1.dtype).reshape(*x1.shape[:-1], x2.shape[1])


def _mm_all_reduce_samples() -> list[SampleCall]:
    """A bfloat16 projection with a transposed weight, bias and residual, and an int8 weight dequantised
    per group of 32 rows."""
    gen = torch.Generator().manual_seed(0)
    x1, weight = torch.randn(2, 3, 64, generator=gen).bfloat16(), torch.randn(16, 64, generator=gen).bfloat16()
    bias, x3 = torch.randn(16, generator=gen).bfloat16(), torch.randn(2, 3, 16, generator=gen).bfloat16()
    rows = torch.randn(4, 64, generator=gen).half()
    quantised = torch.randint(-8, 8, (64, 8), dtype=torch.int8, generator=gen)
    scale = (torch.rand(2, 8, generator=gen) / 8).half()
    return [
        SampleCall((x1, weight.t(), "hcom_tp"), {"bias": bias, "x3": x3}),
        SampleCall((rows, quantised, "hcom"), {"antiquant_scale": scale, "antiquant_group_size": 32}),
    ]


@npu_op(
    meta=_mm_all_reduce_meta,
    kernel=_mm_all_reduce_kernel,
    unmodeled=MM_ALL_REDUCE_UNMODELED,
    argument_checks={"hcom": comm_domain_name("communication domain")},
    samples=_mm_all_reduce_samples,
)
def npu_mm_all_reduce_base(call: Arguments) -> None:
    """MatmulAllReduce (tensor parallelism): ``allreduce(x1 @ ((x2 + antiquant_offset) * antiquant_scale) + bias
    + x3)`` over the communication domain ``hcom``.

    Source: torch_npu.npu_mm_all_reduce_base (op-plugin API page: formula, dtype tables, shapes). When
    ``hcom`` names an ``"hccl"`` process group of several ranks (one process per NPU), each rank's fp32
    partial is summed across the group and rounded once; for any other name the world is one rank, whose
    all-reduce is the identity. The op catalog prices the
    all-reduce of the output on the profile's link for ``[comm] ranks`` dies (cost rule
    ``matmul_all_reduce``).

    * ``x1`` float16/bfloat16 ``[m, k]`` or ``[b, s, k]``; ``x2`` ``[k, n]`` (a transposed view is fine) in
      x1's dtype; output ``[m, n]`` / ``[b, s, n]`` in x1's dtype. ``bias`` ``[n]`` and ``x3`` (the output's
      shape) in x1's dtype.
    * Weight-only quantisation (the page's antiquant table): int8 ``x2`` with ``antiquant_scale`` (and
      optionally ``antiquant_offset``) in x1's dtype, per tensor ``[1]``, per channel ``[n]``/``[1, n]``, or
      per group ``[ceil(k / antiquant_group_size), n]``; the weight is dequantised in float32 and rounded
      once to x1's dtype, as in :func:`~pytest_npufuse.torch_npu.quant.npu_weight_quant_batchmatmul`.
    * Rounding: fp32 products and accumulation; bias and x3 are added in float32 before the one rounding
      (the page does not say where x3 is added; an assumption).

    Refused with the argument's name: the fully quantised mode (int8 x1 with dequant/pertoken scales),
    communication quantisation, ``reduce_op`` other than ``"sum"`` (the only documented value) and
    ``comm_turn != 0`` (the only supported value).
    """
    require_choice("reduce_op", call.reduce_op, ("sum",), "the only documented reduce operation")
    require_choice("comm_turn", call.comm_turn, (0,), "the only supported split")
    require_choice("comm_quant_mode", call.comm_quant_mode, (0,), "no comm quantisation")
    if call.antiquant_group_size < 0:
        raise OpArgumentError(
            f"antiquant_group_size={call.antiquant_group_size} must be >= 0 (0: no groups)",
            argument="antiquant_group_size",
        )


# ---------------------------------------------------------------------------------------------
# npu_transpose_batchmatmul (TransposeBatchMatMul)
# ---------------------------------------------------------------------------------------------

PERM_X1 = ((0, 1, 2), (1, 0, 2))
PERM_X2 = ((0, 1, 2), (0, 2, 1))
PERM_Y = ((1, 0, 2),)


def _perm(value: Optional[Sequence[int]], default: tuple[int, ...]) -> tuple[int, ...]:
    return default if value is None else tuple(int(v) for v in value)


def _tbmm_operands(input: torch.Tensor, weight: torch.Tensor, perm_x1: Optional[Sequence[int]],
                   perm_x2: Optional[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, M, K] and [B, K, N] views of input and weight after their permutations (checked)."""
    require_dtype("input", input, FLOAT_DTYPES)
    require_dtype("weight", weight, (input.dtype,), "(input's dtype)")
    if input.dim() != 3 or weight.dim() != 3:
        raise OpArgumentError(
            f"input {list(input.shape)} and weight {list(weight.shape)} must both be 3-D", argument="input"
        )
    lhs = input.permute(*_perm(perm_x1, PERM_X1[0]))
    rhs = weight.permute(*_perm(perm_x2, PERM_X2[0]))
    if lhs.shape[0] != rhs.shape[0] or lhs.shape[2] != rhs.shape[1]:
        raise OpArgumentError(f"after perm_x1/perm_x2, input is {list(lhs.shape)} and weight {list(rhs.shape)}; they "
                              "must be [B, M, K] and [B, K, N]")
    return lhs, rhs


def _tbmm_meta(call: Arguments) -> Out:
    lhs, rhs = _tbmm_operands(call.input, call.weight, call.perm_x1, call.perm_x2)
    return Out([lhs.shape[1], lhs.shape[0], rhs.shape[2]], call.input.dtype)


def _tbmm_kernel(call: Arguments) -> torch.Tensor:
    lhs, rhs = _tbmm_operands(call.input, call.weight, call.perm_x1, call.perm_x2)
    return cube_matmul(lhs, rhs).transpose(0, 1).contiguous()


def _tbmm_samples() -> list[SampleCall]:
    """MLA's per-head up-projection: [M, B, K] tokens by [B, N, K] weights into [M, B, N], and the default
    permutations."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 4, 32, generator=gen).bfloat16(), torch.randn(4, 16, 32, generator=gen).bfloat16()
    return [
        SampleCall((x, w), {"perm_x1": [1, 0, 2], "perm_x2": [0, 2, 1], "perm_y": [1, 0, 2]}),
        SampleCall((x.transpose(0, 1).contiguous(), w.transpose(1, 2).contiguous())),
    ]


@npu_op(meta=_tbmm_meta, kernel=_tbmm_kernel, unmodeled=("bias", "scale"), samples=_tbmm_samples)
def npu_transpose_batchmatmul(call: Arguments) -> None:
    """TransposeBatchMatMul: ``Y = (input^{perm_x1} @ weight^{perm_x2})^{perm_y}`` per batch (dim 0 after the
    permutation is the batch).

    Source: torch_npu.npu_transpose_batchmatmul (op-plugin API page: formula, permutations, dtypes; op-plugin
    meta function: the output is ``[M, B, N]``). MLA uses it to multiply per-head latents by per-head
    weights and come out token-major in one op.

    * ``input`` 3-D ``[B, M, K]`` (``perm_x1=(0, 1, 2)``, the default) or ``[M, B, K]``
      (``perm_x1=(1, 0, 2)``); ``weight`` ``[B, K, N]`` (``perm_x2=(0, 1, 2)``) or ``[B, N, K]``
      (``(0, 2, 1)``, newer CANN per the meta function); ``perm_y`` only ``(1, 0, 2)``: the output is
      ``[M, B, N]`` in input's dtype. float16, bfloat16, float32.
    * The Cube's numerics: fp32 products and accumulation, one rounding (:func:`~pytest_npufuse.numerics.exact.cube_matmul`).

    Refused with the argument's name: ``bias`` (the page: not supported yet), ``scale`` (int8 output
    quantisation), ``batch_split_factor > 1`` (the page gives the output shape but not the element order).
    """
    for name, value, allowed in (("perm_x1", call.perm_x1, PERM_X1), ("perm_x2", call.perm_x2, PERM_X2),
                                 ("perm_y", call.perm_y, PERM_Y)):
        require_choice(name, _perm(value, allowed[0]), allowed, "the documented permutations")
    require_choice("batch_split_factor", call.batch_split_factor, (1, None), "no split of the output's N dim")


# ---------------------------------------------------------------------------------------------
# _npu_matmul_add_fp32 (ATB LinearOperation with accumulation)
# ---------------------------------------------------------------------------------------------


def _matmul_add_fp32_meta(call: Arguments) -> Out:
    """``x`` [K, M] and ``weight`` [K, N] in one half dtype, ``C`` [M, N] float32, updated in place."""
    x, weight, accumulator = call.x, call.weight, call.C
    require_dtype("x", x, HALF_DTYPES)
    require_dtype("weight", weight, (x.dtype,), "(x's dtype)")
    require_dtype("C", accumulator, (torch.float32,), "(the float32 accumulator)")
    if x.dim() != 2 or weight.dim() != 2 or x.shape[0] != weight.shape[0]:
        raise OpArgumentError(
            f"x {list(x.shape)} and weight {list(weight.shape)} must be [K, M] and [K, N] (x is transposed)",
            argument="x"
        )
    require_shape("C", accumulator, ((x.shape[1], weight.shape[1]),))
    return Out(list(accumulator.shape), torch.float32)


def _matmul_add_fp32_kernel(call: Arguments) -> torch.Tensor:
    return cube_addmm(call.C, call.x.t(), call.weight, out_dtype=torch.float32)


def _matmul_add_fp32_samples() -> list[SampleCall]:
    """A [K, M] float16 x and [K, N] weight accumulated into a float32 [M, N] C."""
    gen = torch.Generator().manual_seed(0)
    x, weight = torch.randn(32, 8, generator=gen).half(), torch.randn(32, 12, generator=gen).half()
    return [SampleCall((x, weight, torch.randn(8, 12, generator=gen)))]


@npu_op(meta=_matmul_add_fp32_meta, kernel=_matmul_add_fp32_kernel, writes_back={"C": 0},
        samples=_matmul_add_fp32_samples)
def _npu_matmul_add_fp32(call: Arguments) -> None:
    """``C += x^T @ weight`` into a float32 ``C``, in place; returns None (a weight-gradient accumulation).

    Source: op-plugin ``op_plugin/ops/atb/LinearAtb.cpp``: ATB LinearOperation with ``transposeA = true``,
    ``transposeB = false``, no bias and ``enAccum = true``, inputs (x, weight, C) and output C. vLLM-Ascend
    warms it up with float16 ``x`` [2, 4], ``weight`` [2, 4] and float32 ``C`` [4, 4]. The product is the
    Cube's (fp32 accumulation), added to C before the float32 result.
    """


# ---------------------------------------------------------------------------------------------
# npu_linear (and npu_linear_backward)
# ---------------------------------------------------------------------------------------------


def _linear_meta(call: Arguments) -> Out:
    x, weight, bias = call.input, call.weight, call.bias
    require_dtype("input", x, FLOAT_DTYPES, "(the int8 and int32 forms are not implemented)")
    require_dtype("weight", weight, (x.dtype,), "(input's dtype)")
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise OpArgumentError(
            f"input {list(x.shape)} and weight {list(weight.shape)} must be 2-D [M, K] and [N, K]", argument="input"
        )
    if bias is not None:
        require_shape("bias", bias, ((weight.shape[0],),))
        require_dtype("bias", bias, (x.dtype, torch.float32), "(input's dtype or float32)")
    return Out([x.shape[0], weight.shape[0]], x.dtype)


def _linear_kernel(call: Arguments) -> torch.Tensor:
    x, weight = call.input, call.weight
    if call.bias is None:
        return cube_matmul(x, weight.t())
    return cube_addmm(call.bias.to(torch.float32), x, weight.t(), out_dtype=x.dtype)


def _linear_setup(ctx: object, call: Arguments, output: torch.Tensor) -> None:
    ctx.save_for_backward(call.input, call.weight)
    ctx.has_bias = call.bias is not None


def _linear_grad(ctx: object, grad: torch.Tensor) -> tuple:
    """op-plugin derivatives.yaml: ``input, weight: npu_linear_backward(grad, input, weight)``; the bias
    gets ``grad`` summed over the rows (the yaml's ``maybe_multiply(grad, 1)``, reduced to the bias's [N])."""
    x, weight = ctx.saved_tensors
    grad_input, grad_weight = torch.ops.npu.npu_linear_backward(grad, x, weight)
    return grad_input, grad_weight, grad.sum(dim=0) if ctx.has_bias else None


def _linear_samples() -> list[SampleCall]:
    """``input @ weight.T`` with and without a bias."""
    gen = torch.Generator().manual_seed(1)
    x, weight = torch.randn(4, 16, generator=gen), torch.randn(8, 16, generator=gen)
    return [SampleCall((x, weight)), SampleCall((x, weight, torch.randn(8, generator=gen)))]


def _linear_backward_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(2)
    return [SampleCall((torch.randn(4, 8, generator=gen), torch.randn(4, 16, generator=gen),
                        torch.randn(8, 16, generator=gen)))]


@npu_op(meta=_linear_meta, kernel=_linear_kernel, derivative=Derivative(_linear_setup, _linear_grad),
        samples=_linear_samples)
def npu_linear(call: Arguments) -> None:
    """``input @ weight^T + bias`` for 2-D ``input`` [M, K] and ``weight`` [N, K] (nn.Linear's layout).

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_linear.md (2-D matrices, 1-D
    bias) and derivatives.yaml (npu_linear_backward). The Cube's product (fp32 accumulation, the bias added
    before the one rounding); float16, bfloat16 and float32. The page's int8 and int32 forms are refused.
    """


def _linear_backward_meta(call: Arguments) -> tuple[Out, Out]:
    grad, x, weight = call.grad, call.input, call.weight
    require_shape("grad", grad, ((x.shape[0], weight.shape[0]),))
    return Out(list(x.shape), x.dtype), Out(list(weight.shape), weight.dtype)


def _linear_backward_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    grad, x, weight = call.grad, call.input, call.weight
    return cube_matmul(grad, weight, out_dtype=x.dtype), cube_matmul(grad.t(), x, out_dtype=weight.dtype)


@npu_op(meta=_linear_backward_meta, kernel=_linear_backward_kernel, samples=_linear_backward_samples)
def npu_linear_backward(call: Arguments) -> None:
    """npu_linear's gradients: ``(grad @ weight, grad^T @ input)`` for ``input`` and ``weight``. torch_npu's
    schema ``npu_linear_backward(Tensor grad, Tensor input, Tensor weight) -> (Tensor, Tensor)``."""


# ---------------------------------------------------------------------------------------------
# npu_transpose_quant_batchmatmul (TransposeQuantBatchMatMul)
# ---------------------------------------------------------------------------------------------

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
TQBMM_OUT_DTYPES = (torch.float16, torch.bfloat16)
MX_BLOCK = 32  # values of k per float8_e8m0fnu scale (the page's group_k = 32)
MX_GROUP_SIZES = ((0, 0, 32), (0, 1, 32), (1, 0, 32), (1, 1, 32))


def _tqbmm_operands(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """x1 [m, b, k] as [b, m, k] and x2 as [b, k, n] (after ``perm_x2``), both float8 of one kind."""
    x1, x2 = call.x1, call.x2
    for name, tensor, code in (("x1", x1, call.x1_dtype), ("x2", x2, call.x2_dtype)):
        require_dtype(name, tensor, FP8_DTYPES, "(the hifloat8 T-C mode is not implemented)")
        if code is not None and dtype_of_code(code) != tensor.dtype:
            raise OpArgumentError(f"{name}_dtype={code} differs from {name}'s {tensor.dtype}")
        if tensor.dim() != 3:
            raise OpArgumentError(f"{name} has shape {list(tensor.shape)}; the op takes 3-D tensors only")
    lhs = x1.permute(1, 0, 2)
    rhs = x2.permute(*_perm(call.perm_x2, PERM_X2[0]))
    if lhs.shape[0] != rhs.shape[0] or lhs.shape[2] != rhs.shape[1]:
        raise OpArgumentError(f"x1 {list(x1.shape)} and x2 {list(x2.shape)} must be (m, b, k) and (b, k, n), or "
                              "(b, n, k) with perm_x2=[0, 2, 1]")
    return lhs, rhs


def _is_mx(call: Arguments) -> bool:
    return call.x1_scale is not None and call.x1_scale.dim() == 4


def _check_tqbmm_scales(call: Arguments, lhs: torch.Tensor, rhs: torch.Tensor) -> None:
    batch, m, k = lhs.shape
    n = rhs.shape[2]
    if call.x1_scale is None or call.x2_scale is None:
        raise OpArgumentError("x1_scale and x2_scale are required (K-C: float32 (m,) and (n,); mx: float8_e8m0fnu)")
    if _is_mx(call):
        if call.x1.dtype != torch.float8_e4m3fn or call.x2.dtype != torch.float8_e4m3fn or k % (2 * MX_BLOCK):
            raise OpArgumentError("the mx mode takes float8_e4m3fn x1 and x2 with k a multiple of 64")
        x2_shape = (batch, k // 64, n, 2) if _perm(call.perm_x2, PERM_X2[0]) == PERM_X2[0] else (batch, n, k // 64, 2)
        for name, scale, shape in (("x1_scale", call.x1_scale, (m, batch, k // 64, 2)), ("x2_scale", call.x2_scale,
                                                                                          x2_shape)):
            require_dtype(name, scale, (torch.float8_e8m0fnu,), "(the mx mode)")
            require_shape(name, scale, (shape,))
        return
    for name, scale, size in (("x1_scale", call.x1_scale, m), ("x2_scale", call.x2_scale, n)):
        require_dtype(name, scale, (torch.float32,), "(the K-C mode; int64 scales are not implemented)")
        require_shape(name, scale, ((size,),))


def _tqbmm_out_dtype(call: Arguments) -> torch.dtype:
    dtype = dtype_of_code(call.dtype)
    if dtype not in TQBMM_OUT_DTYPES:
        raise OpArgumentError(f"dtype={call.dtype} is not implemented; expected torch.float16 or torch.bfloat16 "
                              "(a hifloat8 output has no torch dtype)")
    return dtype


def _tqbmm_meta(call: Arguments) -> Out:
    lhs, rhs = _tqbmm_operands(call)
    _check_tqbmm_scales(call, lhs, rhs)
    return Out([lhs.shape[1], lhs.shape[0], rhs.shape[2]], _tqbmm_out_dtype(call))


def _mx_factors(scale: torch.Tensor) -> torch.Tensor:
    """An mx scale [..., k / 64, 2] (powers of two) as one float32 factor per 32 values of k: [..., k / 32]."""
    return scale.to(torch.float32).flatten(-2)


def _tqbmm_kernel(call: Arguments) -> torch.Tensor:
    lhs, rhs = (t.to(torch.float32) for t in _tqbmm_operands(call))
    if _is_mx(call):
        lhs = lhs * _mx_factors(call.x1_scale).permute(1, 0, 2).repeat_interleave(MX_BLOCK, dim=-1)
        if _perm(call.perm_x2, PERM_X2[0]) == PERM_X2[0]:  # (b, k / 64, n, 2) -> [b, k / 32, n]
            x2_factors = call.x2_scale.to(torch.float32).permute(0, 1, 3, 2).flatten(1, 2)
        else:  # (b, n, k / 64, 2) -> [b, n, k / 32] -> [b, k / 32, n]
            x2_factors = _mx_factors(call.x2_scale).transpose(1, 2)
        product = cube_matmul(lhs, rhs * x2_factors.repeat_interleave(MX_BLOCK, dim=1))
    else:
        product = cube_matmul(lhs, rhs) * call.x2_scale * call.x1_scale.reshape(1, -1, 1)
    return product.to(_tqbmm_out_dtype(call)).transpose(0, 1).contiguous()


def _tqbmm_samples() -> list[SampleCall]:
    """The page's K-C example at a small size (x1 (m, b, k), x2 (b, k, n), per-row and per-column float32
    scales) and the mx mode with x2 given (b, n, k)."""
    gen = torch.Generator().manual_seed(0)
    x1 = torch.randint(-5, 5, (4, 2, 64), generator=gen).to(torch.float8_e4m3fn)
    x2 = torch.randint(-5, 5, (2, 64, 8), generator=gen).to(torch.float8_e4m3fn)
    perms = {"perm_x1": [1, 0, 2], "perm_y": [1, 0, 2]}
    x1_mx = (2.0 ** torch.randint(-2, 3, (4, 2, 1, 2), generator=gen)).to(torch.float8_e8m0fnu)
    x2_mx = (2.0 ** torch.randint(-2, 3, (2, 8, 1, 2), generator=gen)).to(torch.float8_e8m0fnu)
    return [
        SampleCall((x1, x2, torch.float16), {"x1_scale": torch.rand(4, generator=gen),
                                             "x2_scale": torch.rand(8, generator=gen), "perm_x2": [0, 1, 2], **perms}),
        SampleCall((x1, x2.transpose(1, 2).contiguous(), torch.bfloat16),
                   {"x1_scale": x1_mx, "x2_scale": x2_mx, "group_sizes": [0, 0, 32], "perm_x2": [0, 2, 1], **perms}),
    ]


@npu_op(meta=_tqbmm_meta, kernel=_tqbmm_kernel, unmodeled=("bias",),
        argument_checks={"dtype": require_dtype_code}, samples=_tqbmm_samples)
def npu_transpose_quant_batchmatmul(call: Arguments) -> None:
    """FP8 batched matmul with dequantisation and transposes: ``out = ((x1^T1 @ x2^T2) * x2_scale * x1_scale)^Ty``.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_transpose_quant_batchmatmul.md (formula,
    shapes, the K-C, mx and T-C modes; Ascend 950).

    * ``x1`` (m, b, k) with ``perm_x1=[1, 0, 2]``; ``x2`` (b, k, n) (``perm_x2=[0, 1, 2]``) or (b, n, k)
      (``[0, 2, 1]``); ``perm_y=[1, 0, 2]``: the output is (m, b, n) in ``dtype`` (float16 or bfloat16).
    * K-C mode: float8_e4m3fn/e5m2 operands, float32 ``x1_scale`` (m,) and ``x2_scale`` (n,): the fp32
      product scaled per column, then per row.
    * mx mode: float8_e4m3fn operands, float8_e8m0fnu ``x1_scale`` (m, b, k/64, 2) and ``x2_scale``
      (b, k/64, n, 2) (or (b, n, k/64, 2) with ``perm_x2=[0, 2, 1]``): one power-of-two scale per 32
      values of k (``group_sizes`` [g_m, g_n, 32]); each operand is scaled in float32 (exactly) before the
      product. The page's k = 512 / n = 128 limit of the K-C mode is a kernel limit, not checked.
    * The product is the Cube's (fp32 accumulation, :func:`~pytest_npufuse.numerics.exact.cube_matmul`),
      rounded once to ``dtype``.

    Refused: ``bias`` (the page: not supported yet), the hifloat8 T-C mode and output (torch has no hifloat8
    dtype), int64 scales, ``batch_split_factor`` other than 1.
    """
    for name, value, allowed in (("perm_x1", call.perm_x1, ((1, 0, 2),)), ("perm_x2", call.perm_x2, PERM_X2),
                                 ("perm_y", call.perm_y, PERM_Y)):
        require_choice(name, _perm(value, allowed[0]), allowed, "the documented permutations")
    require_choice("batch_split_factor", call.batch_split_factor, (1, None), "the only supported value")
    if call.group_sizes is not None:
        require_choice("group_sizes", tuple(call.group_sizes), MX_GROUP_SIZES, "the mx mode's groups")


# ---------------------------------------------------------------------------------------------
# npu_mm_reduce_scatter_base (MatmulReduceScatter)
# ---------------------------------------------------------------------------------------------

MM_REDUCE_SCATTER_MODES = ("ai_cpu", "aiv")


def _quantised(call: Arguments) -> bool:
    return call.input.dtype == torch.int8


def _mm_reduce_scatter_out_dtype(call: Arguments) -> torch.dtype:
    """x1's dtype; int8 x1: float16 with an int64 x2_scale, else output_dtype (bfloat16 by default)."""
    if not _quantised(call):
        return call.input.dtype
    if call.x2_scale.dtype == torch.int64:
        return torch.float16
    return call.output_dtype or torch.bfloat16


def _mm_reduce_scatter_meta(call: Arguments) -> Out:
    x1, x2, world = call.input, call.x2, call.world_size
    require_dtype("input", x1, (*HALF_DTYPES, torch.int8))
    require_dtype("x2", x2, (x1.dtype,), "(input's dtype)")
    if x1.dim() != 2 or x2.dim() != 2 or x1.shape[1] != x2.shape[0]:
        raise OpArgumentError(f"input {list(x1.shape)} and x2 {list(x2.shape)} must be [m, k] and [k, n]")
    m, n = x1.shape[0], x2.shape[1]
    if m % world:
        raise OpArgumentError(f"input's m={m} must be divisible by world_size={world}")
    if call.bias is not None:
        require_dtype("bias", call.bias, HALF_DTYPES if _quantised(call) else (x1.dtype,))
        require_shape("bias", call.bias, ((n,),))
    if _quantised(call):
        if call.x2_scale is None or call.comm_mode != "aiv":
            raise OpArgumentError("an int8 input is the quantised mode: it needs x2_scale and comm_mode='aiv'")
        require_dtype("x2_scale", call.x2_scale, (torch.float32, torch.int64))
        require_shape("x2_scale", call.x2_scale, ((1, n),))
        if call.x1_scale is not None:
            require_dtype("x1_scale", call.x1_scale, (torch.float32,))
            require_shape("x1_scale", call.x1_scale, ((m, 1),))
    elif call.x1_scale is not None or call.x2_scale is not None:
        raise OpArgumentError("x1_scale and x2_scale belong to the quantised mode (an int8 input)")
    out_dtype = _mm_reduce_scatter_out_dtype(call)
    if call.output_dtype is not None and (not _quantised(call) or call.x2_scale.dtype != torch.float32
                                          or out_dtype not in HALF_DTYPES):
        raise OpArgumentError("output_dtype (float16 or bfloat16) is only for the quantised mode with float32 scales")
    return Out([m // world, n], out_dtype)


def _mm_reduce_scatter_kernel(call: Arguments) -> torch.Tensor:
    """This die's rows of the product: rank 0's ``m / world_size`` rows (the other ranks' partial products
    are not simulated, as in :func:`npu_mm_all_reduce_base`)."""
    x1, x2 = call.input, call.x2
    rows = x1.shape[0] // call.world_size
    bias = None if call.bias is None else call.bias.to(torch.float32)
    if not _quantised(call):
        addend = torch.zeros(x2.shape[1]) if bias is None else bias
        return cube_addmm(addend.expand(rows, -1), x1[:rows], x2, out_dtype=x1.dtype)
    values = int_matmul(x1[:rows], x2).to(torch.float32)
    if bias is not None:
        values = values + bias
    scale = call.x2_scale
    values = values * (decode_quant_param(scale)[0] if scale.dtype == torch.int64 else scale)
    if call.x1_scale is not None:
        values = values * call.x1_scale[:rows]
    return values.to(_mm_reduce_scatter_out_dtype(call))


def _mm_reduce_scatter_samples() -> list[SampleCall]:
    """A bfloat16 [8, 64] x [64, 16] over a world of 4 (2 rows each), and the int8 per-token x per-channel
    mode to float16."""
    gen = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(8, 64, generator=gen).bfloat16(), torch.randn(64, 16, generator=gen).bfloat16()
    q1 = torch.randint(-8, 8, (8, 64), dtype=torch.int8, generator=gen)
    q2 = torch.randint(-8, 8, (64, 16), dtype=torch.int8, generator=gen)
    scales = {"x1_scale": torch.rand(8, 1, generator=gen), "x2_scale": torch.rand(1, 16, generator=gen) / 64}
    return [
        SampleCall((x1, x2, "hcom_tp", 4)),
        SampleCall((q1, q2, "hcom_tp", 2), {**scales, "output_dtype": torch.float16, "comm_mode": "aiv"}),
    ]


@npu_op(
    meta=_mm_reduce_scatter_meta,
    kernel=_mm_reduce_scatter_kernel,
    argument_checks={"hcom": comm_domain_name("communication domain")},
    samples=_mm_reduce_scatter_samples,
)
def npu_mm_reduce_scatter_base(call: Arguments) -> None:
    """MatmulReduceScatter (tensor parallelism): ``reducescatter(input @ x2 + bias)`` over ``hcom``, each of
    ``world_size`` ranks keeping ``m / world_size`` rows; in the quantised mode
    ``reducescatter((x1_scale * x2_scale) * (input @ x2 + bias))``.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_mm_reduce_scatter_base.md (formulas, shapes,
    dtypes, output dtype rules). The numbers are those of **one rank**, rank 0: the reduce-scatter of the
    other ranks' partial products is not simulated, so the result is rank 0's rows of this rank's product.
    The op catalog prices the whole matmul and the ring ReduceScatter of the product on the profile's link
    for ``[comm] ranks`` dies (cost rule ``matmul_reduce_scatter``).

    * ``input`` float16/bfloat16 ``[m, k]`` (m divisible by ``world_size``), ``x2`` ``[k, n]`` in its dtype,
      ``bias`` ``[n]``: the Cube's product with the bias added in float32 before one rounding.
    * Quantised mode (``comm_mode="aiv"``, int8 ``input`` and ``x2``): ``x2_scale`` ``(1, n)`` float32, or
      int64 from npu_trans_quant_param (decoded; output float16); optional per-token ``x1_scale`` ``(m, 1)``;
      with float32 scales the output is ``output_dtype`` (bfloat16 by default). The int32 accumulation is
      exact; bias and scales apply in float32, then one rounding.

    Refused: ``reduce_op`` other than ``"sum"``, ``comm_turn`` other than 0 (the only documented values).
    """
    require_choice("reduce_op", call.reduce_op, ("sum",), "the only documented reduce operation")
    require_choice("comm_turn", call.comm_turn, (0,), "the only supported split")
    if call.comm_mode is not None:
        require_choice("comm_mode", call.comm_mode, MM_REDUCE_SCATTER_MODES, "the communication modes")
    if call.world_size < 1:
        raise OpArgumentError(f"world_size={call.world_size} must be >= 1, the ranks of the communication domain")


# ---------------------------------------------------------------------------------------------
# npu_all_gather_base_mm (AllGatherMatmul)
# ---------------------------------------------------------------------------------------------

ALL_GATHER_MM_MODES = ("ai_cpu", "aiv")  # the page's comm_mode values


def _all_gather_mm_meta(call: Arguments) -> tuple[Out, Out]:
    """output ``[world_size x m, n]`` in input's dtype, gather_out ``[world_size x m, k]`` (``[0]`` without
    gather_output), as op-plugin's meta function sizes them for ``gather_index=0``."""
    x1, x2, world = call.input, call.x2, call.world_size
    require_dtype("input", x1, HALF_DTYPES, "(the int8 quantised mode is not implemented)")
    require_dtype("x2", x2, (x1.dtype,), "(input's dtype)")
    if x1.dim() != 2 or x2.dim() != 2 or x1.shape[1] != x2.shape[0]:
        raise OpArgumentError(f"input {list(x1.shape)} and x2 {list(x2.shape)} must be [m, k] and [k, n]",
                              argument="input")
    if call.bias is not None:
        require_dtype("bias", call.bias, (x1.dtype,), "(input's dtype)")
        require_shape("bias", call.bias, ((x2.shape[1],),))
    rows = world * x1.shape[0]
    gathered = [rows, x1.shape[1]] if call.gather_output else [0]
    return Out([rows, x2.shape[1]], x1.dtype), Out(gathered, x1.dtype)


def _gathered_rows(call: Arguments) -> torch.Tensor:
    """``allgather(input)`` in rank order: every rank's rows when ``hcom`` names an ``"hccl"`` group of
    ``world_size`` ranks; otherwise this rank's rows first and zeros for the ranks not simulated (as the
    experts of other ranks add 0 in npu_moe_distribute_dispatch)."""
    x1, world = call.input, call.world_size
    domain = comm_domain(call.hcom)
    if domain is not None and domain.size > 1:
        if domain.size != world:
            raise OpArgumentError(f"world_size={world} but the communication domain {call.hcom!r} has "
                                  f"{domain.size} ranks", argument="world_size")
        return torch.cat(all_gather_rows(domain, x1.contiguous(), "torch_npu.npu_all_gather_base_mm"))
    rows = x1.new_zeros(world * x1.shape[0], x1.shape[1])
    rows[: x1.shape[0]] = x1
    return rows


def _all_gather_mm_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    gathered, x2 = _gathered_rows(call), call.x2
    addend = torch.zeros(x2.shape[1]) if call.bias is None else call.bias.to(torch.float32)
    out = cube_addmm(addend.expand(gathered.shape[0], -1), gathered, x2, out_dtype=call.input.dtype)
    return out, gathered if call.gather_output else gathered.new_empty(0)


def _all_gather_mm_samples() -> list[SampleCall]:
    """A bfloat16 [4, 64] x [64, 16] over a world of 2 with the gathered input returned, and one rank of a
    float16 world of 1 without it."""
    gen = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(4, 64, generator=gen).bfloat16(), torch.randn(64, 16, generator=gen).bfloat16()
    h1, h2 = torch.randn(3, 32, generator=gen).half(), torch.randn(32, 8, generator=gen).half()
    return [SampleCall((x1, x2, "hcom_tp", 2)), SampleCall((h1, h2, "hcom", 1), {"gather_output": False})]


@npu_op(
    meta=_all_gather_mm_meta,
    kernel=_all_gather_mm_kernel,
    unmodeled=("x1_scale", "x2_scale", "output_dtype"),
    argument_checks={"hcom": comm_domain_name("communication domain")},
    samples=_all_gather_mm_samples,
)
def npu_all_gather_base_mm(call: Arguments) -> None:
    """AllGatherMatmul (tensor parallelism): ``output = allgather(input) @ x2 + bias`` and ``gather_out =
    allgather(input)`` over ``hcom``'s ``world_size`` ranks, in rank order.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_all_gather_base_mm.md (formulas, shapes,
    dtypes) and its meta function (output shapes; ``gather_output=False`` returns an empty gather_out).
    When ``hcom`` names an ``"hccl"`` process group of several ranks, the rows are every rank's; otherwise
    the numbers are those of rank 0 with the other ranks' rows not simulated (zeros), as the MC2 MoE ops
    model other ranks. The op catalog prices the whole gathered matmul and a one-pass ring AllGather of
    ``input`` on the profile's link (cost rule ``matmul_all_gather``).

    * ``input`` float16/bfloat16 ``[m, k]``, ``x2`` ``[k, n]`` in its dtype (a transposed view is fine),
      ``bias`` ``[n]`` in its dtype (the page's formula; it notes the device takes no non-zero bias yet):
      fp32 products and accumulation, the bias added in float32 before one rounding.

    Refused by name: the int8 quantised mode (``x1_scale``, ``x2_scale``, ``output_dtype``),
    ``gather_index`` other than 0 and ``comm_turn`` other than 0 (the page: the only supported values).
    """
    require_choice("gather_index", call.gather_index, (0,), "the page: only 0, gathering input, is supported")
    require_choice("comm_turn", call.comm_turn, (0,), "the only supported split")
    if call.comm_mode is not None:
        require_choice("comm_mode", call.comm_mode, ALL_GATHER_MM_MODES, "the communication modes")
    if call.world_size < 1:
        raise OpArgumentError(f"world_size={call.world_size} must be >= 1, the ranks of the communication domain",
                              argument="world_size")
