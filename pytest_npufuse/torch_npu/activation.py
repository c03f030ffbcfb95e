"""Activation ops: GELU with torch_npu's ``approximate``, FastGelu, SiLU, Mish and the gated forms (GeluMul,
clipped SwiGLU) that MLPs and MoE experts call."""

from __future__ import annotations

import math

import torch

from ..errors import OpArgumentError
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
    return _like(call.input)


def _fast_gelu_kernel(call: Arguments) -> torch.Tensor:
    values = call.input.to(torch.float32)
    return (values * torch.sigmoid(FAST_GELU_SLOPE * values)).to(call.input.dtype)


def _fast_gelu_backward_meta(call: Arguments) -> Out:
    return _gradient_meta("grad", call.grad, call.input)


def _fast_gelu_backward_kernel(call: Arguments) -> torch.Tensor:
    """With ``s = sigmoid(1.702 x)``: ``dx = dy * (s + 1.702 x s (1 - s))``, float32, rounded once."""
    values = call.input.to(torch.float32)
    gate = torch.sigmoid(FAST_GELU_SLOPE * values)
    slope = gate + FAST_GELU_SLOPE * values * gate * (1.0 - gate)
    return (call.grad.to(torch.float32) * slope).to(call.input.dtype)


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
    ctx.save_for_backward(call.input)


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
    """The older name of :func:`npu_fast_gelu` (``torch_npu.fast_gelu(input) -> Tensor``), the same op."""


def halved(name: str, x: torch.Tensor, dim: int) -> Out:
    """The output of a gated activation that splits ``x`` in two along ``dim``: x's shape with that dim
    halved, x's dtype (float16, bfloat16 or float32); the dim must exist and be even."""
    require_dtype(name, x, FLOAT_DTYPES)
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise OpArgumentError(f"dim={dim} is out of range for {name} of shape {list(x.shape)}", argument="dim")
    if x.shape[dim] % 2 != 0:
        raise OpArgumentError(
            f"{name} has size {x.shape[dim]} in dim {dim}; it must be even (it is split in two halves)", argument=name
        )
    shape = list(x.shape)
    shape[dim] //= 2
    return Out(shape, x.dtype)


# ---------------------------------------------------------------------------------------------
# npu_silu, npu_silu_, npu_mish (and their backward ops)
# ---------------------------------------------------------------------------------------------


def _self_meta(call: Arguments) -> Out:
    return _like(call.input)


def _silu_kernel(call: Arguments) -> torch.Tensor:
    return torch.nn.functional.silu(call.input.to(torch.float32)).to(call.input.dtype)


def _silu_setup(ctx: object, call: Arguments, output: torch.Tensor) -> None:
    ctx.save_for_backward(call.input, output)


def _silu_grad(ctx: object, grad: torch.Tensor) -> torch.Tensor:
    """op-plugin derivatives.yaml: ``self: npu_silu_backward(grad, self, result)``."""
    x, y = ctx.saved_tensors
    return torch.ops.npu.npu_silu_backward(grad, x, y)


@npu_op(
    meta=_self_meta,
    kernel=_silu_kernel,
    derivative=Derivative(_silu_setup, _silu_grad),
    samples=_activation_samples,
)
def npu_silu(call: Arguments) -> None:
    """SiLU (Swish): ``x * sigmoid(x)``, computed in float32 and rounded once to the input's dtype.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_silu.md; float16, bfloat16 or
    float32, the output has the input's shape and dtype. Differentiable through ``npu_silu_backward``
    (op-plugin derivatives.yaml).
    """


@npu_op(meta=_self_meta, kernel=_silu_kernel, writes_back={"input": 0}, samples=_activation_samples)
def npu_silu_(call: Arguments) -> None:
    """In-place :func:`npu_silu`: overwrites ``self`` with ``x * sigmoid(x)`` and returns it.

    Source: op-plugin op_plugin_functions.yaml ``npu_silu_(Tensor(a!) self) -> Tensor(a!)``; the registered
    op is functional (the registry's ``writes_back``) and this wrapper copies its result into ``self``.
    """


def _silu_backward_meta(call: Arguments) -> Out:
    _like(call.x0)
    return _like(call.grad_output)


