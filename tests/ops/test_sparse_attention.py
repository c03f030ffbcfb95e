"""npu_lightning_indexer, npu_quant_lightning_indexer and npu_sparse_flash_attention against plain-torch
references written from their API pages (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-<op>.md), their
layouts and their refusals."""

import pytest
import torch

from pytest_npufuse.cost.attention import dense_indexer_flops
from pytest_npufuse.cost.registry import Work
from pytest_npufuse.errors import OpArgumentError
from pytest_npufuse.ir.program import TensorSpec
from pytest_npufuse.torch_npu import (
    npu_kv_quant_sparse_flash_attention,
    npu_lightning_indexer,
    npu_quant_lightning_indexer,
    npu_sparse_flash_attention,
)
from pytest_npufuse.torch_npu.dtypes import DTYPE_CODES
from pytest_npufuse.torch_npu.sparse_attention import combined_cache_rows

D = 128


def _reference(q, k, w, count, causal, q_scale=None, k_scale=None):
    """One batch: q [Lq, N1, D], k [Lk, D], w [Lq, N1] -> (indices [Lq, count], values [Lq, count]).
    Score = sum_h w_h * ReLU(q_h . k) (quantized: ReLU(q_scale_h * k_scale_j * (q_h . k_j))); with causal,
    row i sees keys j <= Lk - Lq + i; unfilled slots -1."""
    lq, lk = q.shape[0], k.shape[0]
    q_scale = torch.ones(w.shape) if q_scale is None else q_scale
    k_scale = torch.ones(lk) if k_scale is None else k_scale
    indices = torch.full((lq, count), -1, dtype=torch.int32)
    values = torch.full((lq, count), float("-inf"))
    for i in range(lq):
        seen = lk - lq + i + 1 if causal else lk
        scores = [sum(float(w[i, h]) * max(float(q_scale[i, h]) * float(k_scale[j])
                                           * float(q[i, h].double() @ k[j].double()), 0.0) for h in range(q.shape[1]))
                  for j in range(seen)]
        order = sorted(range(seen), key=lambda j: -scores[j])[:count]
        indices[i, :len(order)] = torch.tensor(order, dtype=torch.int32)
        values[i, :len(order)] = torch.tensor([scores[j] for j in order])
    return indices, values


def _inputs(shape_q, shape_k, shape_w, dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape_q, generator=gen).to(dtype), torch.randn(shape_k, generator=gen).to(dtype),
            torch.rand(shape_w, generator=gen).to(dtype))


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_bsnd_matches_the_reference(sparse_mode):
    query, key, weights = _inputs((2, 3, 4, D), (2, 6, 1, D), (2, 3, 4))
    lengths_q = torch.tensor([3, 2], dtype=torch.int32)
    lengths_k = torch.tensor([6, 4], dtype=torch.int32)
    indices, values = npu_lightning_indexer(query, key, weights, actual_seq_lengths_query=lengths_q,
                                            actual_seq_lengths_key=lengths_k, sparse_count=5,
                                            sparse_mode=sparse_mode, return_value=True)
    assert indices.shape == values.shape == (2, 3, 1, 5) and indices.dtype == torch.int32
    for b in range(2):
        lq, lk = int(lengths_q[b]), int(lengths_k[b])
        want_i, want_v = _reference(query[b, :lq], key[b, :lk, 0], weights[b, :lq], 5, sparse_mode == 3)
        assert torch.equal(indices[b, :lq, 0], want_i)
        assert torch.allclose(values[b, :lq, 0].float(), want_v.half().float(), rtol=1e-3, equal_nan=True)
        assert (indices[b, lq:] == -1).all()  # rows past the batch's valid length are not computed


