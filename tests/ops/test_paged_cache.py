"""npu_gather_pa_kv_cache and npu_scatter_pa_cache against op-plugin's golden loop."""

from __future__ import annotations

import torch

from pytest_npufuse import torch_npu

GEN = torch.Generator().manual_seed(5)


def test_gather_reads_each_sequences_tokens_through_its_table_from_the_offset_block() -> None:
    key_cache, value_cache = torch.randn(6, 4, 2, 16, generator=GEN).half(), torch.randn(6, 4, 2, 8, generator=GEN).half()
    tables = torch.tensor([[3, 1, 5], [0, 2, 4]], dtype=torch.int32)
    key, value = torch.zeros(12, 2, 16).half(), torch.zeros(12, 2, 8).half()
    returned = torch_npu.npu_gather_pa_kv_cache(key_cache, value_cache, tables, torch.tensor([5, 7], dtype=torch.int32),
                                                key, value, seq_offset=torch.tensor([0, 4], dtype=torch.int32))
    expected = []
    for batch, (length, offset) in enumerate(((5, 0), (7, 4))):
        for j in range(length):
            entry = offset // 4 + j // 4
            block = int(tables[batch, entry]) if entry < 3 else -1
            expected.append(key_cache[block, j % 4] if block >= 0 else torch.zeros(2, 16).half())
    assert returned is None and torch.equal(key, torch.stack(expected))


def test_scatter_pa_cache_writes_slots_in_place_and_returns_the_cache() -> None:
    cache, key = torch.zeros(3, 4, 2, 16).half(), torch.randn(3, 2, 16, generator=GEN).half()
    returned = torch_npu.npu_scatter_pa_cache(key, torch.tensor([0, 5, 11], dtype=torch.int32), key_cache=cache)
    assert returned is cache
    assert torch.equal(cache[0, 0], key[0]) and torch.equal(cache[1, 1], key[1]) and torch.equal(cache[2, 3], key[2])
