"""A target's per-op-type corrections ([corrections]): validated like every profile key, applied by the
cost registry to the op type's kernel bodies and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_npufuse import cost
from pytest_npufuse.errors import ProfileError
from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.target.profile import TargetTable, load_profile
from pytest_npufuse.target.userconfig import load_user_config, user_config_from_table


def target(corrections):
    return load_profile("t", {"t": TargetTable({"corrections": corrections}, "pyproject.toml [targets.t]", "910b3")})


def test_a_correction_multiplies_only_its_op_types_body():
    builder = ProgramBuilder()
    x, w = builder.input("x", (128, 1024)), builder.input("w", (1024, 1024))
    builder.op("aten::mm", [x, w], (128, 1024))
    builder.op("npu::npu_rms_norm", [builder.input("y", (128, 1024)), builder.input("g", (1024,))], (128, 1024))
    matmul, norm = builder.build().kernels
    plain, corrected = target({}), target({"MatMulV3": 1.5})
    assert cost.body_us(matmul, 8, corrected) == pytest.approx(1.5 * cost.body_us(matmul, 8, plain))
    assert cost.body_us(norm, 8, corrected) == cost.body_us(norm, 8, plain)
    assert corrected.digest != plain.digest  # a baseline measured without it is another model


@pytest.mark.parametrize(
    ("corrections", "message"),
    [
        ({"MatMulV3": 0.0}, "pyproject.toml [targets.t] [corrections] MatMulV3"),
        ({"MatMulV3": 1e9}, "pyproject.toml [targets.t] [corrections] MatMulV3"),
        ({"MatMulV3": "fast"}, "pyproject.toml [targets.t] [corrections] MatMulV3"),
        ({"MatMulV3": float("nan")}, "pyproject.toml [targets.t] [corrections] MatMulV3"),
    ],
)
def test_a_correction_out_of_range_or_of_the_wrong_type_is_an_error_naming_the_table(corrections, message):
    with pytest.raises(ProfileError) as exc:
        target(corrections)
    assert exc.value.entry == message


def test_corrections_must_be_a_table():
    with pytest.raises(ProfileError) as exc:
        target(1.2)
    assert exc.value.entry == "pyproject.toml [targets.t] [corrections]"


def test_a_misspelt_op_type_is_an_error_with_the_closest_one(tmp_path):
    config = user_config_from_table({"targets": {"t": {"base": "910b3", "corrections": {"MatMulv3": 1.2}}}}, "pyproject.toml")
    with pytest.raises(ProfileError) as exc:
        config.profile("t")
    assert exc.value.entry == "[corrections] MatMulv3"
    config = user_config_from_table({"targets": {"t": {"base": "910b3", "corrections": {"Zzz": 1.2}}}}, "pyproject.toml")
    with pytest.raises(ProfileError) as exc:
        config.profile("t")
    assert exc.value.entry == "[corrections] Zzz"


def test_a_project_op_type_may_be_corrected(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.npufuse.ops."acc::my_op"]\nengine = "vector"\nfusable = true\nsync_all = false\n'
        'block_dim = "vector_bytes"\nkernel_type = "MyOp"\n\n'
        '[tool.npufuse.targets.t]\nbase = "910b3"\ncorrections = { MyOp = 0.5 }\n'
    )
    assert load_user_config(tmp_path / "pyproject.toml").profile("t").corrections == {"MyOp": 0.5}
