"""torch_npu's layout ops (npu_transpose, npu_broadcast, npu_slice, npu_pad) against their API pages."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError

X = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)


def test_transpose_permutes_into_a_contiguous_tensor():
    y = torch_npu.npu_transpose(X, [2, 0, 1])
    assert y.shape == (4, 2, 3) and y.is_contiguous()
    assert torch.equal(y, X.permute(2, 0, 1))
    assert torch.equal(torch_npu.npu_transpose(X, (-1, 0, 1), require_contiguous=False), y)


def test_broadcast_repeats_size_one_dims_and_adds_leading_dims():
    column = torch.tensor([[1], [2], [3]])
    assert torch.equal(torch_npu.npu_broadcast(column, [3, 4]), torch.tensor([[1] * 4, [2] * 4, [3] * 4]))
    y = torch_npu.npu_broadcast(column, [2, 3, 4])
    assert y.shape == (2, 3, 4) and y.is_contiguous() and torch.equal(y[1], y[0])


def test_slice_takes_the_block_at_offsets():
    page = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], dtype=torch.float16)
    assert torch.equal(torch_npu.npu_slice(page, [0, 0], [2, 2]), torch.tensor([[1, 2], [6, 7]], dtype=torch.float16))
    assert torch.equal(torch_npu.npu_slice(X, [1, 1, 2], [1, 2, 2]), X[1:2, 1:3, 2:4])


def test_pad_pads_each_dim_before_and_after_with_zeros():
    row = torch.tensor([[20, 20, 10, 10]], dtype=torch.float16)
    expected = torch.zeros(3, 6, dtype=torch.float16)
    expected[1, 1:5] = row
    assert torch.equal(torch_npu.npu_pad(row, [1, 1, 1, 1]), expected)
    assert torch.equal(torch_npu.npu_pad(X, [1, 0]), torch.cat([torch.zeros(1, 3, 4), X]))


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda: torch_npu.npu_transpose(X, [0, 0, 1]), "perm"),
        (lambda: torch_npu.npu_broadcast(X, [3, 4]), "size"),
        (lambda: torch_npu.npu_slice(X, [0, 2, 0], [1, 2, 4]), "offsets"),
        (lambda: torch_npu.npu_pad(X, [1, -1]), "paddings"),
    ],
)
def test_layout_ops_refuse_arguments_that_leave_the_tensor(call, named):
    with pytest.raises(OpArgumentError) as error:
        call()
    assert error.value.argument == named


def test_layout_ops_pass_opcheck():
    for op, args in (
        (torch.ops.npu.npu_transpose.default, (X, [1, 2, 0])),
        (torch.ops.npu.npu_broadcast.default, (X[:, :1], [2, 3, 4])),
        (torch.ops.npu.npu_slice.default, (X, [0, 1, 1], [2, 2, 3])),
        (torch.ops.npu.npu_pad.default, (X, [0, 1, 2, 0, 1, 1])),
    ):
        torch.library.opcheck(op, args)
