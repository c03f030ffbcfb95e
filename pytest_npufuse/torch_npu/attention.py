"""Attention ops: fused inference attention (prefill and decode, paged KV, MLA rope), incremental (decode)
and prompt (prefill) flash attention.

All three share one normalisation and one computation. A call is first brought to padded float32
``[B, N, S, D]`` tensors with per-batch valid lengths: dense layouts (BSH, BSND, BNSD) are transposed, the
variable-length TND layout is split at its cumulative ``actual_seq_lengths``, a paged KV cache is gathered
through ``block_table``, and MLA's rope parts are appended to the head dim of query and key (so the score is
``q.k + q_rope.k_rope``). Then, per batch and head, in float32:

1. ``scores = (q @ k^T) * scale`` -- the Cube product of the input-dtype values, accumulated in fp32
   (:func:`~pytest_npufuse.numerics.exact.cube_matmul`; products of fp16/bf16 values are exact in fp32);
2. masked positions (mask, causal mode, band, invalid lengths) become -inf;
3. ``p = exp(scores - rowmax) / pairwise_sum(exp(...))`` (fixed-order sum);
4. ``out = p @ v`` in fp32 (:func:`cube_matmul` of fp32 operands), then **one rounding** to the query's dtype.

``softmax_lse = rowmax + log(sum)`` stays float32. A row with nothing to attend to gives 0 and lse +inf.
Every step is fixed-order, so the bits do not depend on threads; the device's online-softmax (flash)
order differs from this in the last bits, and both variants of a case run this same kernel.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, fields, replace
from typing import Any, Optional, Sequence

import torch
from torch._subclasses.fake_tensor import is_fake

from ..errors import OpArgumentError
from ..numerics.exact import cube_matmul
from .checks import (
    require_choice,
    require_dtype,
    require_int,
    require_shape,
    require_tensor,
    require_tensor_list,
)
from .dropout import keep_bits, unpack_bits
from .fixedorder import pairwise_sum, round_to_int8
from .memory import nz_run
from .registry import Arguments, Derivative, Out, SampleCall, bind, check, npu_op

DENSE_LAYOUTS = ("BSH", "BSND", "BNSD")
FIA_LAYOUTS = (  # the page's input_layout table: input layout, and after "_" the output's
    *DENSE_LAYOUTS, "TND", "NTD", "BNSD_BSND", "BSH_BNSD", "BSND_BNSD", "BSH_NBSD", "BSND_NBSD", "BNSD_NBSD", "TND_NTD",
    "NTD_TND",
)
PFA_LAYOUTS = (*DENSE_LAYOUTS, "BNSD_BSND")
ATTENTION_DTYPES = (torch.float16, torch.bfloat16)
MASK_DTYPES = (torch.bool, torch.int8, torch.uint8)
NO_BAND = 2147483647  # pre_tokens/next_tokens: no band limit
CAUSAL_MASK_SIZE = 2048  # sparse_mode 2/3 take this fixed upper-triangular mask
MASK_ONLY, ALL_MASK, LEFT_UP_CAUSAL, RIGHT_DOWN_CAUSAL = 0, 1, 2, 3
BAND = 4  # pre/next-token band from the bottom-right corner (ops-transformer sparse_mode introduction)
CAUSAL_MODES = (LEFT_UP_CAUSAL, RIGHT_DOWN_CAUSAL, BAND)  # the modes that take the compressed 2048 x 2048 mask


@dataclass(frozen=True)
class _Geometry:
    """Sizes of one attention call, read from the layouts (metadata only, so fake kernels can use it)."""

    layout: str
    batch: int
    heads: int
    kv_heads: int
    q_len: int  # padded (max) query length per batch; total tokens T for TND
    kv_len: int  # padded KV length per batch (block count x block size when paged)
    head_dim: int  # query/key head dim without rope
    value_dim: int
    paged: bool
    out_layout: str  # the layout after "_" in e.g. "BNSD_BSND", else the input layout
    max_blocks: int = 0  # block_table's second dim when paged

    def out_shape(self) -> list[int]:
        n, s, dv = self.heads, self.q_len, self.value_dim
        return {
            "BSH": [self.batch, s, n * dv],
            "BSND": [self.batch, s, n, dv],
            "BNSD": [self.batch, n, s, dv],
            "TND": [s, n, dv],
            "NBSD": [n, self.batch, s, dv],
            "NTD": [n, s, dv],
        }[self.out_layout]

    def lse_shape(self) -> list[int]:
        return [self.q_len, self.heads, 1] if self.layout == "TND" else [self.batch, self.heads, self.q_len, 1]


def _dense_sizes(name: str, tensor: torch.Tensor, layout: str, heads: int) -> tuple[int, int, int]:
    """(batch, sequence, head dim) of a BSH / BSND / BNSD tensor with ``heads`` heads."""
    if layout == "BSH":
        if tensor.dim() != 3 or tensor.shape[2] % heads != 0:
            raise OpArgumentError(
                f"{name} has shape {list(tensor.shape)}; BSH needs [B, S, {heads} x D]", argument=name
            )
        return tensor.shape[0], tensor.shape[1], tensor.shape[2] // heads
    heads_dim = 2 if layout == "BSND" else 1
    if tensor.dim() != 4 or tensor.shape[heads_dim] != heads:
        raise OpArgumentError(
            f"{name} has shape {list(tensor.shape)}; {layout} needs 4 dims with {heads} heads at dim {heads_dim}",
            argument=name
        )
    seq = tensor.shape[1] if layout == "BSND" else tensor.shape[2]
    return tensor.shape[0], seq, tensor.shape[3]


def _tnd_sizes(name: str, tensor: torch.Tensor, heads: int) -> tuple[int, int]:
    """(tokens T, head dim) of a TND tensor."""
    if tensor.dim() != 3 or tensor.shape[1] != heads:
        raise OpArgumentError(f"{name} has shape {list(tensor.shape)}; TND needs [T, {heads}, D]", argument=name)
    return tensor.shape[0], tensor.shape[2]


HEADS_FIRST_CACHE_LAYOUTS = ("BNSD", "TND")  # their 4-D paged caches are [blocks, N_kv, block_size, D]


def _is_nz(cache: torch.Tensor) -> bool:
    """A 5-D paged cache is FRACTAL_NZ: [blocks, N_kv, D / c, block_size, c], c = 32 bytes of values."""
    return cache.dim() == 5


def _paged_sizes(name: str, cache: torch.Tensor, layout: str, kv_heads: int, block_size: int) -> int:
    """Head dim of a paged cache. The page's PageAttention table: BSH/BSND read BnBsH caches, given as
    [blocks, block_size, N_kv x D] or [blocks, block_size, N_kv, D]; BNSD/TND also read BnNBsD,
    [blocks, N_kv, block_size, D] (their 4-D form). Every layout but BNSD also reads FRACTAL_NZ blocks,
    [blocks, N_kv, D / 16, block_size, 16] for float16/bfloat16 and [blocks, N_kv, D / 32, block_size, 32]
    for int8 (the op-plugin page of npu_fused_infer_attention_score_v2, MLA constraints: "当数据格式为NZ时
    input_layout不支持BNSD、BNSD_NBSD"); vllm-ascend's MLA decode reads its caches this way. BNSD reads
    them too for int8 keys and values (the page's GQA antiquant with KV NZ: BSH/BSND/BNSD, paged only)."""
    heads_first = layout in HEADS_FIRST_CACHE_LAYOUTS
    if _is_nz(cache):
        run = nz_run(cache)
        if layout == "BNSD" and cache.dtype != torch.int8:
            raise OpArgumentError(
                f"{name} is a FRACTAL_NZ cache {list(cache.shape)}; input_layout BNSD reads NZ caches only of int8 "
                "(antiquant) keys and values", argument=name)
        if (cache.shape[1], cache.shape[3], cache.shape[4]) == (kv_heads, block_size, run):
            return cache.shape[2] * run
        raise OpArgumentError(
            f"{name} has shape {list(cache.shape)}; a FRACTAL_NZ paged cache of {cache.dtype} is "
            f"[blocks, {kv_heads}, D / {run}, {block_size}, {run}] (block_size={block_size}, N_kv={kv_heads})",
            argument=name
        )
    if cache.dim() == 3 and cache.shape[1] == block_size and cache.shape[2] % kv_heads == 0:
        return cache.shape[2] // kv_heads
    if cache.dim() == 4 and (cache.shape[1], cache.shape[2]) == ((kv_heads, block_size) if heads_first
                                                                  else (block_size, kv_heads)):
        return cache.shape[3]
    four_d = f"[blocks, {kv_heads}, {block_size}, D]" if heads_first else f"[blocks, {block_size}, {kv_heads}, D]"
    raise OpArgumentError(
        f"{name} has shape {list(cache.shape)}; with block_table and input_layout={layout!r} the KV cache is "
        f"[blocks, {block_size}, {kv_heads} x D], {four_d} or FRACTAL_NZ [blocks, {kv_heads}, D / c, {block_size}, c] "
        f"(block_size={block_size}, N_kv={kv_heads})", argument=name
    )


def _geometry(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: str, heads: int, kv_heads: int,
              block_table: Optional[torch.Tensor], block_size: int, q_lens: Optional[Sequence[int]]) -> _Geometry:
    """Sizes from the tensors; ``layout`` may name an output layout after "_" (``BNSD_BSND``)."""
    layout, _, out_layout = layout.partition("_")
    paged = block_table is not None
    if layout == "TND":
        # The API pages require the cumulative lengths with TND, and the kernel needs them to split the
        # tokens into sequences; op-plugin's meta functions do not (the output shapes follow the tokens), so
        # on fake tensors a missing list is one sequence of every token.
        if q_lens is None and not is_fake(query):
            raise OpArgumentError(
                "input_layout='TND' needs actual_seq_lengths: the cumulative query token ends per batch",
                argument="input_layout"
            )
        q_len, head_dim = _tnd_sizes("query", query, heads)
        batch = 1 if q_lens is None else len(q_lens)
    else:
        batch, q_len, head_dim = _dense_sizes("query", query, layout, heads)
    if paged:
        require_dtype("block_table", block_table, (torch.int32,))
        if block_table.dim() != 2 or block_table.shape[0] != batch:
            raise OpArgumentError(
                f"block_table has shape {list(block_table.shape)}; expected [B={batch}, max blocks per sequence]",
                argument="block_table"
            )
        if block_size <= 0:
            raise OpArgumentError(
                "block_table needs block_size > 0 (the tokens per cache block)", argument="block_table"
            )
        key_dim = _paged_sizes("key", key, layout, kv_heads, block_size)
        value_dim = _paged_sizes("value", value, layout, kv_heads, block_size)
        kv_len = block_table.shape[1] * block_size
    elif layout == "TND":
        kv_len, key_dim = _tnd_sizes("key", key, kv_heads)
        value_len, value_dim = _tnd_sizes("value", value, kv_heads)
        if value_len != kv_len:
            raise OpArgumentError(f"key has {kv_len} tokens but value has {value_len}", argument="key")
    else:
        key_batch, kv_len, key_dim = _dense_sizes("key", key, layout, kv_heads)
        value_batch, value_len, value_dim = _dense_sizes("value", value, layout, kv_heads)
        if (key_batch, value_batch) != (batch, batch) or value_len != kv_len:
            raise OpArgumentError(
                f"query {list(query.shape)}, key {list(key.shape)} and value {list(value.shape)} do not match in "
                f"{layout}: batch and KV sequence must agree", argument="query"
            )
    if key_dim != head_dim:
        raise OpArgumentError(f"query head dim {head_dim} and key head dim {key_dim} differ", argument="query")
    return _Geometry(layout, batch, heads, kv_heads, q_len, kv_len, head_dim, value_dim, paged, out_layout or layout,
                     block_table.shape[1] if paged else 0)


def _head_dim_free(tensor: torch.Tensor) -> tuple[int, ...]:
    """The dims other than the head dim: all but the last, or for a FRACTAL_NZ cache all but D / c and c."""
    shape = tuple(tensor.shape)
    return (*shape[:2], shape[3]) if _is_nz(tensor) else shape[:-1]


def _check_rope(query_rope: Optional[torch.Tensor], key_rope: Optional[torch.Tensor], query: torch.Tensor,
                key: torch.Tensor, quantised: bool = False) -> None:
    """MLA: query_rope / key_rope come together, in query's / key's dtype and shape but their own head dim
    (with int8 query and key, the rope parts are float16/bfloat16, one dtype)."""
    if (query_rope is None) != (key_rope is None):
        raise OpArgumentError(
            "query_rope and key_rope must be given together (MLA) or not at all", argument="query_rope"
        )
    if quantised and query_rope is None:
        raise OpArgumentError("int8 query, key and value (query_quant_mode=3) are MLA's: pass query_rope and key_rope")
    for name, rope, base in (("query_rope", query_rope, query), ("key_rope", key_rope, key)):
        if rope is None:
            continue
        require_dtype(name, rope, ATTENTION_DTYPES if quantised else (base.dtype,))
        if quantised and rope.dtype != query_rope.dtype:
            raise OpArgumentError(
                f"query_rope is {query_rope.dtype} but key_rope is {rope.dtype}; they share a dtype",
                argument="query_rope",
            )
        if rope.dim() != base.dim() or _head_dim_free(rope) != _head_dim_free(base):
            if not (base.dim() == 3 and rope.dim() == 3 and rope.shape[:2] == base.shape[:2]):
                raise OpArgumentError(f"{name} has shape {list(rope.shape)}; it must match {list(base.shape)} except "
                                      "the last dim (the rope head dim)", argument=name)


def _seq_lengths(name: str, values: Optional[Sequence[int]], batch: int, limit: int) -> list[int]:
    """Per-batch valid lengths (one value is broadcast, longer lists are cut to B); None means the full length."""
    if values is None:
        return [limit] * batch
    lengths = [int(require_int(f"{name}[{i}]", v)) for i, v in enumerate(values)]
    if len(lengths) == 1:
        lengths = lengths * batch
    if len(lengths) < batch or any(not 0 <= v <= limit for v in lengths[:batch]):
        raise OpArgumentError(
            f"{name}={lengths} must hold 1 or >= {batch} (batch) values between 0 and {limit}", argument=name
        )
    return lengths[:batch]


def _cumulative_lengths(name: str, ends: Optional[Sequence[int]], total: int) -> list[int]:
    """TND: per-batch lengths from cumulative ends (non-decreasing, the last <= the token count); None (only
    on fake tensors, :func:`_geometry`) is one sequence of every token."""
    if ends is None:
        return [total]
    ends = [int(require_int(f"{name}[{i}]", v)) for i, v in enumerate(ends)]
    starts = [0, *ends[:-1]]
    if any(e < s for s, e in zip(starts, ends)) or (ends and ends[-1] > total):
        raise OpArgumentError(
            f"{name}={ends} must be non-decreasing cumulative token ends <= {total} (TND layout)", argument=name
        )
    return [e - s for s, e in zip(starts, ends)]


def _check_mask(mask: Optional[torch.Tensor], sparse_mode: int, geo: _Geometry) -> None:
    if mask is None:
        if sparse_mode in CAUSAL_MODES:
            raise OpArgumentError(
                f"sparse_mode={sparse_mode} needs the compressed causal mask atten_mask="
                f"torch.triu(torch.ones({CAUSAL_MASK_SIZE}, {CAUSAL_MASK_SIZE}, dtype=torch.bool), diagonal=1)",
                argument="sparse_mode"
            )
        if sparse_mode == ALL_MASK:
            raise OpArgumentError("sparse_mode=1 (allMask) needs the full atten_mask", argument="sparse_mode")
        return
    require_dtype("atten_mask", mask, MASK_DTYPES)
    size = CAUSAL_MASK_SIZE
    if sparse_mode in CAUSAL_MODES:
        require_shape("atten_mask", mask, ((size, size), (1, size, size), (1, 1, size, size)))
        return
    if geo.layout == "TND":
        raise OpArgumentError("with input_layout='TND' only the causal sparse modes 2/3 (compressed mask) are modeled")
    b, sq, skv = geo.batch, geo.q_len, geo.kv_len
    shapes = [(b, sq, skv), (1, sq, skv), (b, 1, sq, skv), (1, 1, sq, skv), (b, 1, skv), (b, skv) if sq == 1 else (sq, skv)]
    require_shape("atten_mask", mask, shapes)


def _require_causal_mask(mask: torch.Tensor) -> None:
    """sparse_mode 2/3 read causality from the mode; the mask must still be the documented one."""
    expected = torch.ones(CAUSAL_MASK_SIZE, CAUSAL_MASK_SIZE, dtype=torch.bool).triu(diagonal=1)
    if not torch.equal(mask.reshape(CAUSAL_MASK_SIZE, CAUSAL_MASK_SIZE) != 0, expected):
        raise OpArgumentError(
            "sparse_mode 2/3 need atten_mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)",
            argument="sparse_mode"
        )


# ---------------------------------------------------------------------------------------------
# Normalisation to padded [B, N, S, D]
# ---------------------------------------------------------------------------------------------


def _dense_to_bnsd(tensor: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    """float32 [B, N, S, D] of a BSH / BSND / BNSD tensor."""
    if layout == "BSH":
        tensor = tensor.reshape(tensor.shape[0], tensor.shape[1], heads, -1)
    if layout != "BNSD":
        tensor = tensor.transpose(1, 2)
    return tensor.to(torch.float32)


def _tnd_to_bnsd(tensor: torch.Tensor, lengths: list[int], width: int) -> torch.Tensor:
    """float32 [B, N, width, D] from a TND tensor split into consecutive segments of ``lengths`` tokens."""
    out = tensor.new_zeros(len(lengths), tensor.shape[1], width, tensor.shape[2], dtype=torch.float32)
    start = 0
    for b, length in enumerate(lengths):
        out[b, :, :length] = tensor[start : start + length].transpose(0, 1).to(torch.float32)
        start += length
    return out


def _paged_to_bnsd(cache: torch.Tensor, block_table: torch.Tensor, layout: str, kv_heads: int) -> torch.Tensor:
    """float32 [B, N_kv, blocks x block_size, D]: each sequence's blocks, in block_table order. Only the
    blocks the table names are gathered (in the cache's own dtype and layout), then moved into place and
    widened in one copy: a decode step's cache is hundreds of MB, and every extra pass over it is a copy."""
    if not _is_nz(cache) and (cache.dim() == 3 or layout not in HEADS_FIRST_CACHE_LAYOUTS):
        cache = cache.reshape(cache.shape[0], cache.shape[1], kv_heads, -1).transpose(1, 2)  # BnBsH, as a view
    blocks = cache.shape[0]
    table = block_table.to(torch.int64)
    if bool(((table < 0) | (table >= blocks)).any()):
        raise OpArgumentError(
            f"block_table holds block ids outside [0, {blocks}) (the cache's block count)", argument="block_table"
        )
    gathered = cache[table]  # [B, max_blocks, N_kv, block_size, D], NZ: [B, max_blocks, N_kv, D / c, block_size, c]
    batch, count, size = gathered.shape[0], gathered.shape[1], cache.shape[-2 if _is_nz(cache) else 2]
    out = torch.empty(batch, kv_heads, count * size, cache.shape[2] * cache.shape[4] if _is_nz(cache) else cache.shape[3],
                      dtype=torch.float32)
    if _is_nz(cache):  # each block's D / c runs of c values, block_size rows apart, side by side
        runs, run = cache.shape[2], cache.shape[4]
        out.view(batch, kv_heads, count, size, runs, run).copy_(gathered.permute(0, 2, 1, 4, 3, 5))
    else:
        out.view(batch, kv_heads, count, size, -1).copy_(gathered.permute(0, 2, 1, 3, 4))
    return out


def _bnsd_to_layout(out: torch.Tensor, layout: str, q_lens: list[int], tokens: int) -> torch.Tensor:
    """[B, N, S, D] to the output layout (TND: the valid rows of each batch, concatenated, then zero rows up
    to the query's ``tokens`` rows when the cumulative lengths end before them; NTD: TND heads first)."""
    if layout == "BNSD":
        return out
    if layout == "NBSD":
        return out.transpose(0, 1).contiguous()
    if layout == "NTD":
        return _bnsd_to_layout(out, "TND", q_lens, tokens).transpose(0, 1).contiguous()
    if layout == "TND":
        rows = [out[b, :, :length].transpose(0, 1) for b, length in enumerate(q_lens)]
        padding = tokens - sum(q_lens)
        rows.append(out.new_zeros(padding, out.shape[1], out.shape[3]))
        return torch.cat(rows)
    bsnd = out.transpose(1, 2)
    return bsnd.reshape(*bsnd.shape[:2], -1) if layout == "BSH" else bsnd.contiguous()


def _kv_to_bnsd(tensor: torch.Tensor, geo: _Geometry, block_table: Optional[torch.Tensor],
                kv_lens: list[int]) -> torch.Tensor:
    if geo.paged:
        return _paged_to_bnsd(tensor, block_table, geo.layout, geo.kv_heads)
    if geo.layout == "TND":
        return _tnd_to_bnsd(tensor, kv_lens, max(kv_lens, default=0))
    return _dense_to_bnsd(tensor, geo.layout, geo.kv_heads)


def _q_to_bnsd(tensor: torch.Tensor, geo: _Geometry, q_lens: list[int]) -> torch.Tensor:
    if geo.layout == "TND":
        return _tnd_to_bnsd(tensor, q_lens, max(q_lens, default=0))
    return _dense_to_bnsd(tensor, geo.layout, geo.heads)


# ---------------------------------------------------------------------------------------------
# The computation
# ---------------------------------------------------------------------------------------------


def _user_mask(mask: torch.Tensor, batch: int, q_len: int, kv_len: int) -> torch.Tensor:
    """A mode-0/1 atten_mask as bool [B or 1, 1, Sq, Skv]; nonzero means "do not attend"."""
    masked = mask != 0
    if masked.dim() == 2:
        return masked.reshape(batch, 1, 1, kv_len) if masked.shape == (batch, kv_len) and q_len == 1 else (
            masked.reshape(1, 1, q_len, kv_len))
    return masked.unsqueeze(1) if masked.dim() == 3 else masked


def _visible(q_lens: list[int], kv_lens: list[int], q_len: int, kv_len: int, mask: Optional[torch.Tensor],
             sparse_mode: int, pre_tokens: int, next_tokens: int, q_starts: Optional[list[int]] = None,
             kv_starts: Optional[list[int]] = None) -> torch.Tensor:
    """bool [B, 1, Sq, Skv]: which key each query row may attend to. Positions count from each batch's
    first valid row / key (``q_starts`` / ``kv_starts``, 0 unless left-padded); a user mask indexes the
    tensors' own rows and keys."""
    batch = len(q_lens)
    rows, keys = torch.arange(q_len).reshape(1, 1, -1, 1), torch.arange(kv_len).reshape(1, 1, 1, -1)
    q_pos = rows - torch.tensor(q_starts or [0] * batch).reshape(-1, 1, 1, 1)
    kv_pos = keys - torch.tensor(kv_starts or [0] * batch).reshape(-1, 1, 1, 1)
    q_valid = torch.tensor(q_lens).reshape(-1, 1, 1, 1)
    kv_valid = torch.tensor(kv_lens).reshape(-1, 1, 1, 1)
    visible = (q_pos >= 0) & (q_pos < q_valid) & (kv_pos >= 0) & (kv_pos < kv_valid)
    if sparse_mode == LEFT_UP_CAUSAL:
        return visible & (kv_pos <= q_pos)
    if sparse_mode == RIGHT_DOWN_CAUSAL:
        return visible & (kv_pos <= q_pos + (kv_valid - q_valid))
    if sparse_mode == BAND:
        shift = kv_pos - q_pos - (kv_valid - q_valid)  # 0 on each batch's bottom-right diagonal
        return visible & (shift <= next_tokens) & (-shift <= pre_tokens)
    if mask is None:
        return visible
    visible = visible & ~_user_mask(mask, batch, q_len, kv_len)
    if sparse_mode == MASK_ONLY and q_starts is None and kv_starts is None:  # left padding ignores the band
        visible = visible & (kv_pos - q_pos <= next_tokens) & (q_pos - kv_pos <= pre_tokens)
    return visible


@dataclass(frozen=True)
class _Softmax:
    """Per-row softmax statistics, float32 [B, N, Sq, 1]: the row max of the scaled scores (-inf for a row
    with nothing to attend to) and the sum of ``exp(score - max)`` (0 for such a row)."""

    max: torch.Tensor
    sum: torch.Tensor

    def lse(self) -> torch.Tensor:
        """``max + log(sum)``; +inf for a row with nothing to attend to."""
        has_mass = self.sum > 0
        return torch.where(has_mass, self.max + torch.log(torch.where(has_mass, self.sum, 1.0)), float("inf"))


@dataclass(frozen=True)
class _Dequant:
    """Full int8 quantisation of MLA attention (v2, ``query_quant_mode=3``): the int8 query's per-token,
    per-head scales [B, N, Sq, 1], the per-tensor key and value scales, and the rope parts [B, N(_kv), S, Dr]
    in float32, which are not quantised and add to the dequantised nope scores."""

    query: torch.Tensor
    key: float
    value: float
    query_rope: torch.Tensor
    key_rope: torch.Tensor

    def sequence(self, index: int) -> "_Dequant":
        """The scales and rope parts of one sequence of the batch (its batch dim dropped)."""
        return _Dequant(self.query[index], self.key, self.value, self.query_rope[index], self.key_rope[index])


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float,
               dequant: Optional[_Dequant] = None,
               dropout: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, _Softmax]:
    """softmax(scale * q k^T, masked) v in float32; returns (out [B, N, Sq, Dv], its softmax statistics).

    q is [B, N, Sq, D]; k / v are [B, N_kv, Skv, *] and query head ``h`` reads KV head ``h // (N / N_kv)``
    (GQA, MQA and MLA's single KV head). ``visible`` is [B or 1, 1 or N, Sq, Skv]; ``dropout`` [B, N, Sq, Skv]
    multiplies the probabilities before ``@ v`` (0 or ``1 / keep_prob``), not the statistics.

    Each sequence is computed on its own (:func:`_sequence_attention`): no value mixes sequences, and a
    sequence's scores, exponentials and probabilities are a few MB that stay in the CPU's cache and the
    allocator's heap, where a whole decode batch's are hundreds of MB of fresh pages per temporary.
    """
    batch, heads, q_len, _ = q.shape
    out = q.new_empty(batch, heads, q_len, v.shape[-1])
    row_max, denom = q.new_empty(batch, heads, q_len, 1), q.new_empty(batch, heads, q_len, 1)
    for b in range(batch):
        mask = visible[b if visible.shape[0] > 1 else 0]
        out[b], row_max[b], denom[b] = _sequence_attention(
            q[b], k[b], v[b], mask, scale, dequant.sequence(b) if dequant is not None else None,
            None if dropout is None else dropout[b])
    return out, _Softmax(row_max, denom)


def _sequence_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float,
                        dequant: Optional[_Dequant],
                        dropout: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One sequence of :func:`_attention`: q [N, Sq, D], k / v [N_kv, Skv, *], visible [1 or N, Sq, Skv];
    returns (out [N, Sq, Dv], row max [N, Sq, 1], row sum [N, Sq, 1]).

    The query heads of one KV head are multiplied as one matrix, so K and V are never copied per query
    head (MLA decode has 128 query heads on one KV head). With ``dequant`` q, k and v hold int8 values:
    ``q k^T`` is their exact integer product (fp32 is exact here: |sum| <= D x 127^2 < 2^24 for
    D <= 1024), scaled by the query's and key's scales, plus the rope scores; the output is ``probs v``
    scaled by the value's scale.
    """
    heads, q_len, dim = q.shape
    kv_heads = k.shape[0]
    group = heads // kv_heads
    scores = cube_matmul(q.reshape(kv_heads, group * q_len, dim), k.transpose(-1, -2))
    if dequant is not None:
        q_scale = dequant.query.reshape(kv_heads, group * q_len, 1)
        rope = dequant.query_rope.reshape(kv_heads, group * q_len, -1)
        scores = scores * q_scale * dequant.key + cube_matmul(rope, dequant.key_rope.transpose(-1, -2))
    scores = scores.reshape(kv_heads, group, q_len, -1) * scale
    visible = visible.reshape(kv_heads, group, q_len, -1) if visible.shape[0] == heads else visible.unsqueeze(1)
    scores = scores.masked_fill(~visible, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    exps = torch.exp(scores - torch.where(row_max > float("-inf"), row_max, 0.0))
    denom = pairwise_sum(exps, dim=-1, keepdim=True)
    probs = exps / torch.where(denom > 0, denom, 1.0)
    if dropout is not None:  # query head h = kv head * group + g, as the reshape above
        probs = probs * dropout.reshape(kv_heads, group, q_len, -1)
    out = cube_matmul(probs.reshape(kv_heads, group * q_len, -1), v)
    if dequant is not None:
        out = out * dequant.value
    return out.reshape(heads, q_len, -1), row_max.reshape(heads, q_len, 1), denom.reshape(heads, q_len, 1)


@dataclass(frozen=True)
class _Setup:
    """Everything one attention computation needs besides the tensors, resolved from a call's arguments."""

    geo: _Geometry
    q_lens: list[int]
    kv_lens: list[int]
    scale: float
    sparse_mode: int
    pre_tokens: int
    next_tokens: int
    q_starts: Optional[list[int]] = None  # left padding: the first valid row / key of each batch (default 0)
    kv_starts: Optional[list[int]] = None


def _run(setup: _Setup, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Optional[torch.Tensor],
         block_table: Optional[torch.Tensor], query_rope: Optional[torch.Tensor],
         key_rope: Optional[torch.Tensor], scales: Optional["QuantScales"] = None,
         antiquant: Optional[tuple["Antiquant", "Antiquant"]] = None,
         dropout: Optional[torch.Tensor] = None,
         out_dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, _Softmax]:
    """(attention_out in the output dtype and layout, its softmax statistics [B, N, Sq, 1] padded).
    ``scales``: the dequant scales of an int8 query, key and value (:class:`QuantScales`); ``antiquant``:
    the key's and value's factors of an int8 KV cache beside a float query (:class:`Antiquant`);
    ``dropout``: the multipliers of a dropout on the probabilities, [B, N, Sq, Skv]; ``out_dtype``: the
    output's dtype when not the query's (float32 before an output quantisation)."""
    geo = setup.geo
    if mask is not None and setup.sparse_mode in CAUSAL_MODES:
        _require_causal_mask(mask)
    q = _q_to_bnsd(query, geo, setup.q_lens)
    k = _kv_to_bnsd(key, geo, block_table, setup.kv_lens)
    v = k if value is key else _kv_to_bnsd(value, geo, block_table, setup.kv_lens)  # MLA: one latent cache
    if antiquant is not None:
        k, v = (factors.dequantize(values, geo, block_table, query.dtype) for factors, values in zip(antiquant, (k, v)))
    dequant = None
    if scales is not None:
        per_token = scales.query if geo.layout == "BSH" else scales.query.unsqueeze(-1)
        dequant = _Dequant(
            _q_to_bnsd(per_token, geo, setup.q_lens), float(scales.key), float(scales.value),
            _q_to_bnsd(query_rope, geo, setup.q_lens), _kv_to_bnsd(key_rope, geo, block_table, setup.kv_lens),
        )
    elif query_rope is not None:
        q = torch.cat([q, _q_to_bnsd(query_rope, geo, setup.q_lens)], dim=-1)
        k = torch.cat([k, _kv_to_bnsd(key_rope, geo, block_table, setup.kv_lens)], dim=-1)
    visible = _visible(setup.q_lens, setup.kv_lens, q.shape[2], k.shape[2], mask, setup.sparse_mode,
                       setup.pre_tokens, setup.next_tokens, setup.q_starts, setup.kv_starts)
    out, stats = _attention(q, k, v, visible, setup.scale, dequant, dropout)
    if out_dtype is None:
        out_dtype = query_rope.dtype if scales is not None else query.dtype
    return _bnsd_to_layout(out, geo.out_layout, setup.q_lens, query.shape[0]).to(out_dtype), stats


# ---------------------------------------------------------------------------------------------
# npu_fused_infer_attention_score
# ---------------------------------------------------------------------------------------------

FIA_UNMODELED = (
    "pse_shift", "dequant_scale1", "quant_scale1", "dequant_scale2",
    "key_shared_prefix", "value_shared_prefix", "actual_shared_prefix_len", "key_rope_antiquant_scale",
)
POST_QUANT_LAYOUTS = ("BSH", "BNSD", "BSND", "BNSD_BSND")  # the page's int8 constraints: input_layout
PER_CHANNEL, PER_TOKEN, PER_TENSOR_HEAD, PER_TOKEN_HEAD, PER_TOKEN_PAGED, PER_TOKEN_HEAD_PAGED = range(6)
ANTIQUANT_MODES = {
    PER_CHANNEL: "per channel (or per tensor)", PER_TOKEN: "per token", PER_TENSOR_HEAD: "per tensor and head",
    PER_TOKEN_HEAD: "per token and head", PER_TOKEN_PAGED: "per token, paged like the cache",
    PER_TOKEN_HEAD_PAGED: "per token and head, paged like the cache",
}
PREFILL_ANTIQUANT_MODES = (PER_CHANNEL, PER_TOKEN)  # Q_S > 1 takes only these (the page's special constraints)


@dataclass(frozen=True)
class Antiquant:
    """The dequantisation of an int8 key or value cache beside a float16/bfloat16 query ("伪量化"):
    ``x = (x_int8 + offset) * scale``, rounded to the query's dtype, before the attention (the op pages: the
    KV cache is dequantised from int8 to float16; the antiquant convention of torch_npu's weight-quant ops,
    ``(weight + antiquant_offset) * antiquant_scale`` in op-plugin's test_npu_weight_quant_batchmatmul.py
    golden). ``mode`` is key_/value_antiquant_mode's (:data:`ANTIQUANT_MODES`), and
    fixes the factor's shape (op-plugin's npu_fused_infer_attention_score_v2 page, Q_S = 1 table):

    * 0: per channel ``(N_kv, 1, D)``, ``(N_kv, D)``, ``(H)``, ``(1, N_kv, 1, D)``, ``(1, N_kv, D)``, ``(1, H)``,
      or per tensor ``(1,)``;
    * 1: per token ``(1, B, S_kv)`` or ``(B, S_kv)``;  2: per head ``(N_kv,)``;  3: ``(B, N_kv, S_kv)``;
    * 4 / 5 (paged KV): per cache slot ``(blocks, block_size)`` / ``(blocks, N_kv, block_size)``, read through
      block_table like the cache.

    The token modes may be longer than the KV sequence (the page: S >= max blocks x block_size)."""

    name: str
    scale: torch.Tensor
    offset: Optional[torch.Tensor]
    mode: int

    def check(self, geo: _Geometry, cache_blocks: int) -> None:
        """The factor's shape for this mode and the call's sizes (metadata only)."""
        for kind, factor in (("scale", self.scale), ("offset", self.offset)):
            name = f"{self.name}_antiquant_{kind}"
            if factor is None:
                continue
            require_dtype(name, factor, (torch.float16, torch.bfloat16, torch.float32))
            if not self._fits(tuple(factor.shape), geo, cache_blocks):
                raise OpArgumentError(
                    f"{name} has shape {list(factor.shape)}; {self.name}_antiquant_mode={self.mode} "
                    f"({ANTIQUANT_MODES[self.mode]}) needs {self._expected(geo, cache_blocks)} "
                    f"(B={geo.batch}, N_kv={geo.kv_heads}, S_kv={geo.kv_len}, D={geo.head_dim})", argument=name)

    def _fits(self, shape: tuple[int, ...], geo: _Geometry, cache_blocks: int) -> bool:
        batch, heads, length = geo.batch, geo.kv_heads, geo.kv_len
        if self.mode == PER_CHANNEL:
            return shape in ((), (1,)) or shape in self._channel_shapes(geo)  # () : the combined (2,) split
        if self.mode == PER_TOKEN:
            return len(shape) in (2, 3) and shape[:-1] in ((batch,), (1, batch)) and shape[-1] >= length
        if self.mode == PER_TENSOR_HEAD:
            return shape == (heads,)
        if self.mode == PER_TOKEN_HEAD:
            return len(shape) == 3 and shape[:2] == (batch, heads) and shape[2] >= length
        return geo.paged and shape == self._paged_shape(geo, cache_blocks)

    def _paged_shape(self, geo: _Geometry, cache_blocks: int) -> tuple[int, ...]:
        block_size = geo.kv_len // geo.max_blocks if geo.paged and geo.max_blocks else 0
        if self.mode == PER_TOKEN_PAGED:
            return cache_blocks, block_size
        return cache_blocks, geo.kv_heads, block_size

    @staticmethod
    def _channel_shapes(geo: _Geometry) -> set[tuple[int, ...]]:
        n, d = geo.kv_heads, geo.head_dim
        return {(n, 1, d), (n, d), (n * d,), (1, n, 1, d), (1, n, d), (1, n * d)}

    def _expected(self, geo: _Geometry, cache_blocks: int) -> str:
        n, d, b = geo.kv_heads, geo.head_dim, geo.batch
        return {
            PER_CHANNEL: f"(1,) or one of {sorted(self._channel_shapes(geo))}",
            PER_TOKEN: f"(1, {b}, >= S_kv) or ({b}, >= S_kv)", PER_TENSOR_HEAD: f"({n},)",
            PER_TOKEN_HEAD: f"({b}, {n}, >= S_kv)",
            PER_TOKEN_PAGED: f"{self._paged_shape(geo, cache_blocks)} with block_table",
            PER_TOKEN_HEAD_PAGED: f"{self._paged_shape(geo, cache_blocks)} with block_table",
        }[self.mode]

    def dequantize(self, values: torch.Tensor, geo: _Geometry, block_table: Optional[torch.Tensor],
                   dtype: torch.dtype) -> torch.Tensor:
        """``values`` (int8 values as float32 [B, N_kv, S_kv, D]) dequantised and rounded to ``dtype``,
        returned as float32 like the other operands."""
        scale = self._bnsd(self.scale, geo, block_table)
        shifted = values if self.offset is None else values + self._bnsd(self.offset, geo, block_table)
        return (shifted * scale).to(dtype).to(torch.float32)

    def _bnsd(self, factor: torch.Tensor, geo: _Geometry, block_table: Optional[torch.Tensor]) -> torch.Tensor:
        """The factor as float32 broadcastable to [B, N_kv, S_kv, D]."""
        factor, length = factor.to(torch.float32), geo.kv_len
        if self.mode == PER_CHANNEL:
            return factor.reshape(1, 1, 1, 1) if factor.numel() == 1 else factor.reshape(1, geo.kv_heads, 1, -1)
        if self.mode == PER_TOKEN:
            return factor.reshape(geo.batch, -1)[:, :length].reshape(geo.batch, 1, length, 1)
        if self.mode == PER_TENSOR_HEAD:
            return factor.reshape(1, geo.kv_heads, 1, 1)
        if self.mode == PER_TOKEN_HEAD:
            return factor[:, :, :length].unsqueeze(-1)
        gathered = factor[block_table.to(torch.int64)]  # [B, max blocks, (N_kv,) block_size]
        if self.mode == PER_TOKEN_PAGED:
            return gathered.reshape(geo.batch, 1, -1, 1)[:, :, :length]
        return gathered.transpose(1, 2).reshape(geo.batch, geo.kv_heads, -1, 1)[:, :, :length]


def _antiquant(call: Arguments, geo: _Geometry) -> Optional[tuple[Antiquant, Antiquant]]:
    """The key's and value's dequantisation of an int8 KV cache, from the separate ``key_/value_antiquant_*``
    (preferred by the page when both forms are given) or the combined ``antiquant_scale`` / ``_offset``
    (key at index 0, value at 1; ``antiquant_mode`` 0 per channel/tensor or 1 per token)."""
    factor = functools.partial(getattr, call)  # IFA has only the combined form and no antiquant_mode
    key_scale, value_scale = factor("key_antiquant_scale", None), factor("value_antiquant_scale", None)
    key_offset, value_offset = factor("key_antiquant_offset", None), factor("value_antiquant_offset", None)
    if (key_scale is None) != (value_scale is None):
        raise OpArgumentError(
            "key_antiquant_scale and value_antiquant_scale are given together or not at all",
            argument="key_antiquant_scale",
        )
    if (key_offset is None) != (value_offset is None):
        raise OpArgumentError(
            "key_antiquant_offset and value_antiquant_offset are given together or not at all",
            argument="key_antiquant_offset",
        )
    given = key_scale is not None or call.antiquant_scale is not None
    if call.key.dtype != torch.int8:
        if given or call.antiquant_offset is not None or key_offset is not None:
            raise OpArgumentError(f"antiquant scales dequantise an int8 key and value; key is {call.key.dtype}")
        return None
    if not given:
        raise OpArgumentError("int8 key and value (antiquant) need key_antiquant_scale and value_antiquant_scale "
                              "(or the combined antiquant_scale)")
    if geo.layout == "TND":
        raise OpArgumentError("antiquant (int8 key and value) does not take input_layout TND (the page's TND limits)")
    if key_scale is not None:
        modes = (call.key_antiquant_mode, call.value_antiquant_mode)
        factors = (Antiquant("key", key_scale, key_offset, modes[0]),
                   Antiquant("value", value_scale, value_offset, modes[1]))
    else:
        modes = (factor("antiquant_mode", PER_CHANNEL),) * 2
        require_choice("antiquant_mode", modes[0], PREFILL_ANTIQUANT_MODES, "0 per channel, 1 per token")
        scale, offset = call.antiquant_scale, call.antiquant_offset
        if scale.dim() < 1 or scale.shape[0] != 2 or (offset is not None and offset.shape != scale.shape):
            raise OpArgumentError(f"antiquant_scale has shape {list(scale.shape)}; the combined form stacks the key's "
                                  "and the value's factors on a first dim of 2 (antiquant_offset alike)",
                                  argument="antiquant_scale")
        factors = tuple(Antiquant(name, scale[i], None if offset is None else offset[i], modes[0])
                        for i, name in enumerate(("key", "value")))
    allowed = ANTIQUANT_MODES if geo.q_len == 1 else PREFILL_ANTIQUANT_MODES
    for factor in factors:
        require_choice(f"{factor.name}_antiquant_mode", factor.mode, tuple(allowed),
                       "Q_S > 1 takes 0 or 1, Q_S = 1 also 2-5")
    if modes[0] != modes[1] and modes != (PER_CHANNEL, PER_TOKEN):
        raise OpArgumentError(f"key_antiquant_mode={modes[0]} and value_antiquant_mode={modes[1]} must agree "
                              "(except key 0 with value 1)", argument="key_antiquant_mode")
    blocks = call.key.shape[0] if geo.paged else 0
    for factor in factors:
        factor.check(geo, blocks)
    return factors


def _left_padding(setup: _Setup, call: Arguments, q_lengths_given: bool, kv_lengths_given: bool) -> _Setup:
    """Left padding (``query_padding_size`` / ``kv_padding_size``, int64, one value): a batch's valid rows or
    keys end that many before the tensor's end, ``[S - padding - length, S - padding)`` (the pages' "搬运起点 /
    终点"); a negative padding counts as 0. Only with the actual lengths given, else the padding is ignored
    (right padding). Decode (Q_S = 1) gives zeros for a batch whose KV range starts before 0; prefill refuses
    it. Values are read here, on the CPU kernel's path only."""
    starts: dict[str, list[int]] = {}
    for name, given, lengths, size in (("query_padding_size", q_lengths_given, setup.q_lens, setup.geo.q_len),
                                       ("kv_padding_size", kv_lengths_given, setup.kv_lens, setup.geo.kv_len)):
        padding = getattr(call, name, None)
        if padding is None or not given:
            continue
        pad = max(0, int(padding.reshape(-1)[0]))
        starts[name] = [size - pad - length for length in lengths]
    if not starts:
        return setup
    kv_lens = list(setup.kv_lens)
    for b, start in enumerate(starts.get("kv_padding_size", [])):
        if start < 0 and setup.geo.q_len > 1:
            raise OpArgumentError(f"kv_padding_size leaves batch {b} starting at key {start} < 0 "
                                  "(S_kv - kv_padding_size - actual_seq_lengths_kv must be >= 0 for prefill)",
                                  argument="kv_padding_size")
        kv_lens[b] = 0 if start < 0 else kv_lens[b]
    if any(start < 0 for start in starts.get("query_padding_size", [])):
        raise OpArgumentError("query_padding_size leaves a batch starting before row 0 "
                              "(Q_S - query_padding_size - actual_seq_lengths must be >= 0)",
                              argument="query_padding_size")
    return replace(setup, kv_lens=kv_lens, q_starts=starts.get("query_padding_size"),
                   kv_starts=[max(0, start) for start in starts["kv_padding_size"]] if "kv_padding_size" in starts
                   else None)


def _check_padding(call: Arguments, geo: _Geometry) -> None:
    """The padding sizes' metadata: int64, one value, and no paged KV (the pages' padding limits)."""
    for name in ("query_padding_size", "kv_padding_size"):
        padding = getattr(call, name, None)
        if padding is None:
            continue
        require_dtype(name, padding, (torch.int64,))
        if padding.numel() != 1:
            raise OpArgumentError(f"{name} has shape {list(padding.shape)}; it holds one padding count", argument=name)
        if geo.paged:
            raise OpArgumentError(f"{name} (left padding) does not take paged KV (block_table)", argument=name)


def _kv_lengths(geo: _Geometry, values: Optional[Sequence[int]], key: torch.Tensor, name: str) -> list[int]:
    """Per-batch KV lengths: cumulative ends for non-paged TND, plain lengths otherwise (required when paged)."""
    if geo.paged and values is None:
        raise OpArgumentError(
            f"block_table (paged KV) needs {name}: the valid KV length of each batch", argument="block_table"
        )
    if geo.layout == "TND" and not geo.paged:
        if values is None and not is_fake(key):
            raise OpArgumentError(
                f"input_layout='TND' needs {name}: the cumulative KV token ends per batch", argument="input_layout"
            )
        lengths = _cumulative_lengths(name, values, key.shape[0])
        if len(lengths) != geo.batch:
            raise OpArgumentError(
                f"{name} has {len(lengths)} values; TND needs one per batch ({geo.batch})", argument=name
            )
        return lengths
    return _seq_lengths(name, values, geo.batch, geo.kv_len)


def _fia_call(call: Arguments, quantised: bool = False) -> _Setup:
    """Validate a call's tensors from metadata and resolve lengths; shared by the meta function and the kernel.
    ``quantised``: query, key and value are int8 (v2's full quantisation, :class:`QuantScales`)."""
    query, key, value, actual_seq_lengths = call.query, call.key, call.value, call.actual_seq_lengths
    _check_qkv_dtypes(query, key, value, quantised)
    kv_heads = call.num_key_value_heads or call.num_heads
    query, key, value = _ntd_as_tnd(call.input_layout, query, key, value)
    geo = _geometry(query, key, value, _tnd_for_ntd(call.input_layout), call.num_heads, kv_heads,
                    call.block_table, call.block_size, actual_seq_lengths)
    _check_rope(call.query_rope, call.key_rope, query, key, quantised)
    _check_mask(call.atten_mask, call.sparse_mode, geo)
    _check_padding(call, geo)
    if geo.layout == "TND":
        q_lens = _cumulative_lengths("actual_seq_lengths", actual_seq_lengths, geo.q_len)
    else:
        q_lens = _seq_lengths("actual_seq_lengths", actual_seq_lengths, geo.batch, geo.q_len)
    kv_lens = _kv_lengths(geo, call.actual_seq_lengths_kv, key, "actual_seq_lengths_kv")
    return _Setup(geo, q_lens, kv_lens, float(call.scale), call.sparse_mode, call.pre_tokens, call.next_tokens)


def _check_qkv_dtypes(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, quantised: bool) -> None:
    """float16/bfloat16 query, key and value of one dtype; or an int8 key and value beside a float query
    (antiquant, :class:`Antiquant`); or, ``quantised``, all three int8 (v2's query_quant_mode=3)."""
    if quantised:
        for name, tensor in (("query", query), ("key", key), ("value", value)):
            require_dtype(name, tensor, (torch.int8,), "(query_quant_mode=3 takes int8 query, key and value)")
        return
    require_dtype("query", query, ATTENTION_DTYPES, "(int8 attention needs v2's query_quant_mode=3)")
    require_dtype("key", key, (query.dtype, torch.int8), "(query's dtype, or int8 with antiquant scales)")
    if value.dtype != key.dtype:
        raise OpArgumentError(f"key is {key.dtype} but value is {value.dtype}; they share a dtype", argument="key")


def _ntd_as_tnd(layout: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """NTD and NTD_TND read heads-first ``(N, T, D)`` tensors: the TND tensors they transpose (views)."""
    if layout.partition("_")[0] != "NTD":
        return query, key, value
    return tuple(tensor.transpose(0, 1) for tensor in (query, key, value))


def _tnd_for_ntd(layout: str) -> str:
    """The layout :func:`_geometry` reads for an NTD input (its TND transpose, :func:`_ntd_as_tnd`): the
    output keeps NTD unless the layout names another after "_"."""
    source, _, output = layout.partition("_")
    return f"TND_{output or 'NTD'}" if source == "NTD" else layout


def _post_quant_factors(call: Arguments, geo: _Geometry) -> Optional[tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """The output quantisation (the page's "int8后量化": float query, key and value in, int8 out):
    ``quant_scale2`` and ``quant_offset2`` (None is 0), float32 (or bfloat16 beside a bfloat16 query), per
    tensor (one value) or per channel (H values for BSH, N x D for BNSD / BSND: (1, 1, H) or (H,), (1, N, 1,
    D), (1, 1, N, D) or (N, D)), as [1, 1, H] / [N, 1, D] / [1, N, D] float32 factors of the output layout;
    None without quant_scale2."""
    scale, offset = call.quant_scale2, call.quant_offset2
    if scale is None:
        if offset is not None:
            raise OpArgumentError("quant_offset2 needs quant_scale2 (the output quantisation)",
                                  argument="quant_offset2")
        return None
    require_choice("input_layout", call.input_layout, POST_QUANT_LAYOUTS,
                   "the layouts the page's int8 output quantisation takes")
    dtypes = (torch.float32, torch.bfloat16) if call.query.dtype == torch.bfloat16 else (torch.float32,)
    require_dtype("quant_scale2", scale, dtypes)
    if offset is not None:
        require_dtype("quant_offset2", offset, (scale.dtype,), "(quant_scale2's dtype)")
        require_shape("quant_offset2", offset, (tuple(scale.shape),))
    channels = geo.heads * geo.value_dim
    if scale.numel() not in (1, channels):
        raise OpArgumentError(f"quant_scale2 has shape {list(scale.shape)}; it holds one value (per tensor) or "
                              f"{channels} (per channel: N x D)", argument="quant_scale2")
    form = {"BSH": (1, 1, -1), "BNSD": (geo.heads, 1, -1), "BSND": (geo.heads, -1)}[geo.out_layout]
    factors = [t if t is None else t.to(torch.float32).reshape(form if t.numel() > 1 else (1,))
               for t in (scale, offset)]
    return factors[0], factors[1]


def _fia_meta(call: Arguments) -> tuple[Out, Out]:
    geo = _fia_call(call).geo
    _antiquant(call, geo)
    lse = geo.lse_shape() if call.softmax_lse_flag else [0]
    out_dtype = call.query.dtype if _post_quant_factors(call, geo) is None else torch.int8
    return Out(geo.out_shape(), out_dtype), Out(lse, torch.float32)


def _fia_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    setup = _fia_call(call)
    antiquant = _antiquant(call, setup.geo)
    setup = _left_padding(setup, call, call.actual_seq_lengths is not None, call.actual_seq_lengths_kv is not None)
    query, key, value = _ntd_as_tnd(call.input_layout, call.query, call.key, call.value)
    post_quant = _post_quant_factors(call, setup.geo)
    out, stats = _run(setup, query, key, value, call.atten_mask, call.block_table, call.query_rope,
                      call.key_rope, antiquant=antiquant, out_dtype=None if post_quant is None else torch.float32)
    if post_quant is not None:
        scale, offset = post_quant
        out = round_to_int8(out * scale if offset is None else out * scale + offset)
    if not call.softmax_lse_flag:
        return out, stats.sum.new_zeros(0)
    lse = stats.lse()
    if setup.geo.layout == "TND":
        lse = _bnsd_to_layout(lse, "TND", setup.q_lens, query.shape[0]).contiguous()
    return out, lse


def _check_attention_scalars(num_heads: int, num_key_value_heads: int, sparse_mode: int, inner_precise: int,
                             pre_tokens: int, next_tokens: int, block_size: int) -> None:
    """Scalar options shared by the attention ops (their schema types are checked already)."""
    if num_heads < 1:
        raise OpArgumentError(f"num_heads={num_heads} must be >= 1", argument="num_heads")
    kv_heads = num_key_value_heads or num_heads
    if kv_heads < 0 or num_heads % kv_heads != 0:
        raise OpArgumentError(
            f"num_key_value_heads={num_key_value_heads} must divide num_heads={num_heads} (GQA groups)",
            argument="num_key_value_heads"
        )
    require_choice("sparse_mode", sparse_mode, (MASK_ONLY, ALL_MASK, LEFT_UP_CAUSAL, RIGHT_DOWN_CAUSAL, BAND),
                   "0 mask with pre/next-token band, 1 mask only, 2/3 causal, 4 band from the bottom right "
                   "(prefix, global, dilated and block-local modes 5-8 are not modeled)")
    if sparse_mode == BAND and pre_tokens + next_tokens < 0:
        raise OpArgumentError(
            f"sparse_mode=4 (band) needs pre_tokens + next_tokens >= 0, got {pre_tokens} + {next_tokens}",
            argument="sparse_mode"
        )
    require_choice("inner_precise", inner_precise, (0, 1, 2, 3),
                   "precision/performance and invalid-row modes; the CPU model computes one way")


def _sample_bnsd(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).bfloat16()


def _sample_causal_mask() -> torch.Tensor:
    """The 2048 x 2048 upper-triangle mask torch_npu's docs prescribe for the causal sparse modes."""
    return torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def _sample_paged_kv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """A BnBsH paged cache of 7 blocks of 4 slots for 2 heads of 8, two sequences' block tables and their
    lengths."""
    cache = _sample_bnsd(7, 4, 16, seed=3)
    table = torch.tensor([[4, 0, 6], [2, 5, 1]], dtype=torch.int32)
    return cache, cache.clone(), table, [9, 5]


def _fia_samples() -> list[SampleCall]:
    """GQA decode in BSH with kv lengths; causal prefill in BNSD with the lse; paged decode; prefill with a
    per-channel int8 output quantisation."""
    key, value, table, lengths = _sample_paged_kv()
    prefill = _sample_bnsd(1, 2, 8, 8, seed=2)
    return [
        SampleCall((_sample_bnsd(2, 1, 32, seed=0), _sample_bnsd(2, 6, 16, seed=1), _sample_bnsd(2, 6, 16, seed=4)),
                   {"num_heads": 4, "num_key_value_heads": 2, "input_layout": "BSH", "scale": 0.3,
                    "actual_seq_lengths_kv": [6, 4]}),
        SampleCall((prefill, prefill, prefill), {"num_heads": 2, "input_layout": "BNSD", "sparse_mode": 3,
                                                 "atten_mask": _sample_causal_mask(), "scale": 0.5,
                                                 "softmax_lse_flag": True}),
        SampleCall((_sample_bnsd(2, 2, 1, 8, seed=5), key, value),
                   {"num_heads": 2, "input_layout": "BNSD", "block_table": table, "block_size": 4,
                    "actual_seq_lengths_kv": lengths, "scale": 0.3}),
        SampleCall((prefill, prefill, prefill), {"num_heads": 2, "input_layout": "BNSD_BSND", "scale": 0.5,
                                                 "quant_scale2": torch.full((2, 8), 40.0),
                                                 "quant_offset2": torch.full((2, 8), 2.0)}),
    ]


@npu_op(meta=_fia_meta, kernel=_fia_kernel, unmodeled=FIA_UNMODELED, samples=_fia_samples)
def npu_fused_infer_attention_score(call: Arguments) -> None:
    """Inference attention (prefill and decode): returns ``(attention_out, softmax_lse)``.

    Source: torch_npu.npu_fused_infer_attention_score (op-plugin API page: layouts, PageAttention, MLA and
    TND constraints, sparse modes; meta function for the output shapes). The computation and its rounding
    points are in the module docstring; ``out = softmax(scale * q k^T + mask) v`` per batch and head, with
    key/value head ``h // (N / N_kv)`` (GQA; ``num_key_value_heads=0`` means N).

    * Layouts: BSH ``[B, S, N*D]``, BSND, BNSD, and TND ``[T, N, D]`` (variable lengths:
      ``actual_seq_lengths`` / ``actual_seq_lengths_kv`` are **cumulative** token ends per batch, as the page
      requires), and BNSD_BSND (BNSD in, BSND out). float16/bfloat16. ``attention_out`` has the query's
      layout (or the output layout) and dtype with value's head dim.
    * Paged KV (``block_table`` int32 ``[B, max blocks]``, ``block_size``): the caches are
      ``[blocks, block_size, N_kv*D]``, or 4-D ``[blocks, block_size, N_kv, D]`` with BSH/BSND and
      ``[blocks, N_kv, block_size, D]`` with BNSD/TND; sequence b reads its blocks in table order, and
      ``actual_seq_lengths_kv`` (required) gives its valid length (per batch, also for TND).
    * MLA: ``query_rope`` / ``key_rope`` (same shapes as query / key with the rope head dim) add
      ``q_rope . k_rope`` to every score; value is not extended.
    * Dense ``actual_seq_lengths`` / ``actual_seq_lengths_kv`` (1 or >= B ints): only the first L rows / keys
      of each batch count; invalid query rows output 0.
    * ``sparse_mode`` 0: ``atten_mask`` (bool/int8/uint8, nonzero = masked) ``[Sq, Skv]``, ``[B, Skv]`` for
      decode, ``[B|1, Sq, Skv]`` or ``[B|1, 1, Sq, Skv]``, and with a mask the band
      ``-pre_tokens <= j - i <= next_tokens``; no mask means full attention. 1: the mask only. 2: causal
      from the top left (``j <= i``); 3: from the bottom right (``j <= i + Skv_b - Sq_b``); 4: the band
      ``-pre_tokens <= j - (i + Skv_b - Sq_b) <= next_tokens`` from the bottom right (ops-transformer's
      sparse_mode introduction; ``pre_tokens + next_tokens >= 0``); 2-4 need the documented compressed mask
      ``triu(ones(2048, 2048), 1)`` and check it.
    * ``softmax_lse`` float32 ``[B, N, Sq, 1]`` (TND: ``[T, N, 1]``) with ``softmax_lse_flag``, else an
      empty ``[0]`` (the meta function's shape).
    * Output quantisation (the page's "int8 post-quantisation" row: float16/bfloat16 query, key and value,
      int8 out; BSH, BNSD, BSND, BNSD_BSND): ``attention_out = rint(out * quant_scale2 + quant_offset2)``
      saturated to int8, from the float32 output before its rounding to the query's dtype; ``quant_scale2``
      per tensor or per channel (:func:`_post_quant_factors`), ``quant_offset2`` None (0) or of its shape.

    Refused with the argument's name: int8 query full quantisation (``dequant_scale1``, ``quant_scale1``,
    ``dequant_scale2``), pse_shift, shared
    prefixes, the other ``X_Y`` layouts (``*_NBSD``, ``NTD``, ``TND_NTD``) and sparse modes 5-8. ``inner_precise`` and the antiquant modes
    only select device paths and are accepted.
    """
    _check_attention_scalars(call.num_heads, call.num_key_value_heads, call.sparse_mode, call.inner_precise,
                             call.pre_tokens, call.next_tokens,
                             call.block_size)
    if call.input_layout not in FIA_LAYOUTS:
        raise OpArgumentError(
            f"input_layout={call.input_layout!r} is not implemented; expected one of {', '.join(FIA_LAYOUTS)}",
            argument="input_layout"
        )


# ---------------------------------------------------------------------------------------------
# npu_incre_flash_attention (decode) and npu_prompt_flash_attention (prefill)
# ---------------------------------------------------------------------------------------------

IFA_UNMODELED = (
    "padding_mask", "pse_shift", "dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2", "quant_offset2",
)
PFA_UNMODELED = ("padding_mask", "pse_shift", "deq_scale1", "quant_scale1", "deq_scale2", "quant_scale2", "quant_offset2")


def _same_shape_call(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: str, num_heads: int,
                     num_key_value_heads: int, block_table: Optional[torch.Tensor], block_size: int,
                     layouts: Sequence[str]) -> _Geometry:
    """IFA/PFA: dense layouts, and the output has the query's shape (their meta functions)."""
    if layout not in layouts:
        raise OpArgumentError(
            f"input_layout={layout!r} is not implemented; expected one of {', '.join(layouts)}", argument="input_layout"
        )
    _check_qkv_dtypes(query, key, value, quantised=False)
    geo = _geometry(query, key, value, _layout_of_rank(query, layout, num_heads), num_heads,
                    num_key_value_heads or num_heads, block_table, block_size, None)
    if geo.value_dim != geo.head_dim:
        raise OpArgumentError(
            f"value head dim {geo.value_dim} must equal the query's {geo.head_dim} (output is like query)",
            argument="value"
        )
    return geo


def _layout_of_rank(query: torch.Tensor, layout: str, num_heads: int) -> str:
    """The layout IFA/PFA read: their pages say the layout follows the query's rank, 3-D being BSH and
    4-D BNSD or BSND, and op-plugin's meta functions shape the output like the query whatever the
    layout. So "BSH" (the default) with a 4-D query names the 4-D layout whose head dim holds
    ``num_heads`` (BNSD when both do); a 4-D query with neither is refused."""
    if layout != "BSH" or query.dim() != 4:
        return layout
    for candidate, heads_dim in (("BNSD", 1), ("BSND", 2)):
        if query.shape[heads_dim] == num_heads:
            return candidate
    raise OpArgumentError(f"query has shape {list(query.shape)} with input_layout='BSH'; a 4-D query is BNSD or BSND "
                          f"and needs num_heads={num_heads} at dim 1 or 2 (pass input_layout and num_heads)",
                          argument="query")


def _ifa_call(call: Arguments) -> _Setup:
    geo = _same_shape_call(call.query, call.key, call.value, call.input_layout, call.num_heads,
                           call.num_key_value_heads, call.block_table, call.block_size, DENSE_LAYOUTS)
    _check_mask(call.atten_mask, MASK_ONLY, geo)
    _check_padding(call, geo)
    kv_lens = _kv_lengths(geo, call.actual_seq_lengths, call.key, "actual_seq_lengths")
    return _Setup(geo, [geo.q_len] * geo.batch, kv_lens, float(call.scale_value), MASK_ONLY, NO_BAND, NO_BAND)


def _ifa_meta(call: Arguments) -> Out:
    geo = _ifa_call(call).geo
    _antiquant(call, geo)
    return Out(geo.out_shape(), call.query.dtype)


def _ifa_kernel(call: Arguments) -> torch.Tensor:
    setup = _ifa_call(call)
    antiquant = _antiquant(call, setup.geo)
    setup = _left_padding(setup, call, False, call.actual_seq_lengths is not None)
    return _run(setup, call.query, call.key, call.value, call.atten_mask, call.block_table, None, None,
                antiquant=antiquant)[0]


def _ifa_samples() -> list[SampleCall]:
    """Paged decode in BNSD, and dense GQA decode in BSH."""
    key, value, table, lengths = _sample_paged_kv()
    return [
        SampleCall((_sample_bnsd(2, 2, 1, 8, seed=5), key, value),
                   {"num_heads": 2, "input_layout": "BNSD", "block_table": table, "block_size": 4,
                    "actual_seq_lengths": lengths, "scale_value": 0.3}),
        SampleCall((_sample_bnsd(2, 1, 32, seed=0), _sample_bnsd(2, 6, 16, seed=1), _sample_bnsd(2, 6, 16, seed=4)),
                   {"num_heads": 4, "num_key_value_heads": 2, "input_layout": "BSH", "scale_value": 0.3}),
    ]


@npu_op(meta=_ifa_meta, kernel=_ifa_kernel, unmodeled=IFA_UNMODELED, samples=_ifa_samples)
def npu_incre_flash_attention(call: Arguments) -> None:
    """Decode attention (one query token per batch, usually): returns ``attention_out`` shaped like ``query``.

    Source: torch_npu.npu_incre_flash_attention (op-plugin API page; meta function: output like query).
    The computation of :func:`npu_fused_infer_attention_score`, the scale named ``scale_value`` and
    ``actual_seq_lengths`` giving the valid **KV** lengths per batch (1 or >= B values). The page's formula,
    ``softmax(scale_value * query @ key^T + atten_mask) @ value``, and its shapes (query (B, S, H), (B, N, S,
    D) or (B, S, N, D), S up to 262144 on A2) do not limit the query to one token: with S > 1 every query row
    attends to every valid key (no causal band; ``atten_mask`` (B, S, S_kv) and its broadcasts mask rows).
    Layouts BSH, BSND, BNSD (the default "BSH" with a 4-D query reads it as the 4-D layout holding
    ``num_heads``, see :func:`_layout_of_rank`); paged KV through ``block_table`` / ``block_size`` as in the
    fused op (``actual_seq_lengths`` then required); ``atten_mask`` ``[B, S_kv]``, ``[B, 1, S_kv]`` or
    ``[B, 1, 1, S_kv]`` (nonzero = masked).

    * int8 key and value with ``antiquant_scale`` (and ``antiquant_offset``) ``(2, N_kv, 1, D)``,
      ``(2, N_kv, D)`` or ``(2, H)``: the key's (index 0) and value's (1) per-channel factors,
      ``(x + offset) * scale`` (:class:`Antiquant`).
    * ``kv_padding_size`` (int64, one value) with ``actual_seq_lengths``: the valid keys are left-padded,
      ``[S_kv - kv_padding_size - length, S_kv - kv_padding_size)``; a batch whose range starts before 0
      outputs zeros (the page's KV left padding).

    Refused: the quantised output and BMM scales, pse_shift; ``padding_mask`` is reserved by the page.
    """
    _check_attention_scalars(call.num_heads, call.num_key_value_heads, MASK_ONLY, call.inner_precise, NO_BAND, NO_BAND,
                             call.block_size)


def _pfa_meta(call: Arguments) -> Out:
    return Out(_pfa_call(call).geo.out_shape(), call.query.dtype)


def _pfa_kernel(call: Arguments) -> torch.Tensor:
    return _run(_pfa_call(call), call.query, call.key, call.value, call.atten_mask, None, None, None)[0]


def _pfa_call(call: Arguments) -> _Setup:
    geo = _same_shape_call(call.query, call.key, call.value, call.input_layout, call.num_heads,
                           call.num_key_value_heads, None, 0, PFA_LAYOUTS)
    _check_mask(call.atten_mask, call.sparse_mode, geo)
    q_lens = _seq_lengths("actual_seq_lengths", call.actual_seq_lengths, geo.batch, geo.q_len)
    kv_lens = _seq_lengths("actual_seq_lengths_kv", call.actual_seq_lengths_kv, geo.batch, geo.kv_len)
    return _Setup(geo, q_lens, kv_lens, float(call.scale_value), call.sparse_mode, call.pre_tokens, call.next_tokens)


def _pfa_samples() -> list[SampleCall]:
    """Prefill in BNSD, and BNSD in with BSND out."""
    q, k, v = (_sample_bnsd(1, 2, 8, 8, seed=seed) for seed in range(3))
    return [SampleCall((q, k, v), {"num_heads": 2, "input_layout": "BNSD", "scale_value": 0.35}),
            SampleCall((q, k, v), {"num_heads": 2, "input_layout": "BNSD_BSND", "scale_value": 0.35})]


@npu_op(meta=_pfa_meta, kernel=_pfa_kernel, unmodeled=PFA_UNMODELED, samples=_pfa_samples)
def npu_prompt_flash_attention(call: Arguments) -> None:
    """Prefill attention: returns ``attention_out`` shaped like ``query``.

    Source: torch_npu.npu_prompt_flash_attention (op-plugin API page; meta function: output like query).
    The computation of :func:`npu_fused_infer_attention_score` (dense layouts, see below) with the
    scale named ``scale_value``. Note this op's default ``next_tokens=0``: with ``sparse_mode=0`` and a mask,
    a query attends only to keys ``j`` with ``i - pre_tokens <= j <= i + next_tokens``, i.e. causally by
    default; without a mask the page says pre/next tokens are ignored. Modes 1-4 as in the fused op.

    Layouts BSH, BSND, BNSD and BNSD_BSND (BNSD in, BSND out, as the meta function shapes it); the default
    "BSH" with a 4-D query reads it as the 4-D layout holding ``num_heads`` (:func:`_layout_of_rank`).
    Refused: quantised inputs/outputs, pse_shift, the TND layout and sparse modes 5-8;
    ``padding_mask`` is reserved by the page.
    """
    _check_attention_scalars(call.num_heads, call.num_key_value_heads, call.sparse_mode, 0, call.pre_tokens,
                             call.next_tokens, 0)


# ---------------------------------------------------------------------------------------------
# npu_fusion_attention (FlashAttentionScore)
# ---------------------------------------------------------------------------------------------

FA_LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
FA_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
FA_MASK_DTYPES = (torch.bool, torch.uint8)
FA_UNMODELED = ("pse", "padding_mask", "prefix", "sink")
FA_STAT_COPIES = 8  # softmax_max / softmax_sum end in a dim of 8 (op-plugin meta function)


def _check_keep_prob(keep_prob: float) -> None:
    """The page's range of keep_prob, the share of probabilities kept: (0, 1]."""
    if not 0 < keep_prob <= 1:
        raise OpArgumentError(f"keep_prob={keep_prob} is outside (0, 1]: it is the share of attention "
                              "probabilities the dropout keeps (1 = no dropout)", argument="keep_prob")


def _fa_kv_heads(query: torch.Tensor, key: torch.Tensor, layout: str, head_num: int) -> int:
    """N_kv from key's shape (FlashAttentionScore has no KV-head argument): H_kv / D for BSH/SBH."""
    if layout in ("BSH", "SBH"):
        if query.dim() != 3 or key.dim() != 3 or query.shape[2] % head_num:
            raise OpArgumentError(f"query {list(query.shape)} and key {list(key.shape)} must be 3-D in {layout} with "
                                  f"query's hidden size a multiple of head_num={head_num}", argument="query")
        dim = query.shape[2] // head_num
        if dim == 0 or key.shape[2] % dim:
            raise OpArgumentError(
                f"key's hidden size {key.shape[2]} is not a multiple of the head dim {dim}", argument="key"
            )
        return key.shape[2] // dim
    heads_dim = {"BSND": 2, "BNSD": 1, "TND": 1}[layout]
    if key.dim() <= heads_dim:
        raise OpArgumentError(
            f"key has shape {list(key.shape)}; {layout} needs {3 if layout == 'TND' else 4} dims", argument="key"
        )
    return key.shape[heads_dim]


def _varlen_lengths(name: str, ends: Sequence[int], total: int) -> list[int]:
    """TND lengths from cumulative ends; trailing zeros are batches that take no part (the page's rule)."""
    ends = [int(require_int(f"{name}[{i}]", v)) for i, v in enumerate(ends)]
    used = len(ends)
    while used and ends[used - 1] == 0:
        used -= 1
    return _cumulative_lengths(name, ends[:used], total) + [0] * (len(ends) - used)


def _fa_check_mask(mask: Optional[torch.Tensor], sparse_mode: int, geo: _Geometry, q_lens: list[int],
                   kv_lens: list[int]) -> None:
    """BNSS/B1SS/11SS/SS masks for modes 0/1 (TND: [max Sq, max Skv]); the compressed mask for 2/3."""
    if mask is None:
        return
    require_dtype("atten_mask", mask, FA_MASK_DTYPES)
    if sparse_mode in CAUSAL_MODES:
        _check_mask(mask, sparse_mode, geo)
        return
    if geo.layout == "TND":
        require_shape("atten_mask", mask, ((max(q_lens, default=0), max(kv_lens, default=0)),))
        return
    b, n, sq, skv = geo.batch, geo.heads, geo.q_len, geo.kv_len
    require_shape("atten_mask", mask, ((b, n, sq, skv), (b, 1, sq, skv), (1, 1, sq, skv), (sq, skv)))


def _fa_call(call: Arguments) -> _Setup:
    """Validate from metadata (SBH is read as its BSH transpose) and resolve lengths and the mode."""
    query, key, value, head_num, input_layout = call.query, call.key, call.value, call.head_num, call.input_layout
    actual_seq_qlen, actual_seq_kvlen, atten_mask = call.actual_seq_qlen, call.actual_seq_kvlen, call.atten_mask
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_dtype(name, tensor, FA_DTYPES)
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise OpArgumentError(
            f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, {value.dtype}", argument="query"
        )
    if tuple(key.shape[:-1]) != tuple(value.shape[:-1]) and input_layout not in ("BSH", "SBH"):
        raise OpArgumentError(
            f"key {list(key.shape)} and value {list(value.shape)} must agree except the head dim", argument="key"
        )
    kv_heads = _fa_kv_heads(query, key, input_layout, head_num)
    if kv_heads < 1 or head_num % kv_heads:
        raise OpArgumentError(
            f"key has {kv_heads} heads; they must divide head_num={head_num} (GQA groups)", argument="key"
        )
    if input_layout == "TND":
        if actual_seq_qlen is None or actual_seq_kvlen is None:
            raise OpArgumentError(
                "input_layout='TND' needs actual_seq_qlen and actual_seq_kvlen (cumulative token ends)",
                argument="input_layout"
            )
        geo = _geometry(query, key, value, "TND", head_num, kv_heads, None, 0, actual_seq_qlen)
        q_lens = _varlen_lengths("actual_seq_qlen", actual_seq_qlen, query.shape[0])
        kv_lens = _varlen_lengths("actual_seq_kvlen", actual_seq_kvlen, key.shape[0])
        if len(kv_lens) != len(q_lens):
            raise OpArgumentError(f"actual_seq_qlen has {len(q_lens)} values and actual_seq_kvlen {len(kv_lens)}; "
                                  "TND needs one per batch in both", argument="actual_seq_qlen")
    else:
        layout = "BSH" if input_layout == "SBH" else input_layout
        q, k, v = (t.transpose(0, 1) for t in (query, key, value)) if input_layout == "SBH" else (query, key, value)
        geo = _geometry(q, k, v, layout, head_num, kv_heads, None, 0, None)
        q_lens, kv_lens = [geo.q_len] * geo.batch, [geo.kv_len] * geo.batch
    if geo.value_dim > geo.head_dim:
        raise OpArgumentError(
            f"value head dim {geo.value_dim} exceeds the key's {geo.head_dim} (the page needs Dk >= Dv)",
            argument="value"
        )
    mode = call.sparse_mode if atten_mask is not None else MASK_ONLY  # without a mask: full attention (the page)
    _fa_check_mask(atten_mask, mode, geo, q_lens, kv_lens)
    return _Setup(geo, q_lens, kv_lens, float(call.scale), mode, call.pre_tockens, call.next_tockens)


def _fa_stats_shape(setup: _Setup, query: torch.Tensor) -> list[int]:
    if setup.geo.layout == "TND":
        return [query.shape[0], setup.geo.heads, FA_STAT_COPIES]
    return [setup.geo.batch, setup.geo.heads, setup.geo.q_len, FA_STAT_COPIES]


def _fa_out_shape(setup: _Setup, input_layout: str) -> list[int]:
    shape = setup.geo.out_shape()
    return [shape[1], shape[0], shape[2]] if input_layout == "SBH" else shape


def _fa_numels(setup: _Setup) -> int:
    """How many elements the dropout mask covers: ``B x N x Sq x Skv``, or with TND ``N x sum(Sq_i x Skv_i)``
    (op-plugin FlashAttentionKernelNpuOpApi.cpp, dropout_gen_mask and its TND sum)."""
    geo = setup.geo
    if geo.layout == "TND":
        return geo.heads * sum(q * kv for q, kv in zip(setup.q_lens, setup.kv_lens))
    return geo.batch * geo.heads * geo.q_len * geo.kv_len


def _fa_random_outputs(call: Arguments, setup: _Setup) -> tuple[int, int, int]:
    """The seed, offset and numels npu_fusion_attention returns: those of its dropout mask, or 0, 0, 0
    without dropout (``keep_prob=1``, the op-plugin meta function's values)."""
    if call.keep_prob == 1:
        return 0, 0, 0
    return call.seed, call.offset, _fa_numels(setup)


def _fa_check_dropout_mask(call: Arguments, setup: _Setup) -> None:
    """A given dropout_mask is the packed uint8 bit mask ``_npu_dropout_gen_mask`` makes, one bit per element."""
    mask = call.dropout_mask
    if mask is None:
        return
    require_dtype("dropout_mask", mask, (torch.uint8,))
    needed = -(-_fa_numels(setup) // 8)
    if mask.dim() != 1 or mask.shape[0] < needed:
        raise OpArgumentError(
            f"dropout_mask has shape {list(mask.shape)}; it must be 1-D with at least {needed} bytes, one bit per "
            f"element of the [B, N, Sq, Skv] scores (make it with torch_npu._npu_dropout_gen_mask)",
            argument="dropout_mask",
        )


def _dropout_multipliers(keep: torch.Tensor, setup: _Setup, keep_prob: float) -> torch.Tensor:
    """float32 [B, N, Sq, Skv]: ``1 / keep_prob`` where the mask keeps an element, 0 where it drops it. The
    mask's bits run over [B, N, Sq, Skv]; with TND over each batch's [N, Sq_i, Skv_i] in turn (op-plugin's
    test_npu_flash_attention.py golden), placed at the top left of the padded batch."""
    geo = setup.geo
    if geo.layout != "TND":
        kept = keep.reshape(geo.batch, geo.heads, geo.q_len, geo.kv_len)
    else:
        kept = keep.new_zeros(len(setup.q_lens), geo.heads, max(setup.q_lens, default=0),
                              max(setup.kv_lens, default=0))
        start = 0
        for b, (q_len, kv_len) in enumerate(zip(setup.q_lens, setup.kv_lens)):
            count = geo.heads * q_len * kv_len
            kept[b, :, :q_len, :kv_len] = keep[start : start + count].reshape(geo.heads, q_len, kv_len)
            start += count
    return kept.to(torch.float32) * (1.0 / keep_prob)


def _fa_dropout(call: Arguments, setup: _Setup) -> Optional[torch.Tensor]:
    """The forward's dropout multipliers (:func:`_dropout_multipliers`), None without dropout: from the given
    ``dropout_mask``, else drawn from ``seed`` and ``offset`` as ``_npu_dropout_gen_mask`` draws them."""
    if call.keep_prob == 1:
        return None
    numels = _fa_numels(setup)
    if call.dropout_mask is not None:
        keep = unpack_bits(call.dropout_mask, numels)
    else:
        keep = keep_bits(numels, 1 - call.keep_prob, call.seed, call.offset)[:numels]
    return _dropout_multipliers(keep, setup, call.keep_prob)


def _fa_meta(call: Arguments) -> tuple:
    setup, query = _fa_call(call), call.query
    _fa_check_dropout_mask(call, setup)
    stats = Out(_fa_stats_shape(setup, query), torch.float32)
    return (Out(_fa_out_shape(setup, call.input_layout), query.dtype), stats, stats, Out([0], query.dtype),
            *_fa_random_outputs(call, setup))


def _fa_stat(values: torch.Tensor, setup: _Setup, query: torch.Tensor, softmax_layout: str) -> torch.Tensor:
    """A [B, N, Sq, 1] statistic in the meta shape, repeated over the last dim of 8. With TND input the
    meta shape is [T, N, 8]; the page fills it in N, T order by default and in T, N order with
    ``softmax_layout="TND"``."""
    if setup.geo.layout != "TND":
        return values.expand(*values.shape[:-1], FA_STAT_COPIES).contiguous()
    tnd = _bnsd_to_layout(values, "TND", setup.q_lens, query.shape[0])
    tnd = tnd.expand(*tnd.shape[:-1], FA_STAT_COPIES)
    return tnd.contiguous() if softmax_layout == "TND" else tnd.transpose(0, 1).contiguous().view(tnd.shape)


def _fa_kernel(call: Arguments) -> tuple:
    setup = _fa_call(call)
    query, key, value = call.query, call.key, call.value
    sbh = call.input_layout == "SBH"
    if sbh:
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    out, stats = _run(setup, query, key, value, call.atten_mask, None, None, None,
                      dropout=_fa_dropout(call, setup))
    if sbh:
        out = out.transpose(0, 1).contiguous()
    layout = call.softmax_layout
    return (out, _fa_stat(stats.max, setup, query, layout), _fa_stat(stats.sum, setup, query, layout),
            query.new_zeros(0), *_fa_random_outputs(call, setup))


def _attention_grad(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float,
                    dout: torch.Tensor,
                    dropout: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`_attention` (no dequant) for the output gradient ``dout`` [B, N, Sq, Dv], in
    float32 BNSD: the probabilities are recomputed from q and k, as FlashAttentionScoreGrad does, then
    ``dV = P^T dO``, ``dS = P * (dO V^T - rowsum(dO * O))``, ``dQ = scale dS K`` and ``dK = scale dS^T Q``,
    the query heads of one KV head summed into its dK and dV (GQA). With a dropout's multipliers ``M``
    [B, N, Sq, Skv] the dropped probabilities ``P * M`` give dV and ``dP = (dO V^T) * M`` enters dS
    (op-plugin test_npu_flash_attention.py, tbackward)."""
    batch, heads, q_len, dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    grouped = q.reshape(batch, kv_heads, group * q_len, dim)
    scores = cube_matmul(grouped, k.transpose(-1, -2)).reshape(batch, kv_heads, group, q_len, -1) * scale
    visible = visible.reshape(visible.shape[0], kv_heads, group, q_len, -1) if visible.shape[1] == heads else (
        visible.unsqueeze(2))
    scores = scores.masked_fill(~visible, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    exps = torch.exp(scores - torch.where(row_max > float("-inf"), row_max, 0.0))
    denom = pairwise_sum(exps, dim=-1, keepdim=True)
    probs = (exps / torch.where(denom > 0, denom, 1.0)).reshape(batch, kv_heads, group * q_len, -1)
    grads = dout.reshape(batch, kv_heads, group * q_len, -1)
    multipliers = None if dropout is None else dropout.reshape(batch, kv_heads, group * q_len, -1)
    dropped = probs if multipliers is None else probs * multipliers
    dv = cube_matmul(dropped.transpose(-1, -2), grads)
    dprobs = cube_matmul(grads, v.transpose(-1, -2))
    if multipliers is not None:
        dprobs = dprobs * multipliers
    dscores = probs * (dprobs - pairwise_sum(dprobs * probs, dim=-1, keepdim=True)) * scale
    dq = cube_matmul(dscores, k).reshape(batch, heads, q_len, dim)
    dk = cube_matmul(dscores.transpose(-1, -2), grouped)
    return dq, dk, dv


def _fa_forward_call(call: Arguments) -> Arguments:
    """The forward's record of the call a grad op's arguments describe (``scale_value`` is its ``scale``)."""
    return bind(
        npu_fusion_attention, call.query, call.key, call.value, call.head_num, call.input_layout,
        atten_mask=call.atten_mask, scale=call.scale_value, keep_prob=call.keep_prob, pre_tockens=call.pre_tockens,
        next_tockens=call.next_tockens, actual_seq_qlen=call.actual_seq_qlen, actual_seq_kvlen=call.actual_seq_kvlen,
        sparse_mode=call.sparse_mode,
    )


def _fa_grad_meta(call: Arguments) -> tuple:
    query, key, value, dy = call.query, call.key, call.value, call.dy
    setup = _fa_call(_fa_forward_call(call))
    require_dtype("dy", dy, (query.dtype,), "(query's dtype)")
    require_shape("dy", dy, (tuple(_fa_out_shape(setup, call.input_layout)),))
    return (
        Out(list(query.shape), query.dtype), Out(list(key.shape), key.dtype), Out(list(value.shape), value.dtype),
        Out([0], query.dtype),
    )


def _fa_grad_dropout(call: Arguments, setup: _Setup) -> Optional[torch.Tensor]:
    """The forward's dropout multipliers, drawn again from the seed, offset and numels it returned (op-plugin
    npu_fusion_attention_grad regenerates its mask so; it takes no mask)."""
    if call.keep_prob == 1:
        return None
    if call.numels != _fa_numels(setup):
        raise OpArgumentError(
            f"numels={call.numels} is not the forward's mask length {_fa_numels(setup)}: pass the seed, offset and "
            "numels npu_fusion_attention returned", argument="numels",
        )
    keep = keep_bits(call.numels, 1 - call.keep_prob, call.seed, call.offset)[: call.numels]
    return _dropout_multipliers(keep, setup, call.keep_prob)


def _fa_grad_kernel(call: Arguments) -> tuple:
    query, key, value, dy = call.query, call.key, call.value, call.dy
    setup = _fa_call(_fa_forward_call(call))
    sbh = call.input_layout == "SBH"
    if sbh:
        query, key, value, dy = (t.transpose(0, 1) for t in (query, key, value, dy))
    geo = setup.geo
    if call.atten_mask is not None and setup.sparse_mode in CAUSAL_MODES:
        _require_causal_mask(call.atten_mask)
    q, k = _q_to_bnsd(query, geo, setup.q_lens).float(), _kv_to_bnsd(key, geo, None, setup.kv_lens).float()
    v, dout = _kv_to_bnsd(value, geo, None, setup.kv_lens).float(), _q_to_bnsd(dy, geo, setup.q_lens).float()
    visible = _visible(setup.q_lens, setup.kv_lens, q.shape[2], k.shape[2], call.atten_mask, setup.sparse_mode,
                       setup.pre_tokens, setup.next_tokens)
    dq, dk, dv = _attention_grad(q, k, v, visible, setup.scale, dout, _fa_grad_dropout(call, setup))
    grads = (
        _bnsd_to_layout(dq, geo.layout, setup.q_lens, query.shape[0]).to(query.dtype),
        _bnsd_to_layout(dk, geo.layout, setup.kv_lens, key.shape[0]).to(key.dtype),
        _bnsd_to_layout(dv, geo.layout, setup.kv_lens, value.shape[0]).to(value.dtype),
    )
    if sbh:
        grads = tuple(grad.transpose(0, 1).contiguous() for grad in grads)
    return (*grads, query.new_zeros(0))


def _fa_samples() -> list[SampleCall]:
    """Training attention in BSND with GQA, causal BNSD through the 2048 x 2048 mask (sparse_mode 2), BSND
    with a dropout drawn from a seed, and causal TND with a dropout from a given mask."""
    q, kv = _sample_bnsd(2, 8, 4, 8, seed=0).float(), _sample_bnsd(2, 8, 2, 8, seed=1).float()
    heads = _sample_bnsd(1, 2, 16, 8, seed=2)
    tokens = _sample_bnsd(9, 2, 8, seed=3)
    tnd_mask = torch.ops.npu._npu_dropout_gen_mask(tokens, [2 * (3 * 3 + 6 * 6)], 0.25, 4, 1)
    return [
        SampleCall((q, kv, kv.flip(0), 4, "BSND"), {"scale": 0.35}),
        SampleCall((heads, heads, heads, 2, "BNSD"), {"atten_mask": _sample_causal_mask(), "scale": 0.35,
                                                      "sparse_mode": 2}),
        SampleCall((q, kv, kv.flip(0), 4, "BSND"), {"scale": 0.35, "keep_prob": 0.75, "seed": 3, "offset": 2}),
        SampleCall((tokens, tokens, tokens, 2, "TND"), {
            "atten_mask": _sample_causal_mask(), "scale": 0.35, "sparse_mode": 3, "actual_seq_qlen": [3, 9],
            "actual_seq_kvlen": [3, 9], "keep_prob": 0.75, "dropout_mask": tnd_mask, "seed": 4, "offset": 1}),
    ]


def _fa_grad_sample(forward: SampleCall) -> SampleCall:
    """The backward of one :func:`_fa_samples` call, with its forward's statistics, as autograd calls it."""
    query, key, value, head_num, layout = forward.args
    out, softmax_max, softmax_sum, _, seed, offset, numels = torch.ops.npu.npu_fusion_attention(
        *forward.args, **forward.kwargs)
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(9)).to(out.dtype)
    kwargs = {"atten_mask": forward.kwargs.get("atten_mask"), "softmax_max": softmax_max, "softmax_sum": softmax_sum,
              "attention_in": out, "scale_value": forward.kwargs["scale"],
              "sparse_mode": forward.kwargs.get("sparse_mode", 0), "keep_prob": forward.kwargs.get("keep_prob", 1.0),
              "seed": seed, "offset": offset, "numels": numels,
              "actual_seq_qlen": forward.kwargs.get("actual_seq_qlen"),
              "actual_seq_kvlen": forward.kwargs.get("actual_seq_kvlen")}
    return SampleCall((query, key, value, dy, head_num, layout), kwargs)


@npu_op(
    meta=_fa_grad_meta,
    kernel=_fa_grad_kernel,
    unmodeled=("pse", "padding_mask", "prefix", "sink"),
    samples=lambda: [_fa_grad_sample(sample) for sample in _fa_samples()],
)
def npu_fusion_attention_grad(call: Arguments) -> None:
    """FlashAttentionScoreGrad: the gradients ``(dq, dk, dv, dpse)`` of :func:`npu_fusion_attention` from
    the output's gradient ``dy``, in the forward's layouts, masks and sparse modes. The probabilities are
    recomputed from query and key, as the kernel does (``softmax_max`` / ``softmax_sum`` /
    ``attention_in`` carry no information the recomputation lacks). ``dpse`` is empty: pse is not
    modeled, as in the forward. With ``keep_prob < 1`` the dropout mask is drawn again from ``seed``,
    ``offset`` and ``numels`` (the forward's last three outputs), as the op does; it takes no mask."""
    _check_keep_prob(call.keep_prob)


def _fa_setup(ctx: object, call: Arguments, output: tuple) -> None:
    ctx.save_for_backward(call.query, call.key, call.value, call.atten_mask, *output[:3])
    ctx.call, ctx.random = call, output[4:7]


def _fa_backward(ctx: object, dy: torch.Tensor, *_unused: Any) -> tuple:
    """op-plugin's formula: only attention_out's gradient flows back (the statistics are intermediates)."""
    query, key, value, mask, out, softmax_max, softmax_sum = ctx.saved_tensors
    call = ctx.call
    seed, offset, numels = ctx.random
    dq, dk, dv, _ = torch.ops.npu.npu_fusion_attention_grad(
        query, key, value, dy, call.head_num, call.input_layout, atten_mask=mask, softmax_max=softmax_max,
        softmax_sum=softmax_sum, attention_in=out, scale_value=call.scale, keep_prob=call.keep_prob,
        seed=seed, offset=offset, numels=numels, pre_tockens=call.pre_tockens,
        next_tockens=call.next_tockens, actual_seq_qlen=call.actual_seq_qlen, actual_seq_kvlen=call.actual_seq_kvlen,
        sparse_mode=call.sparse_mode,
    )
    return (dq, dk, dv, *([None] * (len(vars(call)) - 3)))


@npu_op(
    meta=_fa_meta,
    kernel=_fa_kernel,
    derivative=Derivative(_fa_setup, _fa_backward),
    unmodeled=FA_UNMODELED,
    samples=_fa_samples,
)
def npu_fusion_attention(call: Arguments) -> None:
    """FlashAttentionScore: ``softmax(mask(scale * q k^T)) v``; returns torch_npu's seven outputs
    ``(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)``.

    Source: torch_npu.npu_fusion_attention (op-plugin API page: formula, layouts, sparse modes, varlen
    rules; op-plugin meta function: output shapes). The computation is this module's (see its docstring).

    * Layouts BSH ``[B, S, N*D]``, SBH ``[S, B, N*D]``, BSND, BNSD, and TND ``[T, N, D]`` with
      ``actual_seq_qlen`` / ``actual_seq_kvlen`` as **cumulative** token ends per batch (trailing zeros are
      batches that take no part, as the page allows; query rows after the last end output 0). The KV head
      count comes from key's shape (``N_kv`` must divide ``head_num``: GQA); value may have a smaller head
      dim than key. float16, bfloat16 and float32.
    * ``atten_mask`` (bool/uint8, 1 = masked): modes 0/1 take BNSS, B1SS, 11SS or SS (TND: ``[max Sq,
      max Skv]``); mode 0 also applies the band ``-pre_tockens <= j - i <= next_tockens``; modes 2/3 are
      causal from the top left / bottom right of each batch and mode 4 is the band between pre_tockens and
      next_tockens from the bottom right; 2-4 take the compressed ``triu(ones(2048, 2048), 1)``. Without a mask the page says mode and band have no effect: full
      attention.
    * ``softmax_max`` / ``softmax_sum``: float32 ``[B, N, Sq, 8]`` (TND ``[T, N, 8]``), the row max of the
      scaled scores and the sum of ``exp(score - max)``, repeated over the last dim (the meta shape; the
      page calls them intermediates for the backward pass). With TND input the values are in N, T order
      by default and in T, N order with ``softmax_layout="TND"`` (the page's softmax_layout).
      ``softmax_out`` is reserved: empty ``[0]``.
      Without dropout there is no random mask, so seed, offset and numels are 0.

    * Dropout (``keep_prob < 1``): ``softmax(...) * M / keep_prob`` multiplies ``v``, M the keep mask over
      the [B, N, Sq, Skv] scores (TND: each batch's [N, Sq_i, Skv_i] in turn): the given ``dropout_mask``
      (packed bits, as ``_npu_dropout_gen_mask`` makes it), else drawn from ``seed`` and ``offset`` as
      ``_npu_dropout_gen_mask(..., p=1 - keep_prob, seed, offset)`` draws it. The statistics are those
      of the undropped softmax. The last three outputs are then ``seed``, ``offset`` and the mask's
      element count ``numels``, from which the backward draws the same mask again. The page's seed 0
      ("the default seed") is seed 0 of the CPU model's generator, so equal seeds and offsets drop the
      same elements: pass another ``seed`` or ``offset`` per step to vary them (the NPU advances its
      Philox offset per call). The bits are not the NPU's Philox bits.

    Refused with the argument's name: pse, prefix, sink, sparse modes 5-8, ``keep_prob`` outside (0, 1].
    ``padding_mask`` is not supported by the page either.
    """
    _check_keep_prob(call.keep_prob)
    _check_attention_scalars(call.head_num, 0, call.sparse_mode, call.inner_precise, call.pre_tockens,
                             call.next_tockens, 0)
    if call.input_layout not in FA_LAYOUTS:
        raise OpArgumentError(
            f"input_layout={call.input_layout!r} is not implemented; expected one of {', '.join(FA_LAYOUTS)}",
            argument="input_layout"
        )
    require_choice("softmax_layout", call.softmax_layout, ("", "TND") if call.input_layout == "TND" else ("",),
                   "the statistics' order, N then T by default or T then N with TND input")


# ---------------------------------------------------------------------------------------------
# npu_fused_infer_attention_score_v2: the fused op under its renamed keywords
# ---------------------------------------------------------------------------------------------

FIA_V2_LAYOUTS = FIA_LAYOUTS
FIA_V1 = frozenset(inspect.signature(npu_fused_infer_attention_score).parameters)  # what v2's keywords map onto
FIA_V2_RENAMED = {
    "num_query_heads": "num_heads", "softmax_scale": "scale", "actual_seq_qlen": "actual_seq_lengths",
    "actual_seq_kvlen": "actual_seq_lengths_kv", "return_softmax_lse": "softmax_lse_flag",
    # an int8 KV cache beside a float query: v1's separate antiquant factors and modes
    "dequant_scale_key": "key_antiquant_scale", "dequant_offset_key": "key_antiquant_offset",
    "dequant_scale_value": "value_antiquant_scale", "dequant_offset_value": "value_antiquant_offset",
    "key_quant_mode": "key_antiquant_mode", "value_quant_mode": "value_antiquant_mode",
}
FIA_V2_UNMODELED = (
    "pse_shift", "dequant_scale_key_rope", "quant_scale_out",
    "quant_offset_out", "quant_scale_p",
    "learnable_sink", "query_dtype", "key_dtype", "value_dtype", "query_rope_dtype", "key_rope_dtype",
    "key_shared_prefix_dtype", "value_shared_prefix_dtype", "dequant_scale_query_dtype", "dequant_scale_key_dtype",
    "dequant_scale_value_dtype", "dequant_scale_key_rope_dtype", "out_dtype",
)


PER_TOKEN_PER_HEAD = 3  # query_quant_mode: the only query mode the page lists


@dataclass(frozen=True)
class QuantScales:
    """v2's full quantisation of MLA attention (the page's "全量化场景"): int8 query, key and value with
    float16/bfloat16 rope parts and output, ``query_quant_mode=3`` (``dequant_scale_query`` per token and
    head: the query's layout with N in place of N x D, e.g. [B, S, N] for BSND, [T, N] for TND) and
    ``key_quant_mode=value_quant_mode=0`` (``dequant_scale_key`` / ``_value`` per tensor, one value), all
    float32. vllm-ascend's MLA decode with ``fa_quant`` calls it so (attention/mla_v1.py)."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor


def _quant_scales(call: Arguments, head_dim: int) -> QuantScales:
    """The scales of a fully quantised v2 call, checked against the query."""
    if call.key_quant_mode != 0 or call.value_quant_mode != 0:
        raise OpArgumentError(
            "query_quant_mode=3 takes key_quant_mode=0 and value_quant_mode=0 (per-tensor key and value)",
            argument="query_quant_mode")
    for name in ("dequant_offset_key", "dequant_offset_value"):
        if getattr(call, name) is not None:
            raise OpArgumentError(
                f"{name} is not implemented with query_quant_mode=3 (symmetric per-tensor scales)", argument=name
            )
    if call.return_softmax_lse:
        raise OpArgumentError(
            "return_softmax_lse is not supported with int8 query, key and value (the page's MLA limits)",
            argument="return_softmax_lse")
    scales = {name: getattr(call, f"dequant_scale_{name}") for name in ("query", "key", "value")}
    for name, scale in scales.items():
        if scale is None:
            raise OpArgumentError(
                f"query_quant_mode=3 needs dequant_scale_{name} (float32)", argument="query_quant_mode"
            )
        require_dtype(f"dequant_scale_{name}", scale, (torch.float32,))
    if scales["query"].numel() * head_dim != call.query.numel():
        raise OpArgumentError(
            f"dequant_scale_query has shape {list(scales['query'].shape)}; per token and head it has one value per "
            f"query row of {head_dim}, {call.query.numel() // head_dim} values", argument="dequant_scale_query")
    for name in ("key", "value"):
        if scales[name].numel() != 1:
            raise OpArgumentError(
                f"dequant_scale_{name} has {scales[name].numel()} values; key_quant_mode=0 here is per tensor (1)")
    return QuantScales(**scales)


def _as_v1(call: Arguments) -> tuple[Arguments, Optional[QuantScales]]:
    """A v2 call as the fused op's call (its keywords under v1's names), and the quant scales if any."""
    renamed = {FIA_V2_RENAMED.get(item.name, item.name): getattr(call, item.name) for item in fields(call)}
    v1 = bind(npu_fused_infer_attention_score, **{name: value for name, value in renamed.items() if name in FIA_V1})
    if call.query_quant_mode != PER_TOKEN_PER_HEAD:
        return v1, None
    return v1, _quant_scales(call, _fia_call(v1, quantised=True).geo.head_dim)


def _fia_v2_meta(call: Arguments) -> tuple[Out, Out]:
    v1, scales = _as_v1(call)
    if scales is None:
        return _fia_meta(v1)
    geo = _fia_call(v1, quantised=True).geo
    return Out(geo.out_shape(), call.query_rope.dtype), Out([0], torch.float32)


def _fia_v2_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    v1, scales = _as_v1(call)
    if scales is None:
        return _fia_kernel(v1)
    setup = _fia_call(v1, quantised=True)
    out, stats = _run(setup, call.query, call.key, call.value, call.atten_mask, call.block_table, call.query_rope,
                      call.key_rope, scales)
    return out, stats.sum.new_zeros(0)


def _fia_v2_samples() -> list[SampleCall]:
    """Causal varlen prefill in TND with the lse, and paged MLA decode with rope parts in BNSD_NBSD."""
    ends = [3, 8]
    q, kv = _sample_bnsd(8, 4, 8, seed=0), _sample_bnsd(8, 2, 8, seed=1)
    cache, _, table, lengths = _sample_paged_kv()
    latent = cache.reshape(7, 4, 1, 16).reshape(7, 4, 16)
    return [
        SampleCall((q, kv, kv), {"num_query_heads": 4, "num_key_value_heads": 2, "input_layout": "TND_NTD",
                                 "actual_seq_qlen": ends, "actual_seq_kvlen": ends, "sparse_mode": 3,
                                 "atten_mask": _sample_causal_mask(), "softmax_scale": 0.25,
                                 "return_softmax_lse": True}),
        SampleCall((_sample_bnsd(2, 2, 1, 16, seed=6), latent, latent),
                   {"query_rope": _sample_bnsd(2, 2, 1, 8, seed=7), "key_rope": _sample_bnsd(7, 4, 8, seed=8),
                    "num_query_heads": 2, "num_key_value_heads": 1, "input_layout": "BNSD_NBSD",
                    "softmax_scale": 0.1, "block_table": table, "block_size": 4, "actual_seq_kvlen": lengths}),
    ]


@npu_op(meta=_fia_v2_meta, kernel=_fia_v2_kernel, unmodeled=FIA_V2_UNMODELED, samples=_fia_v2_samples)
def npu_fused_infer_attention_score_v2(call: Arguments) -> None:
    """The fused inference attention of :func:`npu_fused_infer_attention_score` under v2's keywords; returns
    ``(attention_out, softmax_lse)``.

    Source: torch_npu.npu_fused_infer_attention_score_v2 (op-plugin API page: parameters, layouts, the
    softmax_lse definition; op-plugin meta function: output shapes). Renamed keywords: ``num_query_heads``
    (v1 ``num_heads``), ``softmax_scale`` (``scale``), ``actual_seq_qlen`` / ``actual_seq_kvlen``
    (``actual_seq_lengths`` / ``actual_seq_lengths_kv``: per-batch lengths, cumulative ends with TND),
    ``return_softmax_lse`` (``softmax_lse_flag``). The computation is v1's, with every v1 mode: paged KV
    through ``block_table``, MLA ``query_rope`` / ``key_rope``, sparse modes 0-4.

    Layouts: v1's, plus the page's output layouts NBSD (``BSH_NBSD``, ``BSND_NBSD``, ``BNSD_NBSD``: output
    ``[N, B, S, D]``) and NTD (``TND_NTD``: output ``[N, T, D]``). Paged caches may be FRACTAL_NZ blocks,
    ``[blocks, N_kv, D / 16, block_size, 16]`` (``/ 32`` and ``32`` for int8), with any layout but BNSD.

    Full quantisation (:class:`QuantScales`): int8 query, key and value with ``query_quant_mode=3`` and the
    three float32 ``dequant_scale_query`` / ``_key`` / ``_value``; the rope parts and the output are
    float16/bfloat16, and no lse is returned.

    Refused with the argument's name: the other quantised forms (dequant offsets, ``quant_*_out``,
    ``quant_scale_p``, non-zero key/value quant modes, the ``*_dtype`` codes), pse_shift, and
    ``learnable_sink`` (the page describes the sink as absorbing attention scores but gives no formula).
    """
    require_choice("query_quant_mode", call.query_quant_mode, (0, PER_TOKEN_PER_HEAD),
                   "0 (float query) or 3 (int8 per token and head; the page's full quantisation)")
    for name, mode in (("key_quant_mode", call.key_quant_mode), ("value_quant_mode", call.value_quant_mode)):
        require_choice(name, mode, tuple(ANTIQUANT_MODES), "the page's KV quant modes 0-5")
    if call.query_quant_mode == 0 and call.dequant_scale_query is not None:
        raise OpArgumentError(
            "dequant_scale_query is given but query_quant_mode=0: it goes with an int8 query (mode 3)",
            argument="dequant_scale_query")
    _check_attention_scalars(call.num_query_heads, call.num_key_value_heads, call.sparse_mode, call.inner_precise,
                             call.pre_tokens,
                             call.next_tokens, call.block_size)
    if call.input_layout not in FIA_V2_LAYOUTS:
        raise OpArgumentError(
            f"input_layout={call.input_layout!r} is not implemented; expected one of {', '.join(FIA_V2_LAYOUTS)}",
            argument="input_layout")


# ---------------------------------------------------------------------------------------------
# The ``.out`` forms and workspace queries of graph-capture code (vllm-ascend, sglang)
# ---------------------------------------------------------------------------------------------


def _out_form(op: Any) -> Any:
    """torch_npu's ``op.out(query, key, value, *, workspace=None, out=[attention_out, softmax_lse], ...)``.

    Graph-capture code preallocates both outputs and a workspace (op-plugin's ``.out`` schema writes
    ``Tensor(a!) attention_out, Tensor(b!) softmax_lse``). Here the op runs as usual and its results are
    copied into the given tensors: ``attention_out`` must have the op's output shape and dtype; the lse is
    written when the op returns one (with the lse flag; callers that do not ask pass a 1-element
    placeholder, left as given). ``workspace`` is device scratch and changes no value.
    """

    def out_form(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                 workspace: Optional[torch.Tensor] = None, out: Sequence[torch.Tensor], **options: Any) -> tuple[
        torch.Tensor, torch.Tensor
    ]:
        require_tensor("workspace", workspace, optional=True)
        attention_out, softmax_lse = require_tensor_list("out", out)
        result, lse = op(query, key, value, **options)
        for name, target, value_ in (("out[0]", attention_out, result), ("out[1]", softmax_lse, lse)):
            if value_.numel() == 0 and name == "out[1]":
                continue
            if tuple(target.shape) != tuple(value_.shape) or target.dtype != value_.dtype:
                raise OpArgumentError(f"{name} is {target.dtype} {list(target.shape)}; {op.__name__} writes "
                                      f"{value_.dtype} {list(value_.shape)} there", argument=name)
            target.copy_(value_)
        return attention_out, softmax_lse

    out_form.__name__ = out_form.__qualname__ = f"{op.__name__}.out"
    return out_form


npu_fused_infer_attention_score.out = _out_form(npu_fused_infer_attention_score)
npu_fused_infer_attention_score_v2.out = _out_form(npu_fused_infer_attention_score_v2)


def _workspace_query(op: Any) -> Any:
    """torch_npu's ``_<op>_get_max_workspace``: the device scratch the op's ``.out`` form needs for these
    arguments. The CPU kernels need none, so after the op's argument checks it returns an empty uint8
    tensor, which the ``.out`` form accepts and ignores."""

    def get_max_workspace(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **options: Any) -> torch.Tensor:
        check(op, query, key, value, **options)
        return query.new_empty(0, dtype=torch.uint8)

    get_max_workspace.__name__ = get_max_workspace.__qualname__ = f"_{op.__name__}_get_max_workspace"
    return get_max_workspace


_npu_fused_infer_attention_score_get_max_workspace = _workspace_query(npu_fused_infer_attention_score)
_npu_fused_infer_attention_score_v2_get_max_workspace = _workspace_query(npu_fused_infer_attention_score_v2)
