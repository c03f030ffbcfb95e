"""Rotary position embedding ops: RoPE on one tensor, on query and key in place, and DeepSeek's interleaved form."""

from __future__ import annotations

import torch

from .checks import FLOAT_DTYPES, HALF_DTYPES, require_choice, require_dtype, require_tensor
from .registry import Out, npu_op

ROTARY_MUL_DOC = "https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000141.html"
APPLY_ROTARY_POS_EMB_DOC = "op-plugin op_plugin/ops/opapi/ApplyRotaryPosEmbNpuOpApi.cpp (aclnnApplyRotaryPosEmb)"
INTERLEAVE_ROPE_DOC = "op-plugin docs/context/torch_npu-npu_interleave_rope.md"
ROTARY_MODES = ("half", "interleave")
APPLY_ROPE_LAYOUTS = ("BSH", "BSND", "SBND", "BNSD", "TND")
INTERLEAVE_ROPE_HEAD_DIM = 64  # the doc requires D = 64 for x, cos and sin


def rotate(values: torch.Tensor, rotary_mode: str) -> torch.Tensor:
    """The rotated partner of RoPE: ``cat(-x2, x1)`` of the halves ('half') or of each pair ('interleave')."""
    if rotary_mode == "half":
        first, second = values.chunk(2, dim=-1)
        return torch.cat((-second, first), dim=-1)
    even, odd = values[..., 0::2], values[..., 1::2]
    return torch.stack((-odd, even), dim=-1).flatten(-2)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_mode: str) -> torch.Tensor:
    """``x * cos + rotate(x) * sin`` in float32 (cos/sin broadcast), rounded once to x's dtype."""
    values = x.to(torch.float32)
    out = values * cos.to(torch.float32) + rotate(values, rotary_mode) * sin.to(torch.float32)
    return out.to(x.dtype)


def _check_broadcast(name: str, table: torch.Tensor, x_name: str, x: torch.Tensor) -> None:
    """cos/sin must broadcast to x without changing its shape (e.g. [1, S, 1, D] for BSND x)."""
    if table.dim() != x.dim() or any(t not in (1, s) for t, s in zip(table.shape, x.shape)) or table.shape[-1] != x.shape[-1]:
        raise ValueError(
            f"{name} has shape {list(table.shape)}; it must broadcast to {x_name} {list(x.shape)} with the same head dim"
        )


def _check_rope_input(name: str, x: torch.Tensor, dtypes: tuple[torch.dtype, ...]) -> None:
    require_dtype(name, x, dtypes)
    if x.shape[-1] % 2 != 0:
        raise ValueError(f"{name} has head dim {x.shape[-1]}; RoPE rotates pairs, so it must be even")


# ---------------------------------------------------------------------------------------------
# npu_rotary_mul
# ---------------------------------------------------------------------------------------------


