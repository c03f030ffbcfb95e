"""The stream plan and the sanitizer on captured multi-stream programs (no timing involved)."""

import pytest
import torch

from pytest_npufuse import compare
from pytest_npufuse import torchair as tng
from pytest_npufuse.errors import ScopeError
from pytest_npufuse.execute.graph import poison
from pytest_npufuse.frontend.dynamo import compile_once
from pytest_npufuse.pipeline.backend import NpuBackend
from pytest_npufuse.plan.streams import stream_plan
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.sanitize.checker import Access, _order_fix, sanitize
from pytest_npufuse.target.profile import load_profile


def capture(model, *inputs, mode="reduce-overhead"):
    config = tng.CompilerConfig()
    config.mode = mode
    torch._dynamo.reset()
    backend = NpuBackend(config.graph_options(), load_profile("a3"), Variant.VARIANT, multistream=False)
    compile_once(model, inputs, backend)
    return backend.graphs[0].program


def analyse(model, *inputs, mode="reduce-overhead"):
    program = capture(model, *inputs, mode=mode)
    return program, sanitize(program, stream_plan(program, mode))


def data(n=4, count=4):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(n, n, generator=gen) for _ in range(count)]


class Seed001(torch.nn.Module):
    """The example of docs/feature-docs.md#multi-stream, with the side streams consuming main-stream results, so every
    sync matters."""

    def __init__(self, drop=()):
        super().__init__()
        self.drop = drop
        self.event1 = tng.ops.npu_create_tagged_event(tag="66")
        self.event2 = tng.ops.npu_create_tagged_event(tag="77")

    def forward(self, in1, in2, in3, in4):
        add_result = torch.add(in1, in2)
        if "record1" not in self.drop:
            tng.ops.npu_tagged_event_record(self.event1)
        with tng.scope.npu_stream_switch("1"):
            if "wait1" not in self.drop:
                tng.ops.npu_tagged_event_wait(self.event1)
            mm_result = torch.mm(add_result, in4)
            if "record2" not in self.drop:
                tng.ops.npu_tagged_event_record(self.event2)
            mm1 = torch.mm(in3, in4)
        with tng.scope.npu_stream_switch("2"):
            if "wait2" not in self.drop:
                tng.ops.npu_tagged_event_wait(self.event2)
            add2 = torch.add(mm_result, in4)
        return add_result, mm_result, mm1, add2


def test_synchronised_program_is_race_free():
    program, report = analyse(Seed001(), *data())
    assert report.races == () and report.deadlock is None
    assert [k.stream for k in program.kernels] == ["default", "1", "1", "2"]


def test_missing_wait_is_a_read_after_write_race_naming_both_sides():
    _, report = analyse(Seed001(drop=("wait1",)), *data())
    (race,) = report.races
    assert race.kind == "read-after-write race" and race.tensor == "add" and race.name == "add_result"
    assert race.first.kernel == "Add" and race.first.stream == "default" and race.first.action == "writes it"
    assert race.second.kernel == "MatMulV3" and race.second.stream == "1"
    assert "test_sanitize.py" in race.second.source
    text = race.describe()
    assert "npu_tagged_event_record" in text and "npu_tagged_event_wait" in text
    assert f"on stream '1' before {race.second.source}" in race.fix and race.second.code == "mm_result = torch.mm(add_result, in4)"
    assert report.poisoned_reads() == {"MatMulV3": frozenset({"add"})}


def test_missing_record_is_a_modeled_deadlock_naming_the_event():
    _, report = analyse(Seed001(drop=("record1",)), *data())
    assert report.deadlock is not None
    assert "stream '1' waits before MatMulV3 for event '66'" in report.deadlock.describe()
    assert "which is never recorded" in report.deadlock.describe()


@pytest.mark.parametrize("dropped", [("wait2",), ("record2", "wait2")])
def test_each_missing_sync_on_the_second_edge_is_caught(dropped):
    _, report = analyse(Seed001(drop=dropped), *data())
    assert [(r.first.kernel, r.second.kernel) for r in report.races] == [("MatMulV3", "Add_1")]


