"""torch's structured-trace records stay out of a failing test's captured log, and out of nothing else."""

FAILING = '''
import logging

import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


def test_compiles_then_fails(npufuse):
    npufuse.check(Model(), torch.ones(8))
    logging.getLogger("user").warning("a record of the test's own")
    assert False


def test_caplog_gets_no_torch_trace(npufuse, caplog):
    """pytest 9.2 attaches its handlers to every non-propagating logger; do so here on any version."""
    trace = logging.getLogger("torch.__trace")
    trace.addHandler(caplog.handler)
    try:
        npufuse.check(Model(), torch.ones(8, 8))
    finally:
        trace.removeHandler(caplog.handler)
    assert not [record for record in caplog.records if record.name == "torch.__trace"]
'''


def test_a_failing_test_shows_its_own_log_records_and_no_torch_trace(pytester, monkeypatch):
    """In a fresh process with ``TORCH_TRACE`` set, so torch's own trace file must still be written."""
    pytester.makepyfile(test_fails=FAILING)
    trace_dir = pytester.path / "trace"
    monkeypatch.setenv("TORCH_TRACE", str(trace_dir))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--log-level=DEBUG")
    result.assert_outcomes(failed=1, passed=1)
    output = result.stdout.str()
    assert output.count("Captured log call") == output.count("WARNING  user:") == 1
    assert "torch.__trace:" not in output  # a record reads "DEBUG    torch.__trace:utils.py:2350"
    (trace,) = trace_dir.glob("*.log")
    assert '"dynamo_start"' in trace.read_text()
