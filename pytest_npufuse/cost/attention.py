"""Sparse decode attention: queries against cache rows picked by an index (DeepSeek sparse attention's
top-k, paged KV caches), priced as the rows are read, not as a stream; and the dense indexer that picks
those rows (``dense_indexer``: every query token against every key, priced on the roofline).

A kernel of the ``sparse_attention`` rule has three kinds of input: the query tensors (those shaped like
the output but for their last dim: ``[B, S, N, D]`` and its rope part), the caches whose rows the index
addresses (``[tokens, N_kv, width]`` or paged ``[blocks, block_size, N_kv, width]``; one row is the last
dim) and the integer index (``[..., top_k]``: ``top_k`` rows per query token and KV head).

- **The core split.** The work splits over the parallel dimensions that exist: one unit per (batch, query
  token, KV head), all the query heads of a KV head in one unit, as the Ascend C SparseFlashAttention
  kernel does (cann-recipes-infer ``ops/ascendc/src/sparse_flash_attention``: the tiling's base block is
  ``gSize`` query heads by 512 selected tokens, ``InitCalcParamsEach`` hands out one block per (batch,
  KV head, query token)). A decode step of one sequence with one KV head is one unit: one Cube core and
  its Vector cores, whatever the chip has. (TileLang's example splits the heads 16 a core instead, and
  each of its 8 cores then gathers all the rows again: the same gather on the busiest core.)
- **The gather.** Each selected row is read by a core's Vector units into UB with one ``DataCopy`` per
  row and cache (the index and the page-table entry are read by the scalar unit first), then written
  out contiguously for the Cube: the ``aiv / aic`` Vector cores of the unit's core share the rows, each
  paying ``[core_memory] indexed_access_cycles`` per row and cache besides the row's bytes at the
  per-core rate. Rows of about a kilobyte are far below the 16 KB a copy needs to reach the bandwidth
  (Ascend C best practices, "transfer a large data block at a time"), so this, not HBM, sets the time.
- **The pipeline.** The Cube's two products (Q K^T over the cached width, P V over the value width) at
  ``[efficiency] cube_tile`` of one core's peak, and the online softmax on the Vector cores (the catalog
  entry's ``flops_per_element`` Vector operations per score, at the float32 rate), overlap the gather
  across the 512-token blocks (the kernel preloads two): the longest of the three sets the pace and
  ``[efficiency] pipeline_overlap`` of the others hides under it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, Sequence

from .registry import Work, register_cost_rule
from .rules import all_cores, attention_flops, io_bytes, roofline_us

if TYPE_CHECKING:
    from ..ir.program import Kernel, TensorSpec
    from ..target.profile import HardwareProfile

_INDEX_DTYPES = ("int32", "int64")


class _Sparse(NamedTuple):
    """What the inputs say: the query tensors, the caches, the index, rows per unit and units."""

    queries: tuple["TensorSpec", ...]
    caches: tuple["TensorSpec", ...]
    index: "TensorSpec | None"
    top_k: int
    units: int


def _item(spec: "TensorSpec") -> float:
    return spec.nbytes / max(1, math.prod(spec.shape))


def _split(inputs: Sequence["TensorSpec"], outputs: Sequence["TensorSpec"]) -> _Sparse:
    """Sort the inputs into queries, caches and index (see the module docstring)."""
    lead = outputs[0].shape[:-1] if outputs else ()
    index = next((spec for spec in inputs if spec.dtype in _INDEX_DTYPES), None)
    values = [spec for spec in inputs if spec.dtype not in _INDEX_DTYPES]
    queries = tuple(spec for spec in values if spec.shape[:-1] == lead)
    caches = tuple(spec for spec in values if spec.shape[:-1] != lead)
    top_k = index.shape[-1] if index is not None and index.shape else 1
    units = max(1, math.prod(index.shape) // max(1, top_k)) if index is not None else 1
    return _Sparse(queries, caches, index, top_k, units)


def _row_bytes(caches: Sequence["TensorSpec"]) -> float:
    """Bytes of one selected token's row over every cache (its last dim of each)."""
    return sum(spec.shape[-1] * _item(spec) for spec in caches if spec.shape)


def _heads_by_unit(sparse: _Sparse, outputs: Sequence["TensorSpec"]) -> float:
    """Query heads one unit attends with (the output's rows over the units)."""
    out = outputs[0].shape if outputs else (1,)
    return math.prod(out[:-1]) / sparse.units


