"""Rotary position embedding ops: RoPE on one tensor, on query and key in place, and DeepSeek's interleaved form."""

from __future__ import annotations

import inspect
from typing import Any, Optional

import torch

from ..exact import cube_matmul
from .checks import (
    FLOAT_DTYPES, HALF_DTYPES, require_bool, require_choice, require_dtype, require_float, require_shape,
    require_tensor, require_tensors, require_unused,
)
from .norm import rms_normalise
from .registry import Out, npu_op

ROTARY_MUL_DOC = "https://www.hiascend.com/document/detail/zh/Pytorch/700/apiref/apilist/ptaoplist_000141.html"
APPLY_ROTARY_POS_EMB_DOC = "op-plugin op_plugin/ops/opapi/ApplyRotaryPosEmbNpuOpApi.cpp (aclnnApplyRotaryPosEmb)"
INTERLEAVE_ROPE_DOC = "op-plugin docs/context/torch_npu-npu_interleave_rope.md"
ROTARY_MODES = ("half", "interleave")
APPLY_ROPE_LAYOUTS = ("BSH", "BSND", "SBND", "BNSD", "TND")
KV_RMSNORM_ROPE_CACHE_DOC = "op-plugin docs/context/torch_npu-npu_kv_rmsnorm_rope_cache.md"
MLA_RMS_SIZE = 512  # the doc's rms_size (compressed KV width), the only value it supports
MLA_ROPE_SIZE = 64  # the doc's rope_size
KV_CACHE_MODES = ("Norm", "PA", "PA_BNSD")
MLA_PROLOG_DOC = "op-plugin docs/context/torch_npu-npu_mla_prolog.md"
MLA_PROLOG_V2_DOC = "op-plugin docs: torch_npu-npu_mla_prolog_v2.md (return values, shapes)"


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
    writes_back={"query": 0, "key": 1},
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
    _check_rope_input("x", x, HALF_DTYPES)
    if x.dim() != 4:
        raise ValueError(f"x has shape {list(x.shape)}; npu_interleave_rope needs [B, N, S, D] (D = 64 on the device)")
    for name, table in (("cos", cos), ("sin", sin)):
        require_dtype(name, table, (x.dtype,), "(x's dtype)")
        if table.dim() != 4 or table.shape[1] != 1 or table.shape[2] not in (1, x.shape[2]):
            raise ValueError(f"{name} has shape {list(table.shape)}; expected [B, 1, S or 1, D]")
        _check_broadcast(name, table, "x", x)
    return Out(list(x.shape), x.dtype)


def interleave_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """De-interleave the head dim (even elements, then odd), then half-rotate RoPE (DeepSeek MLA)."""
    pairs_first = x.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)
    return rope(pairs_first, cos, sin, "half")


