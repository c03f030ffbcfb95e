"""A check whose numerics are partial (outputs computed from an op timed without a CPU kernel) is never shown
as a plain pass: the verdict, the precision and the HTML case section say so and list what was not compared."""

from __future__ import annotations

import torch

from pytest_npufuse import compare, torch_npu
from pytest_npufuse.report.html.page import render_page
from pytest_npufuse.report.html.view import case_view
from pytest_npufuse.report.numerics import Numerics, Uncompared, not_compared_lines, precision_word, shown_verdict
from pytest_npufuse.vocabulary import NumericsStatus

torch.library.define("npu::npufuse_report_fake_only", "(Tensor x) -> Tensor")
torch.library.register_fake("npu::npufuse_report_fake_only", lambda x: torch.empty_like(x))

_PARTIAL = Numerics(NumericsStatus.PARTIAL, not_compared=(Uncompared("output[0]", ("npu::op",), "no CPU kernel"),))


def test_a_passed_partial_check_shows_partial_and_other_outcomes_stay_as_they_are() -> None:
    partial, computed = _PARTIAL.to_json(), Numerics().to_json()
    assert shown_verdict("passed", partial) == "partial"
    assert shown_verdict("failed", partial) == "failed" and shown_verdict("passed", computed) == "passed"
    assert precision_word(True, partial) == "bit-exact (partial)" and precision_word(False, computed) == "differs"
    assert not_compared_lines(partial) == ["output[0] from npu::op: no CPU kernel"]
    assert _PARTIAL.lines()[1] == "  not compared: output[0] from npu::op: no CPU kernel"


def test_the_html_case_lists_the_outputs_not_compared() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch_npu.npufuse_report_fake_only(x), x + 1

    report = compare(Model(), torch.randn(4, 8), missing_ops="timing-only")
    page = render_page([{**case_view(report, "partial"), "verdict": shown_verdict("passed", report.numerics.to_json())}])
    assert "<h3>Outputs not compared</h3>" in page
    assert "output[0] from npu::npufuse_report_fake_only: npu::npufuse_report_fake_only has no CPU kernel" in page
    assert '<td data-v="bit-exact (partial)">bit-exact (partial)</td>' in page and "test partial" in page
