"""An inference model compiled with gradients on: torch's "trying to backprop" warning for an op without an
autograd kernel is replaced by one GradientsWarning per op, at the user's line, with the fix."""

import warnings

import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import GradientsWarning
from pytest_npufuse.pipeline.backend import compile_model

torch.library.define("npu::npufuse_test_no_autograd", "(Tensor x) -> Tensor")
torch.library.register_fake("npu::npufuse_test_no_autograd", lambda x: torch.empty_like(x))
torch.library.impl("npu::npufuse_test_no_autograd", "cpu", lambda x: x * 2)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        return torch_npu.npufuse_test_no_autograd(x @ self.w) + 1


def test_the_backprop_warning_is_explained_once_per_op_at_the_users_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            torch._dynamo.reset()
            compiled, _ = compile_model(Model())
            compiled(torch.randn(8, 16))
    ours = [w for w in caught if issubclass(w.category, GradientsWarning)]
    assert not [w for w in caught if "trying to backprop" in str(w.message)]
    (warning,) = ours
    assert str(warning.message).startswith("npu::npufuse_test_no_autograd has no autograd kernel")
    assert "torch.no_grad()" in str(warning.message) and warning.filename == __file__


def test_under_no_grad_nothing_is_traced_backward_and_nothing_is_said():
    torch._dynamo.reset()
    compiled, _ = compile_model(Model())
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        compiled(torch.randn(8, 16))
    assert not [w for w in caught if issubclass(w.category, GradientsWarning) or "backprop" in str(w.message)]
