"""Sparse decode attention: queries against cache rows picked by an index (DeepSeek sparse attention's
top-k, paged KV caches), priced as the rows are read, not as a stream.

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


for _name, _flops in (("fused_attention", fused_attention_flops), ("incre_attention", incre_attention_flops)):
    register_cost_rule(_name, block_dim=all_cores, flops=_flops, bytes=io_bytes, body_us=roofline_us, tiling="complex")
