"""npu_trans_quant_param against TransQuantParamV2's documented bit layout."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu


def _bits(value: float) -> int:
    return int(torch.tensor([value], dtype=torch.float32).view(torch.int32).item()) & 0xFFFFFFFF


def _float(bits: int) -> float:
    return float(torch.tensor([bits if bits < 2**31 else bits - 2**32], dtype=torch.int32).view(torch.float32))


def test_scale_keeps_its_top_19_bits_with_bit_46_set_and_the_offset_in_bits_37_to_45():
    scale = torch.tensor([0.75, _float(_bits(1.5) | 0x1FFF)])  # the second has all 13 low bits set
    offset = torch.tensor([-3.0, 2.5])
    packed = torch_npu.npu_trans_quant_param(scale, offset).tolist()
    assert packed[0] == (_bits(0.75) | 1 << 46 | (-3 & 0x1FF) << 37)
    assert packed[1] == (_bits(1.5) | 1 << 46 | 2 << 37)  # truncated; 2.5 rounds to even


def test_round_mode_1_rounds_the_scale_to_nearest_even_at_19_bits():
    odd_halfway = _float(_bits(1.0) | 1 << 13 | 1 << 12)  # kept bits end in 1, dropped part is exactly half
    even_halfway = _float(_bits(1.0) | 1 << 12)  # kept bits end in 0, dropped part is exactly half
    packed = torch_npu.npu_trans_quant_param(torch.tensor([odd_halfway, even_halfway]), round_mode=1).tolist()
    assert [p & 0xFFFFFFFF for p in packed] == [_bits(1.0) + (2 << 13), _bits(1.0)]
    truncated = torch_npu.npu_trans_quant_param(torch.tensor([odd_halfway]), round_mode=0).tolist()
    assert truncated[0] & 0xFFFFFFFF == _bits(1.0) | 1 << 13


def test_shapes_offsets_clamp_and_bad_arguments():
    assert torch_npu.npu_trans_quant_param(torch.ones(1), torch.zeros(8)).shape == (8,)
    assert torch_npu.npu_trans_quant_param(torch.ones(1, 8), torch.zeros(1, 8)).shape == (1, 8)
    clamped = torch_npu.npu_trans_quant_param(torch.ones(2), torch.tensor([1000.0, -1000.0])).tolist()
    assert [(p >> 37) & 0x1FF for p in clamped] == [255, 256]  # -256 as 9-bit two's complement
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_trans_quant_param(torch.ones(2), round_mode=2)
    assert (exc.value.op, exc.value.argument) == ("npu_trans_quant_param", "round_mode")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_trans_quant_param(torch.ones(2, 2))
    assert (exc.value.op, exc.value.argument) == ("npu_trans_quant_param", "scale")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_trans_quant_param(torch.ones(2, dtype=torch.float16))
    assert (exc.value.op, exc.value.argument) == ("npu_trans_quant_param", "scale")


def test_its_result_is_the_int64_scale_npu_quant_matmul_takes():
    x1 = torch.randint(-5, 5, (4, 32), dtype=torch.int8)
    x2 = torch.randint(-5, 5, (32, 16), dtype=torch.int8)
    scale = torch.full((16,), 0.125)
    through_param = torch_npu.npu_quant_matmul(x1, x2, torch_npu.npu_trans_quant_param(scale), output_dtype=torch.float16)
    through_float = torch_npu.npu_quant_matmul(x1, x2, scale, output_dtype=torch.float16)
    assert torch.equal(through_param, through_float)
