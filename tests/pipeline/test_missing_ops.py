"""Every gap of a check at once: missing torch_npu ops and modules, names the shim lacks, arguments the CPU
model does not implement and ops with a fake kernel but no CPU kernel, each listed with its user line."""

from __future__ import annotations

import inspect

import pytest
import torch

from pytest_npufuse import compare, torch_npu
from pytest_npufuse.errors import ArgumentError, GapsError, NotModeledAttributeError, NpufuseError
from pytest_npufuse.vocabulary import NumericsStatus

# An op with a schema and a fake kernel but no CPU kernel, as a user declares one torch_npu has and the
# shim lacks; torch_npu exposes torch.ops.npu.<op> as torch_npu.<op>.
torch.library.define("npu::npufuse_test_fake_only", "(Tensor x) -> Tensor")
torch.library.register_fake("npu::npufuse_test_fake_only", lambda x: torch.empty_like(x))


def _line(function: object, text: str) -> str:
    """``path:line`` of the line of ``function`` holding ``text``."""
    lines, first = inspect.getsourcelines(function)
    index = next(i for i, line in enumerate(lines) if text in line)
    return f"{inspect.getsourcefile(function)}:{first + index}"


class _Gappy(torch.nn.Module):
    def forward(self, q: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        y = torch_npu.npu_not_an_op(q)
        o = torch_npu.npu_prompt_flash_attention(y, q, q, pse_shift=shift, num_heads=2, input_layout="BSH")
        z = torch_npu.npufuse_test_fake_only(o)
        torch.npu.not_a_name(z)
        torch_npu.asd.anything(z)
        return z + 1


def test_every_gap_is_listed_at_once_with_its_line_and_what_to_do() -> None:
    q = torch.randn(1, 4, 16, dtype=torch.float16)
    with pytest.raises(GapsError) as info:
        compare(_Gappy(), q, torch.zeros(1, 2, 4, 4, dtype=torch.float16))
    gaps = info.value.gaps
    forward = _Gappy.forward
    assert [(gap.kind, gap.name, gap.argument, gap.where) for gap in gaps] == [
        ("op", "torch_npu.npu_not_an_op", None, _line(forward, "npu_not_an_op")),
        ("argument", "torch_npu.npu_prompt_flash_attention", "pse_shift", _line(forward, "pse_shift")),
        ("cpu kernel", "npu::npufuse_test_fake_only", None, _line(forward, "npufuse_test_fake_only")),
        ("name", "torch.npu.not_a_name", None, _line(forward, "not_a_name")),
        ("module", "torch_npu.asd", None, _line(forward, "torch_npu.asd")),
    ]
    assert [gap.op for gap in gaps[:3]] == ["torch_npu.npu_not_an_op", "torch_npu.npu_prompt_flash_attention",
                                            "npu::npufuse_test_fake_only"]
    assert 'torch.library.impl("npu::npufuse_test_fake_only", "cpu")' in gaps[2].fix
    assert not info.value.stopped
    message = str(info.value)
    assert all(gap.describe() in message for gap in gaps)


def test_a_failure_after_a_gap_ends_the_survey_and_says_where() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = torch_npu.npu_two_outputs(x)  # the stand-in returns one tensor: unpacking it fails
            return a + b

    with pytest.raises(GapsError) as info:
        compare(Model(), torch.randn(3, 4))
    assert [gap.name for gap in info.value.gaps] == ["torch_npu.npu_two_outputs"]
    assert info.value.stopped.startswith(_line(Model.forward, "npu_two_outputs"))


def test_a_missing_module_is_a_missing_module_not_a_missing_op() -> None:
    with pytest.raises(NotModeledAttributeError) as info:
        torch_npu.asd  # noqa: B018 - the attribute access is the test
    assert "module of torch_npu" in str(info.value) and "custom_op" not in str(info.value)
    assert info.value.gap.kind == "module" and info.value.gap.name == "torch_npu.asd"
    assert not hasattr(torch_npu, "jit")


def test_a_name_the_model_uses_as_a_module_is_listed_as_a_missing_module() -> None:
    """``torch_npu.op_plugin.atb.run(x)``: an unknown name of torch_npu read as a namespace, never as an op
    the user should register with torch.library."""

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch_npu.op_plugin.atb.run(x) + 1

    with pytest.raises(GapsError) as info:
        compare(Model(), torch.randn(3, 4))
    (gap,) = info.value.gaps
    assert (gap.kind, gap.name, gap.where) == ("module", "torch_npu.op_plugin", _line(Model.forward, "op_plugin"))
    assert "custom_op" not in str(info.value) and "keep its use out of the checked model" in gap.fix


def test_an_op_the_user_defines_in_the_npu_namespace_is_torch_npus_attribute() -> None:
    assert torch_npu.npufuse_test_fake_only is torch.ops.npu.npufuse_test_fake_only


class _FakeOnly(torch.nn.Module):
    """One output computed without the fake-only op, two from it."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = torch.relu(x)
        z = torch_npu.npufuse_test_fake_only(a)
        return a * 2, z + 1, (z * a).sum()


def test_an_op_without_a_cpu_kernel_stops_the_check_by_default() -> None:
    with pytest.raises(GapsError) as info:
        compare(_FakeOnly(), torch.randn(4, 8))
    (gap,) = info.value.gaps
    assert (gap.kind, gap.op, gap.where) == ("cpu kernel", "npu::npufuse_test_fake_only",
                                            _line(_FakeOnly.forward, "npufuse_test_fake_only"))


def test_timing_only_times_the_op_and_leaves_what_it_computes_uncompared() -> None:
    x = torch.randn(4, 8)
    computed = compare(torch.nn.ReLU(), x)
    report = compare(_FakeOnly(), x, missing_ops="timing-only")
    assert report.numerics.status == NumericsStatus.PARTIAL
    assert [(each.output, each.ops) for each in report.numerics.not_compared] == [
        ("output[1]", ("npu::npufuse_test_fake_only",)), ("output[2]", ("npu::npufuse_test_fake_only",)),
    ]
    assert "no CPU kernel" in report.numerics.not_compared[0].reason
    assert "npu::npufuse_test_fake_only" in {kernel.op_type for kernel in report.variant.kernels}
    assert report.variant.time_us > computed.variant.time_us
    assert "numerics partial" in report.summary()
    assert report.numerics.to_json()["not_compared"][0] == {
        "output": "output[1]", "ops": ["npu::npufuse_test_fake_only"], "reason": report.numerics.not_compared[0].reason,
    }


def test_outputs_not_computed_from_a_timed_only_op_are_still_compared() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch_npu.npufuse_test_fake_only(x) * 3, x * 2

    report = compare(Model(), torch.randn(4, 8), missing_ops="timing-only")
    assert [each.output for each in report.numerics.not_compared] == ["output[0]"]
    assert report.bit_exact


def test_a_cpu_reference_the_user_registers_makes_the_op_compared() -> None:
    torch.library.define("npu::npufuse_test_with_reference", "(Tensor x) -> Tensor")
    torch.library.register_fake("npu::npufuse_test_with_reference", lambda x: torch.empty_like(x))
    torch.library.impl("npu::npufuse_test_with_reference", "cpu")(lambda x: x * 2 + 1)

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch_npu.npufuse_test_with_reference(x) - 1

    x = torch.randn(4, 8)
    report = compare(Model(), x, missing_ops="timing-only")
    assert report.numerics.status == NumericsStatus.COMPUTED and report.bit_exact


def test_missing_ops_is_checked() -> None:
    with pytest.raises(ArgumentError) as exc:
        compare(torch.nn.ReLU(), torch.randn(2), missing_ops="timing_only")
    assert exc.value.argument == "missing_ops"


def test_under_timing_only_the_other_gaps_still_stop_the_check_without_the_timed_ops() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch_npu.npu_not_an_op(torch_npu.npufuse_test_fake_only(x))

    with pytest.raises(GapsError) as info:
        compare(Model(), torch.randn(4, 8), missing_ops="timing-only")
    assert [(gap.kind, gap.name) for gap in info.value.gaps] == [("op", "torch_npu.npu_not_an_op")]


def test_a_subpackage_loaded_by_its_own_import_says_so_and_one_the_shim_lacks_is_a_module_gap(shim) -> None:
    import torch_npu as shimmed

    assert shimmed.npu.Stream is torch.npu.Stream  # loaded with torch_npu, as torch_npu loads it
    with pytest.raises(NotModeledAttributeError) as info:
        shimmed.asd  # noqa: B018 - the attribute access is the test
    assert info.value.gap.kind == "module" and info.value.gap.name == "torch_npu.asd"
    if "contrib" not in vars(shimmed):  # not imported yet by another test
        with pytest.raises(AttributeError, match="import torch_npu.contrib first") as refused:
            shimmed.contrib  # noqa: B018 - the attribute access is the test
        assert not isinstance(refused.value, NpufuseError)  # not a gap: the shim has it


def test_under_timing_only_a_race_is_still_found_and_its_output_still_compared() -> None:
    from pytest_npufuse import torchair

    class Racy(torch.nn.Module):
        """A side stream reads ``add`` without waiting for its event; a fake-only op computes another output."""

        def __init__(self) -> None:
            super().__init__()
            self.event = torchair.ops.npu_create_tagged_event(tag="gaps")

        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            first = a + b
            torchair.ops.npu_tagged_event_record(self.event)
            with torchair.scope.npu_stream_switch("1"):
                product = (first @ b) * 2
            return torch_npu.npufuse_test_fake_only(a - b), product

    report = compare(Racy(), torch.randn(4, 4), torch.randn(4, 4), mode="reduce-overhead", missing_ops="timing-only")
    race = report.races[0]  # then the lifetime hazard of the same tensor
    assert race.tensor == "add" and race.second.stream == "1" and {each.tensor for each in report.races} == {"add"}
    assert [m.output for m in report.mismatches] == ["output[1]"]
    assert [each.output for each in report.numerics.not_compared] == ["output[0]"]


def test_a_training_step_with_an_op_without_a_cpu_kernel_stops_listing_it() -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x) + torch_npu.npufuse_test_fake_only(x)

    with pytest.raises(GapsError) as info:
        compare(Model(), torch.randn(2, 8), loss=lambda out: out.sum())
    assert [(gap.kind, gap.op) for gap in info.value.gaps] == [("cpu kernel", "npu::npufuse_test_fake_only")]
    with pytest.raises(ArgumentError) as exc:
        compare(Model(), torch.randn(2, 8), loss=lambda out: out.sum(), missing_ops="timing-only")
    assert exc.value.argument == "missing_ops"


def test_under_the_shim_a_missing_op_called_through_torch_ops_npu_is_a_gap_too(shim) -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y, _ = torch.ops.npu.npu_rms_norm(x, torch.ones(8))
            return torch.ops.npu.npu_not_an_op(y) + torch_npu.npu_not_an_op(x)

    with pytest.raises(GapsError) as info:
        compare(Model(), torch.randn(2, 8))
    assert [(gap.kind, gap.name) for gap in info.value.gaps] == [
        ("op", "torch.ops.npu.npu_not_an_op"), ("op", "torch_npu.npu_not_an_op"),
    ]
    assert not hasattr(torch.ops.npu, "npu_not_an_op") and hasattr(torch.ops.npu, "npu_rms_norm")