def _silu_backward_kernel(call: Arguments) -> torch.Tensor:
    x, y, grad = (t.to(torch.float32) for t in (call.x0, call.x1, call.grad_output))
    sigmoid = torch.sigmoid(x)
    return (grad * (sigmoid + y * (1 - sigmoid))).to(call.grad_output.dtype)


def _silu_backward_samples() -> list[SampleCall]:
    """The gradient of a float32 and a bfloat16 SiLU, from the forward's input and output."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    return [SampleCall((torch.ones_like(x), x, torch.nn.functional.silu(x))),
            SampleCall((torch.ones(4, 8, dtype=torch.bfloat16), x.bfloat16(), torch.nn.functional.silu(x).bfloat16()))]


@npu_op(meta=_silu_backward_meta, kernel=_silu_backward_kernel, samples=_silu_backward_samples)
def npu_silu_backward(call: Arguments) -> None:
    """SiLU's gradient from the forward's input ``x0`` and output ``x1``:
    ``grad * (sigmoid(x) + silu(x) * (1 - sigmoid(x)))``, the derivative of ``x * sigmoid(x)``. torch_npu's
    schema ``npu_silu_backward(Tensor grad_output, Tensor x0, Tensor x1) -> Tensor``."""


def _mish_kernel(call: Arguments) -> torch.Tensor:
    return torch.nn.functional.mish(call.input.to(torch.float32)).to(call.input.dtype)


def _mish_setup(ctx: object, call: Arguments, output: torch.Tensor) -> None:
    ctx.save_for_backward(call.input)


def _mish_grad(ctx: object, grad: torch.Tensor) -> torch.Tensor:
    """op-plugin derivatives.yaml: ``self: npu_mish_backward(grad, self)``."""
    (x,) = ctx.saved_tensors
    return torch.ops.npu.npu_mish_backward(grad, x)


@npu_op(
    meta=_self_meta,
    kernel=_mish_kernel,
    derivative=Derivative(_mish_setup, _mish_grad),
    samples=_activation_samples,
)
def npu_mish(call: Arguments) -> None:
    """Mish: ``x * tanh(softplus(x))``, computed in float32 and rounded once to the input's dtype.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_mish.md; float16, bfloat16 or
    float32, the output has the input's shape and dtype. Differentiable through ``npu_mish_backward``
    (op-plugin derivatives.yaml).
    """


def _mish_backward_meta(call: Arguments) -> Out:
    _like(call.input)
    return _like(call.grad)


def _mish_backward_kernel(call: Arguments) -> torch.Tensor:
    x, grad = call.input.to(torch.float32), call.grad.to(torch.float32)
    tanh = torch.tanh(torch.nn.functional.softplus(x))
    return (grad * (tanh + x * torch.sigmoid(x) * (1 - tanh * tanh))).to(call.grad.dtype)


def _mish_backward_samples() -> list[SampleCall]:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    return [SampleCall((torch.rand(4, 8, generator=torch.Generator().manual_seed(2)), x))]


@npu_op(meta=_mish_backward_meta, kernel=_mish_backward_kernel, samples=_mish_backward_samples)
def npu_mish_backward(call: Arguments) -> None:
    """Mish's gradient from the forward's input: with ``t = tanh(softplus(x))``,
    ``grad * (t + x * sigmoid(x) * (1 - t^2))``, the derivative of ``x * t``. torch_npu's schema
    ``npu_mish_backward(Tensor grad, Tensor input) -> Tensor``."""


# ---------------------------------------------------------------------------------------------
# npu_gelu_mul, npu_clipped_swiglu
# ---------------------------------------------------------------------------------------------


GELU_MUL_MAX_WIDTH = 1024  # the doc: the last dim is even and at most 1024


def _gelu_mul_meta(call: Arguments) -> Out:
    x = call.input
    if not 2 <= x.dim() <= 8:
        raise OpArgumentError(f"input has {x.dim()} dims; the doc allows 2 to 8", argument="input")
    if x.shape[-1] > GELU_MUL_MAX_WIDTH:
        raise OpArgumentError(
            f"input's last dim is {x.shape[-1]}; the doc allows at most {GELU_MUL_MAX_WIDTH}", argument="input"
        )
    return halved("input", x, -1)


def _gelu_mul_kernel(call: Arguments) -> torch.Tensor:
    gate, up = call.input.to(torch.float32).chunk(2, dim=-1)
    return (torch.nn.functional.gelu(gate, approximate=call.approximate) * up).to(call.input.dtype)


@npu_op(meta=_gelu_mul_meta, kernel=_gelu_mul_kernel, samples=_activation_samples)
def npu_gelu_mul(call: Arguments) -> None:
    """GeluMul: split ``input``'s last dim in halves x1, x2 and return ``GELU(x1) * x2``.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_gelu_mul.md: ``approximate`` "none" (erf)
    or "tanh"; float16, bfloat16 or float32, 2 to 8 dims, an even last dim of at most 1024; the output
    has the input's dtype and half its last dim. Computed in float32 and rounded once.
    """
    require_choice("approximate", call.approximate, GELU_APPROXIMATIONS, "erf or its tanh approximation")


def _clipped_swiglu_meta(call: Arguments) -> Out:
    x = call.x
    if x.dim() < 2:
        raise OpArgumentError(f"x has {x.dim()} dims; the doc requires more than 1", argument="x")
    index = call.group_index
    if index is not None and (index.dim() != 1 or index.dtype != torch.int64):
        raise OpArgumentError(
            f"group_index is a {index.dtype} tensor of shape {list(index.shape)}; expected 1-D int64 token counts",
            argument="group_index"
        )
    return halved("x", x, call.dim)


def _clipped_swiglu_kernel(call: Arguments) -> torch.Tensor:
    """The doc's steps on x viewed as [pre, cut * after] (``dim`` and everything after it folded into rows'
    width, pre the dims before): the first ``sum(group_index)`` rows are computed; rows past them, which
    the kernel does not write, are zero here."""
    x, dim = call.x, call.dim % call.x.dim()
    pre, cut = math.prod(x.shape[:dim]), x.shape[dim]
    rows = x.to(torch.float32).reshape(pre, cut, -1)
    if call.interleaved:
        a, b = rows[:, 0::2], rows[:, 1::2]
    else:
        a, b = rows[:, : cut // 2], rows[:, cut // 2 :]
    a = a.clamp(max=call.limit)
    b = b.clamp(min=-call.limit, max=call.limit)
    y = a * torch.sigmoid(call.alpha * a) * (b + call.bias)
    if call.group_index is not None:
        y[int(call.group_index.sum()) :] = 0
    shape = list(x.shape)
    shape[dim] //= 2
    return y.reshape(shape).to(x.dtype)


@npu_op(meta=_clipped_swiglu_meta, kernel=_clipped_swiglu_kernel, samples=_activation_samples)
def npu_clipped_swiglu(call: Arguments) -> None:
    """Clipped SwiGLU (GPT-OSS's variant): split ``x`` along ``dim`` into A and B (even/odd elements with
    ``interleaved``, else first/second half), then ``A = min(A, limit)``, ``B = clamp(B, -limit, limit)``,
    ``y = A * sigmoid(alpha * A) * (B + bias)``.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_clipped_swiglu.md (steps 1-5) and
    op-plugin's meta function (``dim`` halved, x's dtype). With ``group_index`` (int64 token counts per
    group) only the first ``sum(group_index)`` rows of x folded to [pre, cut * after] are computed; the
    doc does not define the others, which are zero here. Computed in float32 and rounded once.
    """


# ---------------------------------------------------------------------------------------------
# npu_geglu (and npu_geglu_grad)
# ---------------------------------------------------------------------------------------------


GEGLU_APPROXIMATIONS = {0: "none", 1: "tanh"}  # the API page: 0 selects erf GELU, 1 its tanh form


def _geglu_halves(x: torch.Tensor, dim: int, activate_left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(the half GELU applies to, the other half) of ``x`` split along ``dim``, in float32."""
    first, second = x.to(torch.float32).chunk(2, dim=dim)
    return (first, second) if activate_left else (second, first)


