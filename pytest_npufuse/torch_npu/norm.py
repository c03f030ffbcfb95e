"""Normalisation ops: RMSNorm, its fused add and add-quantise variants, inference LayerNorm."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from ..errors import OpArgumentError
from .checks import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    INT8_SCALAR_TYPE,
    dtype_of_code,
    require_choice,
    require_dtype,
    require_scalar_type_number,
    require_shape,
    require_trailing,
)
from .fixedorder import pairwise_sum, round_to_int8
from .quant import DYNAMIC_QUANT_MAX, INT4_MAX, INT4_PER_INT32, symmetric_levels
from .quant import _pack_int4 as pack_int4
from .registry import Arguments, Derivative, Out, SampleCall, npu_op



def _rstd_shape(x: torch.Tensor, norm_dims: int) -> list[int]:
    """``x.shape`` with the normalised (trailing) dims kept as 1, the shape of a norm's rstd output."""
    return [*x.shape[: x.dim() - norm_dims], *([1] * norm_dims)]


def _rstd(values: torch.Tensor, norm_dims: int, epsilon: float) -> torch.Tensor:
    """float32 ``1 / sqrt(mean(values**2) + epsilon)`` over the trailing dims, a fixed pairwise sum."""
    shape = _rstd_shape(values, norm_dims)
    rows = values.reshape(math.prod(shape), -1)
    mean_square = pairwise_sum(rows * rows, dim=-1) / rows.shape[-1]
    return (1.0 / torch.sqrt(mean_square + epsilon)).reshape(shape)


def _rms_norm_samples() -> list[SampleCall]:
    """A bfloat16 hidden state with float32 gamma, and a norm over the two trailing dims."""
    gen = torch.Generator().manual_seed(0)
    return [
        SampleCall((torch.randn(2, 3, 16, generator=gen).bfloat16(), torch.rand(16, generator=gen) + 0.5)),
        SampleCall((torch.randn(3, 4, 8, generator=gen), torch.rand(4, 8, generator=gen) + 0.5, 1e-5)),
    ]


def _rms_norm_backward_samples() -> list[SampleCall]:
    """The backward of each :func:`_rms_norm_samples` call, with its forward's rstd."""
    gen = torch.Generator().manual_seed(1)
    calls = []
    for sample in _rms_norm_samples():
        x, gamma = sample.args[:2]
        rstd = torch.ops.npu.npu_rms_norm(*sample.args)[1]
        calls.append(SampleCall((torch.randn(x.shape, generator=gen).to(x.dtype), x, gamma, rstd)))
    return calls


def _rms_norm_meta(call: Arguments) -> tuple[Out, Out]:
    """Validate the npu_rms_norm tensors: y like x, rstd float32 with the normalised dims kept as 1."""
    x, gamma = call.input, call.gamma
    require_dtype("input", x, FLOAT_DTYPES)
    require_dtype("gamma", gamma, (x.dtype, torch.float32), "(input's dtype or float32)")
    require_trailing("gamma", gamma, "input", x)
    return Out(list(x.shape), x.dtype), Out(_rstd_shape(x, gamma.dim()), torch.float32)


def _rms_norm_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    values = call.input.to(torch.float32)
    rstd = _rstd(values, call.gamma.dim(), call.epsilon)
    y = values * rstd * call.gamma.to(torch.float32)
    return y.to(call.input.dtype), rstd


def _rms_norm_backward_meta(call: Arguments) -> tuple[Out, Out]:
    """dx like x, dgamma like gamma (op-plugin's meta function); dy is x's gradient, rstd the forward's."""
    dy, x, gamma, rstd = call.dy, call.input, call.gamma, call.rstd
    require_dtype("input", x, FLOAT_DTYPES)
    require_dtype("dy", dy, (x.dtype,), "(input's dtype)")
    require_shape("dy", dy, (tuple(x.shape),))
    require_trailing("gamma", gamma, "input", x)
    require_dtype("rstd", rstd, (torch.float32,))
    require_shape("rstd", rstd, (tuple(_rstd_shape(x, gamma.dim())),))
    return Out(list(x.shape), x.dtype), Out(list(gamma.shape), gamma.dtype)


def _rms_norm_backward_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """With ``g = dy * gamma`` over the n normalised elements of a row:
    ``dx = rstd * g - x * rstd**3 * sum(g * x) / n`` and ``dgamma = sum over rows of dy * x * rstd``,
    float32 with fixed pairwise sums, each rounded once to its output's dtype."""
    dy, x, gamma, rstd = call.dy, call.input, call.gamma, call.rstd
    rows = math.prod(rstd.shape)
    values, grads = x.to(torch.float32).reshape(rows, -1), dy.to(torch.float32).reshape(rows, -1)
    scale = rstd.reshape(rows, 1)
    weighted = grads * gamma.to(torch.float32).reshape(1, -1)
    dot = pairwise_sum(weighted * values, dim=-1, keepdim=True) / values.shape[-1]
    dx = scale * weighted - values * scale.pow(3) * dot
    dgamma = pairwise_sum(grads * values * scale, dim=0)
    return dx.reshape(x.shape).to(x.dtype), dgamma.reshape(gamma.shape).to(gamma.dtype)


@npu_op(meta=_rms_norm_backward_meta, kernel=_rms_norm_backward_kernel, samples=_rms_norm_backward_samples)
def npu_rms_norm_backward(call: Arguments) -> None:
    """RmsNormGrad: the gradients of :func:`npu_rms_norm`'s ``x`` and ``gamma`` from ``y``'s gradient
    ``dy`` and the forward's ``rstd``; returns ``(dx, dgamma)``. torch_npu's schema
    ``npu_rms_norm_backward(Tensor dy, Tensor self, Tensor gamma, Tensor rstd) -> (Tensor, Tensor)``."""


def _rms_norm_setup(ctx: object, call: Arguments, output: tuple) -> None:
    ctx.save_for_backward(call.input, call.gamma, output[1])


def _rms_norm_backward(ctx: object, dy: torch.Tensor, _drstd: torch.Tensor) -> tuple:
    """op-plugin's formula: only ``y``'s gradient flows back (rstd is an intermediate)."""
    x, gamma, rstd = ctx.saved_tensors
    dx, dgamma = torch.ops.npu.npu_rms_norm_backward(dy, x, gamma, rstd)
    return dx, dgamma, None


