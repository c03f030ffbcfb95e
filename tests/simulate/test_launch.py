"""How tasks start (issue 21): a kernel on an idle stream pays its cold start, one queued behind another
has it hidden; a replayed aclgraph waits longer between tasks than GE's sunk graph."""

from dataclasses import replace

import pytest

from pytest_npufuse.ir.events import Event
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.profile import load_profile

A3 = replace(load_profile("a3"), overhead_us={**load_profile("a3").overhead_us, "cold_start": 12.0, "replay_task": 3.0})


def program(kernels: int):
    builder = ProgramBuilder()
    x = builder.input("x", (64, 4096))
    for _ in range(kernels):
        x = builder.op("aten::mul", [x, x], (64, 4096))
    return builder.build()


def run(kernels: int, mode: str = "max-autotune"):
    built = program(kernels)
    return simulate(built, plan_program(built, A3, variant=Variant.BASELINE, mode=mode), A3)


def test_only_the_first_of_back_to_back_kernels_pays_the_cold_start():
    one, ten = run(1), run(10)
    durations = [k.duration_us for k in ten.kernels]
    assert durations[0] == pytest.approx(one.kernels[0].duration_us)
    assert all(d == pytest.approx(durations[0] - 12.0) for d in durations[1:])


def test_an_eager_kernel_that_finds_its_stream_idle_starts_cold():
    """Eager is host-bound on small kernels: a kernel the host launches after its stream went idle pays
    the cold start; one launched while the device still waited out the previous task's submission gap
    is queued behind it and starts warm."""
    eager = run(10, "eager")
    assert eager.bound == "host"
    gap = A3.overhead_us["task_gap"] + A3.overhead_us["replay_task"]
    cold = eager.kernels[0].duration_us
    waited = [later.start_us > earlier.end_us + gap + 1e-9 for earlier, later in zip(eager.kernels, eager.kernels[1:])]
    for kernel, idle in zip(eager.kernels[1:], waited):
        assert kernel.duration_us == pytest.approx(cold if idle else cold - 12.0)
    assert any(waited)


def test_eager_is_never_faster_on_the_device_than_the_replay_of_its_graph():
    """Issue 21: only GE's sunk graph has its tasks preloaded on the device; ops launched one by one wait
    as long per task as a replayed aclgraph, so a device-bound eager run cannot beat the replay (the
    Step-3.7 row came out with the wrong sign when eager skipped that wait)."""
    builder = ProgramBuilder()
    x = builder.input("x", (16384, 16384))
    for _ in range(10):
        x = builder.op("aten::mul", [x, x], (16384, 16384))
    built = builder.build()
    runs = {mode: simulate(built, plan_program(built, A3, variant=Variant.BASELINE, mode=mode), A3)
            for mode in ("eager", "npugraph_ex", "max-autotune")}
    assert runs["eager"].bound == "device"
    assert runs["eager"].time_us >= runs["npugraph_ex"].time_us > runs["max-autotune"].time_us


def test_an_aclgraph_replay_waits_longer_between_tasks_than_a_sunk_graph():
    sunk, replayed = run(10), run(10, "npugraph_ex")
    assert replayed.time_us - sunk.time_us == pytest.approx(9 * 3.0, abs=1e-6)


def test_a_side_stream_kernel_held_by_an_event_was_launched_ahead_and_starts_warm():
    """In a graph every task reaches the device at launch; a side stream's first kernel that waits for an
    event has its start-up hidden like a kernel queued behind another, while one that starts at launch
    alone on its stream pays it."""
    builder = ProgramBuilder()
    x = builder.input("x", (64, 4096))
    first = builder.op("aten::mul", [x, x], (64, 4096))
    held = builder.op("aten::mul", [first, first], (64, 4096), stream="held")
    free = builder.op("aten::mul", [x, x], (64, 4096), stream="free")
    names = {kernel.node: kernel.name for kernel in builder.kernels}
    built = builder.build()
    syncs = [Event("e", names[first], names[held])]
    runs = {k.stream: k for k in simulate(built, plan_program(built, A3, syncs=syncs), A3).kernels}
    assert runs["held"].duration_us == pytest.approx(runs["default"].duration_us - 12.0)
    assert runs["free"].duration_us == pytest.approx(runs["default"].duration_us)
