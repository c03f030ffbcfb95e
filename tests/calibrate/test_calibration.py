"""Matching profiled kernels to a program, the fitter, and a calibration's constants and corrections.

Programs are hand-built (no capture), so these tests run in a fraction of a second; the end-to-end path
through the CLI is tests/cli/test_calibrate.py.
"""

from __future__ import annotations

import math

import pytest

from pytest_npufuse.calibrate import calibrate, match
from pytest_npufuse.calibrate.calibration import kernel_times
from pytest_npufuse.calibrate.fit import ESTIMATES, Estimate, descend, log_error, prior
from pytest_npufuse.calibrate.msprof import MeasuredProfile, ProfiledKernel
from pytest_npufuse.calibrate.table import error_rows, median_error
from pytest_npufuse.errors import CalibrationError
from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.target.profile import TargetTable, load_profile

SHAPES = ((64, 1024, 1024), (128, 2048, 1024), (256, 4096, 2048), (512, 4096, 4096), (1024, 8192, 4096))


def program(shapes=SHAPES):
    """A matmul then an RMSNorm per shape: two op types, shapes that differ kernel by kernel."""
    builder = ProgramBuilder()
    for m, n, k in shapes:
        x = builder.input(f"x{m}", (m, k))
        w = builder.input(f"w{m}", (k, n))
        y = builder.op("aten::mm", [x, w], (m, n))
        gamma = builder.input(f"g{m}", (n,))
        builder.op("npu::npu_rms_norm", [y, gamma], (m, n))
    return builder.build()


def profiled(prog, times, *, step="1", shapes=True, skip=()):
    """A profile of ``prog`` whose kernel ``name`` took ``times[name]`` us."""
    kernels = tuple(
        ProfiledKernel(line, step, k.name, k.info.kernel_type, "AI_CORE", times[k.name],
                       tuple(tuple(s.shape) for s in k.input_specs) if shapes else None)
        for line, k in enumerate((k for k in prog.kernels if k.name not in skip), start=2)
    )
    return MeasuredProfile("profile", kernels)


def on(target, **tables):
    return load_profile("hw", {"hw": TargetTable(tables, "test hardware", target)})


def test_every_kernel_of_the_same_model_matches_by_type_order_and_shapes():
    prog = program()
    times = kernel_times(prog, on("910b3"))
    found = match(profiled(prog, times), prog, "model.py:factory")
    assert [(m.profiled.name, m.kernel.name) for m in found.matched] == [(k.name, k.name) for k in prog.kernels]
    assert found.unmatched == () and found.unmeasured == ()


def test_each_step_matches_and_a_kernel_of_other_shapes_is_listed_not_guessed():
    prog = program()
    times = kernel_times(prog, on("910b3"))
    steps = profiled(prog, times).kernels + profiled(prog, times, step="2").kernels
    changed = list(steps)
    changed[2] = ProfiledKernel(40, "1", "MatMul", changed[2].op_type, "AI_CORE", 9.0, ((128, 1000), (1000, 2048)))
    found = match(MeasuredProfile("profile", tuple(changed)), prog, "model.py:factory")
    assert len(found.matched) == 2 * len(prog.kernels) - 1
    (miss,) = found.unmatched
    assert miss.profiled.line == 40
    assert "other input shapes" in miss.reason and "128,2048; 2048,1024" not in miss.reason
    assert [k.name for k in found.unmeasured] == []  # step 2 measured it


def test_without_an_input_shapes_column_type_and_order_decide():
    prog = program()
    times = kernel_times(prog, on("910b3"))
    found = match(profiled(prog, times, shapes=False), prog, "model.py:factory")
    assert len(found.matched) == len(prog.kernels)


def test_iterations_profiled_back_to_back_without_a_step_id_each_match():
    prog = program()
    times = kernel_times(prog, on("910b3"))
    once = profiled(prog, times, step="").kernels
    found = match(MeasuredProfile("profile", once * 3), prog, "model.py:factory")
    assert len(found.matched) == 3 * len(prog.kernels) and found.unmatched == ()


