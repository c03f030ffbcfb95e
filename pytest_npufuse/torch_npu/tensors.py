"""Tensor creation and dtype casts: ``npu_dtype_cast`` (and its backward) and ``empty_with_format``.

Both are older torch_npu spellings of torch operations (their pages say to use ``tensor.to()`` and
``torch.empty`` instead) that model code still calls: vLLM-Ascend casts with ``npu_dtype_cast`` and
allocates its KV caches in FRACTAL_NZ with ``empty_with_format``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import OpArgumentError
from .checks import dtype_of_code
from .formats import StorageDesc, record_format, storage_format
from .registry import Arguments, Derivative, Out, SampleCall, npu_op


# ---------------------------------------------------------------------------------------------
# npu_dtype_cast (and npu_dtype_cast_backward)
# ---------------------------------------------------------------------------------------------


def _target_dtype(name: str, value: Any) -> torch.dtype:
    """The torch.dtype an ``int`` dtype argument names: a torch.dtype, or its ScalarType number as the
    dispatcher hands it to a kernel. torch_npu's own codes of formats torch has no dtype for
    (``torch_npu.hifloat8``) are refused: the CPU model has no tensor of them."""
    dtype = dtype_of_code(value)
    if not isinstance(dtype, torch.dtype):
        raise OpArgumentError(f"{name}={value} names a format torch has no dtype for; the CPU model casts between "
                              "torch dtypes only")
    return dtype


def _dtype_cast_meta(call: Arguments) -> Out:
    if call.input_dtype is not None and _target_dtype("input_dtype", call.input_dtype) != call.input.dtype:
        raise OpArgumentError(
            f"input_dtype={call.input_dtype} differs from input's {call.input.dtype}; it names the format a "
            "tensor of another torch dtype stands for (hifloat8 in uint8), which the CPU model does not cast"
        )
    return Out(list(call.input.shape), _target_dtype("dtype", call.dtype))


def _dtype_cast_kernel(call: Arguments) -> torch.Tensor:
    return call.input.to(_target_dtype("dtype", call.dtype))


def _dtype_cast_setup(ctx: Any, call: Arguments, output: torch.Tensor) -> None:
    ctx.input_dtype = call.input.dtype


def _dtype_cast_grad(ctx: Any, grad: torch.Tensor) -> tuple:
    """op-plugin derivatives.yaml: ``self: npu_dtype_cast_backward(grad, self.scalar_type(), dtype, input_dtype)``."""
    return torch.ops.npu.npu_dtype_cast_backward(grad, ctx.input_dtype), None, None


def _dtype_cast_samples() -> list[SampleCall]:
    """float32 to float16 (the page's FakeTensor example), to int32 (its first example) and bfloat16 to float32."""
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    return [SampleCall((x, torch.float16)), SampleCall((x, torch.int32)), SampleCall((x.bfloat16(), torch.float32))]


@npu_op(meta=_dtype_cast_meta, kernel=_dtype_cast_kernel, derivative=Derivative(_dtype_cast_setup, _dtype_cast_grad),
        samples=_dtype_cast_samples)
def npu_dtype_cast(call: Arguments) -> None:
    """``input`` converted to ``dtype``, as ``input.to(dtype)`` (the page: the op is to be replaced by it).

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-npu_dtype_cast.md (semantics, examples:
    ``[0, 0.5, -1.]`` to int32 is ``[0, 0, -1]``, truncation toward zero as torch's cast), schema from
    op_plugin_functions.yaml (``int dtype``: a torch.dtype or its ScalarType number; ``input_dtype``, the
    format a tensor of another dtype stands for, only as the input's own dtype) and derivatives.yaml (the
    gradient is cast back to the input's dtype by ``npu_dtype_cast_backward``, itself differentiable, so a
    double backward works as torch_npu's test_npu_dtype_cast_double_backward expects).
    """


def _dtype_cast_backward_meta(call: Arguments) -> Out:
    return Out(list(call.grad.shape), call.dtype)


def _dtype_cast_backward_kernel(call: Arguments) -> torch.Tensor:
    return call.grad.to(call.dtype)


def _dtype_cast_backward_setup(ctx: Any, call: Arguments, output: torch.Tensor) -> None:
    ctx.grad_dtype = call.grad.dtype


def _dtype_cast_backward_grad(ctx: Any, grad: torch.Tensor) -> tuple:
    """A cast's derivative is a cast back: the second-order gradient returns to the first gradient's dtype."""
    return torch.ops.npu.npu_dtype_cast_backward(grad, ctx.grad_dtype), None, None, None


def _dtype_cast_backward_samples() -> list[SampleCall]:
    grad = torch.randn(4, 6, generator=torch.Generator().manual_seed(0)).half()
    return [SampleCall((grad, torch.float32)), SampleCall((grad.float(), torch.bfloat16))]


@npu_op(meta=_dtype_cast_backward_meta, kernel=_dtype_cast_backward_kernel,
        derivative=Derivative(_dtype_cast_backward_setup, _dtype_cast_backward_grad),
        samples=_dtype_cast_backward_samples)
def npu_dtype_cast_backward(call: Arguments) -> None:
    """The gradient of :func:`npu_dtype_cast`: ``grad`` cast to ``dtype``, the forward input's dtype.

    Source: op-plugin op_plugin_functions.yaml and derivatives.yaml (npu_dtype_cast). ``grad_dtype`` and
    ``input_dtype`` pass on the forward's format codes, which change no value of a torch dtype.
    """


# ---------------------------------------------------------------------------------------------
# empty_with_format
# ---------------------------------------------------------------------------------------------


def _empty_dtype(call: Arguments) -> torch.dtype:
    return torch.get_default_dtype() if call.dtype is None else call.dtype


def _empty_with_format_meta(call: Arguments) -> Out:
    if any(size < 0 for size in call.size):
        raise OpArgumentError(f"size={list(call.size)} has a negative size")
    storage_format(tuple(call.size), call.acl_format)  # refuses a format torch_npu does not know
    return Out(list(call.size), _empty_dtype(call))


def _empty_with_format_kernel(call: Arguments) -> torch.Tensor:
    """Zeros, not uninitialised memory, so that everything the model computes is deterministic; the storage
    records the format torch_npu gives a new tensor of this shape in ``acl_format``."""
    size = tuple(call.size)
    created = torch.zeros(size, dtype=_empty_dtype(call))
    return record_format(created, StorageDesc(storage_format(size, call.acl_format), size))


def _empty_with_format_samples() -> list[SampleCall]:
    """The page's example (a float32 [2, 3]) and a bfloat16 KV-cache block in FRACTAL_NZ (29)."""
    return [SampleCall(((2, 3),), {"dtype": torch.float32}),
            SampleCall(([4, 16, 32],), {"dtype": torch.bfloat16, "acl_format": 29})]


@npu_op(meta=_empty_with_format_meta, kernel=_empty_with_format_kernel, samples=_empty_with_format_samples)
def empty_with_format(call: Arguments) -> None:
    """A new ``size`` tensor of ``dtype`` (the default dtype when None) whose storage is in ``acl_format``.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/(beta)torch_npu-empty_with_format.md (semantics; the page
    says to use ``torch.empty`` instead) and Ascend/pytorch torch_npu/csrc/aten/npu_native_functions.yaml
    (schema). The values are zeros rather than uninitialised memory, so the model stays deterministic; the
    format is the one torch_npu gives a new tensor of that shape (``torch_npu.get_npu_format`` reads it:
    FRACTAL_NZ needs 2 dims, ...; :func:`~.formats.storage_format`). ``device`` ``"npu"`` is the one
    modeled NPU, the CPU; ``layout`` strided only; ``pin_memory`` and ``base_addr_aligned_kb`` (the
    allocation's alignment) change no value.
    """
    if call.layout not in (None, torch.strided):
        raise OpArgumentError(f"layout={call.layout} is not implemented; expected torch.strided")
