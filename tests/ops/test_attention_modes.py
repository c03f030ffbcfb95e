"""The documented argument modes of the attention and RoPE ops that real code passes (issue 37 items 1-2): an
int8 KV cache beside a float query (antiquant, every key/value_antiquant_mode), left padding, the layout a
4-D query takes under IFA/PFA's default "BSH", the output layouts of the fused op, npu_rotary_mul's rotate
matrix, npu_apply_rotary_pos_emb's 'quarter' mode and the ATB cache write into an NZ cache. Each output is
compared with a float64 softmax(q k^T) v on the dequantised values, and each op call passes
torch.library.opcheck (schema and fake kernel against the CPU kernel)."""

from __future__ import annotations

import math

import numpy
import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError

OPCHECKS = ("test_schema", "test_faketensor")


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(11)


def _int8(*shape: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(-127, 128, shape, generator=gen, dtype=torch.int8)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, lengths: list[int],
            starts: list[int] | None = None) -> torch.Tensor:
    """float64 BNSD attention, KV heads repeated for GQA; batch b attends keys [start, start + length)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    scores = q.double() @ k.transpose(-1, -2) * scale
    keys = torch.arange(k.shape[2])
    for b, length in enumerate(lengths):
        start = starts[b] if starts else 0
        scores[b, :, :, (keys < start) | (keys >= start + length)] = float("-inf")
    return torch.softmax(scores, dim=-1) @ v


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual.double(), expected.to(actual.dtype).double(), rtol=2e-2, atol=2e-2)


def _opcheck(op: str, args: tuple, kwargs: dict) -> None:
    torch.library.opcheck(getattr(torch.ops.npu, op).default, args, kwargs, test_utils=OPCHECKS)


B, N, NKV, S, D = 2, 4, 2, 40, 32


def _decode_inputs(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.randn(B, N, 1, D, generator=gen).half(), _int8(B, NKV, S, D, gen=gen), _int8(B, NKV, S, D, gen=gen))


def _factor(mode: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A (factor, its [B, N_kv, S, D]-broadcastable form) of ``mode`` for the dense decode inputs."""
    rand = lambda *shape: torch.rand(*shape, generator=gen) * 0.02 + 0.001  # noqa: E731
    if mode == 0:
        factor = rand(1, NKV, 1, D).half()
        return factor, factor.float()
    if mode == 1:
        factor = rand(1, B, S)
        return factor, factor.reshape(B, 1, S, 1)
    if mode == 2:
        factor = rand(NKV).half()
        return factor, factor.float().reshape(1, NKV, 1, 1)
    factor = rand(B, NKV, S)
    return factor, factor.unsqueeze(-1)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_fia_decode_dequantises_an_int8_kv_cache_in_each_dense_mode(mode: int) -> None:
    gen = _gen()
    q, k, v = _decode_inputs(gen)
    (key_scale, key_view), (value_scale, value_view) = _factor(mode, gen), _factor(mode, gen)
    offset, offset_view = _factor(mode, gen)
    kwargs = dict(key_antiquant_scale=key_scale, value_antiquant_scale=value_scale, key_antiquant_offset=offset,
                  value_antiquant_offset=offset, key_antiquant_mode=mode, value_antiquant_mode=mode, num_heads=N,
                  num_key_value_heads=NKV, input_layout="BNSD", scale=1 / math.sqrt(D), actual_seq_lengths_kv=[S, 25])
    out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, **kwargs)
    keys = ((k.float() + offset_view) * key_view).half()
    values = ((v.float() + offset_view) * value_view).half()
    _close(out, _attend(q, keys, values, 1 / math.sqrt(D), [S, 25]))
    _opcheck("npu_fused_infer_attention_score", (q, k, v), kwargs)


