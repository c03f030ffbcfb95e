"""Index-producing ops torch_npu offers beside torch's own: max and min along a dim with int32 indices (and
their gradients), a values-only sort and one-hot encoding. Sources: op-plugin
docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_<name>.md and, where the page is silent, op-plugin's aclops
kernel (op_plugin/ops/aclops/*.cpp) and derivatives.yaml."""

from __future__ import annotations

from typing import Callable

import torch

from ..errors import OpArgumentError
from .registry import Arguments, Derivative, Out, SampleCall, npu_op


def _values_samples() -> list[SampleCall]:
    """A float32 and a bfloat16 matrix, reduced or sorted along a dim."""
    gen = torch.Generator().manual_seed(0)
    return [
        SampleCall((torch.randn(3, 5, generator=gen), 1)),
        SampleCall((torch.randn(4, 6, generator=gen).bfloat16(), 0, True)),
    ]


def _sort_samples() -> list[SampleCall]:
    return [SampleCall((torch.randn(3, 5, generator=torch.Generator().manual_seed(1)),), {}),
            SampleCall((torch.randn(2, 7, generator=torch.Generator().manual_seed(2)), -1, True))]


def _one_hot_samples() -> list[SampleCall]:
    return [SampleCall((torch.tensor([0, 2, 1, 5], dtype=torch.int32), -1, 4)),
            SampleCall((torch.tensor([[1, 0], [2, 2]]), -1, 3, 2.5, -1))]

INDEX_DTYPE = torch.int32  # op-plugin MaxV1KernelNpu.cpp / MinV1KernelNpu.cpp allocate the indices as kInt


# ---------------------------------------------------------------------------------------------
# npu_max, npu_min (and their backward ops)
# ---------------------------------------------------------------------------------------------


def _reduced_shape(call: Arguments) -> list[int]:
    x, dim = call.input, call.dim
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise OpArgumentError(f"dim={dim} is out of range for self of shape {list(x.shape)}", argument="dim")
    shape = list(x.shape)
    if call.keepdim:
        shape[dim] = 1
    else:
        del shape[dim]
    return shape


def _extreme_meta(call: Arguments) -> tuple[Out, Out]:
    shape = _reduced_shape(call)
    return Out(shape, call.input.dtype), Out(shape, INDEX_DTYPE)


