"""Training steps as users write them: hooks, in-place updates, no_grad, accumulation, AMP and optimizers
with closures are each modeled and compared, or refused before capture with the argument and the
user's line in the error's fields."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_npufuse import compare
from pytest_npufuse.errors import ArgumentError, CaptureError

X = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
Y = torch.tensor([0, 1, 1, 0])


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _loss(out: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, Y)


def _line_of(function) -> str:
    return f"line {function.__code__.co_firstlineno}"


class NoGradFirstLayer(torch.nn.Module):
    """A frozen feature layer run under no_grad, and a weight rescaled in place under no_grad."""

    def __init__(self) -> None:
        super().__init__()
        self.features, self.head = torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.head.weight.mul_(0.5)
            h = self.features(x)
        return self.head(h)


class Bf16Autocast(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.proj(x).float()


class InPlaceOnLeaf(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.proj.weight.add_(1.0)
        return self.proj(x)


def test_forward_hooks_and_tensor_hooks_are_modeled():
    model = _model()
    model[0].register_forward_hook(lambda module, args, out: out * 2)
    model[2].weight.register_hook(lambda grad: grad * 0.5)
    report = compare(model, X, loss=_loss)
    assert report.phases == ("forward", "backward")
    assert "grad[2.weight]" in report.outputs and report.mismatches == ()


def test_no_grad_inside_the_forward_is_modeled_and_the_frozen_layer_gets_no_gradient():
    report = compare(NoGradFirstLayer(), X, loss=_loss)
    assert report.mismatches == () and "grad[head.weight]" in report.outputs


def test_gradient_accumulation_adds_to_the_gradients_the_model_already_has():
    model = _model()
    for param in model.parameters():
        param.grad = torch.ones_like(param)
    report = compare(model, X, loss=_loss, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    assert report.phases == ("forward", "backward", "optimizer") and report.mismatches == ()
    assert all(param.grad is not None and bool((param.grad == 1).all()) for param in model.parameters())  # untouched


def test_bf16_autocast_in_the_forward_is_modeled():
    report = compare(Bf16Autocast(), X, loss=_loss)
    assert report.mismatches == () and "grad[proj.weight]" in report.outputs


def test_a_module_backward_hook_is_refused_at_the_hook_line():
    model = _model()

    def hook(module, grad_input, grad_output):
        return None

    model[2].register_full_backward_hook(hook)
    with pytest.raises(ArgumentError) as caught:
        compare(model, X, loss=_loss)
    assert (caught.value.argument, caught.value.file, caught.value.entry) == ("model", __file__, _line_of(hook))


def test_a_grad_scaler_in_the_loss_is_refused_at_the_loss_line():
    scaler = torch.amp.GradScaler("cpu")

    def scaled(out):
        return scaler.scale(_loss(out))

    with pytest.raises(ArgumentError) as caught:
        compare(_model(), X, loss=scaled)
    assert (caught.value.argument, caught.value.file, caught.value.entry) == ("loss", __file__, _line_of(scaled))


def test_an_optimizer_whose_step_needs_a_closure_is_refused():
    model = _model()
    with pytest.raises(ArgumentError) as caught:
        compare(model, X, loss=_loss, optimizer=torch.optim.LBFGS(model.parameters()))
    assert caught.value.argument == "optimizer" and "LBFGS" in str(caught.value)


def test_an_optimizer_over_another_model_is_refused():
    with pytest.raises(ArgumentError) as caught:
        compare(_model(), X, loss=_loss, optimizer=torch.optim.SGD(_model().parameters(), lr=0.1))
    assert caught.value.argument == "optimizer"


@pytest.mark.parametrize("loss", [lambda out: out, lambda out: 1.0, lambda out: (out.sum(), out.mean()),
                                  lambda out: out.sum().long()])
def test_a_loss_that_is_not_a_scalar_float_tensor_is_refused(loss):
    with pytest.raises(ArgumentError) as caught:
        compare(_model(), X, loss=loss)
    assert caught.value.argument == "loss"


def test_a_step_on_the_meta_device_is_refused_not_compared_on_no_values():
    with torch.device("meta"):
        model = _model()
    with pytest.raises(ArgumentError) as caught:
        compare(model, X.to("meta"), loss=lambda out: out.sum())
    assert caught.value.argument == "model"


def test_an_in_place_update_of_a_parameter_with_grad_names_the_model_line():
    with pytest.raises(CaptureError) as caught:
        compare(InPlaceOnLeaf(), X, loss=_loss)
    assert caught.value.where.startswith(__file__ + ":")
    assert f"{__file__}:{InPlaceOnLeaf.forward.__code__.co_firstlineno + 1}" in str(caught.value)


def test_a_backward_inside_the_loss_names_the_loss_line():
    def twice(out):
        first = _loss(out)
        first.backward(retain_graph=True)
        return first

    with pytest.raises(CaptureError) as caught:
        compare(_model(), X, loss=twice)
    assert caught.value.where.startswith(__file__ + ":")
    assert f"{__file__}:{twice.__code__.co_firstlineno + 2}" in str(caught.value)


def test_an_error_of_the_loss_names_the_loss_line_not_the_library():
    def broken(out):
        return out.no_such_attribute

    with pytest.raises(CaptureError) as caught:
        compare(_model(), X, loss=broken)
    assert caught.value.where.startswith(__file__ + ":")
    assert f"{__file__}:{broken.__code__.co_firstlineno + 1}" in str(caught.value)


def test_an_exception_the_loss_raises_is_named_with_its_line_not_as_a_graph_break():
    """Dynamo traces the loss and calls a ``raise`` in it an observed exception, a graph break; the step run
    uncompiled shows the user's own error and line."""
    def needs_labels(out):
        raise KeyError("labels")

    with pytest.raises(CaptureError) as caught:
        compare(_model(), X, loss=needs_labels)
    assert caught.value.where == f"{__file__}:{needs_labels.__code__.co_firstlineno + 1}"
    assert "KeyError: 'labels'" in caught.value.problem and "loss=" in caught.value.problem


def test_diagnosing_a_failing_step_leaves_the_users_batchnorm_statistics_alone():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    before = model[1].running_mean.clone()
    with pytest.raises(CaptureError) as exc:
        compare(model, X, loss=lambda out: out.no_such_attribute)
    assert exc.value.where.startswith(__file__ + ":")
    assert torch.equal(model[1].running_mean, before)
