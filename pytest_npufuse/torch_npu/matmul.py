"""Matmul ops: the fused matmul + all-reduce of tensor parallelism and the transposing batched matmul of MLA.

Both multiply through :mod:`pytest_npufuse.numerics.exact` (the Cube: fp32 products and accumulation, one rounding).
``npu_mm_all_reduce_base`` computes the numbers of a tensor-parallel world of one rank (its all-reduce is
the identity on one rank); the op catalog prices its all-reduce on the profile's communication link for
the configured world (``[comm] ranks``), so a larger world costs more, as on the device.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..errors import OpArgumentError
from ..numerics.exact import cube_addmm, cube_matmul
from .checks import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    comm_domain_name,
    require_choice,
    require_dtype,
    require_shape,
)
from .quant import antiquant_param_shapes, antiquant_weight
from .registry import Arguments, Derivative, Out, SampleCall, npu_op


# ---------------------------------------------------------------------------------------------
# npu_mm_all_reduce_base (MatmulAllReduce)
# ---------------------------------------------------------------------------------------------

MM_ALL_REDUCE_UNMODELED = (
    "dequant_scale", "pertoken_scale", "comm_quant_scale_1", "comm_quant_scale_2", "group_sizes", "y_dtype",
    "x1_dtype", "x2_dtype", "dequant_scale_dtype", "pertoken_scale_dtype", "comm_mode",
)


def _mm_all_reduce_meta(call: Arguments) -> Out:
    """Shapes and dtypes of the non-quantised and weight-only-quantised (antiquant) rows of the page."""
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
    out = cube_addmm(addend.expand(rows.shape[0], -1), rows, x2, out_dtype=x1.dtype)
    return out.reshape(*x1.shape[:-1], x2.shape[1])


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

    Source: torch_npu.npu_mm_all_reduce_base (op-plugin API page: formula, dtype tables, shapes). The
    numbers are those of **one rank**: the all-reduce of a one-rank world is the identity, so the result is
    this rank's product; the other ranks' partial products are not simulated. The op catalog prices the
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
