"""torch_npu's npu_max / npu_min (and their gradients), npu_sort_v2 and npu_one_hot against their API pages."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name, reduce", [("npu_max", torch.max), ("npu_min", torch.min)])
def test_max_and_min_return_values_and_int32_indices_along_dim(name, reduce, keepdim):
    x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    values, indices = getattr(torch_npu, name)(x, 1, keepdim)
    expected_values, expected_indices = reduce(x, dim=1, keepdim=keepdim)
    assert indices.dtype == torch.int32
    assert torch.equal(values, expected_values) and torch.equal(indices.long(), expected_indices)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name, reduce", [("npu_max", torch.max), ("npu_min", torch.min)])
def test_max_and_min_gradients_land_on_the_chosen_elements(name, reduce, keepdim):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1), requires_grad=True)
    weights = torch.randn(4, generator=torch.Generator().manual_seed(2))
    weights = weights[:, None] if keepdim else weights
    (getattr(torch_npu, name)(x, -1, keepdim)[0] * weights).sum().backward()
    reference = x.detach().clone().requires_grad_(True)
    (reduce(reference, dim=-1, keepdim=keepdim)[0] * weights).sum().backward()
    assert torch.equal(x.grad, reference.grad)


def test_sort_v2_sorts_the_last_dim_values_only():
    x = torch.randn(3, 7, generator=torch.Generator().manual_seed(3))
    assert torch.equal(torch_npu.npu_sort_v2(x), torch.sort(x).values)
    assert torch.equal(torch_npu.npu_sort_v2(x, descending=True), torch.sort(x, descending=True).values)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_sort_v2(x, dim=0)
    assert (exc.value.op, exc.value.argument) == ("npu_sort_v2", "dim")


def test_one_hot_matches_the_pages_example_and_fills_on_and_off_values():
    page = torch_npu.npu_one_hot(torch.tensor([5, 3, 2, 1], dtype=torch.int32), depth=5)
    expected = torch.zeros(4, 5)
    expected[1, 3] = expected[2, 2] = expected[3, 1] = 1
    assert page.dtype == torch.float32 and torch.equal(page, expected)
    labels = torch.tensor([[0, 2], [1, 1]])
    filled = torch_npu.npu_one_hot(labels, depth=3, on_value=2.5, off_value=-1)
    assert filled.shape == (2, 2, 3)
    assert torch.equal(filled, torch.where(torch.nn.functional.one_hot(labels, 3).bool(), 2.5, -1.0))


def test_one_hot_refuses_another_axis_and_float_indices():
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_one_hot(torch.tensor([1]), num_classes=0, depth=2)
    assert (exc.value.op, exc.value.argument) == ("npu_one_hot", "num_classes")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_one_hot(torch.tensor([1.0]), depth=2)
    assert exc.value.argument == "input"


def test_index_ops_pass_opcheck():
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(4))
    values, indices = torch_npu.npu_max(x, 1)
    for op, args in (
        (torch.ops.npu.npu_max.default, (x, 1, True)),
        (torch.ops.npu.npu_min.default, (x, 0)),
        (torch.ops.npu.npu_max_backward.default, (values, 1, indices, [3, 5], False)),
        (torch.ops.npu.npu_sort_v2.default, (x,)),
        (torch.ops.npu.npu_one_hot.default, (indices, -1, 5, 1, 0)),
    ):
        torch.library.opcheck(op, args)
