"""EP MoE ops of the public W8A8 / expert-parallel paths: re-routing, init-routing-quant, GMM + finalize routing.

References are plain torch written from the op-plugin docs (offset sums, sort/gather/rowmax-127 quantisation,
per-channel x per-token dequantisation then logit-weighted scatter-add), independent of the kernels.
"""

import pytest
import torch
from test_families import _int_close

from pytest_npufuse import torch_npu


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_re_routing_orders_rank_major_blocks_expert_major() -> None:
    counts = torch.tensor([[1, 2], [2, 0], [0, 1]], dtype=torch.int32)  # [ranks, local experts]
    tokens = torch.randint(-100, 100, (6, 8), generator=_gen(1), dtype=torch.int8)
    scales = torch.rand(6, generator=_gen(2))
    permuted, permuted_scales, idx, per_expert = torch_npu.npu_moe_re_routing(tokens, counts, per_token_scales=scales)
    # rank 0 sends rows 0 (expert 0) and 1-2 (expert 1), rank 1 rows 3-4 (expert 0), rank 2 row 5 (expert 1)
    assert idx.dtype == torch.int32 and idx.tolist() == [0, 3, 4, 1, 2, 5]
    assert torch.equal(permuted, tokens[idx.long()]) and torch.equal(permuted_scales, scales[idx.long()])
    assert per_expert.dtype == torch.int32 and per_expert.tolist() == [3, 3]


def test_re_routing_refuses_counts_that_do_not_cover_the_tokens() -> None:
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_moe_re_routing(torch.zeros(4, 8, dtype=torch.bfloat16), torch.tensor([[1, 2]]))
    assert (exc.value.op, exc.value.argument) == ("npu_moe_re_routing", "expert_token_num_per_rank")


def test_init_routing_quant_sorts_gathers_and_quantises_each_row_dynamically() -> None:
    tokens, k, experts, hidden = 5, 2, 4, 16
    x = torch.randn(tokens, hidden, generator=_gen(3)).to(torch.bfloat16)
    expert_idx = torch.randint(0, experts, (tokens, k), generator=_gen(4), dtype=torch.int32)
    expanded_x, row_idx, counts, before_capacity, scale = torch_npu.npu_moe_init_routing_quant(
        x, expert_idx=expert_idx, active_num=0, expert_capacity=0, expert_num=experts, drop_pad_mode=0,
        expert_tokens_num_mode=2, expert_tokens_before_capacity_flag=False, quant_mode=1,
    )
    order = torch.sort(expert_idx.reshape(-1).long(), stable=True).indices
    rows = x[order // k].double()
    ref_scale = rows.abs().amax(dim=-1) / 127
    assert expanded_x.dtype == torch.int8 and expanded_x.shape == (tokens * k, hidden)
    _int_close(expanded_x, torch.round(rows / ref_scale[:, None]))
    torch.testing.assert_close(scale.double(), ref_scale, rtol=1e-6, atol=0)
    assert torch.equal(row_idx[order], torch.arange(tokens * k, dtype=torch.int32))  # gather index
    assert counts.dtype == torch.int32 and counts.tolist() == torch.bincount(expert_idx.reshape(-1), minlength=experts).tolist()
    assert before_capacity.shape == (0,)


def test_grouped_matmul_finalize_routing_dequantises_weights_by_logit_and_scatter_adds() -> None:
    m, k, n, experts, batch = 7, 32, 16, 3, 4
    x = torch.randint(-100, 100, (m, k), generator=_gen(5), dtype=torch.int8)
    w = torch.randint(-100, 100, (experts, k, n), generator=_gen(6), dtype=torch.int8)
    scale = torch.rand(experts, n, generator=_gen(7)) * 1e-3
    pertoken = torch.rand(m, generator=_gen(8)) * 1e-2
    logit = torch.rand(m, generator=_gen(9))
    row_index = torch.tensor([0, 2, 1, 3, 0, 2, 1])
    group_list = torch.tensor([2, 3, 1])  # counts: 6 of the 7 rows are routed, row 6 takes no part
    shared = torch.randn(2, n, generator=_gen(10)).to(torch.bfloat16)
    y = torch_npu.npu_grouped_matmul_finalize_routing(
        x, w, group_list, scale=scale, pertoken_scale=pertoken, shared_input=shared, logit=logit,
        row_index=row_index, shared_input_weight=0.5, shared_input_offset=1, output_bs=batch,
    )
    ref = torch.zeros(batch, n, dtype=torch.float64)
    ref[1:3] = shared.double() * 0.5
    experts_of_rows = [0, 0, 1, 1, 1, 2]
    for r, e in enumerate(experts_of_rows):
        ref[row_index[r]] += (x[r].double() @ w[e].double()) * scale[e].double() * pertoken[r].double() * logit[r].double()
    assert y.dtype == torch.float32 and y.shape == (batch, n)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-6)


