"""Layout ops torch_npu offers beside torch's own: permute, expand, slice and pad, each into a new contiguous
tensor (on the device each is one TBE kernel, Transpose, BroadcastTo, Slice or Pad, where torch would make
a view). Sources: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_<name>.md and, where the page
is silent, op-plugin's aclops kernel (op_plugin/ops/aclops/<Name>KernelNpu.cpp)."""

from __future__ import annotations

import torch

from ..errors import OpArgumentError
from .registry import Arguments, Out, SampleCall, npu_op


def _sample_tensor() -> torch.Tensor:
    return torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))


def _transpose_samples() -> list[SampleCall]:
    return [SampleCall((_sample_tensor(), [2, 0, 1])), SampleCall((_sample_tensor().bfloat16(), [1, 0, 2], False))]


def _broadcast_samples() -> list[SampleCall]:
    return [SampleCall((_sample_tensor()[:, :1], [2, 3, 4])), SampleCall((_sample_tensor()[0], [5, 3, 4]))]


def _slice_samples() -> list[SampleCall]:
    return [SampleCall((_sample_tensor(), [0, 1, 1], [2, 2, 3]))]


def _pad_samples() -> list[SampleCall]:
    return [SampleCall((_sample_tensor(), [1, 0, 0, 2, 1, 1])), SampleCall((_sample_tensor(), [1, 1]))]


def _permuted(call: Arguments) -> list[int]:
    """The output shape of npu_transpose: ``perm`` must name every dim of ``self`` once."""
    rank = call.input.dim()
    axes = [axis % rank for axis in call.perm] if rank else list(call.perm)
    if sorted(axes) != list(range(rank)):
        raise OpArgumentError(
            f"perm={list(call.perm)} is not a permutation of the {rank} dims of self", argument="perm"
        )
    return [call.input.shape[axis] for axis in call.perm]


def _transpose_meta(call: Arguments) -> Out:
    return Out(_permuted(call), call.input.dtype)


def _transpose_kernel(call: Arguments) -> torch.Tensor:
    return call.input.permute(list(call.perm)).contiguous()


@npu_op(meta=_transpose_meta, kernel=_transpose_kernel, samples=_transpose_samples)
def npu_transpose(call: Arguments) -> None:
    """``self`` with its dims permuted by ``perm``, as a new contiguous tensor (torch's ``permute`` then
    ``contiguous``). ``require_contiguous=False`` only spares the device a copy of an input it already
    knows to be contiguous or transposed; the values are the same.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_transpose.md.
    """


def _broadcast_meta(call: Arguments) -> Out:
    shape, size = list(call.input.shape), list(call.size)
    extra = len(size) - len(shape)
    if extra < 0 or any(old not in (1, new) for old, new in zip(shape, size[extra:])):
        raise OpArgumentError(
            f"size={size} cannot hold self of shape {shape}: each dim of self must be 1 or equal the "
            "matching trailing dim of size (new dims go in front)", argument="size"
        )
    return Out(size, call.input.dtype)


def _broadcast_kernel(call: Arguments) -> torch.Tensor:
    return call.input.expand(list(call.size)).contiguous()


@npu_op(meta=_broadcast_meta, kernel=_broadcast_kernel, samples=_broadcast_samples)
def npu_broadcast(call: Arguments) -> None:
    """``self`` expanded to ``size`` (its size-1 dims repeated, new dims added in front), as a new
    contiguous tensor.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_broadcast.md.
    """


def _slice_meta(call: Arguments) -> Out:
    shape, offsets, size = list(call.input.shape), list(call.offsets), list(call.size)
    if len(offsets) != len(shape) or len(size) != len(shape):
        raise OpArgumentError(
            f"offsets={offsets} and size={size} need one entry per dim of self {shape}", argument="offsets"
        )
    for dim, (start, length, extent) in enumerate(zip(offsets, size, shape)):
        if start < 0 or length < 0 or start + length > extent:
            raise OpArgumentError(
                f"offsets[{dim}]={start} with size[{dim}]={length} leaves dim {dim} of self (size {extent})",
                argument="offsets"
            )
    return Out(size, call.input.dtype)


def _slice_kernel(call: Arguments) -> torch.Tensor:
    window = tuple(slice(start, start + length) for start, length in zip(call.offsets, call.size))
    return call.input[window].contiguous()


@npu_op(meta=_slice_meta, kernel=_slice_kernel, samples=_slice_samples)
def npu_slice(call: Arguments) -> None:
    """The block of ``self`` starting at ``offsets`` with shape ``size``, as a new contiguous tensor.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_slice.md (one offset and one size
    per dim; no gradient). An offset or size that leaves the tensor is refused.
    """


def _pad_pairs(call: Arguments) -> list[tuple[int, int]]:
    """(before, after) per dim, in dim order: op-plugin PadKernelNpu.cpp extends ``paddings`` with zeros to
    two entries per dim and hands the list to the Pad kernel as ``[[before_0, after_0], ...]``."""
    rank, paddings = call.input.dim(), list(call.paddings)
    if len(paddings) > 2 * rank or any(amount < 0 for amount in paddings):
        raise OpArgumentError(
            f"paddings={paddings}: at most two non-negative entries (before, after) per dim of input ({rank} dims)",
            argument="paddings"
        )
    paddings += [0] * (2 * rank - len(paddings))
    return [(paddings[2 * dim], paddings[2 * dim + 1]) for dim in range(rank)]


def _pad_meta(call: Arguments) -> Out:
    shape = [extent + before + after for extent, (before, after) in zip(call.input.shape, _pad_pairs(call))]
    return Out(shape, call.input.dtype)


def _pad_kernel(call: Arguments) -> torch.Tensor:
    pairs = _pad_pairs(call)
    flat = [amount for before, after in reversed(pairs) for amount in (before, after)]
    return torch.nn.functional.pad(call.input, flat)


@npu_op(meta=_pad_meta, kernel=_pad_kernel, samples=_pad_samples)
def npu_pad(call: Arguments) -> None:
    """``input`` surrounded by zeros: ``paddings[2d]`` before and ``paddings[2d + 1]`` after dim ``d``.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_pad.md (its example pads a [1, 4]
    tensor with ``[1, 1, 1, 1]`` to [3, 6]) and op_plugin/ops/aclops/PadKernelNpu.cpp (missing entries are
    0). Negative paddings are refused.
    """
