"""Exact, fast numeric helpers that every reference kernel uses for its products.

Two kinds of product appear in the modeled NPU's kernels, and torch's CPU kernels for both are a poor
fit: ``torch._int_mm`` and torch's bf16 matmul have no fast path on CPUs without AVX512-VNNI/AMX (about
100x slower than fp32 BLAS on a plain AVX2 machine), and they do not describe the Cube's arithmetic.
This module computes them through fp32 BLAS, where the result is either provably exact (int8) or is
exactly the modeled semantics (fp32 accumulation, one rounding):

* :func:`int_matmul` -- int8 x int8 -> int32, bit-exact with int32 wrap-around.
* :func:`cube_matmul`, :func:`cube_addmm`, :func:`cube_baddbmm` -- the modeled Cube for fp16/bf16/fp32
  inputs: each input is widened to fp32 (exact), products and their accumulation are fp32, and the
  result is rounded once to the output dtype.  On the device, the Cube multiplies fp16/bf16 operands
  and accumulates in fp32 in L0C, and the fixpipe converts the fp32 accumulator to the output dtype on
  the way out (CANN "Matmul" / "Mmad" Ascend C API docs: ``A/B half or bfloat16_t, C float``; torch_npu
  ``npu_quant_matmul`` and ``npu_grouped_matmul`` docs describe the same fp32 intermediate).  The
  order in which fp32 partial sums are added is the BLAS library's, so these results can differ in the
  last bit from torch's own CPU bf16/fp16 kernel (which accumulates differently) and from a real NPU
  (whose accumulation order is not documented).

Determinism: integer results are exact, so they do not depend on BLAS, threads or machine.  Float
results are computed by single-threaded BLAS, so on one machine they depend only on the inputs'
values and shapes -- never on ``torch.get_num_threads()`` (a multi-threaded BLAS may split k across
threads and change the summation order).  Across machines the fp32 summation order of the BLAS build
and CPU (AVX2 vs AVX512 kernels) may differ, which can change the last fp32 bit and therefore,
rarely, the rounded output.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Optional

import torch

from ..errors import OpArgumentError, OpTypeError

INT8_K_CHUNK = 1024
"""Largest k summed in one fp32 BLAS call by int_matmul.

Proof of exactness: every int8 value v has |v| <= 128, so every product has |a*b| <= 2**14, and any
partial sum of at most 1024 products is an integer with absolute value <= 1024 * 2**14 = 2**24.  fp32
represents every integer of absolute value <= 2**24 exactly, so every addition (and every fused
multiply-add) BLAS performs on such a chunk -- in whatever order, blocking or thread split -- has an
exactly representable result and incurs no rounding.  The chunk's fp32 result is thus the exact
integer dot product.
"""

INT32_SAFE_K = (2**31 - 1) // 2**14
"""Largest k for which no int8 dot product can leave the int32 range (k * 2**14 <= 2**31 - 1).