def test_fia_key_per_channel_with_value_per_token_is_the_one_mixed_pair() -> None:
    gen = _gen()
    q, k, v = _decode_inputs(gen)
    (key_scale, key_view), (value_scale, value_view) = _factor(0, gen), _factor(1, gen)
    out, _ = torch_npu.npu_fused_infer_attention_score(
        q, k, v, key_antiquant_scale=key_scale, value_antiquant_scale=value_scale, key_antiquant_mode=0,
        value_antiquant_mode=1, num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", scale=0.2)
    _close(out, _attend(q, (k.float() * key_view).half(), (v.float() * value_view).half(), 0.2, [S, S]))
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_fused_infer_attention_score(
            q, k, v, key_antiquant_scale=value_scale, value_antiquant_scale=key_scale, key_antiquant_mode=1,
            value_antiquant_mode=0, num_heads=N, num_key_value_heads=NKV, input_layout="BNSD")
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score", "key_antiquant_mode")


def test_fia_combined_antiquant_scale_stacks_key_and_value() -> None:
    """The older ``antiquant_scale`` / ``antiquant_offset`` ``(2, ...)``: per channel (mode 0) in BSH as
    ``(2, H)`` and per token (mode 1) as ``(2, B, S)``."""
    gen = _gen()
    q, k, v = _decode_inputs(gen)
    bsh = lambda x: x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)  # noqa: E731
    channel = torch.rand(2, NKV * D, generator=gen).half() * 0.02
    out, _ = torch_npu.npu_fused_infer_attention_score(bsh(q), bsh(k), bsh(v), antiquant_scale=channel, num_heads=N,
                                                       num_key_value_heads=NKV, scale=0.2)
    views = channel.float().reshape(2, 1, NKV, 1, D)
    expected = _attend(q, (k.float() * views[0]).half(), (v.float() * views[1]).half(), 0.2, [S, S])
    _close(out, bsh(expected))
    per_tensor = torch.tensor([0.01, 0.02]).half()
    out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, antiquant_scale=per_tensor, num_heads=N,
                                                       num_key_value_heads=NKV, input_layout="BNSD", scale=0.2)
    expected = _attend(q, (k.float() * per_tensor[0].float()).half(), (v.float() * per_tensor[1].float()).half(), 0.2,
                       [S, S])
    _close(out, expected)
    token = torch.rand(2, B, S, generator=gen) * 0.02
    out, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, antiquant_scale=token, antiquant_offset=-token,
                                                       antiquant_mode=1, num_heads=N, num_key_value_heads=NKV,
                                                       input_layout="BNSD", scale=0.2)
    views, offsets = token.reshape(2, B, 1, S, 1), -token.reshape(2, B, 1, S, 1)
    expected = _attend(q, ((k.float() + offsets[0]) * views[0]).half(), ((v.float() + offsets[1]) * views[1]).half(),
                       0.2, [S, S])
    _close(out, expected)


