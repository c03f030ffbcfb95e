"""torch_npu.npu_scaled_masked_softmax: softmax of the scaled, masked scores over the last dim, the
documented shape limits, the upper-triangle mask, and one opaque node when compiled."""

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.advisor.advice import capture_program


def _reference(x, mask, scale):
    """float64 softmax with masked positions at -10000, as the CANN kernel fills them."""
    values = (x.double() * scale).masked_fill(mask, -10000.0)
    return torch.softmax(values, dim=-1)


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-6), (torch.bfloat16, 8e-3), (torch.float16, 2e-3)])
def test_matches_float64_softmax_of_scaled_masked_scores(dtype, tolerance):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 32, 64, generator=gen).to(dtype)
    mask = torch.rand(1, 3, 32, 64, generator=gen) > 0.6
    y = torch_npu.npu_scaled_masked_softmax(x, mask, 0.125)
    assert y.dtype == dtype and y.shape == x.shape
    assert (y.double() - _reference(x, mask, 0.125)).abs().max() <= tolerance
    assert torch.equal(y, torch_npu.npu_scaled_masked_softmax(x, mask, 0.125))


def test_fixed_triu_mask_masks_above_the_diagonal_and_ignores_the_mask():
    x = torch.randn(1, 1, 32, 32)
    y = torch_npu.npu_scaled_masked_softmax(x, torch.ones(1, 1, 32, 32, dtype=torch.bool), 1.0, True)
    causal = torch.ones(32, 32, dtype=torch.bool).triu(1)
    assert torch.equal(y[0, 0][causal], torch.zeros(int(causal.sum())))
    assert y[0, 0, 0, 0] == 1.0
    assert (y.double() - _reference(x, causal.view(1, 1, 32, 32), 1.0)).abs().max() <= 1e-6


@pytest.mark.parametrize(("x", "mask", "match"), [
    (torch.randn(32, 64), torch.zeros(32, 64, dtype=torch.bool), "x"),
    (torch.randn(1, 1, 32, 48), torch.zeros(1, 1, 32, 48, dtype=torch.bool), "x"),
    (torch.randn(1, 1, 16, 64), torch.zeros(1, 1, 16, 64, dtype=torch.bool), "x"),
    (torch.randn(1, 1, 32, 64), torch.zeros(1, 1, 32, 64), "mask"),
    (torch.randn(2, 1, 32, 64), torch.zeros(3, 1, 32, 64, dtype=torch.bool), "mask"),
])
def test_bad_inputs_name_the_documented_limit(x, mask, match):
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_scaled_masked_softmax(x, mask)
    assert exc.value.argument == match


def test_compiles_to_one_scaled_masked_softmax_kernel():
    class Scores(torch.nn.Module):
        def forward(self, x, mask):
            return torch_npu.npu_scaled_masked_softmax(x, mask, 0.5) * 2

    program = capture_program(Scores(), torch.randn(1, 2, 32, 64), torch.zeros(1, 1, 32, 64, dtype=torch.bool))
    assert [k.op_type for k in program.kernels] == ["npu::npu_scaled_masked_softmax", "aten::mul"]
    assert program.kernels[0].name == "ScaledMaskedSoftmax"