def test_wait_tensor_orders_streams_in_max_autotune():
    class Ge(torch.nn.Module):
        def forward(self, a, b):
            x = a + b
            with tng.scope.npu_stream_switch("1"):
                tng.scope.npu_wait_tensor(b, x)
                y = b @ b
            return x, y

    program, report = analyse(Ge(), *data(count=2), mode="max-autotune")
    plan = stream_plan(program, "max-autotune")
    assert [(e.record_after, e.wait_before, e.api) for e in plan.edges] == [("Add", "MatMulV3", "npu_wait_tensor")]
    assert report.races == ()


def test_ge_orders_data_dependencies_between_streams_itself():
    class Data(torch.nn.Module):
        def forward(self, a, b):
            x = a + b
            with tng.scope.npu_stream_switch("1"):
                y = x @ b
            return y

    program, report = analyse(Data(), *data(count=2), mode="max-autotune")
    assert report.races == ()
    assert [e.api for e in stream_plan(program, "max-autotune").edges] == ["GE data edge"]
    _, aclgraph = analyse(Data(), *data(count=2), mode="reduce-overhead")
    assert [r.kind for r in aclgraph.races] == ["read-after-write race"]


def test_record_and_wait_work_in_both_modes():
    class RecordWait(torch.nn.Module):
        def forward(self, a, b):
            x = a + b
            token = tng.ops.record()
            with tng.scope.npu_stream_switch("1"):
                tng.ops.wait([token])
                y = x @ b
            return y

    for mode in ("max-autotune", "reduce-overhead"):
        _, report = analyse(RecordWait(), *data(count=2), mode=mode)
        assert report.races == (), mode


def test_fork_join_closure_in_reduce_overhead():
    class Nested(torch.nn.Module):
        def forward(self, a, b):
            x = a + b
            with tng.scope.npu_stream_switch("1"):
                y = b @ b
                with tng.scope.npu_stream_switch("2"):
                    z = b * 2
            return x, y, z

    program = capture(Nested(), *data(count=2))
    events = sorted(e.event for e in stream_plan(program, "reduce-overhead").edges)
    assert events == ["closure:exit:1:0", "closure:exit:2:1"]
    assert stream_plan(program, "max-autotune").edges == ()


def test_lifetime_hazard_without_record_tagged_stream():
    class Reuse(torch.nn.Module):
        def __init__(self, keep):
            super().__init__()
            self.keep = keep
            self.event = tng.ops.npu_create_tagged_event(tag=f"ready{keep}")

        def forward(self, a, b):
            t = a * 2
            tng.ops.npu_tagged_event_record(self.event)
            with tng.scope.npu_stream_switch("1"):
                tng.ops.npu_tagged_event_wait(self.event)
                y = t @ b
                if self.keep:
                    tng.ops.npu_record_tagged_stream(t, "1")
            u = b - 1
            return y, u

    _, unsafe = analyse(Reuse(False), *data(count=2))
    (race,) = unsafe.races
    assert race.kind == "lifetime hazard" and race.tensor == "mul" and race.name == "t"
    assert race.first.kernel == "MatMulV3" and race.second.kernel == "Sub"
    assert "npu_record_tagged_stream(t, '1')" in race.fix
    _, safe = analyse(Reuse(True), *data(count=2))
    assert safe.races == ()


def test_in_place_write_to_an_input_races_with_a_reader_on_another_stream():
    class InPlace(torch.nn.Module):
        def forward(self, a, b):
            with tng.scope.npu_stream_switch("1"):
                y = a @ b
            a.mul_(2)
            return y

    program, report = analyse(InPlace(), *data(count=2))
    assert [r.kind for r in report.races] == ["write-after-read race"]
    (race,) = report.races
    assert race.first.stream == "1" and race.second.op_type == "aten::copy_"
    assert race.tensor in program.kernel("MatMulV3").inputs
    assert report.poisoned_reads() == {"MatMulV3": frozenset({race.tensor})}
    assert not compare(InPlace(), *data(count=2), mode="reduce-overhead").bit_exact


