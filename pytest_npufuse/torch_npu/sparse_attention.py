"""DeepSeek sparse attention's two steps: ``npu_lightning_indexer`` picks each query token's top-k key
positions, ``npu_sparse_flash_attention`` attends over only those.

Both take the query as BSND ``[B, S1, N1, D]`` or TND ``[T1, N1, D]`` (cumulative
``actual_seq_lengths_query``) and the keys as BSND, TND (cumulative ``actual_seq_lengths_key``/``_kv``) or
PA_BSND, a paged cache ``[blocks, block_size, N2, D]`` read through ``block_table``. Here each batch's valid
query rows and key rows are cut out of those layouts (:func:`_batches`), so the two kernels work on plain
``[Lq, N1, D]`` and ``[Lk, N2, D]`` tensors. Query rows past a batch's valid length are not computed: the
indexer writes -1 there, the attention zeros.

``sparse_mode=3`` is rightDownCausal: with ``Lq`` valid query rows and ``Lk`` valid keys, row ``i`` may see
key ``j <= Lk - Lq + i`` (the SFA API page states the bound, op-plugin's indexer reference masks the same
triangle); ``sparse_mode=0`` sees every valid key.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch

from ..errors import OpArgumentError
from .checks import HALF_DTYPES, require_choice, require_dtype
from .dtypes import DTYPE_CODES
from .registry import Arguments, Out, SampleCall, npu_op

QUERY_LAYOUTS = ("BSND", "TND")
KEY_LAYOUTS = ("BSND", "TND", "PA_BSND")
SPARSE_MODES = (0, 3)
_MODES_MEANING = "0 sees every valid key, 3 is rightDownCausal"
_NO_BAND = 2**63 - 1
INDEXER_HEAD_DIM = 128
INDEXER_MAX_HEADS = 64
# sparse_count values the indexer's API page lists: 1..2048, and these larger ones.
INDEXER_LARGE_COUNTS = (3072, 4096, 5120, 6144, 7168, 8192)


class _Batch(NamedTuple):
    """One batch's valid rows: where its query rows start in the flattened ``[rows, N1, D]`` query, how
    many there are, and its valid keys as ``[Lk, N2, ...]`` tensors (one per key-like input)."""

    start: int
    q_len: int
    keys: tuple[torch.Tensor, ...]


def _require_layouts(call: Arguments, query_layout: str, key_layout: str) -> None:
    """The layout strings, and the pairing both API pages require: BSND/TND keys match the query."""
    require_choice(query_layout, getattr(call, query_layout), QUERY_LAYOUTS, "the query's layout")
    require_choice(key_layout, getattr(call, key_layout), KEY_LAYOUTS, "the key's layout; PA_BSND is a paged cache")
    if getattr(call, key_layout) != "PA_BSND" and getattr(call, key_layout) != getattr(call, query_layout):
        raise OpArgumentError(
            f"{key_layout}={getattr(call, key_layout)!r} with {query_layout}={getattr(call, query_layout)!r}: "
            f"without a paged cache the key's layout must equal the query's; pass {key_layout}="
            f"{getattr(call, query_layout)!r} or a PA_BSND cache", argument=key_layout)


def _require_band(call: Arguments) -> None:
    """pre_tokens / next_tokens: both API pages support only the default (no band)."""
    require_choice("sparse_mode", call.sparse_mode, SPARSE_MODES, _MODES_MEANING)
    for name in ("pre_tokens", "next_tokens"):
        if getattr(call, name) != _NO_BAND:
            raise OpArgumentError(
                f"{name}={getattr(call, name)} is not supported; only the default 2**63-1 is", argument=name
            )


def _query_rows(name: str, query: torch.Tensor, layout: str) -> tuple[Optional[int], int, int]:
    """(batch, None for TND; rows per batch or total rows; heads) from the query's shape."""
    want = 4 if layout == "BSND" else 3
    if query.dim() != want:
        raise OpArgumentError(f"{name} has shape {list(query.shape)}; layout {layout} needs {want} dims "
                              f"({'[B, S1, N1, D]' if want == 4 else '[T1, N1, D]'})", argument=name)
    if layout == "BSND":
        return query.shape[0], query.shape[1], query.shape[2]
    return None, query.shape[0], query.shape[1]


def _key_heads(name: str, key: torch.Tensor, layout: str) -> int:
    """The key's head count (N2), checking its rank for the layout."""
    want = 3 if layout == "TND" else 4
    if key.dim() != want:
        shapes = {"BSND": "[B, S2, N2, D]", "TND": "[T2, N2, D]", "PA_BSND": "[blocks, block_size, N2, D]"}
        raise OpArgumentError(
            f"{name} has shape {list(key.shape)}; layout {layout} needs {shapes[layout]}", argument=name
        )
    return key.shape[-2]


def _require_paging(call: Arguments, key: torch.Tensor, layout: str, batch: Optional[int], lengths: str) -> None:
    """A PA_BSND cache needs block_table [B, blocks per sequence] and the per-batch key lengths; block_size
    is a multiple of 16 up to 1024 (both API pages)."""
    table = call.block_table
    if layout != "PA_BSND":
        if table is not None:
            raise OpArgumentError("block_table is given but the keys are not a paged cache; pass layout "
                                  "'PA_BSND' for a paged cache, or block_table=None", argument="block_table")
        return
    if table is None or getattr(call, lengths) is None:
        raise OpArgumentError(f"a PA_BSND cache needs block_table and {lengths}; pass both")
    require_dtype("block_table", table, (torch.int32,))
    if table.dim() != 2 or (batch is not None and table.shape[0] != batch):
        raise OpArgumentError(
            f"block_table has shape {list(table.shape)}; expected [batch, blocks per sequence]", argument="block_table"
        )
    block_size = key.shape[1]
    if block_size % 16 or not 16 <= block_size <= 1024:
        raise OpArgumentError(f"the cache's block_size is {block_size}; it must be a multiple of 16 up to 1024")


