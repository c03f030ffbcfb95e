"""torch_npu's private ATB attention ops that vllm-ascend and sglang call: ``_npu_flash_attention``,
``_npu_flash_attention_unpad``, ``_npu_flash_attention_qlens``, ``_npu_paged_attention`` and the KV-cache
write ``_npu_reshape_and_cache``.

These are op-plugin's bindings of Ascend Transformer Boost operations (SelfAttentionOperation,
PagedAttentionOperation, ReshapeAndCacheOperation; op-plugin ``op_plugin/ops/atb/*.cpp`` sets their
parameters, ``test/test_custom_ops/test_atb_*.py`` holds op-plugin's reference computations). They take
token-major tensors ``[tokens, heads, head_dim]`` (or ``[tokens, heads x head_dim]``), per-sequence lengths
as int tensors (not cumulative), caches ``[blocks, block_size, kv_heads, head_dim]``, and write a caller's
``out`` tensor (or the caches) in place and return None. Here each is one functional op that returns the
new values; the public wrapper copies them into ``out`` / the caches and returns None (the registry's
``writes_back`` on an op declared ``-> ()``), so a traced graph has one opaque node per call.

The attention itself is :mod:`.attention`'s computation (fp32 Cube products, fixed-order softmax, one
rounding), on the variable-length token layout with per-sequence lengths.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional

import torch

from ..errors import OpArgumentError
from .attention import MASK_ONLY, NO_BAND, RIGHT_DOWN_CAUSAL, _geometry, _run, _Setup
from .checks import HALF_DTYPES, require_dtype, require_shape
from .memory import is_norm_cache, nz_runs, write_nz_rows, write_slots
from .registry import Arguments, Out, SampleCall, bind, check, npu_op

LENGTH_DTYPES = (torch.int32, torch.int64)


def _tokens(name: str, tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """The [tokens, heads, head_dim] view of a token-major tensor given 3-D or as [tokens, heads x head_dim]."""
    if tensor.dim() == 3 and tensor.shape[1] == heads:
        return tensor
    if tensor.dim() == 2 and tensor.shape[1] % heads == 0:
        return tensor.reshape(tensor.shape[0], heads, tensor.shape[1] // heads)
    raise OpArgumentError(f"{name} has shape {list(tensor.shape)}; expected [tokens, {heads}, head_dim] or "
                          f"[tokens, {heads} x head_dim]", argument=name)


def _blocks(name: str, cache: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """The [blocks, block_size, kv_heads x head_dim] view of a [blocks, block_size, kv_heads, head_dim] cache."""
    if cache.dim() == 4 and cache.shape[2] == kv_heads:
        return cache.reshape(cache.shape[0], cache.shape[1], -1)
    if cache.dim() == 3 and cache.shape[2] % kv_heads == 0:
        return cache
    raise OpArgumentError(
        f"{name} has shape {list(cache.shape)}; expected [blocks, block_size, {kv_heads}, head_dim]", argument=name
    )


def _check_lengths(name: str, lengths: torch.Tensor, batch: Optional[int] = None) -> None:
    require_dtype(name, lengths, LENGTH_DTYPES)
    if lengths.dim() != 1 or (batch is not None and lengths.shape[0] != batch):
        expected = f"[{batch}]" if batch is not None else "1-D [batch]"
        raise OpArgumentError(
            f"{name} has shape {list(lengths.shape)}; expected {expected} (one length per sequence)", argument=name
        )


def _check_heads(num_heads: int, num_kv_heads: int) -> None:
    if num_heads < 1 or num_kv_heads < 1 or num_heads % num_kv_heads:
        raise OpArgumentError(
            f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads} (GQA groups)", argument="num_kv_heads"
        )


def _check_out(out: torch.Tensor, query: torch.Tensor, tokens: int, heads: int, value_dim: int) -> Out:
    require_dtype("out", out, (query.dtype,), "(query's dtype)")
    if out.numel() != tokens * heads * value_dim:
        raise OpArgumentError(f"out has shape {list(out.shape)}; it must hold [{tokens}, {heads}, {value_dim}] "
                              "(tokens, heads, value head dim)", argument="out")
    return Out(list(out.shape), out.dtype)


def _attend(call: Arguments, batch: int, q_lens: Optional[list[int]] = None,
            kv_lens: Optional[list[int]] = None, mode: int = MASK_ONLY,
            mask: Optional[torch.Tensor] = None) -> tuple[Optional[torch.Tensor], Any]:
    """One call's attention from its record (``key``/``value``, or ``key_cache``/``value_cache`` with
    ``block_table``): validates from metadata, and with lengths also computes [tokens, heads, value_dim]."""
    query, table = call.query, getattr(call, "block_table", None)
    heads, kv_heads = call.num_heads, call.num_kv_heads
    require_dtype("query", query, HALF_DTYPES)
    q = _tokens("query", query, heads)
    if table is None:
        k, v, block_size = _tokens("key", call.key, kv_heads), _tokens("value", call.value, kv_heads), 0
    else:
        k = _blocks("key_cache", call.key_cache, kv_heads)
        v = _blocks("value_cache", call.value_cache, kv_heads)
        block_size = k.shape[1]
    for name, tensor in (("key", k), ("value", v)):
        require_dtype(name, tensor, (query.dtype,), "(query's dtype)")
    ends = list(itertools.accumulate(q_lens)) if q_lens is not None else [0] * batch
    geo = _geometry(q, k, v, "TND", heads, kv_heads, table, block_size, ends)
    if q_lens is None:
        return None, geo
    if sum(q_lens) > q.shape[0] or (table is None and sum(kv_lens) > k.shape[0]):
        raise OpArgumentError(f"the sequence lengths {q_lens} / {kv_lens} add up to more tokens than query "
                              f"({q.shape[0]}) or key ({k.shape[0]}) holds")
    if table is not None and max(kv_lens, default=0) > geo.kv_len:
        raise OpArgumentError(f"context lengths {kv_lens} exceed the {geo.kv_len} tokens block_table addresses")
    if mask is not None:
        mask = mask.reshape(mask.shape[-2:])[: max(q_lens, default=0), : max(kv_lens, default=0)]
    setup = _Setup(geo, q_lens, kv_lens, float(call.scale_value), mode, NO_BAND, NO_BAND)
    out = _run(setup, q, k, v, mask, table, None, None)[0]
    return out.reshape(call.out.shape), geo


def _lengths(tensor: torch.Tensor) -> list[int]:
    values = [int(v) for v in tensor.tolist()]
    if any(v < 0 for v in values):
        raise OpArgumentError(f"sequence lengths {values} must be >= 0")
    return values


# ---------------------------------------------------------------------------------------------
# _npu_flash_attention / _npu_flash_attention_unpad (SelfAttentionOperation, PA_ENCODER)
# ---------------------------------------------------------------------------------------------


def _check_mask_table(mask: torch.Tensor) -> None:
    require_dtype("mask", mask, (torch.float16, torch.bfloat16, torch.float32, torch.bool))
    if mask.dim() not in (2, 3) or (mask.dim() == 3 and mask.shape[0] != 1) or mask.shape[-1] != mask.shape[-2]:
        raise OpArgumentError(
            f"mask has shape {list(mask.shape)}; expected [max_seq, max_seq] or [1, max_seq, max_seq]", argument="mask"
        )


def _encoder_meta(call: Arguments) -> Out:
    query, seq_len, mask = call.query, call.seq_len, getattr(call, "mask", None)
    _check_lengths("seq_len", seq_len)
    if mask is not None:
        _check_mask_table(mask)
    _, geo = _attend(call, seq_len.shape[0])
    return _check_out(call.out, query, query.shape[0], geo.heads, geo.value_dim)


def _encoder_kernel(call: Arguments) -> torch.Tensor:
    lengths, mask = _lengths(call.seq_len), getattr(call, "mask", None)
    if mask is not None and mask.shape[-1] < max(lengths, default=0):
        raise OpArgumentError(
            f"mask is {list(mask.shape)}; it must cover the longest sequence ({max(lengths)})", argument="mask"
        )
    return _attend(call, len(lengths), lengths, lengths, mask=mask)[0]


def _atb_sample(*shape: int, seed: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _flash_attention_samples() -> list[SampleCall]:
    """Two packed sequences (3 and 5 tokens) of 4 query and 2 KV heads under the additive causal mask."""
    q, k, v = _atb_sample(8, 4, 16, seed=0), _atb_sample(8, 2, 16, seed=1), _atb_sample(8, 2, 16, seed=2)
    mask = torch.triu(torch.ones(8, 8), 1).half() * -10000.0
    return [SampleCall((q, k, v, mask, torch.tensor([3, 5], dtype=torch.int32), 0.25, 4, 2, torch.empty_like(q)))]


@npu_op(meta=_encoder_meta, kernel=_encoder_kernel, writes_back={"out": 0}, samples=_flash_attention_samples)
def _npu_flash_attention(call: Arguments) -> None:
    """Masked self-attention of packed variable-length sequences (prefill without cache); writes ``out``.

    Source: op-plugin ``op_plugin/ops/atb/SelfAttentionAtb.cpp`` (ATB SelfAttentionOperation, calc type
    PA_ENCODER, mask type NORM, BSND layout, ``qkScale = scale_value``) and op-plugin's reference in
    ``test/test_custom_ops/test_atb_flash_attention.py``.

    * ``query`` ``[T, num_heads, D]`` (or ``[T, num_heads x D]``), ``key`` / ``value`` ``[T, num_kv_heads, D|Dv]``
      float16/bfloat16; ``seq_len`` int ``[B]``: sequence b is the next ``seq_len[b]`` tokens of query, key
      and value (GQA: query head h reads KV head ``h // (num_heads / num_kv_heads)``).
    * ``mask`` ``[max_seq, max_seq]`` (or ``[1, max_seq, max_seq]``): sequence b uses its top-left
      ``[seq_len[b], seq_len[b]]`` corner; a nonzero entry means "do not attend". The reference adds
      -10000 / -inf there (fp16 callers), vllm-ascend's bfloat16 masks hold 1; both mark masked positions,
      and exp(-10000) is exactly 0 in float32, so the two readings agree. A general additive bias is not
      modeled.
    * ``out`` (query's dtype, T x num_heads x Dv elements) receives ``softmax(scale_value * q k^T) v``;
      rows after the last sequence get 0. Returns None.
    """
    _check_heads(call.num_heads, call.num_kv_heads)


def _flash_attention_unpad_samples() -> list[SampleCall]:
    """Two packed sequences (2 and 4 tokens) of 2 heads of 8, as [tokens, heads * dim]."""
    q, k, v = (_atb_sample(6, 16, seed=seed, dtype=torch.bfloat16) for seed in range(3))
    return [SampleCall((q, k, v, torch.tensor([2, 4]), 0.3, 2, 2, torch.zeros_like(q)))]


@npu_op(meta=_encoder_meta, kernel=_encoder_kernel, writes_back={"out": 0}, samples=_flash_attention_unpad_samples)
def _npu_flash_attention_unpad(call: Arguments) -> None:
    """Unmasked self-attention of packed variable-length sequences (vision encoders); writes ``out``.

    Source: op-plugin ``op_plugin/ops/atb/SelfAttentionUnpadAtb.cpp`` (ATB SelfAttentionOperation, calc type
    PA_ENCODER, mask type UNDEFINED: no mask) and ``test/test_custom_ops/test_atb_flash_attention_unpad.py``.
    :func:`_npu_flash_attention` without a mask: every token of sequence b attends to every token of b.
    Returns None.
    """
    _check_heads(call.num_heads, call.num_kv_heads)


# ---------------------------------------------------------------------------------------------
# _npu_flash_attention_qlens (SelfAttentionOperation, PREFIX_ENCODER) and _npu_paged_attention
# ---------------------------------------------------------------------------------------------


def _require_compressed_causal(mask: torch.Tensor) -> None:
    """MASK_TYPE_NORM_COMPRESS with isTriuMask: the mask is an upper-triangular marker (nonzero above the
    diagonal), e.g. op-plugin's ``triu(ones(128, 128), 1)``; causality itself comes from the mode."""
    size = mask.shape[-1]
    expected = torch.ones(size, size, dtype=torch.bool).triu(diagonal=1)
    if mask.dim() not in (2, 3) or not torch.equal(mask.reshape(-1, size, size)[0] != 0, expected):
        raise OpArgumentError("mask must be the compressed causal mask: nonzero exactly above the diagonal, "
                              "e.g. torch.triu(torch.ones(128, 128), diagonal=1) in query's dtype", argument="mask")


def _qlens_meta(call: Arguments) -> Out:
    query, seq_len = call.query, call.seq_len
    _check_lengths("seq_len", seq_len)
    _check_lengths("context_lens", call.context_lens, seq_len.shape[0])
    _check_mask_table(call.mask)
    _, geo = _attend(call, seq_len.shape[0])
    return _check_out(call.out, query, query.shape[0], geo.heads, geo.value_dim)


def _qlens_kernel(call: Arguments) -> torch.Tensor:
    _require_compressed_causal(call.mask)
    q_lens, kv_lens = _lengths(call.seq_len), _lengths(call.context_lens)
    if any(q > kv for q, kv in zip(q_lens, kv_lens)):
        raise OpArgumentError(
            f"seq_len={q_lens} (new tokens) must not exceed context_lens={kv_lens} (all tokens)", argument="seq_len"
        )
    return _attend(call, len(q_lens), q_lens, kv_lens, mode=RIGHT_DOWN_CAUSAL)[0]


def _sample_caches(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Key and value caches of 8 blocks of 4 slots for 1 KV head of 16, and two sequences' block tables."""
    key_cache, value_cache = (_atb_sample(8, 4, 1, 16, seed=seed, dtype=dtype) for seed in (3, 4))
    return key_cache, value_cache, torch.tensor([[3, 0, 5], [1, 7, 2]], dtype=torch.int32)


def _qlens_samples() -> list[SampleCall]:
    """The last 2 and 3 tokens of cached sequences of 6 and 9 attend causally, 4 query heads on 1 KV head."""
    key_cache, value_cache, table = _sample_caches(torch.bfloat16)
    q = _atb_sample(5, 4, 16, seed=5, dtype=torch.bfloat16)
    mask = torch.triu(torch.ones(128, 128), 1).bfloat16()
    return [SampleCall((q, key_cache, value_cache, table, mask, torch.tensor([2, 3]), torch.tensor([6, 9]), 1, 4, 0.2,
                        torch.empty_like(q)))]


@npu_op(meta=_qlens_meta, kernel=_qlens_kernel, writes_back={"out": 0}, samples=_qlens_samples)
def _npu_flash_attention_qlens(call: Arguments) -> None:
    """Causal attention of new tokens over a paged KV cache that already holds them and their prefix
    (prefill with a cache hit, chunked prefill); writes ``out``.

    Source: op-plugin ``op_plugin/ops/atb/SelfAttentionQlensAtb.cpp`` (ATB SelfAttentionOperation, calc type
    PREFIX_ENCODER, mask type NORM_COMPRESS with ``isTriuMask``) and op-plugin's reference in
    ``test/test_custom_ops/test_atb_flash_attention_qlens.py``.

    * ``query`` ``[T, num_heads, D]`` or ``[T, num_heads x D]``: sequence b's ``seq_len[b]`` new tokens, packed.
    * ``key_cache`` / ``value_cache`` ``[blocks, block_size, num_kv_heads, D|Dv]``; ``block_table`` int32
      ``[B, max blocks]``; ``context_lens[b]`` is sequence b's whole length (prefix plus new tokens), read
      through its blocks in table order.
    * New token i of sequence b sits at position ``context_lens[b] - seq_len[b] + i`` and attends to the
      cache positions up to it (the reference's mask rows ``[context - q, context)``). ``mask`` is the
      compressed causal marker (nonzero exactly above the diagonal, checked).
    * ``out`` receives ``[T, num_heads, Dv]`` in query's dtype (any shape with that many elements). Returns None.
    """
    _check_heads(call.num_heads, call.num_kv_heads)


def _paged_meta(call: Arguments) -> Out:
    query, context_lens = call.query, call.context_lens
    _check_lengths("context_lens", context_lens, _tokens("query", query, call.num_heads).shape[0])
    _, geo = _attend(call, context_lens.shape[0])
    return _check_out(call.out, query, context_lens.shape[0], geo.heads, geo.value_dim)


def _paged_kernel(call: Arguments) -> torch.Tensor:
    kv_lens = _lengths(call.context_lens)
    return _attend(call, len(kv_lens), [1] * len(kv_lens), kv_lens)[0]


def _paged_samples() -> list[SampleCall]:
    """One decode token per sequence (context 5 and 9), 4 query heads on 1 KV head."""
    key_cache, value_cache, table = _sample_caches(torch.float16)
    q = _atb_sample(2, 4, 16, seed=6)
    context = torch.tensor([5, 9], dtype=torch.int32)
    return [SampleCall((q, key_cache, value_cache, 1, 4, 0.35, table, context, torch.empty_like(q)))]


@npu_op(meta=_paged_meta, kernel=_paged_kernel, writes_back={"out": 0}, samples=_paged_samples)
def _npu_paged_attention(call: Arguments) -> None:
    """Decode attention over a paged KV cache, one query token per sequence; writes ``out``.

    Source: op-plugin ``op_plugin/ops/atb/PagedAttentionAtb.cpp`` (ATB PagedAttentionOperation: no mask,
    ``qkScale = scale_value``, BSND) and op-plugin's reference in ``test/test_custom_ops/test_atb_paged_attention.py``.

    * ``query`` ``[B, num_heads, D]`` (or ``[B, num_heads x D]``); ``key_cache`` / ``value_cache``
      ``[blocks, block_size, num_kv_heads, D|Dv]``; ``block_table`` int32 ``[B, max blocks]``;
      ``context_lens`` int ``[B]``: sequence b attends to its first ``context_lens[b]`` cached tokens.
    * ``out`` receives ``[B, num_heads, Dv]`` in query's dtype. ``workspace`` (a device scratch buffer from
      ``_npu_paged_attention_get_workspace``) does not change values and is ignored. Returns None.
    """
    _check_heads(call.num_heads, call.num_kv_heads)


# ---------------------------------------------------------------------------------------------
# _npu_reshape_and_cache (ReshapeAndCacheOperation)
# ---------------------------------------------------------------------------------------------


def _nz_caches(call: Arguments) -> bool:
    """Whether both caches are FRACTAL_NZ. ReshapeAndCachAtb.cpp picks ``K_CACHE_V_CACHE_NZ`` when both caches
    have the NZ format and ``K_CACHE_V_CACHE`` otherwise; here the format is read from the key cache's shape,
    ``[blocks, block_size, kv_heads, D]`` being ND and anything else NZ (checked in :func:`_cache_write_meta`)."""
    return not is_norm_cache(call.key, call.key_cache)


def _cache_write_meta(call: Arguments) -> tuple[Out, Out]:
    key, value, key_cache, value_cache = call.key, call.value, call.key_cache, call.value_cache
    require_dtype("slot_indices", call.slot_indices, LENGTH_DTYPES)
    nz = _nz_caches(call)
    for name, rows, cache in (("key", key, key_cache), ("value", value, value_cache)):
        require_dtype(f"{name}_cache", cache, (rows.dtype,), f"({name}'s dtype)")
        if rows.dim() != 3:
            raise OpArgumentError(
                f"{name} has shape {list(rows.shape)}; expected [tokens, kv_heads, head_dim]", argument=name
            )
        if nz:
            nz_runs(name, rows, cache)
        elif not is_norm_cache(rows, cache):
            raise OpArgumentError(f"{name} {list(rows.shape)} and {name}_cache {list(cache.shape)} must be "
                                  "[tokens, kv_heads, head_dim] and [blocks, block_size, kv_heads, head_dim]",
                                  argument=name)
    require_shape("slot_indices", call.slot_indices, ((key.shape[0],),))
    require_shape("value", value, ((key.shape[0], *value.shape[1:]),))
    return Out(list(key_cache.shape), key_cache.dtype), Out(list(value_cache.shape), value_cache.dtype)


def _cache_write_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    write = write_nz_rows if _nz_caches(call) else write_slots
    return write(call.key_cache, call.key, call.slot_indices), write(call.value_cache, call.value, call.slot_indices)


def _reshape_and_cache_samples() -> list[SampleCall]:
    """Four tokens written into their slots of the paged caches."""
    key_cache, value_cache, _ = _sample_caches(torch.float16)
    tokens = _atb_sample(4, 1, 16, seed=7), _atb_sample(4, 1, 16, seed=8)
    return [SampleCall((*tokens, key_cache, value_cache, torch.tensor([12, 1, 30, 7], dtype=torch.int32)))]


@npu_op(
    meta=_cache_write_meta,
    kernel=_cache_write_kernel,
    writes_back={"key_cache": 0, "value_cache": 1},
    samples=_reshape_and_cache_samples,
)
def _npu_reshape_and_cache(call: Arguments) -> None:
    """Write each token's key and value rows into its cache slot, in place; returns None.

    Source: op-plugin ``op_plugin/ops/atb/ReshapeAndCachAtb.cpp`` (ATB ReshapeAndCacheOperation: caches in the
    ND format take ``K_CACHE_V_CACHE``, caches both in FRACTAL_NZ ``K_CACHE_V_CACHE_NZ``) and op-plugin's
    reference in ``test/test_custom_ops/test_atb_reshape_and_cache.py``. ``key`` / ``value`` ``[T, kv_heads,
    D|Dv]`` (key and value may differ in dtype, e.g. an int8 key beside a bfloat16 value); each cache has its
    rows' dtype and is either ND ``[blocks, block_size, kv_heads, D]`` or NZ ``[blocks, kv_heads x D / c,
    block_size, c]`` with c = 32 bytes of values (16 float16/bfloat16, 32 int8), told apart by the key cache's
    shape. Token t goes to block ``slot_indices[t] // block_size``, offset ``slot_indices[t] % block_size``;
    in an NZ block its row is cut into runs of c values, run r at ``[block, r, offset]``. Slots must lie in
    the cache (checked); when two tokens name one slot, the later token's row stays (the reference writes
    tokens in order).
    """


def _npu_paged_attention_get_workspace(*args: Any, **kwargs: Any) -> torch.Tensor:
    """torch_npu's workspace query for :func:`_npu_paged_attention` (same arguments, without ``workspace``;
    op-plugin PagedAttentionAtb.cpp sizes the ATB operation's device scratch). The CPU kernel needs no
    scratch, so after the op's argument checks this returns an empty uint8 tensor, which
    ``_npu_paged_attention(..., workspace=...)`` accepts and ignores."""
    check(_npu_paged_attention, *args, **kwargs)
    return bind(_npu_paged_attention, *args, **kwargs).query.new_empty(0, dtype=torch.uint8)
