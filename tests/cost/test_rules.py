"""The cost-rule registry and the mechanisms of the built-in rules."""

from dataclasses import replace

import pytest
import torch

from pytest_npufuse import capture, cost
from pytest_npufuse.errors import ProfileError
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import load_profile

A3 = load_profile("a3")


def kernel_of(builder, buffer):
    return next(k for k in builder.kernels if k.node == buffer)


def test_catalog_entries_name_registered_rules_and_older_keys_still_pick_one():
    catalog = load_catalog({"acc::old": {"engine": "cube", "fusable": True, "sync_all": False, "block_dim": "cube_tiles",
                                         "flops": "matmul"}})
    assert catalog.lookup("acc::old").cost == "matmul"
    assert catalog.lookup("npu::npu_grouped_matmul").cost == "grouped_matmul"
    assert set(cost.rule_names()) >= {info.cost for info in catalog.entries.values()}
    warp = load_catalog({"acc::new": {"engine": "vector", "fusable": False, "sync_all": False, "block_dim": "auto", "cost": "warp"}})
    with pytest.raises(ProfileError) as exc:
        cost.check_catalog(warp)
    assert (exc.value.entry, exc.value.argument) == ('[tool.npufuse.ops] ["acc::new"]', "warp")
    assert cost.check_catalog(catalog) is catalog


def test_a_rule_is_registered_once():
    with pytest.raises(ValueError, match="'matmul' is already registered"):
        cost.register_cost_rule("matmul", block_dim=cost.rules.one_core, flops=cost.rules.no_flops,
                                bytes=cost.rules.no_bytes, body_us=cost.rules.no_time)


def test_decode_matmul_splits_n_and_k_over_every_cube_core():
    builder = ProgramBuilder()
    x, w = builder.input("x", (16, 7168)), builder.input("w", (7168, 2048), "int8")
    out = builder.op("npu::npu_quant_matmul", [builder.op("npu::npu_dynamic_quant", [x], (16, 7168), "int8"), w], (16, 2048))
    kernel = kernel_of(builder, out)
    assert cost.block_dim(kernel, A3) == A3.aic
    body = cost.body_us(kernel, A3.aic, A3)
    # the weights stream through every core's DDR path: no faster than that path or HBM allow
    core_path = A3.core_ddr_bytes_per_cycle * A3.cube_mhz * 24 / 1000
    streaming = kernel.bytes / (min(A3.hbm_gbps * A3.memory_efficiency, core_path) * 1e3)
    assert streaming <= body <= 1.5 * streaming  # plus the pipeline fill and the activation slices each tile reads


def test_grouped_matmul_reads_only_the_experts_its_rows_hit():
    builder = ProgramBuilder()
    x, w = builder.input("x", (4, 1024), "int8"), builder.input("w", (64, 1024, 1024), "int8")
    few = kernel_of(builder, builder.op("npu::npu_grouped_matmul", [x, w], (4, 1024)))
    x_many = builder.input("x_many", (4096, 1024), "int8")
    many = kernel_of(builder, builder.op("npu::npu_grouped_matmul", [x_many, w], (4096, 1024)))
    expert = 1024 * 1024
    assert few.bytes < 5 * expert and many.bytes > 63 * expert


def test_a_k_split_grouped_matmul_counts_its_k_once():
    """group_type=2 (weight gradients): [M, K] x [K, N] -> [E, M, N] costs one 2 x M x N x K, as the
    MoE form [M, K] x [E, K, N] -> [M, N] does, not E of them."""
    builder = ProgramBuilder()
    x, dy = builder.input("x", (1024, 4096)), builder.input("dy", (4096, 2048))
    split_k = kernel_of(builder, builder.op("npu::npu_grouped_matmul", [x, dy], (8, 1024, 2048)))
    rows, w = builder.input("rows", (1024, 4096)), builder.input("w", (8, 4096, 2048))
    moe = kernel_of(builder, builder.op("npu::npu_grouped_matmul", [rows, w], (1024, 2048)))
    assert split_k.flops == moe.flops == 2.0 * 1024 * 2048 * 4096


def test_a_tensor_passed_twice_is_read_once_and_a_row_gather_reads_rows_not_the_table():
    builder = ProgramBuilder()
    x = builder.input("x", (1024, 1024))
    twice = kernel_of(builder, builder.op("aten::add", [x, x], (1024, 1024)))
    assert twice.bytes == 2 * 1024 * 1024 * 2
    table, idx = builder.input("table", (100_000, 1024)), builder.input("idx", (8,), "int64")
    rows = kernel_of(builder, builder.op("aten::embedding", [table, idx], (8, 1024)))
    assert rows.bytes == 8 * 8 + 2 * 8 * 1024 * 2


def ms(build):
    program = build()
    report = simulate(program, plan_program(program, A3, variant=Variant.BASELINE), A3)
    return sum(k.duration_us for k in report.kernels)


