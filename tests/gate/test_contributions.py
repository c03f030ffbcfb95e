"""Gates judge what they name: a scope's ``min_speedup`` its own effect, a stream's its own, the
``npufuse`` marker the whole VARIANT; the report shows each contribution and they sum to the whole."""

import json
import math

import pytest
import torch

from pytest_npufuse import advise, compare
from pytest_npufuse.advisor.candidates import Layout

MODEL = '''
import torch
from pytest_npufuse import torch_npu, torchair

H = 512


class Block(torch.nn.Module):
    """An RMSNorm MLP in a SuperKernel scope whose options make it lose (a cache flush after every
    sub-kernel) and a small shared expert on side stream '1', which overlaps the MLP and wins."""

    def __init__(self, options="debug-dcci-all=1"):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.gamma = torch.nn.Parameter(torch.ones(H))
        self.up = torch.nn.Parameter(torch.randn(H, 2 * H, generator=g) / 32)
        self.down = torch.nn.Parameter(torch.randn(H, H, generator=g) / 32)
        self.shared_up = torch.nn.Parameter(torch.randn(H, 64, generator=g) / 32)
        self.shared_down = torch.nn.Parameter(torch.randn(32, H, generator=g) / 32)
        self.options = options

    def forward(self, x):
        with torchair.scope.super_kernel("sp1", self.options):
            normed, _ = torch_npu.npu_rms_norm(x, self.gamma)
            hidden = torch_npu.npu_swiglu(normed @ self.up)
        with torchair.scope.npu_stream_switch("1"):
            shared = torch_npu.npu_swiglu(x @ self.shared_up) @ self.shared_down
        return hidden @ self.down + shared


def data():
    return (torch.randn(16, H, generator=torch.Generator().manual_seed(1)),)
'''


@pytest.fixture(scope="module")
def block():
    namespace: dict = {}
    exec(compile(MODEL, "block_model.py", "exec"), namespace)
    return namespace["Block"], namespace["data"]


def test_contributions_sum_to_the_whole_and_match_each_factor_taken_away(block):
    model, data = block
    report = compare(model(), *data(), target="a3")
    saved = report.contributions
    assert saved["scope:sp1"] < 0 < saved["stream:1"]
    assert math.isclose(sum(saved.values()), report.baseline.time_us - report.variant.time_us, abs_tol=1e-9)
    assert report.speedup > 1.0 > report.scope_speedup("sp1")
    assert report.streams_speedup() > 1.0
    # the same program with only the scope written away (streams kept) takes what the contribution says
    plain = compare(model(options=""), *data(), target="a3", options={"sp1": "debug-dcci-all=1"})
    assert plain.contributions == saved
    assert "scope sp1: -" in report.summary() and "stream 1: +" in report.summary()


def test_advise_agrees_with_the_scope_sign(block):
    model, data = block
    report = compare(model(), *data(), target="a3")
    advice = advise(model(), *data(), target="a3", options="debug-dcci-all=1")
    written = next(candidate for candidate in advice.candidates if candidate.layout == Layout.AS_WRITTEN)
    assert written.gain_pct(advice.reference_us) < 0 and report.contributions["scope:sp1"] < 0


def test_no_scope_no_stream_no_contributions():
    report = compare(lambda x: x @ x, torch.ones(8, 8), target="a3")
    assert report.contributions == {} and report.scope_speedup("sp1") is None and report.streams_speedup() is None


def test_losing_scope_fails_its_marker_and_the_winning_stream_passes(pytester):
    pytester.makepyfile(block_model=MODEL)
    pytester.makepyfile(test_block='''
import pytest
from block_model import Block, data


@pytest.mark.superkernel(scope="sp1", min_speedup=1.0)
def test_scope(npufuse):
    npufuse.check(Block(), *data())


@pytest.mark.multistream(streams=2, min_speedup=1.1)
def test_stream(npufuse):
    npufuse.check(Block(), *data())


@pytest.mark.npufuse(min_speedup=1.1)
def test_whole(npufuse):
    npufuse.check(Block(), *data())


@pytest.mark.npufuse(min_speedup=2.0)
def test_whole_too_slow(npufuse):
    npufuse.check(Block(), *data())
''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--npufuse-json=run.json")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "*scope 'sp1': modeled speedup 0.9*x on a3 is below min_speedup=1.0x (its own effect: the VARIANT with it "
        "ignored * us, variant * us; whole VARIANT 1.1*x, gain by scope sp1: -*%, stream 1: +*% (whole +*%))*",
    ])
    result.stdout.fnmatch_lines(["*the whole VARIANT: modeled speedup 1.1*x on a3 is below min_speedup=2.0x (baseline * us*"])
    out = result.stdout.str()
    assert "npufuse: gain by scope and stream (each all else equal)" in out
    assert "test_block.py::test_scope [a3]: scope sp1: -3.7%, stream 1: +19.8% (whole +16.0%)" in out
    tests = json.loads((pytester.path / "run.json").read_text())["tests"]
    rows = [row for test in tests.values() for row in test["npufuse"]]
    assert rows and all(set(row["contributions"]) >= {"scope:sp1", "stream:1"} for row in rows)


@pytest.mark.parametrize("arguments", ["min_speedup=float(\"nan\")", "speedup=2", "\"x\""])
def test_npufuse_marker_arguments_are_checked(pytester, arguments):
    pytester.makepyfile(f'''
import pytest

@pytest.mark.npufuse({arguments})
def test_it(npufuse):
    pass
''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*npufuse marker*"])
