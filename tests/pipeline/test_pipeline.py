"""The pipeline's work per check: one capture, each kernel computed once, Cube semantics for matmuls."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pytest_npufuse
from pytest_npufuse import compare
from pytest_npufuse import torchair as tng
from pytest_npufuse.errors import ArgumentError
from pytest_npufuse.frontend import backend
from pytest_npufuse.ir.program import Program
from pytest_npufuse.numerics.exact import cube_matmul, int_matmul


@pytest.fixture
def captures(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each Dynamo + AOT capture, counted where the backend builds a program from an aten graph."""
    seen: list[str] = []
    build = backend.build_program

    def counted(gm, catalog, *args, **kwargs):
        seen.append(gm.__class__.__name__)
        return build(gm, catalog, *args, **kwargs)

    monkeypatch.setattr(backend, "build_program", counted)
    return seen


class Scoped(torch.nn.Module):
    def forward(self, a, b):
        with tng.scope.super_kernel("sp1"):
            return torch.relu(a @ b) + 1


class Racy(torch.nn.Module):
    """A side stream reads ``add`` without waiting for the event that orders it."""

    def __init__(self, wait: bool) -> None:
        super().__init__()
        self.wait = wait
        self.event = tng.ops.npu_create_tagged_event(tag="7")

    def forward(self, a, b):
        first = a + b
        tng.ops.npu_tagged_event_record(self.event)
        with tng.scope.npu_stream_switch("1"):
            if self.wait:
                tng.ops.npu_tagged_event_wait(self.event)
            product = (first @ b) * 2
        return first, product, a - b


def _data(count: int = 2, n: int = 4) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return [torch.randn(n, n, generator=gen) for _ in range(count)]


def test_one_model_is_captured_once_and_each_kernel_computed_once(captures: list[str]) -> None:
    report = compare(Scoped(), *_data())
    assert len(captures) == 1 and report.captures == 1
    assert report.bit_exact and report.superkernels["sp1"].outcome == "fused"
    assert report.kernels_executed == report.baseline.tasks == 3  # mm, relu, add: the VARIANT computes none


def test_a_reference_model_keeps_its_own_capture(captures: list[str]) -> None:
    class Plain(torch.nn.Module):
        def forward(self, a, b):
            return torch.relu(a @ b) + 1

    report = compare(Scoped(), *_data(), reference=Plain())
    assert len(captures) == 2 and report.captures == 2
    assert report.bit_exact and report.kernels_executed == 6


def test_a_race_recomputes_only_its_cone_and_still_fails_precision(captures: list[str]) -> None:
    report = compare(Racy(wait=False), *_data(), mode="reduce-overhead")
    assert len(captures) == 1
    (race,) = report.races
    assert race.tensor == "add" and race.first.stream == "default" and race.second.stream == "1"
    assert [m.output for m in report.mismatches] == ["output[1]"]  # the racy product, not the others
    # BASELINE: add, mm, mul, sub; VARIANT: the racy mm and the mul downstream of it
    assert report.kernels_executed == 4 + 2


def test_a_synchronised_side_stream_costs_no_variant_numerics() -> None:
    report = compare(Racy(wait=True), *_data(), mode="reduce-overhead")
    assert report.races == () and report.bit_exact and report.kernels_executed == 4


def test_inputs_written_in_place_are_left_untouched() -> None:
    class Writes(torch.nn.Module):
        def forward(self, a, b):
            a.mul_(2)
            return a @ b

    a, b = _data()
    before = a.clone()
    report = compare(Writes(), a, b)
    assert report.bit_exact and torch.equal(a, before)


def test_public_capture_gives_the_program_without_numerics(captures: list[str]) -> None:
    program = pytest_npufuse.capture(Scoped(), *_data())
    assert isinstance(program, Program) and len(captures) == 1
    assert [k.op_type for k in program.kernels] == ["aten::mm", "aten::relu", "aten::add"]
    assert program.superkernel_scopes() == ("sp1",)


class _Linear(torch.nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight, self.bias = weight, bias

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight, self.bias)


def test_low_precision_matmuls_run_as_the_cube_computes_them() -> None:
    """1 + 2**-8 + 2**-8 in one dot product: the Cube's fp32 accumulator holds 1 + 2**-7."""
    x = torch.tensor([[1.0, 2.0**-8, 2.0**-8]], dtype=torch.bfloat16)
    weight = torch.ones(2, 3, dtype=torch.bfloat16)
    bias = torch.tensor([2.0**-8, 0.0], dtype=torch.bfloat16)
    compiled, _ = pytest_npufuse.compile_model(_Linear(weight, bias))
    torch._dynamo.reset()
    with torch.no_grad():
        out = compiled(x)
    # bias added in fp32 before the one rounding: 1 + 2**-7 + 2**-8 is a tie that rounds to 1 + 2**-6
    assert out.tolist() == [[1.0 + 2.0**-6, 1.0 + 2.0**-7]]
    assert torch.equal(compiled_without_bias(x, weight), cube_matmul(x, weight.t()))