def test_forms_of_the_same_work_are_priced_differently():
    """docs/feature-docs.md#affinity-ops: GatherElements is slower than GatherV2, a bmm to [b,1,1] slower than the mm
    with b merged into M, IndexPutV2 slower than an index copy."""

    def program(op, inputs, shape):
        def build():
            builder = ProgramBuilder()
            names = [builder.input(name, s, d) for name, s, d in inputs]
            builder.op(op, names, shape[0], shape[1])
            return builder.build()
        return build

    gather = program("aten::gather", [("l", (65536, 1024), "float32"), ("t", (65536, 16), "int64")], ((65536, 16), "float32"))
    select = program("aten::index_select", [("a", (1024,), "float32"), ("t", (1048576,), "int64")], ((1048576,), "float32"))
    bmm = program("aten::bmm", [("a", (4096, 1, 1024), "bfloat16"), ("b", (4096, 1024, 1), "bfloat16")], ((4096, 1, 1), "bfloat16"))
    mm = program("aten::mm", [("a", (4096, 1024), "bfloat16"), ("b", (1024, 1), "bfloat16")], ((4096, 1), "bfloat16"))
    rows = [("t", (65536, 64), "bfloat16"), ("i", (16384,), "int64"), ("v", (16384, 64), "bfloat16")]
    put, copy = program("aten::index_put", rows, ((65536, 64), "bfloat16")), program("aten::index_copy", rows, ((65536, 64), "bfloat16"))
    assert ms(gather) > ms(select) and ms(bmm) > ms(mm) and ms(put) > 2 * ms(copy)


def test_the_call_the_user_wrote_prices_forms_aten_cannot_tell_apart():
    """docs/feature-docs.md#affinity-ops: nn.Linear vs torch.addmm and repeat_interleave(x, int) vs
    unsqueeze/expand/reshape lower to the same aten kernels; the catalog's "op@form" entries price them by the call.
    Linear pays op-plugin's FRACTAL_NZ cast only when the Cube cannot read its input as ND (is_nd_to_nz_on_fly)."""

    def linear(form, k):
        builder = ProgramBuilder()
        bias, x, w_t = builder.input("b", (4096,)), builder.input("x", (8192, k)), builder.input("w", (k, 4096))
        return kernel_of(builder, builder.op("aten::addmm", [bias, x, w_t], (8192, 4096), form=form))

    cast, plain = linear("Linear", 100), linear("addmm", 100)
    assert (cast.info.kernel_type, plain.info.kernel_type) == ("MatMulV2", "MatMulV3") and cast.call == "Linear"
    assert cast.bytes - plain.bytes == 8192 * 100 * 2 + 8192 * 224  # read x, write it in 16 x 32 B fractals
    assert linear("Linear", 128).bytes == linear("addmm", 128).bytes  # K in [128, 65535]: read as ND
    assert linear("linear", 96).bytes == linear("addmm", 96).bytes  # K < 128, a multiple of 16

    def copy(form):
        builder = ProgramBuilder()
        return kernel_of(builder, builder.op("aten::clone", [builder.input("e", (65536, 8))], (65536, 8), form=form))

    repeat, reshape = copy("repeat_interleave"), copy("reshape")
    assert repeat.info.kernel_type == "RepeatInterleave" and reshape.info.kernel_type == "TensorMove"
    assert cost.body_us(repeat, 1, A3) > cost.body_us(reshape, 1, A3)


def test_mc2_dispatch_and_combine_scale_with_tokens_and_ranks():
    """Issue 21: a fixed handshake tuned to one 128-token row made small-batch decode pay too much; the
    message grows with tokens x top-k x hidden and each phase with the peer ranks it flags."""

    def dispatch(tokens, ranks):
        builder = ProgramBuilder()
        x, topk = builder.input("x", (tokens, 7168), "int8"), builder.input("topk", (tokens, 8), "int32")
        out = builder.op("npu::npu_moe_distribute_dispatch", [x, topk], (tokens * 8, 7168), "int8")
        kernel = kernel_of(builder, out)
        return cost.body_us(kernel, A3.aiv, replace(A3, comm_ranks=ranks, mc2_rank_us=0.5))

    assert dispatch(16, 16) < dispatch(128, 16) < dispatch(512, 16)
    link = A3.comm_gbps * A3.comm_efficiency * 1e3
    assert dispatch(128, 32) - dispatch(128, 8) == pytest.approx(2 * 0.5 * 24 + 7168 * 1024 * (31 / 32 - 7 / 8) / link)


