"""npu_fused_infer_attention_score_v2: v1's computation under the renamed keywords, and its NBSD / NTD outputs."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError

CAUSAL = torch.ones(2048, 2048, dtype=torch.bool).triu(diagonal=1)


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(17)


def test_v2_tnd_ntd_is_v1_tnd_heads_first_with_the_same_lse() -> None:
    gen = _gen()
    q = torch.randn(7, 4, 16, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(7, 2, 16, generator=gen).to(torch.bfloat16) for _ in range(2))
    ends = [3, 7]
    out, lse = torch_npu.npu_fused_infer_attention_score_v2(
        q, k, v, num_query_heads=4, num_key_value_heads=2, input_layout="TND_NTD", actual_seq_qlen=ends,
        actual_seq_kvlen=ends, sparse_mode=3, atten_mask=CAUSAL, softmax_scale=0.25, return_softmax_lse=True)
    v1_out, v1_lse = torch_npu.npu_fused_infer_attention_score(
        q, k, v, num_heads=4, num_key_value_heads=2, input_layout="TND", actual_seq_lengths=ends,
        actual_seq_lengths_kv=ends, sparse_mode=3, atten_mask=CAUSAL, scale=0.25, softmax_lse_flag=True)
    assert out.shape == (4, 7, 16) and lse.shape == (7, 4, 1)
    assert torch.equal(out, v1_out.transpose(0, 1)) and torch.equal(lse, v1_lse)


def test_v2_mla_paged_decode_bnsd_nbsd() -> None:
    """vllm-ascend's MLA decode: BNSD query with rope, [blocks, 1, block_size, D] caches, NBSD output."""
    gen = _gen()
    tokens, heads, rank, rope, block, blocks = 3, 8, 32, 16, 4, 6
    q_nope = torch.randn(tokens, heads, 1, rank, generator=gen).to(torch.bfloat16)
    q_pe = torch.randn(tokens, heads, 1, rope, generator=gen).to(torch.bfloat16)
    k_nope = torch.randn(blocks, 1, block, rank, generator=gen).to(torch.bfloat16)
    k_pe = torch.randn(blocks, 1, block, rope, generator=gen).to(torch.bfloat16)
    table = torch.tensor([[0, 1], [2, 3], [5, 4]], dtype=torch.int32)
    seq_lens = [5, 8, 2]
    out, lse = torch_npu.npu_fused_infer_attention_score_v2(
        q_nope, k_nope, k_nope, query_rope=q_pe, key_rope=k_pe, num_query_heads=heads, num_key_value_heads=1,
        input_layout="BNSD_NBSD", atten_mask=None, sparse_mode=0, softmax_scale=0.1, block_table=table,
        block_size=block, actual_seq_qlen=None, actual_seq_kvlen=seq_lens)
    v1, _ = torch_npu.npu_fused_infer_attention_score(
        q_nope, k_nope, k_nope, query_rope=q_pe, key_rope=k_pe, num_heads=heads, num_key_value_heads=1,
        input_layout="BNSD", scale=0.1, block_table=table, block_size=block, actual_seq_lengths_kv=seq_lens)
    assert out.shape == (heads, tokens, 1, rank) and lse.shape == (0,)
    assert torch.equal(out, v1.transpose(0, 1))
    for b, length in enumerate(seq_lens):  # float64 reference of one batch, gathered through the table
        keys = torch.cat([k_nope[table[b]].reshape(-1, rank), k_pe[table[b]].reshape(-1, rope)], -1)[:length]
        query = torch.cat([q_nope[b, :, 0], q_pe[b, :, 0]], -1)
        probs = torch.softmax(query.double() @ keys.double().t() * 0.1, dim=-1)
        expected = probs @ k_nope[table[b]].reshape(-1, rank)[:length].double()
        torch.testing.assert_close(out[:, b, 0].double(), expected.to(torch.bfloat16).double(), rtol=2e-2, atol=2e-2)