def _geglu_meta(call: Arguments) -> tuple[Out, Out]:
    out = halved("input", call.input, call.dim)
    return out, out


def _geglu_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    gate, up = _geglu_halves(call.input, call.dim, call.activate_left)
    gelu = torch.nn.functional.gelu(gate, approximate=GEGLU_APPROXIMATIONS[call.approximate])
    return (gelu * up).to(call.input.dtype), gelu.to(call.input.dtype)


def _geglu_setup(ctx: object, call: Arguments, output: tuple) -> None:
    ctx.save_for_backward(call.input, output[1])
    ctx.dim, ctx.approximate, ctx.activate_left = call.dim, call.approximate, call.activate_left


def _geglu_backward(ctx: object, grad: torch.Tensor, _grad_gelu: torch.Tensor) -> tuple:
    """op-plugin derivatives.yaml: ``self: npu_geglu_grad(grad, self, result1, dim, approximate,
    activate_left)``; only the product output is differentiable."""
    x, gelu = ctx.saved_tensors
    dx = torch.ops.npu.npu_geglu_grad(grad, x, gelu, ctx.dim, ctx.approximate, ctx.activate_left)
    return dx, None, None, None


def _check_geglu_approximate(approximate: int) -> None:
    require_choice("approximate", approximate, tuple(GEGLU_APPROXIMATIONS), "0: erf GELU, 1: its tanh form")


