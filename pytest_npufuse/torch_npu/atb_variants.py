"""Later revisions of op-plugin's ATB attention bindings, over the computations of :mod:`.atb`.

``_npu_flash_attention_unpad_v2`` is ``_npu_flash_attention_unpad`` (SelfAttentionOperation, PA_ENCODER,
no mask) with a keyword-only ``kernel_type`` choosing between two ATB kernels of the same attention;
``_npu_flash_attention_v3`` is the same encoder with the compressed causal mask (causal within each
packed sequence), as ``_npu_flash_attention_qlens`` reads it. ``_npu_paged_attention_splitfuse`` is
PagedAttentionOperation with a per-token mask (chunked prefill and decode tokens in one batch).
"""

from __future__ import annotations

import torch

from ..errors import OpArgumentError
from .atb import (
    _atb_sample,
    _attend,
    _blocks,
    _check_heads,
    _check_lengths,
    _check_out,
    _encoder_kernel,
    _encoder_meta,
    _lengths,
    _require_compressed_causal,
    _sample_caches,
    _tokens,
)
from .attention import MASK_ONLY, NO_BAND, RIGHT_DOWN_CAUSAL, _geometry, _run, _Setup
from .checks import require_choice, require_dtype
from .registry import Arguments, Out, SampleCall, npu_op

# SelfAttentionParam::KERNELTYPE_DEFAULT and KERNELTYPE_EXP_M8V2, the two op-plugin accepts.
UNPAD_KERNEL_TYPES = (0, 2)


def _unpad_v2_samples() -> list[SampleCall]:
    """Two packed sequences (2 and 4 tokens) of 2 query heads over 1 KV head, both kernel types."""
    q = _atb_sample(6, 2, 8, seed=0, dtype=torch.bfloat16)
    k, v = (_atb_sample(6, 1, 8, seed=seed, dtype=torch.bfloat16) for seed in (1, 2))
    lengths = torch.tensor([2, 4], dtype=torch.int32)
    return [SampleCall((q, k, v, lengths, 0.3, 2, 1), {"kernel_type": kernel, "out": torch.zeros_like(q)})
            for kernel in (0, 2)]


@npu_op(meta=_encoder_meta, kernel=_encoder_kernel, writes_back={"out": 0}, samples=_unpad_v2_samples)
def _npu_flash_attention_unpad_v2(call: Arguments) -> None:
    """Unmasked self-attention of packed variable-length sequences, writing ``out``; returns None.

    Source: op-plugin ``op_plugin/ops/atb/SelfAttentionUnpadAtbV2.cpp``: the parameters of
    ``_npu_flash_attention_unpad`` (PA_ENCODER, no mask, BSND, ``qkScale = scale_value``) plus
    ``kernelType`` from ``kernel_type``, which must be 0 (KERNELTYPE_DEFAULT) or 2 (KERNELTYPE_EXP_M8V2);
    None means 0. Both compute ``softmax(scale_value * q k^T) v`` per sequence; the binding documents no
    numerical difference between them, so both give the reference result here.
    """
    _check_heads(call.num_heads, call.num_kv_heads)
    kernel = 0 if call.kernel_type is None else call.kernel_type
    require_choice("kernel_type", kernel, UNPAD_KERNEL_TYPES, "0 is KERNELTYPE_DEFAULT, 2 KERNELTYPE_EXP_M8V2")


# SelfAttentionParam::MASK_TYPE_NORM_COMPRESS, the only mask type op-plugin's v3 binding accepts.
V3_MASK_TYPES = (3,)


def _v3_kernel(call: Arguments) -> torch.Tensor:
    _require_compressed_causal(call.mask)
    lengths = _lengths(call.seq_len)
    return _attend(call, len(lengths), lengths, lengths, mode=RIGHT_DOWN_CAUSAL)[0]


def _v3_samples() -> list[SampleCall]:
    """Two packed sequences (3 and 5 tokens), 4 query heads over 2 KV heads, the 128-wide causal marker."""
    q = _atb_sample(8, 4, 16, seed=0)
    k, v = (_atb_sample(8, 2, 16, seed=seed) for seed in (1, 2))
    mask = torch.triu(torch.ones(128, 128), 1).half()
    return [SampleCall((q, k, v, mask, torch.tensor([3, 5], dtype=torch.int32), 0.25, 4, 2),
                       {"out": torch.zeros_like(q)})]


@npu_op(meta=_encoder_meta, kernel=_v3_kernel, writes_back={"out": 0}, samples=_v3_samples)
def _npu_flash_attention_v3(call: Arguments) -> None:
    """Causal self-attention of packed variable-length sequences, writing ``out``; returns None.

    Source: op-plugin ``op_plugin/ops/atb/SelfAttentionAtbV3.cpp`` (ATB SelfAttentionOperation, PA_ENCODER,
    ``maskType`` from ``mask_type``, which must be 3 = MASK_TYPE_NORM_COMPRESS, ``isTriuMask = 1``, BSND,
    ``qkScale = scale_value``). ``query`` / ``key`` / ``value`` as :func:`_npu_flash_attention_unpad_v2`;
    token i of sequence b attends to tokens 0..i of b. ``mask`` is the compressed causal marker (nonzero
    exactly above the diagonal, e.g. ``triu(ones(128, 128), 1)``, checked); None for ``mask_type`` means 3.
    """
    _check_heads(call.num_heads, call.num_kv_heads)
    mask_type = 3 if call.mask_type is None else call.mask_type
    require_choice("mask_type", mask_type, V3_MASK_TYPES, "3 is MASK_TYPE_NORM_COMPRESS, the causal marker")


