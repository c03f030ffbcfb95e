"""MoE ops of ``pytest_npufuse.torch_npu`` against plain-torch formulas written from the API pages.

The references are loops and float64 sums over the documented formulas, independent of the kernels'
vectorised code; permutations and counts compare exactly, float sums within one rounding.
"""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu

GEN_SEED = 7


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(GEN_SEED)


def _distinct_topk(tokens: int, experts: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """[tokens, k] int32 expert ids, distinct within a row (as a gate produces)."""
    return torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(tokens)]).to(torch.int32)


# ------------------------------------------------------------------------------ gating_top_k_softmax


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(6, 8), (2, 3, 16)])
def test_gating_top_k_softmax_matches_softmax_topk(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape, generator=_gen()).to(dtype)
    k = 3
    y, idx, row_idx = torch_npu.npu_moe_gating_top_k_softmax(x, None, k=k)
    probs = torch.softmax(x.double(), dim=-1)
    ref_vals, ref_idx = probs.topk(k, dim=-1)
    assert torch.equal(idx.long(), ref_idx)
    torch.testing.assert_close(y.double(), ref_vals.to(dtype).double(), rtol=1e-2, atol=1e-3)
    rows = x.numel() // x.shape[-1]
    flat_rows = row_idx.reshape(rows, k)
    for r in range(rows):
        for j in range(k):
            assert flat_rows[r, j] == j * rows + r


def test_gating_top_k_softmax_refuses_finished() -> None:
    x = torch.randn(4, 8)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_moe_gating_top_k_softmax(x, torch.zeros(4, dtype=torch.bool), k=2)
    assert (exc.value.op, exc.value.argument) == ("npu_moe_gating_top_k_softmax", "finished")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_moe_gating_top_k_softmax(x, None, k=9)
    assert (exc.value.op, exc.value.argument) == ("npu_moe_gating_top_k_softmax", "k")


# ------------------------------------------------------------------------------ init_routing (v1)


def test_init_routing_follows_the_documented_sort() -> None:
    gen = _gen()
    rows, k, h = 5, 2, 4
    x = torch.randn(rows, h, generator=gen)
    expert_idx = _distinct_topk(rows, 4, k, gen)
    row_idx = torch.arange(rows * k, dtype=torch.int32).reshape(k, rows).t().contiguous()
    expanded_x, expanded_row_idx, expanded_expert_idx = torch_npu.npu_moe_init_routing(x, row_idx, expert_idx, 3)
    pairs = sorted(range(rows * k), key=lambda p: (int(expert_idx.reshape(-1)[p]), p))
    assert expanded_expert_idx.tolist() == [int(expert_idx.reshape(-1)[p]) for p in pairs]
    src = [int(row_idx.reshape(-1)[p]) for p in pairs]
    for i, s in enumerate(src):
        assert expanded_row_idx[s] == i
    assert expanded_x.shape == (3 * k, h)
    for i in range(3 * k):
        assert torch.equal(expanded_x[i], x[src[i] % rows])


# ------------------------------------------------------------------------------ init_routing_v2


def _ref_routes(expert_idx: torch.Tensor, start: int, end: int) -> list[tuple[int, int]]:
    """(expert, flat position) of the routed pairs in routing order: by expert, then flat position."""
    flat = expert_idx.reshape(-1).tolist()
    return sorted(((e, p) for p, e in enumerate(flat) if start <= e < end))


