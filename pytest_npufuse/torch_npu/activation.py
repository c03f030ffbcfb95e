"""Activation ops: GELU with torch_npu's ``approximate`` and FastGelu, as vision towers and MLPs call them."""

from __future__ import annotations

import torch

from .checks import FLOAT_DTYPES, require_choice, require_dtype
from .registry import Arguments, Out, npu_op

GELU_APPROXIMATIONS = ("none", "tanh")
# FastGelu's constant: both documented forms, x / (1 + exp(-1.702|x|)) * exp(0.851 (x - |x|)) and the A2/A3
# one, equal x * sigmoid(1.702 x) for every x.
FAST_GELU_SLOPE = 1.702


def _like(x: torch.Tensor) -> Out:
    """An activation's output: the input's shape and dtype (float16, bfloat16 or float32)."""
    require_dtype("input", x, FLOAT_DTYPES)
    return Out(list(x.shape), x.dtype)


def _gelu_meta(call: Arguments) -> Out:
    return _like(call.input)


def _gelu_kernel(call: Arguments) -> torch.Tensor:
    return torch.nn.functional.gelu(call.input.to(torch.float32), approximate=call.approximate).to(call.input.dtype)


@npu_op(meta=_gelu_meta, kernel=_gelu_kernel)
def npu_gelu(call: Arguments) -> None:
    """GELU ``x * Phi(x)`` with ``Phi`` the standard normal CDF (``approximate="none"``, erf) or its tanh
    approximation (``"tanh"``).

    Source: torch_npu.npu_gelu (op-plugin docs/context/torch_npu-npu_gelu.md). The doc says why the op
    exists: on the NPU torch's own ``gelu`` ignores ``approximate`` and always uses tanh, so code that needs
    erf calls this. float16, bfloat16 or float32, any shape; the output has the input's shape and dtype.
    Computed in float32 and rounded once to the input's dtype.
    """
    require_choice("approximate", call.approximate, GELU_APPROXIMATIONS, "erf or its tanh approximation")


def _fast_gelu_meta(call: Arguments) -> Out:
    return _like(call.self)


def _fast_gelu_kernel(call: Arguments) -> torch.Tensor:
    values = call.self.to(torch.float32)
    return (values * torch.sigmoid(FAST_GELU_SLOPE * values)).to(call.self.dtype)


@npu_op(meta=_fast_gelu_meta, kernel=_fast_gelu_kernel)
def npu_fast_gelu(call: Arguments) -> None:
    """FastGelu: ``x * sigmoid(1.702 x)``, computed in float32 and rounded once to the input's dtype.

    Source: torch_npu.npu_fast_gelu (Ascend Extension for PyTorch API reference; schema
    ``npu_fast_gelu(Tensor self) -> Tensor``). The doc gives two forms, one per product family; both are
    this function. float16, bfloat16 or float32, any shape (at most 8 dims).
    """


@npu_op(meta=_fast_gelu_meta, kernel=_fast_gelu_kernel)
def fast_gelu(call: Arguments) -> None:
    """The older name of :func:`npu_fast_gelu` (``torch_npu.fast_gelu(self) -> Tensor``), the same op."""