def test_v2_refuses_quantisation_and_sinks_by_name() -> None:
    q = torch.zeros(2, 2, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score_v2(q, q, q, num_query_heads=2, input_layout="TND",
                                                     actual_seq_qlen=[2], actual_seq_kvlen=[2],
                                                     learnable_sink=torch.zeros(2, dtype=torch.bfloat16))
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score_v2", "learnable_sink")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score_v2(q, q, q, key_quant_mode=6)
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score_v2", "key_quant_mode")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score_v2(q, q, q, dequant_scale_key=torch.ones(1),
                                                     dequant_scale_value=torch.ones(1))
    assert exc.value.op == "npu_fused_infer_attention_score_v2"


def test_band_mode_4_keeps_the_window_from_each_batch_bottom_right() -> None:
    """vllm-ascend's sliding-window prefill: sparse_mode=4, pre_tokens=window, next_tokens=0 (TND)."""
    gen = _gen()
    heads, d, window = 2, 8, 2
    q_lens, kv_lens = [3, 4], [5, 4]
    q = torch.randn(sum(q_lens), heads, d, generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(sum(kv_lens), heads, d, generator=gen).to(torch.bfloat16) for _ in range(2))
    ends = lambda lens: torch.tensor(lens).cumsum(0).tolist()  # noqa: E731
    out, _ = torch_npu.npu_fused_infer_attention_score_v2(
        q, k, v, num_query_heads=heads, input_layout="TND", actual_seq_qlen=ends(q_lens),
        actual_seq_kvlen=ends(kv_lens), sparse_mode=4, atten_mask=CAUSAL, pre_tokens=window, next_tokens=0,
        softmax_scale=0.5)
    q_start = kv_start = 0
    for sq, skv in zip(q_lens, kv_lens):
        row = torch.arange(sq).reshape(-1, 1) + (skv - sq)  # each query's position in its key sequence
        col = torch.arange(skv).reshape(1, -1)
        visible = (col <= row) & (row - col <= window)
        qq = q[q_start:q_start + sq].double().transpose(0, 1)
        kk, vv = (t[kv_start:kv_start + skv].double().transpose(0, 1) for t in (k, v))
        probs = torch.softmax((qq @ kk.transpose(-1, -2) * 0.5).masked_fill(~visible, float("-inf")), dim=-1)
        expected = (probs @ vv).transpose(0, 1)
        torch.testing.assert_close(out[q_start:q_start + sq].double(), expected.to(torch.bfloat16).double(),
                                   rtol=2e-2, atol=2e-2)
        q_start, kv_start = q_start + sq, kv_start + skv
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_query_heads=heads, sparse_mode=4,
                                                     pre_tokens=-3, next_tokens=1)
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score_v2", "sparse_mode")


def test_out_forms_write_the_preallocated_outputs_and_workspaces_are_empty_scratch() -> None:
    """sglang's / vllm-ascend's graph-capture calls: get_max_workspace, then ``.out(..., workspace=, out=[o, lse])``."""
    gen = _gen()
    q = torch.randn(3, 1, 32, generator=gen).to(torch.float16)
    cache = torch.randn(4, 16, 32, generator=gen).to(torch.float16)
    options = dict(block_table=torch.tensor([[0], [1], [3]], dtype=torch.int32), block_size=16, num_heads=2,
                   num_key_value_heads=2, input_layout="BSH", scale=0.1, actual_seq_lengths_kv=[3, 5, 16])
    workspace = torch_npu._npu_fused_infer_attention_score_get_max_workspace(q, cache, cache, **options)
    assert workspace.shape == (0,) and workspace.dtype == torch.uint8
    out, placeholder = torch.empty(3, 1, 32, dtype=torch.float16), torch.full((1,), 7.0, dtype=torch.float16)
    returned = torch_npu.npu_fused_infer_attention_score.out(q, cache, cache, workspace=workspace,
                                                             out=[out, placeholder], **options)
    expected, _ = torch_npu.npu_fused_infer_attention_score(q, cache, cache, **options)
    assert returned[0] is out and torch.equal(out, expected) and float(placeholder) == 7.0
    lse = torch.empty(3, 2, 1, 1, dtype=torch.float32)
    torch_npu.npu_fused_infer_attention_score.out(q, cache, cache, out=[out, lse], softmax_lse_flag=True, **options)
    assert torch.equal(lse, torch_npu.npu_fused_infer_attention_score(q, cache, cache, softmax_lse_flag=True,
                                                                      **options)[1])
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score.out(q, cache, cache, out=[out.view(3, 32), placeholder], **options)
    assert exc.value.argument == "out[0]"
    with pytest.raises(ValueError) as exc:
        torch_npu._npu_fused_infer_attention_score_v2_get_max_workspace(q, cache, cache, num_query_heads=2,
                                                                        num_key_value_heads=3)
    assert exc.value.argument == "num_key_value_heads"


