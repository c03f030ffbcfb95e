"""npu_grouped_matmul (float, W8A8, W8A16/W4A16) against per-group plain-torch products in int64 / float64."""

from __future__ import annotations

import struct

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(5)


def _int8(*shape: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(-128, 128, shape, dtype=torch.int8, generator=gen)


def _pack_scale(value: float) -> int:
    bits = struct.unpack("<I", struct.pack("<f", value))[0] & 0xFFFFE000
    return bits | (1 << 46)


@pytest.mark.parametrize("list_type", [0, 1])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_float_moe_form_with_bias(list_type: int, dtype: torch.dtype) -> None:
    gen = _gen()
    counts = [3, 0, 4]
    m, k, n = 8, 16, 6  # one trailing row belongs to no group
    x = torch.randn(m, k, generator=gen).to(dtype)
    w = torch.randn(3, k, n, generator=gen).to(dtype)
    bias = torch.randn(3, n, generator=gen).to(torch.float16 if dtype == torch.float16 else torch.float32)
    group_list = torch.tensor(counts if list_type else torch.tensor(counts).cumsum(0).tolist(), dtype=torch.int64)
    (out,) = torch_npu.npu_grouped_matmul([x], [w], bias=[bias], group_list=group_list, split_item=3, group_type=0,
                                          group_list_type=list_type)
    start = 0
    for g, count in enumerate(counts):
        ref = x[start : start + count].double() @ w[g].double() + bias[g].double()
        torch.testing.assert_close(out[start : start + count].double(), ref.to(dtype).double(), rtol=1e-2, atol=1e-2)
        start += count
    assert not out[start:].any()


def test_w8a8_per_token_dequant_to_bf16() -> None:
    gen = _gen()
    counts, k, n = [2, 3], 32, 8
    x = _int8(5, k, gen=gen)
    w = _int8(2, k, n, gen=gen)
    scale = torch.rand(2, n, generator=gen) * 0.01
    per_token = torch.rand(5, generator=gen) * 0.1
    (out,) = torch_npu.npu_grouped_matmul([x], [w], scale=[scale], per_token_scale=[per_token],
                                          group_list=torch.tensor(counts), split_item=2, group_type=0,
                                          group_list_type=1, output_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    start = 0
    for g, count in enumerate(counts):
        acc = x[start : start + count].long() @ w[g].long()
        ref = acc.double() * scale[g].double() * per_token[start : start + count, None].double()
        torch.testing.assert_close(out[start : start + count].double(), ref.to(torch.bfloat16).double(),
                                   rtol=1e-2, atol=1e-3)
        start += count


def test_w8a8_int32_output_is_the_exact_accumulator() -> None:
    gen = _gen()
    x = _int8(4, 64, gen=gen)
    w = _int8(2, 64, 8, gen=gen)
    bias = torch.randint(-1000, 1000, (2, 8), dtype=torch.int32, generator=gen)
    (out,) = torch_npu.npu_grouped_matmul([x], [w], bias=[bias], group_list=torch.tensor([1, 4]), split_item=3,
                                          group_type=0, output_dtype=torch.int32)
    ref = torch.cat([x[:1].long() @ w[0].long() + bias[0], x[1:].long() @ w[1].long() + bias[1]])
    assert out.dtype == torch.int32 and torch.equal(out.long(), ref)
    # op-plugin's meta test passes an int64 [E, N] scale with output_dtype=int32: checked, not applied
    scale = torch.full((2, 8), 3, dtype=torch.int64)
    (scaled,) = torch_npu.npu_grouped_matmul([x], [w], bias=[bias], scale=[scale], group_list=torch.tensor([1, 4]),
                                             split_item=3, group_type=0, output_dtype=torch.int32)
    assert torch.equal(scaled, out)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul([x], [w], scale=[torch.ones(2, 9)], group_list=torch.tensor([1, 4]),
                                     split_item=3, group_type=0, output_dtype=torch.int32)
    assert exc.value.argument == "scale[0]"
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul([x], [w], group_list=torch.tensor([1, 4]), split_item=3, group_type=0,
                                     output_dtype=torch.bfloat16)
    assert exc.value.argument == "scale"


def test_w8a8_per_channel_int64_scale_to_int8_per_tensor_form() -> None:
    gen = _gen()
    xs = [_int8(3, 16, gen=gen), _int8(2, 16, gen=gen)]
    ws = [_int8(16, 4, gen=gen), _int8(16, 4, gen=gen)]
    scales = [torch.tensor([_pack_scale(0.003)] * 4, dtype=torch.int64) for _ in ws]
    outs = torch_npu.npu_grouped_matmul(xs, ws, scale=scales, group_type=-1)
    assert [o.dtype for o in outs] == [torch.int8, torch.int8]
    trunc = struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", 0.003))[0] & 0xFFFFE000))[0]
    for xi, wi, out in zip(xs, ws, outs):
        ref = torch.round((xi.long() @ wi.long()).double() * trunc).clamp(-128, 127)
        assert (out.double() - ref).abs().max() <= 1


def test_gmm_refuses_mismatched_quant_configuration() -> None:
    gen = _gen()
    x, w = _int8(2, 8, gen=gen), _int8(1, 8, 4, gen=gen)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_grouped_matmul([x], [w], group_list=torch.tensor([2]), split_item=3, group_type=0,
                                     output_dtype=torch.bfloat16)
    assert exc.value.op == "npu_grouped_matmul"
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_grouped_matmul([x.float()], [w], antiquant_scale=[torch.ones(4)], group_type=-1)
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul", "antiquant_scale")


def test_w8a8_key_value_group_list_from_init_routing_v2_equals_counts() -> None:
    """group_list_type=2 takes npu_moe_init_routing_v2's [E, 2] (expert, count) pairs directly."""
    gen = _gen()
    tokens, k, h, experts = 6, 2, 16, 4
    x = torch.randn(tokens, h, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(3, generator=gen)[:k] for _ in range(tokens)]).to(torch.int32)  # expert 3 idle
    expanded, _, pairs, scale = torch_npu.npu_moe_init_routing_v2(
        x, ids, expert_num=experts, quant_mode=1, expert_tokens_num_type=2, expert_tokens_num_flag=True)
    _, _, counts, _ = torch_npu.npu_moe_init_routing_v2(
        x, ids, expert_num=experts, quant_mode=1, expert_tokens_num_type=1, expert_tokens_num_flag=True)
    w = _int8(experts, h, 8, gen=gen)
    common = {"split_item": 3, "group_type": 0, "output_dtype": torch.int32}
    (by_pairs,) = torch_npu.npu_grouped_matmul([expanded], [w], group_list=pairs, group_list_type=2, **common)
    (by_counts,) = torch_npu.npu_grouped_matmul([expanded], [w], group_list=counts, group_list_type=1, **common)
    assert pairs[:, 1].sum() == tokens * k and not pairs[3:].any()
    assert torch.equal(by_pairs, by_counts)


def _pack_int4_low_first(levels: torch.Tensor) -> torch.Tensor:
    """Eight int4 values per int32 word along the last dim, element 0 in the low nibble."""
    nibbles = (levels.long() & 0xF).reshape(*levels.shape[:-1], -1, 8)
    words = (nibbles << (torch.arange(8) * 4)).sum(dim=-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


@pytest.mark.parametrize("bits", [8, 4])
def test_weight_only_quantised_moe_form_dequantises_each_expert(bits: int) -> None:
    """Formula 4: y = x @ ((w + antiquant_offset) * antiquant_scale), per channel (int8) or per group of K rows (int4)."""
    gen = _gen()
    experts, k, n, counts = 2, 32, 16, [4, 2]
    x = torch.randn(sum(counts), k, generator=gen).to(torch.bfloat16)
    low, high = (-128, 128) if bits == 8 else (-8, 8)
    levels = torch.randint(low, high, (experts, k, n), generator=gen, dtype=torch.int8)
    groups = 1 if bits == 8 else 4
    scale_shape = (experts, n) if bits == 8 else (experts, groups, n)
    scale = (torch.rand(*scale_shape, generator=gen) / 50).to(torch.bfloat16)
    offset = torch.randint(-3, 3, scale_shape, generator=gen).to(torch.bfloat16)
    weight = levels if bits == 8 else _pack_int4_low_first(levels)
    (y,) = torch_npu.npu_grouped_matmul(
        [x], [weight], antiquant_scale=[scale], antiquant_offset=[offset], group_list=torch.tensor(counts),
        group_list_type=1, split_item=2, group_type=0)
    per_row = (lambda p: p.unsqueeze(1)) if bits == 8 else (lambda p: p.repeat_interleave(k // groups, dim=1))
    dequant = ((levels.double() + per_row(offset).double()) * per_row(scale).double()).to(torch.bfloat16).double()
    ref = torch.cat([x[:4].double() @ dequant[0], x[4:].double() @ dequant[1]])
    assert y.dtype == torch.bfloat16 and y.shape == (6, n)
    torch.testing.assert_close(y.double(), ref, rtol=2**-7, atol=2**-7)


def _low_word_int64(scale: torch.Tensor) -> torch.Tensor:
    """The A8W4 int64 scale op-plugin's test builds: each float32's bits in the low word, the high word 0."""
    return scale.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


@pytest.mark.parametrize("output_dtype", [torch.float16, torch.bfloat16])
def test_a8w4_int8_x_by_int4_words_per_k_group_with_bias_and_per_token_scale(output_dtype: torch.dtype) -> None:
    """op-plugin's test_npu_grouped_matmul_A8W4, small: x's int8 split into x // 16 and (x & 15) - 8, each
    multiplied by the int4 weight per k-group and scale, recombined as 16 * high + low, plus bias, times the
    per-token scale; counts group_list, one output (split_item=3), weights as one [E, K, N / 8] tensor."""
    gen = _gen()
    experts, m, k, n, k_groups = 2, 5, 64, 16, 2
    x = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8)
    w = torch.randint(-5, 5, (experts, k, n), generator=gen, dtype=torch.int32)
    packed = torch_npu.npu_quantize(w.float(), torch.tensor([1.0]), None, torch.quint4x2, -1, False)
    scale = (torch.rand(experts, k_groups, n, generator=gen) * 1e-2).half().float()
    bias = torch.rand(experts, n, generator=gen) * 5
    per_token = torch.rand(m, 1, generator=gen)
    (out,) = torch_npu.npu_grouped_matmul([x], [packed], bias=[bias], scale=[_low_word_int64(scale)],
                                          per_token_scale=[per_token], group_list=torch.tensor([3, 2]), split_item=3,
                                          group_type=0, group_list_type=1, output_dtype=output_dtype)
    high, low = torch.div(x.long(), 16, rounding_mode="floor"), (x.long() & 15) - 8
    size = k // k_groups
    ref = torch.zeros(m, n, dtype=torch.float64)
    for r, e in enumerate([0, 0, 0, 1, 1]):
        row = bias[e].double().clone()
        for j in range(k_groups):
            part = slice(j * size, (j + 1) * size)
            products = [(nibble[r, part].double() @ w[e, part].double()) * scale[e, j].double()
                        for nibble in (high, low)]
            row += 16 * products[0] + products[1]
        ref[r] = row * per_token[r].double()
    assert out.dtype == output_dtype and out.shape == (m, n)
    torch.testing.assert_close(out.double(), ref.to(output_dtype).double(), rtol=1e-2, atol=1e-2)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_grouped_matmul([x], [packed], per_token_scale=[per_token], group_list=torch.tensor([3, 2]),
                                     split_item=3, group_type=0, group_list_type=1, output_dtype=output_dtype)
    assert exc.value.argument == "scale"


def test_group_type_outside_torch_npus_three_is_refused_in_its_meta_functions_words() -> None:
    x, w = torch.randn(4, 8), torch.randn(8, 4)
    for group_type in (1, 3):
        with pytest.raises(RuntimeError) as exc:
            torch_npu.npu_grouped_matmul([x], [w], group_list=torch.tensor([4]), split_item=2, group_type=group_type)
        assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul", "group_type")
        assert str(exc.value) == f"group_type only supports -1, 0 and 2, but got {group_type}"


def test_a_python_group_list_splits_rows_with_group_type_minus_one_as_with_none() -> None:
    """op-plugin's List kernel reads no group_type; its meta function allows -1 beside a Python list."""
    gen = _gen()
    x = torch.randn(6, 8, generator=gen)
    ws = [torch.randn(8, n, generator=gen) for n in (4, 2)]
    listed = torch_npu.npu_grouped_matmul([x], ws, group_list=[2, 6], split_item=1, group_type=-1)
    plain = torch_npu.npu_grouped_matmul([x], ws, group_list=[2, 6], split_item=1)
    assert [tuple(out.shape) for out in listed] == [(2, 4), (4, 2)]
    assert all(torch.equal(a, b) for a, b in zip(listed, plain))


def test_k_split_shapes_on_fake_tensors_follow_the_meta_function_and_the_kernel_checks_real_ones() -> None:
    """op-plugin's meta function gives [E, M, N] from x and weight[0]; only the kernel checks that the
    weight's rows are x's K (upstream's test_fake_tensor.py TestGroupedMatmul meta_6 relies on it)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w = torch.randn(256, 1792).t(), torch.randn(1792, 256)
        (out,) = torch_npu.npu_grouped_matmul([x], [w], group_list=torch.tensor([256, 512, 1024, 1792]),
                                             split_item=3, group_type=2, group_list_type=0)
    assert tuple(out.shape) == (4, 1792, 256)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_grouped_matmul([torch.randn(256, 1792).t()], [torch.randn(1792, 256)],
                                     group_list=torch.tensor([256, 512, 1024, 1792]), split_item=3, group_type=2)
    assert exc.value.argument == "group_type"


def test_float8_x_on_fake_tensors_gets_the_meta_functions_shapes_and_is_refused_on_real_ones() -> None:
    """The FP8/MX modes are not modeled; op-plugin's meta function still gives their shapes, which a traced
    graph needs: rows of all x by N (stacked per group for group_type 2), N of a transposed float32 FP4
    weight as it stands, any group_list_type beside a Python list with split_item 2/3 (upstream's
    test_fake_tensor.py TestGroupedMatmul meta_950_fp8_*, weight_float32_transpose, quant_empty_tensor_m0)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    fp8 = torch.float8_e4m3fn
    with FakeTensorMode():
        (rows,) = torch_npu.npu_grouped_matmul([torch.empty(16, 256, dtype=fp8)], [torch.empty(2, 256, 32, dtype=fp8)],
                                              scale=[torch.empty(2, 32, dtype=torch.int64)], group_list=torch.tensor([8, 16]),
                                              split_item=2, group_type=0, output_dtype=torch.float16)
        (k_split,) = torch_npu.npu_grouped_matmul([torch.empty(128, 64, dtype=fp8).t()], [torch.empty(128, 96, dtype=fp8)],
                                                 group_list=torch.tensor([32, 64, 128]), split_item=2, group_type=2,
                                                 output_dtype=torch.float16)
        (listed,) = torch_npu.npu_grouped_matmul([torch.empty(16, 64, dtype=fp8)],
                                                [torch.empty(2, 32, 64).transpose(-1, -2)], group_list=[8, 8],
                                                group_list_type=1, split_item=3, group_type=0)
    assert [(tuple(t.shape), t.dtype) for t in (rows, k_split, listed)] == [
        ((16, 32), torch.float16), ((3, 64, 96), torch.float16), ((16, 32), fp8)]
    with pytest.raises(ValueError) as exc, FakeTensorMode():  # the meta function's own check
        torch_npu.npu_grouped_matmul([torch.empty(8, 0, dtype=fp8)], [torch.empty(2, 0, 4, dtype=fp8)],
                                     group_list=torch.tensor([4, 8]), split_item=2, group_type=0)
    assert exc.value.argument == "x"
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_grouped_matmul([torch.zeros(4, 8, dtype=fp8)], [torch.zeros(8, 4, dtype=fp8)], group_type=-1)
    assert exc.value.argument == "x[0]"
