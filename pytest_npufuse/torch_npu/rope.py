"""Rotary position embedding ops: RoPE on one tensor, on query and key in place, and DeepSeek's interleaved form."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from ..errors import OpArgumentError
from ..numerics.exact import cube_matmul, int_matmul
from .checks import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    kernel_checks_apply,
    require_choice,
    require_dtype,
    require_shape,
    require_unused,
)
from .fixedorder import pairwise_sum, round_to_int8
from .memory import nz_run, write_nz_slots, write_slots
from .norm import rms_normalise
from .quant import symmetric_levels
from .registry import Arguments, Derivative, Out, SampleCall, bind, npu_op

ROTARY_MODES = ("half", "interleave")
ROTARY_MUL_MAX_HEAD_DIM = 896  # npu_rotary_mul's page, constraints: D < 896 and a multiple of 2, both modes
APPLY_ROPE_MODES = (*ROTARY_MODES, "quarter")  # aclnnApplyRotaryPosEmbV2's modes (op-plugin's page of the op)
APPLY_ROPE_LAYOUTS = ("BSH", "BSND", "SBND", "BNSD", "TND")
MLA_RMS_SIZE = 512  # the doc's rms_size (compressed KV width), the only value it supports
MLA_ROPE_SIZE = 64  # the doc's rope_size
KV_CACHE_MODES = ("Norm", "PA", "PA_BNSD", "PA_NZ")


def rotate(values: torch.Tensor, rotary_mode: str) -> torch.Tensor:
    """The rotated partner of RoPE: ``cat(-x2, x1)`` of the halves ('half'), of each half's halves
    ('quarter': ``cat(-x2, x1, -x4, x3)`` of the four quarters, ApplyRotaryPosEmb's README in
    hicann/ops-transformer posembedding/apply_rotary_pos_emb) or of each pair ('interleave')."""
    if rotary_mode == "half":
        first, second = values.chunk(2, dim=-1)
        return torch.cat((-second, first), dim=-1)
    if rotary_mode == "quarter":
        return torch.cat([rotate(half, "half") for half in values.chunk(2, dim=-1)], dim=-1)
    even, odd = values[..., 0::2], values[..., 1::2]
    return torch.stack((-odd, even), dim=-1).flatten(-2)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_mode: str,
         rotation: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x * cos + rotate(x) * sin`` in float32 (cos/sin broadcast), rounded once to x's dtype; with a
    ``rotation`` matrix [D, D] the rotated partner is ``x @ rotation`` (an fp32 Cube product) instead."""
    values = x.to(torch.float32)
    rotated = rotate(values, rotary_mode) if rotation is None else cube_matmul(values, rotation.to(torch.float32))
    out = values * cos.to(torch.float32) + rotated * sin.to(torch.float32)
    return out.to(x.dtype)


def _check_broadcast(name: str, table: torch.Tensor, x_name: str, x: torch.Tensor) -> None:
    """cos/sin must broadcast to x without changing its shape (e.g. [1, S, 1, D] for BSND x)."""
    if table.dim() != x.dim() or any(t not in (1, s) for t, s in zip(table.shape, x.shape)) or table.shape[-1] != x.shape[-1]:
        raise OpArgumentError(
            f"{name} has shape {list(table.shape)}; it must broadcast "
            f"to {x_name} {list(x.shape)} with the same head dim",
            argument=name
        )


def _check_rope_input(name: str, x: torch.Tensor, dtypes: tuple[torch.dtype, ...], rotary_mode: str = "half") -> None:
    require_dtype(name, x, dtypes)
    parts = 4 if rotary_mode == "quarter" else 2
    if x.shape[-1] % parts != 0:
        raise OpArgumentError(f"{name} has head dim {x.shape[-1]}; rotary_mode={rotary_mode!r} rotates "
                              f"{'quarters' if parts == 4 else 'pairs'}, so it must be a multiple of {parts}",
                              argument=name)


# ---------------------------------------------------------------------------------------------
# npu_rotary_mul
# ---------------------------------------------------------------------------------------------


def _check_rotary_mul_head_dim(input: torch.Tensor) -> None:
    """The page's constraint on the head dim D in both modes: even and below 896. An odd D (125, as a
    partial-rotary model's rope part can be) has no pair for its last element, so it is refused with the
    constraint and the way round it, not rotated in some way the page does not define."""
    dim = input.shape[-1]
    if dim % 2 == 0 and dim < ROTARY_MUL_MAX_HEAD_DIM:
        return
    raise OpArgumentError(
        f"input has head dim {dim}; npu_rotary_mul's page allows an even D below {ROTARY_MUL_MAX_HEAD_DIM} only "
        f"(each element is rotated with a partner). Rotate an even slice (x[..., :{dim - dim % 2}]) and "
        "concatenate the rest, or use the unfused x * cos + rotate(x) * sin",
        argument="input",
    )


def _rotary_mul_meta(call: Arguments) -> Out:
    """op-plugin's meta function is ``empty_like(input)``; the head-dim and broadcast checks are the
    kernel's (:func:`kernel_checks_apply`)."""
    input = call.input
    require_dtype("input", input, FLOAT_DTYPES)
    if input.dim() not in (3, 4):
        raise OpArgumentError(
            f"input has shape {list(input.shape)}; npu_rotary_mul takes 4-D BNSD/BSND/SBND or 3-D TND tensors",
            argument="input")
    for name, table in (("r1", call.r1), ("r2", call.r2)):
        require_dtype(name, table, (input.dtype,), "(input's dtype)")
    if kernel_checks_apply(input):
        _check_rotary_mul_head_dim(input)
        for name, table in (("r1", call.r1), ("r2", call.r2)):
            _check_broadcast(name, table, "input", input)
    if call.rotate is not None:
        require_dtype("rotate", call.rotate, (input.dtype,), "(input's dtype)")
        require_shape("rotate", call.rotate, ((input.shape[-1], input.shape[-1]),))
    return Out(list(input.shape), input.dtype)


def _rotary_mul_kernel(call: Arguments) -> torch.Tensor:
    return rope(call.input, call.r1, call.r2, call.rotary_mode, call.rotate)




