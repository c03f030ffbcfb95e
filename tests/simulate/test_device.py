"""The multi-stream device scheduler and the host model, on hand-built programs and plans."""

import os
import subprocess
import sys
from dataclasses import replace

import pytest

from pytest_npufuse.errors import ModeledDeadlockError, NpufuseError
from pytest_npufuse.ir.events import Event
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.profile import load_profile

A3 = load_profile("a3")
BIG = (4096, 4096)


def by_name(report):
    return {kernel.name: kernel for kernel in report.kernels}


def two_streams(first: str, second: str, second_stream: str = "s1", priority: int = 0):
    builder = ProgramBuilder()
    x = builder.input("x", BIG)
    builder.op(first, [x, x], BIG)
    builder.op(second, [x, x], BIG, stream=second_stream, priority=priority)
    return builder.build()


def run(program, syncs=(), **kwargs):
    return simulate(program, plan_program(program, A3, syncs=syncs), A3, **kwargs)


def test_cube_and_vector_kernels_on_two_streams_overlap():
    report = run(two_streams("aten::mm", "aten::add"))
    mm, add = by_name(report)["MatMulV3"], by_name(report)["Add"]
    assert add.start_us < mm.end_us and mm.start_us < add.end_us
    assert report.streams == ("default", "s1")


def test_two_kernels_that_want_every_cube_core_serialise_across_streams():
    report = run(two_streams("aten::mm", "aten::mm"))
    first, second = by_name(report)["MatMulV3"], by_name(report)["MatMulV3_1"]
    assert first.block_dim == second.block_dim == A3.aic
    assert second.start_us >= first.end_us or first.start_us >= second.end_us


def test_stream_priority_orders_contention():
    builder = ProgramBuilder()
    x = builder.input("x", BIG)
    builder.op("aten::mm", [x, x], BIG, stream="low", priority=5)
    builder.op("aten::mm", [x, x], BIG, stream="high", priority=1)
    report = run(builder.build())
    low, high = by_name(report)["MatMulV3"], by_name(report)["MatMulV3_1"]
    assert high.start_us < low.start_us and low.start_us >= high.end_us


def test_event_orders_a_wait_after_its_record_and_costs_both_sides():
    program = two_streams("aten::mm", "aten::add")
    report = run(program, [Event("e1", "MatMulV3", "Add")])
    mm, add = by_name(report)["MatMulV3"], by_name(report)["Add"]
    (event,) = report.events
    overhead = A3.overhead_us
    assert event.record_end_us == pytest.approx(mm.end_us + overhead["event_record"])
    assert event.wait_start_us == pytest.approx(event.record_end_us)
    # Dispatch is pipelined: the Add was dispatched while the matmul ran, so it starts once the wait is over.
    assert add.start_us == pytest.approx(event.wait_end_us)
    assert (event.record_stream, event.wait_stream) == ("default", "s1")


def test_wait_on_an_event_never_recorded_is_a_modeled_deadlock():
    program = two_streams("aten::mm", "aten::add")
    with pytest.raises(ModeledDeadlockError) as exc:
        run(program, [Event("lost", None, "Add")])
    assert exc.value.entry == "lost"


def test_a_cycle_of_waits_is_a_modeled_deadlock_not_a_hang():
    builder = ProgramBuilder()
    x = builder.input("x", BIG)
    builder.op("aten::mm", [x, x], BIG)
    builder.op("aten::add", [x, x], BIG, stream="s1")
    builder.op("aten::mul", [x, x], BIG)
    builder.op("aten::sub", [x, x], BIG, stream="s1")
    syncs = [Event("a", "Sub", "MatMulV3"), Event("b", "Mul", "Add")]
    with pytest.raises(ModeledDeadlockError) as info:
        run(builder.build(), syncs)
    assert info.value.entry == "a, b"
    assert "event 'a', recorded after Sub on stream 's1', which itself never runs" in str(info.value)
    assert "event 'b'" in str(info.value)


def test_superkernel_is_one_task_holding_its_widest_pools():
    builder = ProgramBuilder()
    x = builder.input("x", (864, 7168), "int8")
    w = builder.input("w", (7168, 4096), "int8")
    q = builder.op("npu::npu_quant_matmul", [x, w], (864, 4096), scope="sp1")
    builder.op("npu::npu_dequant_swiglu_quant", [q], (864, 2048), "int8", scope="sp1")
    report = run(builder.build())
    (parent,) = [k for k in report.kernels if k.parent is None]
    children = [k for k in report.kernels if k.parent == parent.name]
    assert [c.kernel_type for c in children] == ["QuantBatchMatmulV3", "DequantSwigluQuant"]
    # The SuperKernel ends, as every task does, with one cache flush after its last sub-kernel.
    assert parent.start_us < children[0].start_us
    assert parent.end_us == pytest.approx(children[-1].end_us + A3.overhead_us["task_flush"])
    assert report.tasks == 1


def test_baseline_of_a_multistream_program_runs_on_one_stream():
    program = two_streams("aten::mm", "aten::add")
    report = simulate(program, plan_program(program, A3, variant=Variant.BASELINE), A3)
    assert {k.stream for k in report.kernels} == {"default"} and report.streams == ("default",)


