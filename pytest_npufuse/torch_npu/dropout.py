"""``torch_npu._npu_dropout_gen_mask``: the bit mask of a dropout, as npu_fusion_attention's callers build it.

Training code and torch_npu's own tests draw the keep/drop mask of an attention's dropout with this op and
hand it to ``npu_fusion_attention(dropout_mask=...)``, or unpack it (``numpy.unpackbits(...,
bitorder="little")``) to compute a golden. The mask is one bit per element of ``size``, 1 = keep, packed
eight to a uint8 little-end first, the byte count rounded up to a multiple of 16 (128 bits) and the
rounding bytes zero.
"""

from __future__ import annotations

import hashlib
import math

import torch

from ..errors import OpArgumentError
from .registry import Arguments, Out, SampleCall, npu_op

MASK_ALIGN_BITS = 128  # op-plugin DropoutGenMaskKernelNpuOpApi.cpp: DATA_ALIGN
BITS_PER_BYTE = 8
_SEED_BITS = 64


def _mask_bytes(size: list[int]) -> tuple[int, int]:
    """(bytes the mask holds, bytes its bits fill): ``numels`` bits rounded up to 128, and to 8."""
    numels = math.prod(size)
    return -(-numels // MASK_ALIGN_BITS) * MASK_ALIGN_BITS // BITS_PER_BYTE, -(-numels // BITS_PER_BYTE)


def _meta(call: Arguments) -> Out:
    if any(dim < 0 for dim in call.size):
        raise OpArgumentError(f"_npu_dropout_gen_mask: size={list(call.size)} has a negative dimension")
    return Out([_mask_bytes(list(call.size))[0]], torch.uint8)


def _generator_seed(seed: int, offset: int) -> int:
    """One seed of torch's CPU generator from both: its Mersenne Twister reads only a seed's low 32 bits, so
    seed and offset are hashed together rather than placed side by side."""
    digest = hashlib.blake2b(f"{seed}:{offset}".encode(), digest_size=_SEED_BITS // BITS_PER_BYTE).digest()
    return int.from_bytes(digest, "little")


def keep_bits(numels: int, p: float, seed: int, offset: int) -> torch.Tensor:
    """bool [ceil(numels / 8) * 8]: which elements a dropout of drop rate ``p`` keeps, the same bits for the
    same ``seed`` and ``offset`` (the mask ``npu_fusion_attention`` draws itself and its backward draws
    again from the seed, offset and numels the forward returned)."""
    filled = -(-numels // BITS_PER_BYTE)
    generator = torch.Generator().manual_seed(_generator_seed(seed, offset))
    return torch.rand(filled * BITS_PER_BYTE, generator=generator, dtype=torch.float64) >= p


def unpack_bits(mask: torch.Tensor, numels: int) -> torch.Tensor:
    """bool [numels]: the bits of a packed uint8 mask, bit ``i % 8`` of byte ``i // 8`` for element ``i``
    (``numpy.unpackbits(..., bitorder="little")``, as op-plugin's tests read the mask)."""
    shifts = torch.arange(BITS_PER_BYTE, dtype=torch.uint8)
    bits = (mask[: -(-numels // BITS_PER_BYTE)].reshape(-1, 1) >> shifts) & 1
    return bits.reshape(-1)[:numels].bool()


def _kernel(call: Arguments) -> torch.Tensor:
    length, filled = _mask_bytes(list(call.size))
    keep = keep_bits(math.prod(call.size), call.p, call.seed, call.offset)
    weights = torch.tensor([1 << bit for bit in range(BITS_PER_BYTE)], dtype=torch.int64)
    packed = (keep.view(filled, BITS_PER_BYTE).to(torch.int64) * weights).sum(dim=1).to(torch.uint8)
    mask = torch.zeros(length, dtype=torch.uint8)
    mask[:filled] = packed
    return mask


def _samples() -> list[SampleCall]:
    """The mask of a [2, 4, 16, 16] attention's dropout at p=0.1, and one that keeps everything."""
    like = torch.empty(0)
    return [SampleCall((like, [2, 4, 16, 16], 0.1, 7, 3)), SampleCall((like, [5, 3], 0.0, 0, 0))]


@npu_op(meta=_meta, kernel=_kernel, samples=_samples)
def _npu_dropout_gen_mask(call: Arguments) -> None:
    """The dropout bit mask of ``prod(size)`` elements, each dropped with probability ``p``.

    A 1-D uint8 tensor of ``ceil(prod(size) / 128) * 16`` bytes: bit ``i % 8`` of byte ``i // 8`` is 1 when
    element ``i`` is kept. ``p=0`` keeps everything (every byte the bits reach is 255, the rest 0), ``p=1``
    drops everything. ``self`` only places the mask (its device); ``parallel`` and ``sync`` choose the
    stream the NPU draws on, which does not change the mask.

    The same ``seed`` and ``offset`` give the same mask. The bits are drawn with torch's CPU generator,
    seeded from both, not with the NPU's Philox stream: a golden computed from this mask (as torch_npu's
    tests do) agrees with an op given the same mask, but the bits differ from a real NPU's.

    Source: op-plugin ``_npu_dropout_gen_mask.Tensor`` in op_plugin_functions.yaml, its kernel
    ``op_plugin/ops/opapi/DropoutGenMaskKernelNpuOpApi.cpp`` and meta function, and the C++ page
    at_npu::native::npu_dropout_gen_mask (p is the probability that an element is zeroed).
    """
    if not 0 <= call.p <= 1:
        raise OpArgumentError(f"_npu_dropout_gen_mask: p={call.p} must be a probability in [0, 1] (the drop rate)")
