"""Why a modeled gain happened (its parts add up to the saved time) and the model's measured error on
published gains of that kind, carried by the report."""

import math
import tomllib

import pytest
import torch

from pytest_npufuse import compare
from pytest_npufuse import torch_npu, torchair as tng
from pytest_npufuse.report.gain import ERRORS_FILE, GainKind, explain_gain, gain_error, gain_kinds
from pytest_npufuse.simulate.timeline import Bound, KernelRun, RunReport


class Chain(torch.nn.Module):
    """The README's scope: a quantised matmul and its dequant-SwiGLU-quant in one SuperKernel, one task
    instead of two."""

    def forward(self, x1, x2, scale, pertoken):
        with tng.scope.super_kernel("sp1", ""):
            q = torch_npu.npu_quant_matmul(x1, x2, scale, pertoken_scale=pertoken, output_dtype=torch.bfloat16)
            return torch_npu.npu_dequant_swiglu_quant(q)


def chain_report():
    gen = torch.Generator().manual_seed(0)
    x1 = torch.randint(-8, 8, (64, 128), dtype=torch.int8, generator=gen)
    x2 = torch.randint(-8, 8, (128, 256), dtype=torch.int8, generator=gen)
    return compare(Chain(), x1, x2, torch.rand(256, generator=gen), torch.rand(64, generator=gen))


def run(kernels, time_us):
    return RunReport("v", "a3", "ge_graph", time_us, time_us, 0.0, Bound.DEVICE, len(kernels), tuple(kernels))


def test_parts_add_up_to_the_saved_time_on_a_superkernel_scope():
    report = chain_report()
    why = report.why
    assert why.saved_us == pytest.approx(report.baseline.time_us - report.variant.time_us)
    assert why.gaps_us + why.task_us + why.overlap_us + why.host_us == pytest.approx(why.saved_us, abs=1e-6)
    assert why.tasks_saved > 0
    assert why.describe().startswith("saved ") and "fewer device tasks" in why.describe()


def test_overlap_of_two_streams_is_counted_as_hidden_time():
    serial = run([KernelRun("a", "Add", "0", 0.0, 10.0, 1, "vector"), KernelRun("b", "Mul", "0", 10.0, 20.0, 1, "vector")], 20.0)
    side = run([KernelRun("a", "Add", "0", 0.0, 10.0, 1, "vector"), KernelRun("b", "Mul", "1", 2.0, 12.0, 1, "vector")], 12.0)
    why = explain_gain(serial, side)
    assert why.overlap_us == pytest.approx(8.0)
    assert why.task_us == 0 and why.tasks_saved == 0
    assert why.saved_us == pytest.approx(8.0)
    assert "stream overlap -8.0 us" in why.describe()


def test_a_loss_reads_as_lost():
    fast = run([KernelRun("a", "Add", "0", 0.0, 10.0, 1, "vector")], 10.0)
    slow = run([KernelRun("a", "Add", "0", 0.0, 14.0, 1, "vector")], 14.0)
    assert explain_gain(fast, slow).describe().startswith("lost 4.0 us")


def test_the_kinds_a_variant_makes():
    assert gain_kinds(2, 1) == (GainKind.SUPERKERNEL,)
    assert gain_kinds(0, 3) == (GainKind.MULTISTREAM,)
    assert gain_kinds(1, 2) == (GainKind.SUPERKERNEL, GainKind.MULTISTREAM)
    assert gain_kinds(0, 1) == ()


def test_the_trust_line_states_median_n_and_protocol_from_the_generated_file():
    from importlib import resources

    data = tomllib.loads(resources.files("pytest_npufuse.report").joinpath(ERRORS_FILE).read_text())
    for kind in GainKind:
        error = gain_error(kind)
        assert error is not None
        entry = data["gain"][str(kind)]
        assert error.pairs == entry["pairs"] > 0
        line = error.describe()
        assert f"over {entry['pairs']} pairs" in line and data["protocol"] in line
        assert math.isfinite(error.median_pct) == (f"median {entry['median_pct']:.0f}%" in line)


def test_the_case_report_carries_why_and_trust():
    report = chain_report()
    assert [t.kind for t in report.trust] == ["superkernel"]
    assert "superkernel gains" in report.trust[0].describe()


def test_a_run_that_never_finishes_has_no_why():
    from dataclasses import replace

    report = chain_report()
    stuck = replace(report, variant=replace(report.variant, time_us=math.inf))
    assert stuck.why is None