@pytest.mark.parametrize("bias", [True, False])
def test_an_fp16_input_to_fp32_weights_is_computed_in_fp32_as_aclnn_promotes_it(bias) -> None:
    """``Linear`` left in fp32 on an fp16 input (TorchAir's smoke tests do this): the device promotes the
    pair to fp32 (aclnnMm's type promotion) where torch's CPU matmul refuses mixed dtypes; the result
    has the dtype the captured graph gave it."""
    linear = torch.nn.Linear(3, 2, bias=bias)
    x = torch.randn(4, 3, dtype=torch.float16)
    compiled, _ = pytest_npufuse.compile_model(linear)
    torch._dynamo.reset()
    with torch.no_grad():
        out = compiled(x)
        expected = torch.nn.functional.linear(x.float(), linear.weight, linear.bias)
    assert out.dtype == (torch.float32 if bias else torch.float16)
    assert torch.equal(out, expected.to(out.dtype))


def compiled_without_bias(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    compiled, _ = pytest_npufuse.compile_model(_Linear(weight, None))
    torch._dynamo.reset()
    with torch.no_grad():
        return compiled(x)


def test_int_mm_runs_exactly_through_int_matmul() -> None:
    gen = torch.Generator().manual_seed(5)
    a = torch.randint(-128, 128, (32, 2048), dtype=torch.int8, generator=gen)
    b = torch.randint(-128, 128, (2048, 16), dtype=torch.int8, generator=gen)
    compiled, _ = pytest_npufuse.compile_model(lambda x, y: torch._int_mm(x, y))
    torch._dynamo.reset()
    with torch.no_grad():
        out = compiled(a, b)
    assert torch.equal(out, int_matmul(a, b))
    assert torch.equal(out, (a.to(torch.int64) @ b.to(torch.int64)).to(torch.int32))


_BLOCK_TORCH = """
import sys

class BlockTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this process")

sys.meta_path.insert(0, BlockTorch())
import pytest_npufuse.ir.program, pytest_npufuse.plan.superkernel, pytest_npufuse.simulate.timeline, pytest_npufuse.sanitize.checker
print("imported without torch")
"""


def test_ir_planner_and_simulator_import_without_torch() -> None:
    root = Path(pytest_npufuse.__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", _BLOCK_TORCH], cwd=root, capture_output=True, text=True, env={"PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported without torch"


class WritesIntoAliases(torch.nn.Module):
    def forward(self, x, y):
        x.add_(1)
        return x * y


def test_aliased_inputs_written_in_place_stay_aliased_in_the_copies_each_run_gets():
    x = torch.ones(4, 4)
    report = compare(WritesIntoAliases(), x, x)
    assert report.bit_exact and torch.equal(x, torch.ones(4, 4))


def test_a_recapture_caused_by_aliasing_is_named_as_aliasing():
    from pytest_npufuse.errors import CaptureError
    from pytest_npufuse.execute.graph import run_graph
    from pytest_npufuse.target.catalog import load_catalog

    torch._dynamo.reset()
    captured = backend.Capture(WritesIntoAliases(), [torch.ones(4, 4), torch.ones(4, 4)], load_catalog())
    graphs = captured._backend.graphs  # the recapture lands here; the run executes the newest graph

    def execute(args):
        return run_graph(graphs[-1].gm, graphs[-1].program, args, {})

    same = torch.ones(4, 4)
    with pytest.raises(CaptureError) as exc:  # captured again, and inputs 0 and 1 share memory
        captured.run([same, same], execute)
    assert exc.value.argument == "inputs 0 and 1"


def test_options_for_a_scope_the_model_does_not_define_are_refused_naming_the_scopes_it_does() -> None:
    """As a superkernel marker on a missing scope fails the test, options= naming one stops the check:
    a misspelt scope would otherwise leave the real scope's options unchanged without a word."""
    report = compare(Scoped(), *_data(), options={"sp1": "stream-fusion=1"})
    assert report.superkernels["sp1"].options == "stream-fusion=1"
    with pytest.raises(ArgumentError, match=r"super_kernel scope 'no-such-scope' was not found in the captured graph "
                                            r"\(scopes seen: 'sp1'\)") as refused:
        compare(Scoped(), *_data(), options={"sp1": "stream-fusion=1", "no-such-scope": "stream-fusion=1"})
    assert refused.value.argument == "options" and refused.value.entry == "options['no-such-scope']"
    with pytest.raises(ArgumentError, match=r"scope 'sp1' was not found .*\(scopes seen: none\)") as none_seen:
        compare(torch.nn.ReLU(), *_data(1), options={"sp1": "stream-fusion=1"})
    assert none_seen.value.entry == "options['sp1']"
