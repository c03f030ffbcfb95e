"""Fixed-order float32 arithmetic shared by the kernels: results never depend on the thread count.

torch.sum, torch.matmul (MKL) and even torch.rsqrt/torch.sigmoid give different bits with a different
thread count on CPU, because they split reductions across threads or send tail elements to a scalar
path.  The float kernels therefore use only element-wise IEEE operations (+, -, *, /, sqrt, which are
correctly rounded on every code path), exp and log (vector and scalar paths agree, checked on this
torch build by the thread-count tests), max, stable sorts and copies, and build every sum as a fixed
pairwise tree.  Matrix products go through :mod:`pytest_npufuse.numerics.exact` instead (exact integer products,
the Cube's fp32 accumulation on single-threaded BLAS).
"""

from __future__ import annotations

import torch

INT8_MIN = -128
INT8_MAX = 127

def round_to_int8(values: torch.Tensor) -> torch.Tensor:
    """Round float32 values half-to-even and saturate them to int8.

    Half-to-even (``rint``) is the rounding mode the CANN golden models use for int8
    quantisation; saturation follows from the int8 output type.
    """
    return torch.round(values).clamp_(INT8_MIN, INT8_MAX).to(torch.int8)


def pairwise_sum(values: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """Sum along ``dim`` as a fixed pairwise tree: pad with zeros to a power of two, add halves.

    Every step is an element-wise add, so the order of additions is a function of the length
    alone, never of the thread count.
    """
    dim = dim % values.dim()
    length = values.shape[dim]
    width = 1 << max(0, (length - 1).bit_length())
    if width != length:
        pad_shape = list(values.shape)
        pad_shape[dim] = width - length
        values = torch.cat([values, values.new_zeros(pad_shape)], dim=dim)
    while values.shape[dim] > 1:
        half = values.shape[dim] // 2
        values = values.narrow(dim, 0, half) + values.narrow(dim, half, half)
    return values if keepdim else values.squeeze(dim)


def softmax(values: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim: exp(v - rowmax) / pairwise sum (float32, fixed order)."""
    exps = torch.exp(values - values.amax(dim=-1, keepdim=True))
    return exps / pairwise_sum(exps, dim=-1, keepdim=True)


def sigmoid(values: torch.Tensor) -> torch.Tensor:
    """1 / (1 + exp(-v)); torch.sigmoid is avoided because its tail path rounds differently."""
    return 1.0 / (1.0 + torch.exp(-values))


def top_indices(values: torch.Tensor, count: int) -> torch.Tensor:
    """Indices of the ``count`` largest values of the last dim, largest first, ties to the lower index."""
    return torch.sort(values, dim=-1, descending=True, stable=True).indices[..., :count]


# ---------------------------------------------------------------------------------------------
# npu_rms_norm


def swiglu(values: torch.Tensor, activate_left: bool, dim: int = -1) -> torch.Tensor:
    """Swish of the activated half times the other half along ``dim``; activate_left picks the left half."""
    left, right = values.chunk(2, dim=dim)
    gate, linear = (left, right) if activate_left else (right, left)
    return gate / (1.0 + torch.exp(-gate)) * linear

