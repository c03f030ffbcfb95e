"""The private ATB ops (``torch_npu._npu_*``) against float64 per-sequence attention, written from op-plugin's
reference computations: they write ``out`` / the caches in place and return None."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(23)


def _ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, visible: torch.Tensor) -> torch.Tensor:
    """q [Sq, N, D], k/v [Skv, N_kv, *]: float64 softmax(scale q k^T) v as [Sq, N, Dv]."""
    group = q.shape[1] // k.shape[1]
    kk, vv = (t.double().transpose(0, 1).repeat_interleave(group, 0) for t in (k, v))
    scores = (q.double().transpose(0, 1) @ kk.transpose(-1, -2)) * scale
    probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    return (probs @ vv).transpose(0, 1)


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual.double(), expected.to(actual.dtype).double(), rtol=2e-2, atol=2e-2)


def _paged(tokens: torch.Tensor, lens: list[int], table: torch.Tensor, blocks: int, block: int) -> torch.Tensor:
    """A [blocks, block, N, D] cache holding each sequence's tokens (packed in ``tokens``) in its table's blocks."""
    cache = torch.zeros(blocks, block, *tokens.shape[1:], dtype=tokens.dtype)
    start = 0
    for b, length in enumerate(lens):
        for pos in range(length):
            cache[table[b, pos // block], pos % block] = tokens[start + pos]
        start += length
    return cache


def test_flash_attention_masks_each_sequence_with_the_table_corner_and_returns_none() -> None:
    gen = _gen()
    lens, heads, kv_heads, d = [3, 5], 4, 2, 16
    total = sum(lens)
    q = torch.randn(total, heads, d, generator=gen).to(torch.float16)
    k, v = (torch.randn(total, kv_heads, d, generator=gen).to(torch.float16) for _ in range(2))
    mask = torch.triu(torch.ones(8, 8), 1).to(torch.float16) * -10000.0
    out = torch.empty_like(q)
    assert torch_npu._npu_flash_attention(q, k, v, mask, torch.tensor(lens, dtype=torch.int32), 0.25, heads,
                                          kv_heads, out) is None
    start = 0
    for length in lens:
        seg = slice(start, start + length)
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        _close(out[seg], _ref(q[seg], k[seg], v[seg], 0.25, causal))
        start += length
    ones = torch.triu(torch.ones(8, 8), 1).to(torch.float16)  # vllm-ascend's bfloat16-style 0/1 mask
    same = torch.empty_like(q)
    torch_npu._npu_flash_attention(q, k, v, ones, torch.tensor(lens), 0.25, heads, kv_heads, same)
    assert torch.equal(same, out)


def test_flash_attention_unpad_is_full_attention_per_sequence_with_2d_tensors() -> None:
    gen = _gen()
    lens, heads, d = [2, 4], 2, 8
    q, k, v = (torch.randn(sum(lens), heads * d, generator=gen).to(torch.bfloat16) for _ in range(3))
    out = torch.zeros(sum(lens), heads * d, dtype=torch.bfloat16)
    torch_npu._npu_flash_attention_unpad(query=q, key=k, value=v, seq_len=torch.tensor(lens), scale_value=0.3,
                                         num_heads=heads, num_kv_heads=heads, out=out)
    start = 0
    for length in lens:
        seg = slice(start, start + length)
        expected = _ref(*(t[seg].reshape(length, heads, d) for t in (q, k, v)), 0.3,
                        torch.ones(length, length, dtype=torch.bool))
        _close(out[seg].reshape(length, heads, d), expected)
        start += length


def test_qlens_attends_causally_from_each_sequence_context_end() -> None:
    gen = _gen()
    heads, kv_heads, d, block, blocks = 4, 1, 16, 4, 8
    context = [6, 9]  # whole sequences in the cache
    new = [2, 3]  # their last tokens are the queries
    table = torch.tensor([[3, 0, 5], [1, 7, 2]], dtype=torch.int32)
    k_tokens, v_tokens = (torch.randn(sum(context), kv_heads, d, generator=gen).to(torch.bfloat16) for _ in range(2))
    key_cache, value_cache = (_paged(t, context, table, blocks, block) for t in (k_tokens, v_tokens))
    q = torch.randn(sum(new), heads, d, generator=gen).to(torch.bfloat16)
    out = torch.empty_like(q)
    mask = torch.triu(torch.ones(128, 128), 1).to(torch.bfloat16)
    torch_npu._npu_flash_attention_qlens(query=q, key_cache=key_cache, value_cache=value_cache, block_table=table,
                                         mask=mask, seq_len=torch.tensor(new), context_lens=torch.tensor(context),
                                         num_kv_heads=kv_heads, num_heads=heads, scale_value=0.2, out=out)
    q_start, kv_start = 0, 0
    for n, c in zip(new, context):
        positions = torch.arange(c - n, c).reshape(-1, 1)
        visible = torch.arange(c).reshape(1, -1) <= positions
        expected = _ref(q[q_start:q_start + n], k_tokens[kv_start:kv_start + c], v_tokens[kv_start:kv_start + c],
                        0.2, visible)
        _close(out[q_start:q_start + n], expected)
        q_start, kv_start = q_start + n, kv_start + c
    with pytest.raises(ValueError) as exc:
        torch_npu._npu_flash_attention_qlens(q, key_cache, value_cache, table, torch.zeros(128, 128), torch.tensor(new),
                                             torch.tensor(context), kv_heads, heads, 0.2, out)
    assert (exc.value.op, exc.value.argument) == ("_npu_flash_attention_qlens", "mask")


def test_reshape_and_cache_then_paged_attention_decode() -> None:
    gen = _gen()
    heads, kv_heads, d, block, blocks = 4, 2, 8, 4, 6
    key_cache = torch.zeros(blocks, block, kv_heads, d, dtype=torch.float16)
    value_cache = torch.zeros_like(key_cache)
    table = torch.tensor([[2, 0], [5, 1]], dtype=torch.int32)
    context = [5, 3]
    k_tokens, v_tokens = (torch.randn(sum(context), kv_heads, d, generator=gen).to(torch.float16) for _ in range(2))
    slots = torch.tensor([int(table[b, p // block]) * block + p % block for b, c in enumerate(context)
                          for p in range(c)], dtype=torch.int32)
    assert torch_npu._npu_reshape_and_cache(key=k_tokens, value=v_tokens, key_cache=key_cache,
                                            value_cache=value_cache, slot_indices=slots) is None
    assert torch.equal(key_cache, _paged(k_tokens, context, table, blocks, block))
    q = torch.randn(2, heads, d, generator=gen).to(torch.float16)
    out = torch.empty_like(q)
    torch_npu._npu_paged_attention(query=q, key_cache=key_cache, value_cache=value_cache, num_kv_heads=kv_heads,
                                   num_heads=heads, scale_value=0.35, block_table=table,
                                   context_lens=torch.tensor(context, dtype=torch.int32), out=out)
    start = 0
    for b, c in enumerate(context):
        expected = _ref(q[b:b + 1], k_tokens[start:start + c], v_tokens[start:start + c], 0.35,
                        torch.ones(1, c, dtype=torch.bool))
        _close(out[b:b + 1], expected)
        start += c


def test_atb_ops_trace_to_one_node_each_and_fake_shapes_match() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    gen = _gen()
    q = torch.randn(4, 2, 8, generator=gen).to(torch.float16)
    lens = torch.tensor([1, 3], dtype=torch.int32)

    def call(query: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(query)
        torch_npu._npu_flash_attention_unpad(query, query, query, seq, 0.5, 2, 2, out)
        return out

    eager = call(q, lens)
    with FakeTensorMode() as mode:
        fake = call(mode.from_tensor(q), mode.from_tensor(lens))
    assert (fake.shape, fake.dtype) == (eager.shape, eager.dtype)
    graphs = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)
        return gm.forward

    assert torch.equal(torch.compile(call, backend=backend, fullgraph=True)(q, lens), eager)
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert targets.count("npu._npu_flash_attention_unpad") == 1
