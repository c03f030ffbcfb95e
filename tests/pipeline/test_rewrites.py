"""``torchair.register_replacement`` / ``npugraph_ex.register_replacement`` rules run in ``compare`` and
``npufuse.check`` too, in every mode, as in a ``torch.compile`` through TorchAir's backend. The rule is
the documented example, written with torch_npu's callables as there (Ascend/torchair
docs/zh/npugraph_ex/api/npugraph_ex/register_replacement.md @fced8842): add + npu_rms_norm -> npu_add_rms_norm,
with an ``extra_check`` on the last dim of ``x1``."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import compare, npugraph_ex, torch_npu, torchair
from pytest_npufuse.frontend import rewrites


@pytest.fixture(autouse=True)
def no_rules(monkeypatch):
    monkeypatch.setattr(rewrites, "_RULES", [])  # rules are process-wide: each test starts with none


def _search(x1, x2, gamma):
    x_out = torch.add(x1, x2)
    y, _ = torch_npu.npu_rms_norm(x_out, gamma)
    return y, x_out


def _replace(x1, x2, gamma):
    y, _, x_out = torch_npu.npu_add_rms_norm(x1, x2, gamma)
    return y, x_out


_EXAMPLE = (torch.empty(1, 1, 2), torch.empty(1, 1, 2), torch.empty(2))


class _TwoNorms(torch.nn.Module):
    """Two add + rms_norm sites, of hidden sizes 8 and 16."""

    def forward(self, a, b, gamma, c, d, delta):
        y, x = _search(a, b, gamma)
        z, w = _search(c, d, delta)
        return torch.abs(y), torch.sqrt(x), torch.abs(z), torch.sqrt(w)


def _inputs():
    return (torch.rand(1, 2, 8), torch.rand(1, 2, 8), torch.ones(8), torch.rand(1, 2, 16), torch.rand(1, 2, 16),
            torch.ones(16))


def _op_types(report) -> list[str]:
    return [kernel.op_type for kernel in report.variant.kernels]


@pytest.mark.parametrize("mode", ["max-autotune", "reduce-overhead", "eager"])
def test_a_registered_rule_fuses_every_match_in_a_check(mode):
    assert "npu::npu_add_rms_norm" not in _op_types(compare(_TwoNorms(), *_inputs(), mode=mode))
    torchair.register_replacement(search_fn=_search, replace_fn=_replace, example_inputs=_EXAMPLE)
    report = compare(_TwoNorms(), *_inputs(), mode=mode)
    fused = _op_types(report)
    assert fused.count("npu::npu_add_rms_norm") == 2 and "npu::npu_rms_norm" not in fused and "aten::add" not in fused
    assert report.bit_exact


def test_an_extra_check_that_refuses_some_matches_leaves_those_as_written():
    def only_hidden_16(match) -> bool:
        return match.kwargs["x1"].meta["val"].shape[-1] == 16

    npugraph_ex.register_replacement(search_fn=_search, replace_fn=_replace, example_inputs=_EXAMPLE,
                                     extra_check=only_hidden_16)
    ops = _op_types(compare(_TwoNorms(), *_inputs()))
    assert ops.count("npu::npu_add_rms_norm") == 1 and ops.count("npu::npu_rms_norm") == 1 and "aten::add" in ops
