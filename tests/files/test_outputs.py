"""The run's outputs under pytest: runs that produce nothing write nothing, named streams and devices are
written through, special files given as options stop the run before any test, never hang it."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest
from special import close_sockets, dev_zero, fifo, loop, unix_socket

GOOD_REPORT = (
    '{"tool": "pytest-npufuse", "kind": "run", "schema_version": 1, "model": null, "entries": {}, "tests": {}}'
)
HTML = "<html>the last real report</html>"

PLAIN_TESTS = "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n"
CHECKED_TESTS = """
import torch


def test_checked(npufuse):
    npufuse.check(lambda a: a @ a, torch.ones(8, 8))


def test_plain():
    pass
"""


@pytest.fixture
def reports(pytester):
    """A last real JSON and HTML report in the test directory."""
    (pytester.path / "r.json").write_text(GOOD_REPORT)
    (pytester.path / "r.html").write_text(HTML)
    return pytester.path / "r.json", pytester.path / "r.html"


def _untouched(paths) -> None:
    json_path, html_path = paths
    assert json_path.read_text() == GOOD_REPORT and html_path.read_text() == HTML


@pytest.mark.parametrize(
    ("given", "args", "why"),
    [
        ("collect-only", ("--co",), "no test ran"),
        ("collect-only, quiet", ("--collect-only", "-q"), "no test ran"),
        ("every test deselected", ("-k", "no_such_test"), "no test ran"),
        ("tests that never call npufuse.check()", (), "no test called npufuse.check"),
    ],
)
def test_a_run_that_produces_nothing_leaves_the_reports_as_they_were(pytester, reports, given, args, why):
    pytester.makepyfile(test_plain=PLAIN_TESTS)
    result = pytester.runpytest_inprocess("--npufuse-json=r.json", "--npufuse-html=r.html", *args)
    _untouched(reports)
    result.stdout.fnmatch_lines(
        [f"--npufuse-json r.json was left as it was: {why}*", f"--npufuse-html r.html was left as it was: {why}*"]
    )


def test_a_run_without_checks_still_writes_a_report_that_did_not_exist(pytester):
    pytester.makepyfile(test_plain=PLAIN_TESTS)
    pytester.runpytest_inprocess("--npufuse-json=new.json").assert_outcomes(passed=2)
    assert json.loads((pytester.path / "new.json").read_text())["summary"] == {"passed": 2}


def test_a_partial_run_says_it_replaced_a_report_of_more_tests(pytester):
    pytester.makepyfile(test_case=CHECKED_TESTS)
    pytester.runpytest_inprocess("--npufuse-json=r.json").assert_outcomes(passed=2)
    result = pytester.runpytest_inprocess("--npufuse-json=r.json", "-k", "checked")
    result.stdout.fnmatch_lines(
        ["replaced the run report r.json; it held 1 test(s) this run did not run", "wrote r.json"]
    )
    assert list(json.loads((pytester.path / "r.json").read_text())["tests"]) == ["test_case.py::test_checked"]


def test_reports_go_to_stdout_and_dev_null_when_named(pytester):
    pytester.makepyfile(test_plain=PLAIN_TESTS)
    result = pytester.runpytest_subprocess("--npufuse-json=-", "--npufuse-html=/dev/null")
    assert result.ret == 0, result.stderr.str()
    assert '"tool": "pytest-npufuse"' in result.stdout.str() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not (pytester.path / "-").exists() and not list(pytester.path.glob(".*npufuse*"))


def test_a_fifo_nobody_reads_as_the_json_report_fails_the_run_without_hanging(pytester):
    pytester.makepyfile(test_plain=PLAIN_TESTS)
    os.mkfifo(pytester.path / "r.json")
    result = pytester.runpytest_inprocess("--npufuse-json=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["npufuse error: run report r.json: could not be opened for writing*no process is reading the FIFO*"]
    )
    assert stat.S_ISFIFO(os.lstat(pytester.path / "r.json").st_mode)


@pytest.mark.parametrize(
    ("given", "make", "args", "message"),
    [
        (
            "--npufuse-baseline is a FIFO",
            "fifo",
            ("--npufuse-baseline=x.json",),
            r"x.json: is a FIFO \(named pipe\), not a regular file",
        ),
        (
            "--npufuse-baseline is /dev/zero",
            "zero",
            ("--npufuse-baseline=x.json",),
            r"x.json: is a character device, not a regular file",
        ),
        ("--npufuse-baseline is a symlink loop", "loop", ("--npufuse-baseline=x.json",), r"x.json: is a symlink loop"),
        (
            "--npufuse-baseline=/dev/null (updating)",
            None,
            ("--npufuse-baseline=/dev/null", "--npufuse-update-baseline"),
            r"/dev/null: is a character device",
        ),
        ("--npufuse-profile is a FIFO", "fifo", ("--npufuse-profile=x.json",), r"--npufuse-profile|x.json: is a FIFO"),
        ("--npu-target is a FIFO profile", "fifo-toml", ("--npu-target=x.toml",), r"x.toml: is a FIFO \(named pipe\)"),
        (
            "--npufuse-trace-dir is a FIFO",
            "fifo",
            ("--npufuse-trace-dir=x.json",),
            r"--npufuse-trace-dir x.json: is a FIFO \(named pipe\); give a directory",
        ),
        (
            "--npufuse-json is a socket",
            "socket",
            ("--npufuse-json=x.json",),
            r"x.json: is a socket, which pytest-npufuse never replaces",
        ),
        (
            "--npufuse-baseline is '-'",
            None,
            ("--npufuse-baseline=-", "--npufuse-update-baseline"),
            r"-: (file not found|names a stream)",
        ),
    ],
)
def test_a_special_file_given_as_an_option_stops_the_run_before_any_test(pytester, given, make, args, message):
    path = pytester.path / ("x.toml" if make == "fifo-toml" else "x.json")
    makers = {"fifo": fifo, "fifo-toml": fifo, "zero": dev_zero, "loop": loop, "socket": unix_socket}
    if make is not None:
        makers[make](path)
    pytester.makepyfile(test_plain=PLAIN_TESTS)
    try:
        result = pytester.runpytest_inprocess(*args)
    finally:
        close_sockets()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert re.search(message, result.stderr.str()), result.stderr.str()
    assert "Traceback" not in result.stderr.str()