def _extreme_kernel(reduce: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> Callable[[Arguments], tuple]:
    """The kernel of npu_max or npu_min: torch's reduction (first index of a tie), indices as int32."""

    def kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = reduce(call.input, dim=call.dim, keepdim=call.keepdim)
        return values, indices.to(INDEX_DTYPE)

    return kernel


def _extreme_setup(ctx: object, call: Arguments, output: tuple) -> None:
    ctx.dim, ctx.keepdim, ctx.sizes = call.dim, call.keepdim, list(call.input.shape)
    ctx.save_for_backward(output[1])


def _extreme_grad(backward: str) -> Callable[..., tuple]:
    """op-plugin derivatives.yaml: ``self: npu_max_backward(grad, dim, indices, self.sym_sizes(), keepdim)``
    (npu_min_backward for npu_min); the indices get no gradient."""

    def grad(ctx: object, grad_values: torch.Tensor, _grad_indices: torch.Tensor) -> tuple:
        (indices,) = ctx.saved_tensors
        return getattr(torch.ops.npu, backward)(grad_values, ctx.dim, indices, ctx.sizes, ctx.keepdim), None, None

    return grad


def _extreme_op(reduce: Callable[..., tuple[torch.Tensor, torch.Tensor]], backward: str) -> dict:
    """The declaration of npu_max or npu_min: its reduction and the backward op its gradient calls."""
    return {
        "meta": _extreme_meta,
        "kernel": _extreme_kernel(reduce),
        "derivative": Derivative(_extreme_setup, _extreme_grad(backward)),
        "samples": _values_samples,
    }


@npu_op(**_extreme_op(torch.max, "npu_max_backward"))
def npu_max(call: Arguments) -> None:
    """The largest value of ``self`` along ``dim`` and its index (int32), as ``torch.max(self, dim)``.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_max.md; op_plugin/ops/aclops/
    MaxV1KernelNpu.cpp (int32 indices). Ties give the first index (torch's CPU rule; the page does not say).
    Differentiable through ``npu_max_backward`` (op-plugin derivatives.yaml).
    """


@npu_op(**_extreme_op(torch.min, "npu_min_backward"))
def npu_min(call: Arguments) -> None:
    """The smallest value of ``self`` along ``dim`` and its index (int32), as ``torch.min(self, dim)``.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_min.md; op_plugin/ops/aclops/
    MinV1KernelNpu.cpp (int32 indices). Differentiable through ``npu_min_backward``.
    """


def _extreme_backward_meta(call: Arguments) -> Out:
    sizes = list(call.sizes)
    if list(call.grad.shape) != list(call.indices.shape):
        raise OpArgumentError(
            f"grad {list(call.grad.shape)} and indices {list(call.indices.shape)} differ", argument="grad"
        )
    return Out(sizes, call.grad.dtype)


def _extreme_backward_kernel(call: Arguments) -> torch.Tensor:
    """The gradient lands on the chosen element of each reduced line, zero elsewhere (MaxV1KernelNpu.cpp
    squeezes a kept dim, then scatters)."""
    dim = call.dim % len(call.sizes)
    grad, indices = call.grad, call.indices.to(torch.int64)
    if not call.keepdim:
        grad, indices = grad.unsqueeze(dim), indices.unsqueeze(dim)
    return grad.new_zeros(list(call.sizes)).scatter(dim, indices, grad)


def _extreme_backward_samples() -> list[SampleCall]:
    """The gradient of a max or min over dim 1 of a [3, 5] tensor: one index per row."""
    indices = torch.randint(0, 5, (3,), generator=torch.Generator().manual_seed(3))
    return [SampleCall((torch.rand(3, generator=torch.Generator().manual_seed(4)), 1, indices, [3, 5], False)),
            SampleCall((torch.rand(3, 1, generator=torch.Generator().manual_seed(5)), 1, indices.unsqueeze(1), [3, 5], True))]


@npu_op(meta=_extreme_backward_meta, kernel=_extreme_backward_kernel, samples=_extreme_backward_samples)
def npu_max_backward(call: Arguments) -> None:
    """npu_max's gradient: ``grad`` placed at each line's ``indices``, zeros elsewhere, in ``sizes``. torch_npu's
    schema ``npu_max_backward(Tensor grad, int dim, Tensor indices, SymInt[] sizes, bool keepdim) -> Tensor``."""


@npu_op(meta=_extreme_backward_meta, kernel=_extreme_backward_kernel, samples=_extreme_backward_samples)
def npu_min_backward(call: Arguments) -> None:
    """npu_min's gradient, as :func:`npu_max_backward`. torch_npu's schema ``npu_min_backward(Tensor grad,
    int dim, Tensor indices, SymInt[] sizes, bool keepdim) -> Tensor``."""


# ---------------------------------------------------------------------------------------------
# npu_sort_v2, npu_one_hot
# ---------------------------------------------------------------------------------------------


def _sort_meta(call: Arguments) -> Out:
    x = call.input
    if x.dim() == 0:
        raise OpArgumentError("input is a scalar; npu_sort_v2 sorts along its last dim", argument="input")
    return Out(list(x.shape), x.dtype)


def _sort_kernel(call: Arguments) -> torch.Tensor:
    return torch.sort(call.input, dim=-1, descending=call.descending).values


@npu_op(meta=_sort_meta, kernel=_sort_kernel, samples=_sort_samples)
def npu_sort_v2(call: Arguments) -> None:
    """``self`` sorted along its last dim (ascending, or descending with ``descending=True``), values only.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_sort_v2.md: only the last dim is
    supported, so another ``dim`` is refused.
    """
    if call.dim != -1:
        raise OpArgumentError(
            f"dim={call.dim} is not implemented; npu_sort_v2 sorts only the last dim (dim=-1)", argument="dim"
        )


def _one_hot_meta(call: Arguments) -> Out:
    x = call.input
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise OpArgumentError(f"input has dtype {x.dtype}; expected integer class indices", argument="input")
    return Out([*x.shape, call.depth], torch.float32)


def _one_hot_kernel(call: Arguments) -> torch.Tensor:
    classes = torch.arange(call.depth)
    hot = call.input.to(torch.int64).unsqueeze(-1) == classes
    on, off = torch.tensor(float(call.on_value)), torch.tensor(float(call.off_value))
    return torch.where(hot, on, off)


@npu_op(meta=_one_hot_meta, kernel=_one_hot_kernel, samples=_one_hot_samples)
def npu_one_hot(call: Arguments) -> None:
    """One-hot encoding of integer indices: a float32 tensor ``self.shape + [depth]`` holding ``on_value``
    where the last index equals ``self``'s value and ``off_value`` elsewhere (an index outside
    ``[0, depth)`` gives a row of ``off_value``).

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_one_hot.md (example: ``depth=5``
    on ``[5, 3, 2, 1]`` gives an all-zero first row) and op_plugin/ops/aclops/OnehotNpu.cpp (float32
    output ``self.shape + [depth]``; ``num_classes`` is the OneHotD axis). Only the default axis
    ``num_classes=-1`` is implemented: the aclops output shape puts the new dim last whatever the axis.
    """
    if call.num_classes != -1:
        raise OpArgumentError(
            f"num_classes={call.num_classes} is not implemented; only -1 (the one-hot axis last) is",
            argument="num_classes"
        )
    if call.depth < 1:
        raise OpArgumentError(f"depth={call.depth}; it must be at least 1 (the number of classes)", argument="depth")
