"""Capture of a training step: the forward with its loss, the backward AOTAutograd derives, and the
optimizer step, each a graph of its own through the capture backend, run as one step.

A step is what a training loop does once, as a user writes it with ``torch.compile``::

    outputs = model(*inputs)            # compiled with the loss: one forward graph (Phase.FORWARD)
    loss(outputs).backward()            # AOTAutograd's backward graph (Phase.BACKWARD)
    optimizer.step()                    # compiled: the optimizer's graph(s) (Phase.OPTIMIZER)

The user hands the model, its inputs, ``loss`` (the model's outputs -> a scalar tensor) and optionally
an optimizer built over the model's parameters. Every run works on a deep copy of ``(model,
optimizer)`` taken together (so the copy's optimizer updates the copy's parameters) and leaves the
user's objects untouched; the forward is compiled with the model as an argument, so a second copy
reuses the same graphs. An optimizer's graph is specialised to its instance (Dynamo guards on it), so
a second run recaptures that graph only.

Scopes and streams in the backward, as TorchAir has them: TorchAir's scope markers
(``python/torchair/scope/_scope.py``) are side-effect ops with no autograd formula, its
``_compile_graph_with_aot`` (``python/torchair/npu_fx_compiler.py``) hands the same compiler the
forward and the backward, and its converter applies scope attributes to the ops it converts between a
marker's enter and exit in the graph at hand (``python/torchair/scope/_scope_attr.py``). AOTAutograd's
partitioner copies the forward's markers to the start of the backward graph, where they enclose no op.
So a forward scope does not carry into the backward: backward kernels run outside every SuperKernel
scope, on the default stream. A scope written inside a custom ``autograd.Function``'s ``backward`` is
in the backward graph and applies there, as in the forward.
"""

from __future__ import annotations

import copy
import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..errors import ArgumentError, CaptureError, NpufuseError
from ..target.catalog import OpCatalog
from ..vocabulary import Phase
from .backend import CaptureBackend, CapturedGraph, GraphRunner
from .dynamo import call_compiled, root_cause, value_dependent_capture

# torch's warning when anything touches torch.jit.script_method (Dynamo does, tracing an optimizer).
JIT_DEPRECATION = r"`torch\.jit\.script_method` is deprecated"

# A graph's inputs -> a result whose ``outputs`` are the graph's flat outputs and ``kernels_run`` the kernels
# it computed (an ``Execution``).
GraphExecutor = Callable[[CapturedGraph, list[Any]], Any]


@dataclass(frozen=True)
class StepValues:
    """What one run of a step computed: the model's outputs, the loss, each parameter's gradient
    after the backward (None when the loss does not depend on it) and each parameter after the
    optimizer step, by parameter name; ``kernels_run``: how many kernels the executor computed."""

    outputs: Any
    loss: torch.Tensor
    grads: tuple[tuple[str, torch.Tensor | None], ...]
    params: tuple[tuple[str, torch.Tensor], ...]
    kernels_run: int
    parameter_bytes: int = 0
    gradient_bytes: int = 0
    state_bytes: int = 0
    """The device memory the step keeps: parameters, their gradients, the optimizer's state after it."""


def _forward_with_loss(model: torch.nn.Module, loss: Callable[[Any], Any], *inputs: Any) -> tuple[Any, Any]:
    outputs = model(*inputs)
    return outputs, loss(outputs)


def _optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    optimizer.step()