def test_grouped_matmul_finalize_routing_refuses_bias_with_int8_weights() -> None:
    """The doc: bias and offset are A8W4's only."""
    x, w = torch.zeros(2, 16, dtype=torch.int8), torch.zeros(1, 16, 8, dtype=torch.int8)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_grouped_matmul_finalize_routing(x, w, torch.tensor([2]), scale=torch.ones(1, 8),
                                                      pertoken_scale=torch.ones(2), bias=torch.ones(1, 8))
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul_finalize_routing", "bias")


def _low_word_int64(scale: torch.Tensor) -> torch.Tensor:
    """op-plugin's A8W4 test scale: each float32's bits in the low word of an int64, the high word 0."""
    return scale.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def test_grouped_matmul_finalize_routing_a8w4_with_bias_offset_and_no_per_token_scale() -> None:
    """op-plugin's A8W4 case (test_npu_grouped_matmul_finalize_routing_a8w4), small: each int8 of x split into
    a high nibble x // 16 and a low one (x & 15) - 8, both multiplied by the int4 weight per k-group and
    scale, recombined as 16 * high + low, plus bias and each k-group's row sum of x times offset; then the
    per-token scale, the logits and the scatter-add."""
    m, k, n, experts, k_groups = 6, 64, 16, 2, 2
    x = torch.randint(-128, 128, (m, k), generator=_gen(11), dtype=torch.int8)
    w = torch.randint(-5, 5, (experts, k, n), generator=_gen(12), dtype=torch.int32)
    packed = torch_npu.npu_quantize(w.float(), torch.tensor([1.0]), None, torch.quint4x2, -1, False)
    scale = (torch.rand(experts, k_groups, n, generator=_gen(13)) * 1e-2).half().float()
    bias = torch.rand(experts, n, generator=_gen(14)) * 1e-2
    offset = torch.randint(-5, 5, (experts, k_groups, n), generator=_gen(15)).float()
    logit, row_index = torch.rand(m, generator=_gen(16)), torch.tensor([2, 0, 1, 1, 0, 2])
    group_list = torch.tensor([4, 2])
    y = torch_npu.npu_grouped_matmul_finalize_routing(
        x, packed, group_list, scale=_low_word_int64(scale), bias=bias, offset=offset, logit=logit,
        row_index=row_index, output_bs=3)
    high, low = torch.div(x.long(), 16, rounding_mode="floor"), (x.long() & 15) - 8
    ref = torch.zeros(3, n, dtype=torch.float64)
    size = k // k_groups
    for r, e in enumerate([0, 0, 0, 0, 1, 1]):
        row = bias[e].double().clone()
        for j in range(k_groups):
            part = slice(j * size, (j + 1) * size)
            weight = w[e, part].double()
            products = [(nibble[r, part].double() @ weight) * scale[e, j].double() for nibble in (high, low)]
            row += 16 * products[0] + products[1] + x[r, part].double().sum() * offset[e, j].double()
        ref[row_index[r]] += row * logit[r].double()
    assert y.dtype == torch.float32 and y.shape == (3, n)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_grouped_matmul_finalize_routing(x, packed, group_list, scale=_low_word_int64(scale))
    assert (exc.value.op, exc.value.argument) == ("npu_grouped_matmul_finalize_routing", "bias")