def _unbroadcast(values: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``values`` summed over the dims a ``shape`` tensor was broadcast along (a fixed pairwise sum)."""
    for dim, size in enumerate(shape):
        if size == 1 and values.shape[dim] != 1:
            values = pairwise_sum(values, dim=dim, keepdim=True)
    return values


def _rotary_mul_backward_meta(call: Arguments) -> tuple[Out, Out, Out]:
    grad, input, r1, r2 = call.grad, call.input, call.r1, call.r2
    _rotary_mul_meta(bind(npu_rotary_mul, input, r1, r2, call.rotary_mode))
    require_dtype("grad", grad, (input.dtype,), "(input's dtype)")
    require_shape("grad", grad, (tuple(input.shape),))
    return Out(list(input.shape), input.dtype), Out(list(r1.shape), r1.dtype), Out(list(r2.shape), r2.dtype)


def _rotary_mul_backward_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``y = x * r1 + rotate(x) * r2`` and rotate's transpose is ``-rotate``, so
    ``dx = dy * r1 - rotate(dy * r2)``, ``dr1 = dy * x`` and ``dr2 = dy * rotate(x)``, each summed over
    the dims r1/r2 were broadcast along; float32, one rounding per output."""
    input, r1, r2, rotary_mode = call.input, call.r1, call.r2, call.rotary_mode
    dy, x = call.grad.to(torch.float32), input.to(torch.float32)
    dx = dy * r1.to(torch.float32) - rotate(dy * r2.to(torch.float32), rotary_mode)
    dr1 = _unbroadcast(dy * x, r1.shape)
    dr2 = _unbroadcast(dy * rotate(x, rotary_mode), r2.shape)
    return dx.to(input.dtype), dr1.to(r1.dtype), dr2.to(r2.dtype)


def _rotary_mul_backward_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(1)
    return [
        SampleCall((torch.randn(sample.args[0].shape, generator=gen).to(sample.args[0].dtype), *sample.args))
        for sample in _rotary_mul_samples()
    ]


@npu_op(meta=_rotary_mul_backward_meta, kernel=_rotary_mul_backward_kernel, samples=_rotary_mul_backward_samples)
def npu_rotary_mul_backward(call: Arguments) -> None:
    """RotaryMulGrad: the gradients of :func:`npu_rotary_mul`'s ``input``, ``r1`` and ``r2`` from the
    output's gradient ``grad``; returns ``(dx, dr1, dr2)`` (torch_npu's schema
    ``npu_rotary_mul_backward(Tensor grad, Tensor self, Tensor r1, Tensor r2, str rotary_mode='half')``)."""
    require_choice("rotary_mode", call.rotary_mode, ROTARY_MODES, "'half' rotates halves, 'interleave' pairs")


def _rotary_mul_setup(ctx: object, call: Arguments, output: torch.Tensor) -> None:
    ctx.save_for_backward(call.input, call.r1, call.r2)
    ctx.rotary_mode = call.rotary_mode
    ctx.rotated_by_matrix = call.rotate is not None


def _rotary_mul_grad(ctx: object, grad: torch.Tensor) -> tuple:
    if ctx.rotated_by_matrix:
        raise OpArgumentError("npu_rotary_mul has no backward with a rotate matrix (the op's page); compute it "
                              "without gradients or use rotary_mode without rotate")
    x, r1, r2 = ctx.saved_tensors
    dx, dr1, dr2 = torch.ops.npu.npu_rotary_mul_backward(grad, x, r1, r2, ctx.rotary_mode)
    return dx, dr1, dr2, None, None


def _rotary_mul_samples() -> list[SampleCall]:
    """BSND with a [1, S, 1, D] table (half rotation), BNSD with a [1, 1, S, D] table (interleaved), and TND
    with a head dim of 10 (even, not 32-byte aligned)."""
    gen = torch.Generator().manual_seed(0)
    bsnd, table = torch.randn(2, 3, 2, 8, generator=gen), (1, 3, 1, 8)
    bnsd = torch.randn(1, 2, 4, 8, generator=gen).bfloat16()
    tnd = torch.randn(5, 2, 10, generator=gen).half()
    return [
        SampleCall((bsnd, torch.randn(table, generator=gen), torch.randn(table, generator=gen))),
        SampleCall((bnsd, *(torch.randn(1, 1, 4, 8, generator=gen).bfloat16() for _ in range(2)), "interleave")),
        SampleCall((tnd, *(torch.randn(5, 1, 10, generator=gen).half() for _ in range(2)))),
    ]


@npu_op(
    meta=_rotary_mul_meta,
    kernel=_rotary_mul_kernel,
    derivative=Derivative(_rotary_mul_setup, _rotary_mul_grad),
    samples=_rotary_mul_samples,
)
def npu_rotary_mul(call: Arguments) -> None:
    """RoPE on one 4-D tensor: ``r1 * input + r2 * rotate(input)``.

    Source: torch_npu.npu_rotary_mul (API reference 7.0, ptaoplist_000141, and op-plugin
    docs/context/torch_npu-npu_rotary_mul.md), which gives the formula as code:

    * 'half': ``x1, x2 = chunk(input, 2, -1); rotate = cat(-x2, x1)`` (GPT-NeoX style);
    * 'interleave': pairs ``(x[2i], x[2i+1])`` become ``(-x[2i+1], x[2i])`` (GPT-J style);
    * ``rotate`` given (a [D, D] matrix in input's dtype): the rotated partner is ``input @ rotate``
      whatever the mode (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_rotary_mul.md, which
      builds the half/interleave matrices in its example); the page gives it no backward.

    ``input`` float16/bfloat16/float32, 4-D (BNSD, BSND or SBND) or 3-D (TND) with an even head dim
    below 896 (the page's constraint, whether or not D is 32-byte aligned: 130 is taken, 125 refused);
    ``r1`` (cos) and ``r2`` (sin) in input's dtype broadcast to it (e.g. [1, 1, S, D]).  Math is
    float32 with one rounding to input's dtype.  Other modes ('quarter' is npu_apply_rotary_pos_emb's)
    are refused, as torch_npu refuses them.
    """
    if call.rotary_mode not in ROTARY_MODES:
        raise OpArgumentError(
            # op-plugin's own words (RotaryMulKernelNpuOpApi.cpp), which code matches on
            f"The rotary_mode of npu_rotary_mul should be half or interleave, but got {call.rotary_mode} "
            "('quarter' is npu_apply_rotary_pos_emb's mode)", argument="rotary_mode")


# ---------------------------------------------------------------------------------------------
# npu_apply_rotary_pos_emb
# ---------------------------------------------------------------------------------------------


def _apply_rotary_pos_emb_meta(call: Arguments) -> tuple[Out, Out]:
    query, key, layout = call.query, call.key, call.layout
    _check_rope_input("query", query, FLOAT_DTYPES, call.rotary_mode)
    require_dtype("key", key, (query.dtype,), "(query's dtype)")
    expected_rank = 3 if layout == "TND" else 4
    for name, x in (("query", query), ("key", key)):
        if x.dim() != expected_rank:
            raise OpArgumentError(
                f"{name} has shape {list(x.shape)}; layout {layout!r} needs {expected_rank} dims", argument=name
            )
    for name, table in (("cos", call.cos), ("sin", call.sin)):
        require_dtype(name, table, (query.dtype,), "(query's dtype)")
        _check_broadcast(name, table, "query", query)
        _check_broadcast(name, table, "key", key)
    return Out(list(query.shape), query.dtype), Out(list(key.shape), key.dtype)


def _apply_rotary_pos_emb_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    return rope(call.query, call.cos, call.sin, call.rotary_mode), rope(call.key, call.cos, call.sin, call.rotary_mode)


def _apply_rotary_pos_emb_samples() -> list[SampleCall]:
    """float16 BSND query and key with per-token tables (the default layout, 'BSH', is read as BSND)."""
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 3, 16, generator=gen).half(), torch.randn(2, 4, 1, 16, generator=gen).half()
    cos, sin = (torch.randn(2, 4, 1, 16, generator=gen).half() for _ in range(2))
    return [SampleCall((q, k, cos, sin))]


@npu_op(meta=_apply_rotary_pos_emb_meta, kernel=_apply_rotary_pos_emb_kernel, writes_back={"query": 0, "key": 1},
        samples=_apply_rotary_pos_emb_samples)
def npu_apply_rotary_pos_emb(call: Arguments) -> None:
    """RoPE on query and key in place: returns ``(query, key)`` after ``x = x * cos + rotate(x) * sin``.

    Sources: op-plugin's ApplyRotaryPosEmbNpuOpApi.cpp (aclnnApplyRotaryPosEmb updates query and
    key in place and returns them; layouts BSND/'BSH', SBND, BNSD, TND; modes 'half', 'quarter' and
    'interleave', op-plugin's page torch_npu-apply_rotary_pos_emb.md) and the RoPE formula of
    torch_npu.npu_rotary_mul for 'half' and 'interleave'; 'quarter' rotates each half of the head dim
    as 'half' rotates the whole (``cat(-x2, x1, -x4, x3)`` of the quarters, ApplyRotaryPosEmb's README
    in hicann/ops-transformer), so the head dim must be a multiple of 4.

    query/key share a dtype (float16/bfloat16/float32) and layout (4-D, or 3-D for TND); cos/sin
    broadcast to both (e.g. [B, S, 1, D] for BSND).  The captured graph holds one functional
    ``npu.npu_apply_rotary_pos_emb`` node; the wrapper copies its outputs into query and key, as
    the real op writes them.
    """
    require_choice("layout", call.layout, APPLY_ROPE_LAYOUTS, "the layouts aclnnApplyRotaryPosEmb accepts")
    require_choice("rotary_mode", call.rotary_mode, APPLY_ROPE_MODES,
                   "'half' rotates halves, 'quarter' each half's halves, 'interleave' pairs")


# ---------------------------------------------------------------------------------------------
# npu_interleave_rope
# ---------------------------------------------------------------------------------------------


def _interleave_rope_meta(call: Arguments) -> Out:
    x = call.x
    _check_rope_input("x", x, HALF_DTYPES)
    if x.dim() != 4:
        raise OpArgumentError(
            f"x has shape {list(x.shape)}; npu_interleave_rope needs [B, N, S, D] (D = 64 on the device)", argument="x"
        )
    for name, table in (("cos", call.cos), ("sin", call.sin)):
        require_dtype(name, table, (x.dtype,), "(x's dtype)")
        if table.dim() != 4 or table.shape[1] != 1 or table.shape[2] not in (1, x.shape[2]):
            raise OpArgumentError(f"{name} has shape {list(table.shape)}; expected [B, 1, S or 1, D]", argument=name)
        _check_broadcast(name, table, "x", x)
    return Out(list(x.shape), x.dtype)


def interleave_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """De-interleave the head dim (even elements, then odd), then half-rotate RoPE (DeepSeek MLA)."""
    pairs_first = x.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)
    return rope(pairs_first, cos, sin, "half")