Up to this k the chunk results are accumulated in int32 without any overflow; beyond it they are
accumulated exactly in int64 and reduced modulo 2**32 at the end, which is what an int32 accumulator
that wraps around computes (addition modulo 2**32 is associative, so the order does not matter).
"""

CUBE_INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
CUBE_BLOCK_BYTES = 8 << 20
"""Bound on the fp32 copy of the right operand made at once (by every helper here): wider operands are
done in column blocks so a large weight never exists in fp32 as a whole.  The bound is small on purpose:
a block this size is served again and again from the allocator's heap and stays in the CPU's cache,
while a block above glibc's largest mmap threshold (32 MB) is a fresh mapping each time, and the page
faults of zero-filling it cost more than the product (a 48 x 7168 x 129280 LM head: 7.6 s with 64 MB
blocks, 2.7 s with 8 MB, on one core).  The block width is a function of the shapes alone, so the bits
stay deterministic (BLAS may order a block's sums differently from a whole matrix's); integer products
are exact whatever the blocks."""


_Spare = dict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor]


def _widen(tile: torch.Tensor, spare: _Spare) -> torch.Tensor:
    """``tile.to(torch.float32)`` written into a buffer that the blocks of one product of the same shape and
    strides share (``spare``, by shape and strides): the same values in the same layout, since ``empty_like``
    lays a tensor out as ``to`` does, so the BLAS call and its bits are the same. A fresh fp32 block per
    tile cost twice the copy into a warm buffer (a strided int8 tile: 4.2 ms against 1.9 ms per 2M values). An
    fp32 tile is returned as it is, as ``to`` returns it: a copy would hand BLAS another leading dimension."""
    if tile.dtype == torch.float32:
        return tile
    key = (tuple(tile.shape), tuple(tile.stride()))
    buffer = spare.get(key)
    if buffer is None:
        buffer = spare[key] = torch.empty_like(tile, dtype=torch.float32)
    return buffer.copy_(tile)


def int_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact int8 x int8 -> int32 ``a @ b`` with int32 wrap-around, batched and broadcast like ``torch.matmul``.

    k is cut into chunks of at most :data:`INT8_K_CHUNK` and the columns into blocks of at most
    :data:`CUBE_BLOCK_BYTES` of fp32; each (chunk, block) tile is one fp32 BLAS product, exact by the
    argument in :data:`INT8_K_CHUNK`'s docstring.  The tile results (integers of absolute value <= 2**24,
    converted to int32 exactly) are added in int32 when k <= :data:`INT32_SAFE_K` (no overflow is
    possible) and in int64 otherwise, then wrapped modulo 2**32 into int32.  The result equals the
    int32-accumulated product bit for bit (what ``torch._int_mm`` gives on a CPU with AVX512-VNNI or AMX;
    its AVX2-only kernel returns other values), at fp32 BLAS speed on any CPU.
    """
    _require_dtypes("int_matmul", a, b, (torch.int8,))
    left, right, squeeze = _as_matrices(a, b)
    _require_inner("int_matmul", left, right)
    k, n = right.shape[-2:]
    batch = torch.broadcast_shapes(left.shape[:-2], right.shape[:-2])
    accumulator = torch.int32 if k <= INT32_SAFE_K else torch.int64
    total = torch.zeros(*batch, left.shape[-2], n, dtype=accumulator)
    columns = _block_columns(min(k, INT8_K_CHUNK), right.shape[:-2])
    spare: _Spare = {}
    for start in range(0, k, INT8_K_CHUNK):
        left32 = left[..., start : start + INT8_K_CHUNK].to(torch.float32)
        rows = right[..., start : start + INT8_K_CHUNK, :]
        for column in range(0, n, columns):
            tile = _widen(rows[..., column : column + columns], spare)
            total[..., column : column + columns] += torch.matmul(left32, tile).to(accumulator)
    return _squeeze(wrap_to_int32(total), squeeze)


