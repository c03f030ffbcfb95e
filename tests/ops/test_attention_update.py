"""npu_attention_update against its API page's formula (op-plugin
docs/zh/custom_APIs/torch_npu/torch_npu-npu_attention_update.md): merging SP parts equals attending
over all the keys at once."""

import pytest
import torch

from pytest_npufuse.errors import OpArgumentError
from pytest_npufuse.torch_npu import npu_attention_update


def _attend(q, k, v):
    """Per row: softmax(q . k) v and the log-sum-exp of the scores, in float64."""
    scores = q @ k.T
    return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_merging_parts_equals_attending_over_all_keys(dtype):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=gen, dtype=torch.float64) for shape in ((6, 16), (30, 16), (30, 16)))
    splits = (0, 7, 19, 30)
    parts = [_attend(q, k[a:b], v[a:b]) for a, b in zip(splits, splits[1:])]
    out, lse = npu_attention_update([part[1].float() for part in parts], [part[0].to(dtype) for part in parts], 1)
    want_out, want_lse = _attend(q, k, v)
    assert out.dtype == dtype and lse.dtype == torch.float32 and lse.shape == (6,)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(out.double(), want_out, atol=tolerance)
    assert torch.allclose(lse.double(), want_lse, atol=1e-5)


def test_a_row_no_part_saw_is_zero():
    lse = [torch.tensor([float("-inf"), 0.0]), torch.tensor([float("-inf"), 0.0])]
    out, merged = npu_attention_update(lse, [torch.ones(2, 8), torch.ones(2, 8)], 0)
    assert torch.equal(out[0], torch.zeros(8)) and merged[0] == float("-inf")
    assert torch.allclose(out[1], torch.ones(8)) and torch.isclose(merged[1], torch.log(torch.tensor(2.0)))


@pytest.mark.parametrize(
    ("lse", "local_out", "update_type", "named"),
    [
        ([torch.zeros(2)], [torch.zeros(2, 8)], 2, "update_type"),
        ([torch.zeros(2)], [torch.zeros(2, 8), torch.zeros(2, 8)], 0, "lse"),
        ([torch.zeros(2)], [torch.zeros(2, 12)], 0, "local_out"),
        ([torch.zeros(2, dtype=torch.float16)], [torch.zeros(2, 8)], 0, "lse[0]"),
        ([torch.zeros(3)], [torch.zeros(2, 8)], 0, "lse"),
    ],
)
def test_refusals_name_the_argument(lse, local_out, update_type, named):
    with pytest.raises(OpArgumentError) as exc:
        npu_attention_update(lse, local_out, update_type)
    assert (exc.value.op, exc.value.argument) == ("npu_attention_update", named)
