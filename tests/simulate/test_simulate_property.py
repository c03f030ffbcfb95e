"""Property tests of the device simulator on random multi-stream programs: it never hangs, and the same
program always gives the same numbers."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_npufuse.errors import ModeledDeadlockError
from pytest_npufuse.ir.events import Event
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.profile import load_profile

A3 = load_profile("a3")
OPS = ("aten::mm", "aten::add", "npu::npu_rms_norm", "aten::mul")
SHAPES = ((64, 64), (512, 512), (2048, 2048))


@st.composite
def plans(draw):
    """Kernels of random ops and sizes on up to three streams with priorities, and random events,
    some of them waited on but never recorded, some forming cycles."""
    builder = ProgramBuilder()
    tensors = [builder.input("x", (64, 64))]
    for _ in range(draw(st.integers(1, 8))):
        shape = draw(st.sampled_from(SHAPES))
        stream = draw(st.sampled_from((None, "1", "2")))
        priority = draw(st.integers(0, 2)) if stream else 0
        tensors.append(builder.op(draw(st.sampled_from(OPS)), [draw(st.sampled_from(tensors))], shape,
                                  stream=stream, priority=priority))
    program = builder.build()
    names = [kernel.name for kernel in program.kernels]
    syncs = [
        Event(f"e{i}", draw(st.sampled_from([None, *names])), draw(st.sampled_from(names)))
        for i in range(draw(st.integers(0, 4)))
    ]
    return program, plan_program(program, A3, syncs=syncs)


def _outcome(program, plan):
    try:
        return simulate(program, plan, A3)
    except ModeledDeadlockError as exc:
        return f"deadlock: {exc}"


@settings(max_examples=300, deadline=None)
@given(plans())
def test_simulator_terminates_and_is_deterministic(case):
    program, plan = case
    first, second = _outcome(program, plan), _outcome(program, plan)
    assert first == second
    if not isinstance(first, str):
        assert all(run.end_us >= run.start_us >= 0 for run in first.kernels)
        assert len([k for k in first.kernels if k.parent is None]) == len(plan.tasks)