def _require_lengths(call: Arguments, name: str, cumulative: bool) -> Optional[int]:
    """An int32 1-D length tensor; returns its batch count. TND lengths are cumulative and must be given."""
    lengths = getattr(call, name)
    if lengths is None:
        if cumulative:
            raise OpArgumentError(
                f"{name} is required with a TND layout: the cumulative token ends per batch", argument=name
            )
        return None
    require_dtype(name, lengths, (torch.int32,))
    if lengths.dim() != 1:
        raise OpArgumentError(
            f"{name} has shape {list(lengths.shape)}; expected [batch] (one length per batch)", argument=name
        )
    return lengths.shape[0]


def _require_batches(call: Arguments, batch: Optional[int], key_lengths: str, key_layout: str) -> None:
    """The length tensors (TND ones required), one batch count among them and a BSND query, and the
    paged cache's table."""
    q_batch = _require_lengths(call, "actual_seq_lengths_query", call.layout_query == "TND")
    k_batch = _require_lengths(call, key_lengths, getattr(call, key_layout) == "TND")
    batches = [n for n in (batch, q_batch, k_batch) if n is not None]
    if any(n != batches[0] for n in batches):
        raise OpArgumentError(f"the query, actual_seq_lengths_query and {key_lengths} disagree on the batch "
                              f"count ({batches})")
    _require_paging(call, call.key, getattr(call, key_layout), batches[0] if batches else None, key_lengths)


def _valid_lengths(name: str, lengths: Optional[torch.Tensor], batch: int, full: int, cumulative: bool) -> list[int]:
    """Per-batch valid lengths from a lengths tensor (cumulative for TND), each within ``full``."""
    if lengths is None:
        return [full] * batch
    values = [int(v) for v in lengths.tolist()]
    if len(values) != batch:
        raise OpArgumentError(f"{name} has {len(values)} entries; the call has {batch} batches", argument=name)
    if cumulative:
        ends = [0, *values]
        if any(b < a for a, b in zip(ends, ends[1:])) or ends[-1] > full:
            raise OpArgumentError(
                f"{name}={values} must be cumulative token ends, non-decreasing, at most {full}", argument=name
            )
        return [b - a for a, b in zip(ends, ends[1:])]
    if any(not 0 <= v <= full for v in values):
        raise OpArgumentError(f"{name}={values}: each batch's length must lie in [0, {full}]", argument=name)
    return values


