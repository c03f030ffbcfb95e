"""``_npu_rotary_embedding``: vLLM's in-place rotary embedding of query and key, op-plugin's binding of
ATB's RopeOperation.

op-plugin (``op_plugin/ops/atb/RopeAtb.cpp``) splits ``cos_sin_cache`` ``[max_position, rot_dim]`` into
its cos and sin halves, widens each to the head size (repeated for the NeoX style, each value twice for
the GPT-J style), picks the rows of ``positions`` and runs RopeOperation with ``rotaryCoeff`` 2 (rotate
halves) or ``head_size`` (rotate adjacent pairs): :func:`.rope.rope` with ``'half'`` or ``'interleave'``.
"""

from __future__ import annotations

import torch

from ..errors import OpArgumentError
from .atb import LENGTH_DTYPES
from .checks import FLOAT_DTYPES, HALF_DTYPES, require_dtype
from .registry import Arguments, Out, SampleCall, npu_op
from .rope import rope


def _heads_view(name: str, tensor: torch.Tensor, tokens: int, head_size: int) -> None:
    """query/key are [T, heads x head_size] or [T, heads, head_size]."""
    fits = tensor.dim() in (2, 3) and tensor.shape[0] == tokens and tensor.shape[-1] % head_size == 0
    if not fits or (tensor.dim() == 3 and tensor.shape[-1] != head_size):
        raise OpArgumentError(f"{name} has shape {list(tensor.shape)}; expected [{tokens}, heads x {head_size}] or "
                              f"[{tokens}, heads, {head_size}] (one row per position)", argument=name)


def _rotary_meta(call: Arguments) -> tuple[Out, Out]:
    positions, query, key, table, head_size = call.positions, call.query, call.key, call.cos_sin_cache, call.head_size
    require_dtype("positions", positions, LENGTH_DTYPES)
    require_dtype("query", query, HALF_DTYPES)
    require_dtype("key", key, (query.dtype,), "(query's dtype)")
    require_dtype("cos_sin_cache", table, FLOAT_DTYPES)
    if head_size < 2 or head_size % 2:
        raise OpArgumentError(
            f"head_size={head_size} must be even and positive (RoPE rotates pairs)", argument="head_size"
        )
    if table.dim() != 2 or table.shape[1] != head_size:
        raise OpArgumentError(f"cos_sin_cache has shape {list(table.shape)}; expected [max_position, {head_size}] "
                              "(cos then sin, half the head size each): a partial rotary width is not supported",
                              argument="cos_sin_cache")
    tokens = positions.numel()
    _heads_view("query", query, tokens, head_size)
    _heads_view("key", key, tokens, head_size)
    return Out(list(query.shape), query.dtype), Out(list(key.shape), key.dtype)


def _rotary_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    positions, table, head_size = call.positions.flatten().long(), call.cos_sin_cache, call.head_size
    if positions.numel() and (positions.min() < 0 or positions.max() >= table.shape[0]):
        raise OpArgumentError(f"positions must lie in [0, {table.shape[0]}) (the rows of cos_sin_cache); got "
                              f"{int(positions.min())}..{int(positions.max())}", argument="positions")
    cos, sin = table.index_select(0, positions).chunk(2, dim=-1)
    mode = "half" if call.is_neox_style else "interleave"
    widen = (lambda t: t.repeat(1, 2)) if call.is_neox_style else (lambda t: t.repeat_interleave(2, dim=-1))
    cos, sin = widen(cos).unsqueeze(1), widen(sin).unsqueeze(1)

    def rotated(x: torch.Tensor) -> torch.Tensor:
        heads = x.reshape(x.shape[0], -1, head_size)
        return rope(heads, cos, sin, mode).reshape(x.shape)

    return rotated(call.query), rotated(call.key)


def _rotary_samples() -> list[SampleCall]:
    """GPT-J style on [T, heads x head_size] rows; NeoX style on [T, heads, head_size]."""
    gen = torch.Generator().manual_seed(0)
    table = torch.randn(10, 16, generator=gen)
    positions = torch.tensor([3, 0, 9], dtype=torch.int64)
    flat = SampleCall((positions, torch.randn(3, 32, generator=gen).half(), torch.randn(3, 16, generator=gen).half(),
                       16, table, False))
    heads = SampleCall((positions.int(), torch.randn(3, 4, 16, generator=gen).bfloat16(),
                        torch.randn(3, 1, 16, generator=gen).bfloat16(), 16, table.bfloat16(), True))
    return [flat, heads]


@npu_op(meta=_rotary_meta, kernel=_rotary_kernel, writes_back={"query": 0, "key": 1}, samples=_rotary_samples)
def _npu_rotary_embedding(call: Arguments) -> None:
    """Rotate ``query`` and ``key`` in place by the cos/sin rows of ``positions``; returns None.

    Source: op-plugin ``op_plugin/ops/atb/RopeAtb.cpp`` (ATB RopeOperation) and its reference in
    ``test/test_custom_ops/test_atb_rope.py``. ``positions`` int32/int64 ``[T]``; ``query`` / ``key``
    float16 or bfloat16 ``[T, heads x head_size]`` or ``[T, heads, head_size]``; ``cos_sin_cache``
    ``[max_position, head_size]``: cos in its first half, sin in its second. ``is_neox_style`` rotates the
    halves of each head (``x * cos + cat(-x2, x1) * sin``), otherwise adjacent pairs (GPT-J), float32
    with one rounding. op-plugin keeps the cos/sin tables of the first call in a process-wide cache and
    reuses them in later calls; here every call reads its own ``cos_sin_cache``.
    """
