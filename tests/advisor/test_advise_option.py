"""The advisors under pytest: the npu_affinity marker, --npufuse-advise, npufuse.advise() and the time
attribution in the --npufuse-json report."""

import json

MODEL = '''
import pytest
import torch
import torch.nn.functional as F


class Router(torch.nn.Module):
    def __init__(self, scatter):
        super().__init__()
        self.scatter = scatter

    def forward(self, idx):
        if self.scatter:
            return torch.zeros(16, 8).scatter_(-1, idx, 1.0)
        return F.one_hot(idx, num_classes=8).sum(dim=1)


def idx():
    return torch.rand(16, 8, generator=torch.Generator().manual_seed(0)).argsort(-1)[:, :2]


class Projection(torch.nn.Module):
    """An nn.Linear whose input the Cube reads as ND: the form, but nothing to gain on the NPU."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x):
        return self.proj(x)
'''


def _run(pytester, body, *args):
    pytester.makepyfile(models=MODEL)
    pytester.makepyfile(test_case="from models import *\n" + body)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def test_npu_affinity_fails_a_test_that_reintroduces_a_slow_form(pytester):
    result = _run(pytester, '''
@pytest.mark.npu_affinity(max_findings=0)
def test_slow(npufuse):
    npufuse.check(Router(False), idx())

@pytest.mark.npu_affinity(max_findings=0)
def test_rewritten(npufuse):
    assert npufuse.check(Router(True), idx()).findings == ()
''')
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*npu_affinity: 1 known-slow op form(s)*one_hot+sum at models.py:*zeros + scatter_*"])


def test_npu_affinity_counts_only_forms_that_cost_time_on_the_target(pytester):
    result = _run(pytester, '''
@pytest.mark.npu_affinity(max_findings=0)
def test_aligned_linear(npufuse):
    (finding,) = npufuse.check(Projection(), torch.randn(16, 64)).findings
    assert finding.pattern == "nn.Linear" and finding.gain_us == 0
''')
    result.assert_outcomes(passed=1)


def test_npu_affinity_rejects_a_bad_argument(pytester):
    result = _run(pytester, '''
@pytest.mark.npu_affinity(max_finding=0)
def test_typo(npufuse):
    npufuse.check(Router(True), idx())
''')
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown argument 'max_finding'*Did you mean 'max_findings'*"])


def test_advise_option_prints_findings_and_json_carries_attribution(pytester):
    result = _run(pytester, '''
def test_plain(npufuse):
    npufuse.check(Router(False), idx())
''', "--npufuse-advise", "--npufuse-json=run.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*npufuse: advisors*", "*test_plain*Computing*Free*top ops*",
        "*affinity: one_hot+sum at models.py:* x1*", "1 affinity finding(s)",
    ])
    (record,) = json.loads((pytester.path / "run.json").read_text())["tests"]["test_case.py::test_plain"]["npufuse"]
    assert record["affinity"][0]["pattern"] == "one_hot+sum"
    assert record["attribution"]["variant"]["op_statistic"][0]["OP Type"]
    assert set(record["attribution"]) == {"baseline", "variant"}


def test_fixture_advise_is_bound_to_the_target(pytester):
    result = _run(pytester, '''
def test_advise(npufuse):
    advice = npufuse.advise(Router(False), idx())
    assert advice.target == "a2"
    assert [f.pattern for f in advice.findings] == ["one_hot+sum"]
    assert str(advice).splitlines()[-3].startswith("recommend none")
''', "--npu-target=a2")
    result.assert_outcomes(passed=1)
