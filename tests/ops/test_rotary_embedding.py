"""_npu_rotary_embedding against op-plugin's reference computation (test/test_custom_ops/test_atb_rope.py:
GPT-J pairs) and the NeoX halves, written here in plain torch; in place, returning None."""

import math

import pytest
import torch

from pytest_npufuse.errors import OpArgumentError
from pytest_npufuse.torch_npu import _npu_rotary_embedding

HEAD = 16


def _cache(max_position=12):
    """cos then sin of position x inverse frequency, as vLLM builds cos_sin_cache."""
    inv = 1.0 / (10000 ** (torch.arange(0, HEAD, 2, dtype=torch.float64) / HEAD))
    angles = torch.arange(max_position, dtype=torch.float64).unsqueeze(1) * inv
    return torch.cat((angles.cos(), angles.sin()), dim=-1).float()


def _reference(x, positions, neox):
    """Each head's pairs (x[2i], x[2i+1]) (GPT-J) or (x[i], x[i + D/2]) (NeoX) rotated by position x freq_i."""
    out = x.double().reshape(x.shape[0], -1, HEAD).clone()
    for t, position in enumerate(positions.tolist()):
        for i in range(HEAD // 2):
            angle = position / 10000 ** (2 * i / HEAD)
            a, b = (i, i + HEAD // 2) if neox else (2 * i, 2 * i + 1)
            first, second = out[t, :, a].clone(), out[t, :, b].clone()
            out[t, :, a] = first * math.cos(angle) - second * math.sin(angle)
            out[t, :, b] = second * math.cos(angle) + first * math.sin(angle)
    return out.reshape(x.shape)


@pytest.mark.parametrize("neox", [False, True])
def test_rotates_query_and_key_in_place(neox):
    gen = torch.Generator().manual_seed(1)
    positions = torch.tensor([0, 5, 11, 2], dtype=torch.int32)
    query, key = torch.randn(4, 3 * HEAD, generator=gen).half(), torch.randn(4, 1, HEAD, generator=gen).half()
    want_q, want_k = _reference(query, positions, neox), _reference(key, positions, neox)
    assert _npu_rotary_embedding(positions, query, key, HEAD, _cache(), neox) is None
    assert torch.allclose(query.double(), want_q, atol=2e-3) and torch.allclose(key.double(), want_k, atol=2e-3)


def test_refusals():
    query, key = torch.zeros(2, HEAD, dtype=torch.float16), torch.zeros(2, HEAD, dtype=torch.float16)
    with pytest.raises(OpArgumentError) as exc:
        _npu_rotary_embedding(torch.tensor([0, 1]), query, key, HEAD, _cache()[:, :8], True)
    assert (exc.value.op, exc.value.argument) == ("_npu_rotary_embedding", "cos_sin_cache")
    with pytest.raises(OpArgumentError) as exc:
        _npu_rotary_embedding(torch.tensor([0, 12]), query, key, HEAD, _cache(), True)
    assert (exc.value.op, exc.value.argument) == ("_npu_rotary_embedding", "positions")
    with pytest.raises(OpArgumentError) as exc:
        _npu_rotary_embedding(torch.tensor([0, 1]), query, torch.zeros(3, HEAD, dtype=torch.float16), HEAD, _cache(),
                              True)
    assert (exc.value.op, exc.value.argument) == ("_npu_rotary_embedding", "key")
