"""_npu_flash_attention_unpad_v2 (op-plugin SelfAttentionUnpadAtbV2.cpp): per-sequence unmasked attention
into ``out``, against plain torch; kernel types other than 0 and 2 refused."""

import pytest
import torch

from pytest_npufuse.errors import OpArgumentError
from pytest_npufuse.torch_npu import _npu_flash_attention_unpad_v2


@pytest.mark.parametrize("kernel_type", [None, 0, 2])
def test_packed_sequences_attend_within_themselves(kernel_type):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(7, 4, 8, generator=gen).half()
    k, v = torch.randn(7, 2, 8, generator=gen).half(), torch.randn(7, 2, 8, generator=gen).half()
    out = torch.zeros_like(q)
    lengths = torch.tensor([3, 4], dtype=torch.int32)
    assert _npu_flash_attention_unpad_v2(q, k, v, lengths, 0.25, 4, 2, kernel_type=kernel_type, out=out) is None
    for start, length in ((0, 3), (3, 4)):
        rows = slice(start, start + length)
        for h in range(4):
            scores = 0.25 * q[rows, h].double() @ k[rows, h // 2].double().T
            want = torch.softmax(scores, dim=-1) @ v[rows, h // 2].double()
            assert torch.allclose(out[rows, h].double(), want, atol=2e-3)


def test_other_kernel_types_are_refused():
    q = torch.zeros(2, 1, 8, dtype=torch.float16)
    with pytest.raises(OpArgumentError, match="kernel_type"):
        _npu_flash_attention_unpad_v2(q, q, q, torch.tensor([2]), 1.0, 1, 1, kernel_type=1, out=torch.zeros_like(q))
