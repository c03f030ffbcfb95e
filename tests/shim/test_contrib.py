"""``torch_npu.contrib``'s quantised Linear layers compute what their ops compute, with torch_npu's parameters."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError
from pytest_npufuse.torch_npu.contrib.module import LinearA8W8Quant, LinearQuant, LinearWeightQuant


def _int8(*shape: int, seed: int) -> torch.Tensor:
    return torch.randint(-4, 4, shape, dtype=torch.int8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("output_dtype", [None, torch.float16, torch.bfloat16, torch.int32])
def test_linear_quant_is_npu_quant_matmul_of_the_transposed_weight(output_dtype: torch.dtype) -> None:
    x, weight = _int8(3, 16, seed=1), _int8(24, 16, seed=2)
    scale = torch.rand(24) / 8
    layer = LinearQuant(16, 24, bias=False, output_dtype=output_dtype)
    layer.weight.data, layer.scale.data = weight, scale
    # float16/int8 outputs take the scale packed by npu_trans_quant_param; bfloat16 and int32 the float32 one
    packed = output_dtype not in (torch.bfloat16, torch.int32)
    op_scale = torch_npu.npu_trans_quant_param(scale) if packed else scale
    expected = torch_npu.npu_quant_matmul(x, weight.t(), op_scale, output_dtype=output_dtype)
    assert torch.equal(layer(x), expected)


def test_linear_quant_parameters_are_frozen_with_torch_npus_names_and_dtypes() -> None:
    layer = LinearQuant(8, 4, offset=True, pertoken_scale=True)
    shapes = {name: (tuple(p.shape), p.dtype, p.requires_grad) for name, p in layer.named_parameters()}
    assert shapes == {
        "weight": ((4, 8), torch.float32, False),
        "scale": ((4,), torch.float32, False),
        "offset": ((4,), torch.float32, False),
        "pertoken_scale": ((4,), torch.float32, False),
        "bias": ((4,), torch.int32, False),
    }
    assert LinearQuant(8, 4, bias=False).bias is None


def test_linear_quant_refuses_mixed_operand_dtypes() -> None:
    layer = LinearQuant(16, 24, bias=False)
    layer.weight.data, layer.scale.data = _int8(24, 16, seed=2), torch.rand(24)
    with pytest.raises(OpArgumentError) as exc:
        layer(torch.zeros(3, 16, dtype=torch.int32))
    assert (exc.value.op, exc.value.argument) == ("LinearQuant", "x")


def test_linear_a8w8_quant_warns_and_refuses_what_torch_npu_refuses() -> None:
    with pytest.warns(FutureWarning, match="LinearQuant"):
        layer = LinearA8W8Quant(16, 24, bias=False, output_dtype=torch.int32)
    layer.weight.data, layer.scale.data = _int8(24, 16, seed=2), torch.rand(24)
    with pytest.raises(OpArgumentError) as exc:
        layer(_int8(3, 16, seed=1))
    assert (exc.value.op, exc.value.argument) == ("LinearA8W8Quant", "output_dtype")
    with pytest.warns(FutureWarning):
        layer = LinearA8W8Quant(16, 24, bias=False)
    layer.weight.data, layer.scale.data = _int8(24, 16, seed=2), torch.rand(24, dtype=torch.float16)
    with pytest.raises(OpArgumentError) as exc:
        layer(_int8(3, 16, seed=1))
    assert (exc.value.op, exc.value.argument) == ("LinearA8W8Quant", "scale")


def test_linear_weight_quant_is_the_op_with_per_group_parameters_transposed() -> None:
    x = torch.randn(4, 64, dtype=torch.float16, generator=torch.Generator().manual_seed(3))
    weight = _int8(32, 64, seed=4)
    scale, offset = torch.rand(32, 2, dtype=torch.float16), torch.rand(32, 2, dtype=torch.float16)
    layer = LinearWeightQuant(64, 32, bias=False, antiquant_offset=True, antiquant_group_size=32)
    layer.weight.data, layer.antiquant_scale.data, layer.antiquant_offset.data = weight, scale, offset
    expected = torch_npu.npu_weight_quant_batchmatmul(
        x, weight.t(), scale.t(), offset.t(), antiquant_group_size=32
    )
    assert torch.equal(layer(x), expected)
