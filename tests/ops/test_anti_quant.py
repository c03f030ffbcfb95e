"""npu_anti_quant against its documented formula out = dst((x + offset) * scale)."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu


@pytest.mark.parametrize("dst", [torch.float16, torch.bfloat16])
def test_int8_values_are_offset_scaled_per_channel_and_rounded_once(dst):
    gen = torch.Generator().manual_seed(5)
    x = torch.randint(-128, 127, (3, 16), generator=gen, dtype=torch.int8)
    scale, offset = torch.rand(16, generator=gen) * 0.1, torch.randn(16, generator=gen)
    out = torch_npu.npu_anti_quant(x, scale, offset=offset, dst_dtype=dst)
    expected = ((x.double() + offset.double()) * scale.double()).to(dst)
    assert out.dtype == dst and torch.allclose(out.double(), expected.double(), rtol=1e-2, atol=1e-3)
    assert torch.equal(torch_npu.npu_anti_quant(x, scale[:1]), (x.float() * scale[0]).half())  # default float16


def test_int4_words_unpack_eight_values_each():
    words = torch.tensor([[0x76543210, 0x0FEDCBA9 - 2**32 + 2**32]], dtype=torch.int64).to(torch.int32)
    out = torch_npu.npu_anti_quant(words, torch.ones(16), src_dtype=torch.quint4x2)
    assert out.shape == (1, 16)
    assert out[0, :8].tolist() == [0, 1, 2, 3, 4, 5, 6, 7] and out[0, 8:].tolist() == [-7, -6, -5, -4, -3, -2, -1, 0]


def test_arguments_that_do_not_pair_are_named():
    x = torch.ones(2, 8, dtype=torch.int8)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_anti_quant(x, torch.ones(4))
    assert (exc.value.op, exc.value.argument) == ("npu_anti_quant", "scale")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_anti_quant(x, torch.ones(8), offset=torch.ones(8, dtype=torch.bfloat16))
    assert (exc.value.op, exc.value.argument) == ("npu_anti_quant", "offset")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_anti_quant(torch.ones(2, 1, dtype=torch.int32), torch.ones(8), src_dtype=torch.int8)
    assert (exc.value.op, exc.value.argument) == ("npu_anti_quant", "x")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_anti_quant(x, torch.ones(8), src_dtype=torch.quint4x2)
    assert (exc.value.op, exc.value.argument) == ("npu_anti_quant", "x")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_anti_quant(x, torch.ones(8), dst_dtype=torch.float32)
    assert (exc.value.op, exc.value.argument) == ("npu_anti_quant", "dst_dtype")
