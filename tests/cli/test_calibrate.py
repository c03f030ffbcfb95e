"""``python -m pytest_npufuse calibrate`` end to end: an msprof profile built from a published table
(tests/calibrate/data: the CATLASS 910B3 quant-matmul kernel times), the model it is of, the target
written into a user's pyproject.toml, and that target used afterwards; hostile profiles give one clear
message and exit 2, never a traceback, and never touch the user's file."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from pytest_npufuse.cli.main import main
from pytest_npufuse.target.userconfig import load_user_config

DATA = Path(__file__).parents[1] / "calibrate" / "data"
MODEL = f"{DATA / 'quant_model.py'}:factory"
USER = '# my project\n[project]\nname = "demo"   # keep this comment\n\n[tool.npufuse.targets.old]\nbase = "a3"\n'


def calibrate(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["calibrate", *args], out), out.getvalue()


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """One calibration of the quant model from the published profile into a user's pyproject.toml."""
    pyproject = tmp_path_factory.mktemp("project") / "pyproject.toml"
    pyproject.write_text(USER)
    status, out = calibrate(str(DATA), MODEL, "--name", "qmm-910b3", "--npu-target", "910b3", "--pyproject", str(pyproject))
    return status, out, pyproject


def test_the_target_is_written_after_the_users_file_kept_byte_for_byte(calibrated):
    status, out, pyproject = calibrated
    assert status == 0, out
    text = pyproject.read_text()
    assert text.startswith(USER + "\n[tool.npufuse.targets.qmm-910b3]\n# Calibrated by")
    assert 'base = "910b3"' in text and "[tool.npufuse.targets.qmm-910b3.corrections]" in text
    assert f"wrote [tool.npufuse.targets.qmm-910b3] in {pyproject}; use it with --npu-target=qmm-910b3" in out


def test_the_per_op_type_error_is_printed_before_and_after(calibrated):
    status, out, _ = calibrated
    assert "npufuse calibrate (910b3 -> qmm-910b3): 7 of 7 profiled kernels matched" in out
    header, row = next((line, out.splitlines()[i + 1]) for i, line in enumerate(out.splitlines()) if line.startswith("op type"))
    assert header.split() == ["op", "type", "kernels", "measured", "us", "before", "us", "after", "us", "median",
                              "|err|", "before", "after"]
    cells = row.split()
    assert cells[:3] == ["QuantBatchMatmulV3", "7", "353.8"]
    before, after = (float(cell.rstrip("%")) for cell in cells[-2:])
    assert after < 15 < before


def test_the_target_is_used_by_the_library_and_by_npu_target(calibrated, pytester):
    _, _, pyproject = calibrated
    profile = load_user_config(pyproject).profile("qmm-910b3")
    base = load_user_config(pyproject).profile("910b3")
    assert profile.name == "qmm-910b3" and "QuantBatchMatmulV3" in profile.corrections
    assert profile.digest != base.digest
    shutil.copy(pyproject, pytester.path / "pyproject.toml")
    pytester.makepyfile(
        f'''
def test_target(npufuse):
    assert npufuse.target.name == "qmm-910b3"
    assert npufuse.target.corrections == {dict(profile.corrections)!r}
'''
    )
    pytester.runpytest("--npu-target=qmm-910b3", "-p", "no:randomly").assert_outcomes(passed=1)


def test_an_existing_table_is_replaced_only_with_force(calibrated, tmp_path, capsys):
    _, _, written = calibrated
    pyproject = tmp_path / "pyproject.toml"
    shutil.copy(written, pyproject)
    before = pyproject.read_bytes()
    status, _ = calibrate(str(DATA), MODEL, "--name", "old", "--npu-target", "910b3", "--pyproject", str(pyproject))
    assert status == 2
    assert "already has [tool.npufuse.targets.old]; choose another name, or pass --force" in capsys.readouterr().err
    assert pyproject.read_bytes() == before
    status, _ = calibrate(str(DATA), MODEL, "--name", "old", "--npu-target", "910b3", "--pyproject", str(pyproject),
                          "--force")
    assert status == 0
    text = pyproject.read_text()
    assert text.startswith('# my project\n[project]\nname = "demo"   # keep this comment\n\n'
                           '[tool.npufuse.targets.old]\n# Calibrated by')
    assert text.count("[tool.npufuse.targets.old]") == 1 and 'base = "a3"' not in text
    assert "\n[tool.npufuse.targets.qmm-910b3]\n" in text


def test_a_profile_of_another_model_is_refused_and_nothing_is_written(tmp_path, capsys):
    pyproject = tmp_path / "pyproject.toml"
    status, _ = calibrate(str(DATA), f"{DATA / 'quant_model.py'}:other_factory", "--name", "x", "--npu-target", "910b3",
                          "--pyproject", str(pyproject))
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    assert "only 0 of 7 profiled kernels match the kernels of" in err and "line 2: QuantBatchMatmulV3 [128,1024;" in err
    assert not pyproject.exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda text: text.replace("Duration(us)", "Time"), "kernel_details.csv line 1: no column 'Duration(us)'"),
        (lambda text: text.replace(",47.73,", ',"47,73",'), "kernel_details.csv line 5: column 'Duration(us)' is '47,73', "
                                                              "a number in another locale's format"),
        (lambda text: text.replace("QuantBatchMatmulV3,dynamic", ",dynamic", 1), "line 2: column 'Type' is empty"),
    ],
    ids=["missing-column", "locale-number", "no-op-type"],
)
def test_hostile_profiles_exit_2_with_the_line_and_the_fix(tmp_path, capsys, edit, message):
    (tmp_path / "kernel_details.csv").write_text(edit((DATA / "kernel_details.csv").read_text()))
    status, out = calibrate(str(tmp_path), MODEL, "--name", "x", "--pyproject", str(tmp_path / "pyproject.toml"))
    err = capsys.readouterr().err
    assert status == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "pyproject.toml").exists()


@pytest.mark.parametrize(
    ("name", "pyproject", "message"),
    [
        ("a3", "", "--name a3: is a built-in target"),
        ("my target", "", "--name 'my target': use letters, digits"),
        ("old", USER, "already has [tool.npufuse.targets.old]; choose another name, or pass --force"),
        ("new", "[tool.npufuse\n", "not valid TOML"),
    ],
    ids=["built-in", "not-a-key", "exists", "broken-pyproject"],
)
def test_a_destination_that_would_be_refused_is_refused_before_the_capture(tmp_path, capsys, monkeypatch, name,
                                                                          pyproject, message):
    monkeypatch.setattr("pytest_npufuse.pipeline.chain.capture", lambda *a, **k: pytest.fail("captured"))
    path = tmp_path / "pyproject.toml"
    if pyproject:
        path.write_text(pyproject)
    status, _ = calibrate(str(DATA), MODEL, "--name", name, "--npu-target", "910b3", "--pyproject", str(path))
    assert status == 2 and message in capsys.readouterr().err
    assert path.read_text() == pyproject if pyproject else not path.exists()