# ---------------------------------------------------------------------------------------------
# _npu_paged_attention_splitfuse (PagedAttentionOperation, MASK_TYPE_SPEC, CALC_TYPE_SPEC)
# ---------------------------------------------------------------------------------------------


def _splitfuse_meta(call: Arguments) -> Out:
    query, seq_len = call.query, call.seq_len
    _check_lengths("seq_len", seq_len)
    _check_lengths("context_lens", call.context_lens, seq_len.shape[0])
    require_dtype("mask", call.mask, (query.dtype, torch.float16, torch.bfloat16, torch.float32))
    tokens = _tokens("query", query, call.num_heads).shape[0]
    if call.mask.dim() != 2 or call.mask.shape[0] != tokens:
        raise OpArgumentError(f"mask has shape {list(call.mask.shape)}; expected [{tokens} query tokens, max_seq_len]")
    _, geo = _attend(call, seq_len.shape[0])
    return _check_out(call.out, query, tokens, geo.heads, geo.value_dim)


def _splitfuse_sequence(call: Arguments, index: int, rows: slice, context: int) -> torch.Tensor:
    """Sequence ``index``'s query rows over its first ``context`` cached tokens, with its rows of the
    per-token mask (nonzero: masked), as [rows, heads, Dv]."""
    query = _tokens("query", call.query, call.num_heads)[rows]
    key = _blocks("key_cache", call.key_cache, call.num_kv_heads)
    value = _blocks("value_cache", call.value_cache, call.num_kv_heads)
    table = call.block_table[index : index + 1]
    geo = _geometry(query, key, value, "TND", call.num_heads, call.num_kv_heads, table, key.shape[1], [query.shape[0]])
    mask = call.mask[rows, :context] != 0
    padded = torch.nn.functional.pad(mask, (0, geo.kv_len - context), value=True)
    setup = _Setup(geo, [query.shape[0]], [context], float(call.scale_value), MASK_ONLY, NO_BAND, NO_BAND)
    return _run(setup, query, key, value, padded, table, None, None)[0]


def _splitfuse_kernel(call: Arguments) -> torch.Tensor:
    q_lens, kv_lens = _lengths(call.seq_len), _lengths(call.context_lens)
    if any(q > kv for q, kv in zip(q_lens, kv_lens)) or max(kv_lens, default=0) > call.mask.shape[1]:
        raise OpArgumentError(f"seq_len={q_lens} (query tokens) must not exceed context_lens={kv_lens} (all tokens), "
                              f"and mask's {call.mask.shape[1]} columns must cover the longest context")
    if sum(q_lens) != _tokens("query", call.query, call.num_heads).shape[0]:
        raise OpArgumentError(f"seq_len={q_lens} must add up to query's {call.query.shape[0]} tokens")
    starts = [sum(q_lens[:index]) for index in range(len(q_lens))]
    parts = [_splitfuse_sequence(call, index, slice(start, start + q), kv)
             for index, (start, q, kv) in enumerate(zip(starts, q_lens, kv_lens))]
    return torch.cat(parts).reshape(call.out.shape)


def _splitfuse_samples() -> list[SampleCall]:
    """A prefill chunk (the last 3 of 7 tokens, causal) and a decode token (context 5) in one batch, 4 query
    heads on 1 KV head, under op-plugin's per-token mask (0 visible, -10000 masked)."""
    key_cache, value_cache, table = _sample_caches(torch.bfloat16)
    q = _atb_sample(4, 4, 16, seed=9, dtype=torch.bfloat16)
    mask = torch.full((4, 12), -10000.0)
    for row, visible in enumerate((5, 6, 7, 5)):
        mask[row, :visible] = 0
    return [SampleCall((q, key_cache, value_cache, table, torch.tensor([7, 5], dtype=torch.int32), mask.bfloat16(),
                        torch.tensor([3, 1], dtype=torch.int32), 1, 4, 0.25, torch.empty_like(q)))]


@npu_op(meta=_splitfuse_meta, kernel=_splitfuse_kernel, writes_back={"out": 0}, samples=_splitfuse_samples)
def _npu_paged_attention_splitfuse(call: Arguments) -> None:
    """Attention of packed query tokens (prefill chunks and decode tokens together) over a paged KV cache,
    each token under its own mask row; writes ``out``, returns None.

    Source: op-plugin ``op_plugin/ops/atb/PagedAttentionSplitfuse.cpp`` (ATB PagedAttentionOperation with
    ``maskType = MASK_TYPE_SPEC``, ``calcType = CALC_TYPE_SPEC``, ``qkScale = scale_value``, BSND) and its
    reference in ``test/test_custom_ops/test_atb_paged_attention_splitfuse.py``.

    * ``query`` ``[T, num_heads, D]`` (or ``[T, num_heads x D]``): sequence b's ``seq_len[b]`` tokens, packed;
      ``key_cache`` / ``value_cache`` ``[blocks, block_size, num_kv_heads, D|Dv]``; ``block_table`` int32
      ``[B, max blocks]``; ``context_lens[b]`` is sequence b's whole length, read through its blocks.
    * ``mask`` ``[T, max_seq_len]``: row t belongs to query token t and column j to cache position j; the
      reference builds it as 0 where token t may attend and -10000 elsewhere (its query tokens are the last
      ``seq_len[b]`` positions, causal among themselves). As in the other ATB ops a nonzero entry excludes
      the position (the reference's -10000 leaves it an exp(-10000) of weight, 0 in float32).
    * ``out`` receives ``[T, num_heads, Dv]`` in query's dtype.
    """
    _check_heads(call.num_heads, call.num_kv_heads)