def _batch_keys(tensors: tuple[torch.Tensor, ...], layout: str, b: int, start: int, length: int,
                table: Optional[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Batch ``b``'s first ``length`` key rows of each key-like tensor, as ``[length, N2, ...]``."""
    if layout == "BSND":
        return tuple(t[b, :length] for t in tensors)
    if layout == "TND":
        return tuple(t[start:start + length] for t in tensors)
    block_size = tensors[0].shape[1]
    blocks = -(-length // block_size)
    ids = table[b, :blocks].long()
    if blocks > table.shape[1] or (ids.numel() and (ids.min() < 0 or ids.max() >= tensors[0].shape[0])):
        raise OpArgumentError(f"block_table row {b} must name {blocks} cache blocks within [0, "
                              f"{tensors[0].shape[0]}) for {length} keys", argument="block_table")
    return tuple(t[ids].reshape(blocks * block_size, *t.shape[2:])[:length] for t in tensors)


def _batches(call: Arguments, query: torch.Tensor, keys: tuple[torch.Tensor, ...], q_lengths: str,
             k_lengths: str, query_layout: str, key_layout: str) -> list[_Batch]:
    """Each batch's valid query rows and keys (module docstring)."""
    q_tnd, layout = query_layout == "TND", key_layout
    q_act, k_act = getattr(call, q_lengths), getattr(call, k_lengths)
    batch = q_act.shape[0] if q_tnd else query.shape[0]
    q_full = query.shape[0] if q_tnd else query.shape[1]
    q_lens = _valid_lengths(q_lengths, q_act, batch, q_full, q_tnd)
    k_full = {"BSND": keys[0].shape[1] if keys[0].dim() == 4 else 0, "TND": keys[0].shape[0],
              "PA_BSND": call.block_table.shape[1] * keys[0].shape[1] if call.block_table is not None else 0}[layout]
    k_lens = _valid_lengths(k_lengths, k_act, batch, k_full, layout == "TND")
    out, q_start, k_start = [], 0, 0
    for b in range(batch):
        start = q_start if q_tnd else b * q_full
        out.append(_Batch(start, q_lens[b], _batch_keys(keys, layout, b, k_start, k_lens[b], call.block_table)))
        q_start, k_start = q_start + q_lens[b], k_start + k_lens[b]
    return out


def _visible(q_len: int, k_len: int, causal: bool) -> torch.Tensor:
    """[Lq, Lk] True where query row i may see key j: all, or rightDownCausal ``j <= Lk - Lq + i``."""
    rows = torch.arange(q_len).unsqueeze(1)
    cols = torch.arange(k_len).unsqueeze(0)
    return (cols <= k_len - q_len + rows) if causal else torch.ones(q_len, k_len, dtype=torch.bool)


# ---------------------------------------------------------------------------------------------
# npu_lightning_indexer
# ---------------------------------------------------------------------------------------------


def _indexer_shape(call: Arguments) -> list[int]:
    query, n2 = call.query, _key_heads("key", call.key, call.layout_key)
    lead = list(query.shape[:2]) if call.layout_query == "BSND" else [query.shape[0]]
    return [*lead, n2, call.sparse_count]


def _indexer_inputs(call: Arguments) -> None:
    """Shapes the indexer API pages require of query, key and weights, and the batch counts (metadata
    only; each op checks its own dtypes)."""
    query, key, weights = call.query, call.key, call.weights
    batch, rows, heads = _query_rows("query", query, call.layout_query)
    if _key_heads("key", key, call.layout_key) != 1:
        raise OpArgumentError(
            f"key has {key.shape[-2]} heads; the lightning indexer supports N2 = 1 only", argument="key"
        )
    if query.shape[-1] != INDEXER_HEAD_DIM or key.shape[-1] != INDEXER_HEAD_DIM:
        raise OpArgumentError(f"query and key head dims are {query.shape[-1]} and {key.shape[-1]}; the lightning "
                              f"indexer takes D = {INDEXER_HEAD_DIM} for both", argument="query")
    if heads > INDEXER_MAX_HEADS:
        raise OpArgumentError(
            f"query has {heads} heads; the lightning indexer takes at most {INDEXER_MAX_HEADS}", argument="query"
        )
    want = [rows, heads] if batch is None else [batch, rows, heads]
    if list(weights.shape) != want:
        raise OpArgumentError(
            f"weights has shape {list(weights.shape)}; expected {want} (one weight per query head)", argument="weights"
        )
    _require_batches(call, batch, "actual_seq_lengths_key", "layout_key")


def _indexer_meta(call: Arguments) -> tuple[Out, Out]:
    query, weights = call.query, call.weights
    require_dtype("query", query, HALF_DTYPES)
    require_dtype("key", call.key, (query.dtype,), "(query's dtype)")
    _indexer_inputs(call)
    require_dtype("weights", weights, (query.dtype, torch.float32), "(query's dtype or float32)")
    shape = _indexer_shape(call)
    return Out(shape, torch.int32), Out(shape if call.return_value else [0], query.dtype)


def _indexer_scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """[Lq, Lk] index scores: per query row, sum over heads of ``w * ReLU(q_h . k)``, in float32."""
    products = torch.einsum("qhd,kd->qhk", q.float(), k.float())
    return (torch.relu(products) * w.float().unsqueeze(-1)).sum(dim=1)


def _top_k(scores: torch.Tensor, visible: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's ``count`` highest visible scores, highest first (ties: lower position first); slots past
    the row's visible keys hold index -1 and score -inf."""
    masked = scores.masked_fill(~visible, float("-inf"))
    values, order = torch.sort(masked, dim=-1, descending=True, stable=True)
    keep = min(count, scores.shape[-1])
    indices = torch.full((scores.shape[0], count), -1, dtype=torch.int32)
    top = torch.full((scores.shape[0], count), float("-inf"))
    taken = torch.arange(keep).unsqueeze(0) < visible.sum(dim=-1, keepdim=True)
    indices[:, :keep] = torch.where(taken, order[:, :keep].to(torch.int32), -1)
    top[:, :keep] = torch.where(taken, values[:, :keep], float("-inf"))
    return indices, top


def _indexer_select(call: Arguments, parts: list[tuple[_Batch, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The indexer's outputs from each batch's ``[Lq, Lk]`` float32 scores (shared with the quantized one)."""
    shape = _indexer_shape(call)
    rows = call.query.reshape(-1, *call.query.shape[-2:]).shape[0]
    indices = torch.full((rows, call.sparse_count), -1, dtype=torch.int32)
    values = torch.full((rows, call.sparse_count), float("-inf"))
    for batch, scores in parts:
        if batch.q_len == 0:
            continue
        picked, top = _top_k(scores, _visible(batch.q_len, scores.shape[-1], call.sparse_mode == 3), call.sparse_count)
        indices[batch.start:batch.start + batch.q_len] = picked
        values[batch.start:batch.start + batch.q_len] = top
    return indices.reshape(shape), values.reshape(shape)


def _indexer_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    query, weights = call.query, call.weights
    q = query.reshape(-1, *query.shape[-2:])
    w = weights.reshape(-1, weights.shape[-1])
    batches = _batches(call, query, (call.key,), "actual_seq_lengths_query", "actual_seq_lengths_key",
                       call.layout_query, call.layout_key)
    parts = [(b, _indexer_scores(q[b.start:b.start + b.q_len], b.keys[0][:, 0], w[b.start:b.start + b.q_len]))
             for b in batches]
    indices, values = _indexer_select(call, parts)
    sparse_values = values.to(query.dtype) if call.return_value else query.new_empty(0)
    return indices, sparse_values


def _require_sparse_count(count: int, larger: tuple[int, ...]) -> None:
    if not (1 <= count <= 2048 or count in larger):
        others = f" or be one of {', '.join(map(str, larger))}" if larger else ""
        raise OpArgumentError(
            f"sparse_count={count} is not supported; it must lie in [1, 2048]{others}", argument="sparse_count"
        )


def _paged_indexer_keywords() -> dict:
    """The sample calls' paged case: 3 TND query tokens of 2 batches (1 and 2 tokens) against a cache of
    4 blocks of 16, reading 20 and 9 keys, plain selection of 8."""
    return {"actual_seq_lengths_query": torch.tensor([1, 3], dtype=torch.int32),
            "actual_seq_lengths_key": torch.tensor([20, 9], dtype=torch.int32),
            "block_table": torch.tensor([[2, 0], [3, 1]], dtype=torch.int32),
            "layout_query": "TND", "layout_key": "PA_BSND", "sparse_count": 8, "sparse_mode": 0}


def _indexer_samples() -> list[SampleCall]:
    """BSND with causal selection; TND queries against a paged cache with returned values."""
    gen = torch.Generator().manual_seed(0)
    d = INDEXER_HEAD_DIM
    bsnd = SampleCall(
        (torch.randn(2, 3, 4, d, generator=gen).half(), torch.randn(2, 5, 1, d, generator=gen).half(),
         torch.randn(2, 3, 4, generator=gen).half()),
        {"sparse_count": 4, "return_value": True},
    )
    paged = SampleCall(
        (torch.randn(3, 2, d, generator=gen).bfloat16(), torch.randn(4, 16, 1, d, generator=gen).bfloat16(),
         torch.randn(3, 2, generator=gen)),
        _paged_indexer_keywords(),
    )
    return [bsnd, paged]


@npu_op(meta=_indexer_meta, kernel=_indexer_kernel, samples=_indexer_samples)
def npu_lightning_indexer(call: Arguments) -> None:
    """DeepSeek-V3.2's lightning indexer: each query token's ``sparse_count`` most relevant key positions.

    Source: op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_lightning_indexer.md`` and its reference
    in ``test/test_custom_ops/test_npu_lightning_indexer.py``. A token's score for key ``j`` is
    ``sum_h weights[h] * ReLU(query[h] . key[j])`` (float32); the output ``sparse_indices``
    (``[B, S1, N2, sparse_count]`` or ``[T1, N2, sparse_count]``, int32) lists the highest-scoring visible
    keys, highest first, as positions in the batch's key sequence; slots past the visible keys hold -1.
    ``sparse_values`` holds those scores when ``return_value`` (empty otherwise). ``key`` has one head and
    D = 128 like ``query``; ``weights`` is ``[B, S1, N1]`` / ``[T1, N1]`` in query's dtype or float32.
    """
    _require_layouts(call, "layout_query", "layout_key")
    _require_band(call)
    _require_sparse_count(call.sparse_count, INDEXER_LARGE_COUNTS)
    if call.return_value and call.layout_key == "PA_BSND":
        raise OpArgumentError("return_value=True is supported only when layout_key is not 'PA_BSND'; pass "
                              "return_value=False or unpaged keys", argument="return_value")


# ---------------------------------------------------------------------------------------------
# npu_quant_lightning_indexer
# ---------------------------------------------------------------------------------------------

# The quantized index tensors' dtypes, their torch_npu dtype codes (query_dtype / key_dtype), and the
# (weights, query_dequant_scale, key_dequant_scale) dtypes each allows (the API page's constraints).
_QUANT_INDEX_DTYPES = {
    torch.int8: ("int8", ((torch.float16, torch.float16, torch.float16),)),
    torch.float8_e4m3fn: ("float8_e4m3fn", ((torch.bfloat16, torch.float32, torch.float32),
                                            (torch.float16, torch.float16, torch.float16))),
}


def _require_dtype_code(name: str, code: Optional[int], tensor: torch.Tensor) -> None:
    """``query_dtype`` / ``key_dtype``: None, or torch_npu's code of the tensor's own dtype. HiFloat8
    (uint8 bytes named by ``torch_npu.hifloat8``) has no decoder here, so it is refused by name."""
    if code is None:
        return
    if code == DTYPE_CODES["hifloat8"]:
        raise OpArgumentError(f"{name}=torch_npu.hifloat8 is not implemented by the CPU model; pass int8 or "
                              "float8_e4m3fn tensors", argument=name)
    expected = DTYPE_CODES[_QUANT_INDEX_DTYPES[tensor.dtype][0]]
    if code != expected:
        raise OpArgumentError(f"{name}={code} does not name the tensor's dtype {tensor.dtype}; pass {expected} "
                              "or None", argument=name)


def _quant_indexer_meta(call: Arguments) -> Out:
    query, key = call.query, call.key
    require_dtype("query", query, tuple(_QUANT_INDEX_DTYPES))
    require_dtype("key", key, (query.dtype,), "(query's dtype)")
    _indexer_inputs(call)
    scales = (call.weights.dtype, call.query_dequant_scale.dtype, call.key_dequant_scale.dtype)
    allowed = _QUANT_INDEX_DTYPES[query.dtype][1]
    if scales not in allowed:
        names = " or ".join("(" + ", ".join(str(d).removeprefix("torch.") for d in combo) + ")" for combo in allowed)
        raise OpArgumentError(f"weights, query_dequant_scale, key_dequant_scale have dtypes {scales}; with "
                              f"{query.dtype} inputs they must be {names}", argument="weights")
    if list(call.query_dequant_scale.shape) != list(call.weights.shape):
        raise OpArgumentError(f"query_dequant_scale has shape {list(call.query_dequant_scale.shape)}; expected "
                              f"{list(call.weights.shape)} (one scale per query token and head)",
                              argument="query_dequant_scale")
    if list(call.key_dequant_scale.shape) != list(key.shape[:-1]):
        raise OpArgumentError(f"key_dequant_scale has shape {list(call.key_dequant_scale.shape)}; expected "
                              f"{list(key.shape[:-1])} (one scale per key token and head)",
                              argument="key_dequant_scale")
    _require_dtype_code("query_dtype", call.query_dtype, query)
    _require_dtype_code("key_dtype", call.key_dtype, key)
    return Out(_indexer_shape(call), torch.int32)


def _quant_indexer_kernel(call: Arguments) -> torch.Tensor:
    """The scores of :func:`_indexer_scores` on the dequantized products: ``(q . k) * scale_q * scale_k``
    per head, the integer (or fp8) dot product exact in float32 (128 terms of at most 2**14)."""
    query = call.query
    q = query.reshape(-1, *query.shape[-2:]).float()
    w = call.weights.reshape(-1, call.weights.shape[-1]).float()
    q_scale = call.query_dequant_scale.reshape(w.shape).float()
    batches = _batches(call, query, (call.key, call.key_dequant_scale), "actual_seq_lengths_query",
                       "actual_seq_lengths_key", call.layout_query, call.layout_key)
    parts = []
    for b in batches:
        rows = slice(b.start, b.start + b.q_len)
        keys, k_scale = b.keys[0][:, 0].float(), b.keys[1][:, 0].float()
        products = torch.einsum("qhd,kd->qhk", q[rows], keys) * q_scale[rows].unsqueeze(-1) * k_scale
        parts.append((b, (torch.relu(products) * w[rows].unsqueeze(-1)).sum(dim=1)))
    return _indexer_select(call, parts)[0]


def _quant_indexer_samples() -> list[SampleCall]:
    """int8 BSND queries and keys, and int8 TND queries against a paged cache (int8 only: opcheck's
    schema test compares results with arithmetic torch lacks for float8; tests/ops covers float8)."""
    gen = torch.Generator().manual_seed(0)
    d = INDEXER_HEAD_DIM

    def ints(*shape: int) -> torch.Tensor:
        return torch.randint(-127, 128, shape, generator=gen, dtype=torch.int8)

    def scales(*shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=gen).half()

    bsnd = SampleCall((ints(2, 3, 4, d), ints(2, 5, 1, d), scales(2, 3, 4), scales(2, 3, 4), scales(2, 5, 1), 0, 0),
                      {"sparse_count": 4})
    paged = SampleCall(
        (ints(3, 2, d), ints(4, 16, 1, d), scales(3, 2), scales(3, 2), scales(4, 16, 1), 0, 0),
        _paged_indexer_keywords(),
    )
    return [bsnd, paged]


@npu_op(meta=_quant_indexer_meta, kernel=_quant_indexer_kernel, samples=_quant_indexer_samples)
def npu_quant_lightning_indexer(call: Arguments) -> None:
    """:func:`npu_lightning_indexer` on quantized index tensors (stored in 8 bits, multiplied in 8 bits).

    Source: op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_quant_lightning_indexer.md``. A
    token's score for key ``j`` is ``sum_h weights[h] * ReLU(query_dequant_scale[h] *
    key_dequant_scale[j] * (query[h] . key[j]))``; the top-k, masks and layouts are the unquantized
    op's, and only ``sparse_indices`` is returned. ``query`` / ``key`` are int8 (weights and both scales
    float16) or float8_e4m3fn (bfloat16, float32, float32 or all float16); scales are per token and head
    (``query_quant_mode = key_quant_mode = 0``, the only mode).
    """
    _require_layouts(call, "layout_query", "layout_key")
    _require_band(call)
    _require_sparse_count(call.sparse_count, ())
    for name in ("query_quant_mode", "key_quant_mode"):
        require_choice(name, getattr(call, name), (0,), "0 is per-token-head quantization, the only mode")


# ---------------------------------------------------------------------------------------------
# npu_sparse_flash_attention
# ---------------------------------------------------------------------------------------------

SFA_HEAD_DIM = 512
SFA_ROPE_DIM = 64
SFA_QUERY_HEADS = (1, 2, 4, 8, 16, 32, 64, 128)
SFA_MLA_ABSORB = 2  # attention_mode: query/key are the nope parts, query_rope/key_rope the rope parts


def _require_sparse_modes(call: Arguments) -> None:
    """The modes both sparse attentions' API pages allow: layouts, masks, MLA absorb, block size."""
    _require_layouts(call, "layout_query", "layout_kv")
    _require_band(call)
    require_choice("attention_mode", call.attention_mode, (SFA_MLA_ABSORB,), "2 is MLA absorb, the only mode")
    block = call.sparse_block_size
    if not 1 <= block <= 128 or block & (block - 1):
        raise OpArgumentError(
            f"sparse_block_size={block} must be a power of 2 in [1, 128]", argument="sparse_block_size"
        )


def _sfa_lse_shape(call: Arguments) -> list[int]:
    """softmax_max / softmax_sum: [B, N2, S1, N1/N2] (BSND) or [N2, T1, N1/N2] (TND), op-plugin's meta."""
    query, kv_heads = call.query, call.key.shape[-2]
    if call.layout_query == "TND":
        return [kv_heads, query.shape[0], query.shape[1] // kv_heads]
    return [query.shape[0], kv_heads, query.shape[1], query.shape[2] // kv_heads]


def _sfa_inputs(call: Arguments) -> None:
    """The shapes the SFA API page requires (metadata only)."""
    query, key, value = call.query, call.key, call.value
    batch, rows, heads = _query_rows("query", query, call.layout_query)
    if _key_heads("key", key, call.layout_kv) != 1 or list(value.shape) != list(key.shape):
        raise OpArgumentError(f"key {list(key.shape)} and value {list(value.shape)} must have one shape with one "
                              "KV head (KV_N = 1)", argument="key")
    if heads not in SFA_QUERY_HEADS:
        raise OpArgumentError(
            f"query has {heads} heads; expected one of {', '.join(map(str, SFA_QUERY_HEADS))}", argument="query"
        )
    if query.shape[-1] != SFA_HEAD_DIM or key.shape[-1] != SFA_HEAD_DIM:
        raise OpArgumentError(f"query and key head dims are {query.shape[-1]} and {key.shape[-1]}; SFA takes "
                              f"D = {SFA_HEAD_DIM} for query, key and value", argument="query")
    if call.query_rope is None or call.key_rope is None:
        raise OpArgumentError(
            "attention_mode=2 (MLA absorb) needs query_rope and key_rope; pass both", argument="query_rope"
        )
    for name, rope, like in (("query_rope", call.query_rope, query), ("key_rope", call.key_rope, key)):
        require_dtype(name, rope, (query.dtype,), "(query's dtype)")
        if list(rope.shape) != [*like.shape[:-1], SFA_ROPE_DIM]:
            raise OpArgumentError(
                f"{name} has shape {list(rope.shape)}; expected {[*like.shape[:-1], SFA_ROPE_DIM]}", argument=name
            )
    lead = [rows] if batch is None else [batch, rows]
    _require_selection(call, batch, heads, lead)


def _require_selection(call: Arguments, batch: Optional[int], heads: int, lead: list[int]) -> None:
    """What both sparse attentions require of sparse_indices, sinks, the lengths and the paged cache."""
    indices, key = call.sparse_indices, call.key
    require_dtype("sparse_indices", indices, (torch.int32,))
    if indices.dim() != len(lead) + 2 or list(indices.shape[:-1]) != [*lead, 1] or indices.shape[-1] < 1:
        raise OpArgumentError(
            f"sparse_indices has shape {list(indices.shape)}; expected {[*lead, 1, 'sparse_size']}",
            argument="sparse_indices",
        )
    if call.sinks is not None:
        require_dtype("sinks", call.sinks, (torch.float32,))
        if list(call.sinks.shape) != [heads]:
            raise OpArgumentError(
                f"sinks has shape {list(call.sinks.shape)}; expected [{heads}] (one per query head)", argument="sinks"
            )
    _require_batches(call, batch, "actual_seq_lengths_kv", "layout_kv")
    if call.layout_kv == "PA_BSND" and key.shape[1] % call.sparse_block_size:
        raise OpArgumentError(f"sparse_block_size={call.sparse_block_size} must divide the cache's block_size "
                              f"{key.shape[1]}", argument="sparse_block_size")


def _sfa_meta(call: Arguments) -> tuple[Out, Out, Out]:
    query = call.query
    require_dtype("query", query, HALF_DTYPES)
    require_dtype("key", call.key, (query.dtype,), "(query's dtype)")
    require_dtype("value", call.value, (query.dtype,), "(query's dtype)")
    _sfa_inputs(call)
    lse = _sfa_lse_shape(call) if call.return_softmax_lse else [0]
    return Out(list(query.shape), query.dtype), Out(lse, torch.float32), Out(lse, torch.float32)


def _selected(row: torch.Tensor, block: int, k_len: int) -> torch.Tensor:
    """Key positions one row of ``sparse_indices`` selects: its entries up to the first -1, each the
    ``block`` tokens from ``index * block``, cut at the batch's key length (op-plugin's reference)."""
    ends = (row == -1).nonzero()
    entries = row[: int(ends[0]) if ends.numel() else row.numel()].long()
    if entries.numel() and entries.min() < 0:
        raise OpArgumentError(f"sparse_indices holds {int(entries.min())}; entries are block indices >= 0, "
                              "with -1 marking the end of a row's valid entries", argument="sparse_indices")
    positions = (entries.unsqueeze(1) * block + torch.arange(block)).reshape(-1)
    return positions[positions < k_len]


def _sfa_row(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor,
             scale: float, sinks: Optional[torch.Tensor], rounded: Optional[torch.dtype] = None,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One query row's heads [N1, Dq] against the selected keys: (out [N1, Dv], max [N1], sum [N1]), float32;
    ``rounded`` rounds the probabilities to that dtype before they weight the values (the quantized op's
    second product takes them in query's dtype). A row that sees no key gives zeros (nothing to average)."""
    heads = q.shape[0]
    if positions.numel() == 0:
        return torch.zeros(heads, values.shape[-1]), torch.zeros(heads), torch.zeros(heads)
    scores = (q @ keys[positions].T) * scale
    top = scores.max(dim=-1).values if sinks is None else torch.maximum(scores.max(dim=-1).values, sinks)
    weights = torch.exp(scores - top.unsqueeze(-1))
    total = weights.sum(dim=-1) + (0.0 if sinks is None else torch.exp(sinks - top))
    probabilities = weights / total.unsqueeze(-1)
    if rounded is not None:
        probabilities = probabilities.to(rounded).float()
    return probabilities @ values[positions], top, total


def _attend_selected(call: Arguments, q: torch.Tensor, batches: list[_Batch], width: int,
                     rows_of: Callable[[_Batch], tuple[torch.Tensor, torch.Tensor]],
                     rounded: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every valid query row of ``q`` [rows, N1, Dq] over its selected keys: ``rows_of(batch)`` gives the
    batch's keys [Lk, Dq] and values [Lk, width] in float32. Returns out [rows, N1, width], max and sum."""
    indices = call.sparse_indices.reshape(-1, call.sparse_indices.shape[-1])
    sinks = None if call.sinks is None else call.sinks.float()
    out = torch.zeros(q.shape[0], q.shape[1], width)
    top, total = torch.zeros(q.shape[0], q.shape[1]), torch.zeros(q.shape[0], q.shape[1])
    for batch in batches:
        keys, values = rows_of(batch)
        k_len = keys.shape[0]
        for i in range(batch.q_len):
            row = batch.start + i
            positions = _selected(indices[row], call.sparse_block_size, k_len)
            if call.sparse_mode == 3:
                positions = positions[positions <= k_len - batch.q_len + i]
            out[row], top[row], total[row] = _sfa_row(q[row].float(), keys, values, positions, call.scale_value,
                                                      sinks, rounded)
    return out, top, total


def _sfa_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    query = call.query
    q = torch.cat((query, call.query_rope), dim=-1).reshape(-1, query.shape[-2], query.shape[-1] + SFA_ROPE_DIM)
    batches = _batches(call, query, (call.key, call.key_rope, call.value), "actual_seq_lengths_query",
                       "actual_seq_lengths_kv", call.layout_query, call.layout_kv)

    def rows_of(batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
        key, key_rope, value = batch.keys
        return torch.cat((key, key_rope), dim=-1)[:, 0].float(), value[:, 0].float()

    out, top, total = _attend_selected(call, q, batches, query.shape[-1], rows_of)
    # With one KV head, [rows, N1] is already [B, N2, S1, G] / [N2, T1, G] in memory order.
    lse = _sfa_lse_shape(call) if call.return_softmax_lse else [0]
    if not call.return_softmax_lse:
        top, total = torch.empty(0), torch.empty(0)
    return out.reshape(query.shape).to(query.dtype), top.reshape(lse), total.reshape(lse)


def _sfa_samples() -> list[SampleCall]:
    """BSND causal with block-wise indices and the lse outputs; TND queries against a paged cache with sinks."""
    gen = torch.Generator().manual_seed(0)

    def half(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen).half()

    d, r = SFA_HEAD_DIM, SFA_ROPE_DIM
    key = half(1, 8, 1, d)
    bsnd = SampleCall(
        (half(1, 2, 2, d), key, key, torch.tensor([[[[0, 3, -1]], [[1, 2, 3]]]], dtype=torch.int32), 0.05),
        {"query_rope": half(1, 2, 2, r), "key_rope": half(1, 8, 1, r), "sparse_block_size": 2,
         "attention_mode": 2, "return_softmax_lse": True},
    )
    cache = half(3, 16, 1, d)
    paged = SampleCall(
        (half(3, 4, d), cache, cache, torch.tensor([[[4, 0, -1]], [[1, 9, 2]], [[0, 5, 7]]], dtype=torch.int32), 0.05),
        {"query_rope": half(3, 4, r), "key_rope": half(3, 16, 1, r), "block_table": torch.tensor([[2], [0]],
         dtype=torch.int32), "actual_seq_lengths_query": torch.tensor([1, 3], dtype=torch.int32),
         "actual_seq_lengths_kv": torch.tensor([12, 16], dtype=torch.int32), "layout_query": "TND",
         "layout_kv": "PA_BSND", "attention_mode": 2, "sinks": torch.randn(4, generator=gen)},
    )
    return [bsnd, paged]


@npu_op(meta=_sfa_meta, kernel=_sfa_kernel, samples=_sfa_samples)
def npu_sparse_flash_attention(call: Arguments) -> None:
    """Sparse flash attention (SFA): each query token attends only the keys ``sparse_indices`` selects.

    Source: op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_sparse_flash_attention.md`` and its
    reference in ``test/test_custom_ops/test_npu_sparse_flash_attention.py``. An index ``b`` selects keys
    ``b * sparse_block_size`` .. ``+ sparse_block_size - 1`` (cut at the batch's key length); a row's
    entries end at its first -1. With ``sparse_mode=3`` selected keys past the rightDownCausal bound are
    dropped. MLA absorb (``attention_mode=2``, the only mode): scores are
    ``scale_value * [q, q_rope] . [k, k_rope]``, the softmax runs over the selected keys (plus, with
    ``sinks``, one extra logit per head that takes weight but has no value), and the output is the
    weighted sum of ``value`` rows, float32 then rounded to query's dtype. ``softmax_max`` /
    ``softmax_sum`` (``return_softmax_lse``) are each head's largest score and the sum of
    ``exp(score - max)``; rows past a batch's valid length, and rows that see no key, are zeros.
    """
    _require_sparse_modes(call)
    if call.return_softmax_lse and call.layout_kv == "PA_BSND":
        raise OpArgumentError("return_softmax_lse=True is supported only when layout_kv is not 'PA_BSND'; pass "
                              "return_softmax_lse=False or unpaged keys", argument="return_softmax_lse")


# ---------------------------------------------------------------------------------------------
# npu_kv_quant_sparse_flash_attention
# ---------------------------------------------------------------------------------------------

KV_QUANT_TILE = 128
KV_QUANT_PER_TILE = 2  # key_quant_mode / value_quant_mode: one float32 scale per 128 nope values
KV_QUANT_COMBINED = 1  # quant_scale_repo_mode: the scales stored in the cache row after the rope part
KV_QUANT_QUERY_HEADS = (1, 2, 4, 8, 16, 32, 48, 64, 128)
KV_QUANT_DTYPES = (torch.int8, torch.float8_e4m3fn)


def _cache_row_bytes(query: torch.Tensor) -> int:
    """One combined cache row: 512 quantized nope bytes, the 64 rope values in query's dtype, and the
    float32 scale of each 128-value tile (656 with a 16-bit query; the API page's KV_D)."""
    return SFA_HEAD_DIM + SFA_ROPE_DIM * query.element_size() + 4 * (SFA_HEAD_DIM // KV_QUANT_TILE)


def _dequantized(cache: torch.Tensor, query_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A combined cache's rows [L, D'] as (nope, rope) in query's dtype: each 128-value tile of the nope
    part times its scale, rounded to query's dtype (op-plugin's reference), and the rope part read back
    from its bytes."""
    raw = cache.view(torch.int8) if cache.dtype != torch.int8 else cache
    rope_end = SFA_HEAD_DIM + SFA_ROPE_DIM * torch.empty(0, dtype=query_dtype).element_size()
    nope = cache[..., :SFA_HEAD_DIM].float()
    scales = raw[..., rope_end:].contiguous().view(torch.float32)
    rope = raw[..., SFA_HEAD_DIM:rope_end].contiguous().view(query_dtype)
    return (nope * scales.repeat_interleave(KV_QUANT_TILE, dim=-1)).to(query_dtype), rope


def _kv_quant_meta(call: Arguments) -> Out:
    query, key, value = call.query, call.key, call.value
    require_dtype("query", query, HALF_DTYPES)
    require_dtype("key", key, KV_QUANT_DTYPES)
    require_dtype("value", value, (key.dtype,), "(key's dtype)")
    batch, rows, heads = _query_rows("query", query, call.layout_query)
    if heads not in KV_QUANT_QUERY_HEADS:
        raise OpArgumentError(
            f"query has {heads} heads; expected one of {', '.join(map(str, KV_QUANT_QUERY_HEADS))}", argument="query"
        )
    if query.shape[-1] != SFA_HEAD_DIM + SFA_ROPE_DIM:
        raise OpArgumentError(
            f"query has head dim {query.shape[-1]}; it must be nope 512 + rope 64 = 576", argument="query"
        )
    width = _cache_row_bytes(query)
    if _key_heads("key", key, call.layout_kv) != 1 or key.shape[-1] != width or list(value.shape) != list(key.shape):
        raise OpArgumentError(f"key {list(key.shape)} and value {list(value.shape)} must have one shape with one KV "
                              f"head and rows of {width} bytes (512 quantized values, 64 rope values in query's "
                              "dtype, 4 float32 tile scales)", argument="key")
    _require_selection(call, batch, heads, [rows] if batch is None else [batch, rows])
    return Out([*query.shape[:-1], SFA_HEAD_DIM], query.dtype)


def _kv_quant_kernel(call: Arguments) -> torch.Tensor:
    query = call.query
    q = query.reshape(-1, *query.shape[-2:])
    batches = _batches(call, query, (call.key, call.value), "actual_seq_lengths_query", "actual_seq_lengths_kv",
                       call.layout_query, call.layout_kv)

    def rows_of(batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
        nope, rope = _dequantized(batch.keys[0][:, 0], query.dtype)
        values, _ = _dequantized(batch.keys[1][:, 0], query.dtype)
        return torch.cat((nope, rope), dim=-1).float(), values.float()

    out, _, _ = _attend_selected(call, q, batches, SFA_HEAD_DIM, rows_of, rounded=query.dtype)
    return out.reshape(*query.shape[:-1], SFA_HEAD_DIM).to(query.dtype)


def combined_cache_rows(nope: torch.Tensor, rope: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The combined cache rows the quantized SFA reads, from int8 or float8_e4m3fn nope values [..., 512],
    rope values [..., 64] (query's dtype) and float32 tile scales [..., 4]: their bytes side by side, in
    the nope values' dtype, as op-plugin's test builds them."""
    parts = (nope.contiguous(), rope.contiguous(), scales.contiguous())
    return torch.cat([part.view(torch.int8) for part in parts], dim=-1).view(nope.dtype)


def _kv_quant_samples() -> list[SampleCall]:
    """BSND causal block-wise selection with sinks; TND queries against a paged cache."""
    gen = torch.Generator().manual_seed(0)

    def cache(*lead: int) -> torch.Tensor:
        return combined_cache_rows(torch.randint(-127, 128, (*lead, SFA_HEAD_DIM), generator=gen, dtype=torch.int8),
                                   torch.randn(*lead, SFA_ROPE_DIM, generator=gen).bfloat16(),
                                   torch.rand(*lead, SFA_HEAD_DIM // KV_QUANT_TILE, generator=gen) / 64)

    width = SFA_HEAD_DIM + SFA_ROPE_DIM
    rows = cache(1, 8, 1)
    bsnd = SampleCall(
        (torch.randn(1, 2, 2, width, generator=gen).bfloat16(), rows, rows,
         torch.tensor([[[[0, 3, -1]], [[1, 2, 3]]]], dtype=torch.int32), 0.04, 2, 2),
        {"sparse_block_size": 2, "attention_mode": 2, "sinks": torch.randn(2, generator=gen)},
    )
    paged_rows = cache(3, 16, 1)
    paged = SampleCall(
        (torch.randn(3, 4, width, generator=gen).bfloat16(), paged_rows, paged_rows,
         torch.tensor([[[4, 0, -1]], [[1, 9, 2]], [[0, 5, 7]]], dtype=torch.int32), 0.04, 2, 2),
        {"block_table": torch.tensor([[2], [0]], dtype=torch.int32),
         "actual_seq_lengths_query": torch.tensor([1, 3], dtype=torch.int32),
         "actual_seq_lengths_kv": torch.tensor([12, 16], dtype=torch.int32), "layout_query": "TND",
         "layout_kv": "PA_BSND", "attention_mode": 2},
    )
    return [bsnd, paged]


@npu_op(meta=_kv_quant_meta, kernel=_kv_quant_kernel, samples=_kv_quant_samples)
def npu_kv_quant_sparse_flash_attention(call: Arguments) -> None:
    """:func:`npu_sparse_flash_attention` over a per-tile quantized KV cache (MLA absorb, key and value
    one combined cache).

    Source: op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_kv_quant_sparse_flash_attention.md``
    and its reference in ``test/test_custom_ops/test_npu_kv_quant_sparse_flash_attention.py``. ``query``
    is ``[q_nope, q_rope]`` (576 wide); each cache row holds 512 int8 / float8_e4m3fn nope values, the 64
    rope values in query's dtype and four float32 scales, one per 128 nope values, as bytes
    (:func:`combined_cache_rows`). Keys are ``[dequant(nope), rope]``, values ``dequant(nope)``, both
    rounded to query's dtype; the selection, masks and sinks are SFA's, the probabilities are rounded to
    query's dtype before they weight the values, and the output is 512 wide. The only modes are
    ``key_quant_mode = value_quant_mode = 2`` (per tile), ``quant_scale_repo_mode=1`` (scales in the row),
    ``tile_size=128``, ``rope_head_dim=64``, ``attention_mode=2``; the reserved ``key_dequant_scale`` /
    ``value_dequant_scale`` must be None, and HiFloat8 caches (``key_dtype``) are refused.
    """
    _require_sparse_modes(call)
    for name in ("key_quant_mode", "value_quant_mode"):
        require_choice(name, getattr(call, name), (KV_QUANT_PER_TILE,), "2 is per-tile quantization, the only mode")
    require_choice("quant_scale_repo_mode", call.quant_scale_repo_mode, (KV_QUANT_COMBINED,),
                   "1 stores the scales in the cache row, the only mode")
    require_choice("tile_size", call.tile_size, (KV_QUANT_TILE,), "the values one scale covers")
    require_choice("rope_head_dim", call.rope_head_dim, (SFA_ROPE_DIM,), "the rope part's width")
    for name in ("key_dequant_scale", "value_dequant_scale"):
        if getattr(call, name) is not None:
            raise OpArgumentError(
                f"{name} is a reserved argument; pass None (the scales are in the cache rows)", argument=name
            )
    for name in ("key_dtype", "value_dtype"):
        if getattr(call, name) is not None:
            raise OpArgumentError(f"{name}={getattr(call, name)} is not implemented: only hifloat8 caches set it, "
                                  "which the CPU model does not decode; pass None with int8 or float8_e4m3fn caches",
                                  argument=name)
