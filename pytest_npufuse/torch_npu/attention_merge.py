"""Merging partial attention results: ``npu_attention_update`` combines the outputs each sequence-parallel
(SP) rank computed over its share of the keys into the output over all of them, from each part's
log-sum-exp.

An attention output over keys split into parts ``i`` is the softmax-weighted mix of the parts' outputs
``O_i``, each weighted by its share of the total softmax mass, ``exp(lse_i - lse)`` with ``lse`` the
log-sum-exp over all parts: the same combine flash-decoding and ring attention do.
"""

from __future__ import annotations

import torch

from ..errors import OpArgumentError
from .checks import FLOAT_DTYPES, require_choice, require_dtype
from .registry import Arguments, Out, SampleCall, npu_op

MAX_PARTS = 16
HEAD_DIM_RANGE = (8, 512)


def _update_meta(call: Arguments) -> tuple[Out, Out]:
    lse, local_out = call.lse, call.local_out
    if len(lse) != len(local_out) or not 1 <= len(lse) <= MAX_PARTS:
        raise OpArgumentError(f"lse has {len(lse)} tensors and local_out {len(local_out)}; they must have the "
                              f"same count, the SP degree, in [1, {MAX_PARTS}]", argument="lse")
    first, rows = local_out[0], lse[0].shape
    head_dim = first.shape[-1] if first.dim() == 2 else 0
    if head_dim % 8 or not HEAD_DIM_RANGE[0] <= head_dim <= HEAD_DIM_RANGE[1]:
        raise OpArgumentError(f"local_out[0] has shape {list(first.shape)}; expected [rows, head_dim] with "
                              f"head_dim a multiple of 8 in [{HEAD_DIM_RANGE[0]}, {HEAD_DIM_RANGE[1]}]",
                              argument="local_out")
    require_dtype("local_out[0]", first, FLOAT_DTYPES)
    for i, (part_lse, part_out) in enumerate(zip(lse, local_out)):
        require_dtype(f"lse[{i}]", part_lse, (torch.float32,))
        require_dtype(f"local_out[{i}]", part_out, (first.dtype,), "(local_out[0]'s dtype)")
        if list(part_lse.shape) != list(rows) or len(rows) != 1 or list(part_out.shape) != [rows[0], head_dim]:
            raise OpArgumentError(f"lse[{i}] {list(part_lse.shape)} and local_out[{i}] {list(part_out.shape)} must be "
                                  f"[{rows[0] if rows else 'rows'}] and [rows, "
                                  f"{head_dim}] (rows = batch x seq x heads)",
                                  argument="lse")
    return Out(list(first.shape), first.dtype), Out(list(rows), torch.float32)


def _update_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """The API page's formula in float32, parts summed in order (the op is deterministic); a row whose
    parts all have lse -inf (no key seen) gives a zero output and lse -inf."""
    lse = torch.stack([part.float() for part in call.lse])
    top = lse.max(dim=0).values
    seen = torch.isfinite(top)
    shifted = torch.where(seen, top, torch.zeros_like(top))
    total = torch.exp(lse - shifted).sum(dim=0)
    merged = torch.where(seen, shifted + torch.log(total), top)
    out = torch.zeros(call.local_out[0].shape)
    for part_lse, part_out in zip(lse, call.local_out):
        weight = torch.where(seen, torch.exp(part_lse - merged), torch.zeros_like(part_lse))
        out = out + part_out.float() * weight.unsqueeze(-1)
    return out.to(call.local_out[0].dtype), merged


def _update_samples() -> list[SampleCall]:
    """Two bfloat16 parts returning the merged lse; three float32 parts."""
    gen = torch.Generator().manual_seed(0)

    def parts(count: int, rows: int, dim: int, dtype: torch.dtype) -> tuple[list, list]:
        return ([torch.randn(rows, generator=gen) for _ in range(count)],
                [torch.randn(rows, dim, generator=gen).to(dtype) for _ in range(count)])

    return [SampleCall((*parts(2, 6, 16, torch.bfloat16), 1)), SampleCall((*parts(3, 4, 8, torch.float32), 0))]


@npu_op(meta=_update_meta, kernel=_update_kernel, samples=_update_samples)
def npu_attention_update(call: Arguments) -> None:
    """Merge SP parts' attention outputs: ``(out, lse_out)``.

    Source: op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_attention_update.md``: with ``lse_max``
    the largest ``lse_i``, ``lse_m = lse_max + log(sum_i exp(lse_i - lse_max))`` and
    ``O = sum_i O_i * exp(lse_i - lse_m)``. ``lse`` holds 1 to 16 float32 ``[rows]`` tensors
    (rows = batch x seq x heads), ``local_out`` as many ``[rows, head_dim]`` tensors (float32, float16 or
    bfloat16; head_dim a multiple of 8 in [8, 512]). ``out`` has local_out's dtype; ``lse_out`` is
    ``lse_m`` (float32). The page defines ``lse_out`` only for ``update_type=1``; here it is ``lse_m``
    for both types.
    """
    require_choice("update_type", call.update_type, (0, 1), "0 returns out, 1 also lse_out")