@pytest.mark.parametrize("row_idx_type", [0, 1])
def test_init_routing_v2_dropless_gather_and_counts(row_idx_type: int) -> None:
    gen = _gen()
    rows, k, h, experts = 6, 3, 8, 8
    x = torch.randn(rows, h, generator=gen).to(torch.bfloat16)
    expert_idx = _distinct_topk(rows, experts, k, gen)
    expanded_x, expanded_row_idx, counts, _ = torch_npu.npu_moe_init_routing_v2(
        x, expert_idx, active_num=rows * k, expert_num=experts, expert_tokens_num_type=1,
        expert_tokens_num_flag=True, active_expert_range=[0, experts], row_idx_type=row_idx_type,
    )
    routes = _ref_routes(expert_idx, 0, experts)
    for i, (_, p) in enumerate(routes):
        assert torch.equal(expanded_x[i], x[p // k])
        if row_idx_type == 0:
            assert expanded_row_idx[p] == i
        else:
            assert expanded_row_idx[i] == p
    assert counts.tolist() == [sum(1 for e, _ in routes if e == j) for j in range(experts)]


def test_init_routing_v2_active_range_cumsum_and_key_value() -> None:
    gen = _gen()
    rows, k, h, experts = 5, 2, 4, 8
    x = torch.randn(rows, h, generator=gen)
    expert_idx = _distinct_topk(rows, experts, k, gen)
    start, end = 2, 6
    routes = _ref_routes(expert_idx, start, end)
    _, row_idx, cumsum, _ = torch_npu.npu_moe_init_routing_v2(
        x, expert_idx, expert_num=experts, expert_tokens_num_flag=True, active_expert_range=[start, end]
    )
    counts = [sum(1 for e, _ in routes if e == j) for j in range(start, end)]
    assert cumsum.tolist() == torch.tensor(counts).cumsum(0).tolist()
    routed = {p for _, p in routes}
    assert all((row_idx[p] >= 0) == (p in routed) for p in range(rows * k))
    _, _, pairs, _ = torch_npu.npu_moe_init_routing_v2(
        x, expert_idx, expert_num=experts, expert_tokens_num_type=2, expert_tokens_num_flag=True,
        active_expert_range=[start, end],
    )
    hit = [(j, c) for j, c in zip(range(start, end), counts) if c]
    assert pairs.shape == (experts, 2)
    assert pairs[: len(hit)].tolist() == [list(p) for p in hit]
    assert not pairs[len(hit) :].any()


def test_init_routing_v2_dynamic_quant_with_expert_scale() -> None:
    gen = _gen()
    rows, k, h, experts = 4, 2, 16, 4
    x = torch.randn(rows, h, generator=gen).to(torch.bfloat16)
    expert_idx = _distinct_topk(rows, experts, k, gen)
    smooth = torch.rand(experts, h, generator=gen) + 0.5
    expanded_x, _, _, dyn = torch_npu.npu_moe_init_routing_v2(
        x, expert_idx, scale=smooth, expert_num=experts, quant_mode=1
    )
    assert expanded_x.dtype == torch.int8
    for i, (e, p) in enumerate(_ref_routes(expert_idx, 0, experts)):
        row = x[p // k].double() * smooth[e].double()
        scale = row.abs().max() / 127
        torch.testing.assert_close(dyn[i].double(), scale, rtol=1e-6, atol=0)
        assert (expanded_x[i].double() - torch.round(row / scale)).abs().max() <= 1


def test_init_routing_v2_of_zero_tokens_returns_empty_outputs_whatever_the_scale() -> None:
    """op-plugin's kernel returns the empty outputs (zero counts) of zero tokens before the device op checks
    scale (MoeInitRoutingV2KernelNpuOpApi.cpp; upstream's test_npu_moe_init_routing_empty_tensor)."""
    x, expert_idx = torch.empty(0, 64, dtype=torch.bfloat16), torch.empty(0, 4, dtype=torch.int32)
    expanded_x, row_idx, counts, dyn = torch_npu.npu_moe_init_routing_v2(
        x, expert_idx, scale=torch.empty(0), expert_num=16, quant_mode=1, expert_tokens_num_flag=True,
        active_expert_range=[0, 16], row_idx_type=1
    )
    assert [tuple(t.shape) for t in (expanded_x, row_idx, dyn)] == [(0, 64), (0,), (0,)]
    assert expanded_x.dtype == torch.int8 and tuple(counts.shape) == (16,) and not counts.any()


def test_init_routing_v2_drop_pad_capacity() -> None:
    rows, k, h, experts, capacity = 4, 1, 2, 2, 2
    x = torch.arange(rows * h, dtype=torch.float32).reshape(rows, h)
    expert_idx = torch.tensor([[1], [1], [1], [0]], dtype=torch.int32)
    expanded_x, row_idx, _, _ = torch_npu.npu_moe_init_routing_v2(
        x, expert_idx, expert_capacity=capacity, expert_num=experts, drop_pad_mode=1
    )
    assert expanded_x.shape == (experts, capacity, h)
    assert torch.equal(expanded_x[0, 0], x[3]) and not expanded_x[0, 1].any()
    assert torch.equal(expanded_x[1], x[:2])
    assert row_idx.tolist() == [2, 3, -1, 0]


# ------------------------------------------------------------------------------ compute_expert_tokens


def test_compute_expert_tokens_is_cumulative_row_end() -> None:
    sorted_experts = torch.tensor([0, 0, 2, 2, 2, 5], dtype=torch.int32)
    out = torch_npu.npu_moe_compute_expert_tokens(sorted_experts, 7)
    assert out.dtype == torch.int32
    assert out.tolist() == [sum(1 for e in sorted_experts.tolist() if e <= i) for i in range(7)]


# ------------------------------------------------------------------------------ finalize_routing


def _ref_finalize(rows, skip1, skip2, bias, scales, dst, experts, row_major: bool) -> torch.Tensor:
    tokens, top_k = experts.shape
    out = torch.zeros(tokens, rows.shape[-1], dtype=torch.float64)
    flat = rows.reshape(-1, rows.shape[-1]).double()
    for i in range(tokens):
        out[i] += skip1[i].double() + skip2[i].double()
        for j in range(top_k):
            d = int(dst[i * top_k + j] if row_major else dst[j * tokens + i])
            row = flat[d] if d >= 0 else torch.zeros_like(flat[0])
            out[i] += scales[i, j].double() * (row + bias[int(experts[i, j])].double())
    return out


@pytest.mark.parametrize("drop_pad_mode", [0, 2])
def test_finalize_routing_matches_the_formula(drop_pad_mode: int) -> None:
    gen = _gen()
    tokens, top_k, h, experts = 5, 2, 8, 4
    rows = torch.randn(tokens * top_k, h, generator=gen)
    skip1, skip2 = torch.randn(tokens, h, generator=gen), torch.randn(tokens, h, generator=gen)
    bias = torch.randn(experts, h, generator=gen)
    scales = torch.rand(tokens, top_k, generator=gen)
    dst = torch.randperm(tokens * top_k, generator=gen).to(torch.int32)
    expert_ids = _distinct_topk(tokens, experts, top_k, gen)
    out = torch_npu.npu_moe_finalize_routing(
        rows, skip1, skip2, bias, scales, dst, expert_ids, drop_pad_mode=drop_pad_mode
    )
    ref = _ref_finalize(rows, skip1, skip2, bias, scales, dst, expert_ids, drop_pad_mode == 2)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_finalize_routing_drop_pad_skips_dropped_rows() -> None:
    rows = torch.ones(2, 2, 3)  # [E, C, H]
    dst = torch.tensor([0, -1, 3], dtype=torch.int32)
    scales = torch.ones(3, 1)
    out = torch_npu.npu_moe_finalize_routing(rows, None, None, None, scales, dst, None, drop_pad_mode=1)
    assert out.tolist() == [[1.0] * 3, [0.0] * 3, [1.0] * 3]


def test_routing_round_trip_v2_then_finalize_restores_weighted_sum() -> None:
    """init_routing_v2 + identity experts + finalize (mode 2) = sum_k w_k * x (the MoE contract)."""
    gen = _gen()
    tokens, top_k, h, experts = 6, 2, 4, 4
    x = torch.randn(tokens, h, generator=gen)
    expert_ids = _distinct_topk(tokens, experts, top_k, gen)
    weights = torch.rand(tokens, top_k, generator=gen)
    expanded_x, row_idx, _, _ = torch_npu.npu_moe_init_routing_v2(x, expert_ids, expert_num=experts)
    out = torch_npu.npu_moe_finalize_routing(expanded_x, None, None, None, weights, row_idx, expert_ids, drop_pad_mode=2)
    torch.testing.assert_close(out, x * weights.sum(dim=1, keepdim=True), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------ distribute dispatch / combine




def _dispatch_inputs(tokens: int = 6, h: int = 8, experts: int = 8, k: int = 2):
    gen = _gen()
    x = torch.randn(tokens, h, generator=gen).to(torch.bfloat16)
    expert_ids = _distinct_topk(tokens, experts, k, gen)
    weights = torch.rand(tokens, k, generator=gen)
    return x, expert_ids, weights


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_dispatch_then_combine_one_rank_is_the_weighted_sum(version: str) -> None:
    x, expert_ids, weights = _dispatch_inputs()
    dispatch = torch_npu.npu_moe_distribute_dispatch if version == "v1" else torch_npu.npu_moe_distribute_dispatch_v2
    combine = torch_npu.npu_moe_distribute_combine if version == "v1" else torch_npu.npu_moe_distribute_combine_v2
    expand_x, _, idx, token_nums, recv_counts, _, expand_scales = dispatch(x, expert_ids, "ep", 1, 0, 8)
    assert expand_x.shape == (6 * 2, 8)
    ref_counts = [int((expert_ids == e).sum()) for e in range(8)]
    assert token_nums.tolist() == ref_counts
    row = 0
    for e in range(8):  # grouped by expert, tokens in order
        for t in range(6):
            if e in expert_ids[t].tolist():
                assert torch.equal(expand_x[row], x[t])
                row += 1
    out = combine(expand_x, expert_ids, idx, recv_counts, weights, "ep", 1, 0, 8, expand_scales=expand_scales)
    ref = (weights.double().unsqueeze(-1) * x.double().unsqueeze(1)).sum(dim=1)
    torch.testing.assert_close(out.double(), ref.to(torch.bfloat16).double(), rtol=1e-2, atol=1e-2)


def test_dispatch_configured_world_sets_shapes_and_local_experts() -> None:
    x, expert_ids, weights = _dispatch_inputs()
    world, rank, experts = 4, 1, 8
    outs = torch_npu.npu_moe_distribute_dispatch(x, expert_ids, "ep", world, rank, experts, expert_token_nums_type=0)
    expand_x, _, idx, token_nums, recv_counts, _, _ = outs
    local = range(rank * 2, rank * 2 + 2)
    assert expand_x.shape == (6 * world * 2, 8)  # A = BS * world * min(local experts, K)
    assert token_nums.tolist() == torch.tensor([int((expert_ids == e).sum()) for e in local]).cumsum(0).tolist()
    assert recv_counts.shape == (world * 2,)
    out = torch_npu.npu_moe_distribute_combine(expand_x, expert_ids, idx, recv_counts, weights, "ep", world, rank, experts)
    mask = (expert_ids >= local.start) & (expert_ids < local.stop)
    ref = (torch.where(mask, weights, 0.0).double().unsqueeze(-1) * x.double().unsqueeze(1)).sum(dim=1)
    torch.testing.assert_close(out.double(), ref.to(torch.bfloat16).double(), rtol=1e-2, atol=1e-2)


def test_dispatch_dynamic_quant_with_smoothing_scales() -> None:
    x, expert_ids, _ = _dispatch_inputs()
    smooth = torch.rand(8, 8, generator=_gen()) + 0.5
    expand_x, dyn, *_ = torch_npu.npu_moe_distribute_dispatch_v2(x, expert_ids, "ep", 1, 0, 8, scales=smooth, quant_mode=2)
    assert expand_x.dtype == torch.int8
    row = 0
    for e in range(8):
        for t in range(6):
            if e in expert_ids[t].tolist():
                values = x[t].double() * smooth[e].double()
                scale = values.abs().max() / 127
                torch.testing.assert_close(dyn[row].double(), scale, rtol=1e-6, atol=0)
                assert (expand_x[row].double() - torch.round(values / scale)).abs().max() <= 1
                row += 1


def test_active_mask_leaves_tokens_out_and_shared_expert_is_added() -> None:
    x, expert_ids, weights = _dispatch_inputs()
    mask = torch.tensor([True, True, True, True, False, False])
    expand_x, _, assist, _, recv_counts, _, _ = torch_npu.npu_moe_distribute_dispatch_v2(
        x, expert_ids, "ep", 1, 0, 8, x_active_mask=mask)
    shared = torch.ones(6, 8, dtype=torch.bfloat16)
    out = torch_npu.npu_moe_distribute_combine_v2(expand_x, expert_ids, assist, recv_counts, weights, "ep", 1, 0, 8,
                                                 x_active_mask=mask, shared_expert_x=shared)
    assert torch.equal(out[4:], shared[4:])
    ref = (weights[:4].double().unsqueeze(-1) * x[:4].double().unsqueeze(1)).sum(dim=1) + 1
    torch.testing.assert_close(out[:4].double(), ref.to(torch.bfloat16).double(), rtol=1e-2, atol=1e-2)


def test_dispatch_refuses_unmodeled_features_with_the_argument_name() -> None:
    x, expert_ids, _ = _dispatch_inputs()
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_moe_distribute_dispatch(x, expert_ids, "ep", 2, 0, 8, shared_expert_rank_num=1)
    assert (exc.value.op, exc.value.argument) == ("npu_moe_distribute_dispatch", "shared_expert_rank_num")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_moe_distribute_dispatch(x, expert_ids, "ep", 3, 0, 8)
    assert (exc.value.op, exc.value.argument) == ("npu_moe_distribute_dispatch", "moe_expert_num")


def test_dispatch_v2_y_dtype_names_expand_xs_dtype() -> None:
    """op-plugin's kernel takes y_dtype over the quant mode's dtype; a y_dtype restating it (as a dtype or its
    ScalarType number) changes nothing, a format of the MX modes is refused by name."""
    x, expert_ids, _ = _dispatch_inputs()
    plain = torch_npu.npu_moe_distribute_dispatch_v2(x, expert_ids, "ep", 1, 0, 8)
    for y_dtype in (torch.bfloat16, 15):
        same = torch_npu.npu_moe_distribute_dispatch_v2(x, expert_ids, "ep", 1, 0, 8, y_dtype=y_dtype)
        assert all(torch.equal(a, b) for a, b in zip(plain, same))
    quantised = torch_npu.npu_moe_distribute_dispatch_v2(x, expert_ids, "ep", 1, 0, 8, quant_mode=2,
                                                         y_dtype=torch.int8)
    assert quantised[0].dtype == torch.int8
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_moe_distribute_dispatch_v2(x, expert_ids, "ep", 1, 0, 8, quant_mode=2,
                                                 y_dtype=torch.float8_e4m3fn)
    assert (exc.value.op, exc.value.argument) == ("npu_moe_distribute_dispatch_v2", "y_dtype")


def test_fake_kernels_match_eager_shapes() -> None:
    """The fake kernels (what a traced graph sees) agree with the CPU kernels' outputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    x, expert_ids, weights = _dispatch_inputs()
    calls = [
        lambda x, e, w: torch_npu.npu_moe_gating_top_k_softmax(x.float(), None, k=2),
        lambda x, e, w: torch_npu.npu_moe_init_routing_v2(x, e, expert_num=8, expert_tokens_num_flag=True, quant_mode=1),
        lambda x, e, w: torch_npu.npu_moe_compute_expert_tokens(e.reshape(-1).sort().values, 8),
        lambda x, e, w: torch_npu.npu_moe_distribute_dispatch_v2(x, e, "ep", 2, 1, 8, quant_mode=2),
        lambda x, e, w: torch_npu.npu_moe_distribute_combine(
            torch.zeros(24, 8, dtype=torch.bfloat16), e, torch.zeros(12, dtype=torch.int32),
            torch.zeros(8, dtype=torch.int32), w, "ep", 1, 0, 8),
    ]
    for call in calls:
        eager = call(x, expert_ids, weights)
        with FakeTensorMode() as mode:
            fake = call(mode.from_tensor(x), mode.from_tensor(expert_ids), mode.from_tensor(weights))
        eager_list = [eager] if isinstance(eager, torch.Tensor) else list(eager)
        fake_list = [fake] if isinstance(fake, torch.Tensor) else list(fake)
        assert [(t.shape, t.dtype) for t in fake_list] == [(t.shape, t.dtype) for t in eager_list]


def test_ep_moe_layer_runs_through_the_pipeline_with_comm_and_prefetch_tasks() -> None:
    """dispatch -> bfloat16 grouped matmul -> combine, with a weight prefetch and a KV-cache write, modeled
    end to end: the MC2 ops run on the Vector cores, the prefetch stays as a DMA task, the outputs agree."""
    from pytest_npufuse.pipeline.chain import compare

    class Layer(torch.nn.Module):
        def forward(self, x, ids, weights, w, cache, slots):
            torch_npu.npu_prefetch(w, x, 1024)
            torch_npu.npu_scatter_nd_update_(cache, slots, x[:1])
            expand_x, _, idx, nums, recv, _, _ = torch_npu.npu_moe_distribute_dispatch_v2(x, ids, "ep", 1, 0, 8)
            (hidden,) = torch_npu.npu_grouped_matmul([expand_x], [w], group_list=nums, split_item=3, group_type=0,
                                                     group_list_type=1)
            return torch_npu.npu_moe_distribute_combine_v2(hidden, ids, idx, recv, weights, "ep", 1, 0, 8)

    x, expert_ids, weights = _dispatch_inputs()
    w = torch.randn(8, 8, 8, generator=_gen()).to(torch.bfloat16)
    cache = torch.zeros(4, 8, dtype=torch.bfloat16)
    report = compare(Layer(), x, expert_ids, weights, w, cache, torch.tensor([[1]]))
    assert report.mismatches == ()
    engines = {run.op_type: run.engine for run in report.variant.kernels}
    # MC2 dispatch/combine run on the AI Vector cores (issue 12: fusable inside a SuperKernel); the
    # prefetch is an SDMA task on the DMA engine.
    assert engines["npu::npu_moe_distribute_dispatch_v2"] == "vector"
    assert engines["npu::npu_moe_distribute_combine_v2"] == "vector"
    assert engines["npu::npu_prefetch"] == "dma" and "npu::npu_scatter_nd_update_" in engines


def test_w8a8_mc2_expert_chain_matches_a_per_token_reference() -> None:
    """The W8A8 decode MoE of the public torchair code: dispatch_v2 (dynamic int8) -> grouped matmul (int32)
    -> dequant_swiglu_quant -> grouped matmul (per-token dequant to bf16) -> combine_v2, against a plain loop
    over tokens and their experts with the same quantised weights."""
    gen = _gen()
    tokens, h, inter, experts, k = 4, 16, 8, 4, 2
    x = torch.randn(tokens, h, generator=gen).to(torch.bfloat16)
    ids = _distinct_topk(tokens, experts, k, gen)
    weights = torch.rand(tokens, k, generator=gen)
    w1 = torch.randint(-8, 8, (experts, h, 2 * inter), dtype=torch.int8, generator=gen)
    w1_scale = torch.rand(experts, 2 * inter, generator=gen) * 0.05
    w2 = torch.randint(-8, 8, (experts, inter, h), dtype=torch.int8, generator=gen)
    w2_scale = (torch.rand(experts, h, generator=gen) * 0.05).to(torch.bfloat16)

    expand_x, dyn, assist, counts, recv, _, _ = torch_npu.npu_moe_distribute_dispatch_v2(
        x, ids, "ep", 1, 0, experts, quant_mode=2, expert_token_nums_type=1)
    (gate_up,) = torch_npu.npu_grouped_matmul([expand_x], [w1], group_list=counts, split_item=3, group_type=0,
                                              group_list_type=1, output_dtype=torch.int32)
    act, act_scale = torch_npu.npu_dequant_swiglu_quant(gate_up, weight_scale=w1_scale, activation_scale=dyn,
                                                         group_index=counts, activate_left=True, quant_mode=1)
    (down,) = torch_npu.npu_grouped_matmul([act], [w2], scale=[w2_scale], per_token_scale=[act_scale],
                                           group_list=counts, split_item=2, group_type=0, group_list_type=1,
                                           output_dtype=torch.bfloat16)
    out = torch_npu.npu_moe_distribute_combine_v2(down, ids, assist, recv, weights, "ep", 1, 0, experts)

    ref = torch.zeros(tokens, h, dtype=torch.float64)
    for t in range(tokens):
        for slot in range(k):
            e = int(ids[t, slot])
            row = x[t].double()
            s1 = row.abs().max() / 127
            q = torch.round(row / s1)
            gu = (q @ w1[e].double()) * w1_scale[e].double() * s1
            gate, lin = gu[:inter], gu[inter:]
            hidden = gate * torch.sigmoid(gate) * lin
            s2 = hidden.abs().max() / 127
            y = (torch.round(hidden / s2) @ w2[e].double()) * w2_scale[e].double() * s2
            ref[t] += float(weights[t, slot]) * y
    torch.testing.assert_close(out.double(), ref, rtol=0.05, atol=0.05 * float(ref.abs().max()))


def test_init_routing_v2_carries_prequantised_int8_rows_and_their_scales() -> None:
    gen = _gen()
    rows, k, h, experts = 4, 2, 8, 4
    x = torch.randint(-128, 128, (rows, h), dtype=torch.int8, generator=gen)
    token_scale = torch.rand(rows, generator=gen)
    expert_idx = _distinct_topk(rows, experts, k, gen)
    expanded_x, row_idx, _, expanded_scale = torch_npu.npu_moe_init_routing_v2(
        x, expert_idx, scale=token_scale, expert_num=experts, active_expert_range=[0, experts])
    for i, (_, p) in enumerate(_ref_routes(expert_idx, 0, experts)):
        assert torch.equal(expanded_x[i], x[p // k]) and expanded_scale[i] == token_scale[p // k]
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_moe_init_routing_v2(x, expert_idx, expert_num=experts, quant_mode=1)
    assert (exc.value.op, exc.value.argument) == ("npu_moe_init_routing_v2", "x")


def test_v1_routing_chain_equals_the_per_token_expert_sum() -> None:
    """The classic chain: gating_top_k_softmax -> init_routing -> compute_expert_tokens -> grouped matmul
    (cumsum group_list) -> finalize_routing (column order) equals sum_k w_k * (x @ W_e) per token."""
    gen = _gen()
    tokens, h, n, experts, k = 5, 8, 6, 4, 2
    x = torch.randn(tokens, h, generator=gen).to(torch.bfloat16)
    logits = torch.randn(tokens, experts, generator=gen)
    w = torch.randn(experts, h, n, generator=gen).to(torch.bfloat16)
    weights, ids, row_idx = torch_npu.npu_moe_gating_top_k_softmax(logits, None, k=k)
    expanded_x, expanded_row_idx, expanded_experts = torch_npu.npu_moe_init_routing(x, row_idx, ids, tokens)
    ends = torch_npu.npu_moe_compute_expert_tokens(expanded_experts, experts).to(torch.int64)
    (hidden,) = torch_npu.npu_grouped_matmul([expanded_x], [w], group_list=ends, split_item=2, group_type=0,
                                             group_list_type=0)
    out = torch_npu.npu_moe_finalize_routing(hidden, None, None, None, weights.to(torch.bfloat16), expanded_row_idx,
                                             ids)
    ref = torch.zeros(tokens, n, dtype=torch.float64)
    for t in range(tokens):
        for slot in range(k):
            ref[t] += float(weights[t, slot]) * (x[t].double() @ w[int(ids[t, slot])].double())
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)


def _reference_group_topk(scores: torch.Tensor, k: int, groups: int, n: int) -> torch.Tensor:
    """ATB GroupTopkOperation per token, from its page: score each group (max, or sum of the n largest),
    keep the k best groups (lower index first on ties), zero the rest."""
    out = scores.clone()
    width = scores.shape[1] // groups
    for token in range(scores.shape[0]):
        blocks = scores[token].float().reshape(groups, width)
        score = [sorted(block.tolist(), reverse=True)[:n] for block in blocks]
        ranked = sorted(range(groups), key=lambda g: (-sum(score[g]), g))
        for g in ranked[k:]:
            out[token, g * width : (g + 1) * width] = 0
    return out


@pytest.mark.parametrize("n", [1, 2])
def test_group_topk_keeps_the_k_best_expert_groups_in_place(n: int) -> None:
    scores = torch.rand(5, 32, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    expected = _reference_group_topk(scores, k=3, groups=8, n=n)
    assert torch_npu._npu_group_topk(scores, k=3, group_num=8, n=n) is None
    assert torch.equal(scores, expected)


def test_group_topk_refuses_groups_that_do_not_divide_the_experts() -> None:
    with pytest.raises(ValueError) as exc:
        torch_npu._npu_group_topk(torch.zeros(2, 8, dtype=torch.float16), k=1, group_num=3)
    assert (exc.value.op, exc.value.argument) == ("_npu_group_topk", "input")
    with pytest.raises(ValueError) as exc:
        torch_npu._npu_group_topk(torch.zeros(2, 8, dtype=torch.float16))
    assert (exc.value.op, exc.value.argument) == ("_npu_group_topk", "k")


def test_group_topk_passes_opcheck() -> None:
    scores = torch.rand(3, 16).to(torch.float16)
    torch.library.opcheck(torch.ops.npu._npu_group_topk.default, (scores,), {"k": 2, "group_num": 4})