def decode_like(layers: int = 4, value_dependent: bool = True):
    """Per layer: a value-dependent shape op chain on small host tensors and two device ops."""
    builder = ProgramBuilder()
    x = builder.input("x", (16, 4096))
    w = builder.input("w", (4096, 4096))
    shape = builder.input("shape", (4,), "int64")
    for _ in range(layers):
        packed = builder.op("aten::stack", [shape, shape], (2, 4), "int64")
        gathered = builder.op("aten::index_select", [packed, shape], (4,), "int64")
        x = builder.op("aten::mm", [x, w], (16, 4096))
        x = builder.op("aten::add", [x, x], (16, 4096))
        if value_dependent:
            builder.op("aten::nonzero", [gathered], (4, 1), "int64")
    return builder.build()


def test_graph_sink_launches_once_and_is_device_bound():
    report = run(decode_like(value_dependent=False))
    copies = [s for s in report.host if s.name == "MemcpyH2D"]  # the step's integer inputs come from the host
    assert report.execution == "graph-sink"
    assert report.host_us == pytest.approx(A3.overhead_us["model_launch"] + sum(s.end_us - s.start_us for s in copies))
    assert [s.name for s in report.host if s not in copies] == ["ModelExecute"]
    assert report.bound == "device"
    assert report.time_us == pytest.approx(report.host_us + report.device_us)


def test_a_value_dependent_op_in_a_sunk_graph_costs_a_stream_sync_and_a_relaunch():
    """docs/feature-docs.md#host-scheduling: the host must read the device's value, so the graph runs up to it, the host
    syncs the stream, and launches the rest; each nonzero of the four layers pays that once."""
    static, synced = run(decode_like(value_dependent=False)), run(decode_like())
    launches = [s.name for s in synced.host if s.name != "MemcpyH2D"]
    assert launches == ["ModelExecute"] + ["StreamSync", "ModelExecute"] * 4
    per_sync = A3.host_us["stream_sync"] + A3.overhead_us["model_launch"]
    assert synced.host_us >= A3.overhead_us["model_launch"] + 4 * per_sync
    # The device keeps running what was launched before each sync, so only part of it shows end to end.
    assert synced.time_us > static.time_us


def test_host_scheduling_pays_host_kernels_per_op_and_is_host_bound_for_small_ops():
    report = run(decode_like(), dynamic=True, host=HostConfig(small_shape_on_host=False, warm_tiling_cache=False))
    names = {s.name for s in report.host}
    assert {"InferShape", "Tiling", "AllocMem", "Launch", "StreamSync"} <= names
    assert report.bound == "host" and report.host_us > report.device_us


def test_tiling_cache_hits_repeated_runtime_arguments():
    cached = run(decode_like(), dynamic=True)
    uncached = run(decode_like(), dynamic=True, host=HostConfig(tiling_cache=False))

    def tiling(report):
        return sum(s.end_us - s.start_us for s in report.host if s.name.startswith("Tiling"))

    assert tiling(cached) < 0.5 * tiling(uncached)
    assert cached.host_us < uncached.host_us


def test_a_warm_tiling_cache_tiles_nothing_in_a_steady_iteration():
    warm = run(decode_like(), dynamic=True)
    cold = run(decode_like(), dynamic=True, host=HostConfig(warm_tiling_cache=False))
    assert "Tiling" not in {s.name for s in warm.host} and "Tiling" in {s.name for s in cold.host}
    assert warm.host_us < cold.host_us


def _tiling_of(report) -> dict[str, str]:
    return {s.kernel: s.name for s in report.host if s.name.startswith("Tiling")}


def test_the_tiling_cache_is_per_node_so_identical_layers_share_nothing_on_a_first_call():
    """GE keeps one cache per op node (docs/sources.md#ge-tiling-cache): the second layer's MatMul has the
    first one's shapes but its own empty cache, so a first call tiles every node and pays each key's look-up."""
    cold = run(decode_like(value_dependent=False), dynamic=True, host=HostConfig(warm_tiling_cache=False))
    tiling = _tiling_of(cold)
    assert set(tiling.values()) == {"Tiling"} and {"MatMulV3", "MatMulV3_1"} <= set(tiling)
    spent = {s.kernel: s.end_us - s.start_us for s in cold.host if s.name == "Tiling"}
    assert spent["MatMulV3_1"] == pytest.approx(A3.host_us["tiling_complex"] + A3.host_us["tiling_cache_hit"])


