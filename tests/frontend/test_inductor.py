"""Inductor's fusion of a captured graph: pointwise and reduction ops become one generated Vector kernel
that keeps its intermediates on chip; what cannot be fused stays its own kernel, in an order that runs."""

import torch

from pytest_npufuse import capture
from pytest_npufuse.frontend.inductor import FUSED_OP, fuse_pointwise, fusion_groups
from pytest_npufuse.pipeline.synthetic import plan_program
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.profile import load_profile

META = torch.device("meta")


def _mix(x, residual, post, comb):
    mixed = torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=2)
    return (post.unsqueeze(-1) * x.unsqueeze(-2) + mixed).type_as(x)


def _mix_program():
    args = (
        torch.empty(1, 1, 4096, dtype=torch.bfloat16, device=META),
        torch.empty(1, 1, 4, 4096, dtype=torch.bfloat16, device=META),
        torch.empty(1, 1, 4, dtype=torch.float32, device=META),
        torch.empty(1, 1, 4, 4, dtype=torch.float32, device=META),
    )
    return capture(_mix, *args)


def test_pointwise_and_reduction_ops_fuse_into_one_kernel_that_moves_only_inputs_and_output():
    program = _mix_program()
    assert sorted(k.op_type for k in program.kernels) == ["aten::_to_copy", "aten::add", "aten::mul", "aten::mul", "aten::sum"]
    fused = fuse_pointwise(program)
    (kernel,) = fused.kernels
    assert kernel.op_type == FUSED_OP and kernel.info.engine == "vector"
    inputs = 8192 + 32768 + 16 + 64  # x and residual in bf16, post and comb in fp32
    assert kernel.bytes == inputs + 4 * 4096 * 2  # the bf16 output; no fp32 intermediate written or read
    assert kernel.flops == sum(k.flops for k in program.kernels)
    assert kernel.outputs == program.outputs
    assert sum(k.bytes for k in program.kernels) > 4 * kernel.bytes


def test_a_fused_kernel_costs_less_device_time_than_the_ops_it_replaces():
    program = _mix_program()
    profile = load_profile("910c")

    def kernel_us(prog):
        report = simulate(prog, plan_program(prog, profile, variant="baseline", mode="eager"), profile)
        return sum(k.duration_us for k in report.kernels if k.parent is None)

    assert kernel_us(fuse_pointwise(program)) < kernel_us(program) / 3


def _around_matmul(a, w):
    scaled = a * 2.0
    return (scaled @ w) + scaled.sum(dim=-1, keepdim=True)


def test_ops_linked_through_an_unfusable_kernel_stay_apart_and_run_after_what_they_read():
    program = capture(_around_matmul, torch.empty(64, 64, device=META), torch.empty(64, 64, device=META))
    groups = fusion_groups(program)
    types = [[k.op_type for k in group] for group in groups]
    # the sum fuses with the scale it reads; the add reads the matmul, which reads the scale: a cycle
    assert types == [["aten::mul", "aten::sum"], ["aten::mm"], ["aten::add"]]
    fused = fuse_pointwise(program)
    assert [k.op_type for k in fused.kernels] == [FUSED_OP, "aten::mm", "aten::add"]
    first, matmul, add = fused.kernels
    assert {program.storage(name) for name in matmul.inputs} & set(first.outputs)  # the scale is still written
    assert set(add.inputs) & set(first.outputs)  # and the sum too
    assert [k.index for k in fused.kernels] == [0, 1, 2]


def test_an_op_only_ai_cpu_runs_is_not_fused():
    def count(ids):
        return (ids == 3).long().sum(dim=-1)

    program = capture(count, torch.empty(16, 8, dtype=torch.int64, device=META))
    assert [k.info.engine for k in program.kernels] == ["vector", "aicpu", "aicpu"]  # int64 Cast and ReduceSum
    assert [k.op_type for k in fuse_pointwise(program).kernels] == [k.op_type for k in program.kernels]


def test_two_producers_join_the_kernel_that_reads_both():
    program = capture(lambda a, b: a * 2.0 + b.exp(), torch.empty(8, 128, device=META), torch.empty(8, 128, device=META))
    assert len(program.kernels) == 3
    (kernel,) = fuse_pointwise(program).kernels
    assert kernel.bytes == 3 * 8 * 128 * 4  # a and b read, the sum written
