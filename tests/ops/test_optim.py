"""torch_npu.optim.NpuFusedAdamW: torch_npu's AdamW over one combined buffer, and what that buys a
compiled optimizer step (a few kernels over one buffer instead of a dozen per parameter)."""

import copy

import pytest
import torch
import torch.nn.functional as F

from pytest_npufuse import compare, torch_npu
from pytest_npufuse.errors import OpArgumentError


class Stack(torch.nn.Module):
    def __init__(self, layers: int = 6) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def data():
    gen = torch.Generator().manual_seed(1)
    return torch.randn(16, 32, generator=gen), torch.randn(16, 32, generator=gen)


def one_step(model, optimizer, x, y):
    F.mse_loss(model(x), y).backward()
    optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def test_one_step_matches_adamw_and_leaves_parameters_views_of_one_buffer():
    model, (x, y) = Stack(), data()
    reference = copy.deepcopy(model)
    fused = torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    adamw = torch.optim.AdamW(reference.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    for got, want in zip(one_step(model, fused, x, y), one_step(reference, adamw, x, y)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    (parts,) = fused.combined
    (part,) = parts
    storage = part["param"].untyped_storage().data_ptr()
    assert all(p.untyped_storage().data_ptr() == storage for p in model.parameters())


def test_arguments_and_rules_are_torch_npus():
    model = Stack(1)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.optim.NpuFusedAdamW(model.parameters(), betas=(1.0, 0.999))
    assert (exc.value.op, exc.value.argument) == ("NpuFusedAdamW", "betas[0]")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.optim.NpuFusedAdamW(model.parameters()).zero_grad(set_to_none=True)
    assert (exc.value.op, exc.value.argument) == ("NpuFusedAdamW.zero_grad", "set_to_none")


def test_a_compiled_fused_step_is_a_few_kernels_over_one_buffer():
    x, y = data()

    def optimizer_kernels(make):
        model = Stack()
        report = compare(model, x, loss=lambda out: F.mse_loss(out, y), optimizer=make(model.parameters()))
        assert report.bit_exact and report.phases[-1] == "optimizer"
        return [k for k in report.variant.kernels if k.name.startswith("optimizer/")]

    fused = optimizer_kernels(lambda params: torch_npu.optim.NpuFusedAdamW(params, lr=1e-2))
    per_parameter = optimizer_kernels(lambda params: torch.optim.AdamW(params, lr=1e-2, foreach=False))
    assert len(fused) < len(per_parameter) / 4
    assert sum(k.duration_us for k in fused) < sum(k.duration_us for k in per_parameter)
