"""``python -m pytest_npufuse``: its exit status, and a reader that closes the pipe early."""

import subprocess
import sys


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
