"""Attention ops of ``pytest_npufuse.torch_npu`` against a float64 softmax(q k^T) v written per batch and head."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_npufuse import torch_npu

CAUSAL = torch.ones(2048, 2048, dtype=torch.bool).triu(diagonal=1)


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(3)


def _ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, visible: torch.Tensor) -> tuple[
    torch.Tensor, torch.Tensor
]:
    """q [N, Sq, D], k/v [N, Skv, *] (heads already matched), visible [Sq, Skv]: (out, lse) in float64."""
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.softmax(scores, dim=-1) @ v.double(), lse


def _bnsd(batch: int, heads: int, seq: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(batch, heads, seq, dim, generator=gen).to(torch.bfloat16)


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual.double(), expected.to(actual.dtype).double(), rtol=2e-2, atol=2e-2)


def test_decode_bsh_gqa_with_kv_lengths() -> None:
    gen = _gen()
    b, n, nkv, skv, d = 2, 4, 2, 6, 8
    q, k, v = _bnsd(b, n, 1, d, gen), _bnsd(b, nkv, skv, d, gen), _bnsd(b, nkv, skv, d, gen)
    to_bsh = lambda t: t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1)  # noqa: E731
    lens = [4, 6]
    out, _ = torch_npu.npu_fused_infer_attention_score(
        to_bsh(q), to_bsh(k), to_bsh(v), num_heads=n, num_key_value_heads=nkv, scale=0.3,
        actual_seq_lengths_kv=lens, input_layout="BSH")
    for bi in range(b):
        kk, vv = k[bi].repeat_interleave(2, 0), v[bi].repeat_interleave(2, 0)
        visible = torch.arange(skv).reshape(1, -1) < lens[bi]
        ref, _ = _ref(q[bi], kk, vv, 0.3, visible)
        _close(out[bi].reshape(1, n, d).transpose(0, 1), ref)


def test_prefill_bnsd_right_down_causal_and_lse() -> None:
    gen = _gen()
    b, n, sq, skv, d = 1, 2, 3, 5, 8
    q, k, v = _bnsd(b, n, sq, d, gen), _bnsd(b, n, skv, d, gen), _bnsd(b, n, skv, d, gen)
    out, lse = torch_npu.npu_fused_infer_attention_score(
        q, k, v, num_heads=n, input_layout="BNSD", sparse_mode=3, atten_mask=CAUSAL, scale=0.5, softmax_lse_flag=True)
    visible = torch.arange(skv).reshape(1, -1) <= torch.arange(sq).reshape(-1, 1) + (skv - sq)
    ref, ref_lse = _ref(q[0], k[0], v[0], 0.5, visible)
    _close(out[0], ref)
    torch.testing.assert_close(lse[0].double(), ref_lse, rtol=1e-5, atol=1e-5)


def test_tnd_variable_lengths_match_per_sequence_attention() -> None:
    gen = _gen()
    n, d, lens = 2, 8, [3, 1, 4]
    total = sum(lens)
    q = torch.randn(total, n, d, generator=gen).to(torch.bfloat16)
    k = torch.randn(total, n, d, generator=gen).to(torch.bfloat16)
    v = torch.randn(total, n, d, generator=gen).to(torch.bfloat16)
    ends = torch.tensor(lens).cumsum(0).tolist()
    out, lse = torch_npu.npu_fused_infer_attention_score(
        q, k, v, num_heads=n, input_layout="TND", actual_seq_lengths=ends, actual_seq_lengths_kv=ends,
        sparse_mode=3, atten_mask=CAUSAL, scale=0.25, softmax_lse_flag=True)
    assert out.shape == (total, n, d) and lse.shape == (total, n, 1)
    start = 0
    for length in lens:
        seg = slice(start, start + length)
        visible = torch.ones(length, length, dtype=torch.bool).tril()
        ref, ref_lse = _ref(q[seg].transpose(0, 1), k[seg].transpose(0, 1), v[seg].transpose(0, 1), 0.25, visible)
        _close(out[seg].transpose(0, 1), ref)
        torch.testing.assert_close(lse[seg].transpose(0, 1).double(), ref_lse, rtol=1e-5, atol=1e-5)
        start += length


@pytest.mark.parametrize(("cache_form", "layout"), [("BnBsH", "BNSD"), ("BnNBsD", "BNSD"), ("BnBsND", "BSND")])
def test_paged_kv_reads_blocks_through_block_table(cache_form: str, layout: str) -> None:
    gen = _gen()
    b, n, d, block, blocks_per_seq = 2, 2, 8, 4, 3
    kv_lens = [9, 5]
    q = _bnsd(b, n, 1, d, gen)
    k, v = _bnsd(b, n, block * blocks_per_seq, d, gen), _bnsd(b, n, block * blocks_per_seq, d, gen)
    total_blocks = b * blocks_per_seq + 1
    table = torch.randperm(total_blocks, generator=gen)[: b * blocks_per_seq].reshape(b, blocks_per_seq).to(torch.int32)

    def cache_of(t: torch.Tensor) -> torch.Tensor:
        cache = torch.zeros(total_blocks, n, block, d, dtype=t.dtype)  # BnNBsD
        for bi in range(b):
            for j in range(blocks_per_seq):
                cache[table[bi, j]] = t[bi, :, j * block : (j + 1) * block]
        blocks_first = cache.transpose(1, 2).contiguous()
        return {"BnNBsD": cache, "BnBsND": blocks_first, "BnBsH": blocks_first.reshape(total_blocks, block, n * d)}[
            cache_form]

    query = q if layout == "BNSD" else q.transpose(1, 2).contiguous()
    out, _ = torch_npu.npu_fused_infer_attention_score(
        query, cache_of(k), cache_of(v), num_heads=n, input_layout=layout, block_table=table, block_size=block,
        actual_seq_lengths_kv=kv_lens, scale=0.3)
    dense, _ = torch_npu.npu_fused_infer_attention_score(
        q, k, v, num_heads=n, input_layout="BNSD", actual_seq_lengths_kv=kv_lens, scale=0.3)
    assert torch.equal(out if layout == "BNSD" else out.transpose(1, 2), dense)
    ifa = torch_npu.npu_incre_flash_attention(query, cache_of(k), cache_of(v), num_heads=n, input_layout=layout,
                                              block_table=table, block_size=block, actual_seq_lengths=kv_lens,
                                              scale_value=0.3)
    assert torch.equal(ifa, out)


def test_mla_rope_adds_its_dot_product_to_the_scores() -> None:
    gen = _gen()
    b, n, skv, d, dr = 2, 4, 5, 16, 8
    q, qr = _bnsd(b, n, 1, d, gen), _bnsd(b, n, 1, dr, gen)
    k, kr = _bnsd(b, 1, skv, d, gen), _bnsd(b, 1, skv, dr, gen)
    out, _ = torch_npu.npu_fused_infer_attention_score(
        q, k, k, query_rope=qr, key_rope=kr, num_heads=n, num_key_value_heads=1, input_layout="BNSD", scale=0.2)
    joined, _ = torch_npu.npu_fused_infer_attention_score(
        torch.cat([q, qr], -1), torch.cat([k, kr], -1), k, num_heads=n, num_key_value_heads=1,
        input_layout="BNSD", scale=0.2)
    assert torch.equal(out, joined)
    ref, _ = _ref(torch.cat([q, qr], -1)[0], torch.cat([k, kr], -1)[0].expand(n, -1, -1), k[0].expand(n, -1, -1),
                  0.2, torch.ones(1, skv, dtype=torch.bool))
    _close(out[0], ref)


def test_prompt_flash_attention_default_next_tokens_is_causal_with_a_mask() -> None:
    gen = _gen()
    b, n, s, d = 1, 2, 4, 8
    q, k, v = _bnsd(b, n, s, d, gen), _bnsd(b, n, s, d, gen), _bnsd(b, n, s, d, gen)
    no_mask = torch.zeros(s, s, dtype=torch.bool)
    pfa = torch_npu.npu_prompt_flash_attention(q, k, v, atten_mask=no_mask, num_heads=n, input_layout="BNSD",
                                               scale_value=1 / math.sqrt(d))
    causal, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=n, input_layout="BNSD", sparse_mode=2,
                                                          atten_mask=CAUSAL, scale=1 / math.sqrt(d))
    assert torch.equal(pfa, causal)
    full = torch_npu.npu_prompt_flash_attention(q, k, v, num_heads=n, input_layout="BNSD", scale_value=1 / math.sqrt(d))
    bsnd_out = torch_npu.npu_prompt_flash_attention(q, k, v, num_heads=n, input_layout="BNSD_BSND",
                                                    scale_value=1 / math.sqrt(d))
    assert bsnd_out.shape == (b, s, n, d) and torch.equal(bsnd_out.transpose(1, 2), full)
    ref, _ = _ref(q[0], k[0], v[0], 1 / math.sqrt(d), torch.ones(s, s, dtype=torch.bool))
    _close(full[0], ref)


def test_attention_refuses_unmodeled_inputs_by_name() -> None:
    q = torch.zeros(1, 1, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score(q, q, q, pse_shift=q)
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score", "pse_shift")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fused_infer_attention_score(q, q, q, input_layout="SBH")
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score", "input_layout")


def test_incre_flash_attention_with_several_query_rows_attends_every_key_per_its_formula() -> None:
    """The IFA page's formula and shapes do not limit S to 1 (op-plugin's fake-tensor test passes a
    (1, 40, 1, 128) query): each row attends to all keys, as the fused op without a mask."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 3, 2, 16, generator=gen).half() for _ in range(3))
    ifa = torch_npu.npu_incre_flash_attention(q, k, v, num_heads=2, input_layout="BSND", scale_value=0.25)
    fia = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=2, input_layout="BSND", scale=0.25)[0]
    assert ifa.shape == q.shape and torch.equal(ifa, fia)


def test_attention_fake_kernels_match_eager_shapes() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    gen = _gen()
    q = torch.randn(5, 2, 8, generator=gen).to(torch.bfloat16)

    def call(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch_npu.npu_fused_infer_attention_score(
            t, t, t, num_heads=2, input_layout="TND", actual_seq_lengths=[2, 5], actual_seq_lengths_kv=[2, 5],
            softmax_lse_flag=True)

    eager = call(q)
    with FakeTensorMode() as mode:
        fake = call(mode.from_tensor(q))
    assert [(t.shape, t.dtype) for t in fake] == [(t.shape, t.dtype) for t in eager]
