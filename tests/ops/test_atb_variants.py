"""_npu_flash_attention_unpad_v2 (op-plugin SelfAttentionUnpadAtbV2.cpp: per-sequence unmasked attention)
and _npu_flash_attention_v3 (SelfAttentionAtbV3.cpp: per-sequence causal attention) into ``out``, against
plain torch; the kernel and mask types op-plugin rejects are refused."""

import pytest
import torch

from pytest_npufuse.errors import OpArgumentError
from pytest_npufuse.torch_npu import _npu_flash_attention_unpad_v2, _npu_flash_attention_v3


def _inputs():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(7, 4, 8, generator=gen).half()
    return q, torch.randn(7, 2, 8, generator=gen).half(), torch.randn(7, 2, 8, generator=gen).half()


def _check(out, q, k, v, causal):
    """Sequences of 3 and 4 packed tokens; GQA head h reads KV head h // 2."""
    for start, length in ((0, 3), (3, 4)):
        rows = slice(start, start + length)
        for h in range(4):
            scores = 0.25 * q[rows, h].double() @ k[rows, h // 2].double().T
            if causal:
                scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
            want = torch.softmax(scores, dim=-1) @ v[rows, h // 2].double()
            assert torch.allclose(out[rows, h].double(), want, atol=2e-3)


@pytest.mark.parametrize("kernel_type", [None, 0, 2])
def test_packed_sequences_attend_within_themselves(kernel_type):
    q, k, v = _inputs()
    out = torch.zeros_like(q)
    lengths = torch.tensor([3, 4], dtype=torch.int32)
    assert _npu_flash_attention_unpad_v2(q, k, v, lengths, 0.25, 4, 2, kernel_type=kernel_type, out=out) is None
    _check(out, q, k, v, causal=False)


def test_v3_is_causal_within_each_sequence():
    q, k, v = _inputs()
    out = torch.zeros_like(q)
    marker = torch.triu(torch.ones(128, 128), 1).half()
    assert _npu_flash_attention_v3(q, k, v, marker, torch.tensor([3, 4], dtype=torch.int32), 0.25, 4, 2, out=out) is None
    _check(out, q, k, v, causal=True)


def test_v3_refuses_other_masks():
    q, k, v = _inputs()
    lengths = torch.tensor([3, 4], dtype=torch.int32)
    marker = torch.triu(torch.ones(128, 128), 1).half()
    with pytest.raises(OpArgumentError) as exc:
        _npu_flash_attention_v3(q, k, v, marker, lengths, 0.25, 4, 2, mask_type=0, out=torch.zeros_like(q))
    assert (exc.value.op, exc.value.argument) == ("_npu_flash_attention_v3", "mask_type")
    with pytest.raises(OpArgumentError) as exc:
        _npu_flash_attention_v3(q, k, v, torch.zeros(128, 128).half(), lengths, 0.25, 4, 2, out=torch.zeros_like(q))
    assert (exc.value.op, exc.value.argument) == ("_npu_flash_attention_v3", "mask")


def test_other_kernel_types_are_refused():
    q = torch.zeros(2, 1, 8, dtype=torch.float16)
    with pytest.raises(OpArgumentError) as exc:
        _npu_flash_attention_unpad_v2(q, q, q, torch.tensor([2]), 1.0, 1, 1, kernel_type=1, out=torch.zeros_like(q))
    assert (exc.value.op, exc.value.argument) == ("_npu_flash_attention_unpad_v2", "kernel_type")