def sparse_attention_flops(work: Work) -> float:
    """Q K^T over the cached width and P V over the value width (the output's last dim), for every query
    head against its ``top_k`` selected rows."""
    sparse = _split(work.inputs, work.outputs)
    width = sum(spec.shape[-1] for spec in sparse.caches if spec.shape)
    value = work.outputs[0].shape[-1] if work.outputs and work.outputs[0].shape else 0
    return 2.0 * sparse.units * _heads_by_unit(sparse, work.outputs) * sparse.top_k * (width + value)


def sparse_attention_bytes(work: Work) -> int:
    """The queries, the index, the selected rows (not the caches) and the output."""
    sparse = _split(work.inputs, work.outputs)
    gathered = sparse.units * sparse.top_k * _row_bytes(sparse.caches)
    index = sparse.index.nbytes if sparse.index is not None else 0
    written = sum(spec.nbytes for spec in work.outputs)
    return int(sum(spec.nbytes for spec in sparse.queries) + index + gathered + written)


def sparse_attention_block_dim(kernel: "Kernel", profile: "HardwareProfile") -> int:
    """One Cube core per unit (batch x query token x KV head)."""
    return _split(kernel.input_specs, kernel.output_specs).units


def gather_us(rows: float, caches: Sequence["TensorSpec"], profile: "HardwareProfile") -> float:
    """One core reading ``rows`` indexed rows of ``caches``: a row per ``DataCopy`` per cache, each paying
    the per-access cycles, shared by the core's Vector cores, each at the per-core DDR rate."""
    vectors = max(1, profile.aiv // max(1, profile.aic))
    per_row = len(caches) * profile.core_indexed_access_cycles + _row_bytes(caches) / profile.core_ddr_bytes_per_cycle
    return rows * per_row / vectors / profile.vector_mhz


def _softmax_us(scores: float, ops: float, profile: "HardwareProfile") -> float:
    """The online softmax of ``scores`` on one core's Vector cores, ``ops`` operations a score."""
    vectors = max(1, profile.aiv // max(1, profile.aic))
    table = profile.vector_tflops
    per_vector = table.get("float32", min(table.values())) / profile.aiv
    return scores * ops / (per_vector * vectors * 1e6)


def _pipelined(parts: Sequence[float], overlap: float) -> float:
    """The longest part, plus what of the others does not hide under it."""
    longest = max(parts)
    return longest + (1.0 - overlap) * (sum(parts) - longest)


def sparse_attention_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """The busiest core's units, each its gather, Cube products and softmax pipelined (module docstring);
    never faster than HBM lets the selected rows through."""
    sparse = _split(kernel.input_specs, kernel.output_specs)
    per_core = -(-sparse.units // max(1, min(dim, sparse.units)))
    table = profile.cube_tflops
    core_tflops = table.get(kernel.compute_dtype, table.get("float16", max(table.values()))) / profile.aic
    cube = kernel.flops / sparse.units / (core_tflops * 1e6 * profile.cube_tile_efficiency)
    scores = _heads_by_unit(sparse, kernel.output_specs) * sparse.top_k
    parts = (
        gather_us(sparse.top_k, sparse.caches, profile),
        cube,
        _softmax_us(scores, kernel.info.flops_per_element, profile),
    )
    stream = kernel.bytes / (profile.hbm_gbps * profile.memory_efficiency * 1e3)
    return max(per_core * _pipelined(parts, profile.pipeline_overlap), stream)


register_cost_rule(
    "sparse_attention", block_dim=sparse_attention_block_dim, flops=sparse_attention_flops,
    bytes=sparse_attention_bytes, body_us=sparse_attention_us, tiling="complex",
)


# ---------------------------------------------------------------------------------------------
# Fused (flash) attention: FIA, IFA, PFA and FlashAttentionScore, priced by the scores they compute
# ---------------------------------------------------------------------------------------------

_NO_LIMIT = 2147483647  # pre/next tokens: no band
_CAUSAL_TOP_LEFT, _CAUSAL_BOTTOM_RIGHT, _BAND = 2, 3, 4  # the ops' sparse_mode values (op-plugin's API pages)
_MASK_DTYPES = ("bool", "int8", "uint8")


class _AttentionCall(NamedTuple):
    """What one fused-attention call computes: per batch its query rows and keys, the query heads, the
    Q.K and value head dims, and the visible band of each row."""

    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    heads: int
    qk_dim: float
    value_dim: float
    sparse_mode: int
    pre_tokens: int
    next_tokens: int
    masked: bool


def _lengths(values: object, count: int, cumulative: bool) -> tuple[int, ...] | None:
    """Per-batch lengths from an ``actual_seq_*`` argument: cumulative ends (TND), else one value for
    every batch or the first ``count`` values."""
    if not isinstance(values, (tuple, list)) or not values:
        return None
    ints = [int(value) for value in values]
    if cumulative:
        return tuple(max(0, end - start) for start, end in zip([0, *ints[:-1]], ints))
    return tuple(ints * count) if len(ints) == 1 else tuple(ints[:count])


def _dense_seq(spec: "TensorSpec", layout: str) -> tuple[int, int]:
    """(batch, sequence) of a BSH / SBH / BSND / BNSD tensor."""
    shape = spec.shape
    if layout == "SBH":
        return shape[1], shape[0]
    return shape[0], shape[2] if layout == "BNSD" else shape[1]


def _attention_call(work: Work, decode: bool) -> _AttentionCall:
    """The call's sizes from its tensors and scalar arguments (``Work.attrs``): the layout before "_"
    reads query and key, the one after it the output; TND lengths are cumulative ends; a paged KV cache
    (an int32 [B, blocks] table beside ``block_size``) holds ``actual_seq_lengths_kv`` keys a batch.
    ``decode``: npu_incre_flash_attention, whose ``actual_seq_lengths`` are the KV lengths."""
    attrs = dict(work.attrs)
    query, key, out = work.inputs[0], work.inputs[1], work.outputs[0]
    layout, _, out_layout = str(attrs.get("input_layout") or "BSH").partition("_")
    heads = int(attrs.get("num_heads") or attrs.get("num_query_heads") or attrs.get("head_num") or 1)
    q_values = attrs.get("actual_seq_qlen", attrs.get("actual_seq_lengths"))
    kv_values = attrs.get("actual_seq_kvlen", attrs.get("actual_seq_lengths_kv"))
    if decode:
        q_values, kv_values = None, attrs.get("actual_seq_lengths")
    table = next((spec for spec in work.inputs[3:] if spec.dtype == "int32" and len(spec.shape) == 2), None)
    block_size = int(attrs.get("block_size") or 0)
    paged = table is not None and block_size > 0
    if layout in ("TND", "NTD"):
        tokens = query.shape[1] if layout == "NTD" else query.shape[0]
        q_lens = _lengths(q_values, 0, True) or (tokens,)
        kv_lens = _lengths(kv_values, len(q_lens), not paged) or (key.shape[1] if layout == "NTD" else key.shape[0],)
    else:
        batch, q_len = _dense_seq(query, layout)
        kv_len = table.shape[1] * block_size if paged else _dense_seq(key, layout)[1]
        q_lens = _lengths(q_values, batch, False) or (q_len,) * batch
        kv_lens = _lengths(kv_values, batch, False) or (kv_len,) * batch
    split = layout in ("BSH", "SBH")
    qk_dim = query.shape[-1] / heads if split else query.shape[-1]
    value_dim = out.shape[-1] / heads if (out_layout or layout) in ("BSH", "SBH") else out.shape[-1]
    masked = any(spec.dtype in _MASK_DTYPES for spec in work.inputs[3:])
    return _AttentionCall(q_lens, kv_lens, heads, qk_dim, value_dim, int(attrs.get("sparse_mode") or 0),
                          int(attrs.get("pre_tokens", attrs.get("pre_tockens", _NO_LIMIT)) or 0),
                          int(attrs.get("next_tokens", attrs.get("next_tockens", _NO_LIMIT)) or 0), masked)


def _ramp_sum(rows: int, start: int, limit: int) -> int:
    """``sum(min(limit, max(0, i + start)) for i in range(rows))`` in closed form."""
    first = min(rows, max(0, -start))  # the first row whose ramp is above 0
    full = min(rows, max(first, limit - start))  # the first row at the limit
    rising = (first + start + full - 1 + start) * (full - first) // 2
    return rising + (rows - full) * limit


def _scores(q_len: int, kv_len: int, call: _AttentionCall) -> int:
    """The query-key pairs one head of one batch computes: row i sees keys ``j`` with
    ``-pre <= j - (i + shift) <= next`` within ``[0, kv_len)``; causal modes and the band shift the diagonal
    to the bottom right (3, 4) or keep it at the top left (2, and mode 0 with a mask)."""
    mode = call.sparse_mode
    if mode == _CAUSAL_TOP_LEFT:
        shift, pre, nxt = 0, _NO_LIMIT, 0
    elif mode == _CAUSAL_BOTTOM_RIGHT:
        shift, pre, nxt = kv_len - q_len, _NO_LIMIT, 0
    elif mode == _BAND:
        shift, pre, nxt = kv_len - q_len, call.pre_tokens, call.next_tokens
    elif mode == 0 and call.masked:
        shift, pre, nxt = 0, call.pre_tokens, call.next_tokens
    else:
        return q_len * kv_len
    reach = q_len + kv_len
    pre, nxt = max(-reach, min(reach, pre)), max(-reach, min(reach, nxt))
    return max(0, _ramp_sum(q_len, shift + nxt + 1, kv_len) - _ramp_sum(q_len, shift - pre, kv_len))


def _attention_flops(work: Work, decode: bool) -> float:
    """The flops of a call with a query and a key of two dims or more (a kernel built otherwise, as a
    synthetic benchmark's, which states its flops, is priced as the ``attention`` rule prices it)."""
    operands = (*work.inputs[:2], *work.outputs[:1])
    if len(operands) < 3 or min(len(spec.shape) for spec in operands) < 2:
        return attention_flops(work)
    call = _attention_call(work, decode)
    scores = sum(_scores(q, kv, call) for q, kv in zip(call.q_lens, call.kv_lens))
    return 2.0 * call.heads * scores * (call.qk_dim + call.value_dim)


def fused_attention_flops(work: Work) -> float:
    """Q K^T and P V over the scores the call computes: ``2 x heads x scores x (D_qk + D_v)``. Non-causal
    prefill grows as S_q x S_kv, causal as about half of it, decode as S_kv (op-plugin's API pages define
    each layout, the lengths and the sparse modes; FlashAttention's 4 x B x N x S_q x S_kv x D)."""
    return _attention_flops(work, decode=False)


def incre_attention_flops(work: Work) -> float:
    """:func:`fused_attention_flops` of npu_incre_flash_attention, whose ``actual_seq_lengths`` are KV lengths."""
    return _attention_flops(work, decode=True)


def _attention_bytes(work: Work, decode: bool) -> int:
    """Every operand once, except a paged KV cache (an int32 ``[B, blocks]`` table beside ``block_size``):
    of its pool, which holds every sequence's blocks, only the rows the call's KV lengths reach are read
    (``actual_seq_lengths_kv``, else the table's bound)."""
    block_size = int(dict(work.attrs).get("block_size") or 0)
    table = next((spec for spec in work.inputs[3:] if spec.dtype == "int32" and len(spec.shape) == 2), None)
    if table is None or block_size <= 0 or len(work.inputs[1].shape) < 2:
        return io_bytes(work)
    call = _attention_call(work, decode)
    pool = work.inputs[1:3]
    pool_bytes = sum(spec.nbytes for spec in pool)
    row_bytes = pool_bytes / max(1, work.inputs[1].shape[0] * block_size)
    read = min(pool_bytes, sum(call.kv_lens) * row_bytes)
    others = sum(spec.nbytes for spec in (work.inputs[0], *work.inputs[3:], *work.outputs))
    return int(others + read)


def fused_attention_bytes(work: Work) -> int:
    """:func:`_attention_bytes` of FIA, PFA and FlashAttentionScore."""
    return _attention_bytes(work, decode=False)


def incre_attention_bytes(work: Work) -> int:
    """:func:`_attention_bytes` of npu_incre_flash_attention (its ``actual_seq_lengths`` are KV lengths)."""
    return _attention_bytes(work, decode=True)


for _name, _flops, _bytes in (
    ("fused_attention", fused_attention_flops, fused_attention_bytes),
    ("incre_attention", incre_attention_flops, incre_attention_bytes),
):
    register_cost_rule(_name, block_dim=all_cores, flops=_flops, bytes=_bytes, body_us=roofline_us, tiling="complex")


def _keys_per_query(inputs: Sequence["TensorSpec"]) -> int:
    """Keys one query token of a dense indexer is scored against, from the shapes (the valid lengths are
    values capture does not read, so this is their bound): a paged cache's ``block_table [B, blocks]``
    times its block size, a BSND key's S2, or a TND key's T2 over the batches of its lengths."""
    key = inputs[1]
    ints = [spec for spec in inputs[2:] if spec.dtype in _INDEX_DTYPES]
    table = next((spec for spec in ints if len(spec.shape) == 2), None)
    if table is not None and len(key.shape) == 4:
        return table.shape[1] * key.shape[1]
    if len(key.shape) == 4:
        return key.shape[1]
    batches = next((spec.shape[0] for spec in ints if len(spec.shape) == 1), 1)
    return -(-key.shape[0] // max(1, batches))


def dense_indexer_flops(work: Work) -> float:
    """A lightning indexer scores every (query token, query head, key) pair: the Cube's ``q . k`` over the
    head dim, then ReLU, the head's weight and the sum over heads on the Vector units (3 operations);
    the top-k sort is left out (it is linear in the scores, as these are)."""
    query = work.inputs[0]
    head_dim = query.shape[-1] if query.shape else 1
    pairs = math.prod(query.shape[:-1]) * _keys_per_query(work.inputs)
    return pairs * (2.0 * head_dim + 3.0)


register_cost_rule(
    "dense_indexer", block_dim=all_cores, flops=dense_indexer_flops, bytes=io_bytes, body_us=roofline_us,
    tiling="complex",
)


# ---------------------------------------------------------------------------------------------
# ATB attention (op-plugin's private _npu_flash_attention*, _npu_paged_attention): the output is an
# ``out`` argument written in place, so the work is read from the query, the keys and the lengths' shapes
# ---------------------------------------------------------------------------------------------


def _int_vectors(inputs: Sequence["TensorSpec"]) -> list["TensorSpec"]:
    return [spec for spec in inputs if spec.dtype in _INDEX_DTYPES and len(spec.shape) == 1]


def _head_dim(spec: "TensorSpec", heads: int) -> float:
    """A ``[T, heads, D]`` tensor's D, or a ``[T, heads x D]`` one's."""
    return spec.shape[-1] if len(spec.shape) >= 3 else spec.shape[-1] / max(1, heads)


def _atb_call(work: Work, q_lens: tuple[int, ...], kv_lens: tuple[int, ...], sparse_mode: int) -> _AttentionCall:
    attrs = dict(work.attrs)
    heads = int(attrs.get("num_heads") or 1)
    kv_heads = int(attrs.get("num_kv_heads") or heads)
    query, value = work.inputs[0], work.inputs[2]
    return _AttentionCall(q_lens, kv_lens, heads, _head_dim(query, heads), _head_dim(value, kv_heads), sparse_mode,
                          _NO_LIMIT, _NO_LIMIT, False)


def _call_flops(call: _AttentionCall) -> float:
    scores = sum(_scores(q, kv, call) for q, kv in zip(call.q_lens, call.kv_lens))
    return 2.0 * call.heads * scores * (call.qk_dim + call.value_dim)


def _packed(work: Work, sparse_mode: int) -> _AttentionCall:
    """``seq_len [B]`` sequences packed into the query's ``T`` tokens. Their lengths are values capture
    does not read: taken as ``T / B`` each, the split with the fewest pairs (the sum of squares of lengths
    adding up to T is smallest when they are equal), so the pricing never exceeds what the call computes."""
    tokens = work.inputs[0].shape[0] if work.inputs[0].shape else 1
    batches = next((spec.shape[0] for spec in _int_vectors(work.inputs)), 1) or 1
    lengths = tuple(tokens // batches + (index < tokens % batches) for index in range(batches))
    return _atb_call(work, lengths, lengths, sparse_mode)


def packed_attention_flops(work: Work) -> float:
    """ATB SelfAttention (PA_ENCODER, ``_npu_flash_attention``, ``_npu_flash_attention_unpad`` and its v2):
    every token of a sequence against every token of it (the general mask of ``_npu_flash_attention``
    removes no block the kernel can skip), ``2 x heads x sum(len^2) x (D + Dv)``."""
    return _call_flops(_packed(work, 0))


def packed_causal_attention_flops(work: Work) -> float:
    """``_npu_flash_attention_v3`` (the compressed causal mask, ``mask_type`` 3): the lower triangle of each
    packed sequence."""
    return _call_flops(_packed(work, _CAUSAL_TOP_LEFT))


def _paged(work: Work) -> tuple[_AttentionCall, int]:
    """A paged call's sizes and the cache rows its block table addresses: ``B`` sequences (the table's
    rows), each over the keys its table reaches (``blocks x block_size``, the bound of ``context_lens``),
    with ``T / B`` new query tokens, causal to the bottom right (``_npu_flash_attention_qlens``: new token i
    of a sequence sits at ``context - q + i``; ``_npu_paged_attention``: one token, all its keys)."""
    query, cache = work.inputs[0], work.inputs[1]
    table = next((spec for spec in work.inputs[3:] if spec.dtype in _INDEX_DTYPES and len(spec.shape) == 2), None)
    batches, blocks = table.shape if table is not None else (1, 1)
    block_size = cache.shape[1] if len(cache.shape) == 4 else 1
    rows = batches * blocks * block_size
    tokens = query.shape[0] if query.shape else 1
    q_len = max(1, tokens // max(1, batches))
    call = _atb_call(work, (q_len,) * batches, (blocks * block_size,) * batches, _CAUSAL_BOTTOM_RIGHT)
    return call, rows


def paged_attention_flops(work: Work) -> float:
    """Q K^T and P V of every query token over the cached keys it sees (:func:`_paged`)."""
    return _call_flops(_paged(work)[0])


def paged_attention_bytes(work: Work) -> int:
    """The query, the table and lengths, the cache rows the block table addresses (not the whole cache
    pool, which holds every other sequence's blocks too) and the output written."""
    _, rows = _paged(work)
    caches = work.inputs[1:3]
    row_bytes = sum(spec.nbytes / max(1, spec.shape[0] * spec.shape[1]) for spec in caches if len(spec.shape) == 4)
    gathered = min(sum(spec.nbytes for spec in caches), rows * row_bytes)
    small = sum(spec.nbytes for spec in work.inputs[3:] if spec.dtype in _INDEX_DTYPES)
    query_and_output = 2 * work.inputs[0].nbytes  # ``out`` has the query's rows and heads
    return int(query_and_output + small + gathered)


for _name, _flops, _bytes in (
    ("packed_attention", packed_attention_flops, io_bytes),
    ("packed_causal_attention", packed_causal_attention_flops, io_bytes),
    ("paged_attention", paged_attention_flops, paged_attention_bytes),
):
    register_cost_rule(_name, block_dim=all_cores, flops=_flops, bytes=_bytes, body_us=roofline_us, tiling="complex")


# ---------------------------------------------------------------------------------------------
# torch's scaled_dot_product_attention, which torch_npu runs as FlashAttentionScore, and its gradient
# ---------------------------------------------------------------------------------------------


def sdpa_flops(work: Work) -> float:
    """``F.scaled_dot_product_attention`` on query ``[B, N, Sq, D]`` and key/value ``[B, N_kv, Skv, D|Dv]``
    (torch's layout; GQA reads each KV head for its ``N / N_kv`` query heads, no copy): torch_npu runs it
    as FlashAttentionScore (op-plugin ``ScaledDotProductAttentionKernelNpuOpApi.cpp``: BNSD, ``head_num`` N,
    ``sparse_mode`` 2, the top-left causal triangle, when ``is_causal``, else 0 with the mask as given),
    so its scores are ``Sq x Skv`` a head, about half of that causal."""
    query, key, value = work.inputs[0], work.inputs[1], work.inputs[2]
    if min(len(query.shape), len(key.shape), len(value.shape)) < 4:
        return attention_flops(work)
    batch, heads, q_len, qk_dim = query.shape[0], query.shape[1], query.shape[-2], query.shape[-1]
    causal = bool(dict(work.attrs).get("is_causal"))
    call = _AttentionCall((q_len,) * batch, (key.shape[-2],) * batch, heads, qk_dim, value.shape[-1],
                          _CAUSAL_TOP_LEFT if causal else 0, _NO_LIMIT, _NO_LIMIT, False)
    return _call_flops(call)


def fused_attention_grad_flops(work: Work) -> float:
    """FlashAttentionScoreGrad: the forward's pairs (:func:`fused_attention_flops`, from the same layout,
    lengths and sparse mode) through five products against the forward's two: S = Q K^T recomputed, then
    dV = P^T dO, dP = dO V^T, dQ = dS K and dK = dS^T Q (FlashAttention's backward pass, Dao et al. 2022,
    Algorithm 4)."""
    return 2.5 * fused_attention_flops(work)


register_cost_rule("bnsd_attention", block_dim=all_cores, flops=sdpa_flops, bytes=io_bytes, body_us=roofline_us,
                   tiling="complex")
register_cost_rule("fused_attention_grad", block_dim=all_cores, flops=fused_attention_grad_flops, bytes=io_bytes,
                   body_us=roofline_us, tiling="complex")
