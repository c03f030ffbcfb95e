"""npu_dynamic_block_quant against op-plugin's golden model (per-block int8 with amax / 127 scales)."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError


def _golden(x: torch.Tensor, min_scale: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows padded to whole 128-column blocks; per block scale = max(amax / 127, min_scale) and
    y = clamp(round(x / scale), -127, 127) on the unpadded columns."""
    rows = x.float().reshape(-1, x.shape[-1])
    pad = -x.shape[-1] % 128
    blocks = torch.nn.functional.pad(rows, (0, pad)).reshape(rows.shape[0], -1, 128)
    scale = (blocks.abs().amax(-1) / 127).clamp(min=min_scale)
    y = (blocks / scale[..., None]).round().clamp(-127, 127).to(torch.int8)
    y = y.reshape(rows.shape[0], -1)[:, : x.shape[-1]].reshape(x.shape)
    return y, scale.reshape(*x.shape[:-1], -1)


@pytest.mark.parametrize("shape", [(4, 3), (6, 300), (2, 3, 256)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_block_quant_matches_the_golden_model(shape, dtype):
    x = (4 * torch.rand(shape, generator=torch.Generator().manual_seed(0)) - 2).to(dtype)
    y, scale = torch_npu.npu_dynamic_block_quant(x, dst_type=torch.int8)
    expected_y, expected_scale = _golden(x)
    assert y.dtype == torch.int8 and scale.dtype == torch.float32
    torch.testing.assert_close(scale, expected_scale, rtol=1e-6, atol=0)
    assert (y.int() - expected_y.int()).abs().max() <= 1  # x * (127 / amax) against x / (amax / 127)


def test_block_quant_floors_the_scale_at_min_scale():
    x = torch.full((2, 128), 0.01, dtype=torch.float16)
    y, scale = torch_npu.npu_dynamic_block_quant(x, min_scale=0.001)
    expected_y, expected_scale = _golden(x, min_scale=0.001)
    torch.testing.assert_close(scale, expected_scale)
    assert torch.equal(y, expected_y)


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"dst_type": torch.float8_e4m3fn}, "dst_type"),
        ({"col_block_size": 64}, "col_block_size"),
        ({"round_mode": "floor"}, "round_mode"),
        ({"dst_type_max": 6.0}, "dst_type_max"),
    ],
)
def test_block_quant_refuses_what_it_does_not_model(kwargs, named):
    with pytest.raises(OpArgumentError) as error:
        torch_npu.npu_dynamic_block_quant(torch.zeros(2, 128, dtype=torch.float16), **kwargs)
    assert error.value.argument == named


def test_block_quant_passes_opcheck():
    x = torch.randn(3, 200).to(torch.bfloat16)
    torch.library.opcheck(torch.ops.npu.npu_dynamic_block_quant.default, (x,), {"min_scale": 0.0})
