"""Paged KV-cache reads and single-cache writes: ``npu_gather_pa_kv_cache`` and ``npu_scatter_pa_cache``.

The gather turns the blocks a block table names back into contiguous key/value rows (vLLM-Ascend's chunked
prefill of MLA reads its cache so); the scatter writes one cache, as :func:`~.memory.npu_scatter_pa_kv_cache`
writes two.
"""

from __future__ import annotations

import torch

from ..errors import OpArgumentError
from .checks import require_dtype, require_shape, require_unused
from .memory import nz_run, write_slots
from .registry import Arguments, Out, SampleCall, npu_op

GATHER_DTYPES = (torch.int8, torch.float16, torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# npu_gather_pa_kv_cache
# ---------------------------------------------------------------------------------------------


def _is_nz(rows: torch.Tensor) -> bool:
    """PA_NZ rows are [tokens, heads x head_size]; Norm rows [tokens, heads, head_size] (the doc ties each
    shape to its cache mode, which torch_npu picks from the cache's format)."""
    return rows.dim() == 2


def _check_gather_cache(name: str, cache: torch.Tensor, rows: torch.Tensor) -> None:
    require_dtype(name, rows, GATHER_DTYPES)
    require_dtype(f"{name}_cache", cache, (rows.dtype,), f"({name}'s dtype)")
    if _is_nz(rows):
        run = nz_run(cache)
        ok = cache.dim() == 4 and cache.shape[-1] == run and cache.shape[1] * run == rows.shape[1]
        expected = f"[blocks, {rows.shape[1] // run}, block_size, {run}] (PA_NZ)"
    else:
        ok = rows.dim() == 3 and cache.dim() == 4 and tuple(cache.shape[2:]) == tuple(rows.shape[1:])
        expected = f"[blocks, block_size, {', '.join(str(s) for s in rows.shape[1:])}] (Norm)"
    if not ok:
        raise OpArgumentError(f"{name}_cache has shape {list(cache.shape)} for {name} {list(rows.shape)}; "
                              f"expected {expected}")


def _gather_meta(call: Arguments) -> tuple[Out, Out]:
    key, value = call.key, call.value
    if _is_nz(key) != _is_nz(value) or key.shape[0] != value.shape[0]:
        raise OpArgumentError(f"key {list(key.shape)} and value {list(value.shape)} must both be [tokens, heads, "
                              "head_size] (Norm) or both [tokens, heads x head_size] (PA_NZ), with one token count")
    _check_gather_cache("key", call.key_cache, key)
    _check_gather_cache("value", call.value_cache, value)
    if call.key_cache.shape[0] != call.value_cache.shape[0]:
        raise OpArgumentError("key_cache and value_cache must hold the same number of blocks")
    require_dtype("block_tables", call.block_tables, (torch.int32,))
    require_dtype("seq_lens", call.seq_lens, (torch.int32,))
    if call.block_tables.dim() != 2:
        raise OpArgumentError(f"block_tables has shape {list(call.block_tables.shape)}; expected [batch, blocks]")
    batch = call.block_tables.shape[0]
    require_shape("seq_lens", call.seq_lens, ((batch + 1,),) if call.is_seq_lens_cumsum else ((batch,),))
    if call.seq_offset is not None:
        require_dtype("seq_offset", call.seq_offset, (torch.int32,))
        require_shape("seq_offset", call.seq_offset, ((batch,),))
    return Out(list(key.shape), key.dtype), Out(list(value.shape), value.dtype)


def _cache_rows(cache: torch.Tensor, nz: bool) -> torch.Tensor:
    """The cache as [blocks, block_size, row] (a PA_NZ block's runs joined back into rows), plus one zero
    block at the end, which the slots of missing blocks read."""
    rows = cache.transpose(1, 2) if nz else cache
    rows = rows.reshape(cache.shape[0], rows.shape[1], -1)
    return torch.cat([rows, rows.new_zeros(1, *rows.shape[1:])])


def _token_slots(call: Arguments, block_size: int, blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (block, offset) each gathered token reads, in output order: batch by batch, token j of batch i
    from entry ``seq_offset[i] // block_size + j // block_size`` of its table row at offset
    ``j % block_size``; an entry past the table or a block id outside the cache reads the zero block."""
    lengths = call.seq_lens.to(torch.int64)
    if call.is_seq_lens_cumsum:
        lengths = lengths[1:] - lengths[:-1]
    if bool((lengths < 0).any()):
        raise OpArgumentError("seq_lens must be non-negative (and non-decreasing with is_seq_lens_cumsum=True)")
    table = call.block_tables.to(torch.int64)
    batch_of = torch.repeat_interleave(torch.arange(table.shape[0]), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    position = torch.arange(batch_of.numel()) - starts[batch_of]
    first = torch.zeros_like(lengths) if call.seq_offset is None else call.seq_offset.to(torch.int64) // block_size
    entry = first[batch_of] + position // block_size
    inside = entry < table.shape[1]
    block = torch.where(inside, table[batch_of, entry.clamp(max=table.shape[1] - 1)], blocks)
    block = torch.where((block >= 0) & (block < blocks), block, blocks)
    return block, position % block_size


def _gather_into(rows: torch.Tensor, cache: torch.Tensor, block: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """``rows`` (copied) with its leading tokens replaced by the cache's rows at (block, offset); tokens past
    ``rows``' length are not read, rows past the gathered ones keep their values (the op writes in place)."""
    gathered = _cache_rows(cache, _is_nz(rows))[block, offset]
    out = rows.clone(memory_format=torch.contiguous_format)
    count = min(out.shape[0], gathered.shape[0])
    out.view(out.shape[0], -1)[:count] = gathered[:count]
    return out


def _gather_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    nz = _is_nz(call.key)
    block_size = call.key_cache.shape[2] if nz else call.key_cache.shape[1]
    block, offset = _token_slots(call, block_size, call.key_cache.shape[0])
    return (_gather_into(call.key, call.key_cache, block, offset),
            _gather_into(call.value, call.value_cache, block, offset))


def _gather_samples() -> list[SampleCall]:
    """Two sequences of 5 and 7 tokens from Norm caches of 6 blocks of 4 slots (the second from entry 1 of its
    table row, its seq_offset 4), with cumulative lengths; and a PA_NZ cache of 16-value runs."""
    gen = torch.Generator().manual_seed(0)
    key_cache = torch.randn(6, 4, 2, 16, generator=gen).half()
    value_cache = torch.randn(6, 4, 2, 8, generator=gen).half()
    tables = torch.tensor([[3, 1, 5], [0, 2, 4]], dtype=torch.int32)
    key, value = torch.zeros(12, 2, 16).half(), torch.zeros(12, 2, 8).half()
    nz_cache = torch.randn(6, 2, 4, 16, generator=gen).bfloat16()
    return [
        SampleCall((key_cache, value_cache, tables, torch.tensor([5, 7], dtype=torch.int32), key, value),
                   {"seq_offset": torch.tensor([0, 4], dtype=torch.int32)}),
        SampleCall((key_cache, value_cache, tables, torch.tensor([0, 5, 12], dtype=torch.int32), key, value),
                   {"is_seq_lens_cumsum": True}),
        SampleCall((nz_cache, nz_cache, tables, torch.tensor([3, 6], dtype=torch.int32), torch.zeros(9, 32).bfloat16(),
                    torch.zeros(9, 32).bfloat16())),
    ]


@npu_op(meta=_gather_meta, kernel=_gather_kernel, writes_back={"key": 0, "value": 1}, schema_mutates=True,
        samples=_gather_samples)
def npu_gather_pa_kv_cache(call: Arguments) -> None:
    """Gather each sequence's tokens from a paged KV cache into contiguous ``key``/``value`` rows, in place.

    Sources: aclnnGatherPaKvCache (hicann/ops-transformer attention/gather_pa_kv_cache/docs/
    aclnnGatherPaKvCache.md: shapes, dtypes, ``seqLens`` plain or cumulative, ``seqOffset``), op-plugin
    op_plugin/ops/opapi/GatherPaKvCacheKernelNpuOpApi.cpp (the cache mode follows the cache's format; the
    ``_functional`` form clones key and value first) and test/test_custom_ops/test_npu_gather_pa_kv_cache.py
    (golden: block offset ``j % block_size``; a table entry past the row or a block id outside the cache
    gives zeros; gathering stops at key's token count).

    * Norm: caches [blocks, block_size, heads, head_size], ``key``/``value`` [tokens, heads, head_size].
    * PA_NZ: caches [blocks, heads x head_size / c, block_size, c] (c = 32 bytes of values), rows
      [tokens, heads x head_size].
    * int8, float16, bfloat16; ``block_tables``, ``seq_lens`` and ``seq_offset`` int32 (the A2/A3 rows).
    * Sequence i's token j reads table entry ``seq_offset[i] // block_size + j // block_size``.
    """


# ---------------------------------------------------------------------------------------------
# npu_scatter_pa_cache
# ---------------------------------------------------------------------------------------------


def _scatter_pa_cache_meta(call: Arguments) -> Out:
    key, cache = call.key, call.key_cache
    require_dtype("key", key, GATHER_DTYPES + (torch.float32,))
    require_dtype("key_cache", cache, (key.dtype,), "(key's dtype)")
    require_dtype("slot_mapping", call.slot_mapping, (torch.int32, torch.int64))
    require_shape("slot_mapping", call.slot_mapping, ((key.shape[0],),))
    if key.dim() != 3 or cache.dim() != 4 or tuple(cache.shape[2:]) != tuple(key.shape[1:]):
        raise OpArgumentError(f"key {list(key.shape)} and key_cache {list(cache.shape)} must be [tokens, heads, "
                              "head_size] and [blocks, block_size, heads, head_size] (the Norm cache)")
    return Out(list(cache.shape), cache.dtype)


def _scatter_pa_cache_kernel(call: Arguments) -> torch.Tensor:
    return write_slots(call.key_cache, call.key, call.slot_mapping)


def _scatter_pa_cache_samples() -> list[SampleCall]:
    """Five tokens of 2 heads into a float16 cache of 3 blocks of 4 slots, one slot named twice."""
    gen = torch.Generator().manual_seed(0)
    key = torch.randn(5, 2, 16, generator=gen).half()
    slots = torch.tensor([0, 5, 6, 11, 5], dtype=torch.int32)
    return [SampleCall((key, slots), {"key_cache": torch.zeros(3, 4, 2, 16).half()})]


@npu_op(meta=_scatter_pa_cache_meta, kernel=_scatter_pa_cache_kernel, writes_back={"key_cache": 0},
        samples=_scatter_pa_cache_samples)
def npu_scatter_pa_cache(call: Arguments) -> None:
    """Write each token's row into its slot of one paged cache, in place, and return the cache.

    Sources: op-plugin op_plugin_functions.yaml (``npu_scatter_pa_cache.value`` runs aclnnScatterPaCache
    with cache_mode ``"Norm"``) and aclnnScatterPaKvCache's scenario 2, the same write for a key and a value
    cache (hicann/ops-transformer attention/scatter_pa_kv_cache/docs): ``key`` [tokens, heads, head_size],
    ``key_cache`` [blocks, block_size, heads, head_size] in key's dtype, ``slot_mapping`` int32/int64
    [tokens]: token t goes to block ``slot // block_size``, offset ``slot % block_size``; when two tokens
    name one slot the later one stays. The compression inputs are not modeled.
    """
    require_unused("npu_scatter_pa_cache (the compression scenarios)", compress_lens=call.compress_lens,
                   compress_seq_offsets=call.compress_seq_offsets, seq_lens=call.seq_lens)
