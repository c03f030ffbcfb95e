"""npu_kronecker_quant, npu_dynamic_mx_quant and npu_matmul_compress_dequant against their documents'
formulas, examples and op-plugin's goldens."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError
from pytest_npufuse.torch_npu.quant import unpack_int4

GEN = torch.Generator().manual_seed(11)


def test_kronecker_quant_is_op_plugins_golden_bit_for_bit() -> None:
    x, p1, p2 = (torch.rand(*shape, generator=GEN).half() for shape in ((16, 7, 16), (7, 7), (16, 16)))
    out, scale = torch_npu.npu_kronecker_quant(x, p1, p2, 0.9)
    rotated = (p1 @ (x @ p2)).flatten(-2)
    amax = rotated.abs().amax(-1, keepdim=True).float()
    ratio = torch.full_like(amax, 7 * 0.9)
    golden = (rotated.float() * (ratio / amax)).half().to(torch.int8).reshape(16, 7, 16)
    assert out.shape == (16, 7, 2) and out.dtype == torch.int32
    assert torch.equal(unpack_int4(out), golden) and torch.allclose(scale, (amax / ratio).flatten())


def test_dynamic_mx_quant_reproduces_the_aclnn_pages_example() -> None:
    """bfloat16 (0, 8, 64, 512) to float8_e4m3fn: y (0, 4, 32, 256), mxscale bytes (128, 0)."""
    y, mxscale = torch_npu.npu_dynamic_mx_quant(torch.tensor([[0.0, 8.0, 64.0, 512.0]]).bfloat16(),
                                               dst_type=torch.float8_e4m3fn)
    assert y.dtype == torch.float8_e4m3fn and y.float().tolist() == [[0.0, 4.0, 32.0, 256.0]]
    assert mxscale.dtype == torch.uint8 and mxscale.tolist() == [[[128, 0]]]


def test_dynamic_mx_quant_float4_bytes_dequantise_within_one_grid_step() -> None:
    x = (torch.randn(4, 64, generator=GEN) * 3).half()
    y, mxscale = torch_npu.npu_dynamic_mx_quant(x)
    codes = torch.stack([y & 15, y >> 4], -1).flatten(-2)
    magnitude = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6])[(codes & 7).long()]
    values = magnitude * torch.where(codes >= 8, -1.0, 1.0)
    scale = (2.0 ** (mxscale.float() - 127)).flatten(-2).repeat_interleave(32, -1)
    assert y.shape == (4, 32) and mxscale.shape == (4, 1, 2)
    assert ((values * scale - x.float()).abs() <= 2 * scale).all()  # the widest gap of the e2m1 grid is 2


def test_dynamic_mx_quant_refuses_the_formats_torch_has_no_dtype_for() -> None:
    with pytest.raises(OpArgumentError, match="float4_e1m2") as refused:
        torch_npu.npu_dynamic_mx_quant(torch.ones(2, 32).half(), dst_type=297)
    assert refused.value.op is not None and "npu_dynamic_mx_quant" in refused.value.op


def test_matmul_compress_dequant_is_the_pages_formula_and_refuses_a_compressed_weight() -> None:
    x1 = torch.randint(-8, 8, (4, 64), dtype=torch.int8, generator=GEN)
    x2 = torch.randint(-8, 8, (64, 16), dtype=torch.int8, generator=GEN)
    bias = torch.randint(-50, 50, (1, 16), dtype=torch.int32, generator=GEN)
    scale = torch.full((1, 16), 0.125)
    out = torch_npu.npu_matmul_compress_dequant(x1, x2, torch.zeros(8, dtype=torch.int8), bias, scale)
    assert out.dtype == torch.float16 and torch.equal(out, ((x1.long() @ x2.long() + bias) * 0.125).half())
    with pytest.raises(OpArgumentError, match="uncompressed") as refused:
        torch_npu.npu_matmul_compress_dequant(x1, x2.reshape(-1), torch.zeros(8, dtype=torch.int8), bias, scale)
    assert refused.value.op is not None and "npu_matmul_compress_dequant" in refused.value.op