def test_paged_tnd_reads_the_same_keys_as_the_dense_layout():
    """TND queries (cumulative lengths) against a PA_BSND cache equal the reference on the gathered keys."""
    query, _, weights = _inputs((5, 2, D), (1,), (5, 2), torch.bfloat16, seed=3)
    cache = torch.randn(6, 16, 1, D, generator=torch.Generator().manual_seed(4)).bfloat16()
    table = torch.tensor([[4, 1], [0, 5]], dtype=torch.int32)
    ends_q, lengths_k = torch.tensor([2, 5], dtype=torch.int32), torch.tensor([20, 7], dtype=torch.int32)
    indices, values = npu_lightning_indexer(query, cache, weights, actual_seq_lengths_query=ends_q,
                                            actual_seq_lengths_key=lengths_k, block_table=table,
                                            layout_query="TND", layout_key="PA_BSND", sparse_count=9)
    assert indices.shape == (5, 1, 9) and values.shape == (0,)
    starts = [0, 2]
    for b in range(2):
        keys = cache[table[b].long()].reshape(-1, D)[: int(lengths_k[b])]
        rows = slice(starts[b], int(ends_q[b]))
        want, _ = _reference(query[rows], keys, weights[rows], 9, causal=True)
        assert torch.equal(indices[rows, 0], want)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"sparse_mode": 1}, "sparse_mode"),
        ({"pre_tokens": 100}, "pre_tokens"),
        ({"sparse_count": 3000}, "sparse_count"),
        ({"layout_key": "TND"}, "layout_key"),
        ({"layout_query": "BNSD"}, "layout_query"),
        ({"block_table": torch.zeros(2, 1, dtype=torch.int32)}, "block_table"),
    ],
)
def test_refused_modes_name_the_argument(change, named):
    query, key, weights = _inputs((2, 1, 4, D), (2, 8, 1, D), (2, 1, 4))
    with pytest.raises(OpArgumentError) as exc:
        npu_lightning_indexer(query, key, weights, **change)
    assert (exc.value.op, exc.value.argument) == ("npu_lightning_indexer", named)


def test_refused_inputs():
    query, key, weights = _inputs((1, 1, 4, D), (1, 8, 2, D), (1, 1, 4))
    with pytest.raises(OpArgumentError) as exc:
        npu_lightning_indexer(query, key, weights)
    assert (exc.value.op, exc.value.argument) == ("npu_lightning_indexer", "key")
    cache = torch.zeros(2, 16, 1, D, dtype=torch.float16)
    with pytest.raises(OpArgumentError) as exc:
        npu_lightning_indexer(query, cache, weights, block_table=torch.zeros(1, 2, dtype=torch.int32),
                              actual_seq_lengths_key=torch.tensor([16], dtype=torch.int32), layout_key="PA_BSND",
                              return_value=True)
    assert (exc.value.op, exc.value.argument) == ("npu_lightning_indexer", "return_value")
    with pytest.raises(OpArgumentError) as exc:
        npu_lightning_indexer(query[0], key[0, :, :1], weights[0], layout_query="TND", layout_key="TND")
    assert (exc.value.op, exc.value.argument) == ("npu_lightning_indexer", "actual_seq_lengths_query")


def test_cost_grows_with_the_keys_scored():
    """The dense_indexer rule counts every (query token, head, key) pair: doubling the paged context
    (the block table's width) doubles the work."""
    def flops(blocks):
        inputs = [TensorSpec((1, 1, 64, D), "bfloat16", 64 * D * 2), TensorSpec((64, 128, 1, D), "bfloat16", 0),
                  TensorSpec((1, 1, 64), "bfloat16", 128), TensorSpec((1,), "int32", 4),
                  TensorSpec((1, blocks), "int32", 4 * blocks)]
        return dense_indexer_flops(Work(inputs, [TensorSpec((1, 1, 1, 2048), "int32", 8192)], [], [], 1.0, 0))
    assert flops(32) == 2 * flops(16) == 64 * 16 * 128 * (2 * D + 3) * 2


@pytest.mark.parametrize("fp8", [False, True])
def test_quant_indexer_matches_the_reference(fp8):
    """int8 (float16 weights and scales) and float8_e4m3fn (bfloat16 weights, float32 scales), BSND, causal."""
    gen = torch.Generator().manual_seed(5)
    if fp8:
        query, key = torch.randn(1, 3, 2, D, generator=gen).to(torch.float8_e4m3fn), \
            torch.randn(1, 7, 1, D, generator=gen).to(torch.float8_e4m3fn)
        dtypes = (torch.bfloat16, torch.float32, torch.float32)
    else:
        query = torch.randint(-127, 128, (1, 3, 2, D), generator=gen, dtype=torch.int8)
        key = torch.randint(-127, 128, (1, 7, 1, D), generator=gen, dtype=torch.int8)
        dtypes = (torch.float16,) * 3
    weights, q_scale, k_scale = (torch.rand(shape, generator=gen).to(dtype)
                                 for shape, dtype in zip(((1, 3, 2), (1, 3, 2), (1, 7, 1)), dtypes))
    indices = npu_quant_lightning_indexer(query, key, weights, q_scale, k_scale, 0, 0, sparse_count=6,
                                          key_dtype=DTYPE_CODES["float8_e4m3fn" if fp8 else "int8"])
    assert indices.shape == (1, 3, 1, 6) and indices.dtype == torch.int32
    want, _ = _reference(query[0].float(), key[0, :, 0].float(), weights[0].float(), 6, True,
                         q_scale[0].float(), k_scale[0, :, 0].float())
    assert torch.equal(indices[0, :, 0], want)


