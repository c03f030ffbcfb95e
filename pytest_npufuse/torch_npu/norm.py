"""Normalisation ops: RMSNorm and its fused variants."""

from __future__ import annotations

import math

import torch

from .checks import FLOAT_DTYPES, require_dtype, require_float, require_tensor, require_trailing
from .fixedorder import pairwise_sum
from .registry import Out, npu_op

RMS_NORM_DOC = "torch_npu.npu_rms_norm, Ascend Extension for PyTorch API reference; op-plugin meta function"


def _rms_norm_meta(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[Out, Out]:
    """Validate the npu_rms_norm tensors: y like x, rstd float32 with the normalised dims kept as 1."""
    require_dtype("x", x, FLOAT_DTYPES)
    require_dtype("gamma", gamma, (x.dtype, torch.float32), "(x's dtype or float32)")
    require_trailing("gamma", gamma, "x", x)
    lead = list(x.shape[: x.dim() - gamma.dim()])
    return Out(list(x.shape), x.dtype), Out([*lead, *([1] * gamma.dim())], torch.float32)


def _rms_norm_kernel(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    rstd_shape = [*x.shape[: x.dim() - gamma.dim()], *([1] * gamma.dim())]
    values = x.to(torch.float32)
    rows = values.reshape(math.prod(rstd_shape), gamma.numel())
    mean_square = pairwise_sum(rows * rows, dim=-1) / gamma.numel()
    rstd = (1.0 / torch.sqrt(mean_square + epsilon)).reshape(rstd_shape)
    y = values * rstd * gamma.to(torch.float32)
    return y.to(x.dtype), rstd


@npu_op(
    "(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)",
    source=RMS_NORM_DOC,
    meta=_rms_norm_meta,
    kernel=_rms_norm_kernel,
)
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
    require_tensor("x", x)
    require_tensor("gamma", gamma)
    require_float("epsilon", epsilon)