def _nz(cache: torch.Tensor) -> torch.Tensor:
    """An ND paged cache [blocks, N, block_size, D] stored as FRACTAL_NZ [blocks, N, D / c, block_size, c]."""
    run = 32 // cache.element_size()
    blocks, heads, size, dim = cache.shape
    return cache.reshape(blocks, heads, size, dim // run, run).permute(0, 1, 3, 2, 4).contiguous()


def _mla_decode_reference(q_nope, q_pe, k_nope, k_pe, table, seq_lens, scale):
    """float64 MLA decode per batch through the block table: [N, B, 1, D] (NBSD), keys = [nope | rope]."""
    out = []
    for b, length in enumerate(seq_lens):
        nope, pe = (c[table[b]].reshape(-1, c.shape[-1])[:length].double() for c in (k_nope, k_pe))
        scores = (q_nope[b].double() @ nope.t() + q_pe[b].double() @ pe.t()) * scale
        out.append(torch.softmax(scores, dim=-1) @ nope)
    return torch.stack(out, dim=1).unsqueeze(2)


def test_v2_reads_fractal_nz_paged_caches_as_their_nd_blocks() -> None:
    """vllm-ascend's MLA decode with enable_kv_nz: BSND_NBSD query, k_nope / k_pe viewed as NZ blocks
    ``(-1, kv_heads, D // 16, block_size, 16)`` (attention/mla_v1.py _forward_decode)."""
    gen = _gen()
    tokens, heads, rank, rope, block, blocks, scale = 3, 8, 64, 32, 16, 5, 0.1
    q_nope = torch.randn(tokens, 1, heads, rank, generator=gen).to(torch.bfloat16)
    q_pe = torch.randn(tokens, 1, heads, rope, generator=gen).to(torch.bfloat16)
    k_nope = torch.randn(blocks, 1, block, rank, generator=gen).to(torch.bfloat16)
    k_pe = torch.randn(blocks, 1, block, rope, generator=gen).to(torch.bfloat16)
    table = torch.tensor([[4, 0], [1, 2], [3, 4]], dtype=torch.int32)
    seq_lens = [17, 32, 5]
    options = dict(num_query_heads=heads, num_key_value_heads=1, input_layout="BSND_NBSD", softmax_scale=scale,
                   block_table=table, block_size=block, actual_seq_kvlen=seq_lens)
    nz, _ = torch_npu.npu_fused_infer_attention_score_v2(q_nope, _nz(k_nope), _nz(k_nope), query_rope=q_pe,
                                                         key_rope=_nz(k_pe), **options)
    bsnd = [c.transpose(1, 2) for c in (k_nope, k_pe)]  # BSND reads ND blocks as [blocks, block_size, N, D]
    nd, _ = torch_npu.npu_fused_infer_attention_score_v2(q_nope, bsnd[0], bsnd[0], query_rope=q_pe,
                                                         key_rope=bsnd[1], **options)
    assert nz.shape == (heads, tokens, 1, rank) and torch.equal(nz, nd)
    expected = _mla_decode_reference(q_nope[:, 0], q_pe[:, 0], k_nope[:, 0], k_pe[:, 0], table, seq_lens, scale)
    torch.testing.assert_close(nz.double(), expected.to(torch.bfloat16).double(), rtol=2e-2, atol=2e-2)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score_v2(q_nope.transpose(1, 2), _nz(k_nope), _nz(k_nope),
                                                     query_rope=q_pe.transpose(1, 2),
                                                     key_rope=_nz(k_pe), **{**options, "input_layout": "BNSD_NBSD"})
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score_v2", "key")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score_v2(q_nope, _nz(k_nope).transpose(2, 3), _nz(k_nope), query_rope=q_pe,
                                                     key_rope=_nz(k_pe), **options)
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score_v2", "key")


