"""Eager matmuls on the modeled NPU compute as its Cube does, the same as in a compiled graph.

On a device, ``torch.matmul`` on fp16/bf16 tensors runs the same aclnn Cube kernel eagerly as inside an
aclgraph or GE graph, so eager and compiled results agree bit for bit (TorchAir's tests compare them with
``torch.allclose`` at its default tolerances). The model computes a graph's low-precision matmuls with
the Cube's semantics (fp32 products and accumulation, one rounding: :data:`~pytest_npufuse.execute.graph.CUBE_KERNELS`),
while torch's CPU fp16 kernel sums in another order and differs in the last bit. Under the shim every
tensor is a tensor of the modeled NPU, so the shim gives torch's CPU ``mm``, ``bmm``, ``addmm`` and
``baddbmm`` the Cube's semantics for fp16 or bf16 operands (and bias) of one dtype; anything else runs torch's own
kernel (through the overload's ``out`` form, which shares it). Undone with the shim.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from ..execute.graph import CUBE_KERNELS
from .undo import on_undo

_ATEN = torch.ops.aten
_LOW_PRECISION = (torch.float16, torch.bfloat16)
# The overloads that reach the CPU kernels (torch.matmul and F.linear decompose into them), by name.
_OVERLOADS = ("mm", "bmm", "addmm", "baddbmm")


def _cube_or_torch(name: str) -> Callable[..., torch.Tensor]:
    """The CPU kernel of ``aten::<name>``: the Cube's for two same-dtype fp16/bf16 operands, else
    torch's own (its ``out`` overload)."""
    overload = getattr(_ATEN, name)
    cube, out = CUBE_KERNELS[overload.default], overload.out
    first = 0 if name in ("mm", "bmm") else 1  # addmm / baddbmm: the bias comes first, and must match too

    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        a = args[first]
        if a.dtype in _LOW_PRECISION and all(t.dtype == a.dtype for t in args[: first + 2]):
            return cube(*args, **kwargs)
        return out(*args, **kwargs, out=a.new_empty(0))

    return kernel


def install_cube_matmuls() -> None:
    """Register :func:`_cube_or_torch` as the CPU kernel of each of :data:`_OVERLOADS`."""
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # torch warns that a CPU kernel is overridden: that is the point
        warnings.simplefilter("ignore", UserWarning)
        for name in _OVERLOADS:
            library.impl(name, _cube_or_torch(name), "CPU")
    on_undo(library._destroy)
