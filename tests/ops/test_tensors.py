"""npu_dtype_cast and empty_with_format as their op-plugin pages describe them."""

from __future__ import annotations

import torch

from pytest_npufuse import torch_npu


def test_dtype_cast_is_tensor_to_and_its_gradient_casts_back() -> None:
    assert torch_npu.npu_dtype_cast(torch.tensor([0, 0.5, -1.0]), dtype=torch.int).tolist() == [0, 0, -1]
    x = torch.randn(3, 3, requires_grad=True)
    y = torch_npu.npu_dtype_cast(x, torch.half)
    (grad,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert y.dtype == torch.half and grad.dtype == torch.float32 and torch.equal(grad, torch.ones(3, 3))


def test_empty_with_format_makes_zeros_on_the_modeled_npu_in_the_asked_format() -> None:
    cache = torch_npu.empty_with_format((2, 16, 32), dtype=torch.bfloat16, device="npu", acl_format=29)
    assert cache.dtype == torch.bfloat16 and not cache.any()
    assert torch_npu.get_npu_format(cache) == torch_npu.Format.FRACTAL_NZ
    assert torch_npu.get_npu_format(torch_npu.empty_with_format([8], acl_format=29)) == torch_npu.Format.ND