@npu_op(
    meta=_geglu_meta,
    kernel=_geglu_kernel,
    derivative=Derivative(_geglu_setup, _geglu_backward),
    samples=_activation_samples,
)
def npu_geglu(call: Arguments) -> None:
    """GeGLU: split ``self`` in halves along ``dim``, apply GELU to one and multiply by the other; returns
    ``(GELU(gate) * other, GELU(gate))``. The gate is the second half, or the first with ``activate_left``.

    Source: torch_npu.npu_geglu (Ascend Extension for PyTorch API reference: A and B the two halves along
    ``dim``, ``approximate`` 0 = none, 1 = tanh; both outputs half ``dim``, ``self``'s dtype) and op-plugin's
    schema (``activate_left=False``). Computed in float32 and rounded once. Differentiable through
    ``npu_geglu_grad``.
    """
    _check_geglu_approximate(call.approximate)


def _geglu_grad_meta(call: Arguments) -> Out:
    out = halved("input", call.input, call.dim)
    for name in ("grad_output", "gelu"):
        tensor = getattr(call, name)
        if list(tensor.shape) != list(out.shape):
            raise OpArgumentError(
                f"{name} has shape {list(tensor.shape)}; expected npu_geglu's {list(out.shape)}", argument=name
            )
    return Out(list(call.input.shape), call.input.dtype)


GELU_TANH_CUBIC = 0.044715  # the tanh form's 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))


def _gelu_derivative(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """d GELU(x) / dx: ``Phi(x) + x phi(x)`` for erf GELU, the derivative of the tanh form otherwise."""
    if approximate == "none":
        return 0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    scale = math.sqrt(2 / math.pi)
    t = torch.tanh(scale * (x + GELU_TANH_CUBIC * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * scale * (1 + 3 * GELU_TANH_CUBIC * x * x)


def _geglu_grad_kernel(call: Arguments) -> torch.Tensor:
    gate, up = _geglu_halves(call.input, call.dim, call.activate_left)
    d_gate = call.grad_output.to(torch.float32) * up * _gelu_derivative(gate, GEGLU_APPROXIMATIONS[call.approximate])
    d_up = call.grad_output.to(torch.float32) * call.gelu.to(torch.float32)
    halves = (d_gate, d_up) if call.activate_left else (d_up, d_gate)
    return torch.cat(halves, dim=call.dim).to(call.input.dtype)


def _geglu_grad_samples() -> list[SampleCall]:
    """The gradient of a [4, 6] GeGLU from its two outputs, as npu_geglu returns them."""
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(10))
    out, gelu = torch.ops.npu.npu_geglu(x)
    return [SampleCall((torch.ones_like(out), x, gelu))]


@npu_op(meta=_geglu_grad_meta, kernel=_geglu_grad_kernel, samples=_geglu_grad_samples)
def npu_geglu_grad(call: Arguments) -> None:
    """npu_geglu's gradient of ``self`` from the product's gradient ``grad_output`` and the forward's
    ``gelu`` output: ``grad * GELU'(gate) * other`` on the gate half, ``grad * GELU(gate)`` on the other.
    torch_npu's schema ``npu_geglu_grad(Tensor grad_output, Tensor self, Tensor gelu, int dim=-1,
    int approximate=1, bool activate_left=False) -> Tensor``."""
    _check_geglu_approximate(call.approximate)
