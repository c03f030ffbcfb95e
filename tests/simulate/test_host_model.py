"""The host scheduling of docs/feature-docs.md#host-scheduling, complete: buffers freed on the memory thread,
host-to-device copies of the inputs a step is fed, GE's fusion of pointwise chains cutting host kernels."""

from collections import Counter

import pytest

from pytest_npufuse.errors import ArgumentError
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
    assert matmul == pytest.approx(A3.host_us["launch"])
    assert collective == pytest.approx(A3.host_us["launch_collective"])
    assert collective > matmul


ATTENTION = "npu::npu_fused_infer_attention_score"


def layers_program(layers: int, context: int):
    """``layers`` of a projection and an attention over ``context`` cached tokens, one after another."""
    builder = ProgramBuilder()
    x = builder.input("x", (8, 1024))
    for layer in range(layers):
        q = builder.op("aten::mm", [x, builder.input(f"w{layer}", (1024, 1024))], (8, 1024))
        cache = builder.input(f"kv{layer}", (8, context, 576))
        attended = builder.op(ATTENTION, [q, cache], (8, 8, 128), flops=2.0 * 8 * 8 * context * 1088)
        x = builder.op("aten::add", [x, attended], (8, 1024))
    return builder.build()


def replayed(built, mode="npugraph_ex", rebound=frozenset()):
    plan = plan_program(built, A3, variant=Variant.BASELINE, mode=mode)
    return simulate(built, plan, A3, host=HostConfig(threads=1, rebound_ops=rebound))


def rebind_us():
    """One rebind: the eager host path of the attention op (it tiles as a complex op) and its event record."""
    host = A3.host_us
    return host["eager_dispatch"] + host["infer_shape"] + host["tiling_complex"] + host["launch"] + \
        A3.overhead_us["event_record"]


def test_a_replay_rebinds_each_named_task_after_its_launch_and_the_task_waits_for_its_update():
    built = layers_program(4, 2048)
    report = replayed(built, rebound=frozenset({ATTENTION}))
    updates = [s for s in report.host if s.name == "TaskUpdate"]
    attention = [k for k in report.kernels if k.op_type == ATTENTION and k.parent is None]
    assert len(updates) == len(attention) == 4
    launch = next(s for s in report.host if s.name == "GraphReplay")
    assert updates[0].start_us > launch.end_us
    records = [s for s in report.host if s.name == "EventRecord"]
    for record, kernel in zip(records, sorted(attention, key=lambda k: k.start_us)):
        assert kernel.start_us >= record.end_us
    assert report.host_us == pytest.approx(launch.end_us + 4 * rebind_us())


def test_rebinding_paces_a_graph_whose_layers_are_shorter_than_their_update_and_hides_under_longer_ones():
    """A short-context layer takes less device time than one rebind, so the device waits for the host
    layer by layer; a long-context layer outlasts it and the updates run ahead, nearly free."""
    short = layers_program(8, 256)
    plain, bound = replayed(short), replayed(short, rebound=frozenset({ATTENTION}))
    assert plain.device_us < 8 * rebind_us()
    assert bound.time_us >= 8 * rebind_us() > plain.time_us
    assert bound.device_us == pytest.approx(plain.device_us)
    long = layers_program(8, 262144)
    plain, bound = replayed(long), replayed(long, rebound=frozenset({ATTENTION}))
    assert plain.device_us / 8 > rebind_us()
    assert bound.time_us - plain.time_us < 2 * rebind_us()


def test_only_a_replayed_graph_rebinds_its_tasks():
    built = layers_program(2, 2048)
    sunk = replayed(built, mode="max-autotune", rebound=frozenset({ATTENTION}))
    assert [s.name for s in sunk.host] == ["ModelExecute"]
    assert sunk.time_us == replayed(built, mode="max-autotune").time_us


def test_rebound_ops_is_a_frozenset_of_op_types():
    with pytest.raises(ArgumentError) as exc:
        HostConfig(threads=1, rebound_ops=[ATTENTION])
    assert (exc.value.op, exc.value.argument) == ("HostConfig", "rebound_ops")


def eager_read(read: bool):
    """A long matmul, then (``read``) ``.item()`` of a length fed from the host, then a small op: in
    eager the read synchronises the stream, so the op after it launches only once the matmul is done."""
    builder = ProgramBuilder()
    x, w = builder.input("x", (4096, 4096)), builder.input("w", (4096, 4096))
    lengths = builder.input("lengths", (1,), "int64")
    y = builder.op("aten::mm", [x, w], (4096, 4096))
    if read:
        builder.op("aten::_local_scalar_dense", [lengths], (1,), "int64")
    builder.op("aten::mul", [y, y], (4096, 4096))
    built = builder.build()
    plan = plan_program(built, A3, variant=Variant.BASELINE, mode="eager")
    return simulate(built, plan, A3, host=HostConfig(threads=1))


def test_an_eager_value_read_waits_for_every_task_launched_before_it():
    synced, free = eager_read(True), eager_read(False)
    matmul = next(k for k in synced.kernels if k.op_type == "aten::mm")
    sync = next(s for s in synced.host if s.name == "StreamSync")
    assert sync.start_us == pytest.approx(matmul.end_us)
    launch = [s for s in synced.host if s.name == "Launch"][-1]
    assert launch.start_us > matmul.end_us
    assert "StreamSync" not in {s.name for s in free.host}
    free_matmul = next(k for k in free.kernels if k.op_type == "aten::mm")
    assert [s for s in free.host if s.name == "Launch"][-1].start_us < free_matmul.end_us
    read = [s.name for s in synced.host if s.kernel.startswith("LocalScalarDense")]
    assert read == ["StreamSync", "EagerDispatch", "HostCompute"]  # no GE InferShape for torch_npu's own .item()
