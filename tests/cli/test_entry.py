"""``python -m pytest_npufuse``: its exit status, and a reader that closes the pipe early."""

import os
import subprocess
import sys
from importlib import metadata


def test_a_reader_that_stops_early_ends_the_output_without_a_traceback():
    # 200,000 rows of output (far over a pipe's buffer) read by a consumer that takes one line.
    script = (
        "import sys, pytest_npufuse.cli.main as cli\n"
        "cli.main = lambda: [print('row', i) for i in range(200000)] and 0\n"
        "import runpy; runpy.run_module('pytest_npufuse', run_name='__main__')\n"
    )
    producer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = producer.stdout.readline()
    producer.stdout.close()
    stderr = producer.stderr.read().decode()
    status = producer.wait(timeout=60)
    assert first == b"row 0\n"
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
    assert status == 1


def test_the_exit_status_is_the_commands():
    result = subprocess.run([sys.executable, "-m", "pytest_npufuse", "compare"], capture_output=True, text=True)
    assert result.returncode == 2 and "usage:" in result.stderr


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_npufuse", *argv], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "80"})


def test_version_names_the_package_and_torch():
    result = _run("--version")
    assert result.returncode == 0
    assert result.stdout.startswith(f"pytest-npufuse {metadata.version('pytest-npufuse')} (torch ")


def test_every_help_is_plain_text_with_examples_that_fit_80_columns():
    commands = [()] + [(name,) for name in ("compare", "advise", "calibrate", "ops", "run", "merge")]
    for command in commands:
        text = _run(*command, "--help").stdout
        examples = text.split("examples:\n", 1)[1].splitlines()
        assert examples[0].startswith("  python -m pytest_npufuse "), command
        assert "``" not in text and ":func:" not in text, command
        prose = text.split("examples:\n", 1)[0]
        assert max(len(line) for line in prose.splitlines()) <= 80, command


def _rows(*argv: str) -> dict[str, list[str]]:
    lines = _run("ops", *argv).stdout.splitlines()
    return {line.split()[0]: line.split() for line in lines[1:-1]}


def test_ops_lists_the_torch_npu_ops_and_with_all_the_catalogs_other_op_types():
    provided, every = _rows(), _rows("--all")
    assert set(provided) < set(every)
    assert not any(op.startswith("aten::") for op in provided)
    assert "aten::mm" in every and every["aten::mm"][1] == "aten"
    # the backward column asks the dispatcher: npu_rms_norm has torch_npu's autograd, a cache write has none
    assert provided["npu::npu_rms_norm"][5] == "yes"
    assert provided["npu::npu_scatter_nd_update"][5] == "no"
