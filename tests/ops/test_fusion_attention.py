"""npu_fusion_attention (FlashAttentionScore) against a float64 softmax(q k^T) v written per batch and head."""

from __future__ import annotations

import numpy
import pytest
import torch

from pytest_npufuse import torch_npu

CAUSAL = torch.ones(2048, 2048, dtype=torch.bool).triu(diagonal=1)


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(11)


def _ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, visible: torch.Tensor) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor
]:
    """q [N, Sq, D], k/v [N, Skv, *] (heads matched), visible [N or 1, Sq, Skv]: (out, row max, exp sum) in float64."""
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    scores = scores.masked_fill(~visible, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    total = torch.exp(scores - row_max).sum(dim=-1, keepdim=True)
    return torch.softmax(scores, dim=-1) @ v.double(), row_max, total


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual.double(), expected.to(actual.dtype).double(), rtol=2e-2, atol=2e-2)


def test_bsnd_gqa_with_a_b1ss_mask_and_softmax_statistics() -> None:
    gen = _gen()
    b, n, nkv, s, d = 2, 4, 2, 5, 16
    q = torch.randn(b, s, n, d, generator=gen).to(torch.float16)
    k = torch.randn(b, s, nkv, d, generator=gen).to(torch.float16)
    v = torch.randn(b, s, nkv, d, generator=gen).to(torch.float16)
    mask = torch.rand(b, 1, s, s, generator=gen) > 0.6
    mask[..., 0] = False  # every row sees at least one key
    out, smax, ssum, sout, seed, offset, numels = torch_npu.npu_fusion_attention(
        q, k, v, n, "BSND", atten_mask=mask, scale=0.25)
    assert out.shape == (b, s, n, d) and smax.shape == ssum.shape == (b, n, s, 8) and sout.shape == (0,)
    assert (seed, offset, numels) == (0, 0, 0)
    for bi in range(b):
        kk = k[bi].transpose(0, 1).repeat_interleave(n // nkv, 0)
        vv = v[bi].transpose(0, 1).repeat_interleave(n // nkv, 0)
        ref, ref_max, ref_sum = _ref(q[bi].transpose(0, 1), kk, vv, 0.25, ~mask[bi])
        _close(out[bi].transpose(0, 1), ref)
        torch.testing.assert_close(smax[bi].double(), ref_max.expand(-1, -1, 8), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ssum[bi].double(), ref_sum.expand(-1, -1, 8), rtol=1e-5, atol=1e-5)


def test_sbh_bsh_and_bnsd_agree_bit_for_bit() -> None:
    gen = _gen()
    b, n, s, d = 2, 2, 4, 8
    bnsd = [torch.randn(b, n, s, d, generator=gen).to(torch.bfloat16) for _ in range(3)]
    bsh = [t.transpose(1, 2).reshape(b, s, n * d) for t in bnsd]
    sbh = [t.transpose(0, 1).contiguous() for t in bsh]
    ref = torch_npu.npu_fusion_attention(*bnsd, n, "BNSD", scale=0.3)[0]
    out_bsh = torch_npu.npu_fusion_attention(*bsh, n, "BSH", scale=0.3)[0]
    out_sbh = torch_npu.npu_fusion_attention(*sbh, n, "SBH", scale=0.3)[0]
    assert out_sbh.shape == (s, b, n * d)
    assert torch.equal(out_bsh, ref.transpose(1, 2).reshape(b, s, n * d))
    assert torch.equal(out_sbh, out_bsh.transpose(0, 1))


def test_tnd_right_down_causal_with_a_trailing_idle_batch() -> None:
    """vllm-ascend's encoder path appends a 0 to actual_seq_qlen when the token count exceeds the last end."""
    gen = _gen()
    n, d, lens = 2, 8, [3, 4]
    tokens = sum(lens) + 2  # two padding rows after the last cumulative end
    q, k, v = (torch.randn(tokens, n, d, generator=gen).to(torch.bfloat16) for _ in range(3))
    ends = [3, 7, 0]
    out, smax, _, _, _, _, _ = torch_npu.npu_fusion_attention(
        q, k, v, n, "TND", atten_mask=CAUSAL, sparse_mode=3, scale=0.5, actual_seq_qlen=ends,
        actual_seq_kvlen=ends)
    assert out.shape == (tokens, n, d) and smax.shape == (tokens, n, 8)
    assert torch.equal(out[sum(lens):], torch.zeros(2, n, d, dtype=out.dtype))
    start = 0
    for length in lens:
        seg = slice(start, start + length)
        visible = torch.ones(length, length, dtype=torch.bool).tril()
        ref, _, _ = _ref(q[seg].transpose(0, 1), k[seg].transpose(0, 1), v[seg].transpose(0, 1), 0.5, visible)
        _close(out[seg].transpose(0, 1), ref)
        start += length


def test_without_a_mask_sparse_mode_and_band_have_no_effect() -> None:
    gen = _gen()
    q, k, v = (torch.randn(1, 2, 4, 8, generator=gen).to(torch.float32) for _ in range(3))
    full = torch_npu.npu_fusion_attention(q, k, v, 2, "BNSD")[0]
    banded = torch_npu.npu_fusion_attention(q, k, v, 2, "BNSD", sparse_mode=3, pre_tockens=0, next_tockens=0)[0]
    assert full.dtype == torch.float32 and torch.equal(full, banded)
    ref, _, _ = _ref(q[0], k[0], v[0], 1.0, torch.ones(1, 4, 4, dtype=torch.bool))
    torch.testing.assert_close(full[0].double(), ref, rtol=1e-5, atol=1e-5)


def _mask_bits(mask: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The keep mask (1 = keep) of a packed dropout mask, as op-plugin's tests unpack it
    (``numpy.unpackbits(..., bitorder="little")``)."""
    count = int(torch.tensor(shape).prod())
    bits = numpy.unpackbits(mask.numpy(), count=count, bitorder="little")
    return torch.from_numpy(bits.astype(numpy.float64)).reshape(shape)


def _dropout_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dy: torch.Tensor, scale: float,
                 keep: torch.Tensor, keep_prob: float) -> tuple[torch.Tensor, ...]:
    """op-plugin test_npu_flash_attention.py's tforward / tbackward in float64, BNSD: the output and dq, dk, dv
    of ``(softmax(scale q k^T) * keep / keep_prob) v``."""
    q, k, v, dy = (t.double() for t in (q, k, v, dy))
    probs = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1)
    dropped = probs * keep / keep_prob
    out = dropped @ v
    dprobs = (dy @ v.transpose(-1, -2)) * keep / keep_prob
    dscores = probs * (dprobs - (dprobs * probs).sum(-1, keepdim=True)) * scale
    return out, dscores @ k, dscores.transpose(-1, -2) @ q, dropped.transpose(-1, -2) @ dy


def test_dropout_with_a_given_mask_and_its_backward_follow_the_pages_formula() -> None:
    """The page's example: a mask from _npu_dropout_gen_mask over [B, N, S, S], keep_prob 0.9, BSH."""
    gen = _gen()
    b, n, s, d, keep_prob, seed, offset = 1, 2, 6, 8, 0.9, 42, 0
    bnsd = [torch.randn(b, n, s, d, generator=gen) for _ in range(4)]
    q, k, v, dy = (t.transpose(1, 2).reshape(b, s, n * d).to(torch.float16) for t in bnsd)
    mask = torch_npu._npu_dropout_gen_mask(torch.randn(1), [b, n, s, s], p=1 - keep_prob, seed=seed, offset=offset)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out, smax, _, _, out_seed, out_offset, numels = torch_npu.npu_fusion_attention(
        q, k, v, n, "BSH", scale=0.125, keep_prob=keep_prob, dropout_mask=mask, seed=seed, offset=offset)
    assert (out_seed, out_offset, numels) == (seed, offset, b * n * s * s)
    out.backward(dy)
    keep = _mask_bits(mask, (b, n, s, s))
    assert 0 < keep.sum() < keep.numel()  # the example drops some probabilities and keeps others
    as_bnsd = [t.detach().reshape(b, s, n, d).transpose(1, 2) for t in (q, k, v, dy)]
    ref_out, ref_dq, ref_dk, ref_dv = _dropout_ref(*as_bnsd, 0.125, keep, keep_prob)
    for actual, expected in ((out, ref_out), (q.grad, ref_dq), (k.grad, ref_dk), (v.grad, ref_dv)):
        _close(actual.detach().reshape(b, s, n, d).transpose(1, 2), expected)
    undropped = torch_npu.npu_fusion_attention(q.detach(), k.detach(), v.detach(), n, "BSH", scale=0.125)
    assert torch.equal(smax, undropped[1])  # the statistics are the undropped softmax's


def test_dropout_drawn_from_seed_and_offset_is_the_gen_mask_ops_and_repeats() -> None:
    """Without dropout_mask the op draws the mask _npu_dropout_gen_mask draws from the same seed and offset
    (the mask its backward draws again); another seed drops other elements."""
    gen = _gen()
    b, n, s, d, keep_prob = 2, 2, 5, 8, 0.7
    q, k, v = (torch.randn(b, n, s, d, generator=gen).to(torch.bfloat16) for _ in range(3))
    drawn = torch_npu.npu_fusion_attention(q, k, v, n, "BNSD", scale=0.3, keep_prob=keep_prob, seed=7, offset=3)
    mask = torch_npu._npu_dropout_gen_mask(q, [b, n, s, s], p=1 - keep_prob, seed=7, offset=3)
    given = torch_npu.npu_fusion_attention(q, k, v, n, "BNSD", scale=0.3, keep_prob=keep_prob, dropout_mask=mask,
                                           seed=7, offset=3)
    assert torch.equal(drawn[0], given[0]) and drawn[4:] == given[4:] == (7, 3, b * n * s * s)
    again = torch_npu.npu_fusion_attention(q, k, v, n, "BNSD", scale=0.3, keep_prob=keep_prob, seed=7, offset=3)
    other = torch_npu.npu_fusion_attention(q, k, v, n, "BNSD", scale=0.3, keep_prob=keep_prob, seed=8, offset=3)
    assert torch.equal(again[0], drawn[0]) and not torch.equal(other[0], drawn[0])


def test_tnd_dropout_reads_each_batchs_mask_in_turn_and_its_gradients() -> None:
    """TND: the mask covers N x sum(Sq_i x Skv_i) elements, batch after batch (op-plugin's TND golden)."""
    gen = _gen()
    n, d, q_lens, kv_lens, keep_prob = 2, 8, [2, 3], [3, 4], 0.8
    q, dy = (torch.randn(sum(q_lens), n, d, generator=gen).to(torch.float16) for _ in range(2))
    k, v = (torch.randn(sum(kv_lens), n, d, generator=gen).to(torch.float16) for _ in range(2))
    sizes = [n * ql * kl for ql, kl in zip(q_lens, kv_lens)]
    mask = torch_npu._npu_dropout_gen_mask(q, [sum(sizes)], p=1 - keep_prob, seed=5, offset=0)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    result = torch_npu.npu_fusion_attention(q, k, v, n, "TND", scale=0.35, keep_prob=keep_prob, dropout_mask=mask,
                                            seed=5, offset=0, actual_seq_qlen=[2, 5], actual_seq_kvlen=[3, 7])
    assert result[4:] == (5, 0, sum(sizes))
    result[0].backward(dy)
    keep = _mask_bits(mask, (sum(sizes),))
    starts, q0, kv0 = [0, sizes[0]], [0, q_lens[0]], [0, kv_lens[0]]
    for i, (ql, kl) in enumerate(zip(q_lens, kv_lens)):
        rows, keys = slice(q0[i], q0[i] + ql), slice(kv0[i], kv0[i] + kl)
        parts = [t.detach()[index].transpose(0, 1) for t, index in ((q, rows), (k, keys), (v, keys), (dy, rows))]
        ref = _dropout_ref(*parts, 0.35, keep[starts[i] : starts[i] + sizes[i]].reshape(n, ql, kl), keep_prob)
        for actual, index, expected in zip((result[0], q.grad, k.grad, v.grad), (rows, rows, keys, keys), ref):
            _close(actual.detach()[index].transpose(0, 1), expected)


def test_fusion_attention_refuses_dropout_and_pse_by_name() -> None:
    q = torch.zeros(1, 2, 16, dtype=torch.float16)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fusion_attention(q, q, q, 2, "BSH", keep_prob=0.0)
    assert (exc.value.op, exc.value.argument) == ("npu_fusion_attention", "keep_prob")
    with pytest.raises(ValueError) as exc:
        wide = torch.zeros(1, 4, 16, dtype=torch.float16)  # 32 scores: a 4-byte mask
        torch_npu.npu_fusion_attention(wide, wide, wide, 2, "BSH", keep_prob=0.9,
                                       dropout_mask=torch.zeros(3, dtype=torch.uint8))
    assert (exc.value.op, exc.value.argument) == ("npu_fusion_attention", "dropout_mask")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fusion_attention(q, q, q, 2, "BSH", pse=q)
    assert (exc.value.op, exc.value.argument) == ("npu_fusion_attention", "pse")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fusion_attention(q, q, q, 2, "NTD")
    assert (exc.value.op, exc.value.argument) == ("npu_fusion_attention", "input_layout")


def test_fusion_attention_compiles_to_one_node_and_fake_shapes_match() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    gen = _gen()
    q = torch.randn(5, 2, 8, generator=gen).to(torch.bfloat16)

    def call(t: torch.Tensor) -> torch.Tensor:
        return torch_npu.npu_fusion_attention(t, t, t, 2, "TND", scale=0.3, actual_seq_qlen=[2, 5],
                                              actual_seq_kvlen=[2, 5])[0]

    eager = call(q)
    with FakeTensorMode() as mode:
        fake = call(mode.from_tensor(q))
    assert (fake.shape, fake.dtype) == (eager.shape, eager.dtype)
    graphs = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(call, backend=backend, fullgraph=True)(q)
    assert torch.equal(compiled, eager)
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert targets.count("npu.npu_fusion_attention") == 1