def _block_columns(k: int, batch: Sequence[int]) -> int:
    """Columns of a right operand with ``k`` rows (per batch entry) whose fp32 copy fits :data:`CUBE_BLOCK_BYTES`."""
    return max(1, CUBE_BLOCK_BYTES // (4 * max(1, k) * max(1, math.prod(batch))))


def wrap_to_int32(values: torch.Tensor) -> torch.Tensor:
    """Integers reduced modulo 2**32 into int32, as an int32 register that wraps around holds them."""
    if values.dtype == torch.int32:
        return values
    low = values.to(torch.int64) & 0xFFFFFFFF
    return torch.where(low >= 2**31, low - 2**32, low).to(torch.int32)


def cube_matmul(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``a @ b`` as the modeled Cube computes it: fp32 products and accumulation, one rounding.

    fp16/bf16/fp32 inputs (both the same dtype) are widened to fp32, multiplied and summed by
    single-threaded fp32 BLAS, and the fp32 result is rounded once to ``out_dtype`` (default: the
    inputs' dtype).  Batched and broadcast like ``torch.matmul``.  See the module docstring for what
    this guarantees and where it can differ from torch's CPU kernels.
    """
    return _cube(None, a, b, 1, 1, out_dtype, "cube_matmul")


def cube_addmm(
    bias: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    beta: float = 1,
    alpha: float = 1,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """``beta * bias + alpha * (a @ b)`` with the bias added in fp32 before the one final rounding.

    This is the Cube with its bias fed into the fp32 accumulator (the Mmad bias table / fixpipe add),
    so the product is never rounded on its own.  ``bias`` broadcasts against the product like
    ``torch.addmm``'s ``self``; ``a`` and ``b`` follow :func:`cube_matmul`.
    """
    return _cube(bias, a, b, beta, alpha, out_dtype, "cube_addmm")


def cube_baddbmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, beta: float = 1, alpha: float = 1,
                 out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Batched :func:`cube_addmm` (its arguments, as ``torch.baddbmm`` has ``torch.addmm``'s) for 3-D
    ``a [B, m, k]`` and ``b [B, k, n]``."""
    if a.dim() != 3 or b.dim() != 3:
        raise OpArgumentError(
            f"cube_baddbmm takes 3-D batches, got a{tuple(a.shape)} "
            f"and b{tuple(b.shape)}; use cube_addmm for other ranks",
            op="cube_baddbmm"
        )
    return _cube(bias, a, b, beta, alpha, out_dtype, "cube_baddbmm")


def _cube(
    bias: Optional[torch.Tensor],
    a: torch.Tensor,
    b: torch.Tensor,
    beta: float,
    alpha: float,
    out_dtype: Optional[torch.dtype],
    name: str,
) -> torch.Tensor:
    """The shared body of the cube_* helpers: column blocks of fp32 BLAS, bias in fp32, one rounding."""
    _require_dtypes(name, a, b, CUBE_INPUT_DTYPES)
    left, right, squeeze = _as_matrices(a, b)
    _require_inner(name, left, right)
    target = out_dtype or a.dtype
    left32 = left.to(torch.float32)
    *batch, k, n = right.shape
    columns = _block_columns(k, batch)
    with one_thread():
        if n <= columns:
            product = torch.matmul(left32, right.to(torch.float32))
            product = product * alpha if alpha != 1 else product
        else:  # each block written in place at once: kept blocks would pin the freed fp32 copies in the heap
            product = torch.empty(*torch.broadcast_shapes(left.shape[:-2], tuple(batch)), left.shape[-2], n,
                                  dtype=torch.float32)
            spare: _Spare = {}
            for start in range(0, n, columns):
                block = torch.matmul(left32, _widen(right[..., start : start + columns], spare))
                product[..., start : start + columns] = block * alpha if alpha != 1 else block
    product = _squeeze(product, squeeze)
    if bias is not None and beta != 0:
        product = product + (bias.to(torch.float32) if beta == 1 else bias.to(torch.float32) * beta)
    return product.to(target)


def _require_dtypes(name: str, a: torch.Tensor, b: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> None:
    """Both operands must share one dtype from ``allowed`` (the Cube has no mixed-dtype product)."""
    if a.dtype != b.dtype or a.dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise OpTypeError(
            f"{name} takes two tensors of one dtype among ({names}), got {a.dtype} and {b.dtype}; "
            "cast the operands first", op=name
        )


def _require_inner(name: str, left: torch.Tensor, right: torch.Tensor) -> None:
    if left.shape[-1] != right.shape[-2]:
        raise OpArgumentError(
            f"{name}: inner dimensions differ ({tuple(left.shape)} @ {tuple(right.shape)}); "
            "the last dim of a must equal the second-to-last dim of b", op=name
        )


def _as_matrices(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """Promote 1-D operands to matrices as ``torch.matmul`` does; return the dims to squeeze after."""
    if a.dim() == 0 or b.dim() == 0:
        raise OpArgumentError("matmul operands must have at least one dimension, got a 0-d tensor")
    squeeze: tuple[int, ...] = ()
    if b.dim() == 1:
        b, squeeze = b.unsqueeze(-1), (-1,)
    if a.dim() == 1:
        # the row dim sits at -2, or at -1 once a vector b's column dim was squeezed first
        a, squeeze = a.unsqueeze(0), squeeze + ((-1,) if squeeze else (-2,))
    return a, b, squeeze


def _squeeze(values: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    for dim in dims:
        values = values.squeeze(dim)
    return values


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch's kernels (BLAS among them) on one intra-op thread in the calling thread, restored after:
    here, so a float sum's order never depends on the caller's thread count; around numerics that run on
    a worker thread beside a capture, so the two Python threads share the cores without a pool of
    OpenMP threads oversubscribing them."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


HANDOFF_S = 1e-4
"""The interpreter's switch interval while numerics run beside a capture (CPython's default is 5 ms)."""


@contextmanager
def quick_handoffs() -> Iterator[None]:
    """A short switch interval for the numerics beside a capture, restored after. The numerics thread gives
    up the interpreter lock around each of its thousands of kernels and must take it back from the
    capture's tracing, which is pure Python and holds it until the switch interval forces it to let go:
    at the default 5 ms per kernel, the numerics spent most of their time waiting for the lock (a 17 s
    sample took longer than the 15 s capture beside it). The interval changes when threads switch,
    never what either computes."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, HANDOFF_S))
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
