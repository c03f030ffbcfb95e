"""Seed 002's host scheduling, complete: buffers freed on the memory thread, host-to-device copies of the
inputs a step is fed, GE's fusion of pointwise chains cutting host kernels."""

from collections import Counter

from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.profile import load_profile

A3 = load_profile("a3")


def program():
    """Token ids fed from the host, an embedding, a pointwise chain of three, a matmul."""
    builder = ProgramBuilder()
    ids = builder.input("ids", (8,), "int64")
    table, w = builder.input("table", (32000, 1024)), builder.input("w", (1024, 1024))
    x = builder.op("aten::embedding", [table, ids], (8, 1024))
    y = builder.op("aten::mul", [x, x], (8, 1024))
    y = builder.op("aten::add", [y, y], (8, 1024))
    y = builder.op("aten::mul", [y, y], (8, 1024))
    builder.op("aten::mm", [y, w], (8, 1024))
    return builder.build()


def host_slices(execution_mode="max-autotune", dynamic=True, **config):
    built = program()
    plan = plan_program(built, A3, variant=Variant.BASELINE, mode=execution_mode)
    report = simulate(built, plan, A3, dynamic=dynamic, host=HostConfig(threads=3, **config))
    return report, Counter(s.name for s in report.host), report.host


def test_buffers_are_freed_on_the_memory_thread_after_their_last_reader_launches():
    report, names, slices = host_slices(ge_fusion=False)
    frees = [s for s in slices if s.name == "FreeMem"]
    assert len(frees) == 4  # the embedding's and the three pointwise outputs; the matmul's is the step's result
    assert {s.thread for s in frees} == {1}


def test_inputs_fed_from_the_host_are_copied_before_their_reader_launches():
    _, names, slices = host_slices()
    copies = [s for s in slices if s.name == "MemcpyH2D"]
    assert len(copies) == 1 and copies[0].thread == 2
    launch = next(s for s in slices if s.name == "Launch" and s.kernel == copies[0].kernel)
    assert copies[0].end_us <= launch.start_us
    _, sunk, sunk_slices = host_slices(dynamic=False)
    assert [s.name for s in sunk_slices] == ["MemcpyH2D", "ModelExecute"]


def test_ge_fusion_lets_a_pointwise_chain_pass_the_host_kernels_once():
    fused_report, fused, _ = host_slices()
    plain_report, plain, _ = host_slices(ge_fusion=False)
    assert plain["Launch"] - fused["Launch"] == 2 and plain["InferShape"] - fused["InferShape"] == 2
    assert fused_report.host_us < plain_report.host_us


def test_a_collective_launched_by_the_host_pays_for_building_its_tasks():
    builder = ProgramBuilder()
    x, w = builder.input("x", (8, 1024)), builder.input("w", (1024, 1024))
    y = builder.op("aten::mm", [x, w], (8, 1024))
    builder.op("_c10d_functional::all_reduce", [y], (8, 1024))
    built = builder.build()
    plan = plan_program(built, A3, variant=Variant.BASELINE, mode="max-autotune")
    report = simulate(built, plan, A3, dynamic=True, host=HostConfig(threads=3))
    launches = {s.kernel: s.end_us - s.start_us for s in report.host if s.name == "Launch"}
    matmul, collective = (launches[kernel.name] for kernel in built.kernels)
    assert matmul == A3.host_us["launch"]
    assert collective == A3.host_us["launch_collective"] > matmul
