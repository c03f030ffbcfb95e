"""The two values a check takes: a CaseSpec, checked once when built, and a Target, resolved in one place."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pytest_npufuse import CaseSpec, Target, compare
from pytest_npufuse.errors import ArgumentError, ProfileError
from pytest_npufuse.simulate.routing import Routing
from pytest_npufuse.target.profile import load_profile
from pytest_npufuse.vocabulary import MissingOps

CALIBRATED = (
    "[tool.npufuse.targets.mine]\n"
    'base = "a3"\n'
    "[tool.npufuse.targets.mine.overhead_us]\n"
    "kernel_head = 9.0\n"
)


def _model_and_inputs() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)), (torch.randn(4, 16),)


def _numbers(report) -> tuple:
    """What a report models, to compare two checks of the same case."""
    return (report.target, report.mode, report.baseline.time_us, report.variant.time_us, report.baseline.kernels,
            report.variant.kernels, report.outputs, report.mismatches, report.captures, report.kernels_executed,
            report.numerics, report.summary())


def test_compare_sees_a_calibrated_target_of_the_projects_pyproject(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(CALIBRATED)
    monkeypatch.chdir(tmp_path)
    model, inputs = _model_and_inputs()
    mine = compare(model, *inputs, target="mine")
    a3 = compare(model, *inputs, target="a3")
    assert mine.target == "mine" and a3.target == "a3"
    assert mine.baseline.time_us > a3.baseline.time_us  # every kernel pays the calibrated 9 us head
    resolved = Target.resolve("mine", tmp_path / "pyproject.toml")
    assert resolved.profile.overhead_us["kernel_head"] == 9.0
    assert resolved.profile.digest != load_profile("a3").digest
    assert _numbers(compare(model, *inputs, target=resolved)) == _numbers(mine)


def test_a_target_the_project_does_not_declare_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no pyproject.toml here: only the built-in targets
    model, inputs = _model_and_inputs()
    with pytest.raises(ProfileError) as exc:
        compare(model, *inputs, target="mine")
    assert exc.value.argument == "target"


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_an_empty_target_name_is_refused_listing_the_targets_not_taken_for_the_default(blank, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(CALIBRATED)
    monkeypatch.chdir(tmp_path)
    model, inputs = _model_and_inputs()
    with pytest.raises(ProfileError, match=r"target name '[^']*' is empty; name a target: built-in targets are .*a3.*; user targets are mine") as named:
        compare(model, *inputs, target=blank)
    assert named.value.argument == "target"
    with pytest.raises(ProfileError, match="is empty") as refused:
        Target.resolve(blank)
    assert refused.value.argument == "target"


def test_a_target_carries_its_profile_and_the_projects_op_catalog(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    op = '[tool.npufuse.ops."acc::my_op"]\nengine = "vector"\nfusable = true\nsync_all = false\nblock_dim = 8\n'
    pyproject.write_text(CALIBRATED + op)
    target = Target.resolve("mine", pyproject)
    assert target.name == "mine" and "acc::my_op" in target.catalog.entries
    assert Target.resolve(target) is target
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.profile = load_profile("a2")  # type: ignore[misc]


def test_compare_of_a_spec_equals_compare_of_the_keywords():
    model, inputs = _model_and_inputs()
    keywords = {"mode": "reduce-overhead", "numerics": "all", "case": "same", "missing_ops": "error"}
    by_keywords = compare(model, *inputs, target="a2", **keywords)
    by_spec = compare(CaseSpec(model, inputs, **keywords), target="a2")
    assert _numbers(by_spec) == _numbers(by_keywords)


def test_a_spec_is_frozen_settled_and_hashed_by_identity():
    model, inputs = _model_and_inputs()
    options = {"sp1": "stream-fusion=1"}
    spec = CaseSpec(model, list(inputs), options=options, routing="zipf:1.2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.ranks = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.options["sp1"] = ""  # type: ignore[index]
    options["sp1"] = "changed"
    assert spec.options["sp1"] == "stream-fusion=1" and isinstance(spec.inputs, tuple)
    assert spec.numerics == "all" and spec.missing_ops is None and spec.missing_policy is MissingOps.ERROR
    assert isinstance(spec.routing, Routing)
    again = dataclasses.replace(spec)
    assert spec == spec and spec != again and len({spec, again}) == 2  # no tensor comparison, no TypeError
    assert again.routing == spec.routing and again.numerics == "all"


@pytest.mark.parametrize(
    ("keywords", "argument"),
    [
        ({"numerics": "some"}, "numerics"),
        ({"missing_ops": "skip"}, "missing_ops"),
        ({"mode": "fast"}, "mode"),
        ({"ranks": 0}, "ranks"),
        ({"routing": "zipf:-1"}, "routing"),
        ({"optimizer": object()}, "optimizer"),
        ({"loss": sum, "ranks": 4}, "ranks"),
        ({"loss": sum, "routing": "uniform"}, "routing"),
        ({"loss": sum, "missing_ops": "timing-only"}, "missing_ops"),
        ({"loss": sum, "numerics": "none"}, "numerics"),
        ({"numerics": "sample", "reference": torch.nn.Identity()}, "reference"),
    ],
)
def test_a_spec_refuses_a_bad_choice_when_built_naming_the_argument(keywords, argument):
    model, inputs = _model_and_inputs()
    with pytest.raises(ArgumentError) as info:
        CaseSpec(model, inputs, **keywords)
    assert info.value.argument == argument


def test_numerics_all_of_a_model_without_weights_is_refused():
    with torch.device("meta"):
        model = torch.nn.Linear(8, 8)
    with pytest.raises(ArgumentError) as info:
        CaseSpec(model, (torch.ones(2, 8, device="meta"),), numerics="all")
    assert info.value.argument == "numerics"
    assert CaseSpec(model, (torch.ones(2, 8, device="meta"),)).numerics == "none"


def test_compare_of_a_spec_takes_no_second_set_of_choices():
    model, inputs = _model_and_inputs()
    with pytest.raises(ArgumentError) as info:
        compare(CaseSpec(model, inputs), mode="eager")
    assert info.value.argument == "spec"
