"""A training step checked like an inference graph: forward, backward and optimizer captured, priced
and compared (outputs, loss, gradients, updated parameters)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from pytest_npufuse import compare
from pytest_npufuse import torchair as tng
from pytest_npufuse.errors import ArgumentError
from pytest_npufuse.execute.graph import run_graph
from pytest_npufuse.frontend import step as step_module
from pytest_npufuse.frontend.step import StepCapture
from pytest_npufuse.target.catalog import load_catalog


class Mlp(torch.nn.Module):
    def __init__(self, scoped: bool = False, stream: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 4)
        self.scoped, self.stream = scoped, stream

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scoped:
            with tng.scope.super_kernel("mlp", "stream-fusion=1"):
                h = torch.relu(self.up(x))
        elif self.stream:
            with tng.scope.npu_stream_switch("side"):
                h = torch.relu(self.up(x))
            h = tng.scope.npu_wait_tensor(h, h)
        else:
            h = torch.relu(self.up(x))
        return self.down(h)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)


def test_a_step_compares_outputs_loss_gradients_and_updated_parameters():
    model = Mlp()
    x, y = data()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    before = copy.deepcopy(model.state_dict())
    report = compare(model, x, loss=lambda out: F.cross_entropy(out, y), optimizer=optimizer)
    assert report.bit_exact
    assert report.phases == ("forward", "backward", "optimizer")
    assert report.captures == 3
    names = [f"grad[{n}]" for n, _ in model.named_parameters()] + [f"param[{n}]" for n, _ in model.named_parameters()]
    assert report.outputs == ("output", "loss", *names)
    # The user's model and optimizer are untouched: every run works on a copy.
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not optimizer.state
    assert report.variant.time_us > 0 and any(k.name.startswith("backward/") for k in report.variant.kernels)


def test_a_model_compiled_with_the_torchair_backend_trains_as_eager_does():
    model, (x, y) = Mlp(), data()
    eager = copy.deepcopy(model)
    F.cross_entropy(eager(x), y).backward()
    backend = tng.get_npu_backend()
    torch._dynamo.reset()
    F.cross_entropy(torch.compile(model, backend=backend, fullgraph=True)(x), y).backward()
    assert [graph.program.phase for graph in backend.graphs] == ["forward", "backward"]
    for (name, trained), (_, reference) in zip(model.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(trained.grad, reference.grad, msg=name)


def test_forward_scopes_do_not_carry_into_the_backward_as_in_torchair():
    model, (x, y) = Mlp(scoped=True), data()
    report = compare(model, x, loss=lambda out: F.cross_entropy(out, y))
    assert report.phases == ("forward", "backward")
    assert report.superkernels["mlp"].outcome == "fused"
    backward = [k for k in report.variant.kernels if k.name.startswith("backward/")]
    assert backward and all(k.parent is None and k.stream == "default" for k in backward)


def test_backward_kernels_stay_on_the_default_stream():
    model, (x, y) = Mlp(stream=True), data()
    report = compare(model, x, loss=lambda out: F.cross_entropy(out, y))
    assert report.bit_exact and "side" in report.streams
    sides = {k.stream for k in report.variant.kernels if k.name.startswith("backward/")}
    assert sides == {"default"}


class SideStreamGrad(torch.autograd.Function):
    """A weight gradient computed on a side stream in the backward and read on the main stream with
    no event between them."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        with tng.scope.npu_stream_switch("grad"):
            grad_w = x.t() @ grad
        return grad @ w.t(), grad_w * 0.5


READY: list = []


class SyncedSideStreamGrad(SideStreamGrad):
    """The same, with tagged events ordering the side stream after its inputs and the reader after it."""

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        tng.ops.npu_tagged_event_record(READY[0])
        with tng.scope.npu_stream_switch("grad"):
            tng.ops.npu_tagged_event_wait(READY[0])
            grad_w = x.t() @ grad
            tng.ops.npu_tagged_event_record(READY[1])
        tng.ops.npu_tagged_event_wait(READY[1])
        return grad @ w.t(), grad_w * 0.5


class CustomGrad(torch.nn.Module):
    def __init__(self, function: type[torch.autograd.Function]) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.function = function
        self.w = torch.nn.Parameter(torch.randn(64, 64))

    def forward(self, x):
        return self.function.apply(x, self.w).relu()


@pytest.mark.parametrize("synced", [False, True])
def test_a_side_stream_gradient_read_without_an_event_is_a_race_naming_both_accesses(synced):
    READY[:] = [tng.ops.npu_create_tagged_event(tag="g"), tng.ops.npu_create_tagged_event(tag="w")]
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(2))
    model = CustomGrad(SyncedSideStreamGrad if synced else SideStreamGrad)
    report = compare(model, x, loss=lambda out: out.sum(), mode="reduce-overhead")
    assert report.streams == ("default", "grad")
    if synced:
        assert report.races == () and report.bit_exact
        return
    pairs = {(race.first.kernel, race.second.kernel) for race in report.races}
    assert ("backward/MatMulV3", "backward/Mul") in pairs
    race = next(r for r in report.races if r.second.kernel == "backward/Mul")
    assert race.first.stream == "grad" and race.second.stream == "default"
    assert [m.output for m in report.mismatches] == ["grad[w]"]


