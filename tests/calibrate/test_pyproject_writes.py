"""Writing a calibrated target into a user's pyproject.toml, whatever the file and the profile's path hold.

The calibration is of a hand-built program (no capture), so each write takes milliseconds; the CLI end to
end is tests/cli/test_calibrate.py. Every refusal leaves the file's bytes as they were.
"""

from __future__ import annotations

import codecs
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_npufuse.calibrate import calibrate, match
from pytest_npufuse.calibrate.calibration import kernel_times
from pytest_npufuse.calibrate.msprof import MeasuredProfile, ProfiledKernel
from pytest_npufuse.calibrate.table import check_destination, write_target
from pytest_npufuse.errors import CalibrationError, NpufuseError, ProfileError
from pytest_npufuse.files import read_toml
from pytest_npufuse.files.tomledit import with_table
from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.target.profile import load_profile

USER = '# my project\r\n[project]\r\nname = "demo"   # keep\r\n\r\n[tool.other]\r\nx = [1,\r\n  2] # c\r\n'


def program():
    builder = ProgramBuilder()
    for m in (64, 256):
        x = builder.input(f"x{m}", (m, 1024))
        w = builder.input(f"w{m}", (1024, 1024))
        builder.op("aten::mm", [x, w], (m, 1024))
    return builder.build()


def profiled(prog, times):
    kernels = tuple(
        ProfiledKernel(line, "1", k.name, k.info.kernel_type, "AI_CORE", times(k),
                       tuple(tuple(s.shape) for s in k.input_specs))
        for line, k in enumerate(prog.kernels, start=2)
    )
    return MeasuredProfile("profile", kernels)


@pytest.fixture(scope="module")
def calibration():
    prog = program()
    modeled = kernel_times(prog, load_profile("910b3"))
    return calibrate(prog, match(profiled(prog, lambda k: 1.3 * modeled[k.name]), prog, "m.py:f"), "910b3", "mine")


def write(calibration, path: Path, source: str = "ASCEND_PROFILER_OUTPUT", name: str = "mine") -> bool:
    check_destination(path, name)
    return write_target(replace(calibration, name=name), path, source)


def test_a_symlinked_pyproject_is_refused_and_the_file_it_names_is_untouched(calibration, tmp_path):
    """calibrate wrote through the link: into /etc/passwd as root, or another project's settings."""
    outside = tmp_path / "elsewhere" / "settings.toml"
    outside.parent.mkdir()
    outside.write_text("[project]\nname = 'other'\n")
    link = tmp_path / "pyproject.toml"
    link.symlink_to(outside)
    for call in (lambda: check_destination(link, "mine"), lambda: write_target(calibration, link, "p")):
        with pytest.raises(ProfileError, match=r"is a symlink \(to .*settings.toml\).*never through a link") as caught:
            call()
        assert caught.value.file == str(link)
    assert outside.read_text() == "[project]\nname = 'other'\n" and link.is_symlink()
    assert [p.name for p in outside.parent.iterdir()] == ["settings.toml"]  # no lock file left beside it either


def test_a_byte_order_mark_and_windows_line_ends_are_kept_byte_for_byte(calibration, tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_bytes(codecs.BOM_UTF8 + USER.encode())
    write(calibration, pyproject)
    data = pyproject.read_bytes()
    assert data.startswith(codecs.BOM_UTF8 + USER.encode())
    assert b"\n" not in data.replace(b"\r\n", b"") and read_toml(pyproject)["tool"]["npufuse"]["targets"]["mine"]


@pytest.mark.parametrize("source", [
    "prof\n[tool.npufuse.targets.mine.memory]\nhbm_gb = 1e9\n#",
    "prof\r\nbase = \"a3\"",
    "prof\x1b[2J\u202egpj.csv\U0001f600\x00",
])
def test_the_profiles_path_stays_inside_its_comment(calibration, tmp_path, source):
    """A line break in a directory name became TOML lines of the user's file (settings of the target)."""
    plain, hostile = tmp_path / "plain.toml", tmp_path / "hostile.toml"
    write(calibration, plain, "prof")
    write(calibration, hostile, source)
    assert read_toml(hostile) == read_toml(plain)
    comment = next(line for line in hostile.read_text().splitlines() if line.startswith("# Calibrated by"))
    assert "\\n" in comment or "\\r" in comment or "\\x1b" in comment
    assert not any(char in hostile.read_text() for char in "\x1b\u202e\x00")


def test_op_types_toml_cannot_hold_raw_are_written_escaped_and_read_back(calibration, tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    odd = {"=cmd|' /C calc'!A0": (1.5, 2), "Mat\x7fMul\U0001f600": (0.5, 1), 'a"b\\c\n[x]': (2.0, 3)}
    write_target(replace(calibration, corrections=odd), pyproject, "p")
    written = read_toml(pyproject)["tool"]["npufuse"]["targets"]["mine"]["corrections"]
    assert written == {op: factor for op, (factor, _) in odd.items()}


def test_a_read_only_pyproject_is_refused_before_the_fit(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_bytes(USER.encode())
    pyproject.chmod(0o444)  # no write bit counts as read-only even for root, who could replace it
    with pytest.raises(NpufuseError) as exc:  # read-only
        check_destination(pyproject, "mine")
    assert exc.value.file == str(pyproject)
    assert pyproject.read_bytes() == USER.encode()


def test_a_profile_whose_kernels_all_take_no_time_is_refused_naming_the_lines():
    prog = program()
    found = match(profiled(prog, lambda k: 0.0), prog, "m.py:f")
    with pytest.raises(CalibrationError) as exc:  # every matched kernel has Duration(us) 0
        calibrate(prog, found, "910b3", "mine")
    assert exc.value.entry == "line 2"


TOML_TEXT = st.text(alphabet="[]{}=\"'#.,\n\r abtx0123456789+-_:\\\u00e9", max_size=300)
PARTS = ("tool", "npufuse", "targets", "mine")
BLOCK = '[tool.npufuse.targets.mine]\nbase = "910b3"\n\n[tool.npufuse.targets.mine.efficiency]\ncube_tile = 0.8\n'


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(st.one_of(TOML_TEXT, st.tuples(TOML_TEXT, st.sampled_from([USER, USER.replace("\r\n", "\n")])).map("".join)),
       st.booleans())
def test_the_table_edit_keeps_every_other_setting_or_refuses(text, force):
    """Any text: a ProfileError (not TOML, an inline parent, a table there without force), or the edited
    file holds the new table and, outside it, exactly the old settings with the old text in front."""
    try:
        edited = with_table(text, PARTS, BLOCK, "p.toml", replace=force)
    except NpufuseError:
        return
    from pytest_npufuse.files import parse_toml

    new = parse_toml(edited, "p.toml")
    assert new["tool"]["npufuse"]["targets"]["mine"] == {"base": "910b3", "efficiency": {"cube_tile": 0.8}}
    if "mine" not in str(parse_toml(text, "p.toml")):
        assert edited.startswith(text)