def test_a_call_with_new_sizes_retiles_only_the_nodes_whose_inputs_carry_a_symbolic_size():
    """A decode step one token longer: the attention over the KV cache sees new shapes and tiles again,
    the projection (its shapes fixed by the batch and the weights) hits its cache."""
    builder = ProgramBuilder()
    x, w = builder.input("x", (16, 4096)), builder.input("w", (4096, 4096))
    cache = builder.input("cache", (16, 513, 128))
    projected = builder.op("aten::mm", [x, w], (16, 4096))
    builder.op("aten::bmm", [cache, cache], (16, 513, 513), symbolic=True)
    builder.op("aten::add", [projected, projected], (16, 4096))
    program = builder.build()
    projection, attention, add = (kernel.name for kernel in program.kernels)
    grown = run(program, dynamic=True, host=HostConfig(new_sizes=True))
    assert _tiling_of(grown) == {projection: "TilingCacheHit", attention: "Tiling", add: "TilingCacheHit"}
    same = run(program, dynamic=True)
    assert set(_tiling_of(same).values()) == {"TilingCacheHit"} and same.host_us < grown.host_us


def test_complex_ops_tile_longer_than_simple_ones():
    report = run(decode_like(1), dynamic=True, host=HostConfig(tiling_cache=False, small_shape_on_host=False))
    tiling = {s.kernel: s.end_us - s.start_us for s in report.host if s.name == "Tiling"}
    assert tiling["MatMulV3"] == pytest.approx(A3.host_us["tiling_complex"])
    assert tiling["Add"] == pytest.approx(A3.host_us["tiling"])


def test_host_threads_come_from_max_runtime_core_number(monkeypatch):
    monkeypatch.setenv("MAX_RUNTIME_CORE_NUMBER", "3")
    assert HostConfig().threads == 3
    monkeypatch.setenv("MAX_RUNTIME_CORE_NUMBER", "three")
    with pytest.raises(NpufuseError) as exc:
        HostConfig()
    assert exc.value.argument == "MAX_RUNTIME_CORE_NUMBER"


@pytest.mark.parametrize("value", ["9" * 5000, str(2**63), "\u0663", "-3", "0", "3.0"])
def test_a_max_runtime_core_number_no_host_has_is_refused_by_name(monkeypatch, value):
    """A 5000-digit value raised Python's int-conversion ValueError; \u0663 (Arabic-Indic 3) passed isdigit."""
    monkeypatch.setenv("MAX_RUNTIME_CORE_NUMBER", value)
    with pytest.raises(NpufuseError) as exc:  # not a positive integer of at most MAX_THREADS
        HostConfig()
    assert exc.value.argument == "MAX_RUNTIME_CORE_NUMBER"


def test_threads_past_the_three_host_stages_change_nothing_and_allocate_nothing():
    """A huge thread count once allocated one clock per thread (10**9 of them: a MemoryError)."""
    three = run(decode_like(), dynamic=True, host=HostConfig(threads=3))
    many = run(decode_like(), dynamic=True, host=HostConfig(threads=2**62))
    assert many.time_us == three.time_us and many.host == three.host


def test_small_shape_ops_stay_on_the_host_and_avoid_stream_syncs():
    on_host = run(decode_like(), dynamic=True)
    on_device = run(decode_like(), dynamic=True, host=HostConfig(small_shape_on_host=False))
    assert not any(k.kernel_type in ("Pack", "GatherV2") for k in on_host.kernels)
    assert "StreamSync" not in {s.name for s in on_host.host}
    assert on_host.time_us < on_device.time_us


def test_three_host_threads_pipeline_the_host_kernels():
    one = run(decode_like(8), dynamic=True)
    three = run(decode_like(8), dynamic=True, host=HostConfig(threads=3))
    assert {s.thread for s in three.host} == {0, 1, 2}
    assert three.host_us < one.host_us and three.host_threads == 3


_PRINT_MULTISTREAM = """
from pytest_npufuse.ir.events import Event
from pytest_npufuse.target.profile import load_profile
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
p = load_profile("a3")
b = ProgramBuilder()
x = b.input("x", (2048, 2048))
for i in range(6):
    b.op("aten::mm", [x, x], (2048, 2048), stream=("s%d" % (i % 3)) if i % 2 else None)
    b.op("aten::add", [x, x], (2048, 2048), stream="side", scope="sp")
program = b.build()
plan = plan_program(program, p, syncs=[Event("e", "MatMulV3_1", "Add_3")])
print(repr(simulate(program, plan, p)))
print(repr(simulate(program, plan, p, dynamic=True, host=HostConfig(threads=3))))
"""


def test_multistream_run_is_identical_twice_and_in_another_process():
    """The other process has a fixed hash seed, this one a random one: dict and set order differ."""
    other = subprocess.run([sys.executable, "-c", _PRINT_MULTISTREAM], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    runs = []
    for _ in range(2):
        printed: list[str] = []
        exec(_PRINT_MULTISTREAM, {"print": printed.append})
        runs.append("\n".join(printed) + "\n")
    assert runs[0] == runs[1] == other and "Event(event='e'" in other


def test_a_task_wider_than_the_hardware_is_refused_not_left_waiting():
    """A plan made for a bigger die, simulated on a smaller one: the task could never get its cores."""
    program = two_streams("aten::mm", "aten::add")
    plan = plan_program(program, A3)
    small = replace(A3, aic=A3.aic // 2)
    with pytest.raises(NpufuseError) as exc:
        simulate(program, plan, small)
    assert (exc.value.entry, exc.value.bound) == ("MatMulV3", 12)
