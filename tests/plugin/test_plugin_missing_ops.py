"""``--npufuse-missing-ops`` and the markers' ``missing_ops=``, end to end through ``pytester``: every gap in
one failure, and a timing-only check shown as partial in the terminal table, the JSON and the HTML report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MODEL = '''
import pytest
import torch
from pytest_npufuse import torch_npu

torch.library.define("npu::OPNAME", "(Tensor x) -> Tensor")
torch.library.register_fake("npu::OPNAME", lambda x: torch.empty_like(x))


class Model(torch.nn.Module):
    def forward(self, x):
        return torch_npu.OPNAME(x) + 1, x * 2
'''


@pytest.fixture
def run(pytester, request):
    def go(body: str, *args: str):
        # One op per test: the runs share this process, where an op is defined once.
        pytester.makepyfile(test_case=(MODEL + body).replace("OPNAME", f"npufuse_{request.node.name}"))
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)

    return go


def test_timing_only_from_a_marker_shows_partial_everywhere(run, pytester):
    body = '''
@pytest.mark.multistream(missing_ops="timing-only")
def test_partial(npufuse):
    report = npufuse.check(Model(), torch.randn(4, 8))
    assert report.numerics.status == "partial"
'''
    result = run(body, "--npufuse-json=run.json", "--npufuse-html=run.html", "-W", "ignore::UserWarning")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*results (a3, max-autotune)*", "*test_case.py::test_partial*partial*", "total: 1 check(s) (1 partial)*"])
    document = json.loads((pytester.path / "run.json").read_text())
    (row,) = [row for test in document["tests"].values() for row in test["npufuse"]]
    assert row["numerics"]["status"] == "partial"
    assert [each["output"] for each in row["numerics"]["not_compared"]] == ["output[0]"]
    page = (pytester.path / "run.html").read_text()
    assert '<td data-v="partial" class="v-partial">partial</td>' in page and "bit-exact (partial)" in page
    assert "<h3>Outputs not compared</h3>" in page


def test_the_option_sets_timing_only_and_check_overrides_it(run):
    body = '''
def test_option(npufuse):
    assert npufuse.check(Model(), torch.randn(4, 8)).numerics.status == "partial"


def test_override(npufuse):
    npufuse.check(Model(), torch.randn(4, 8), missing_ops="error")
'''
    result = run(body, "--npufuse-missing-ops=timing-only", "-W", "ignore::UserWarning")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*npu::npufuse_test_the_option_sets_timing_only_and_check_overrides_it has no CPU kernel*"])


def test_a_bad_value_is_a_usage_error(run):
    result = run("def test_t():\n    pass\n", "--npufuse-missing-ops=timing_only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--npufuse-missing-ops='timing_only' is not a choice; use error or timing-only*"])


def test_markers_that_disagree_are_a_marker_error(run):
    body = '''
@pytest.mark.superkernel("sp1", missing_ops="error")
@pytest.mark.multistream(missing_ops="timing-only")
def test_t(npufuse):
    npufuse.check(Model(), torch.randn(4, 8))
'''
    result = run(body)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*markers give different missing_ops=*"])


def test_the_guides_example_of_a_users_own_cpu_reference_passes(pytester):
    """The complete test file in docs/howto/write-a-case.md ("Add the op yourself") runs and compares."""
    guide = (Path(__file__).parents[2] / "docs" / "howto" / "write-a-case.md").read_text()
    example = guide.split("### Add the op yourself", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    # The example defines npu::npu_foo; this process may already have run it, so it gets its own op name.
    pytester.makepyfile(test_guide=example.replace("npu_foo", "npu_guide_example_op"))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-W", "ignore::UserWarning")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_guide.py::test_foo*passed*"])
