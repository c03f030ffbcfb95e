"""npu_add_layer_norm against aclnnAddLayerNorm's formulas, in float64."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_y_mean_rstd_and_x_follow_the_formulas(dtype):
    gen = torch.Generator().manual_seed(7)
    x1, x2 = (torch.randn(2, 3, 64, generator=gen).to(dtype) for _ in range(2))
    gamma, beta = torch.rand(64, generator=gen).to(dtype), torch.randn(64, generator=gen).to(dtype)
    y, mean, rstd, x = torch_npu.npu_add_layer_norm(x1, x2, gamma, beta, 1e-5, True)
    summed = (x1.double() + x2.double()).to(dtype)
    assert torch.equal(x, summed) and mean.shape == rstd.shape == (2, 3, 1) and mean.dtype == torch.float32
    values = summed.double()
    ref_mean = values.mean(-1, keepdim=True)
    ref_rstd = 1 / torch.sqrt(values.var(-1, unbiased=False, keepdim=True) + 1e-5)
    ref_y = (values - ref_mean) * ref_rstd * gamma.double() + beta.double()
    assert torch.allclose(mean.double(), ref_mean, atol=1e-6) and torch.allclose(rstd.double(), ref_rstd, rtol=1e-5)
    tolerance = {torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float32: 1e-5}[dtype]
    assert y.dtype == dtype and torch.allclose(y.double(), ref_y, atol=tolerance, rtol=tolerance)


def test_bad_arguments_are_named():
    x = torch.ones(2, 8)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_add_layer_norm(x, torch.ones(2, 4), torch.ones(8), torch.zeros(8))
    assert (exc.value.op, exc.value.argument) == ("npu_add_layer_norm", "x2")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_add_layer_norm(x, x, torch.ones(8), torch.zeros(4))
    assert (exc.value.op, exc.value.argument) == ("npu_add_layer_norm", "beta")