def test_another_name_for_a_kernel_of_the_same_shapes_says_how_to_name_it():
    prog = program()
    times = kernel_times(prog, on("910b3"))
    kernels = [k if k.op_type != "MatMulV3" else ProfiledKernel(k.line, k.step, k.name, "MatMulV2", k.core,
                                                                  k.duration_us, k.shapes)
               for k in profiled(prog, times).kernels]
    found = match(MeasuredProfile("profile", tuple(kernels)), prog, "model.py:factory")  # the RmsNorms match
    assert len(found.unmatched) == len(SHAPES)
    assert all('give its catalog entry kernel_type = "MatMulV2" in [tool.npufuse.ops]' in u.reason
               for u in found.unmatched)


def test_a_kernel_the_model_lacks_is_listed_with_what_the_model_has_there():
    prog = program()
    times = kernel_times(prog, on("910b3"))
    kernels = list(profiled(prog, times).kernels)
    kernels.insert(3, ProfiledKernel(99, "1", "Cast", "Cast", "AI_VECTOR_CORE", 3.0, ((4,),)))
    found = match(MeasuredProfile("profile", tuple(kernels)), prog, "model.py:factory")
    (miss,) = found.unmatched
    assert miss.describe().startswith("line 99: Cast [4] 3 us: the model")
    assert len(found.matched) == len(prog.kernels)


def test_a_profile_of_another_model_is_an_error_naming_both():
    prog = program()
    other = program(tuple((m * 3, n, k) for m, n, k in SHAPES))
    times = kernel_times(other, on("910b3"))
    with pytest.raises(CalibrationError) as caught:
        match(profiled(other, times), prog, "model.py:factory")
    assert caught.value.file == "profile"
    message = str(caught.value)
    assert "only 0 of 10 profiled kernels match the kernels of model.py:factory" in message
    assert "first unmatched, line 2: MatMulV3 [192,1024; 1024,1024]" in message
    assert "give the FACTORY of the model that was profiled" in message


def test_descend_finds_the_grid_minimum_within_bounds_and_is_deterministic():
    estimates = (Estimate("a", "x", 1.0, 0.1, 10.0), Estimate("a", "y", 0.0, 0.0, 5.0))
    target = {("a", "x"): 3.0, ("a", "y"): 1.0}

    def objective(values):
        return sum(abs(math.log(values[k] + 1) - math.log(v + 1)) for k, v in target.items())

    found = descend(prior(estimates), objective, estimates, passes=6)
    assert found == descend(prior(estimates), objective, estimates, passes=6)
    assert objective(found) < 0.25 * objective(prior(estimates))
    assert all(e.low <= found[e.name] <= e.high for e in estimates)
    assert log_error(0.0, 1.0) == log_error(100.0, 1.0) == math.log(4.0)
    assert {e.section for e in ESTIMATES} >= {"efficiency", "overhead_us", "host_us"}


def test_calibration_recovers_hardware_whose_constants_and_op_types_differ():
    """Measurements from a 'chip' with other estimates and a slower RMSNorm are reproduced, and a held-back
    half of the kernels (never fitted) comes out closer than the base target had it."""
    prog = program()
    hardware = on("910b3", efficiency={"cube_tile": 0.85}, overhead_us={"kernel_head": 5.0},
                  corrections={"RmsNorm": 1.6})
    found = match(profiled(prog, kernel_times(prog, hardware)), prog, "model.py:factory")
    held = {k.name for k in prog.kernels[2::4]} | {k.name for k in prog.kernels[3::4]}
    result = calibrate(prog, found, "910b3", "mine", fit_on=lambda m: m.kernel.name not in held)
    fitted = [k for k in result.kernels if k.fitted]
    back = [k for k in result.kernels if not k.fitted]
    assert back and fitted
    assert median_error(fitted, lambda k: k.after_us) < 0.05
    assert median_error(back, lambda k: k.after_us) < 0.5 * median_error(back, lambda k: k.before_us)
    assert "RmsNorm" in result.corrections
    assert result.profile().corrections == {op: f for op, (f, _) in result.corrections.items()}
    rows = error_rows(result.kernels)
    assert rows[0][0] == "op type" and rows[-1][0] == "all" and {r[0] for r in rows[1:-1]} == {"MatMulV3", "RmsNorm"}


def test_calibrate_refuses_a_base_that_is_not_built_in():
    prog = program()
    found = match(profiled(prog, kernel_times(prog, on("910b3"))), prog, "m")
    with pytest.raises(CalibrationError) as exc:
        calibrate(prog, found, "mine.toml", "mine")
    assert exc.value.argument == "base"