class StepCapture:
    """A training step of ``model`` on ``inputs``, captured on its first :meth:`run` and run again on
    a fresh copy of the model and optimizer by later runs."""

    def __init__(
        self,
        model: Any,
        inputs: Sequence[Any],
        loss: Callable[[Any], Any],
        optimizer: torch.optim.Optimizer | None,
        catalog: OpCatalog,
    ) -> None:
        _check_step(model, loss, optimizer)
        self.model = model
        self.inputs = tuple(inputs)
        self.loss = loss
        self.optimizer = optimizer
        self._graphs: list[CapturedGraph] = []
        forward = CaptureBackend(catalog, self._runner, self._graphs)
        step = CaptureBackend(catalog, self._runner, self._graphs, phase=Phase.OPTIMIZER)
        self._forward = torch.compile(_forward_with_loss, backend=forward, fullgraph=True, dynamic=False)
        self._step = torch.compile(_optimizer_step, backend=step, fullgraph=False, dynamic=False)
        self._execute: GraphExecutor | None = None
        self._kernels_run = 0

    @property
    def graphs(self) -> list[CapturedGraph]:
        """Every graph captured so far, in the order the step first ran them."""
        return self._graphs

    def run(self, execute: GraphExecutor) -> StepValues:
        """One step on a fresh copy of the model and optimizer, every graph computed by ``execute``."""
        model, optimizer = copy.deepcopy((self.model, self.optimizer))
        inputs = [copy.deepcopy(x) if isinstance(x, torch.Tensor) else x for x in self.inputs]
        self._execute, self._kernels_run = execute, 0
        try:
            outputs, loss = self._call_forward(model, inputs)
            loss.backward()
            grads = tuple((name, _snapshot(p.grad)) for name, p in model.named_parameters())
            if optimizer is not None:
                self._call_step(optimizer)
        finally:
            self._execute = None
        params = tuple((name, p.detach()) for name, p in model.named_parameters())
        return StepValues(
            outputs, loss.detach(), grads, params, self._kernels_run,
            parameter_bytes=sum(_nbytes(p) for _, p in params),
            gradient_bytes=sum(_nbytes(g) for _, g in grads if g is not None),
            state_bytes=_state_bytes(optimizer),
        )

    def _call_forward(self, model: torch.nn.Module, inputs: Sequence[Any]) -> tuple[Any, torch.Tensor]:
        compiled = functools.partial(self._forward, model, self.loss)
        outputs, loss = call_compiled(self.model, compiled, inputs, grad=True)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
            raise ArgumentError(
                f"loss= returned {_describe(loss)}, not a scalar floating-point tensor; return the loss to "
                "call backward() on, e.g. loss=lambda out: F.cross_entropy(out, labels)."
            )
        if not loss.requires_grad:
            raise ArgumentError(
                "loss= returned a tensor that does not require grad: no parameter of the model reaches it (or the "
                "model runs under torch.no_grad()), so there is no backward to model."
            )
        return outputs, loss

    def _call_step(self, optimizer: torch.optim.Optimizer) -> None:
        try:
            with value_dependent_capture(), warnings.catch_warnings():
                # Dynamo, tracing through torch.optim, touches torch.jit.script_method and so raises torch's
                # own deprecation warning on every capture: noise the user's step did not cause.
                warnings.filterwarnings("ignore", message=JIT_DEPRECATION, category=DeprecationWarning)
                self._step(optimizer)
        except NpufuseError:
            raise
        except Exception as exc:
            root = root_cause(exc)
            if isinstance(root, NpufuseError):
                raise root from None
            raise CaptureError(
                f"the optimizer step ({type(optimizer).__name__}.step()) could not be captured: "
                f"{type(root).__name__}: {root}"
            ) from exc

    def _runner(self, graph: CapturedGraph) -> GraphRunner:
        """The graph's callable for Dynamo. It hands the graph's outputs on and keeps none of them: a
        gradient the backward returns that something else still holds is copied by autograd into
        ``.grad`` instead of becoming it (AccumulateGrad steals only an unshared tensor)."""

        def run(*args: Any) -> list[Any]:
            if self._execute is None:
                raise CaptureError(
                    f"the {graph.phase} graph was called outside the training step being modeled; a modeled "
                    "step calls its compiled graphs only inside compare()/check()."
                )
            result = self._execute(graph, list(args))
            self._kernels_run += result.kernels_run
            return result.outputs

        return run


def _snapshot(grad: torch.Tensor | None) -> torch.Tensor | None:
    """A gradient as the backward left it, whatever the optimizer step does to it after.

    A copy-on-write clone (``torch._lazy_clone``): it shares the gradient's memory until the gradient or
    the copy is written, and only then copies it. An optimizer that writes into its gradients (in a
    graph or in eager code between graphs) pays for the copy; most read them only, and a copy of every
    gradient (BERT-base: 440 MB) would be time and memory spent for nothing."""
    return None if grad is None else torch._lazy_clone(grad.detach())


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _state_bytes(optimizer: torch.optim.Optimizer | None) -> int:
    """Bytes of the optimizer's tensors after its step: its state, and what a fused optimizer combined."""
    if optimizer is None:
        return 0
    tensors = {id(t): t for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)}
    for parts in getattr(optimizer, "combined", ()):
        for part in parts:
            for name in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                if isinstance(part.get(name), torch.Tensor):
                    tensors[id(part[name])] = part[name]
    return sum(_nbytes(t) for t in tensors.values())


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {list(value.shape)}"
    return f"a {type(value).__name__}"


def _check_step(model: Any, loss: Any, optimizer: Any) -> None:
    """A step needs a module (its parameters are what gradients and updates are compared by), a
    loss to call backward on, and an optimizer (if any) over that module's parameters."""
    if not isinstance(model, torch.nn.Module):
        raise ArgumentError(
            f"a training step needs an nn.Module (its named parameters get gradients and updates), not "
            f"{type(model).__name__}; wrap the function in a module."
        )
    if not callable(loss):
        raise ArgumentError(
            f"loss= must be a callable taking the model's outputs and returning the scalar loss, not {loss!r}."
        )
    if optimizer is None:
        return
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ArgumentError(
            f"optimizer= must be a torch.optim.Optimizer over the model's parameters, not {type(optimizer).__name__}."
        )
    owned = {id(p) for p in model.parameters()}
    foreign = [p for group in optimizer.param_groups for p in group["params"] if id(p) not in owned]
    if foreign:
        raise ArgumentError(
            f"optimizer= updates {len(foreign)} tensor(s) that are not parameters of the model; build it over "
            "model.parameters() of the model passed to compare()/check()."
        )