def _interleave_rope_kernel(call: Arguments) -> torch.Tensor:
    return interleave_rope(call.x, call.cos, call.sin)


def _interleave_rope_samples() -> list[SampleCall]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 64, generator=gen).bfloat16()
    return [SampleCall((x, *(torch.randn(2, 1, 4, 64, generator=gen).bfloat16() for _ in range(2))))]


@npu_op(meta=_interleave_rope_meta, kernel=_interleave_rope_kernel, samples=_interleave_rope_samples)
def npu_interleave_rope(call: Arguments) -> None:
    """RoPE on a tensor whose head dim is stored interleaved (DeepSeek MLA's rope part).

    Source: torch_npu.npu_interleave_rope (op-plugin docs/context/torch_npu-npu_interleave_rope.md):
    ``x`` [B, N, S, D] float16/bfloat16, cos/sin [B, 1, S or 1, D] in x's dtype; the output has x's
    shape and dtype.  The device requires D = 64; any even D is accepted here so that shrunk test
    shapes work.  The doc's formula first de-interleaves the head dim
    (``q = x.view(.., 32, 2).transpose(-1, -2).reshape(.., 64)``: even elements first, then odd),
    then applies ``q * cos + RotateHalf(q) * sin`` with RotateHalf moving the negated second half
    to the front.  This is DeepSeek-V2/V3's ``apply_rotary_pos_emb``.  float32 math, one rounding.
    """


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
            ok = cache.dim() == 4 and cache.shape[2] == 1 and (cache_mode != "PA_NZ" or width % nz_run(cache) == 0)
        if not ok or cache.shape[-1] != width:
            layout = f"[{batch}, 1, cache_length >= {seq}, {width}]" if cache_mode == "Norm" else f"[block_num, block_size, 1, {width}]"
            raise OpArgumentError(
                f"{name} has shape {list(cache.shape)}; cache_mode {cache_mode!r} needs {layout}", argument=name
            )


def _kv_rmsnorm_rope_cache_meta(call: Arguments) -> tuple[Out, Out, Out, Out]:
    """The updated caches (like the inputs), k_embed [B, 1, S, 64] and y [B, 1, S, 512] in kv's dtype (v2's
    record too: it has v1's arguments, and the wrapper refused v2's own)."""
    kv, cos, index, k_cache, ckv_cache = call.kv, call.cos, call.index, call.k_cache, call.ckv_cache
    require_dtype("kv", kv, HALF_DTYPES)
    if kv.dim() != 4 or kv.shape[1] != 1 or cos.dim() != 4 or not 0 < cos.shape[-1] < kv.shape[-1]:
        raise OpArgumentError(
            f"kv has shape {list(kv.shape)} and cos {list(cos.shape)}; expected kv [batch, 1, seq_len, rms + rope] "
            f"and cos [batch, 1, seq_len, rope] (the device supports rms {MLA_RMS_SIZE}, rope {MLA_ROPE_SIZE})",
            argument="kv"
        )
    batch, _, seq, _ = kv.shape
    rope_size = cos.shape[-1]
    rms_size = kv.shape[-1] - rope_size
    require_dtype("gamma", call.gamma, (kv.dtype,), "(kv's dtype)")
    require_shape("gamma", call.gamma, ((rms_size,),))
    for name, table in (("cos", cos), ("sin", call.sin)):
        require_dtype(name, table, (kv.dtype,), "(kv's dtype)")
        require_shape(name, table, ((batch, 1, seq, rope_size),))
    require_dtype("index", index, (torch.int64,))
    cache_mode = call.cache_mode
    require_shape("index", index, ((batch, seq),) if cache_mode == "Norm" else ((batch * seq,),))
    _kv_cache_shapes(kv, cache_mode, (k_cache, rope_size), (ckv_cache, rms_size))
    return (
        Out(list(k_cache.shape), k_cache.dtype),
        Out(list(ckv_cache.shape), ckv_cache.dtype),
        Out([batch, 1, seq, rope_size], kv.dtype),
        Out([batch, 1, seq, rms_size], kv.dtype),
    )


def _scatter_rows(cache: torch.Tensor, rows: torch.Tensor, index: torch.Tensor, cache_mode: str) -> torch.Tensor:
    """A copy of ``cache`` with each token's row written at its index (per batch for Norm, global slots otherwise)."""
    if cache_mode != "Norm":
        return write_paged_rows(cache, rows, index.reshape(-1), cache_mode)
    width, limit = cache.shape[-1], cache.shape[2]
    if bool(((index < 0) | (index >= limit)).any()):
        raise OpArgumentError(
            f"index holds {index.tolist()}; every value must be an offset in [0, {limit}) of the cache",
            argument="index"
        )
    slots = (index + torch.arange(cache.shape[0]).unsqueeze(-1) * limit).reshape(-1)
    return write_slots(cache.reshape(-1, 1, width), rows.reshape(-1, 1, width), slots).view(cache.shape)


def _kv_rmsnorm_rope_cache_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    kv, cos, index, cache_mode = call.kv, call.cos, call.index, str(call.cache_mode)
    rms_in, rope_in = kv.split([kv.shape[-1] - cos.shape[-1], cos.shape[-1]], dim=-1)
    y = rms_normalise(rms_in, call.gamma, float(call.epsilon))[0].to(kv.dtype)
    k_embed = interleave_rope(rope_in, cos, call.sin)
    return (
        _scatter_rows(call.k_cache, k_embed, index, cache_mode),
        _scatter_rows(call.ckv_cache, y, index, cache_mode),
        k_embed,
        y,
    )


def _kv_rmsnorm_rope_cache_samples() -> list[SampleCall]:
    """A Norm cache [B, 1, S_cache, D] indexed per batch, and a PA_NZ paged cache written by slot."""
    gen = torch.Generator().manual_seed(0)

    def bf16(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).bfloat16()

    def zeros(*shape: int) -> torch.Tensor:
        return torch.zeros(*shape, dtype=torch.bfloat16)

    norm = SampleCall(
        (bf16(2, 1, 3, 576), bf16(512), bf16(2, 1, 3, 64), bf16(2, 1, 3, 64), torch.tensor([[4, 0, 2], [1, 5, 3]]),
         zeros(2, 1, 6, 64), zeros(2, 1, 6, 512)),
    )
    paged = SampleCall(
        (bf16(4, 1, 1, 48), bf16(32), bf16(4, 1, 1, 16), bf16(4, 1, 1, 16), torch.tensor([17, 0, 31, 5]),
         zeros(2, 16, 1, 16), zeros(2, 16, 1, 32)),
        {"cache_mode": "PA_NZ", "is_output_kv": True},
    )
    return [norm, paged]