def test_quant_indexer_refusals():
    query = torch.zeros(1, 1, 2, D, dtype=torch.int8)
    key = torch.zeros(1, 4, 1, D, dtype=torch.int8)
    half = torch.zeros(1, 1, 2, dtype=torch.float16)
    k_scale = torch.zeros(1, 4, 1, dtype=torch.float16)
    with pytest.raises(OpArgumentError) as exc:
        npu_quant_lightning_indexer(query, key, half, half, k_scale, 1, 0)
    assert (exc.value.op, exc.value.argument) == ("npu_quant_lightning_indexer", "query_quant_mode")
    with pytest.raises(OpArgumentError) as exc:
        npu_quant_lightning_indexer(query, key, half, half, k_scale, 0, 0, query_dtype=DTYPE_CODES["hifloat8"])
    assert (exc.value.op, exc.value.argument) == ("npu_quant_lightning_indexer", "query_dtype")
    with pytest.raises(OpArgumentError) as exc:
        npu_quant_lightning_indexer(query, key, half, half, k_scale.float(), 0, 0)
    assert (exc.value.op, exc.value.argument) == ("npu_quant_lightning_indexer", "weights")
    with pytest.raises(OpArgumentError) as exc:
        npu_quant_lightning_indexer(query, key, half, half, k_scale, 0, 0, sparse_count=4096)
    assert (exc.value.op, exc.value.argument) == ("npu_quant_lightning_indexer", "sparse_count")


DN, DR = 512, 64


def _sfa_reference(q, q_rope, k, k_rope, v, rows_indices, scale, block, causal, sinks=None):
    """One batch, plain loops: q [Lq, N1, DN], k/v [Lk, DN], indices [Lq, K] -> out [Lq, N1, DN], max, sum.
    Row i's keys: for each index up to the first -1, tokens index*block .. +block-1 below Lk, and with
    causal only those j <= Lk - Lq + i; softmax(scale * [q, q_rope] . [k, k_rope]) (sinks: one extra
    logit per head), times v."""
    lq, lk, heads = q.shape[0], k.shape[0], q.shape[1]
    out, top, total = torch.zeros(lq, heads, DN, dtype=torch.float64), torch.zeros(lq, heads), torch.zeros(lq, heads)
    for i in range(lq):
        keys = []
        for index in rows_indices[i].tolist():
            if index == -1:
                break
            keys += [j for j in range(index * block, index * block + block)
                     if j < lk and (not causal or j <= lk - lq + i)]
        for h in range(heads):
            qh = torch.cat((q[i, h], q_rope[i, h])).double()
            scores = [scale * float(qh @ torch.cat((k[j], k_rope[j])).double()) for j in keys]
            logits = scores + ([float(sinks[h])] if sinks is not None else [])
            m = max(logits)
            weights = [torch.exp(torch.tensor(x - m, dtype=torch.float64)) for x in scores]
            denom = sum(weights) + (torch.exp(torch.tensor(float(sinks[h]) - m, dtype=torch.float64)) if sinks is not None else 0)
            out[i, h] = sum(w * v[j].double() for w, j in zip(weights, keys)) / denom
            top[i, h], total[i, h] = m, float(denom)
    return out, top, total