def _interleave_rope_kernel(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return interleave_rope(x, cos, sin)


@npu_op(
    "(Tensor x, Tensor cos, Tensor sin) -> Tensor",
    source=INTERLEAVE_ROPE_DOC,
    meta=_interleave_rope_meta,
    kernel=_interleave_rope_kernel,
)
def npu_interleave_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on a tensor whose head dim is stored interleaved (DeepSeek MLA's rope part).

    Source: torch_npu.npu_interleave_rope (op-plugin docs/context/torch_npu-npu_interleave_rope.md):
    ``x`` [B, N, S, D] float16/bfloat16, cos/sin [B, 1, S or 1, D] in x's dtype; the output has x's
    shape and dtype.  The device requires D = 64; any even D is accepted here so that shrunk test
    shapes work.  The doc's formula first de-interleaves the head dim
    (``q = x.view(.., 32, 2).transpose(-1, -2).reshape(.., 64)``: even elements first, then odd),
    then applies ``q * cos + RotateHalf(q) * sin`` with RotateHalf moving the negated second half
    to the front.  This is DeepSeek-V2/V3's ``apply_rotary_pos_emb``.  float32 math, one rounding.
    """
    for name, value in (("x", x), ("cos", cos), ("sin", sin)):
        require_tensor(name, value)


# ---------------------------------------------------------------------------------------------
# npu_kv_rmsnorm_rope_cache
# ---------------------------------------------------------------------------------------------


def _kv_cache_shapes(
    kv: torch.Tensor, cache_mode: str, k_cache: tuple[torch.Tensor, int], ckv_cache: tuple[torch.Tensor, int]
) -> None:
    """Norm: caches [B, 1, L, D] with L >= S; PA/PA_BNSD: caches [blocks, block_size, 1, D] (doc)."""
    batch, _, seq, _ = kv.shape
    for name, (cache, width) in (("k_cache", k_cache), ("ckv_cache", ckv_cache)):
        require_dtype(name, cache, (kv.dtype,), "(kv's dtype; int8 quantised caches are not implemented)")
        if cache_mode == "Norm":
            ok = cache.dim() == 4 and cache.shape[0] == batch and cache.shape[1] == 1 and cache.shape[2] >= seq
        else:
            ok = cache.dim() == 4 and cache.shape[2] == 1
        if not ok or cache.shape[-1] != width:
            layout = f"[{batch}, 1, cache_length >= {seq}, {width}]" if cache_mode == "Norm" else f"[block_num, block_size, 1, {width}]"
            raise ValueError(f"{name} has shape {list(cache.shape)}; cache_mode {cache_mode!r} needs {layout}")


def _kv_rmsnorm_rope_cache_meta(
    kv: torch.Tensor,
    gamma: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    index: torch.Tensor,
    k_cache: torch.Tensor,
    ckv_cache: torch.Tensor,
    **options: object,
) -> tuple[Out, Out, Out, Out]:
    """The updated caches (like the inputs), k_embed [B, 1, S, 64] and y [B, 1, S, 512] in kv's dtype."""
    require_dtype("kv", kv, HALF_DTYPES)
    if kv.dim() != 4 or kv.shape[1] != 1 or cos.dim() != 4 or not 0 < cos.shape[-1] < kv.shape[-1]:
        raise ValueError(
            f"kv has shape {list(kv.shape)} and cos {list(cos.shape)}; expected kv [batch, 1, seq_len, rms + rope] "
            f"and cos [batch, 1, seq_len, rope] (the device supports rms {MLA_RMS_SIZE}, rope {MLA_ROPE_SIZE})"
        )
    batch, _, seq, _ = kv.shape
    rope_size = cos.shape[-1]
    rms_size = kv.shape[-1] - rope_size
    require_dtype("gamma", gamma, (kv.dtype,), "(kv's dtype)")
    require_shape("gamma", gamma, ((rms_size,),))
    for name, table in (("cos", cos), ("sin", sin)):
        require_dtype(name, table, (kv.dtype,), "(kv's dtype)")
        require_shape(name, table, ((batch, 1, seq, rope_size),))
    require_dtype("index", index, (torch.int64,))
    cache_mode = options.get("cache_mode", "Norm")
    require_shape("index", index, ((batch, seq),) if cache_mode == "Norm" else ((batch * seq,),))
    _kv_cache_shapes(kv, cache_mode, (k_cache, rope_size), (ckv_cache, rms_size))
    return (
        Out(list(k_cache.shape), k_cache.dtype),
        Out(list(ckv_cache.shape), ckv_cache.dtype),
        Out([batch, 1, seq, rope_size], kv.dtype),
        Out([batch, 1, seq, rms_size], kv.dtype),
    )


def _scatter_rows(cache: torch.Tensor, rows: torch.Tensor, index: torch.Tensor, cache_mode: str) -> torch.Tensor:
    """A copy of ``cache`` with each token's row written at its index (per batch for Norm, global for PA)."""
    updated = cache.clone()
    width = cache.shape[-1]
    if cache_mode == "Norm":
        limit = cache.shape[2]
        slots = (index + torch.arange(cache.shape[0]).unsqueeze(-1) * limit).reshape(-1)
        target = updated.view(-1, width)
    else:
        limit = cache.shape[0] * cache.shape[1]
        slots = index.reshape(-1)
        target = updated.view(-1, width)
    if bool(((index < 0) | (index >= limit)).any()):
        raise ValueError(f"index holds {index.tolist()}; every value must be a slot in [0, {limit}) of the cache")
    target[slots] = rows.reshape(-1, width)
    return updated


def _kv_rmsnorm_rope_cache_kernel(
    kv: torch.Tensor,
    gamma: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    index: torch.Tensor,
    k_cache: torch.Tensor,
    ckv_cache: torch.Tensor,
    **options: object,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    cache_mode = str(options.get("cache_mode", "Norm"))
    epsilon = float(options.get("epsilon", 1e-5))
    rms_in, rope_in = kv.split([kv.shape[-1] - cos.shape[-1], cos.shape[-1]], dim=-1)
    y = rms_normalise(rms_in, gamma, epsilon)[0].to(kv.dtype)
    k_embed = interleave_rope(rope_in, cos, sin)
    return (
        _scatter_rows(k_cache, k_embed, index, cache_mode),
        _scatter_rows(ckv_cache, y, index, cache_mode),
        k_embed,
        y,
    )


@npu_op(
    "(Tensor kv, Tensor gamma, Tensor cos, Tensor sin, Tensor index, Tensor k_cache, Tensor ckv_cache, *, "
    "Tensor? k_rope_scale=None, Tensor? c_kv_scale=None, Tensor? k_rope_offset=None, Tensor? c_kv_offset=None, "
    "float epsilon=1e-05, str cache_mode='Norm', bool is_output_kv=False) -> (Tensor, Tensor, Tensor, Tensor)",
    source=KV_RMSNORM_ROPE_CACHE_DOC,
    meta=_kv_rmsnorm_rope_cache_meta,
    kernel=_kv_rmsnorm_rope_cache_kernel,
    writes_back={"k_cache": 0, "ckv_cache": 1},
)
def npu_kv_rmsnorm_rope_cache(
    kv: torch.Tensor,
    gamma: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    index: torch.Tensor,
    k_cache: torch.Tensor,
    ckv_cache: torch.Tensor,
    *,
    k_rope_scale: Optional[torch.Tensor] = None,
    c_kv_scale: Optional[torch.Tensor] = None,
    k_rope_offset: Optional[torch.Tensor] = None,
    c_kv_offset: Optional[torch.Tensor] = None,
    epsilon: float = 1e-5,
    cache_mode: str = "Norm",
    is_output_kv: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """MLA's KV path: RMSNorm the latent, RoPE the key part, scatter both into their caches in place.

    Source: torch_npu.npu_kv_rmsnorm_rope_cache (op-plugin
    docs/context/torch_npu-npu_kv_rmsnorm_rope_cache.md).  ``kv`` [B, 1, S, rms + rope] float16/bfloat16
    is split into ``rms_in`` and ``rope_in`` (rope = cos's last dim).  The device supports only rms 512
    and rope 64 (DeepSeek's sizes); they are not imposed, so tests can use small shapes:

    * ``y = rms_in / sqrt(mean(rms_in**2) + epsilon) * gamma`` (float32, rounded to kv's dtype);
    * ``k_embed`` = ``rope_in`` de-interleaved and rotated with cos/sin [B, 1, S, rope], the
      formula of :func:`npu_interleave_rope`;
    * the rows are written into ``k_cache`` (k_embed) and ``ckv_cache`` (y) in place:
      ``cache_mode='Norm'`` caches are [B, 1, cache_length, D] and ``index`` [B, S] holds each
      token's offset within its batch; 'PA'/'PA_BNSD' caches are [block_num, block_size, 1, D]
      and ``index`` [B * S] holds global slots (block * block_size + offset).

    Returns ``(k_cache, ckv_cache, k_embed_out, y_out)``; the caches are the updated inputs.  The
    doc defines the last two only for ``is_output_kv=True``; this model always returns k_embed and
    y there.  Not implemented (ValueError): the int8 quantised caches (k_rope_scale, c_kv_scale and
    offsets), the FRACTAL_NZ modes (PA_NZ, PA_BLK_NZ) and PA_BLK_BNSD.  An index outside the
    cache is refused (the doc leaves repeated or out-of-range indexes undefined).
    """
    for name, value in (("kv", kv), ("gamma", gamma), ("cos", cos), ("sin", sin), ("index", index),
                        ("k_cache", k_cache), ("ckv_cache", ckv_cache)):
        require_tensor(name, value)
    require_tensors(k_rope_scale=k_rope_scale, c_kv_scale=c_kv_scale, k_rope_offset=k_rope_offset,
                    c_kv_offset=c_kv_offset)
    require_unused("npu_kv_rmsnorm_rope_cache (int8 caches)", k_rope_scale=k_rope_scale, c_kv_scale=c_kv_scale,
                   k_rope_offset=k_rope_offset, c_kv_offset=c_kv_offset)
    require_float("epsilon", epsilon)
    require_choice("cache_mode", cache_mode, KV_CACHE_MODES, "Norm per-batch caches, PA/PA_BNSD paged caches")
    require_bool("is_output_kv", is_output_kv)


# ---------------------------------------------------------------------------------------------
# npu_mla_prolog
# ---------------------------------------------------------------------------------------------


MLA_TENSORS = (
    "token_x", "weight_dq", "weight_uq_qr", "weight_uk", "weight_dkv_kr", "rmsnorm_gamma_cq", "rmsnorm_gamma_ckv",
    "rope_sin", "rope_cos", "cache_index", "kv_cache", "kr_cache",
)
MLA_PROLOG_ARGUMENTS = (
    "(Tensor token_x, Tensor weight_dq, Tensor weight_uq_qr, Tensor weight_uk, Tensor weight_dkv_kr, "
    "Tensor rmsnorm_gamma_cq, Tensor rmsnorm_gamma_ckv, Tensor rope_sin, Tensor rope_cos, Tensor cache_index, "
    "Tensor kv_cache, Tensor kr_cache, *, Tensor? dequant_scale_x=None, Tensor? dequant_scale_w_dq=None, "
    "Tensor? dequant_scale_w_uq_qr=None, Tensor? dequant_scale_w_dkv_kr=None, Tensor? quant_scale_ckv=None, "
    "Tensor? quant_scale_ckr=None, Tensor? smooth_scales_cq=None, float rmsnorm_epsilon_cq=1e-05, "
    "float rmsnorm_epsilon_ckv=1e-05, str cache_mode=\"PA_BSND\")"
)
MLA_QUANT_INPUTS = (
    "dequant_scale_x", "dequant_scale_w_dq", "dequant_scale_w_uq_qr", "dequant_scale_w_dkv_kr", "quant_scale_ckv",
    "quant_scale_ckr", "smooth_scales_cq",
)


def _check_mla_prolog_arguments(**arguments: Any) -> None:
    """The argument checks of npu_mla_prolog and _v2, which share their inputs."""
    for name in MLA_TENSORS:
        require_tensor(name, arguments[name])
    require_unused("npu_mla_prolog (quantised modes)", **{name: arguments[name] for name in MLA_QUANT_INPUTS})
    require_float("rmsnorm_epsilon_cq", arguments["rmsnorm_epsilon_cq"])
    require_float("rmsnorm_epsilon_ckv", arguments["rmsnorm_epsilon_ckv"])
    require_choice("cache_mode", arguments["cache_mode"], ("PA_BSND",), "paged caches [BlockNum, BlockSize, 1, D]")


def _require_2d(name: str, tensor: torch.Tensor, rows: Any, dtype: torch.dtype) -> int:
    """A [rows, cols] weight in ``dtype``; returns cols."""
    require_dtype(name, tensor, (dtype,), "(int8 quantised MLA weights are not implemented)")
    if tensor.dim() != 2 or tensor.shape[0] != rows:
        raise ValueError(f"{name} has shape {list(tensor.shape)}; expected [{rows}, ...]")
    return tensor.shape[1]


def _mla_prolog_meta(
    token_x: torch.Tensor,
    weight_dq: torch.Tensor,
    weight_uq_qr: torch.Tensor,
    weight_uk: torch.Tensor,
    weight_dkv_kr: torch.Tensor,
    rmsnorm_gamma_cq: torch.Tensor,
    rmsnorm_gamma_ckv: torch.Tensor,
    rope_sin: torch.Tensor,
    rope_cos: torch.Tensor,
    cache_index: torch.Tensor,
    kv_cache: torch.Tensor,
    kr_cache: torch.Tensor,
    **options: object,
) -> tuple[Out, Out, Out, Out]:
    """query [.., N, Hckv], query_rope [.., N, Dr] (token_x's leading dims), the two updated caches."""
    dtype = torch.bfloat16
    require_dtype("token_x", token_x, (dtype,))
    if token_x.dim() not in (2, 3):
        raise ValueError(f"token_x has shape {list(token_x.shape)}; expected [T, He] or [B, S, He]")
    lead, hidden = list(token_x.shape[:-1]), token_x.shape[-1]
    hcq = _require_2d("weight_dq", weight_dq, hidden, dtype)
    heads, head_dim, hckv = weight_uk.shape if weight_uk.dim() == 3 else (0, 0, 0)
    require_dtype("weight_uk", weight_uk, (dtype,))
    if weight_uk.dim() != 3:
        raise ValueError(f"weight_uk has shape {list(weight_uk.shape)}; expected [N, D, Hckv]")
    qr_width = _require_2d("weight_uq_qr", weight_uq_qr, hcq, dtype)
    if heads == 0 or qr_width % heads != 0 or qr_width // heads <= head_dim:
        raise ValueError(f"weight_uq_qr has {qr_width} columns; expected N * (D + Dr) with N={heads}, D={head_dim}")
    rope_dim = qr_width // heads - head_dim
    if _require_2d("weight_dkv_kr", weight_dkv_kr, hidden, dtype) != hckv + rope_dim:
        raise ValueError(f"weight_dkv_kr has shape {list(weight_dkv_kr.shape)}; expected [{hidden}, {hckv + rope_dim}]")
    for name, gamma, width in (("rmsnorm_gamma_cq", rmsnorm_gamma_cq, hcq), ("rmsnorm_gamma_ckv", rmsnorm_gamma_ckv, hckv)):
        require_dtype(name, gamma, (dtype,))
        require_shape(name, gamma, ((width,),))
    for name, table in (("rope_sin", rope_sin), ("rope_cos", rope_cos)):
        require_dtype(name, table, (dtype,))
        require_shape(name, table, ((*lead, rope_dim),))
    require_dtype("cache_index", cache_index, (torch.int64,))
    require_shape("cache_index", cache_index, (tuple(lead),))
    for name, cache, width in (("kv_cache", kv_cache, hckv), ("kr_cache", kr_cache, rope_dim)):
        require_dtype(name, cache, (dtype,), "(int8 quantised caches are not implemented)")
        if cache.dim() != 4 or cache.shape[2] != 1 or cache.shape[3] != width:
            raise ValueError(f"{name} has shape {list(cache.shape)}; expected [BlockNum, BlockSize, 1, {width}]")
    return (
        Out([*lead, heads, hckv], dtype),
        Out([*lead, heads, rope_dim], dtype),
        Out(list(kv_cache.shape), kv_cache.dtype),
        Out(list(kr_cache.shape), kr_cache.dtype),
    )


def _mla_prolog_kernel(
    token_x: torch.Tensor,
    weight_dq: torch.Tensor,
    weight_uq_qr: torch.Tensor,
    weight_uk: torch.Tensor,
    weight_dkv_kr: torch.Tensor,
    rmsnorm_gamma_cq: torch.Tensor,
    rmsnorm_gamma_ckv: torch.Tensor,
    rope_sin: torch.Tensor,
    rope_cos: torch.Tensor,
    cache_index: torch.Tensor,
    kv_cache: torch.Tensor,
    kr_cache: torch.Tensor,
    **options: object,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    eps_cq = float(options.get("rmsnorm_epsilon_cq", 1e-5))
    eps_ckv = float(options.get("rmsnorm_epsilon_ckv", 1e-5))
    lead = token_x.shape[:-1]
    x = token_x.reshape(-1, token_x.shape[-1])
    heads, head_dim, hckv = weight_uk.shape
    cos, sin = rope_cos.reshape(-1, 1, rope_cos.shape[-1]), rope_sin.reshape(-1, 1, rope_sin.shape[-1])
    c_q = rms_normalise(cube_matmul(x, weight_dq), rmsnorm_gamma_cq, eps_cq)[0].to(x.dtype)
    q = cube_matmul(c_q, weight_uq_qr).reshape(x.shape[0], heads, -1)
    q_nope, q_pe = q.split([head_dim, q.shape[-1] - head_dim], dim=-1)
    query = cube_matmul(q_nope.transpose(0, 1), weight_uk).transpose(0, 1)
    query_rope = interleave_rope(q_pe, cos, sin)
    kv = cube_matmul(x, weight_dkv_kr)
    c_kv, k_pe = kv.split([hckv, kv.shape[-1] - hckv], dim=-1)
    c_kv = rms_normalise(c_kv, rmsnorm_gamma_ckv, eps_ckv)[0].to(x.dtype)
    k_rope = interleave_rope(k_pe.unsqueeze(1), cos, sin).squeeze(1)
    index = cache_index.reshape(-1)
    return (
        query.reshape(*lead, heads, hckv),
        query_rope.reshape(*lead, heads, -1),
        _scatter_rows(kv_cache, c_kv, index, "PA"),
        _scatter_rows(kr_cache, k_rope, index, "PA"),
    )


@npu_op(
    MLA_PROLOG_ARGUMENTS + " -> (Tensor, Tensor, Tensor, Tensor)",
    source=MLA_PROLOG_DOC,
    meta=_mla_prolog_meta,
    kernel=_mla_prolog_kernel,
    writes_back={"kv_cache": 2, "kr_cache": 3},
)
def npu_mla_prolog(
    token_x: torch.Tensor,
    weight_dq: torch.Tensor,
    weight_uq_qr: torch.Tensor,
    weight_uk: torch.Tensor,
    weight_dkv_kr: torch.Tensor,
    rmsnorm_gamma_cq: torch.Tensor,
    rmsnorm_gamma_ckv: torch.Tensor,
    rope_sin: torch.Tensor,
    rope_cos: torch.Tensor,
    cache_index: torch.Tensor,
    kv_cache: torch.Tensor,
    kr_cache: torch.Tensor,
    *,
    dequant_scale_x: Optional[torch.Tensor] = None,
    dequant_scale_w_dq: Optional[torch.Tensor] = None,
    dequant_scale_w_uq_qr: Optional[torch.Tensor] = None,
    dequant_scale_w_dkv_kr: Optional[torch.Tensor] = None,
    quant_scale_ckv: Optional[torch.Tensor] = None,
    quant_scale_ckr: Optional[torch.Tensor] = None,
    smooth_scales_cq: Optional[torch.Tensor] = None,
    rmsnorm_epsilon_cq: float = 1e-5,
    rmsnorm_epsilon_ckv: float = 1e-5,
    cache_mode: str = "PA_BSND",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """MLA preprocessing (DeepSeek-V2/V3): returns ``(query, query_rope, kv_cache, kr_cache)``.

    Source: torch_npu.npu_mla_prolog (op-plugin docs/context/torch_npu-npu_mla_prolog.md), the four
    paths of its description, each product on the modeled Cube (fp32 accumulation, one rounding to
    bfloat16) and each norm in float32 rounded to bfloat16, as the unfused ops would:

    * ``c_q = RmsNorm(x @ weight_dq)`` (gamma_cq, epsilon_cq), then ``c_q @ weight_uq_qr`` split
      per head into ``q_nope`` (D) and ``q_pe`` (Dr);
    * ``query = q_nope @ weight_uk[n]`` per head n: [.., N, Hckv];
    * ``query_rope = RoPE(q_pe)``;
    * ``x @ weight_dkv_kr`` split into ``c_kv`` (Hckv, then RmsNorm with gamma_ckv) and ``k_pe`` (Dr,
      then RoPE); they are written in place into ``kv_cache`` / ``kr_cache`` [BlockNum, BlockSize, 1, *]
      at the global slots ``cache_index`` ('PA_BSND').

    RoPE is DeepSeek's interleaved form (:func:`npu_interleave_rope`: de-interleave the Dr dims, then
    rotate halves) with rope_cos/rope_sin [T, Dr] or [B, S, Dr]; the doc gives the formula only as an
    image, so this is the unfused DeepSeek path's RoPE (assumption).  ``token_x`` is [T, He] or
    [B, S, He] bfloat16; weights are the logical [K, N] matrices (a FRACTAL_NZ format cast only changes
    the device layout).  The doc's production sizes (He 7168, Hcq 1536, Hckv 512, D 128, Dr 64) are
    not imposed, so tests can use small shapes.  Not implemented (ValueError): the int8 partial and
    full quantisation modes (int8 weight_uq_qr or caches and their scales), cache_mode 'PA_NZ', and
    npu_mla_prolog_v2.
    """
    _check_mla_prolog_arguments(**locals())


def _mla_prolog_v2_meta(*args: Any, **kwargs: Any) -> tuple[Out, ...]:
    """npu_mla_prolog's outputs and dequant_scale_q_nope, float32 [1] outside the full-quantisation mode."""
    return (*_mla_prolog_meta(*args, **kwargs), Out([1], torch.float32))


def _mla_prolog_v2_kernel(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
    return (*_mla_prolog_kernel(*args, **kwargs), torch.zeros(1, dtype=torch.float32))


def npu_mla_prolog_v2(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
    """npu_mla_prolog with a fifth output, ``dequant_scale_q_nope``: ``(query, query_rope, kv_cache, kr_cache, scale)``.

    Source: torch_npu.npu_mla_prolog_v2 (op-plugin docs, npu_mla_prolog_v2): the same inputs and four
    outputs as :func:`npu_mla_prolog`, plus the query's dequantisation scale, which outside the full
    KV-cache quantisation mode is a float32 tensor of shape [1] (the doc); its value is not specified
    there and this model returns 0.  Used by vllm-ascend's and omni-infer's DeepSeek decode paths.
    The quantised modes (int8 token_x, weights or caches) are not implemented (ValueError).
    """
    npu_mla_prolog.__wrapped__(*args, **kwargs)


# torch_npu's v2 takes exactly v1's arguments: the signature is stated once, on npu_mla_prolog.
npu_mla_prolog_v2.__signature__ = inspect.signature(npu_mla_prolog.__wrapped__).replace(
    return_annotation="tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]"
)
npu_mla_prolog_v2 = npu_op(
    MLA_PROLOG_ARGUMENTS + " -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    source=MLA_PROLOG_V2_DOC,
    meta=_mla_prolog_v2_meta,
    kernel=_mla_prolog_v2_kernel,
    writes_back={"kv_cache": 2, "kr_cache": 3},
)(npu_mla_prolog_v2)