def _rotary_mul_meta(input: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half") -> Out:
    _check_rope_input("input", input, FLOAT_DTYPES)
    if input.dim() != 4:
        raise ValueError(f"input has shape {list(input.shape)}; npu_rotary_mul takes 4-D BNSD/BSND/SBND tensors")
    for name, table in (("r1", r1), ("r2", r2)):
        require_dtype(name, table, (input.dtype,), "(input's dtype)")
        _check_broadcast(name, table, "input", input)
    return Out(list(input.shape), input.dtype)


def _rotary_mul_kernel(input: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half") -> torch.Tensor:
    return rope(input, r1, r2, rotary_mode)


@npu_op(
    "(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') -> Tensor",
    source=ROTARY_MUL_DOC,
    meta=_rotary_mul_meta,
    kernel=_rotary_mul_kernel,
)
def npu_rotary_mul(input: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half") -> torch.Tensor:
    """RoPE on one 4-D tensor: ``r1 * input + r2 * rotate(input)``.

    Source: torch_npu.npu_rotary_mul (API reference 7.0, ptaoplist_000141, and op-plugin
    docs/context/torch_npu-npu_rotary_mul.md), which gives the formula as code:

    * 'half': ``x1, x2 = chunk(input, 2, -1); rotate = cat(-x2, x1)`` (GPT-NeoX style);
    * 'interleave': pairs ``(x[2i], x[2i+1])`` become ``(-x[2i+1], x[2i])`` (GPT-J style).

    ``input`` float16/bfloat16/float32, 4-D (BNSD, BSND or SBND) with an even head dim; ``r1``
    (cos) and ``r2`` (sin) in input's dtype broadcast to it (e.g. [1, 1, S, D]).  Math is float32
    with one rounding to input's dtype.
    """
    for name, value in (("input", input), ("r1", r1), ("r2", r2)):
        require_tensor(name, value)
    require_choice("rotary_mode", rotary_mode, ROTARY_MODES, "'half' rotates halves, 'interleave' pairs")


# ---------------------------------------------------------------------------------------------
# npu_apply_rotary_pos_emb
# ---------------------------------------------------------------------------------------------


def _apply_rotary_pos_emb_meta(
    query: torch.Tensor,
    key: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str = "BSH",
    rotary_mode: str = "half",
) -> tuple[Out, Out]:
    _check_rope_input("query", query, FLOAT_DTYPES)
    require_dtype("key", key, (query.dtype,), "(query's dtype)")
    expected_rank = 3 if layout == "TND" else 4
    for name, x in (("query", query), ("key", key)):
        if x.dim() != expected_rank:
            raise ValueError(f"{name} has shape {list(x.shape)}; layout {layout!r} needs {expected_rank} dims")
    for name, table in (("cos", cos), ("sin", sin)):
        require_dtype(name, table, (query.dtype,), "(query's dtype)")
        _check_broadcast(name, table, "query", query)
        _check_broadcast(name, table, "key", key)
    return Out(list(query.shape), query.dtype), Out(list(key.shape), key.dtype)


def _apply_rotary_pos_emb_kernel(
    query: torch.Tensor,
    key: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str = "BSH",
    rotary_mode: str = "half",
) -> tuple[torch.Tensor, torch.Tensor]:
    return rope(query, cos, sin, rotary_mode), rope(key, cos, sin, rotary_mode)


@npu_op(
    "(Tensor query, Tensor key, Tensor cos, Tensor sin, str layout='BSH', str rotary_mode='half') -> (Tensor, Tensor)",
    source=APPLY_ROTARY_POS_EMB_DOC,
    meta=_apply_rotary_pos_emb_meta,
    kernel=_apply_rotary_pos_emb_kernel,
    writes_back=("query", "key"),
)
def npu_apply_rotary_pos_emb(
    query: torch.Tensor,
    key: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str = "BSH",
    rotary_mode: str = "half",
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE on query and key in place: returns ``(query, key)`` after ``x = x * cos + rotate(x) * sin``.

    Sources: op-plugin's ApplyRotaryPosEmbNpuOpApi.cpp (aclnnApplyRotaryPosEmb updates query and
    key in place and returns them; layouts BSND/'BSH', SBND, BNSD, TND) and the RoPE formula of
    torch_npu.npu_rotary_mul for the 'half' and 'interleave' modes.

    query/key share a dtype (float16/bfloat16/float32) and layout (4-D, or 3-D for TND); cos/sin
    broadcast to both (e.g. [B, S, 1, D] for BSND).  The captured graph holds one functional
    ``npu.npu_apply_rotary_pos_emb`` node; the wrapper copies its outputs into query and key, as
    the real op writes them.
    """
    for name, value in (("query", query), ("key", key), ("cos", cos), ("sin", sin)):
        require_tensor(name, value)
    require_choice("layout", layout, APPLY_ROPE_LAYOUTS, "the layouts aclnnApplyRotaryPosEmb accepts")
    require_choice("rotary_mode", rotary_mode, ROTARY_MODES, "'half' rotates halves, 'interleave' pairs")


# ---------------------------------------------------------------------------------------------
# npu_interleave_rope
# ---------------------------------------------------------------------------------------------


def _interleave_rope_meta(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Out:
    require_dtype("x", x, HALF_DTYPES)
    if x.dim() != 4 or x.shape[-1] != INTERLEAVE_ROPE_HEAD_DIM:
        raise ValueError(f"x has shape {list(x.shape)}; npu_interleave_rope needs [B, N, S, 64]")
    for name, table in (("cos", cos), ("sin", sin)):
        require_dtype(name, table, (x.dtype,), "(x's dtype)")
        if table.dim() != 4 or table.shape[1] != 1 or table.shape[2] not in (1, x.shape[2]):
            raise ValueError(f"{name} has shape {list(table.shape)}; expected [B, 1, S or 1, 64]")
        _check_broadcast(name, table, "x", x)
    return Out(list(x.shape), x.dtype)


def _interleave_rope_kernel(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    pairs_first = x.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)
    return rope(pairs_first, cos, sin, "half")


@npu_op(
    "(Tensor x, Tensor cos, Tensor sin) -> Tensor",
    source=INTERLEAVE_ROPE_DOC,
    meta=_interleave_rope_meta,
    kernel=_interleave_rope_kernel,
)
def npu_interleave_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on a tensor whose head dim is stored interleaved (DeepSeek MLA's rope part).

    Source: torch_npu.npu_interleave_rope (op-plugin docs/context/torch_npu-npu_interleave_rope.md):
    ``x`` [B, N, S, 64] float16/bfloat16, cos/sin [B, 1, S or 1, 64] in x's dtype; the output has x's
    shape and dtype.  The doc's formula first de-interleaves the head dim
    (``q = x.view(.., 32, 2).transpose(-1, -2).reshape(.., 64)``: even elements first, then odd),
    then applies ``q * cos + RotateHalf(q) * sin`` with RotateHalf moving the negated second half
    to the front.  This is DeepSeek-V2/V3's ``apply_rotary_pos_emb``.  float32 math, one rounding.
    """
    for name, value in (("x", x), ("cos", cos), ("sin", sin)):
        require_tensor(name, value)