def _half(gen, *shape):
    return torch.randn(shape, generator=gen).half()


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_sfa_bsnd_matches_the_reference(sparse_mode):
    gen = torch.Generator().manual_seed(11)
    query, q_rope, key, k_rope = _half(gen, 1, 3, 2, DN), _half(gen, 1, 3, 2, DR), _half(gen, 1, 8, 1, DN), \
        _half(gen, 1, 8, 1, DR)
    indices = torch.tensor([[[[3, 0, -1, 2]], [[1, 2, 3, -1]], [[2, 0, 1, 3]]]], dtype=torch.int32)
    out, top, total = npu_sparse_flash_attention(
        query, key, key, indices, 0.04, query_rope=q_rope, key_rope=k_rope, sparse_block_size=2,
        actual_seq_lengths_kv=torch.tensor([7], dtype=torch.int32), sparse_mode=sparse_mode, attention_mode=2,
        return_softmax_lse=True)
    assert out.shape == query.shape and out.dtype == torch.float16
    assert top.shape == total.shape == (1, 1, 3, 2) and top.dtype == torch.float32
    want, want_top, want_total = _sfa_reference(query[0], q_rope[0], key[0, :7, 0], k_rope[0, :7, 0],
                                                key[0, :7, 0], indices[0, :, 0], 0.04, 2, sparse_mode == 3)
    assert torch.allclose(out[0].double(), want, atol=2e-3, rtol=2e-3)
    assert torch.allclose(top[0, 0], want_top, rtol=1e-4) and torch.allclose(total[0, 0], want_total, rtol=1e-4)


def test_sfa_paged_tnd_with_sinks_matches_the_reference():
    gen = torch.Generator().manual_seed(12)
    query, q_rope = _half(gen, 3, 4, DN), _half(gen, 3, 4, DR)
    cache, cache_rope = _half(gen, 4, 16, 1, DN), _half(gen, 4, 16, 1, DR)
    table = torch.tensor([[3, 1], [0, 2]], dtype=torch.int32)
    ends_q, lengths_kv = torch.tensor([1, 3], dtype=torch.int32), torch.tensor([20, 9], dtype=torch.int32)
    indices = torch.tensor([[[19, 4, 0, -1]], [[8, 1, 5, 2]], [[0, 7, -1, 3]]], dtype=torch.int32)
    sinks = torch.randn(4, generator=gen)
    out, top, total = npu_sparse_flash_attention(
        query, cache, cache, indices, 0.05, block_table=table, actual_seq_lengths_query=ends_q,
        actual_seq_lengths_kv=lengths_kv, query_rope=q_rope, key_rope=cache_rope, layout_query="TND",
        layout_kv="PA_BSND", attention_mode=2, sinks=sinks)
    assert out.shape == query.shape and top.shape == total.shape == (0,)
    for b, rows in enumerate((slice(0, 1), slice(1, 3))):
        ids, length = table[b].long(), int(lengths_kv[b])
        keys, keys_rope = cache[ids].reshape(-1, DN)[:length], cache_rope[ids].reshape(-1, DR)[:length]
        want, _, _ = _sfa_reference(query[rows], q_rope[rows], keys, keys_rope, keys, indices[rows, 0], 0.05, 1,
                                    True, sinks)
        assert torch.allclose(out[rows].double(), want, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"attention_mode": 0}, "attention_mode"),
        ({"sparse_block_size": 3}, "sparse_block_size"),
        ({"sparse_mode": 2}, "sparse_mode"),
        ({"query_rope": None}, "query_rope"),
        ({"sparse_indices": torch.tensor([[[[-3]]]], dtype=torch.int32)}, "sparse_indices"),
        ({"sinks": torch.zeros(3)}, "sinks"),
    ],
)
def test_sfa_refusals_name_the_argument(change, named):
    gen = torch.Generator().manual_seed(13)
    arguments = {"query": _half(gen, 1, 1, 2, DN), "key": _half(gen, 1, 4, 1, DN), "query_rope": _half(gen, 1, 1, 2, DR),
                 "key_rope": _half(gen, 1, 4, 1, DR), "sparse_indices": torch.tensor([[[[0]]]], dtype=torch.int32),
                 "attention_mode": 2, **change}
    query, key, indices = arguments.pop("query"), arguments.pop("key"), arguments.pop("sparse_indices")
    with pytest.raises(OpArgumentError) as exc:
        npu_sparse_flash_attention(query, key, key, indices, 0.1, **arguments)
    assert exc.value.argument == named