def test_npugraph_ex_runs_its_backward_op_by_op():
    model, (x, y) = Mlp(), data()
    report = compare(model, x, loss=lambda out: F.cross_entropy(out, y), mode="npugraph_ex")
    assert report.bit_exact and report.phases == ("forward", "backward")


def test_attribution_shows_the_backward_share_of_each_op_type():
    model, (x, y) = Mlp(), data()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    report = compare(model, x, loss=lambda out: F.cross_entropy(out, y), optimizer=sgd)
    table = report.attribution["variant"]
    matmul = table.op_type("MatMulV3")
    assert matmul is not None and 0 < matmul.backward_us <= matmul.total_us
    assert table.op_type("ThresholdGradV2D").backward_pct == pytest.approx(100.0)
    assert table.op_type("Relu").backward_us == 0
    assert table.op_statistic_csv().splitlines()[0].endswith(",Backward Time(us)")
    up = table.module("up")
    assert up is not None and up.kernels >= 3  # its forward matmul and both of its backward matmuls


def test_training_arguments_are_checked():
    model, (x, y) = Mlp(), data()
    loss = lambda out: F.cross_entropy(out, y)  # noqa: E731
    with pytest.raises(ArgumentError) as exc:
        compare(model, x, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    assert exc.value.argument == "optimizer"
    with pytest.raises(ArgumentError) as exc:
        compare(model, x, loss=lambda out: out)
    assert exc.value.argument == "loss"
    with pytest.raises(ArgumentError) as exc:
        compare(model, x, loss=loss, optimizer=torch.optim.SGD(Mlp().parameters(), lr=0.1))
    assert exc.value.argument == "optimizer"
    with pytest.raises(ArgumentError) as exc:
        compare(lambda v: v * 2, x, loss=lambda out: out.sum())
    assert exc.value.argument == "model"


def test_double_backward_is_refused_clearly():
    weight = torch.nn.Parameter(torch.ones(4, 4))
    backend = tng.get_npu_backend()
    torch._dynamo.reset()
    x = torch.ones(2, 4, requires_grad=True)
    out = torch.compile(lambda v: (v @ weight).tanh(), backend=backend, fullgraph=True)(x)
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        grad.sum().backward()
    assert [graph.program.phase for graph in backend.graphs] == ["forward", "backward"]


@torch._dynamo.disable
def _halve(grad: torch.Tensor) -> None:
    grad.mul_(0.5)


class GradWritingSGD(torch.optim.Optimizer):
    """Plain SGD that first halves each gradient in place: in its graph, or (``eager``) in eager code
    Dynamo leaves out of the graph."""

    def __init__(self, params: Any, eager: bool) -> None:
        super().__init__(params, {"lr": 0.1, "eager": eager})

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if group["eager"]:
                    _halve(p.grad)
                else:
                    p.grad.mul_(0.5)
                p.sub_(group["lr"] * p.grad)


@pytest.mark.parametrize("eager", [False, True], ids=["in-graph", "eager"])
def test_gradients_are_compared_as_the_backward_left_them_when_the_step_writes_into_them(eager):
    model, (x, y) = Mlp(), data()
    loss = lambda out: F.cross_entropy(out, y)  # noqa: E731
    torch._dynamo.reset()
    step = StepCapture(model, [x], loss, GradWritingSGD(model.parameters(), eager), load_catalog())
    values = step.run(lambda graph, args: run_graph(graph.gm, graph.program, args, {}))
    reference = copy.deepcopy(model)
    loss(reference(x)).backward()
    for (name, grad), (_, param) in zip(values.grads, values.params):
        expected = dict(reference.named_parameters())[name]
        torch.testing.assert_close(grad, expected.grad, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(param, expected.detach() - 0.1 * (expected.grad * 0.5), msg=name)


def test_each_gradient_is_the_memory_the_backward_wrote_not_a_copy(monkeypatch):
    """Autograd puts a backward output into ``.grad`` as it is when nothing else holds it, and copies it
    otherwise: the step must not keep the graphs' outputs (BERT-base: 440 MB copied per run)."""
    model, (x, y) = Mlp(), data()
    written, grads = [], []
    snapshot = step_module._snapshot
    monkeypatch.setattr(step_module, "_snapshot", lambda grad: grads.append(grad.untyped_storage().data_ptr())
                        or snapshot(grad))

    def execute(graph, args):
        result = run_graph(graph.gm, graph.program, args, {})
        written.extend(out.untyped_storage().data_ptr() for out in result.outputs if isinstance(out, torch.Tensor))
        return result

    torch._dynamo.reset()
    values = StepCapture(model, [x], lambda out: F.cross_entropy(out, y), None, load_catalog()).run(execute)
    assert len(grads) == 4 and set(grads) <= set(written)
    assert values.kernels_run > 0


def test_a_step_refuses_options_for_a_scope_none_of_its_graphs_define():
    x, y = data()
    report = compare(Mlp(scoped=True), x, loss=lambda out: F.cross_entropy(out, y), options={"mlp": "stream-fusion=1"})
    assert "mlp" in report.superkernels
    with pytest.raises(ArgumentError, match=r"scope 'mpl' was not found in the captured graph \(scopes seen: 'mlp'\)") as misspelt:
        compare(Mlp(scoped=True), x, loss=lambda out: F.cross_entropy(out, y), options={"mpl": "stream-fusion=1"})
    assert misspelt.value.argument == "options" and misspelt.value.entry == "options['mpl']"
