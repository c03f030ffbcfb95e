"""Fixed-order float32 arithmetic shared by the kernels: results never depend on the thread count.

torch.sum, torch.matmul (MKL) and even torch.rsqrt/torch.sigmoid give different bits with a different
thread count on CPU, because they split reductions across threads or send tail elements to a scalar
path.  The float kernels therefore use only element-wise IEEE operations (+, -, *, /, sqrt, which are
correctly rounded on every code path), exp and log (vector and scalar paths agree, checked on this
torch build by the thread-count tests), max, stable sorts and copies, and build every sum as a fixed
pairwise tree.
"""

from __future__ import annotations

from typing import Optional

import torch

INT8_MIN = -128
INT8_MAX = 127
SUM_CHUNK = 64  # reduced elements summed as one pairwise tree before the sequential running sum
PRODUCT_BLOCK_ELEMENTS = 1 << 22  # bound on the temporary products tensor of fixed_matmul

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


def fixed_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float32 ``a [..., m, k] @ b [..., k, n]`` (same batch dims) in a fixed summation order.

    Each output element sums its k products in chunks of SUM_CHUNK: a pairwise tree inside a
    chunk, then chunk after chunk.  The order depends on k only.  Rows are processed in blocks
    so the temporary products stay below PRODUCT_BLOCK_ELEMENTS elements.
    """
    *batch, m, k = a.shape
    n = b.shape[-1]
    if 0 in (m, k, n) or 0 in batch:
        return a.new_zeros(*batch, m, n)
    a3 = a.reshape(-1, m, k)
    b3 = b.reshape(-1, k, n)
    rows_per_block = max(1, PRODUCT_BLOCK_ELEMENTS // max(1, a3.shape[0] * SUM_CHUNK * n))
    blocks = []
    for r0 in range(0, m, rows_per_block):
        rows = a3[:, r0 : r0 + rows_per_block]
        acc: Optional[torch.Tensor] = None
        for k0 in range(0, k, SUM_CHUNK):
            products = rows[:, :, k0 : k0 + SUM_CHUNK, None] * b3[:, None, k0 : k0 + SUM_CHUNK, :]
            partial = pairwise_sum(products, dim=2)
            acc = partial if acc is None else acc + partial
        blocks.append(acc)
    return torch.cat(blocks, dim=1).reshape(*batch, m, n)


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

