"""A training step's optimizer graph captured on a second thread beside the forward's and the backward's
numerics: the same values, one capture per graph, and every error raised to the caller as it was raised."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

from pytest_npufuse import compare
from pytest_npufuse.errors import CaptureError, KernelError
from pytest_npufuse.execute.graph import run_graph
from pytest_npufuse.frontend import backend as backend_module
from pytest_npufuse.frontend import step as step_module
from pytest_npufuse.frontend.step import StepCapture
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.vocabulary import Phase


class Net(torch.nn.Module):
    """Two layers the loss reaches, and one it never does (its parameters get no gradient)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 4)
        self.unused = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)


@pytest.fixture
def capture_threads(monkeypatch):
    """Each captured graph's phase with the name of the thread that captured it."""
    seen: list[tuple[str, str]] = []
    keep = backend_module.CaptureBackend._keep

    def recorded(self, graph):
        seen.append((str(graph.phase), threading.current_thread().name))
        return keep(self, graph)

    monkeypatch.setattr(backend_module.CaptureBackend, "_keep", recorded)
    return seen


def _step(optimizer_class=torch.optim.AdamW, **options) -> tuple[StepCapture, step_module.StepValues]:
    model, (x, y) = Net(), batch()
    optimizer = optimizer_class(model.parameters(), lr=1e-2, **options)
    torch._dynamo.reset()
    step = StepCapture(model, [x], lambda out: F.cross_entropy(out, y), optimizer, load_catalog())
    return step, step.run(lambda graph, args: run_graph(graph.gm, graph.program, args, {}))


@pytest.mark.parametrize("options", [{"foreach": True}, {"foreach": False}], ids=["foreach", "for-loop"])
def test_the_step_is_captured_beside_the_numerics_with_the_values_of_a_step_captured_after_them(
    monkeypatch, capture_threads, options
):
    beside, overlapped = _step(**options)
    assert capture_threads == [
        ("forward", "MainThread"), ("backward", "MainThread"), ("optimizer", "npufuse-step-capture_0"),
    ]
    assert [graph.phase for graph in beside.graphs] == [Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER]
    monkeypatch.setattr(step_module, "_capturable_beside", lambda model, optimizer: False)
    _, sequential = _step(**options)
    assert capture_threads[3:] == [("forward", "MainThread"), ("backward", "MainThread"), ("optimizer", "MainThread")]
    assert torch.equal(overlapped.loss, sequential.loss) and torch.equal(overlapped.outputs, sequential.outputs)
    for (name, a), (_, b) in zip(overlapped.grads + overlapped.params, sequential.grads + sequential.params):
        assert (a is None) == (b is None), name
        if a is not None:
            assert torch.equal(a, b) and a.stride() == b.stride(), name
    assert dict(overlapped.grads)["unused.weight"] is None
    assert overlapped.state_bytes == sequential.state_bytes > 0
    assert overlapped.kernels_run == sequential.kernels_run


def test_a_step_with_its_own_eager_code_is_captured_after_the_numerics(capture_threads):
    """An optimizer that is not torch.optim's may run code eagerly before its graph (torch_npu's fused
    optimizers combine their buffers): it is never run on placeholder gradients."""

    class OwnSGD(torch.optim.SGD):
        """Defined here, not in torch.optim."""

    _, values = _step(OwnSGD)
    assert capture_threads[-1] == ("optimizer", "MainThread") and values.kernels_run > 0


def test_an_error_of_the_capture_beside_the_numerics_reaches_the_caller_unchanged(monkeypatch):
    raised: list[tuple[CaptureError, str]] = []
    build = backend_module.build_program

    def refuse_the_step(gm, catalog, *args, phase=Phase.FORWARD, **kwargs):
        if phase is Phase.OPTIMIZER:
            error = CaptureError("the optimizer step uses an op the target lacks", where="train.py:42")
            raised.append((error, threading.current_thread().name))
            raise error
        return build(gm, catalog, *args, phase=phase, **kwargs)

    monkeypatch.setattr(backend_module, "build_program", refuse_the_step)
    model, (x, y) = Net(), batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    threads = threading.active_count()
    with pytest.raises(CaptureError) as caught:
        compare(model, x, loss=lambda out: F.cross_entropy(out, y), optimizer=optimizer)
    assert caught.value.where == "train.py:42"
    assert [(caught.value, "npufuse-step-capture_0")] == raised
    assert threading.active_count() == threads


class BadLookup(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(4, 8))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table[ids + 4].sum(dim=-1)  # every id past the table's 4 rows


def test_an_error_of_the_numerics_beside_the_capture_names_the_users_line(capture_threads):
    model = BadLookup()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    threads = threading.active_count()
    with pytest.raises(KernelError) as exc:
        compare(model, torch.tensor([0, 1, 2]), loss=lambda out: out.sum(), optimizer=optimizer)
    assert exc.value.op == "aten::index"
    assert ("optimizer", "npufuse-step-capture_0") in capture_threads  # it was being captured meanwhile
    assert threading.active_count() == threads
