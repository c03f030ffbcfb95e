"""npu_scatter_pa_kv_cache (ScatterPaKvCache) against its README's scenarios 1 (PA_NZ) and 2 (Norm)."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu

BLOCKS, BLOCK, HEADS, K_DIM, V_DIM = 3, 4, 2, 32, 16


def _tokens(dtype: torch.dtype, tokens: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    if dtype == torch.int8:
        return (torch.randint(-128, 127, (tokens, HEADS, K_DIM), generator=gen, dtype=torch.int8),
                torch.randint(-128, 127, (tokens, HEADS, V_DIM * 2), generator=gen, dtype=torch.int8))
    return torch.randn(tokens, HEADS, K_DIM, generator=gen).to(dtype), torch.randn(tokens, HEADS, V_DIM, generator=gen).to(dtype)


def test_norm_caches_get_each_token_at_its_block_and_offset_in_place():
    key, value = _tokens(torch.bfloat16)
    key_cache = torch.zeros(BLOCKS, BLOCK, HEADS, K_DIM, dtype=torch.bfloat16)
    value_cache = torch.zeros(BLOCKS, BLOCK, HEADS, V_DIM, dtype=torch.bfloat16)
    slots = torch.tensor([0, 5, 6, 11, 3], dtype=torch.int32)
    assert torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slots, cache_mode="Norm") is None
    for t, slot in enumerate(slots.tolist()):
        assert torch.equal(key_cache[slot // BLOCK, slot % BLOCK], key[t])
        assert torch.equal(value_cache[slot // BLOCK, slot % BLOCK], value[t])
    assert int((key_cache.abs().sum(dim=(2, 3)) != 0).sum()) == len(slots)


@pytest.mark.parametrize("dtype", [torch.float16, torch.int8])
@pytest.mark.parametrize("five_dims", [False, True])
def test_pa_nz_caches_store_each_row_in_32_byte_runs(dtype, five_dims):
    key, value = _tokens(dtype)
    caches = []
    for rows in (key, value):
        run = 32 // rows.element_size()
        features = rows.shape[1] * rows.shape[2]
        shape = (BLOCKS, HEADS, rows.shape[2] // run, BLOCK, run) if five_dims else (BLOCKS, features // run, BLOCK, run)
        caches.append(torch.zeros(shape, dtype=dtype))
    slots = torch.tensor([1, 4, 9, 10, 2])
    torch_npu.npu_scatter_pa_kv_cache(key, value, caches[0], caches[1], slots)  # the shapes say PA_NZ
    for rows, cache in zip((key, value), caches):
        run = 32 // rows.element_size()
        nz = cache.reshape(BLOCKS, -1, BLOCK, run)
        for t, slot in enumerate(slots.tolist()):
            assert torch.equal(nz[slot // BLOCK, :, slot % BLOCK, :].reshape(-1), rows[t].reshape(-1))


def test_repeated_slots_keep_the_last_token_and_bad_arguments_are_named():
    key, value = _tokens(torch.float16, tokens=3)
    key_cache = torch.zeros(BLOCKS, BLOCK, HEADS, K_DIM, dtype=torch.float16)
    value_cache = torch.zeros(BLOCKS, BLOCK, HEADS, V_DIM, dtype=torch.float16)
    torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, torch.tensor([7, 7, 1]))
    assert torch.equal(key_cache[1, 3], key[1])
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache.transpose(1, 2), value_cache, torch.tensor([0, 1, 2]),
                                          cache_mode="Norm")
    assert (exc.value.op, exc.value.argument) == ("npu_scatter_pa_kv_cache", "key")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_scatter_pa_kv_cache(key, value, torch.zeros(BLOCKS, 5, BLOCK, 16, dtype=torch.float16),
                                          value_cache, torch.tensor([0, 1, 2]), cache_mode="PA_NZ")
    assert (exc.value.op, exc.value.argument) == ("npu_scatter_pa_kv_cache", "key")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, torch.tensor([0, 1, 2]),
                                          seq_lens=torch.tensor([3]))
    assert (exc.value.op, exc.value.argument) == ("npu_scatter_pa_kv_cache", "seq_lens")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, torch.tensor([0, 1, 99]))
    assert (exc.value.op, exc.value.argument) == ("npu_scatter_pa_kv_cache", "indices")


def test_compiled_it_is_one_node_and_writes_the_caches():
    key, value = _tokens(torch.bfloat16)
    slots = torch.tensor([0, 1, 2, 3, 4])

    def write(k, v, kc, vc, s):
        torch_npu.npu_scatter_pa_kv_cache(k, v, kc, vc, s, cache_mode="Norm")
        return kc.sum() + vc.sum()

    eager = [torch.zeros(BLOCKS, BLOCK, HEADS, d, dtype=torch.bfloat16) for d in (K_DIM, V_DIM)]
    compiled = [torch.zeros_like(c) for c in eager]
    write(key, value, *eager, slots)
    torch.compile(write, backend="aot_eager", fullgraph=True)(key, value, *compiled, slots)
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))