@npu_op(
    meta=_kv_rmsnorm_rope_cache_meta,
    kernel=_kv_rmsnorm_rope_cache_kernel,
    writes_back={"k_cache": 0, "ckv_cache": 1},
    samples=_kv_rmsnorm_rope_cache_samples,
)
def npu_kv_rmsnorm_rope_cache(call: Arguments) -> None:
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
      token's offset within its batch; 'PA'/'PA_BNSD'/'PA_NZ' caches are [block_num, block_size,
      1, D] and ``index`` [B * S] holds global slots (block * block_size + offset); PA_NZ stores
      each block as FRACTAL_NZ, [block_num, D // 16, block_size, 1, 16] for 16-bit caches (the
      doc's layout; :func:`write_paged_rows`).

    Returns ``(k_cache, ckv_cache, k_embed_out, y_out)``; the caches are the updated inputs.  The
    doc defines the last two only for ``is_output_kv=True``; this model always returns k_embed and
    y there.  Not implemented (ValueError): the int8 quantised caches (k_rope_scale, c_kv_scale and
    offsets), PA_BLK_NZ and PA_BLK_BNSD.  An index outside the cache is refused (the doc leaves
    repeated or out-of-range indexes undefined).
    """
    _check_kv_rmsnorm_rope_cache_arguments("npu_kv_rmsnorm_rope_cache", call)


def _check_kv_rmsnorm_rope_cache_arguments(op: str, call: Arguments) -> None:
    """The argument checks npu_kv_rmsnorm_rope_cache and its _v2 share."""
    scales = ("k_rope_scale", "c_kv_scale", "k_rope_offset", "c_kv_offset")
    require_unused(f"{op} (int8 caches)", **{name: getattr(call, name) for name in scales})
    require_choice("cache_mode", call.cache_mode, KV_CACHE_MODES,
                   "Norm per-batch caches, PA/PA_BNSD/PA_NZ paged caches")




def _kv_rmsnorm_rope_cache_v2_meta(call: Arguments) -> tuple[Out, ...]:
    """k_embed [B, 1, S, rope] and y [B, 1, S, rms], then the two updated caches (the functional form)."""
    k_cache, ckv_cache, k_embed, y = _kv_rmsnorm_rope_cache_meta(call)
    return k_embed, y, k_cache, ckv_cache


def _kv_rmsnorm_rope_cache_v2_kernel(call: Arguments) -> tuple[torch.Tensor, ...]:
    k_cache, ckv_cache, k_embed, y = _kv_rmsnorm_rope_cache_kernel(call)
    return k_embed, y, k_cache, ckv_cache


@npu_op(
    meta=_kv_rmsnorm_rope_cache_v2_meta,
    kernel=_kv_rmsnorm_rope_cache_v2_kernel,
    writes_back={"k_cache": 2, "ckv_cache": 3},
    schema_mutates=True,
    unmodeled=("v", "k_cache_dtype", "ckv_cache_dtype"),
    samples=_kv_rmsnorm_rope_cache_samples,
)
def npu_kv_rmsnorm_rope_cache_v2(call: Arguments) -> None:
    """npu_kv_rmsnorm_rope_cache with in-place caches: returns ``(k_embed, y)``, updates k_cache and ckv_cache.

    Source: op-plugin's schema of npu_kv_rmsnorm_rope_cache_v2 (``Tensor(a!) k_cache, Tensor(b!)
    ckv_cache`` ... ``-> (Tensor, Tensor)``) and its meta function (outputs [B, N, S, rope] and
    [B, N, S, rms] in kv's dtype); the computation and cache modes are
    :func:`npu_kv_rmsnorm_rope_cache`'s (one shared kernel).  cann-recipes-infer's DeepSeek-R1
    calls it with ``cache_mode="PA_NZ"`` and reads ``(k_rope, k_nope)`` with ``is_output_kv=True``.
    Not implemented (ValueError): ``v`` (the meta shows it replaces the rms part's width; no
    document defines its computation), the hifloat8 dtype hints and the int8 caches.
    """
    _check_kv_rmsnorm_rope_cache_arguments("npu_kv_rmsnorm_rope_cache_v2", call)


# ---------------------------------------------------------------------------------------------
# npu_mla_prolog, _v2, _v3
# ---------------------------------------------------------------------------------------------


MLA_PAGED_MODES = ("PA_BSND", "PA_NZ")
MLA_V3_CACHE_MODES = ("PA_BSND", "PA_NZ", "BSND", "TND")
INT8_LEVEL_MAX = 127.0


@dataclass(frozen=True)
class MlaScenario:
    """The documented (quantisation, cache layout) scenario of one MlaProlog call.

    ``weights``: 0 bfloat16; 1 only weight_uq_qr int8 (c_Q quantised per token on the fly);
    2 token_x and weight_dq / weight_uq_qr / weight_dkv_kr int8 with per-token / per-channel
    dequant scales.  ``kv_cache``: 0 bfloat16 caches; 1 kv_cache int8 per tensor (kr_cache
    bfloat16); 2 both caches int8 per channel.  ``query``: 1 returns query int8 with a
    per-token-head dequant scale.
    """

    weights: int
    kv_cache: int
    query: int
    cache_mode: str


def _scenario_from_dtypes(call: Arguments) -> MlaScenario:
    """npu_mla_prolog(_v2) read the scenario from the dtypes, as their scenario tables do."""
    weights = 2 if call.token_x.dtype == torch.int8 else 1 if call.weight_uq_qr.dtype == torch.int8 else 0
    kv_cache = 0 if call.kv_cache.dtype != torch.int8 else 1 if weights == 2 else 2
    query = 1 if weights == 2 and call.quant_scale_ckv is not None else 0
    return MlaScenario(weights, kv_cache, query, str(call.cache_mode))


def _scenario_from_modes(call: Arguments) -> MlaScenario:
    """npu_mla_prolog_v3 states the scenario in weight_quant_mode / kv_cache_quant_mode / query_quant_mode."""
    return MlaScenario(
        int(call.weight_quant_mode), int(call.kv_cache_quant_mode), int(call.query_quant_mode),
        str(call.cache_mode),
    )


@dataclass(frozen=True)
class MlaDims:
    """Sizes of one MlaProlog call (the doc's names): tokens T, He, Hcq, N, D, Dr, Hckv."""

    lead: tuple[Any, ...]
    hidden: Any
    hcq: Any
    heads: Any
    head_dim: Any
    rope_dim: Any
    hckv: Any


def _check_mla_cache_mode(op: str, call: Arguments, cache_modes: Sequence[str]) -> None:
    """The argument check every MlaProlog version shares beyond the schema's types."""
    require_choice("cache_mode", call.cache_mode, cache_modes,
                   f"{op}: paged caches in ND (PA_BSND) or FRACTAL_NZ (PA_NZ) blocks")


def _require_matrix(name: str, tensor: torch.Tensor, rows: Any, dtype: torch.dtype) -> Any:
    """A [rows, cols] weight in ``dtype``; returns cols."""
    require_dtype(name, tensor, (dtype,), "(as the quantisation scenario requires)")
    if tensor.dim() != 2 or tensor.shape[0] != rows:
        raise OpArgumentError(f"{name} has shape {list(tensor.shape)}; expected [{rows}, ...]", argument=name)
    return tensor.shape[1]


def _mla_dims(call: Arguments, scenario: MlaScenario) -> MlaDims:
    """Validate the weights and norms against token_x and return the sizes."""
    token_x, weight_uk = call.token_x, call.weight_uk
    full = torch.int8 if scenario.weights == 2 else torch.bfloat16
    require_dtype("token_x", token_x, (full,), f"(weight_quant_mode {scenario.weights})")
    if token_x.dim() not in (2, 3):
        raise OpArgumentError(
            f"token_x has shape {list(token_x.shape)}; expected [T, He] or [B, S, He]", argument="token_x"
        )
    hidden = token_x.shape[-1]
    hcq = _require_matrix("weight_dq", call.weight_dq, hidden, full)
    require_dtype("weight_uk", weight_uk, (torch.bfloat16,))
    if weight_uk.dim() != 3:
        raise OpArgumentError(
            f"weight_uk has shape {list(weight_uk.shape)}; expected [N, D, Hckv]", argument="weight_uk"
        )
    heads, head_dim, hckv = weight_uk.shape
    qr_dtype = torch.int8 if scenario.weights else torch.bfloat16
    qr_width = _require_matrix("weight_uq_qr", call.weight_uq_qr, hcq, qr_dtype)
    if qr_width % heads != 0 or qr_width // heads <= head_dim:
        raise OpArgumentError(
            f"weight_uq_qr has {qr_width} columns; expected N * (D + Dr) with N={heads}, D={head_dim}",
            argument="weight_uq_qr"
        )
    rope_dim = qr_width // heads - head_dim
    if _require_matrix("weight_dkv_kr", call.weight_dkv_kr, hidden, full) != hckv + rope_dim:
        raise OpArgumentError(
            f"weight_dkv_kr has shape {list(call.weight_dkv_kr.shape)}; expected [{hidden}, {hckv + rope_dim}]",
            argument="weight_dkv_kr"
        )
    lead = tuple(token_x.shape[:-1])
    for name, width in (("rmsnorm_gamma_cq", hcq), ("rmsnorm_gamma_ckv", hckv)):
        require_dtype(name, getattr(call, name), (torch.bfloat16,))
        require_shape(name, getattr(call, name), ((width,),))
    for name in ("rope_sin", "rope_cos"):
        require_dtype(name, getattr(call, name), (torch.bfloat16,))
        require_shape(name, getattr(call, name), ((*lead, rope_dim),))
    return MlaDims(lead, hidden, hcq, heads, head_dim, rope_dim, hckv)


def _check_mla_scales(call: Arguments, scenario: MlaScenario, dims: MlaDims) -> None:
    """Each scenario's scale inputs: present with the documented shape, or absent."""
    tokens = math.prod(dims.lead)
    expected = {
        "dequant_scale_x": ((tokens, 1),) if scenario.weights == 2 else None,
        "dequant_scale_w_dq": ((1, dims.hcq),) if scenario.weights == 2 else None,
        "dequant_scale_w_uq_qr": ((1, dims.heads * (dims.head_dim + dims.rope_dim)),) if scenario.weights else None,
        "dequant_scale_w_dkv_kr": ((1, dims.hckv + dims.rope_dim),) if scenario.weights == 2 else None,
        "quant_scale_ckv": ((1, dims.hckv), (1,)) if scenario.kv_cache else None,
        "quant_scale_ckr": ((1, dims.rope_dim),) if scenario.kv_cache == 2 else None,
    }
    for name, shapes in expected.items():
        value = getattr(call, name)
        if shapes is None:
            if value is not None:
                raise OpArgumentError(
                    f"{name} is given but this call is not in a scenario that uses it; pass None", argument=name
                )
            continue
        if value is None:
            raise OpArgumentError(
                f"{name} is required when the inputs are quantised this way (see the scenario table)", argument=name
            )
        require_dtype(name, value, (torch.float32,))
        require_shape(name, value, shapes)
    smooth = call.smooth_scales_cq
    if smooth is not None:
        if not scenario.weights:
            raise OpArgumentError(
                "smooth_scales_cq is only used when weight_uq_qr is int8; pass None", argument="smooth_scales_cq"
            )
        require_dtype("smooth_scales_cq", smooth, (torch.float32,))
        require_shape("smooth_scales_cq", smooth, ((1, dims.hcq),))


def _check_mla_caches(call: Arguments, scenario: MlaScenario, dims: MlaDims) -> None:
    """Cache shapes of the cache mode and dtypes of the kv-cache scenario; cache_index where it is used."""
    cache_dtypes = {
        "kv_cache": torch.int8 if scenario.kv_cache else torch.bfloat16,
        "kr_cache": torch.int8 if scenario.kv_cache == 2 else torch.bfloat16,
    }
    for name, width in (("kv_cache", dims.hckv), ("kr_cache", dims.rope_dim)):
        cache = getattr(call, name)
        require_dtype(name, cache, (cache_dtypes[name],), f"(kv_cache_quant_mode {scenario.kv_cache})")
        if scenario.cache_mode in MLA_PAGED_MODES:
            layout = f"[BlockNum, BlockSize, 1, {width}]"
            ok = cache.dim() == 4 and cache.shape[2] == 1 and cache.shape[3] == width
            if ok and scenario.cache_mode == "PA_NZ":
                ok = width % nz_run(cache) == 0
                layout += f" with {width} a multiple of {nz_run(cache)} (FRACTAL_NZ)"
        else:
            shape = (*dims.lead, 1, width)
            layout = str(list(shape))
            ok = tuple(cache.shape) == shape
        if not ok:
            raise OpArgumentError(
                f"{name} has shape {list(cache.shape)}; cache_mode {scenario.cache_mode!r} needs {layout}",
                argument=name
            )
    index = call.cache_index
    if scenario.cache_mode not in MLA_PAGED_MODES:
        if index is not None:
            raise OpArgumentError(
                f"cache_index is not used with cache_mode {scenario.cache_mode!r}; pass None", argument="cache_index"
            )
        return
    if index is None:
        raise OpArgumentError(
            f"cache_mode {scenario.cache_mode!r} needs cache_index (one slot per token)", argument="cache_mode"
        )
    require_dtype("cache_index", index, (torch.int64,))
    require_shape("cache_index", index, (dims.lead,))


def _mla_outputs(call: Arguments, scenario: MlaScenario) -> tuple[MlaDims, dict[str, Out]]:
    """Validate one call and declare every output the versions pick from (op-plugin meta functions)."""
    dims = _mla_dims(call, scenario)
    _check_mla_scales(call, scenario, dims)
    _check_mla_caches(call, scenario, dims)
    tokens = math.prod(dims.lead)
    quantised_query = scenario.query == 1
    outputs = {
        "query": Out([*dims.lead, dims.heads, dims.hckv], torch.int8 if quantised_query else torch.bfloat16),
        "query_rope": Out([*dims.lead, dims.heads, dims.rope_dim], torch.bfloat16),
        "dequant_scale_q_nope": Out([tokens, dims.heads, 1] if quantised_query else [1], torch.float32),
        "kv_cache": Out(list(call.kv_cache.shape), call.kv_cache.dtype),
        "kr_cache": Out(list(call.kr_cache.shape), call.kr_cache.dtype),
    }
    return dims, outputs


def write_paged_rows(cache: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor, cache_mode: str) -> torch.Tensor:
    """A copy of a [BlockNum, BlockSize, 1, D] cache with row ``i`` stored at global slot ``slots[i]``.

    PA_BSND/PA/PA_BNSD blocks are ND (a slot's row is contiguous).  PA_NZ blocks keep the ND
    shape but store each block as FRACTAL_NZ: the memory of block b is [D / c, BlockSize, c] with
    c = 32 bytes of values (kv_rmsnorm_rope_cache doc: [block_num, D // 16, block_size, 1, 16]
    for bfloat16, // 32 for int8; MlaProlog design doc, KVCache section), which is the 5-D view
    [BlockNum, 1, D / c, BlockSize, c] the attention op reads.  Slots outside the cache are refused.
    """
    blocks, block_size, _, width = cache.shape
    limit = blocks * block_size
    if bool(((slots < 0) | (slots >= limit)).any()):
        raise OpArgumentError(f"the cache index holds {slots.tolist()}; every value must be a slot in [0, {limit})")
    if cache_mode == "PA_NZ":
        return write_nz_slots(cache, rows.reshape(-1, width), slots, block_size)
    return write_slots(cache, rows.reshape(-1, 1, width), slots)


def _dequant_int8_matmul(
    x: torch.Tensor, weight: torch.Tensor, row_scale: torch.Tensor, column_scale: torch.Tensor
) -> torch.Tensor:
    """``int8 @ int8`` (exact int32) times the per-row and per-column float32 dequant scales, rounded to bfloat16."""
    accumulator = int_matmul(x, weight).to(torch.float32)
    return (accumulator * row_scale.reshape(-1, 1) * column_scale.reshape(1, -1)).to(torch.bfloat16)


def _mla_down_projections(call: Arguments, scenario: MlaScenario, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x @ W^DQ`` and ``x @ [W^DKV | W^KR]`` in bfloat16 (dequantised per token and channel when int8)."""
    if scenario.weights == 2:
        x_scale = call.dequant_scale_x
        return (
            _dequant_int8_matmul(x, call.weight_dq, x_scale, call.dequant_scale_w_dq),
            _dequant_int8_matmul(x, call.weight_dkv_kr, x_scale, call.dequant_scale_w_dkv_kr),
        )
    return cube_matmul(x, call.weight_dq), cube_matmul(x, call.weight_dkv_kr)


def _mla_query_up(
    call: Arguments, scenario: MlaScenario, c_q: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """``c_Q @ [W^UQ | W^QR]`` and the query_norm output (c_Q, or its int8 levels and per-token scale).

    With an int8 weight_uq_qr, c_Q is quantised per token first (design doc, PostQuant/Dequant:
    scale = rowmax|c_Q * smooth| / 127, levels rounded half to even) and the int32 product is
    dequantised by that scale and dequant_scale_w_uq_qr.
    """
    if not scenario.weights:
        return cube_matmul(c_q, call.weight_uq_qr), c_q, None
    values = c_q.to(torch.float32)
    smooth = call.smooth_scales_cq
    if smooth is not None:
        values = values * smooth.reshape(1, -1)
    levels, scale = symmetric_levels(values, INT8_LEVEL_MAX)
    levels = levels.to(torch.int8)
    q = _dequant_int8_matmul(levels, call.weight_uq_qr, scale, call.dequant_scale_w_uq_qr)
    return q, levels, scale.reshape(-1, 1)


def _mla_compute(call: Arguments, scenario: MlaScenario, dims: MlaDims) -> dict[str, torch.Tensor]:
    """The four paths of the MlaProlog docs (plus the query quantisation), every output by name."""
    x = call.token_x.reshape(-1, dims.hidden)
    cos = call.rope_cos.reshape(-1, 1, dims.rope_dim)
    sin = call.rope_sin.reshape(-1, 1, dims.rope_dim)
    cq_in, kv = _mla_down_projections(call, scenario, x)
    c_q = rms_normalise(cq_in, call.rmsnorm_gamma_cq, float(call.rmsnorm_epsilon_cq))[0]
    c_q = (c_q * float(getattr(call, "qc_qr_scale", 1.0))).to(torch.bfloat16)
    q, query_norm, query_norm_scale = _mla_query_up(call, scenario, c_q)
    q_nope, q_pe = q.reshape(x.shape[0], dims.heads, -1).split([dims.head_dim, dims.rope_dim], dim=-1)
    query = cube_matmul(q_nope.transpose(0, 1), call.weight_uk).transpose(0, 1)
    query_scale = torch.zeros(1, dtype=torch.float32)
    if scenario.query == 1:
        levels, scale = symmetric_levels(query.to(torch.float32), INT8_LEVEL_MAX)
        query, query_scale = levels.to(torch.int8), scale.unsqueeze(-1)
    c_kv, k_pe = kv.split([dims.hckv, dims.rope_dim], dim=-1)
    c_kv = rms_normalise(c_kv, call.rmsnorm_gamma_ckv, float(call.rmsnorm_epsilon_ckv))[0]
    kv_rows = (c_kv * float(getattr(call, "kc_scale", 1.0))).to(torch.bfloat16)
    kr_rows = interleave_rope(k_pe.unsqueeze(1), cos, sin).squeeze(1)
    if scenario.kv_cache:
        kv_rows = round_to_int8(kv_rows.to(torch.float32) * call.quant_scale_ckv.reshape(1, -1))
    if scenario.kv_cache == 2:
        kr_rows = round_to_int8(kr_rows.to(torch.float32) * call.quant_scale_ckr.reshape(1, -1))
    return {
        "query": query.reshape(*dims.lead, dims.heads, dims.hckv),
        "query_rope": interleave_rope(q_pe, cos, sin).reshape(*dims.lead, dims.heads, dims.rope_dim),
        "dequant_scale_q_nope": query_scale,
        "query_norm": query_norm.reshape(*dims.lead, dims.hcq),
        "dequant_scale_q_norm": query_norm_scale,
        "kv_cache": _store_mla_rows(call, "kv_cache", kv_rows, scenario.cache_mode),
        "kr_cache": _store_mla_rows(call, "kr_cache", kr_rows, scenario.cache_mode),
    }


def _store_mla_rows(call: Arguments, name: str, rows: torch.Tensor, cache_mode: str) -> torch.Tensor:
    """The updated cache: rows scattered to cache_index slots (paged modes) or the token-shaped cache itself (BSND/TND)."""
    cache = getattr(call, name)
    if cache_mode in MLA_PAGED_MODES:
        return write_paged_rows(cache, rows, call.cache_index.reshape(-1), cache_mode)
    return rows.reshape(cache.shape).to(cache.dtype)


def _mla_prolog_meta(call: Arguments) -> tuple[Out, ...]:
    """query, query_rope and the two updated caches (npu_mla_prolog's four outputs)."""
    scenario = _scenario_from_dtypes(call)
    if scenario.query:
        raise OpArgumentError(
            "npu_mla_prolog has no dequant_scale_q_nope output for an int8 query; use npu_mla_prolog_v2"
        )
    _, outputs = _mla_outputs(call, scenario)
    return tuple(outputs[name] for name in ("query", "query_rope", "kv_cache", "kr_cache"))


def _mla_prolog_kernel(call: Arguments) -> tuple[torch.Tensor, ...]:
    scenario = _scenario_from_dtypes(call)
    result = _mla_compute(call, scenario, _mla_dims(call, scenario))
    return tuple(result[name] for name in ("query", "query_rope", "kv_cache", "kr_cache"))


def _mla_prolog_inputs() -> tuple[torch.Tensor, ...]:
    """The unquantised MLA prolog's weights and tables for 3 tokens (hidden 32, 2 heads of 8 + 8 rope, a
    latent of 16), in torch_npu's argument order up to the cache index."""
    gen = torch.Generator().manual_seed(0)
    tokens, hidden, q_rank, heads, nope, rope_dim, kv_rank = 3, 32, 16, 2, 8, 8, 16

    def bf16(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).bfloat16()

    return (
        bf16(tokens, hidden), bf16(hidden, q_rank, scale=0.3), bf16(q_rank, heads * (nope + rope_dim), scale=0.3),
        bf16(heads, nope, kv_rank, scale=0.3), bf16(hidden, kv_rank + rope_dim, scale=0.3), bf16(q_rank),
        bf16(kv_rank), bf16(tokens, rope_dim), bf16(tokens, rope_dim),
    )


def _mla_prolog_caches() -> tuple[torch.Tensor, torch.Tensor]:
    """A paged latent cache and rope cache of 2 blocks of 4 slots."""
    return torch.zeros(2, 4, 1, 16, dtype=torch.bfloat16), torch.zeros(2, 4, 1, 8, dtype=torch.bfloat16)


def _mla_prolog_samples() -> list[SampleCall]:
    return [SampleCall((*_mla_prolog_inputs(), torch.tensor([0, 5, 2]), *_mla_prolog_caches()))]


def _mla_prolog_v3_samples() -> list[SampleCall]:
    return [SampleCall((*_mla_prolog_inputs(), *_mla_prolog_caches()), {"cache_index": torch.tensor([0, 5, 2])})]


@npu_op(
    meta=_mla_prolog_meta,
    kernel=_mla_prolog_kernel,
    writes_back={"kv_cache": 2, "kr_cache": 3},
    samples=_mla_prolog_samples,
)
def npu_mla_prolog(call: Arguments) -> None:
    """MLA preprocessing (DeepSeek-V2/V3): returns ``(query, query_rope, kv_cache, kr_cache)``.

    Source: torch_npu.npu_mla_prolog (op-plugin docs/context/torch_npu-npu_mla_prolog.md) and the
    MlaProlog design doc of hicann/ops-transformer (attention/mla_prolog/docs): four paths, each
    product on the modeled Cube (fp32 accumulation, one rounding to bfloat16) and each norm in
    float32 rounded to bfloat16, as the unfused ops would:

    * ``c_Q = RmsNorm(x @ W^DQ)`` (gamma_cq, epsilon_cq), then ``c_Q @ weight_uq_qr`` split per
      head into ``q_nope`` (D) and ``q_pe`` (Dr);
    * ``query = q_nope @ weight_uk[n]`` per head n: [.., N, Hckv];
    * ``query_rope = RoPE(q_pe)``;
    * ``x @ weight_dkv_kr`` split into ``c_kv`` (Hckv, RmsNorm with gamma_ckv) and ``k_pe`` (Dr,
      RoPE); written in place into ``kv_cache`` / ``kr_cache`` [BlockNum, BlockSize, 1, *] at the
      global slots ``cache_index``, ND blocks ('PA_BSND') or FRACTAL_NZ blocks ('PA_NZ', see
      :func:`write_paged_rows`).

    RoPE is the interleave-half form the v3 doc spells out (even elements first, then odd, then
    ``x * cos + RotateHalf(x) * sin``; :func:`npu_interleave_rope`) with rope_cos/rope_sin [T, Dr]
    or [B, S, Dr].  Weights are the logical [K, N] matrices (a FRACTAL_NZ format cast only changes
    the device layout).  The doc's production sizes (He 7168, Hcq 1536, Hckv 512, D 128, Dr 64)
    are not imposed, so tests can use small shapes.

    Quantised scenarios (the doc's table, read from the dtypes): an int8 ``weight_uq_qr`` with
    ``dequant_scale_w_uq_qr`` [1, N*(D+Dr)] (optional ``smooth_scales_cq``) quantises c_Q per token
    before that product; with int8 caches both are quantised per channel, ``round(v *
    quant_scale_ck*)`` saturated to int8 (a static quant scale multiplies, as vllm-ascend builds
    it from the reciprocal of the dequant scale).  Every stage output is rounded to bfloat16 before
    the next stage quantises it (assumption: the fused kernel's internal precision is not documented).
    """
    _check_mla_cache_mode("npu_mla_prolog", call, MLA_PAGED_MODES)


V2_OUTPUTS = ("query", "query_rope", "kv_cache", "kr_cache", "dequant_scale_q_nope")


def _mla_prolog_v2_meta(call: Arguments) -> tuple[Out, ...]:
    """npu_mla_prolog's outputs and dequant_scale_q_nope (op-plugin meta: [T, N, 1] for an int8 query, else [1])."""
    _, outputs = _mla_outputs(call, _scenario_from_dtypes(call))
    return tuple(outputs[name] for name in V2_OUTPUTS)


def _mla_prolog_v2_kernel(call: Arguments) -> tuple[torch.Tensor, ...]:
    scenario = _scenario_from_dtypes(call)
    result = _mla_compute(call, scenario, _mla_dims(call, scenario))
    return tuple(result[name] for name in V2_OUTPUTS)


@npu_op(
    meta=_mla_prolog_v2_meta,
    kernel=_mla_prolog_v2_kernel,
    writes_back={"kv_cache": 2, "kr_cache": 3},
    samples=_mla_prolog_samples,
)
def npu_mla_prolog_v2(call: Arguments) -> None:
    """npu_mla_prolog with a fifth output, ``dequant_scale_q_nope``: ``(query, query_rope, kv_cache, kr_cache, scale)``.

    Source: torch_npu.npu_mla_prolog_v2 (op-plugin docs/zh/custom_APIs/torch_npu/
    torch_npu-npu_mla_prolog_v2.md and its meta function).  Same inputs, paths and cache modes
    (PA_BSND, PA_NZ) as :func:`npu_mla_prolog`, plus the full-quantisation scenarios used by
    vllm-ascend's and cann-recipes' DeepSeek decode: int8 ``token_x`` with ``dequant_scale_x``
    [T, 1] (per token) and int8 weight_dq / weight_uq_qr / weight_dkv_kr with per-channel dequant
    scales [1, cols]; each int32 product is dequantised by the token's and the column's scale.
    With ``quant_scale_ckv`` as well, kv_cache is int8 (``round(c_kv * quant_scale_ckv)``, the
    scale [1, Hckv] or [1]), kr_cache stays bfloat16, and the query is returned int8 with
    ``dequant_scale_q_nope`` [T, N, 1] = rowmax|q^N| / 127 per token and head (the doc's
    formula, rounding half to even).  Otherwise ``dequant_scale_q_nope`` is float32 [1] (the
    meta's shape; its value is not specified and this model returns 0).
    """
    _check_mla_cache_mode("npu_mla_prolog_v2", call, MLA_PAGED_MODES)


V3_OUTPUTS = ("query", "query_rope", "dequant_scale_q_nope", "query_norm", "dequant_scale_q_norm", "kv_cache", "kr_cache")
V3_SUPPORTED_MODES = {"weight_quant_mode": (0, 1, 2), "kv_cache_quant_mode": (0, 1, 2), "query_quant_mode": (0, 1)}


def _v3_scenario(call: Arguments) -> MlaScenario:
    """The explicit v3 modes, checked against the scenario table's combinations."""
    scenario = _scenario_from_modes(call)
    if scenario.query == 1 and not (scenario.weights == 2 and scenario.kv_cache == 1):
        raise OpArgumentError(
            "query_quant_mode=1 needs weight_quant_mode=2 and kv_cache_quant_mode=1 (the int8 full-quantisation row)",
            argument="query_quant_mode"
        )
    if scenario.kv_cache == 1 and scenario.weights != 2 or scenario.kv_cache == 2 and scenario.weights != 1:
        raise OpArgumentError(
            f"kv_cache_quant_mode={scenario.kv_cache} with weight_quant_mode={scenario.weights} is not a documented "
            "scenario (per-tensor kv_cache goes with mode 2, per-channel with mode 1)", argument="kv_cache_quant_mode"
        )
    return scenario


def _v3_query_norm_outputs(call: Arguments, scenario: MlaScenario, dims: MlaDims) -> dict[str, Out]:
    """query_norm [.., Hcq] in weight_uq_qr's dtype and its scale [T, 1] (float32 [1] each when not requested)."""
    if not call.query_norm_flag:
        return {"query_norm": Out([1], call.weight_uq_qr.dtype), "dequant_scale_q_norm": Out([1], torch.float32)}
    scale_shape = [math.prod(dims.lead), 1] if scenario.weights else [1]
    return {
        "query_norm": Out([*dims.lead, dims.hcq], call.weight_uq_qr.dtype),
        "dequant_scale_q_norm": Out(scale_shape, torch.float32),
    }


def _mla_prolog_v3_meta(call: Arguments) -> tuple[Out, ...]:
    """The five v3 outputs followed by the two updated caches (op-plugin's npu_mla_prolog_v3_functional)."""
    scenario = _v3_scenario(call)
    dims, outputs = _mla_outputs(call, scenario)
    outputs |= _v3_query_norm_outputs(call, scenario, dims)
    return tuple(outputs[name] for name in V3_OUTPUTS)


def _mla_prolog_v3_kernel(call: Arguments) -> tuple[torch.Tensor, ...]:
    scenario = _v3_scenario(call)
    result = _mla_compute(call, scenario, _mla_dims(call, scenario))
    if not call.query_norm_flag:
        result["query_norm"] = torch.zeros(1, dtype=call.weight_uq_qr.dtype)
    if not call.query_norm_flag or not scenario.weights:
        result["dequant_scale_q_norm"] = torch.zeros(1, dtype=torch.float32)
    return tuple(result[name] for name in V3_OUTPUTS)


@npu_op(
    meta=_mla_prolog_v3_meta,
    kernel=_mla_prolog_v3_kernel,
    writes_back={"kv_cache": 5, "kr_cache": 6},
    schema_mutates=True,
    samples=_mla_prolog_v3_samples,
)
def npu_mla_prolog_v3(call: Arguments) -> None:
    """MlaProlog v3: ``(query, query_rope, dequant_scale_q_nope, query_norm, dequant_scale_q_norm)``; caches in place.

    Source: torch_npu.npu_mla_prolog_v3 (op-plugin docs/zh/custom_APIs/torch_npu/
    torch_npu-npu_mla_prolog_v3.md, its meta function, and ops-transformer's MlaPrologV3 README).
    The computation is :func:`npu_mla_prolog_v2`'s (one shared kernel) with these v3 additions:

    * ``kv_cache``/``kr_cache`` come before the keyword-only ``cache_index`` and are updated in
      place; the op returns only the five other outputs.  A traced graph holds op-plugin's
      ``npu_mla_prolog_v3_functional`` (the two caches as extra outputs); ``torch.ops.npu.npu_mla_prolog_v3``
      has torch_npu's in-place schema and decomposes into it, so both spellings behave as torch_npu's;
    * the scenario is stated by ``weight_quant_mode`` (0, 1 = int8 weight_uq_qr, 2 = int8
      token_x and weights), ``kv_cache_quant_mode`` (0, 1 per tensor, 2 per channel) and
      ``query_quant_mode`` (1 = int8 query with per-token-head scale, only with 2 + 1);
    * ``query_norm_flag=True`` returns c_Q as ``query_norm`` [.., Hcq] (its int8 per-token levels
      and ``dequant_scale_q_norm`` [T, 1] when weight_uq_qr is int8; DeepSeek-V3.2's indexer reads
      them); otherwise both are one-element placeholders (the meta's [1]);
    * ``qc_qr_scale`` multiplies c_Q after its RmsNorm (README: c^Q = alpha_q * RmsNorm(x W^DQ)), and
      ``kc_scale`` c_KV after its RmsNorm, before the cache (CANN aclnnMlaPrologV3WeightNz: the key
      path is multiplied by the key scale correction factor before it enters the cache);
    * cache modes PA_BSND and PA_NZ (paged, ``cache_index`` [T] or [B, S]) and BSND / TND, where
      the caches have the tokens' shape [B, S, 1, *] / [T, 1, *] and no index is passed.

    Not implemented (ValueError naming the argument): the FP8/MXFP8/HiF8 modes 3-5 (not on
    A2/A3), the per-token-per-group kv cache (mode 3, ``tile_size``, ``k_nope_clip_alpha``),
    merged cache/scale storage (``ckvkr_repo_mode``/``quant_scale_repo_mode`` 1), the PA_BLK modes
    (``actual_seq_len``).
    """
    _check_mla_cache_mode("npu_mla_prolog_v3", call, MLA_V3_CACHE_MODES)
    modes = {"weight_quant_mode": call.weight_quant_mode, "kv_cache_quant_mode": call.kv_cache_quant_mode,
             "query_quant_mode": call.query_quant_mode}
    for name, allowed in V3_SUPPORTED_MODES.items():
        require_choice(name, modes[name], allowed, "the int8 / bfloat16 scenarios of Atlas A2/A3")
    require_choice("ckvkr_repo_mode", call.ckvkr_repo_mode, (0,), "separate kv_cache and kr_cache")
    require_choice("quant_scale_repo_mode", call.quant_scale_repo_mode, (0,), "scales stored apart from the data")
    require_unused("npu_mla_prolog_v3 (PA_BLK modes, per-tile kv cache)", actual_seq_len=call.actual_seq_len,
                   k_nope_clip_alpha=call.k_nope_clip_alpha, token_x_dtype=call.token_x_dtype,
                   weight_dq_dtype=call.weight_dq_dtype, weight_uq_qr_dtype=call.weight_uq_qr_dtype,
                   weight_dkv_kr_dtype=call.weight_dkv_kr_dtype, kv_cache_dtype=call.kv_cache_dtype)



# ---------------------------------------------------------------------------------------------
# npu_mrope
# ---------------------------------------------------------------------------------------------

MROPE_SECTIONS = (3, 4)  # rows of a multimodal positions tensor (t, h, w[, extra])


MROPE_CACHE_MODES = ("default", "interleave")  # op-plugin RopeWithSinCosCacheKernelNpuOpApi.cpp


def _mrope_meta(call: Arguments) -> tuple[Out, Out]:
    """query [T, Nq x head_size] and key [T, Nk x head_size] keep their shapes; the cache is
    [max_position, rotary_dim] with rotary_dim even and at most head_size, in the query's dtype."""
    positions, query, key, cos_sin_cache = call.positions, call.query, call.key, call.cos_sin_cache
    head_size = call.head_size
    require_dtype("positions", positions, (torch.int32, torch.int64))
    for name, tensor in (("query", query), ("key", key), ("cos_sin_cache", cos_sin_cache)):
        require_dtype(name, tensor, FLOAT_DTYPES if name == "query" else (query.dtype,), "(query's dtype)")
    if positions.dim() not in (1, 2) or (positions.dim() == 2 and positions.shape[0] not in MROPE_SECTIONS):
        raise OpArgumentError(
            f"positions has shape {list(positions.shape)}; expected [tokens] or [3 or 4, tokens]", argument="positions"
        )
    tokens = positions.shape[-1]
    for name, tensor in (("query", query), ("key", key)):
        if tensor.dim() != 2 or tensor.shape[0] != tokens or tensor.shape[1] % head_size != 0:
            raise OpArgumentError(
                f"{name} has shape {list(tensor.shape)}; expected [{tokens}, heads x {head_size}] (flatten the heads)",
                argument=name
            )
    rotary_dim = cos_sin_cache.shape[-1] if cos_sin_cache.dim() == 2 else -1
    if rotary_dim <= 0 or rotary_dim % 2 or rotary_dim > head_size:
        raise OpArgumentError(
            f"cos_sin_cache has shape {list(cos_sin_cache.shape)}; expected [max_position, rotary_dim] with an even "
            f"rotary_dim <= head_size {head_size} (cos in the first half, sin in the second)", argument="cos_sin_cache"
        )
    sections = list(call.mrope_section or [])
    if positions.dim() == 2 and (len(sections) != positions.shape[0] or sum(sections) != rotary_dim // 2):
        raise OpArgumentError(
            f"mrope_section={sections} must give one width per positions row ({positions.shape[0]}) summing to "
            f"rotary_dim / 2 = {rotary_dim // 2}", argument="mrope_section"
        )
    if positions.dim() == 2 and call.cache_mode == "interleave" and len(sections) != 3:
        raise OpArgumentError(f"cache_mode='interleave' interleaves three position rows (mrope_section of 3 widths), "
                              f"got mrope_section={sections}; use cache_mode='default'", argument="cache_mode")
    return Out(list(query.shape), query.dtype), Out(list(key.shape), key.dtype)


def _mrope_tables(
    positions: torch.Tensor, cache: torch.Tensor, sections: Sequence[int], cache_mode: str
) -> tuple[torch.Tensor, ...]:
    """Per token, the cos and sin halves [T, rotary_dim / 2]: rows of the cache at the positions; with
    multimodal positions, section i of the width comes from positions row i (``default``), or, for
    ``interleave``, the columns cycle through the rows: row 0's table, with columns ``1::3`` and ``2::3``
    below ``3 * mrope_section[1]`` taken from rows 1 and 2 (the API page's formula)."""
    half = cache.shape[-1] // 2
    rows = cache.to(torch.float32)[positions.reshape(-1).long()].reshape(*positions.shape, 2 * half)
    cos, sin = rows[..., :half], rows[..., half:]
    if positions.dim() == 1:
        return cos, sin
    if cache_mode == "interleave":
        column = torch.arange(half)
        row = torch.where((column < 3 * sections[1]) & (column % 3 > 0), column % 3, 0)
        return tuple(table.gather(0, row.expand(1, table.shape[1], half)).squeeze(0) for table in (cos, sin))
    bounds = [0, *itertools.accumulate(sections)]
    pick = [(row, start, end) for row, (start, end) in enumerate(zip(bounds, bounds[1:]))]
    return tuple(torch.cat([table[row, :, start:end] for row, start, end in pick], dim=-1) for table in (cos, sin))


def _mrope_heads(x: torch.Tensor, head_size: int, cos: torch.Tensor, sin: torch.Tensor, rotary_mode: str) -> torch.Tensor:
    """RoPE on the first rotary_dim of every head of ``x`` [T, heads x head_size]; the rest passes through."""
    heads = x.reshape(x.shape[0], -1, head_size)
    widen = (lambda t: torch.cat((t, t), -1)) if rotary_mode == "half" else (lambda t: t.repeat_interleave(2, -1))
    rotary_dim = 2 * cos.shape[-1]
    rotated = rope(heads[..., :rotary_dim], widen(cos)[:, None, :], widen(sin)[:, None, :], rotary_mode)
    return torch.cat((rotated, heads[..., rotary_dim:]), dim=-1).reshape(x.shape)


def _mrope_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    query, key, head_size, rotary_mode = call.query, call.key, call.head_size, call.rotary_mode
    cos, sin = _mrope_tables(call.positions, call.cos_sin_cache, list(call.mrope_section or []), call.cache_mode)
    return _mrope_heads(query, head_size, cos, sin, rotary_mode), _mrope_heads(key, head_size, cos, sin, rotary_mode)


def _mrope_samples() -> list[SampleCall]:
    """Text positions [T] and multimodal positions [3, T] with their mrope sections, over a 40-row cos/sin
    cache rotating the first 32 of each 64-wide head."""
    gen = torch.Generator().manual_seed(0)
    tokens, head, rotary, max_pos = 5, 64, 32, 40
    angles = torch.arange(max_pos, dtype=torch.float32)[:, None] * torch.linspace(0.01, 1.0, rotary // 2)
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1).bfloat16()
    query = torch.randn(tokens, 2 * head, generator=gen).bfloat16()
    key = torch.randn(tokens, head, generator=gen).bfloat16()
    text = torch.randint(0, max_pos, (tokens,), generator=gen)
    vision = torch.randint(0, max_pos, (3, tokens), generator=gen)
    return [
        SampleCall((text, query, key, cache, head)),
        SampleCall((vision, query, key, cache, head), {"mrope_section": [4, 6, 6], "rotary_mode": "interleave"}),
        SampleCall((vision, query, key, cache, head), {"mrope_section": [6, 5, 5], "cache_mode": "interleave"}),
    ]


@npu_op(meta=_mrope_meta, kernel=_mrope_kernel, samples=_mrope_samples)
def npu_mrope(call: Arguments) -> None:
    """RoPE from a cos/sin cache (RopeWithSinCosCache), plain or multimodal: returns new ``(query, key)``.

    Sources: the RopeWithSinCosCache README (hicann/ops-transformer, posembedding/rope_with_sin_cos_cache)
    and op-plugin's golden for torch_npu.npu_mrope. vllm-ascend's Qwen2.5-VL M-RoPE and sglang's NPU
    rotary embedding (every RoPE, with ``mrope_section=[0, 0, 0]`` and 1-D positions) call it.

    * ``positions`` int32/int64 [T] (plain RoPE) or [3 or 4, T] (M-RoPE: one row per section);
      ``query`` [T, Nq x head_size], ``key`` [T, Nk x head_size]; ``cos_sin_cache`` [max_position,
      rotary_dim] in the query's dtype, cos in its first half and sin in its second.
    * Each token's cos/sin are the cache rows at its positions; with M-RoPE, the first
      ``mrope_section[0]`` columns come from row 0 of positions, the next ``mrope_section[1]`` from
      row 1, and so on (the sections sum to rotary_dim / 2).
    * The first rotary_dim of each head is rotated, ``rotary_mode="half"`` (NeoX halves) or
      ``"interleave"`` (even/odd pairs); the rest of the head passes through. float32 math, one
      rounding to the query's dtype.
    * ``cache_mode="interleave"`` (Qwen3-VL's interleaved M-RoPE, three sections): the columns take
      rows 0, 1, 2 of positions in turn up to ``3 * mrope_section[1]``, row 0 beyond (the API page's
      formula). With 1-D positions there is one row, so both modes read the same table.
    """
    if call.head_size <= 0:
        raise OpArgumentError(f"head_size={call.head_size} must be positive", argument="head_size")
    require_choice("rotary_mode", call.rotary_mode, ROTARY_MODES, "NeoX halves or even/odd pairs")
    if call.cache_mode not in MROPE_CACHE_MODES:
        raise OpArgumentError(f"cache_mode only support default or interleave (got {call.cache_mode!r}: "
                              "'default' takes the sections in order, 'interleave' cycles through them)",
                              argument="cache_mode")
