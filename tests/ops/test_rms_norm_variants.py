"""npu_add_rms_norm_v2 (in place) and npu_rms_norm_quant against op-plugin's golden models and API page."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_add_rms_norm_v2_writes_y_into_x1_and_the_sum_into_x2(dtype):
    gen = torch.Generator().manual_seed(0)
    x1, x2 = (torch.rand(4, 64, generator=gen) * 10).to(dtype), (torch.rand(4, 64, generator=gen) * 10).to(dtype)
    gamma = torch.rand(64, generator=gen).to(dtype)
    total = (x1.float() + x2.float()).to(dtype)
    expected_rstd = 1 / _rms(total.float(), 1e-6)
    expected_y = total.double() * expected_rstd * gamma.double()
    rstd = torch_npu.npu_add_rms_norm_v2(x1, x2, gamma)
    torch.testing.assert_close(rstd.double(), expected_rstd, rtol=1e-5, atol=1e-7)
    assert torch.equal(x2, total)
    tolerance = 1e-3 if dtype == torch.float16 else 1e-5
    torch.testing.assert_close(x1.double(), expected_y, rtol=tolerance, atol=tolerance)


def test_add_rms_norm_v2_graph_op_is_the_functional_form():
    x1, x2, gamma = torch.randn(2, 8), torch.randn(2, 8), torch.ones(8)
    rstd, y, total = torch.ops.npu.npu_add_rms_norm_v2_functional(x1, x2, gamma)
    assert torch.equal(total, x1 + x2) and rstd.shape == (2, 1)
    torch.library.opcheck(torch.ops.npu.npu_add_rms_norm_v2_functional.default, (x1, x2, gamma))


def _quant_inputs(dtype=torch.float16, gamma_shape=(32,)):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 32, generator=gen).to(dtype)
    gamma = torch.rand(gamma_shape, generator=gen).to(dtype)
    beta = (0.1 * torch.randn(gamma_shape, generator=gen)).to(dtype)
    scale = torch.tensor([40.0], dtype=dtype)
    offset = torch.tensor([3], dtype=torch.int8)
    return x, gamma, beta, scale, offset


@pytest.mark.parametrize("gamma_shape", [(32,), (1, 32)])
def test_rms_norm_quant_follows_the_pages_formula(gamma_shape):
    x, gamma, beta, scale, offset = _quant_inputs(gamma_shape=gamma_shape)
    y = torch_npu.npu_rms_norm_quant(x, gamma, beta, scale, offset)
    quant_in = x.double() / _rms(x, 1e-6) * gamma.double().reshape(-1) + beta.double().reshape(-1)
    expected = torch.round(quant_in * scale.double() + offset.double()).clamp(-128, 127)
    assert y.dtype == torch.int8
    assert (y.double() - expected).abs().max() <= 1  # float32 against float64 at a .5 boundary


def test_rms_norm_quant_accepts_int8_and_refuses_quint4x2():
    args = _quant_inputs()
    assert torch.equal(torch_npu.npu_rms_norm_quant(*args, dst_dtype=torch.int8), torch_npu.npu_rms_norm_quant(*args))
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_rms_norm_quant(*args, dst_dtype=torch.quint4x2)
    assert (exc.value.op, exc.value.argument) == ("npu_rms_norm_quant", "dst_dtype")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_rms_norm_quant(*args[:4], torch.tensor([3], dtype=torch.int32))
    assert exc.value.argument == "offset"


def test_rms_norm_quant_passes_opcheck():
    torch.library.opcheck(torch.ops.npu.npu_rms_norm_quant.default, _quant_inputs(torch.bfloat16))