def test_mc2_exchange_with_peers_on_other_a2_servers_runs_at_the_scale_out_rate():
    """Issue 21: an A2 server's HCCS mesh joins 8 NPUs; EP over 32 NPUs sends 24/31 of each die's share
    over RoCE at 25 GB/s, at the same time as the rest over HCCS, so the RoCE part sets the time. One
    A3 SuperPoD's UB reaches every die at the same rate, so its exchange still follows the link alone."""
    a2 = load_profile("910b2")
    nbytes = 32 * 8 * 7168

    def exchange(profile, ranks):
        return cost.rules.exchange_us(nbytes, replace(profile, comm_ranks=ranks))

    scale_out = a2.comm_scaleout_gbps * a2.comm_efficiency * 1e3
    assert exchange(a2, 32) == pytest.approx(nbytes / 32 * 24 / scale_out)
    assert exchange(a2, 8) == pytest.approx(nbytes * 7 / 8 / (a2.comm_gbps * a2.comm_efficiency * 1e3))
    assert exchange(a2, 32) > 5 * exchange(a2, 8)
    assert exchange(A3, 64) == pytest.approx(nbytes * 63 / 64 / (A3.comm_gbps * A3.comm_efficiency * 1e3))
    assert exchange(a2, 1) == 0.0


def test_a_ring_that_leaves_the_a2_server_runs_at_the_scale_out_rate():
    a2 = load_profile("910b2")
    builder = ProgramBuilder()
    kernel = kernel_of(builder, builder.op("_c10d_functional::all_reduce", [builder.input("x", (64, 7168))], (64, 7168)))
    inside, across = (cost.body_us(kernel, 1, replace(a2, comm_ranks=ranks)) for ranks in (8, 16))
    moved = kernel.bytes * 15 / 16
    assert across == pytest.approx(2 * 15 * a2.comm_latency_us + moved / (a2.comm_scaleout_gbps * a2.comm_efficiency * 1e3))
    assert across > 4 * inside


def test_collective_time_follows_message_size_and_link_bandwidth():
    def all_reduce(n):
        builder = ProgramBuilder()
        return kernel_of(builder, builder.op("_c10d_functional::all_reduce", [builder.input("x", (n, 7168))], (n, 7168)))

    small, large = all_reduce(16), all_reduce(16 * 64)
    link = A3.comm_gbps * A3.comm_efficiency * 1e3
    growth = cost.body_us(large, 1, A3) - cost.body_us(small, 1, A3)
    assert growth == pytest.approx((large.bytes - small.bytes) * (A3.comm_ranks - 1) / A3.comm_ranks / link)


def test_mc2_dispatch_and_combine_fuse_into_a_superkernel():
    builder = ProgramBuilder()
    x, topk = builder.input("x", (16, 7168), "int8"), builder.input("topk", (16, 8), "int32")
    w = builder.input("w", (2, 7168, 2048), "int8")
    routed = builder.op("npu::npu_moe_distribute_dispatch", [x, topk], (128, 7168), "int8", scope="moe")
    g = builder.op("npu::npu_grouped_matmul", [routed, w], (128, 2048), scope="moe")
    builder.op("npu::npu_moe_distribute_combine", [g, topk], (16, 7168), scope="moe")
    program = builder.build()
    plan = plan_program(program, A3)
    assert len(plan.tasks) == 1 and plan.tasks[0].segment is not None


def test_a_prefetched_weight_costs_its_reader_no_hbm_traffic():
    builder = ProgramBuilder()
    x, w = builder.input("x", (16, 7168), "int8"), builder.input("w", (7168, 2048), "int8")
    cold = kernel_of(builder, builder.op("npu::npu_quant_matmul", [x, w], (16, 2048)))
    builder.op("npu::npu_prefetch", [w], (1,), "int8")
    warm = kernel_of(builder, builder.op("npu::npu_quant_matmul", [x, w], (16, 2048)))
    assert cold.bytes - warm.bytes == 7168 * 2048


def _attention(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor") -> "torch.Tensor":
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def test_scaled_dot_product_attention_is_flash_attention_priced_by_its_arithmetic():
    """Inference SDPA (dropout_p=0) draws nothing, so it is modeled, as torch_npu's FlashAttentionScore;
    prefill's Sq x Skv arithmetic is priced, so 512 query rows cost far more than one."""
    kv = torch.randn(1, 8, 512, 128, dtype=torch.bfloat16)
    flops = {}
    for rows in (1, 512):
        program = capture(_attention, torch.randn(1, 8, rows, 128, dtype=torch.bfloat16), kv, kv)
        (kernel,) = [k for k in program.kernels if k.info.kernel_type == "FlashAttentionScore"]
        flops[rows] = kernel.flops
    assert flops[1] == 4 * 8 * 128 * 512 and flops[512] == 512 * flops[1]


def test_an_in_place_cache_update_touches_the_slots_it_writes_not_the_cache():
    builder = ProgramBuilder()
    cache, idx = builder.input("cache", (48, 4096, 576), "int8"), builder.input("idx", (48, 1), "int64")
    rows = builder.input("rows", (48, 576), "int8")
    kernel = kernel_of(builder, builder.op("npu::npu_scatter_nd_update", [cache, idx, rows], (48, 4096, 576), "int8"))
    assert kernel.bytes == 48 * 8 + 2 * 48 * 576
    assert cost.block_dim(kernel, A3) == -(-(48 * 8 + 48 * 576) // A3.vector_block_bytes)  # blocks of the slots, not the cache