def test_sfa_catalog_cost_grows_with_the_selected_top_k():
    """npu_sparse_flash_attention is priced by the sparse_attention rule on its own argument order
    (query, key, value, sparse_indices, query_rope, key_rope): the work follows the index's top-k, not
    the cache's length."""
    from pytest_npufuse.cost.attention import sparse_attention_flops
    from pytest_npufuse.target.catalog import load_catalog

    assert load_catalog().entries["npu::npu_sparse_flash_attention"].cost == "sparse_attention"

    def flops(top_k, cached):
        inputs = [TensorSpec((1, 1, 128, DN), "bfloat16", 0), TensorSpec((cached, 1, DN), "bfloat16", 0),
                  TensorSpec((cached, 1, DN), "bfloat16", 0), TensorSpec((1, 1, 1, top_k), "int32", 4 * top_k),
                  TensorSpec((1, 1, 128, DR), "bfloat16", 0), TensorSpec((cached, 1, DR), "bfloat16", 0)]
        return sparse_attention_flops(Work(inputs, [TensorSpec((1, 1, 128, DN), "bfloat16", 0)], [], [], 5.0, 0))

    assert flops(2048, 8192) == flops(2048, 65536) == 2 * flops(1024, 8192)


@pytest.mark.parametrize("fp8", [False, True])
def test_kv_quant_sfa_matches_the_reference(fp8):
    """The cache rows are the API page's bytes (nope, rope, float32 scales). Dequantize by hand (each 128 values times its scale, rounded to bfloat16), then
    SFA's reference; the probabilities are rounded to bfloat16 before the values, as op-plugin's test does."""
    gen = torch.Generator().manual_seed(21)
    if fp8:
        nope = torch.randn(1, 6, 1, DN, generator=gen).to(torch.float8_e4m3fn)
    else:
        nope = torch.randint(-127, 128, (1, 6, 1, DN), generator=gen, dtype=torch.int8)
    rope = torch.randn(1, 6, 1, DR, generator=gen).bfloat16()
    scales = torch.rand(1, 6, 1, DN // 128, generator=gen) / 32
    cache = combined_cache_rows(nope, rope, scales)
    query = torch.randn(1, 2, 2, DN + DR, generator=gen).bfloat16()
    indices = torch.tensor([[[[5, 1, 0, -1]], [[2, 4, 5, 3]]]], dtype=torch.int32)
    out = npu_kv_quant_sparse_flash_attention(query, cache, cache, indices, 0.05, 2, 2, attention_mode=2)
    assert out.shape == (1, 2, 2, DN) and out.dtype == torch.bfloat16
    keys = (nope.float() * scales.repeat_interleave(128, dim=-1)).bfloat16()[0, :, 0]
    lq, lk = 2, 6
    for i in range(lq):
        chosen = [j for j in indices[0, i, 0].tolist() if j >= 0][: [*indices[0, i, 0].tolist(), -1].index(-1)]
        chosen = [j for j in chosen if j <= lk - lq + i]
        full = torch.cat((keys, rope[0, :, 0]), dim=-1).double()[chosen]
        scores = (query[0, i].double() @ full.T) * 0.05
        p = torch.softmax(scores, dim=-1).bfloat16().double()
        want = p @ keys.double()[chosen]
        assert torch.allclose(out[0, i].double(), want, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"key_quant_mode": 0}, "key_quant_mode"),
        ({"quant_scale_repo_mode": 0}, "quant_scale_repo_mode"),
        ({"tile_size": 64}, "tile_size"),
        ({"key_dtype": DTYPE_CODES["hifloat8"]}, "key_dtype"),
        ({"key_dequant_scale": torch.zeros(1)}, "key_dequant_scale"),
        ({"attention_mode": 0}, "attention_mode"),
    ],
)
def test_kv_quant_sfa_refusals(change, named):
    cache = combined_cache_rows(torch.zeros(1, 4, 1, DN, dtype=torch.int8), torch.zeros(1, 4, 1, DR, dtype=torch.bfloat16),
                      torch.ones(1, 4, 1, 4))
    query = torch.zeros(1, 1, 2, DN + DR, dtype=torch.bfloat16)
    indices = torch.tensor([[[[0]]]], dtype=torch.int32)
    arguments = {"key_quant_mode": 2, "value_quant_mode": 2, "attention_mode": 2, **change}
    modes = arguments.pop("key_quant_mode"), arguments.pop("value_quant_mode")
    with pytest.raises(OpArgumentError) as exc:
        npu_kv_quant_sparse_flash_attention(query, cache, cache, indices, 0.1, *modes, **arguments)
    assert exc.value.argument == named
    with pytest.raises(OpArgumentError) as exc:
        npu_kv_quant_sparse_flash_attention(query, cache[..., :600], cache[..., :600], indices, 0.1, 2, 2,
                                            attention_mode=2)
    assert (exc.value.op, exc.value.argument) == ("npu_kv_quant_sparse_flash_attention", "key")
