"""One event type from capture to trace: each stage refines the events of the stage before it."""

import json
from dataclasses import replace

import pytest
import torch

from pytest_npufuse import capture
from pytest_npufuse import torchair as tng
from pytest_npufuse.ir.events import Event, EventKind
from pytest_npufuse.plan.superkernel import plan_variant
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.report.trace import trace_events
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.profile import load_profile

A3 = load_profile("a3")
MODE = "reduce-overhead"
TASK_FIELDS = dict(record_task=None, record_stream=None, wait_task=None, wait_stream=None)
TIME_FIELDS = dict(record_start_us=None, record_end_us=None, wait_start_us=None, wait_end_us=None)


class SideMatmul(torch.nn.Module):
    """A matmul on a side stream between a tagged record and wait, its input kept alive for that stream."""

    def __init__(self):
        super().__init__()
        self.ready = tng.ops.npu_create_tagged_event(tag="ready")
        self.done = tng.ops.npu_create_tagged_event(tag="done")

    def forward(self, a, b):
        x = a + b
        tng.ops.npu_tagged_event_record(self.ready)
        with tng.scope.npu_stream_switch("side"):
            tng.ops.npu_tagged_event_wait(self.ready)
            y = x @ b
            tng.ops.npu_record_tagged_stream(x, "side")
            tng.ops.npu_tagged_event_record(self.done)
        tng.ops.npu_tagged_event_wait(self.done)
        return y * 2


@pytest.fixture
def program():
    return capture(SideMatmul(), torch.randn(8, 8), torch.randn(8, 8))


def test_capture_records_each_request_with_its_kind(program):
    kinds = [(point.kind, point.event, point.stream) for point in program.syncs]
    assert kinds == [
        (EventKind.RECORD, "tag:ready", "default"), (EventKind.WAIT, "tag:ready", "side"),
        (EventKind.KEEP_ALIVE, "", "side"), (EventKind.RECORD, "tag:done", "side"), (EventKind.WAIT, "tag:done", "default"),
    ]
    assert json.dumps([point.kind for point in program.syncs]) == '["record", "wait", "keep_alive", "record", "wait"]'


def test_each_stage_adds_fields_to_the_events_of_the_stage_before(program):
    variant = plan_variant(program, A3, variant=Variant.VARIANT, mode=MODE)
    run = simulate(program, variant, A3)
    waits = {point.event: point for point in program.syncs if point.kind is EventKind.WAIT}
    user_edges = [edge for edge in variant.streams.edges if not edge.event.startswith("closure:")]
    assert [replace(edge, record_after=None, wait_before=None) for edge in user_edges] == list(waits.values())
    assert [(e.record_after, e.wait_before) for e in user_edges] == [("Add", "MatMulV3"), ("MatMulV3", "Mul")]
    assert [replace(event, **TASK_FIELDS) for event in variant.syncs] == user_edges
    assert [(e.record_stream, e.wait_stream) for e in variant.syncs] == [("default", "side"), ("side", "default")]
    assert [replace(event, **TIME_FIELDS) for event in run.events] == list(variant.syncs)
    for event in run.events:
        assert event.record_start_us < event.record_end_us <= event.wait_start_us < event.wait_end_us


def test_the_trace_draws_each_timed_event_as_record_wait_and_flow(program):
    run = simulate(program, plan_variant(program, A3, variant=Variant.VARIANT, mode=MODE), A3)
    slices = [(e["name"], e["args"]["event"], e["ts"]) for e in trace_events(run) if e.get("cat") == "event" and e["ph"] == "X"]
    expected = []
    for event in run.events:
        expected += [("EventRecord", event.event, round(event.record_start_us, 6)),
                     ("EventWait", event.event, round(event.wait_start_us, 6))]
    assert slices == expected and len(run.events) == 2


def test_a_hand_built_event_enters_at_the_streams_stage():
    event = Event("e", "MatMulV3", "Add")
    assert (event.kind, event.never_recorded, Event("lost", None, "Add").never_recorded) == (EventKind.WAIT, False, True)
    with pytest.raises(AttributeError):
        event.record_after = "Add"
