"""npu_cross_entropy_loss against the API page's formula (torch's cross_entropy as the plain-torch reference)."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError

TARGET = torch.tensor([1, 2, -100, 6, 0, 3])


def _logits(requires_grad: bool = False) -> torch.Tensor:
    return torch.randn(6, 7, generator=torch.Generator().manual_seed(0), requires_grad=requires_grad)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_matches_the_formula_and_its_gradient(reduction, smoothing, weighted):
    weight = torch.rand(7, generator=torch.Generator().manual_seed(1)) + 0.1 if weighted else None
    x = _logits(requires_grad=True)
    loss, log_prob, zloss, lse = torch_npu.npu_cross_entropy_loss(
        x, TARGET, weight, reduction=reduction, label_smoothing=smoothing
    )
    reference_x = x.detach().clone().requires_grad_(True)
    expected = torch.nn.functional.cross_entropy(
        reference_x, TARGET, weight, reduction=reduction, label_smoothing=smoothing
    )
    assert loss.shape == ((6,) if reduction == "none" else (1,))
    torch.testing.assert_close(loss.reshape(expected.shape), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(log_prob, torch.log_softmax(x.detach(), -1))
    assert zloss.shape == loss.shape and lse.shape == (6,)
    upstream = torch.randn(loss.shape, generator=torch.Generator().manual_seed(2))
    (loss * upstream).sum().backward()
    (expected * upstream.reshape(expected.shape)).sum().backward()
    torch.testing.assert_close(x.grad, reference_x.grad, rtol=1e-5, atol=1e-6)


def test_cross_entropy_refuses_the_unsupported_zloss_and_a_bad_reduction():
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_cross_entropy_loss(_logits(), TARGET, return_zloss=True)
    assert (exc.value.op, exc.value.argument) == ("npu_cross_entropy_loss", "lse_square_scale_for_zloss")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_cross_entropy_loss(_logits(), TARGET, reduction="batchmean")
    assert exc.value.argument == "reduction"
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_cross_entropy_loss(_logits(), TARGET.int())
    assert exc.value.argument == "target"


def test_cross_entropy_ops_pass_opcheck():
    x = _logits()
    torch.library.opcheck(torch.ops.npu.npu_cross_entropy_loss.default, (x, TARGET))
    _, log_prob, _, lse = torch_npu.npu_cross_entropy_loss(x, TARGET)
    torch.library.opcheck(
        torch.ops.npu.npu_cross_entropy_loss_backward.default, (torch.ones(1), log_prob, TARGET), {"lse_for_zloss": lse}
    )
