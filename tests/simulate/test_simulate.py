"""The cost model and simulator: SuperKernel accounting and determinism."""

import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from pytest_npufuse import compare, torch_npu, torchair
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.profile import load_profile


class Chain(torch.nn.Module):
    """Three dependent matmuls in one scope."""

    def forward(self, a, b):
        with torchair.scope.super_kernel("sp1", ""):
            return ((a @ b) @ b) @ b


def inputs():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(256, 512, generator=gen), torch.randn(512, 512, generator=gen)


def _task_overhead(over, dim: int) -> float:
    """What every ordinary AI Core task on ``dim`` cores pays around its body: head, cold ICache, the
    cores' instruction fetch, closing cache flush."""
    return over["kernel_head"] + over["icache_miss"] + over["fetch_per_core"] * dim + over["task_flush"]


def test_superkernel_saves_dispatch_and_heads_and_pays_calls_and_syncs():
    report = compare(Chain(), *inputs())
    over = load_profile("a3").overhead_us
    kernels = report.baseline.kernels
    body = sum(k.duration_us - _task_overhead(over, k.block_dim) for k in kernels)
    # Dispatch is pipelined: the first task waits for it, later ones only for the task gap.
    overheads = sum(_task_overhead(over, k.block_dim) for k in kernels)
    assert report.baseline.device_us == pytest.approx(over["dispatch_cube"] + overheads + 2 * over["task_gap"] + body)
    barrier = over["sk_sync"] - over["early_start_overlap"]
    calls = sum(over["sk_subkernel_call"] + over["fetch_per_core"] * k.block_dim / 4 for k in report.variant.kernels if k.parent)
    expected_variant = over["dispatch_cube"] + over["kernel_head"] + calls + 2 * barrier + body + over["task_flush"]
    assert report.variant.device_us == pytest.approx(expected_variant)
    assert report.speedup > 1


def test_early_start_off_and_no_preload_make_the_superkernel_slower():
    """``early-start=0`` loses the overlap at each barrier, ``preload-code=none`` a cold ICache per call
    (the options arrive on the segment; the plan is edited here as the options would set it)."""
    profile = load_profile("a3")
    builder = ProgramBuilder()
    a, w = builder.input("a", (256, 512)), builder.input("w", (512, 512))
    first = builder.op("aten::mm", [a, w], (256, 512), scope="sp1")
    builder.op("aten::mm", [builder.op("aten::mm", [first, w], (256, 512), scope="sp1"), w], (256, 512), scope="sp1")
    program = builder.build()
    plan = plan_program(program, profile)
    slow = replace(plan, tasks=tuple(replace(t, segment=replace(t.segment, early_start=False, preload=False)) for t in plan.tasks))
    over = profile.overhead_us
    lost = 2 * over["early_start_overlap"] + 3 * over["icache_miss"]
    assert simulate(program, slow, profile).device_us == pytest.approx(simulate(program, plan, profile).device_us + lost)


def test_two_memory_bound_kernels_on_two_streams_share_hbm():
    """Overlapping memory-bound work is not free: each holds nearly all of the HBM bandwidth."""
    profile = load_profile("a3")
    builder = ProgramBuilder()
    x = builder.input("x", (4096, 8192))
    builder.op("aten::mul", [x], (4096, 8192))
    builder.op("aten::exp", [x], (4096, 8192), stream="side")
    program = builder.build()
    report = simulate(program, plan_program(program, profile), profile)
    mul, exp = report.kernels
    assert exp.start_us >= mul.end_us or mul.start_us >= exp.end_us


class ThroughAView(torch.nn.Module):
    """The second matmul reads the first one's output through a transpose view; the third reads inputs only."""

    def forward(self, a, b):
        with torchair.scope.super_kernel("sp1", ""):
            first = a @ b
            second = first.t() @ a
            third = b @ b
        return second, third


def test_superkernel_syncs_only_where_a_sub_kernel_reads_an_earlier_one_even_through_a_view():
    report = compare(ThroughAView(), *inputs())
    over = load_profile("a3").overhead_us
    (parent,) = [k for k in report.variant.kernels if k.parent is None]
    first, second, third = [k for k in report.variant.kernels if k.parent == parent.name]
    barrier = over["sk_sync"] - over["early_start_overlap"]

    def call(kernel):
        return over["sk_subkernel_call"] + over["fetch_per_core"] * kernel.block_dim / 4

    assert second.start_us == pytest.approx(first.end_us + call(second) + barrier)
    assert third.start_us == pytest.approx(second.end_us + call(third))


def test_superkernel_block_dim_is_max_of_sub_kernels():
    report = compare(Chain(), *inputs())
    (parent,) = [k for k in report.variant.kernels if k.parent is None]
    children = [k for k in report.variant.kernels if k.parent == parent.name]
    assert len(children) == 3 and parent.block_dim == max(k.block_dim for k in children)
    assert report.superkernels["sp1"].block_dim == parent.block_dim


def test_block_dim_is_capped_by_limit_core_num():
    class Limited(torch.nn.Module):
        def forward(self, a, b):
            with torchair.scope.limit_core_num(4, 8):
                return a @ b

    big = torch.randn(2048, 2048)
    report = compare(Limited(), big, big)
    (kernel,) = report.variant.kernels
    assert kernel.block_dim == 4
    unlimited = compare(lambda a, b: a @ b, big, big)
    assert unlimited.variant.kernels[0].block_dim == 24
    assert kernel.duration_us > unlimited.variant.kernels[0].duration_us


def test_cube_kernel_time_follows_int8_peak():
    gen = torch.Generator().manual_seed(0)
    m, k, n = 864, 7168, 4096
    x1 = torch.randint(-10, 10, (m, k), dtype=torch.int8, generator=gen)
    x2 = torch.randint(-10, 10, (k, n), dtype=torch.int8, generator=gen)
    report = compare(lambda a, b, s: torch_npu.npu_quant_matmul(a, b, s, output_dtype=torch.bfloat16), x1, x2, torch.ones(n))
    (kernel,) = report.baseline.kernels
    profile = load_profile("a3")
    # alone on its stream, it pays its cold start; its body is the tiled Cube time at the int8 peak
    overhead = _task_overhead(profile.overhead_us, kernel.block_dim) + profile.overhead_us["cold_start"]
    body = kernel.duration_us - overhead
    at_peak = 2 * m * n * k / (profile.cube_tflops["int8"] * 1e6)
    assert at_peak / profile.compute_int8_efficiency < body < 2 * at_peak / profile.compute_int8_efficiency


_PRINT_TIMES = """
import torch
from pytest_npufuse import compare, torchair
class Chain(torch.nn.Module):
    def forward(self, a, b):
        with torchair.scope.super_kernel("sp1", ""):
            return ((a @ b) @ b) @ b
r = compare(Chain(), torch.ones(256, 512), torch.ones(512, 512))
print(repr((r.baseline.kernels, r.variant.kernels)))
"""


def test_same_case_gives_identical_numbers_in_two_processes():
    runs = [
        subprocess.run([sys.executable, "-c", _PRINT_TIMES], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    ]
    assert runs[0] == runs[1] and "te_superkernel_" in runs[0]
    in_process = compare(Chain(), torch.ones(256, 512), torch.ones(512, 512))
    assert repr((in_process.baseline.kernels, in_process.variant.kernels)) + "\n" == runs[0]
