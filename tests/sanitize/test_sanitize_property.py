"""Property test: on random small multi-stream programs, the sanitizer's verdict equals a brute-force
oracle that enumerates every legal interleaving of the stream plan."""

import itertools
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_npufuse.frontend.scopes import Annotations
from pytest_npufuse.ir.events import Event, EventKind
from pytest_npufuse.ir.program import Buffer, Kernel, Program, TensorSpec
from pytest_npufuse.plan.streams import stream_plan
from pytest_npufuse.sanitize.checker import _allocate, sanitize
from pytest_npufuse.target.catalog import default_op

STREAMS = ("default", "1", "2")
SPEC = TensorSpec((4,), "float32", 16)


@st.composite
def programs(draw):
    """Kernels on random streams reading earlier tensors (some writing one in place), plus random
    records and waits of a few events at random places."""
    buffers = {f"in{i}": Buffer(f"in{i}", SPEC, None) for i in range(2)}
    kernels = []
    for index in range(draw(st.integers(2, 6))):
        stream = draw(st.sampled_from(STREAMS))
        readable = sorted(buffers)
        inputs = tuple(draw(st.lists(st.sampled_from(readable), min_size=1, max_size=2, unique=True)))
        in_place = draw(st.booleans()) and draw(st.integers(0, 3)) == 0
        name, out = f"K{index}", f"b{index}"
        buffers[out] = Buffer(out, SPEC, None if in_place else name, alias_of=inputs[0] if in_place else None)
        kernels.append(
            Kernel(index, name, out, "test::k", default_op("test::k"), inputs, (out,), (SPEC,),
                   Annotations(stream=None if stream == "default" else stream), 0.0, 32, "float32", "")
        )
    syncs = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from((EventKind.RECORD, EventKind.WAIT)))
        syncs.append(Event(kind=kind, stream=draw(st.sampled_from(STREAMS)), position=draw(st.integers(0, len(kernels))),
                           event=f"tag:{draw(st.sampled_from('ab'))}", api=f"npu_tagged_event_{kind}", source=""))
    outputs = (kernels[-1].outputs[0],)
    return Program(tuple(kernels), MappingProxyType(buffers), ("in0", "in1"), outputs, tuple(syncs))


def _legal_orders(program, plan):
    """Every order of the kernels that keeps stream order and waits after their records."""
    names = [k.name for k in program.kernels]
    before = {name: set() for name in names}
    for stream in plan.streams:
        queue = [k.name for k in program.kernels if plan.kernel_stream[k.name] == stream]
        for earlier, later in zip(queue, queue[1:]):
            before[later].add(earlier)
    blocked = set()
    for edge in plan.edges:
        target = edge.wait_before
        if edge.never_recorded:
            blocked |= {target} if target else set()
        elif target is not None:
            before[target].add(edge.record_after)
    for order in itertools.permutations(names):
        seen = set()
        if all(not (n in blocked or before[n] - seen) and not seen.add(n) for n in order):
            yield order


def _oracle(program, plan):
    """(hazard found, deadlock) by brute force: two accesses to one block from different streams, at
    least one a write, are a hazard when some legal interleaving runs them against issue order."""
    orders = list(_legal_orders(program, plan))
    end_blocked = any(e.wait_before is None and e.never_recorded for e in plan.edges)
    if not orders or end_blocked:
        return None, True
    block_of = _allocate(program, plan)

    def block(buffer):
        storage = program.storage(buffer)
        return block_of.get(storage, storage)

    accesses = []
    for kernel in program.kernels:
        accesses += [(kernel.name, block(b), False) for b in kernel.inputs]
        accesses += [(kernel.name, block(b), True) for b in kernel.outputs]
    for (k1, b1, w1), (k2, b2, w2) in itertools.combinations(accesses, 2):
        if b1 != b2 or not (w1 or w2) or plan.kernel_stream[k1] == plan.kernel_stream[k2]:
            continue
        # k1 was issued first; the access pair is a hazard if some legal run does k2 before k1.
        if any(order.index(k2) < order.index(k1) for order in orders):
            return True, False
    return False, False


@settings(max_examples=300, deadline=None)
@given(programs())
def test_sanitizer_agrees_with_brute_force_oracle(program):
    plan = stream_plan(program, "reduce-overhead")
    report = sanitize(program, plan)
    race, deadlock = _oracle(program, plan)
    assert (report.deadlock is not None) == deadlock
    if not deadlock:
        assert bool(report.races) == race, [r.describe() for r in report.races]
