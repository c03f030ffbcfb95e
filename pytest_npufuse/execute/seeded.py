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
    if out.numel() == 0:
        return out
    if meta.dtype.is_floating_point:
        generator = torch.Generator().manual_seed(seed)
        block = torch.randn(min(BLOCK, out.numel()), generator=generator) / math.sqrt(max(1, meta.shape[-1] if meta.dim() else 1))
    elif meta.dtype == torch.int8:
        generator = torch.Generator().manual_seed(seed)
        block = torch.randint(-127, 128, (min(BLOCK, out.numel()),), generator=generator, dtype=torch.int8)
    else:
        return out.zero_()
    _fill(out, block.to(meta.dtype))
    return out


def _fill(out: torch.Tensor, block: torch.Tensor) -> None:
    """Write ``block`` repeated over ``out`` in its memory order."""
    flat = out.as_strided((out.untyped_storage().nbytes() // out.element_size(),), (1,), 0)
    whole, rest = divmod(flat.numel(), block.numel())
    if whole:
        flat[: whole * block.numel()].view(whole, block.numel()).copy_(block.expand(whole, -1))
    if rest:
        flat[whole * block.numel():].copy_(block[:rest])