@pytest.mark.parametrize(
    ("api", "mode", "message"),
    [
        ("wait_tensor", "reduce-overhead", "npu_wait_tensor"),
        ("tagged", "max-autotune", "npu_tagged_event_record"),
    ],
)
def test_mode_rules(api, mode, message):
    class Uses(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.event = tng.ops.npu_create_tagged_event("e")

        def forward(self, a, b):
            if api == "tagged":
                tng.ops.npu_tagged_event_record(self.event)
            else:
                tng.scope.npu_wait_tensor(a, b)
            return a @ b

    program = capture(Uses(), *data(count=2), mode=mode)
    with pytest.raises(ScopeError) as exc:
        stream_plan(program, mode)
    assert exc.value.op == message


def test_event_api_errors():
    tng.ops.npu_create_tagged_event("66")
    with pytest.raises(ScopeError) as exc:
        tng.ops.npu_create_tagged_event("66")
    assert (exc.value.op, exc.value.argument) == ("npu_create_tagged_event", "tag")
    with pytest.raises(ScopeError) as exc:
        tng.ops.npu_tagged_event_record(object())
    assert (exc.value.op, exc.value.argument) == ("npu_tagged_event_record", "event")
    with pytest.raises(ScopeError) as exc:
        tng.ops.wait([])
    assert (exc.value.op, exc.value.argument) == ("torchair.ops.wait", "tensors")
    with pytest.raises(ScopeError) as exc:
        tng.ops.wait([1])
    assert (exc.value.op, exc.value.argument) == ("torchair.ops.wait", "tensors")


def test_poison_values():
    assert poison(torch.ones(2)).isnan().all()
    assert poison(torch.ones(2, dtype=torch.int16)).tolist() == [0x5A5A, 0x5A5A]
    assert poison(torch.ones(3, dtype=torch.bool)).all()


class NativeRace(torch.nn.Module):
    """npugraph_ex's own API (torch.npu.Stream / Event), with the wait before the side stream's read left out."""

    def __init__(self, wait: bool) -> None:
        super().__init__()
        self.wait = wait

    def forward(self, a, b):
        hidden = a * 2
        ready = torch.npu.Event()
        ready.record()
        side = torch.npu.Stream()
        with torch.npu.stream(side):
            if self.wait:
                ready.wait(side)
            out = hidden @ b
        done = torch.npu.Event()
        done.record(side)
        done.wait(torch.npu.current_stream())
        return out


def test_a_race_in_npugraph_ex_is_fixed_with_torch_npu_events_and_names_the_users_variable():
    mode = "npugraph_ex"
    _, report = analyse(NativeRace(wait=False), *data(count=2), mode=mode)
    (race,) = report.races
    assert race.kind == "read-after-write race" and race.name == "hidden" and race.tensor == "mul"
    assert race.fix.startswith("`event = torch.npu.Event()`, `event.record()` on stream 'default' after ")
    assert "`event.wait()`" in race.fix and "tagged" not in race.fix and "npu_wait_tensor" not in race.fix
    assert race.second.code == "out = hidden @ b"
    _, safe = analyse(NativeRace(wait=True), *data(count=2), mode=mode)
    assert safe.races == ()


def test_in_ge_mode_the_fix_is_npu_wait_tensor_on_the_users_tensors():
    first = Access("Mul", "aten::mul", "default", "writes it", "m.py:3", "hidden = x * 2")
    second = Access("MatMulV3", "aten::mm", "1", "reads it", "m.py:5", "out = hidden @ w")
    fix = _order_fix("max-autotune", first, second, "hidden", "hidden")
    assert fix == "call `torchair.scope.npu_wait_tensor(hidden, hidden)` on stream '1' before m.py:5."