def test_v2_full_int8_quantised_mla_decode_against_a_float64_reference() -> None:
    """vllm-ascend's fa_quant MLA decode (attention/mla_v1.py, quantization/methods/kv_c8.py): int8 q_nope from
    mla_prolog_v2 with per-token-per-head dequant scales, an int8 k_nope NZ cache (runs of 32) and a bfloat16
    k_pe NZ cache, query_quant_mode=3, per-tensor fak_descale_float for key and value."""
    gen = _gen()
    tokens, heads, rank, rope, block, blocks, scale = 2, 4, 64, 32, 16, 4, 0.05
    q_nope = torch.randint(-127, 128, (tokens, 1, heads, rank), generator=gen, dtype=torch.int8)
    q_pe = torch.randn(tokens, 1, heads, rope, generator=gen).to(torch.bfloat16)
    k_nope = torch.randint(-127, 128, (blocks, 1, block, rank), generator=gen, dtype=torch.int8)
    k_pe = torch.randn(blocks, 1, block, rope, generator=gen).to(torch.bfloat16)
    q_scale = torch.rand(tokens, 1, heads, generator=gen) / 500
    kv_scale = torch.tensor([0.004])
    table = torch.tensor([[2, 0], [3, 1]], dtype=torch.int32)
    seq_lens = [20, 9]
    out, lse = torch_npu.npu_fused_infer_attention_score_v2(
        q_nope, _nz(k_nope), _nz(k_nope), query_rope=q_pe, key_rope=_nz(k_pe), num_query_heads=heads,
        num_key_value_heads=1, input_layout="BSND_NBSD", softmax_scale=scale, block_table=table, block_size=block,
        actual_seq_kvlen=seq_lens, query_quant_mode=3, key_quant_mode=0, value_quant_mode=0,
        dequant_scale_query=q_scale, dequant_scale_key=kv_scale, dequant_scale_value=kv_scale)
    assert out.dtype == torch.bfloat16 and out.shape == (heads, tokens, 1, rank) and lse.shape == (0,)
    q_float = q_nope[:, 0].double() * q_scale[:, 0].double().unsqueeze(-1)
    k_float = k_nope.double() * float(kv_scale)
    expected = _mla_decode_reference(q_float, q_pe[:, 0], k_float[:, 0], k_pe[:, 0], table, seq_lens, scale)
    torch.testing.assert_close(out.double(), expected.to(torch.bfloat16).double(), rtol=2e-2, atol=2e-2)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score_v2(
            q_nope, _nz(k_nope), _nz(k_nope), query_rope=q_pe, key_rope=_nz(k_pe), num_query_heads=heads,
            num_key_value_heads=1, input_layout="BSND_NBSD", block_table=table, block_size=block,
            actual_seq_kvlen=seq_lens, query_quant_mode=3, dequant_scale_query=q_scale, dequant_scale_key=kv_scale)
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score_v2", "query_quant_mode")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score_v2(
            q_nope, _nz(k_nope), _nz(k_nope), query_rope=q_pe, key_rope=_nz(k_pe), num_query_heads=heads,
            num_key_value_heads=1, input_layout="BSND_NBSD", block_table=table, block_size=block,
            actual_seq_kvlen=seq_lens, query_quant_mode=3, dequant_scale_query=q_scale[:, 0, :2].contiguous(),
            dequant_scale_key=kv_scale, dequant_scale_value=kv_scale)
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score_v2", "dequant_scale_query")


def test_tnd_shapes_without_lengths_on_fake_tensors_but_the_kernel_needs_them() -> None:
    """op-plugin's meta function gives TND output shapes from the tokens alone; the API page requires
    actual_seq_qlen for the computation, so only the CPU kernel refuses a call without it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    shapes = ((32, 8, 192), (32, 8, 192), (32, 8, 128))
    with FakeTensorMode():
        q, k, v = (torch.randn(*shape, dtype=torch.float16) for shape in shapes)
        out, _ = torch.ops.npu.npu_fused_infer_attention_score_v2(q, k, v, num_query_heads=8, input_layout="TND")
        assert out.shape == (32, 8, 128)
    q, k, v = (torch.randn(*shape, dtype=torch.float16) for shape in shapes)
    with pytest.raises(OpArgumentError, match="TND' needs actual_seq_lengths"):
        torch_npu.npu_fused_infer_attention_score_v2(q, k, v, num_query_heads=8, input_layout="TND")