@pytest.mark.parametrize("mode", [4, 5])
def test_fia_paged_token_factors_follow_the_block_table(mode: int) -> None:
    """Modes 4/5: one factor per cache slot ``(blocks, block_size)`` / ``(blocks, N_kv, block_size)``, read
    through block_table like the cache (a BNSD query beside a [blocks, N_kv, block_size, D] cache)."""
    gen = _gen()
    blocks, size, table = 6, 16, torch.tensor([[4, 1, 0], [2, 5, 3]], dtype=torch.int32)
    q = torch.randn(B, N, 1, D, generator=gen).bfloat16()
    k_cache, v_cache = _int8(blocks, NKV, size, D, gen=gen), _int8(blocks, NKV, size, D, gen=gen)
    shape = (blocks, size) if mode == 4 else (blocks, NKV, size)
    key_scale, value_scale = (torch.rand(*shape, generator=gen) * 0.02 for _ in range(2))
    kwargs = dict(key_antiquant_scale=key_scale, value_antiquant_scale=value_scale, key_antiquant_mode=mode,
                  value_antiquant_mode=mode, block_table=table, block_size=size, actual_seq_lengths_kv=[40, 33],
                  num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", scale=0.2)
    out, _ = torch_npu.npu_fused_infer_attention_score(q, k_cache, v_cache, **kwargs)
    dense = lambda cache: cache[table.long()].permute(0, 2, 1, 3, 4).reshape(B, NKV, -1, D)  # noqa: E731
    per_slot = lambda scale: (scale[table.long()].reshape(B, 1, -1, 1) if mode == 4 else  # noqa: E731
                              scale[table.long()].transpose(1, 2).reshape(B, NKV, -1, 1))
    keys = (dense(k_cache).float() * per_slot(key_scale)).bfloat16()
    values = (dense(v_cache).float() * per_slot(value_scale)).bfloat16()
    _close(out, _attend(q, keys, values, 0.2, [40, 33]))
    _opcheck("npu_fused_infer_attention_score", (q, k_cache, v_cache), kwargs)


def test_fia_bnsd_reads_an_int8_fractal_nz_paged_cache() -> None:
    """The page's GQA antiquant with KV NZ: int8 caches [blocks, N_kv, D / 32, block_size, 32] under BNSD, per
    channel bfloat16 factors; the same values as the ND cache [blocks, N_kv, block_size, D]."""
    gen = _gen()
    blocks, size, dim, table = 4, 16, 64, torch.tensor([[3, 1], [0, 2]], dtype=torch.int32)
    q = torch.randn(B, N, 1, dim, generator=gen).bfloat16()
    k_nd, v_nd = _int8(blocks, NKV, size, dim, gen=gen), _int8(blocks, NKV, size, dim, gen=gen)
    nz = lambda cache: cache.reshape(blocks, NKV, size, dim // 32, 32).transpose(2, 3).contiguous()  # noqa: E731
    scale = torch.rand(NKV, 1, dim, generator=gen).bfloat16() * 0.02  # vllm-ascend C8 decode: (N_kv, 1, D)
    kwargs = dict(key_antiquant_scale=scale, value_antiquant_scale=scale, block_table=table, block_size=size,
                  actual_seq_lengths_kv=[32, 20], num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", scale=0.1)
    from_nz, _ = torch_npu.npu_fused_infer_attention_score(q, nz(k_nd), nz(v_nd), **kwargs)
    from_nd, _ = torch_npu.npu_fused_infer_attention_score(q, k_nd, v_nd, **kwargs)
    assert torch.equal(from_nz, from_nd)
    _opcheck("npu_fused_infer_attention_score", (q, nz(k_nd), nz(v_nd)), kwargs)


def test_fia_v2_dequant_scales_of_a_float_query_are_the_antiquant_factors() -> None:
    gen = _gen()
    q, k, v = _decode_inputs(gen)
    (key_scale, key_view), (value_scale, value_view) = _factor(3, gen), _factor(3, gen)
    options = dict(num_key_value_heads=NKV, input_layout="BNSD", actual_seq_kvlen=[S, 30])
    v2, _ = torch_npu.npu_fused_infer_attention_score_v2(
        q, k, v, dequant_scale_key=key_scale, dequant_scale_value=value_scale, key_quant_mode=3, value_quant_mode=3,
        num_query_heads=N, softmax_scale=0.2, **options)
    expected = _attend(q, (k.float() * key_view).half(), (v.float() * value_view).half(), 0.2, [S, 30])
    _close(v2, expected)


def test_antiquant_refusals_name_the_argument() -> None:
    gen = _gen()
    q, k, v = _decode_inputs(gen)
    base = dict(num_heads=N, num_key_value_heads=NKV, input_layout="BNSD")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_fused_infer_attention_score(q, k, v, **base)
    assert exc.value.op == "npu_fused_infer_attention_score"
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_fused_infer_attention_score(q, k, v, key_antiquant_scale=torch.ones(3).half(),
                                                  value_antiquant_scale=torch.ones(3).half(), key_antiquant_mode=2,
                                                  value_antiquant_mode=2, **base)
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score", "key_antiquant_scale")
    prefill = torch.randn(B, N, 3, D, generator=gen).half()
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_fused_infer_attention_score(prefill, k, v, key_antiquant_scale=torch.ones(NKV).half(),
                                                  value_antiquant_scale=torch.ones(NKV).half(), key_antiquant_mode=2,
                                                  value_antiquant_mode=2, **base)
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score", "key_antiquant_mode")


def test_ifa_dequantises_with_the_combined_per_channel_scale() -> None:
    gen = _gen()
    q, k, v = _decode_inputs(gen)
    scale = torch.rand(2, NKV, 1, D, generator=gen).half() * 0.02
    offset = torch.randint(-3, 3, (2, NKV, 1, D), generator=gen).half()
    kwargs = dict(antiquant_scale=scale, antiquant_offset=offset, num_heads=N, num_key_value_heads=NKV,
                  input_layout="BNSD", scale_value=0.2)
    out = torch_npu.npu_incre_flash_attention(q, k, v, **kwargs)
    keys = ((k.float() + offset[0].float()) * scale[0].float()).half()
    values = ((v.float() + offset[1].float()) * scale[1].float()).half()
    _close(out, _attend(q, keys, values, 0.2, [S, S]))
    _opcheck("npu_incre_flash_attention", (q, k, v), kwargs)


def test_kv_padding_size_left_pads_the_valid_keys() -> None:
    """KV left padding: batch b's keys are [S - pad - len_b, S - pad); a range starting before 0 outputs zeros
    in decode. IFA reads the KV lengths from actual_seq_lengths, the fused op from actual_seq_lengths_kv."""
    gen = _gen()
    q, k, v = torch.randn(B, N, 1, D, generator=gen).half(), *(torch.randn(B, NKV, S, D, generator=gen).half()
                                                               for _ in range(2))
    pad = torch.tensor([5])
    ifa = torch_npu.npu_incre_flash_attention(q, k, v, actual_seq_lengths=[10, 35], kv_padding_size=pad, num_heads=N,
                                              num_key_value_heads=NKV, input_layout="BNSD", scale_value=0.2)
    expected = _attend(q, k, v, 0.2, [10, 35], starts=[S - 5 - 10, 0])
    _close(ifa, expected)
    fia, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, actual_seq_lengths_kv=[10, 35], kv_padding_size=pad,
                                                       num_heads=N, num_key_value_heads=NKV, input_layout="BNSD",
                                                       scale=0.2)
    assert torch.equal(fia, ifa)
    overrun = torch_npu.npu_incre_flash_attention(q, k, v, actual_seq_lengths=[10, 36], kv_padding_size=pad,
                                                  num_heads=N, num_key_value_heads=NKV, input_layout="BNSD",
                                                  scale_value=0.2)
    assert torch.count_nonzero(overrun[1]) == 0 and torch.equal(overrun[0], ifa[0])
    ignored = torch_npu.npu_incre_flash_attention(q, k, v, kv_padding_size=pad, num_heads=N, num_key_value_heads=NKV,
                                                  input_layout="BNSD", scale_value=0.2)
    _close(ignored, _attend(q, k, v, 0.2, [S, S]))
    _opcheck("npu_incre_flash_attention", (q, k, v), dict(actual_seq_lengths=[10, 35], kv_padding_size=pad,
                                                          num_heads=N, num_key_value_heads=NKV, input_layout="BNSD"))
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_incre_flash_attention(q, k, v, actual_seq_lengths=[10, 35], kv_padding_size=pad.int(),
                                            num_heads=N, num_key_value_heads=NKV, input_layout="BNSD")
    assert (exc.value.op, exc.value.argument) == ("npu_incre_flash_attention", "kv_padding_size")


def test_query_padding_size_left_pads_prefill_rows() -> None:
    gen = _gen()
    sq = 6
    q = torch.randn(1, N, sq, D, generator=gen).half()
    k, v = (torch.randn(1, NKV, S, D, generator=gen).half() for _ in range(2))
    out, _ = torch_npu.npu_fused_infer_attention_score(
        q, k, v, actual_seq_lengths=[3], actual_seq_lengths_kv=[S], query_padding_size=torch.tensor([1]), num_heads=N,
        num_key_value_heads=NKV, input_layout="BNSD", scale=0.2)
    rows = _attend(q, k, v, 0.2, [S])
    assert torch.count_nonzero(out[:, :, [0, 1, 5]]) == 0  # valid rows are [6 - 1 - 3, 6 - 1) = 2..4
    _close(out[:, :, 2:5], rows[:, :, 2:5])


def test_ifa_and_pfa_read_a_4d_query_under_bsh_by_its_heads() -> None:
    """The pages: a 4-D query is BNSD or BSND whatever the default "BSH" says; op-plugin's fake-tensor test
    passes [1, 40, 1, 128] with num_heads=1, which is BSND (S=40, N=1)."""
    gen = _gen()
    q, k, v = (torch.randn(1, 40, 1, 16, generator=gen).half() for _ in range(3))
    out = torch_npu.npu_prompt_flash_attention(q, k, v, next_tokens=65535)
    bsnd = torch_npu.npu_prompt_flash_attention(q, k, v, input_layout="BSND", next_tokens=65535)
    assert out.shape == q.shape and torch.equal(out, bsnd)
    decode = torch.randn(2, N, 1, D, generator=gen).half()
    kv = torch.randn(2, N, 7, D, generator=gen).half()
    assert torch.equal(torch_npu.npu_incre_flash_attention(decode, kv, kv, num_heads=N),
                       torch_npu.npu_incre_flash_attention(decode, kv, kv, num_heads=N, input_layout="BNSD"))
    _opcheck("npu_prompt_flash_attention", (q, k, v), {})
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_incre_flash_attention(decode, kv, kv, num_heads=3)
    assert (exc.value.op, exc.value.argument) == ("npu_incre_flash_attention", "query")


@pytest.mark.parametrize("layout", ["BSH_NBSD", "BSND_NBSD", "BNSD_NBSD", "BSH_BNSD", "BSND_BNSD"])
def test_fia_output_layouts(layout: str) -> None:
    """The page's "X_Y" layouts: X in, Y out (NBSD is BNSD with batch and heads swapped)."""
    gen = _gen()
    q = torch.randn(B, N, 3, D, generator=gen).bfloat16()
    k, v = (torch.randn(B, NKV, S, D, generator=gen).bfloat16() for _ in range(2))
    source, output = layout.split("_")
    as_input = {"BSH": lambda x: x.transpose(1, 2).reshape(B, x.shape[2], -1), "BSND": lambda x: x.transpose(1, 2),
                "BNSD": lambda x: x}[source]
    out, _ = torch_npu.npu_fused_infer_attention_score(*(as_input(x) for x in (q, k, v)), num_heads=N,
                                                       num_key_value_heads=NKV, input_layout=layout, scale=0.2)
    bnsd, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=N, num_key_value_heads=NKV,
                                                        input_layout="BNSD", scale=0.2)
    assert torch.equal(out, bnsd.transpose(0, 1) if output == "NBSD" else bnsd)


def test_fia_ntd_tnd_reads_heads_first_tokens() -> None:
    gen = _gen()
    tnd = [torch.randn(9, heads, D, generator=gen).half() for heads in (N, NKV, NKV)]
    options = dict(actual_seq_lengths=[4, 9], actual_seq_lengths_kv=[4, 9], num_heads=N, num_key_value_heads=NKV,
                   scale=0.2, softmax_lse_flag=True)
    expected, lse = torch_npu.npu_fused_infer_attention_score(*tnd, input_layout="TND", **options)
    ntd = [x.transpose(0, 1).contiguous() for x in tnd]
    out, ntd_lse = torch_npu.npu_fused_infer_attention_score(*ntd, input_layout="NTD_TND", **options)
    assert torch.equal(out, expected) and torch.equal(ntd_lse, lse)
    heads_first, _ = torch_npu.npu_fused_infer_attention_score(*ntd, input_layout="NTD", **options)
    assert torch.equal(heads_first, expected.transpose(0, 1))


def test_fusion_attention_softmax_layout_orders_the_tnd_statistics() -> None:
    """TND input: softmax_max / softmax_sum have the meta shape [T, N, 8], filled in N, T order by default
    and in T, N order with softmax_layout="TND" (op-plugin's test_npu_flash_attention_tnd reads the latter)."""
    gen = _gen()
    q, k, v = (torch.randn(7, N, D, generator=gen).half() for _ in range(3))
    options = dict(scale=0.2, actual_seq_qlen=[3, 7], actual_seq_kvlen=[3, 7])
    tnd = torch_npu.npu_fusion_attention(q, k, v, N, "TND", softmax_layout="TND", **options)
    default = torch_npu.npu_fusion_attention(q, k, v, N, "TND", **options)
    assert torch.equal(tnd[0], default[0]) and tnd[1].shape == default[1].shape == (7, N, 8)
    assert torch.equal(default[1], tnd[1].transpose(0, 1).contiguous().view(7, N, 8))
    row_max = lambda part: (part(q) @ part(k).transpose(-1, -2) * 0.2).amax(-1).T  # noqa: E731  [rows, N]
    expected = torch.cat([row_max(lambda x, s=s: x[s].transpose(0, 1).double()) for s in (slice(0, 3), slice(3, 7))])
    torch.testing.assert_close(tnd[1][..., 0].double(), expected, rtol=1e-3, atol=1e-3)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_fusion_attention(q.reshape(1, 7, N * D), k.reshape(1, 7, N * D), v.reshape(1, 7, N * D), N,
                                       "BSH", softmax_layout="TND")
    assert (exc.value.op, exc.value.argument) == ("npu_fusion_attention", "softmax_layout")


def test_rotary_mul_takes_a_rotation_matrix_and_3d_input() -> None:
    gen = _gen()
    x, r1, r2 = torch.rand(2, 2, 5, 64, generator=gen), torch.rand(1, 2, 1, 64, generator=gen), torch.rand(
        1, 2, 1, 64, generator=gen)
    half = torch.zeros(64, 64)
    half[:32, 32:], half[32:, :32] = torch.eye(32), -torch.eye(32)
    assert torch.equal(torch_npu.npu_rotary_mul(x, r1, r2, "half", rotate=half), torch_npu.npu_rotary_mul(x, r1, r2))
    _opcheck("npu_rotary_mul", (x.contiguous(), r1, r2, "half", half), {})
    tnd = torch.rand(6, 2, 64, generator=gen)
    cos, sin = torch.rand(6, 1, 64, generator=gen), torch.rand(6, 1, 64, generator=gen)
    expected = tnd * cos + torch.cat((-tnd[..., 32:], tnd[..., :32]), -1) * sin
    torch.testing.assert_close(torch_npu.npu_rotary_mul(tnd, cos, sin), expected)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_rotary_mul(x, r1, r2, "quarter")
    assert (exc.value.op, exc.value.argument) == ("npu_rotary_mul", "rotary_mode")
    # op-plugin's words, which upstream's test_npu_rotary_mul.py test_rotary_mul_error_param matches
    assert "The rotary_mode of npu_rotary_mul should be half or interleave, but got quarter" in str(exc.value)


def test_rotary_mul_takes_an_unaligned_even_head_dim_and_refuses_an_odd_one() -> None:
    """The page: D even and below 896 in both modes; 130 is not 32-byte aligned and is taken, 125 and 896
    are refused naming input, with the way round it in the message."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 4, 130, generator=gen)
    cos, sin = torch.randn(1, 1, 4, 130, generator=gen), torch.randn(1, 1, 4, 130, generator=gen)
    half = x.double().chunk(2, dim=-1)
    expected = x.double() * cos.double() + torch.cat([-half[1], half[0]], dim=-1) * sin.double()
    torch.testing.assert_close(torch_npu.npu_rotary_mul(x, cos, sin).double(), expected, rtol=1e-6, atol=1e-6)
    for dim in (125, 896):
        odd = torch.zeros(1, 2, 3, dim)
        table = torch.zeros(1, 1, 3, dim)
        with pytest.raises(OpArgumentError) as exc:
            torch_npu.npu_rotary_mul(odd, table, table, "interleave")
        assert (exc.value.op, exc.value.argument) == ("npu_rotary_mul", "input")
        assert "even D below 896" in str(exc.value)


def test_apply_rotary_pos_emb_quarter_rotates_each_half() -> None:
    gen = _gen()
    query, key = torch.rand(1, 3, 2, 16, generator=gen), torch.rand(1, 3, 1, 16, generator=gen)
    cos, sin = torch.rand(1, 3, 1, 16, generator=gen), torch.rand(1, 3, 1, 16, generator=gen)
    quarter = lambda x: torch.cat((-x[..., 4:8], x[..., :4], -x[..., 12:], x[..., 8:12]), -1)  # noqa: E731
    expected_q, expected_k = query * cos + quarter(query) * sin, key * cos + quarter(key) * sin
    q_out, k_out = torch_npu.npu_apply_rotary_pos_emb(query.clone(), key.clone(), cos, sin, rotary_mode="quarter")
    torch.testing.assert_close(q_out, expected_q)
    torch.testing.assert_close(k_out, expected_k)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_apply_rotary_pos_emb(torch.rand(1, 3, 2, 6), torch.rand(1, 3, 1, 6), torch.rand(1, 3, 1, 6),
                                           torch.rand(1, 3, 1, 6), rotary_mode="quarter")
    assert (exc.value.op, exc.value.argument) == ("npu_apply_rotary_pos_emb", "query")


def test_reshape_and_cache_writes_fractal_nz_caches() -> None:
    """op-plugin's int8 case: an int8 key [T, 1, 512] into [blocks, 16, block_size, 32] and a bfloat16 value
    [T, 1, 64] into [blocks, 4, block_size, 16]: token t's row, cut into 32-byte runs, run r at [block, r, offset]."""
    gen = _gen()
    tokens, blocks, size = 5, 3, 8
    key, value = _int8(tokens, 1, 512, gen=gen), torch.rand(tokens, 1, 64, generator=gen).bfloat16()
    key_cache, value_cache = _int8(blocks, 16, size, 32, gen=gen), torch.rand(blocks, 4, size, 16).bfloat16()
    slots = torch.tensor([3, 17, 8, 22, 0], dtype=torch.int32)
    expected_k, expected_v = key_cache.clone(), value_cache.clone()
    for token, slot in enumerate(slots.tolist()):
        block, offset = divmod(slot, size)
        expected_k[block, :, offset] = key[token].reshape(16, 32)
        expected_v[block, :, offset] = value[token].reshape(4, 16)
    assert torch_npu._npu_reshape_and_cache(key, value, key_cache, value_cache, slots) is None
    assert torch.equal(key_cache, expected_k) and torch.equal(value_cache, expected_v)


def test_atb_flash_attention_takes_a_numpy_scale() -> None:
    """op-plugin's ATB tests pass ``np.float16(1 / sqrt(D))`` as scale_value; torch_npu's binding reads it."""
    gen = _gen()
    q, k, v = (torch.randn(6, 2, 16, generator=gen).half() for _ in range(3))
    seq_len = torch.tensor([6], dtype=torch.int32)
    out_np, out_py = torch.empty(6, 2, 16).half(), torch.empty(6, 2, 16).half()
    torch_npu._npu_flash_attention_unpad(q, k, v, seq_len, numpy.float16(0.25), 2, 2, out_np)
    torch_npu._npu_flash_attention_unpad(q, k, v, seq_len, 0.25, 2, 2, out_py)
    assert torch.equal(out_np, out_py)


def _attention_bnsd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(scale q k^T) v in float64, BNSD, heads matched."""
    probs = torch.softmax(q.double() @ k.double().transpose(-1, -2) * scale, dim=-1)
    return probs @ v.double()


@pytest.mark.parametrize("layout", ["BSH", "BNSD_BSND"])
def test_fia_output_quantisation_per_channel_and_per_tensor(layout: str) -> None:
    """The page's int8 post-quantisation row: float16 in, int8 out = rint(out * quant_scale2 + quant_offset2),
    saturated; per channel the scale holds N x D values ((H,) for BSH, (N, D) for BSND)."""
    gen = _gen()
    b, n, sq, skv, d = 2, 2, 3, 5, 16
    q, k, v = (torch.randn(b, n, s, d, generator=gen).half() for s in (sq, skv, skv))
    expected = _attention_bnsd(q, k, v, 0.25).transpose(1, 2)  # [B, Sq, N, D]
    if layout == "BSH":
        q_in, k_in, v_in = (t.transpose(1, 2).reshape(b, t.shape[2], n * d) for t in (q, k, v))
        scale, offset = torch.rand(n * d, generator=gen) * 60, torch.randn(n * d, generator=gen)
        expected = expected.reshape(b, sq, n * d)
    else:
        q_in, k_in, v_in = q, k, v
        scale, offset = torch.rand(n, d, generator=gen) * 60, torch.randn(n, d, generator=gen)
    out = torch_npu.npu_fused_infer_attention_score(q_in, k_in, v_in, num_heads=n, input_layout=layout, scale=0.25,
                                                    quant_scale2=scale, quant_offset2=offset)[0]
    wanted = torch.round(expected * scale.double() + offset.double()).clamp(-128, 127)
    assert out.dtype == torch.int8 and out.shape == wanted.shape
    assert (out.double() - wanted).abs().max() <= 1  # float32 against float64 at a rounding boundary
    per_tensor = torch_npu.npu_fused_infer_attention_score(q_in, k_in, v_in, num_heads=n, input_layout=layout,
                                                           scale=0.25, quant_scale2=torch.tensor([500.0]))[0]
    assert int(per_tensor.abs().max()) == 127  # saturated


def test_fia_full_int8_quantisation_and_a_wrong_quant_scale2_are_refused_by_name() -> None:
    q = torch.zeros(1, 2, 1, 16, dtype=torch.float16)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_fused_infer_attention_score(q, q, q, num_heads=2, input_layout="BNSD",
                                                  dequant_scale1=torch.ones(1))
    assert (exc.value.op, exc.value.argument) == ("npu_fused_infer_attention_score", "dequant_scale1")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_fused_infer_attention_score(q, q, q, num_heads=2, input_layout="BNSD",
                                                  quant_scale2=torch.ones(5))
    assert exc.value.argument == "quant_scale2"
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_fused_infer_attention_score(q, q, q, num_heads=2, input_layout="BNSD",
                                                  quant_offset2=torch.ones(1))
    assert exc.value.argument == "quant_offset2"