@npu_op(
    meta=_rms_norm_meta,
    kernel=_rms_norm_kernel,
    derivative=Derivative(_rms_norm_setup, _rms_norm_backward),
    samples=_rms_norm_samples,
)
def npu_rms_norm(call: Arguments) -> None:
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


# ---------------------------------------------------------------------------------------------
# npu_add_rms_norm
# ---------------------------------------------------------------------------------------------


def _add_norm_inputs(gen: torch.Generator, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x1, x2 ([2, 3, 16], ``dtype``) and a float32 gamma, the residual stream of a fused add-norm."""
    return (torch.randn(2, 3, 16, generator=gen).to(dtype), torch.randn(2, 3, 16, generator=gen).to(dtype),
            torch.rand(16, generator=gen) + 0.5)


def _add_rms_norm_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(0)
    return [
        SampleCall(_add_norm_inputs(gen, torch.bfloat16)),
        SampleCall((*_add_norm_inputs(gen, torch.float32), 1e-5)),
    ]


def _add_rms_norm_meta(call: Arguments) -> tuple[Out, Out, Out]:
    """y and x like x1, rstd float32 with the normalised dims kept as 1."""
    x1, x2, gamma = call.x1, call.x2, call.gamma
    require_dtype("x1", x1, FLOAT_DTYPES)
    require_dtype("x2", x2, (x1.dtype,), "(x2 must have x1's dtype)")
    if x2.shape != x1.shape:
        raise OpArgumentError(
            f"x2 has shape {list(x2.shape)}; it must equal x1's shape {list(x1.shape)}", argument="x2"
        )
    require_dtype("gamma", gamma, (x1.dtype, torch.float32), "(x1's dtype or float32)")
    require_trailing("gamma", gamma, "x1", x1)
    like_x = Out(list(x1.shape), x1.dtype)
    return like_x, Out(_rstd_shape(x1, gamma.dim()), torch.float32), like_x


def _residual_sum(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """``x1 + x2`` rounded once to their dtype: the residual stream the fused norm writes back."""
    return (x1.to(torch.float32) + x2.to(torch.float32)).to(x1.dtype)


def rms_normalise(x: torch.Tensor, gamma: torch.Tensor, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``(x * rstd * gamma, rstd)`` over gamma's trailing dims."""
    values = x.to(torch.float32)
    rstd = _rstd(values, gamma.dim(), epsilon)
    return values * rstd * gamma.to(torch.float32), rstd


def _add_rms_norm_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = _residual_sum(call.x1, call.x2)
    y, rstd = rms_normalise(x, call.gamma, call.epsilon)
    return y.to(call.x1.dtype), rstd, x


@npu_op(meta=_add_rms_norm_meta, kernel=_add_rms_norm_kernel, samples=_add_rms_norm_samples)
def npu_add_rms_norm(call: Arguments) -> None:
    """Residual add fused with RMSNorm: returns ``(y, rstd, x)`` with ``x = x1 + x2``.

    Sources: torch_npu.npu_add_rms_norm (op-plugin docs/context/torch_npu-npu_add_rms_norm.md;
    schema ``npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) ->
    (Tensor, Tensor, Tensor)``) and the AddRmsNorm formulas of hicann/ops-nn (norm/add_rms_norm):
    ``x = x1 + x2``, ``rstd = 1 / sqrt(mean(x**2) + epsilon)``, ``y = x * rstd * gamma``.

    * ``x1``/``x2``: same shape and dtype (float16, bfloat16, float32); ``gamma`` the trailing
      dims of x1 (usually ``[H]``) in x1's dtype or float32.
    * ``x`` is returned in x1's dtype (the residual stream for the next layer) and the norm is
      computed from that rounded ``x``, as the device reads back what it stores; ``rstd`` is
      float32 with the normalised dims kept as 1; ``y`` is cast once to x1's dtype.
    * float32 math, a fixed pairwise mean of squares, so the bits do not depend on threads.
    """


def _add_rms_norm_cast_meta(call: Arguments) -> tuple[Out, Out, Out, Out]:
    """y1 float32 and y2 in x1's dtype like x1, rstd float32 (op-plugin's meta function), x like x1."""
    y, rstd, x = _add_rms_norm_meta(call)
    return Out(list(y.shape), torch.float32), y, rstd, x


def _add_rms_norm_cast_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    x = _residual_sum(call.x1, call.x2)
    y, rstd = rms_normalise(x, call.gamma, call.epsilon)
    return y, y.to(call.x1.dtype, copy=True), rstd, x  # a float32 x1: two tensors, not one


@npu_op(meta=_add_rms_norm_cast_meta, kernel=_add_rms_norm_cast_kernel, samples=_add_rms_norm_samples)
def npu_add_rms_norm_cast(call: Arguments) -> None:
    """:func:`npu_add_rms_norm` that also returns the normalised values in float32: ``(y1, y2, rstd, x)``,
    ``y1`` float32, ``y2`` the same values cast once to x1's dtype (the float32 copy feeds a float32 router
    or lm head without a second cast; cann-recipes-infer's DeepSeek / Kimi decoders).

    Source: op-plugin op_plugin_functions.yaml (``npu_add_rms_norm_cast(Tensor x1, Tensor x2, Tensor gamma,
    float epsilon=1e-06) -> (Tensor, Tensor, Tensor, Tensor)``), its meta function (output dtypes) and
    test/test_custom_ops/test_npu_add_rms_norm_cast.py (golden: ``x = x1 + x2`` in x1's dtype, the norm
    in float32 from it, ``y2 = y1`` cast to x1's dtype). Math as npu_add_rms_norm's.
    """



# ---------------------------------------------------------------------------------------------
# npu_add_rms_norm_quant
# ---------------------------------------------------------------------------------------------

QUANT_PARAM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ZERO_POINT_DTYPES = (torch.int32, torch.float32, torch.bfloat16, torch.float16)


def _check_quant_params(name: str, param: Optional[torch.Tensor], gamma: torch.Tensor, dtypes: Sequence[torch.dtype]) -> None:
    """A quantisation scale or zero point: per channel (gamma's shape) or one value."""
    if param is None:
        return
    require_dtype(name, param, dtypes)
    if tuple(param.shape) not in (tuple(gamma.shape), (1,)):
        raise OpArgumentError(
            f"{name} has shape {list(param.shape)}; expected gamma's shape {list(gamma.shape)} or [1]", argument=name
        )


def _add_rms_norm_quant_meta(call: Arguments) -> tuple[Out, Out, Out]:
    """y1 and y2 int8 like x1, x like x1."""
    x1, gamma, beta = call.x1, call.gamma, call.beta
    _add_rms_norm_meta(call)
    _check_quant_params("scales1", call.scales1, gamma, QUANT_PARAM_DTYPES)
    _check_quant_params("scales2", call.scales2, gamma, QUANT_PARAM_DTYPES)
    _check_quant_params("zero_points1", call.zero_points1, gamma, ZERO_POINT_DTYPES)
    _check_quant_params("zero_points2", call.zero_points2, gamma, ZERO_POINT_DTYPES)
    if beta is not None:
        require_dtype("beta", beta, (x1.dtype, torch.float32), "(x1's dtype or float32)")
        require_shape("beta", beta, (tuple(gamma.shape),))
    if call.zero_points2 is not None and call.scales2 is None:
        raise OpArgumentError(
            "zero_points2 needs scales2 (it belongs to the second quantised output)", argument="zero_points2"
        )
    quantised = Out(list(x1.shape), torch.int8)
    return quantised, quantised, Out(list(x1.shape), x1.dtype)


def _add_rms_norm_quant_samples() -> list[SampleCall]:
    """Per-channel scales with int32 zero points and a second bfloat16 scale; one scalar scale with beta."""
    gen = torch.Generator().manual_seed(0)
    x1, x2, gamma = _add_norm_inputs(gen, torch.bfloat16)
    scales = torch.rand(16, generator=gen) * 0.05 + 0.01
    zero_points = torch.randint(-5, 5, (16,), dtype=torch.int32, generator=gen)
    return [
        SampleCall((x1, x2, gamma, scales, zero_points, scales.bfloat16())),
        SampleCall((x1, x2, gamma, torch.tensor([0.02])), {"beta": torch.randn(16, generator=gen)}),
    ]


def _quantise(y: torch.Tensor, scales: torch.Tensor, zero_points: Optional[torch.Tensor], div_mode: bool) -> torch.Tensor:
    """``round(y / scales + zero_points)`` (``y * scales`` when not div_mode), saturated to int8."""
    scale = scales.to(torch.float32)
    values = y / scale if div_mode else y * scale
    if zero_points is not None:
        values = values + zero_points.to(torch.float32)
    return round_to_int8(values)


def _add_rms_norm_quant_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = _residual_sum(call.x1, call.x2)
    y, _ = rms_normalise(x, call.gamma, call.epsilon)
    if call.beta is not None:
        y = y + call.beta.to(torch.float32)
    y1 = _quantise(y, call.scales1, call.zero_points1, call.div_mode)
    y2 = torch.zeros_like(y1) if call.scales2 is None else _quantise(y, call.scales2, call.zero_points2, call.div_mode)
    return y1, y2, x


@npu_op(meta=_add_rms_norm_quant_meta, kernel=_add_rms_norm_quant_kernel, samples=_add_rms_norm_quant_samples)
def npu_add_rms_norm_quant(call: Arguments) -> None:
    """Residual add, RMSNorm and static int8 quantisation in one kernel: returns ``(y1, y2, x)``.

    Sources: the AddRmsNormQuant formulas (hicann/ops-nn norm/add_rms_norm_quant/README.md and
    aclnnAddRmsNormQuantV2) and op-plugin's add_rms_norm_quant kernel (outputs y1, y2 int8 like
    x1, x like x1):

    * ``x = x1 + x2`` (returned in x1's dtype), ``y = x / Rms(x) * gamma [+ beta]`` in float32 with
      ``Rms(x) = sqrt(mean(x**2) + epsilon)``, computed from the rounded ``x`` as in
      :func:`npu_add_rms_norm`; ``beta`` (gamma's shape) is AddRmsNormQuantV2's bias, passed by
      keyword as vllm-ascend does (``beta=bias``; its position in torch_npu's signature is not
      documented, so it is last here);
    * ``div_mode=True``: ``y1 = round(y / scales1 + zero_points1)``; ``False``:
      ``round(y * scales1 + zero_points1)``; the same with scales2/zero_points2 for ``y2``.
      Rounding is half-to-even, saturated to int8 (the convention of the CANN golden models).
    * scales are float32/bfloat16/float16 and zero points int32/float32/bfloat16/float16, per
      channel (gamma's shape) or one value.  Without ``scales2``, ``y2`` is zeros (the device
      leaves it unspecified).  ``axis`` is accepted as in torch_npu (only -1 is documented).
    """
    if call.axis != -1:
        raise OpArgumentError(
            f"axis={call.axis} is not implemented; torch_npu documents only -1 (the last dim)", argument="axis"
        )


# ---------------------------------------------------------------------------------------------
# npu_add_rms_norm_dynamic_quant
# ---------------------------------------------------------------------------------------------


def _dynamic_quant_outputs(call: Arguments) -> tuple[bool, bool]:
    """Which of the two quantised outputs (y1/scale1, y2/scale2) the call computes (the API page and its meta
    function): without output_mask y1 always, y2 when both smooth scales are given; with one, as it says,
    not both False, and each smooth scale needs its output."""
    if call.output_mask is None:
        return True, call.smooth_scale1 is not None and call.smooth_scale2 is not None
    first, second = (bool(flag) for flag in call.output_mask)
    if not first and not second:
        raise OpArgumentError(
            "output_mask=[False, False] computes nothing; at least one of y1 and y2 must be output",
            argument="output_mask",
        )
    for flag, name in ((first, "smooth_scale1"), (second, "smooth_scale2")):
        if not flag and getattr(call, name) is not None:
            raise OpArgumentError(f"{name} is given but output_mask turns its output off (the API page)", argument=name)
    return first, second


def _dynamic_quant_y_dtype(call: Arguments) -> torch.dtype:
    """int8 (y_dtype None or torch.int8) or int4 (torch.quint4x2, eight to an int32 along the last dim)."""
    y_dtype = dtype_of_code(call.y_dtype)
    require_choice("y_dtype", y_dtype, (None, torch.int8, torch.quint4x2), "int8, or torch.quint4x2 for int4")
    return torch.quint4x2 if y_dtype == torch.quint4x2 else torch.int8


def _add_rms_norm_dynamic_quant_meta(call: Arguments) -> tuple[Out, Out, Out, Out, Out]:
    """y1, y2 like x1 (int8, or int32 with the last dim / 8 for int4), x like x1, scale1/scale2 float32 of
    x1's leading dims; an output turned off is an empty [0] tensor (op-plugin's meta function)."""
    x1, gamma = call.x1, call.gamma
    _add_rms_norm_meta(call)
    require_dtype("x1", x1, HALF_DTYPES)
    require_dtype("gamma", gamma, (x1.dtype,), "(x1's dtype)")
    for name in ("smooth_scale1", "smooth_scale2", "beta"):
        value = getattr(call, name)
        if value is not None:
            require_dtype(name, value, (x1.dtype,), "(x1's dtype)")
            require_shape(name, value, ((x1.shape[-1],),))
    outputs = _dynamic_quant_outputs(call)
    y_shape, y_dtype = list(x1.shape), torch.int8
    if _dynamic_quant_y_dtype(call) == torch.quint4x2:
        if x1.shape[-1] % INT4_PER_INT32:
            raise OpArgumentError(
                f"x1's last dim {x1.shape[-1]} must be a multiple of 8 for int4 (y_dtype=quint4x2)", argument="x1"
            )
        y_shape, y_dtype = [*x1.shape[:-1], x1.shape[-1] // INT4_PER_INT32], torch.int32
    ys = [Out(y_shape if on else [0], y_dtype) for on in outputs]
    scales = [Out(list(x1.shape[:-1]) if on else [0], torch.float32) for on in outputs]
    return ys[0], ys[1], Out(list(x1.shape), x1.dtype), scales[0], scales[1]


def _add_rms_norm_dynamic_quant_kernel(call: Arguments) -> tuple[torch.Tensor, ...]:
    outputs = _add_rms_norm_dynamic_quant_meta(call)
    x = _residual_sum(call.x1, call.x2)
    y, _ = rms_normalise(x, call.gamma, call.epsilon)
    if call.beta is not None:
        y = y + call.beta.to(torch.float32)
    int4 = _dynamic_quant_y_dtype(call) == torch.quint4x2
    results = []
    for smooth, on in zip((call.smooth_scale1, call.smooth_scale2), _dynamic_quant_outputs(call)):
        if not on:
            results.append((torch.empty(0, dtype=outputs[0].dtype), torch.empty(0, dtype=torch.float32)))
            continue
        values = y if smooth is None else y * smooth.to(torch.float32)
        levels, scale = symmetric_levels(values, INT4_MAX if int4 else DYNAMIC_QUANT_MAX)
        results.append((pack_int4(levels) if int4 else levels.to(torch.int8), scale))
    (y1, scale1), (y2, scale2) = results
    return y1, y2, x, scale1, scale2


def _add_rms_norm_dynamic_quant_samples() -> list[SampleCall]:
    """One quantised branch, and two smoothed ones with a beta."""
    gen = torch.Generator().manual_seed(0)
    x1, x2 = (torch.randn(2, 3, 32, generator=gen).to(torch.bfloat16) for _ in range(2))
    gamma, s1, s2, beta = (torch.rand(32, generator=gen).add(0.5).to(torch.bfloat16) for _ in range(4))
    return [SampleCall((x1, x2, gamma)),
            SampleCall((x1, x2, gamma), {"smooth_scale1": s1, "smooth_scale2": s2, "beta": beta})]


@npu_op(meta=_add_rms_norm_dynamic_quant_meta, kernel=_add_rms_norm_dynamic_quant_kernel,
        samples=_add_rms_norm_dynamic_quant_samples)
def npu_add_rms_norm_dynamic_quant(call: Arguments) -> None:
    """Residual add, RMSNorm and one or two per-row dynamic quantisations: ``(y1, y2, x, scale1, scale2)``.

    Source: torch_npu.npu_add_rms_norm_dynamic_quant (op-plugin
    docs/zh/custom_APIs/torch_npu/torch_npu-npu_add_rms_norm_dynamic_quant.md; output shapes from its meta
    function):

    * ``x = x1 + x2`` (float16/bfloat16, returned in x1's dtype), ``y = x / Rms(x) * gamma [+ beta]`` in
      float32 with ``Rms(x) = sqrt(mean(x**2) + epsilon)``, from the rounded ``x`` as in
      :func:`npu_add_rms_norm`; gamma, beta and the smooth scales are [H] in x1's dtype.
    * Branch i: ``input_i = y [* smooth_scale_i]``, ``scale_i = rowmax|input_i| / 127`` (7 for int4) and
      ``y_i = round(input_i / scale_i)`` half to even, as npu_dynamic_quant here (an all-zero row takes
      scale 1). ``y_dtype`` None/torch.int8 gives int8, torch.quint4x2 int4 packed eight to an int32.
    * ``output_mask`` picks the branches (see :func:`_dynamic_quant_outputs`); a branch turned off returns
      empty [0] tensors.
    """


# ---------------------------------------------------------------------------------------------
# npu_layer_norm_eval
# ---------------------------------------------------------------------------------------------


def _layer_norm_eval_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 16, generator=gen)
    return [SampleCall((x, [16], torch.rand(16, generator=gen), torch.randn(16, generator=gen))),
            SampleCall((x.bfloat16(), [5, 16]))]


def _layer_norm_eval_meta(call: Arguments) -> Out:
    input, normalized_shape = call.input, call.normalized_shape
    require_dtype("input", input, FLOAT_DTYPES)
    dims = len(normalized_shape)
    if not 1 <= dims <= input.dim() or tuple(input.shape[input.dim() - dims :]) != tuple(normalized_shape):
        raise OpArgumentError(
            f"normalized_shape={list(normalized_shape)} must equal the trailing dims of input {list(input.shape)}",
            argument="normalized_shape"
        )
    for name, param in (("weight", call.weight), ("bias", call.bias)):
        if param is not None:
            require_dtype(name, param, (input.dtype, torch.float32), "(input's dtype or float32)")
            if tuple(param.shape) != tuple(normalized_shape):
                raise OpArgumentError(
                    f"{name} has shape {list(param.shape)}; expected {list(normalized_shape)}", argument=name
                )
    return Out(list(input.shape), input.dtype)


def _row_moments(values: torch.Tensor, norm_dims: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row of the trailing ``norm_dims`` dims of float32 ``values``: the mean, the centred values and
    the biased variance ([rows, 1], [rows, width], [rows, 1]), by fixed pairwise sums."""
    lead = values.shape[: values.dim() - norm_dims]
    rows = values.reshape(math.prod(lead), -1)
    width = rows.shape[-1]
    mean = pairwise_sum(rows, dim=-1, keepdim=True) / width
    centred = rows - mean
    return mean, centred, pairwise_sum(centred * centred, dim=-1, keepdim=True) / width


def _layer_norm_eval_kernel(call: Arguments) -> torch.Tensor:
    input = call.input
    _, centred, variance = _row_moments(input.to(torch.float32), len(call.normalized_shape))
    y = (centred / torch.sqrt(variance + call.eps)).reshape(input.shape)
    if call.weight is not None:
        y = y * call.weight.to(torch.float32)
    if call.bias is not None:
        y = y + call.bias.to(torch.float32)
    return y.to(input.dtype)


@npu_op(meta=_layer_norm_eval_meta, kernel=_layer_norm_eval_kernel, samples=_layer_norm_eval_samples)
def npu_layer_norm_eval(call: Arguments) -> None:
    """Inference LayerNorm over the trailing ``normalized_shape`` dims (no mean/rstd outputs).

    Source: torch_npu.npu_layer_norm_eval (Ascend Extension for PyTorch API reference; schema
    ``npu_layer_norm_eval(Tensor input, int[] normalized_shape, Tensor? weight=None,
    Tensor? bias=None, float eps=1e-05) -> Tensor``), the forward of
    ``torch.nn.functional.layer_norm``: ``y = (x - mean) / sqrt(var + eps) * weight + bias``
    with the biased variance.

    float16/bfloat16/float32 input; weight/bias in input's dtype or float32.  Math is float32:
    mean and variance are fixed pairwise sums (two passes), so the bits do not depend on the
    thread count; the result is cast once to input's dtype.
    """


# ---------------------------------------------------------------------------------------------
# npu_scaled_masked_softmax
# ---------------------------------------------------------------------------------------------

_SOFTMAX_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MASKED_VALUE = -10000.0  # the CANN kernel fills masked positions with -10000 ("fill ... with -10000")
_SOFTMAX_MIN, _SOFTMAX_MAX, _SOFTMAX_STEP = 32, 4096, 32


def _scaled_masked_softmax_samples() -> list[SampleCall]:
    """Attention scores [B, N, S, S] with a mask broadcast over heads, and the fixed upper-triangle mask."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 2, 32, 32, generator=gen)
    return [SampleCall((x, torch.rand(2, 1, 32, 32, generator=gen) > 0.7, 0.25)),
            SampleCall((x.bfloat16(), torch.zeros(1, 1, 32, 32, dtype=torch.bool), 1.0, True))]


def _scaled_masked_softmax_backward_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(1)
    calls = []
    for sample in _scaled_masked_softmax_samples():
        y = torch.ops.npu.npu_scaled_masked_softmax(*sample.args)
        mask, scale, *fixed = sample.args[1:]
        calls.append(SampleCall((torch.randn(y.shape, generator=gen).to(y.dtype), y, mask, scale, *(fixed or [False]))))
    return calls


def _scaled_masked_softmax_meta(call: Arguments) -> Out:
    """y like x. The documented constraints: x 4-D with its last two dims in [32, 4096] and multiples of
    32; a bool mask of 4 dims that broadcasts to x (ignored when ``fixed_triu_mask``)."""
    x, mask = call.x, call.mask
    require_dtype("x", x, _SOFTMAX_DTYPES)
    if x.dim() != 4:
        raise OpArgumentError(
            f"x has {x.dim()} dims; npu_scaled_masked_softmax takes a 4-D x [N, C, H, W]", argument="x"
        )
    for axis in (2, 3):
        size = x.shape[axis]
        if not (_SOFTMAX_MIN <= size <= _SOFTMAX_MAX and size % _SOFTMAX_STEP == 0):
            raise OpArgumentError(
                f"x.shape[{axis}] is {size}; npu_scaled_masked_softmax needs H and W in [32, 4096] and "
                "divisible by 32 (pad the scores, or use torch.softmax)", argument="x"
            )
    require_dtype("mask", mask, (torch.bool,))
    if mask.dim() != 4 or any(m not in (1, s) for m, s in zip(mask.shape, x.shape)):
        raise OpArgumentError(
            f"mask has shape {list(mask.shape)}; it must be 4-D and broadcast to x's {list(x.shape)}", argument="mask"
        )
    return Out(list(x.shape), x.dtype)


def _scaled_masked_softmax_kernel(call: Arguments) -> torch.Tensor:
    """As the CANN kernel: scale, fill masked positions with -10000, subtract the row max, exp, divide by
    the row sum. float16 input is scaled, filled and shifted in float16 (the kernel's fp16 path), the
    rest in float32; bfloat16 and float32 input are computed in float32. The row sum is a fixed
    pairwise sum."""
    x, mask = call.x, call.mask
    if call.fixed_triu_mask:
        rows, cols = x.shape[-2:]
        mask = torch.ones(rows, cols, dtype=torch.bool).triu(1).expand(x.shape)
    work = x if x.dtype == torch.float16 else x.to(torch.float32)
    values = (work * torch.tensor(call.scale, dtype=work.dtype)).masked_fill(mask, _MASKED_VALUE)
    shifted = (values - values.amax(dim=-1, keepdim=True)).to(torch.float32)
    exps = torch.exp(shifted)
    return (exps / pairwise_sum(exps, dim=-1, keepdim=True)).to(x.dtype)


def _scaled_masked_softmax_backward_meta(call: Arguments) -> Out:
    """x's gradient like y (the forward's output); y_grad like y."""
    y_grad, y, mask = call.y_grad, call.y, call.mask
    require_dtype("y", y, _SOFTMAX_DTYPES)
    require_dtype("y_grad", y_grad, (y.dtype,), "(y's dtype)")
    require_shape("y_grad", y_grad, (tuple(y.shape),))
    require_dtype("mask", mask, (torch.bool,))
    return Out(list(y.shape), y.dtype)


def _scaled_masked_softmax_backward_kernel(call: Arguments) -> torch.Tensor:
    """``scale * y * (dy - sum(dy * y))`` over the last dim in float32 (a fixed pairwise sum), zero where
    the forward filled the score with a constant (the mask, or the upper triangle with
    ``fixed_triu_mask``)."""
    y_grad, y, mask = call.y_grad, call.y, call.mask
    if call.fixed_triu_mask:
        rows, cols = y.shape[-2:]
        mask = torch.ones(rows, cols, dtype=torch.bool).triu(1).expand(y.shape)
    probs, grads = y.to(torch.float32), y_grad.to(torch.float32)
    dx = probs * (grads - pairwise_sum(grads * probs, dim=-1, keepdim=True)) * call.scale
    return dx.masked_fill(mask, 0.0).to(y.dtype)


@npu_op(
    meta=_scaled_masked_softmax_backward_meta,
    kernel=_scaled_masked_softmax_backward_kernel,
    samples=_scaled_masked_softmax_backward_samples,
)
def npu_scaled_masked_softmax_backward(call: Arguments) -> None:
    """ScaledMaskedSoftmaxGrad: the gradient of :func:`npu_scaled_masked_softmax`'s ``x`` from its output
    ``y`` and ``y``'s gradient. torch_npu's schema ``npu_scaled_masked_softmax_backward(Tensor y_grad,
    Tensor y, Tensor mask, Scalar scale, bool fixed_triu_mask) -> Tensor``."""


def _scaled_masked_softmax_setup(ctx: object, call: Arguments, output: torch.Tensor) -> None:
    ctx.save_for_backward(output, call.mask)
    ctx.scale, ctx.fixed_triu_mask = call.scale, call.fixed_triu_mask


def _scaled_masked_softmax_grad(ctx: object, y_grad: torch.Tensor) -> tuple:
    y, mask = ctx.saved_tensors
    dx = torch.ops.npu.npu_scaled_masked_softmax_backward(y_grad, y, mask, ctx.scale, ctx.fixed_triu_mask)
    return dx, None, None, None


@npu_op(
    meta=_scaled_masked_softmax_meta,
    kernel=_scaled_masked_softmax_kernel,
    derivative=Derivative(_scaled_masked_softmax_setup, _scaled_masked_softmax_grad),
    samples=_scaled_masked_softmax_samples,
)
def npu_scaled_masked_softmax(call: Arguments) -> None:
    """``softmax(x * scale, masked)`` over the last dim, one fused ScaledMaskedSoftmax kernel.

    Sources: torch_npu.npu_scaled_masked_softmax (API reference: x float16/bfloat16/float32, 4-D with H
    and W in [32, 4096] and divisible by 32; mask bool, broadcastable to x; output like x) and the
    ScaledMaskedSoftmax tuning page of docs/feature-docs.md#affinity-ops, which gives the unfused form it replaces
    (``x * scale``, ``masked_fill``, ``softmax(dim=-1)``). The CANN kernel (opp
    ``impl/dynamic/scaled_masked_softmax.py``) fills masked positions with -10000 and, with
    ``fixed_triu_mask``, masks the upper triangle above the diagonal itself.
    """


# ---------------------------------------------------------------------------------------------
# npu_add_layer_norm
# ---------------------------------------------------------------------------------------------



def _add_layer_norm_stat_shape(x1: torch.Tensor, gamma: torch.Tensor) -> list[int]:
    """mean and rstd: x1's leading dims and one trailing 1 (op-plugin's output shape)."""
    return [*x1.shape[: x1.dim() - gamma.dim()], 1]


def _add_layer_norm_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(0)
    x1, x2, gamma = _add_norm_inputs(gen, torch.float32)
    beta = torch.randn(16, generator=gen)
    return [SampleCall((x1, x2, gamma, beta)), SampleCall((x1.bfloat16(), x2.bfloat16(), gamma, beta, 1e-6, True))]


def _add_layer_norm_dtype(x1: torch.Tensor, x2: torch.Tensor) -> torch.dtype:
    """The dtype of y and x: x1's when x1 and x2 agree, float32 when they differ (op-plugin's
    AddLayerNormKernelNpuOpApi.cpp allocates both float32 then), where one of them must be float32."""
    require_dtype("x1", x1, FLOAT_DTYPES)
    if x2.dtype == x1.dtype:
        return x1.dtype
    require_dtype("x2", x2, FLOAT_DTYPES if x1.dtype == torch.float32 else (x1.dtype, torch.float32),
                  "(x1's dtype, or float32 beside a float16/bfloat16 x1, or any float beside a float32 x1)")
    return torch.float32


def _add_layer_norm_meta(call: Arguments) -> tuple[Out, Out, Out, Out]:
    """y and x in :func:`_add_layer_norm_dtype`; mean and rstd float32 with the normalised dims folded into one 1."""
    x1, x2 = call.x1, call.x2
    dtype = _add_layer_norm_dtype(x1, x2)
    if x2.shape != x1.shape:
        raise OpArgumentError(
            f"x2 has shape {list(x2.shape)}; it must equal x1's shape {list(x1.shape)}", argument="x2"
        )
    for name, param in (("gamma", call.gamma), ("beta", call.beta)):
        require_dtype(name, param, (x1.dtype, x2.dtype, torch.float32), "(x1's or x2's dtype, or float32)")
        require_trailing(name, param, "x1", x1)
    stat = Out(_add_layer_norm_stat_shape(x1, call.gamma), torch.float32)
    like_x = Out(list(x1.shape), dtype)
    return like_x, stat, stat, like_x


def _add_layer_norm_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    x1, gamma = call.x1, call.gamma
    dtype = _add_layer_norm_dtype(x1, call.x2)
    x = (x1.to(torch.float32) + call.x2.to(torch.float32)).to(dtype)
    mean, centred, variance = _row_moments(x.to(torch.float32), gamma.dim())
    rstd = 1.0 / torch.sqrt(variance + call.epsilon)
    y = (centred * rstd).reshape(x1.shape) * gamma.to(torch.float32) + call.beta.to(torch.float32)
    stat_shape = _add_layer_norm_stat_shape(x1, gamma)
    return y.to(dtype), mean.reshape(stat_shape), rstd.reshape(stat_shape), x


def _add_layer_norm_backward_meta(call: Arguments) -> tuple[Out, Out, Out, Out]:
    """dx1 and dx2 like x1 (the same gradient: x = x1 + x2), dgamma and dbeta float32 like gamma (op-plugin's
    kernel allocates them so); mean and rstd are the forward's."""
    x1, gamma = call.x1, call.gamma
    require_dtype("x1", x1, FLOAT_DTYPES)
    require_dtype("x2", call.x2, (x1.dtype,), "(x1's dtype)")
    require_shape("x2", call.x2, (tuple(x1.shape),))
    require_trailing("gamma", gamma, "x1", x1)
    stat = (tuple(_add_layer_norm_stat_shape(x1, gamma)),)
    for name in ("mean", "rstd"):
        require_dtype(name, getattr(call, name), (torch.float32,))
        require_shape(name, getattr(call, name), stat)
    for name in ("dy_opt", "dsum_opt"):
        if getattr(call, name) is not None:
            require_dtype(name, getattr(call, name), (x1.dtype,), "(x1's dtype)")
            require_shape(name, getattr(call, name), (tuple(x1.shape),))
    like_x, like_gamma = Out(list(x1.shape), x1.dtype), Out(list(gamma.shape), torch.float32)
    return like_x, like_x, like_gamma, like_gamma


def _add_layer_norm_backward_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """With ``x = x1 + x2`` (rounded as the forward stores it), ``xhat = (x - mean) * rstd`` and
    ``g = dy * gamma`` over a row's n normalised elements:
    ``dx = rstd * (g - sum(g) / n - xhat * sum(g * xhat) / n) + dsum``, ``dgamma = sum over rows of
    dy * xhat``, ``dbeta = sum over rows of dy`` (AddLayerNormGrad, as op-plugin's test writes it out);
    a missing ``dy`` or ``dsum`` is zeros. float32 with fixed pairwise sums, dx rounded once."""
    x1, gamma = call.x1, call.gamma
    rows = math.prod(call.rstd.shape)
    values = _residual_sum(x1, call.x2).to(torch.float32).reshape(rows, -1)
    zeros = torch.zeros(x1.shape, dtype=torch.float32)
    dy = zeros if call.dy_opt is None else call.dy_opt.to(torch.float32)
    dsum = zeros if call.dsum_opt is None else call.dsum_opt.to(torch.float32)
    dy = dy.reshape(rows, -1)
    rstd = call.rstd.reshape(rows, 1)
    xhat = (values - call.mean.reshape(rows, 1)) * rstd
    g = dy * gamma.to(torch.float32).reshape(1, -1)
    width = values.shape[-1]
    mean_g = pairwise_sum(g, dim=-1, keepdim=True) / width
    mean_gx = pairwise_sum(g * xhat, dim=-1, keepdim=True) / width
    dx = (rstd * (g - mean_g - xhat * mean_gx)).reshape(x1.shape) + dsum
    dgamma = pairwise_sum(dy * xhat, dim=0).reshape(gamma.shape)
    dbeta = pairwise_sum(dy, dim=0).reshape(gamma.shape)
    dx = dx.to(x1.dtype)
    return dx, dx.clone(), dgamma, dbeta


def _add_layer_norm_backward_samples() -> list[SampleCall]:
    """The backward of each forward sample with both output gradients, and with only y's."""
    gen = torch.Generator().manual_seed(1)
    calls = []
    for sample in _add_layer_norm_samples():
        x1, x2, gamma = sample.args[:3]
        _, mean, rstd, _ = torch.ops.npu.npu_add_layer_norm(*sample.args)
        dy, dsum = (torch.randn(x1.shape, generator=gen).to(x1.dtype) for _ in range(2))
        calls.append(SampleCall((dy, x1, x2, rstd, mean, gamma, dsum)))
    calls.append(SampleCall((*calls[0].args[:6], None)))
    return calls


@npu_op(meta=_add_layer_norm_backward_meta, kernel=_add_layer_norm_backward_kernel,
        samples=_add_layer_norm_backward_samples)
def npu_add_layer_norm_backward(call: Arguments) -> None:
    """AddLayerNormGrad: the gradients of :func:`npu_add_layer_norm`'s ``x1``, ``x2``, ``gamma`` and
    ``beta`` from ``y``'s gradient ``dy_opt`` and the residual output ``x``'s gradient ``dsum_opt``;
    returns ``(dx1, dx2, dgamma, dbeta)``.

    Sources: op-plugin derivatives.yaml (``npu_add_layer_norm -> npu_add_layer_norm_backward(grads[0], x1,
    x2, result2, result1, gamma, grads[1])``: rstd, then mean), its kernel AddLayerNormBackwardKernelNpu.cpp
    (dx returned for both x1 and x2, dgamma and dbeta float32) and test_npu_add_layer_norm_backward.py.
    """


def _add_layer_norm_setup(ctx: object, call: Arguments, output: tuple) -> None:
    _, mean, rstd, _ = output
    ctx.save_for_backward(call.x1, call.x2, rstd, mean, call.gamma)
    ctx.beta_dtype = call.beta.dtype


def _add_layer_norm_grad(ctx: object, dy: torch.Tensor, _dmean: torch.Tensor, _drstd: torch.Tensor,
                         dsum: torch.Tensor) -> tuple:
    """op-plugin's formula: the gradients of y and of the residual output x flow back (mean and rstd are
    intermediates)."""
    x1, x2, rstd, mean, gamma = ctx.saved_tensors
    dx1, dx2, dgamma, dbeta = torch.ops.npu.npu_add_layer_norm_backward(dy, x1, x2, rstd, mean, gamma, dsum)
    return dx1, dx2, dgamma.to(gamma.dtype), dbeta.to(ctx.beta_dtype), None, None


@npu_op(
    meta=_add_layer_norm_meta,
    kernel=_add_layer_norm_kernel,
    derivative=Derivative(_add_layer_norm_setup, _add_layer_norm_grad),
    samples=_add_layer_norm_samples,
)
def npu_add_layer_norm(call: Arguments) -> None:
    """Residual add fused with LayerNorm: returns ``(y, mean, rstd, x)`` with ``x = x1 + x2``.

    Sources: aclnnAddLayerNorm (hicann/ops-nn norm/add_layer_norm): ``x = x1 + x2``,
    ``rstd = 1 / sqrt(Var(x) + epsilon)``, ``y = (x - E(x)) * rstd * gamma + beta``; op-plugin's
    npu_add_layer_norm fixes the outputs: mean and rstd float32 of x1's leading dims and one trailing 1.

    * ``x1``/``x2`` same shape, float16, bfloat16 or float32, of one dtype or one of them float32 (then
      ``y`` and ``x`` are float32: op-plugin's kernel allocates them so); ``gamma``/``beta`` the trailing
      dims of x1, in x1's or x2's dtype or float32.
    * ``x`` is that dtype and the statistics are taken from that rounded sum, as npu_add_rms_norm here;
      the variance is the biased one; float32 math with fixed pairwise sums, one rounding of ``y``.
    * ``additional_output`` asks the device to also store ``x``; the model always returns it.
    """


# ---------------------------------------------------------------------------------------------
# npu_add_rms_norm_v2 (in place), npu_rms_norm_quant
# ---------------------------------------------------------------------------------------------


def _add_rms_norm_v2_meta(call: Arguments) -> tuple[Out, Out, Out]:
    """rstd, then the new x1 (y) and the new x2 (x = x1 + x2): op-plugin's functional form's order."""
    y, rstd, x = _add_rms_norm_meta(call)
    return rstd, y, x


def _add_rms_norm_v2_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, rstd, x = _add_rms_norm_kernel(call)
    return rstd, y, x


def _add_rms_norm_v2_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(0)
    x1, x2 = (torch.randn(2, 3, 64, generator=gen).half() for _ in range(2))
    return [SampleCall((x1, x2, torch.rand(64, generator=gen).half()))]


@npu_op(
    meta=_add_rms_norm_v2_meta,
    kernel=_add_rms_norm_v2_kernel,
    writes_back={"x1": 1, "x2": 2},
    schema_mutates=True,
    samples=_add_rms_norm_v2_samples,
)
def npu_add_rms_norm_v2(call: Arguments) -> None:
    """:func:`npu_add_rms_norm` in place: ``x1`` becomes ``y``, ``x2`` becomes ``x = x1 + x2``; returns ``rstd``.

    Source: op-plugin's schema (``Tensor(a!) x1, Tensor(b!) x2 ... -> Tensor``) and
    test/test_custom_ops/test_npu_add_rms_norm_v2.py (its golden: ``rstd``, the normalised result and the
    sum; ``npu_add_rms_norm_v2_functional`` returns them in that order). The computation is
    :func:`npu_add_rms_norm`'s.
    """


def _rms_norm_quant_meta(call: Arguments) -> Out:
    x = call.x
    require_dtype("x", x, FLOAT_DTYPES)
    for name in ("gamma", "beta"):
        param = getattr(call, name)
        require_dtype(name, param, (x.dtype,), "(x's dtype)")
        if tuple(param.shape) not in ((x.shape[-1],), (1, x.shape[-1])):
            raise OpArgumentError(
                f"{name} has shape {list(param.shape)}; expected [{x.shape[-1]}] or [1, {x.shape[-1]}]", argument=name
            )
    require_shape("scale", call.scale, ((1,),))
    require_dtype("scale", call.scale, (x.dtype,), "(x's dtype)")
    require_shape("offset", call.offset, ((1,),))
    require_dtype("offset", call.offset, (torch.int8,))
    return Out(list(x.shape), torch.int8)


def _rms_norm_quant_kernel(call: Arguments) -> torch.Tensor:
    gamma = call.gamma.reshape(-1)
    y, _ = rms_normalise(call.x, gamma, call.epsilon)
    return _quantise(y + call.beta.reshape(-1).to(torch.float32), call.scale, call.offset, div_mode=False)


def _rms_norm_quant_samples() -> list[SampleCall]:
    """RMSNorm of three float16 rows, then static int8 quantisation with one scale and offset."""
    gen = torch.Generator().manual_seed(1)
    x, gamma = torch.randn(3, 32, generator=gen).half(), torch.rand(32, generator=gen).half()
    beta = (0.1 * torch.randn(32, generator=gen)).half()
    return [SampleCall((x, gamma, beta, torch.tensor([40.0], dtype=torch.float16), torch.tensor([3], dtype=torch.int8)))]


@npu_op(
    meta=_rms_norm_quant_meta,
    kernel=_rms_norm_quant_kernel,
    argument_checks={"dst_dtype": require_scalar_type_number},
    samples=_rms_norm_quant_samples,
)
def npu_rms_norm_quant(call: Arguments) -> None:
    """RMSNorm then static int8 quantisation: ``y = rint((x / Rms(x) * gamma + beta) * scale + offset)``,
    saturated to int8, with ``Rms(x) = sqrt(mean(x**2) + epsilon)`` over the last dim.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_rms_norm_quant.md (formula; gamma and beta
    [H] or [1, H] in x's dtype; scale and offset [1], offset int8; dst_dtype None or int8) and
    op_plugin/ops/opapi/RmsNormQuantKernelOpApi.cpp (dst_dtype is torch's ScalarType number, None meaning
    int8). Computed in float32. The quint4x2 output (dst_dtype torch.quint4x2) is not implemented.
    """
    if call.dst_dtype is not None:
        require_choice("dst_dtype", call.dst_dtype, INT8_SCALAR_TYPE, "int8; the quint4x2 output is not implemented")
