"""``_npu_dropout_gen_mask`` and ``npu_convert_weight_to_int4pack`` against their op-plugin kernels' layouts,
and torch_npu's dtype codes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError
from pytest_npufuse.torch_npu.quant import unpack_int4


def _mask(size, p, seed=1, offset=0, **kwargs) -> torch.Tensor:
    return torch_npu._npu_dropout_gen_mask(torch.randn(2), size, p, seed, offset, **kwargs)


def test_mask_with_p_0_keeps_every_element_and_pads_to_128_bits() -> None:
    mask = _mask([3, 5], 0.0)  # 15 bits: two full bytes, then zeros to 16 bytes
    assert mask.dtype == torch.uint8 and mask.shape == (16,)
    assert mask.tolist() == [255, 255] + [0] * 14


def test_mask_bits_are_little_endian_and_drop_about_p() -> None:
    numels = 64 * 128
    mask = _mask([64, 128], 0.25, seed=7, offset=3)
    bits = np.unpackbits(mask.numpy(), count=numels, bitorder="little")
    assert 0.22 < 1 - bits.mean() < 0.28
    assert mask.shape == (numels // 8,)
    assert _mask([64, 128], 1.0).sum().item() == 0


def test_same_seed_and_offset_give_the_same_mask_whatever_the_stream() -> None:
    assert torch.equal(_mask([17, 19], 0.7, 2, 100, parallel=True), _mask([17, 19], 0.7, 2, 100, parallel=False))
    assert not torch.equal(_mask([17, 19], 0.7, 2, 100), _mask([17, 19], 0.7, 2, 101))


def test_mask_refuses_a_p_outside_0_1_and_its_fake_kernel_has_the_shape() -> None:
    with pytest.raises(OpArgumentError) as exc:
        _mask([4], 1.5)
    assert exc.value.op == "_npu_dropout_gen_mask"
    with FakeTensorMode() as mode:
        fake = torch_npu._npu_dropout_gen_mask(mode.from_tensor(torch.randn(2)), [17, 19], 0.5, 0, 0)
    assert fake.shape == (48,) and fake.dtype == torch.uint8


def test_int4pack_puts_element_8j_plus_i_in_nibble_i_of_word_j() -> None:
    weight = torch.tensor([[1, -2, 3, -4, 5, -6, 7, -8, 0, 0, 0, 0, 0, 0, 0, 1]], dtype=torch.int32)
    packed = torch_npu.npu_convert_weight_to_int4pack(weight)
    assert packed.dtype == torch.int32 and packed.shape == (1, 2)
    nibbles = [1, 0xE, 3, 0xC, 5, 0xA, 7, 0x8]
    word = sum(n << (4 * i) for i, n in enumerate(nibbles))
    assert packed[0, 0].item() == word - (1 << 32)  # bit 31 set: a negative int32
    assert packed[0, 1].item() == 1 << 28
    levels = torch.randint(-8, 8, (16, 64), dtype=torch.int32)
    assert torch.equal(unpack_int4(torch_npu.npu_convert_weight_to_int4pack(levels)).to(torch.int32), levels)


@pytest.mark.parametrize(
    ("weight", "argument"),
    [
        (torch.zeros(4, 16, dtype=torch.int8), "weight has dtype torch.int8"),
        (torch.zeros(4, 12, dtype=torch.int32), "last dim 12"),
        (torch.zeros(2, 4, 16, dtype=torch.int32), "2-D"),
        (torch.zeros(16, 8, dtype=torch.int32).t(), "not contiguous"),
    ],
)
def test_int4pack_refuses_what_the_op_refuses(weight: torch.Tensor, argument: str) -> None:
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_convert_weight_to_int4pack(weight)
    assert (exc.value.op, exc.value.argument) == ("npu_convert_weight_to_int4pack", "weight")


def test_dtype_codes_are_the_acl_values_plus_256() -> None:
    assert (torch_npu.float32, torch_npu.bfloat16, torch_npu.int4) == (256, 283, 285)
    assert (torch_npu.hifloat8, torch_npu.float8_e8m0fnu, torch_npu.float4_e2m1fn_x2) == (290, 293, 296)
