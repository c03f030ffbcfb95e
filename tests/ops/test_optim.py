"""torch_npu.optim.NpuFusedAdamW: torch_npu's AdamW over one combined buffer, and what that buys a compiled
optimizer step (a few kernels over one buffer instead of a dozen per parameter); and torch_npu.npu_apply_adam_w,
the one-tensor AdamW step op with out=(var, m, v)."""

import copy

import numpy
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


def _adam_w_golden(var, m, v, grad, max_grad_norm, beta1_power, beta2_power, lr, weight_decay, beta1, beta2, eps,
                   amsgrad, maximize):
    """op-plugin test/test_base_ops/test_apply_adam_w.py's cpu_op_exec, in float64 numpy."""
    gt = -grad if maximize else grad
    m_out = m * beta1 - (beta1 + (-1)) * gt
    v_out = v * beta2 - (beta2 + (-1)) * gt * gt
    var_t = var * (1 + (-lr * weight_decay))
    beta1_power_out, beta2_power_out = beta1_power * beta1, beta2_power * beta2
    second = numpy.maximum(max_grad_norm, v_out) if amsgrad else v_out
    denom = numpy.sqrt(second / (1 - beta2_power_out)) + eps
    return var_t + (-lr * m_out / (1 - beta1_power_out)) / denom, m_out, v_out


@pytest.mark.parametrize(("amsgrad", "maximize"), [(False, False), (True, False), (False, True), (True, True)])
def test_apply_adam_w_updates_out_as_op_plugins_golden(amsgrad: bool, maximize: bool) -> None:
    rng = numpy.random.default_rng(3)
    var, m, v, grad, max_grad_norm = (rng.uniform(0, 1, (64, 5)) for _ in range(5))
    scalars = tuple(rng.uniform(0.0, 1.0, 7))  # beta1_power .. epsilon, numpy scalars as torch_npu's tests pass
    out = tuple(torch.from_numpy(t).float() for t in (var, m, v))
    returned = torch_npu.npu_apply_adam_w(*scalars, torch.from_numpy(grad).float(),
                                          torch.from_numpy(max_grad_norm).float() if amsgrad else None, amsgrad,
                                          maximize, out=out)
    assert all(r is o for r, o in zip(returned, out))
    expected = _adam_w_golden(var, m, v, grad, max_grad_norm, *scalars, amsgrad, maximize)
    for actual, wanted in zip(out, expected):
        numpy.testing.assert_allclose(actual.numpy(), wanted, rtol=1e-4, atol=1e-5)


def test_apply_adam_w_compiles_to_one_functional_node_and_writes_the_state() -> None:
    gen = torch.Generator().manual_seed(2)
    state, grad = [torch.rand(8, generator=gen) for _ in range(3)], torch.rand(8, generator=gen)

    def step(var: torch.Tensor, m: torch.Tensor, v: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        torch_npu.npu_apply_adam_w(0.9, 0.99, 0.01, 0.1, 0.9, 0.99, 1e-8, grad, None, False, False, out=(var, m, v))
        return var.sum()

    eager = [t.clone() for t in state]
    step(*eager, grad)
    compiled = [t.clone() for t in state]
    torch.compile(step, backend="aot_eager", fullgraph=True)(*compiled, grad)
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))
    assert not torch.equal(eager[0], state[0])


def test_apply_adam_w_refusals_name_the_argument() -> None:
    t = torch.zeros(4)
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_apply_adam_w(0.9, 0.99, 0.01, 0.1, 0.9, 0.99, 1e-8, t, None, False, False)
    assert (exc.value.op, exc.value.argument) == ("npu_apply_adam_w", "out")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_apply_adam_w(0.9, 0.99, 0.01, 0.1, 0.9, 0.99, 1e-8, t, None, True, False, out=(t, t, t))
    assert (exc.value.op, exc.value.argument) == ("npu_apply_adam_w", "max_grad_norm")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_apply_adam_w(0.9, 0.99, 0.01, 0.1, 0.9, 0.99, 1e-8, torch.zeros(5), None, False, False,
                                   out=(t, t, t))
    assert (exc.value.op, exc.value.argument) == ("npu_apply_adam_w", "grad")
