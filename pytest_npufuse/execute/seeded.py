"""Seeded values for a tensor that has none: the weights of a sampled layer of a timing-only model.

A model built on the meta device has no weights; to check the numerics of one of its layers at its
real size, that layer's meta tensors get values here. They are deterministic (a seed per tensor, from
the layer and the tensor's place in the graph) and cheap at any size: a block of :data:`BLOCK` values is
drawn once per tensor and repeated to fill it, so a 470 MB expert weight costs a memory copy, not 470M
random draws. The block's length is prime, so the repetition never lines up with rows, heads or experts.

- floating tensors: normal values scaled by ``1/sqrt(last dim)`` (a weight's fan-in order of size);
- ``int8`` tensors (quantised weights): uniform integers in [-127, 127];
- every other integer and ``bool`` tensor: zeros, the one value valid as an index, a count or a mask
  into anything (give a real tensor where a layer needs other values).
"""

from __future__ import annotations

import math

import torch

BLOCK = 65_521
"""Values drawn per tensor (prime) before the block is repeated."""


def seeded_like(meta: torch.Tensor, seed: int) -> torch.Tensor:
    """A CPU tensor of ``meta``'s shape, strides and dtype holding the seeded values described above."""
    out = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype, device="cpu")
    block = _block(meta, seed, out.numel())
    if block is None:
        return out.zero_()
    _fill(out, block)
    return out


def seeded_rows(meta: torch.Tensor, seed: int, rows: torch.Tensor) -> torch.Tensor:
    """``seeded_like(meta, seed)[rows]`` for a 2-D ``meta`` (an embedding table), made without the other rows:
    a lookup of a decode step's few tokens reads kilobytes of a table that holds gigabytes."""
    out_shape = (*rows.shape, meta.shape[1])
    block = _block(meta, seed, meta.numel())
    if block is None:
        return torch.zeros(out_shape, dtype=meta.dtype)
    row_stride, column_stride = meta.stride()
    columns = torch.arange(meta.shape[1], dtype=torch.int64) * column_stride
    offsets = rows.to(torch.int64).unsqueeze(-1) * row_stride + columns
    return block[offsets % block.numel()]


def _block(meta: torch.Tensor, seed: int, numel: int) -> torch.Tensor | None:
    """The block of values repeated over a tensor like ``meta`` in its memory order, in its dtype; None for
    a tensor of zeros (an empty one, or an integer dtype other than int8)."""
    if numel == 0:
        return None
    if meta.dtype.is_floating_point:
        generator = torch.Generator().manual_seed(seed)
        scale = math.sqrt(max(1, meta.shape[-1] if meta.dim() else 1))
        return (torch.randn(min(BLOCK, numel), generator=generator) / scale).to(meta.dtype)
    if meta.dtype == torch.int8:
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(-127, 128, (min(BLOCK, numel),), generator=generator, dtype=torch.int8)
    return None


def _fill(out: torch.Tensor, block: torch.Tensor) -> None:
    """Write ``block`` repeated over ``out`` in its memory order."""
    flat = out.as_strided((out.untyped_storage().nbytes() // out.element_size(),), (1,), 0)
    whole, rest = divmod(flat.numel(), block.numel())
    if whole:
        flat[: whole * block.numel()].view(whole, block.numel()).copy_(block.expand(whole, -1))
    if rest:
        flat[whole * block.numel():].copy_(block[:rest])
