"""Activation ops: GELU with torch_npu's ``approximate`` and FastGelu, as vision towers and MLPs call them."""

from __future__ import annotations

import torch

from .checks import FLOAT_DTYPES, require_choice, require_dtype, require_shape
from .registry import Arguments, Derivative, Out, SampleCall, npu_op

GELU_APPROXIMATIONS = ("none", "tanh")
# FastGelu's constant: both documented forms, x / (1 + exp(-1.702|x|)) * exp(0.851 (x - |x|)) and the A2/A3
# one, equal x * sigmoid(1.702 x) for every x.
FAST_GELU_SLOPE = 1.702


def _like(x: torch.Tensor) -> Out:
    """An activation's output: the input's shape and dtype (float16, bfloat16 or float32)."""
    require_dtype("input", x, FLOAT_DTYPES)
    return Out(list(x.shape), x.dtype)


def _activation_samples() -> list[SampleCall]:
    """A float32 and a bfloat16 activation, as MLPs and vision towers hand them over."""
    gen = torch.Generator().manual_seed(0)
    return [
        SampleCall((torch.randn(2, 3, 8, generator=gen),)),
        SampleCall((torch.randn(4, 16, generator=gen).bfloat16(),)),
    ]


def _gelu_samples() -> list[SampleCall]:
    tanh = SampleCall((torch.randn(3, 8, generator=torch.Generator().manual_seed(1)),), {"approximate": "tanh"})
    return [*_activation_samples(), tanh]


def _gelu_meta(call: Arguments) -> Out:
    return _like(call.input)


def _gelu_kernel(call: Arguments) -> torch.Tensor:
    return torch.nn.functional.gelu(call.input.to(torch.float32), approximate=call.approximate).to(call.input.dtype)


def _gradient_meta(grad_name: str, grad: torch.Tensor, x: torch.Tensor) -> Out:
    """An activation's backward: the gradient of the output (x's shape and dtype) to x's gradient."""
    like = _like(x)
    require_dtype(grad_name, grad, (x.dtype,), "(the input's dtype)")
    require_shape(grad_name, grad, (tuple(x.shape),))
    return like


def _with_output_gradients(samples: list[SampleCall]) -> list[SampleCall]:
    """Each forward sample as its backward's call: a gradient like the input before the forward's arguments."""
    gen = torch.Generator().manual_seed(2)
    return [
        SampleCall((torch.randn(sample.args[0].shape, generator=gen).to(sample.args[0].dtype), *sample.args),
                   sample.kwargs)
        for sample in samples
    ]


def _gelu_backward_meta(call: Arguments) -> Out:
    return _gradient_meta("grad_output", call.grad_output, call.input)


def _gelu_backward_kernel(call: Arguments) -> torch.Tensor:
    """``dy * d/dx gelu(x)`` of the erf form or of its tanh approximation, in float32, rounded once."""
    dx = torch.ops.aten.gelu_backward(
        call.grad_output.to(torch.float32), call.input.to(torch.float32), approximate=call.approximate
    )
    return dx.to(call.input.dtype)


@npu_op(meta=_gelu_backward_meta, kernel=_gelu_backward_kernel, samples=lambda: _with_output_gradients(_gelu_samples()))
def npu_gelu_backward(call: Arguments) -> None:
    """GeluGradV2: the gradient of :func:`npu_gelu`'s input from its output's gradient ``grad_output``.

    Source: op-plugin derivatives.yaml (``npu_gelu -> npu_gelu_backward(grad, self, approximate)``) and
    op_plugin_functions.yaml (``aclnnGeluBackwardV2``). float16, bfloat16 or float32; the gradient has
    the input's shape and dtype, computed in float32 and rounded once.
    """
    require_choice("approximate", call.approximate, GELU_APPROXIMATIONS, "erf or its tanh approximation")


def _gelu_setup(ctx: object, call: Arguments, output: torch.Tensor) -> None:
    ctx.save_for_backward(call.input)
    ctx.approximate = call.approximate


def _gelu_grad(ctx: object, grad: torch.Tensor) -> tuple:
    (x,) = ctx.saved_tensors
    return torch.ops.npu.npu_gelu_backward(grad, x, approximate=ctx.approximate)


@npu_op(meta=_gelu_meta, kernel=_gelu_kernel, derivative=Derivative(_gelu_setup, _gelu_grad), samples=_gelu_samples)
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


def _fast_gelu_backward_meta(call: Arguments) -> Out:
    return _gradient_meta("grad", call.grad, call.self)


def _fast_gelu_backward_kernel(call: Arguments) -> torch.Tensor:
    """With ``s = sigmoid(1.702 x)``: ``dx = dy * (s + 1.702 x s (1 - s))``, float32, rounded once."""
    values = call.self.to(torch.float32)
    gate = torch.sigmoid(FAST_GELU_SLOPE * values)
    slope = gate + FAST_GELU_SLOPE * values * gate * (1.0 - gate)
    return (call.grad.to(torch.float32) * slope).to(call.self.dtype)


@npu_op(
    meta=_fast_gelu_backward_meta,
    kernel=_fast_gelu_backward_kernel,
    samples=lambda: _with_output_gradients(_activation_samples()),
)
def npu_fast_gelu_backward(call: Arguments) -> None:
    """FastGeluGrad: the gradient of :func:`npu_fast_gelu`'s (and :func:`fast_gelu`'s) input.

    Source: op-plugin derivatives.yaml (``npu_fast_gelu`` and ``fast_gelu -> npu_fast_gelu_backward(grad,
    self)``) and its meta function (the gradient is like ``self``).
    """


def _fast_gelu_setup(ctx: object, call: Arguments, output: torch.Tensor) -> None:
    ctx.save_for_backward(call.self)


def _fast_gelu_grad(ctx: object, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return torch.ops.npu.npu_fast_gelu_backward(grad, x)


FAST_GELU_DERIVATIVE = Derivative(_fast_gelu_setup, _fast_gelu_grad)


@npu_op(meta=_fast_gelu_meta, kernel=_fast_gelu_kernel, derivative=FAST_GELU_DERIVATIVE, samples=_activation_samples)
def npu_fast_gelu(call: Arguments) -> None:
    """FastGelu: ``x * sigmoid(1.702 x)``, computed in float32 and rounded once to the input's dtype.

    Source: torch_npu.npu_fast_gelu (Ascend Extension for PyTorch API reference; schema
    ``npu_fast_gelu(Tensor self) -> Tensor``). The doc gives two forms, one per product family; both are
    this function. float16, bfloat16 or float32, any shape (at most 8 dims).
    """


@npu_op(meta=_fast_gelu_meta, kernel=_fast_gelu_kernel, derivative=FAST_GELU_DERIVATIVE, samples=_activation_samples)
def fast_gelu(call: Arguments) -> None:
    """The older name of :func:`npu_fast_gelu` (``torch_npu.fast_gelu(self) -> Tensor``), the same op."""
