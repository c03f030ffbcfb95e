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

With one of torch.optim's optimizers, the optimizer's graph is captured on a second thread while the
forward's and the backward's numerics run (:meth:`StepCapture._forward_backward_beside_step`): the same
graphs and values, in about the time of the longer of the two on two cores.

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

import contextlib
import copy
import functools
import inspect
import threading
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense
from torch.optim.optimizer import _global_optimizer_pre_hooks as _GLOBAL_PRE_HOOKS

from ..errors import ArgumentError, CaptureError, NpufuseError
from ..numerics.exact import one_thread, quick_handoffs
from ..target.catalog import OpCatalog
from ..vocabulary import Phase
from .backend import CaptureBackend, CapturedGraph, GraphRunner
from .dynamo import call_compiled, eager_error, root_cause, value_dependent_capture
from .meta import weightless
from .rewrites import apply_rules

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


class _Captured(Exception):
    """Raised by a graph's runner in a call made only to capture: the graph is captured and does not run
    (the call stops before its first kernel). ``graph`` and ``args`` are the graph and its inputs."""

    def __init__(self, graph: CapturedGraph, args: Sequence[Any]) -> None:
        super().__init__(f"{graph.phase} graph captured")
        self.graph, self.args = graph, args


@dataclass
class _Beside:
    """What the capture beside the numerics did: its future, the parameters it made optimizer state for,
    and the span of ``StepCapture.graphs`` it captured (None until it captured one)."""

    capture: Future[None] | None = None
    created: list[torch.Tensor] = field(default_factory=list)
    graphs: tuple[int, int] | None = None


@contextlib.contextmanager
def _optimizer_capture() -> Iterator[None]:
    """How an optimizer step is compiled: value-dependent ops kept in its graph, and torch's deprecation
    warning for ``torch.jit.script_method`` ignored (Dynamo touches it tracing through torch.optim, on
    every capture: noise the user's step did not cause)."""
    with value_dependent_capture(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=JIT_DEPRECATION, category=DeprecationWarning)
        yield


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
        _check_step(model, inputs, loss, optimizer)
        self.model = model
        self.inputs = tuple(inputs)
        self.loss = loss
        self.optimizer = optimizer
        self._graphs: list[CapturedGraph] = []
        forward = CaptureBackend(catalog, self._runner, self._graphs, graph_passes=(apply_rules,))
        step = CaptureBackend(catalog, self._runner, self._graphs, phase=Phase.OPTIMIZER, graph_passes=(apply_rules,))
        self._forward = torch.compile(_forward_with_loss, backend=forward, fullgraph=True, dynamic=False)
        # The forward once captured, run from Dynamo's cache (one per function and backend) outside a
        # fullgraph call: inside one, Dynamo compiles no nested frame on any thread (its fullgraph state
        # is the process's), and the optimizer's step is captured on another thread meanwhile.
        self._run_forward = torch.compile(_forward_with_loss, backend=forward, fullgraph=False, dynamic=False)
        self._step = torch.compile(_optimizer_step, backend=step, fullgraph=False, dynamic=False)
        self._execute: GraphExecutor | None = None
        self._kernels_run = 0
        self._capture_only = threading.local()
        self._beside_capture = False

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
            if optimizer is not None and _capturable_beside(model, optimizer):
                outputs, loss, beside = self._forward_backward_beside_step(model, optimizer, inputs)
            else:
                outputs, loss = self._call_forward(model, inputs)
                loss.backward()
                beside = None
            grads = tuple((name, _snapshot(p.grad)) for name, p in model.named_parameters())
            if optimizer is not None:
                captured = len(self._graphs)
                self._call_step(optimizer)
                if beside is not None and beside.graphs is not None and len(self._graphs) > captured:
                    del self._graphs[slice(*beside.graphs)]  # the step did not run that graph: it captured its own
        finally:
            self._execute = None
        params = tuple((name, p.detach()) for name, p in model.named_parameters())
        return StepValues(
            outputs, loss.detach(), grads, params, self._kernels_run,
            parameter_bytes=sum(_nbytes(p) for _, p in params),
            gradient_bytes=sum(_nbytes(g) for _, g in grads if g is not None),
            state_bytes=_state_bytes(optimizer),
        )

    def _call_forward(
        self, model: torch.nn.Module, inputs: Sequence[Any], forward: Callable[..., Any] | None = None
    ) -> tuple[Any, torch.Tensor]:
        compiled = functools.partial(forward or self._forward, model, self.loss)
        # Errors are diagnosed on the run's copy: that runs it uncompiled, which must not change the user's
        # model (a BatchNorm's running statistics).
        step = functools.partial(_forward_with_loss, model, self.loss)
        try:
            outputs, loss = call_compiled(model, compiled, inputs, grad=True)
        except CaptureError as exc:
            # The forward alone runs eagerly, so an exception the loss raised while Dynamo traced it reads as
            # a graph break; the forward and loss run uncompiled name the loss's own error and line.
            raise (eager_error(step, inputs, grad=True, what="the model or its loss=") or exc) from None
        except (NpufuseError, _Captured):
            raise
        except Exception:
            # An error of the user's loss (or forward) that Dynamo re-raised as itself, its traceback ending
            # in our wrapper: run the step's forward and loss uncompiled, whose traceback names their line.
            eager = eager_error(step, inputs, grad=True, what="the model or its loss=")
            if eager is None:
                raise
            raise eager from None
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
            raise ArgumentError(
                f"loss= returned {_describe(loss)}, not a scalar floating-point tensor; return the loss to "
                "call backward() on, e.g. loss=lambda out: F.cross_entropy(out, labels).", argument="loss",
            )
        if not loss.requires_grad:
            raise ArgumentError(
                "loss= returned a tensor that does not require grad: no parameter of the model reaches it (or the "
                "model runs under torch.no_grad()), so there is no backward to model.", argument="loss",
            )
        return outputs, loss

    def _forward_backward_beside_step(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, inputs: Sequence[Any]
    ) -> tuple[Any, torch.Tensor, _Beside]:
        """The forward and the backward, with the optimizer's graph captured on a second thread while
        their numerics run here: the capture is Python that holds the interpreter, the numerics are
        torch's kernels that release it, so on two cores the two take the time of the longer.

        Only one thread is ever inside Dynamo's compiler: the forward and its backward are captured
        first, without running (AOT lowers the backward with the forward here, not on the first
        backward), then the step's capture starts beside their numerics. It traces the step from
        placeholder gradients (the same shapes and strides, never read: Dynamo guards on a gradient's
        metadata, not its values or address) on the parameters the backward will give one; the backward
        meanwhile hands its gradients back here (``torch.autograd.grad``) instead of into ``.grad``, and
        they are put there after, as autograd's AccumulateGrad puts them. An error of the capture is
        raised here, unchanged, once both are done; one of the numerics first, as without the overlap."""
        params = [p for p in dict.fromkeys(model.parameters()) if p.requires_grad]
        beside = _Beside()
        first = self._capture_forward(model, inputs)
        if isinstance(first, _Captured):
            graded = self._graded(first.graph, first.args, params)
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="npufuse-step-capture") as worker:
                if graded:
                    # The capture thread's intra-op thread count, fixed before the numerics go down to one:
                    # Dynamo guards the step's graph on it, and the step runs on this thread's count.
                    worker.submit(torch.get_num_threads).result()
                    beside.capture = worker.submit(self._capture_step, optimizer, graded, beside)
                with quick_handoffs(), self._numerics_beside_capture(bool(graded)):
                    outputs, loss = self._call_forward(model, inputs, self._run_forward)
                    grads = torch.autograd.grad(loss, params, allow_unused=True)
            if beside.capture is not None:
                beside.capture.result()
        else:  # the forward ran whole, with no graph of ours: nothing to overlap
            outputs, loss = first
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        _accumulate(params, grads)
        for param in beside.created:
            if param.grad is None:  # a state the step would not have made: the capture's guess was wrong
                optimizer.state.pop(param, None)
        return outputs, loss, beside

    @contextlib.contextmanager
    def _numerics_beside_capture(self, beside: bool) -> Iterator[None]:
        """Each graph's numerics on one intra-op thread while the step is captured ``beside`` them: the
        capture takes the other core, and a pool of OpenMP threads on top of both would stall on it.
        Set around each graph's run, not the compiled call: Dynamo guards on the thread count."""
        self._beside_capture = beside
        try:
            yield
        finally:
            self._beside_capture = False

    def _capture_forward(self, model: torch.nn.Module, inputs: Sequence[Any]) -> _Captured | tuple[Any, torch.Tensor]:
        """The forward and its backward captured, not run: the forward graph's runner stops the call
        before its first kernel (and before Dynamo applies any effect of the call after the graph)."""
        self._capture_only.on = True
        try:
            with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
                return self._call_forward(model, inputs)
        except _Captured as captured:
            return captured
        finally:
            self._capture_only.on = False

    def _graded(
        self, graph: CapturedGraph, args: Sequence[Any], params: Sequence[torch.Tensor]
    ) -> list[torch.Tensor]:
        """The parameters the backward will give a gradient, read off the graphs on the forward's first
        run: AOT's backward returns one gradient per input of the forward, None where there is none.
        Nothing (no capture beside the numerics) when the graphs draw random numbers: Dynamo restores
        torch's generator after each capture, which would undo the draws of numerics running beside it."""
        backward = next((g for g in self._graphs if g.phase is Phase.BACKWARD), None)
        if backward is None or any(_draws_random(g) for g in (graph, backward)):
            return []
        gradients = backward.gm.graph.output_node().args[0]
        if len(gradients) != len(args):
            return []
        by_id = {id(p): p for p in params}
        return [by_id[id(arg)] for arg, grad in zip(args, gradients) if grad is not None and id(arg) in by_id]

    def _capture_step(self, optimizer: torch.optim.Optimizer, graded: Sequence[torch.Tensor], beside: _Beside) -> None:
        """On the capture thread: the optimizer's graph captured and never run. Its runner raises
        :class:`_Captured` on this thread before the graph's first kernel, so Dynamo applies none of the
        step's effects after it; the step runs later on this graph, from Dynamo's cache, on the real
        gradients. Before its graph a torch.optim step runs only its grad-mode switch (thread-local) and
        ``_init_group``, which makes the state the step would make. Any other error is the step's, raised
        as the step would raise it."""
        beside.created = [p for p in graded if p not in optimizer.state]
        start = len(self._graphs)
        for param in graded:
            param.grad = torch.empty_like(param)
        self._capture_only.on = True
        try:
            self._call_step(optimizer)
        except _Captured:
            beside.graphs = (start, len(self._graphs))
        finally:
            self._capture_only.on = False
            for param in graded:
                param.grad = None

    def _call_step(self, optimizer: torch.optim.Optimizer) -> None:
        try:
            with _optimizer_capture():
                self._step(optimizer)
        except (NpufuseError, _Captured):
            raise
        except Exception as exc:
            root = root_cause(exc)
            if isinstance(root, (NpufuseError, _Captured)):
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
            if getattr(self._capture_only, "on", False):
                raise _Captured(graph, args)
            if self._execute is None:
                raise CaptureError(
                    f"the {graph.phase} graph was called outside the training step being modeled; a modeled "
                    "step calls its compiled graphs only inside compare()/check()."
                )
            with one_thread() if self._beside_capture else contextlib.nullcontext():
                result = self._execute(graph, list(args))
            self._kernels_run += result.kernels_run
            return result.outputs

        return run


def _capturable_beside(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer's graph may be captured beside the numerics, from placeholder gradients and
    with the backward's gradients put into ``.grad`` afterwards: the optimizer is one of torch.optim's,
    whose step runs no eager code on tensors before its graph but ``_init_group`` (Dynamo runs it on the
    real tensors; it reads a gradient's shape, never its values), with no step pre-hook (it would run
    on the capture thread); no parameter has a gradient yet (the backward would add to it) or a hook
    (``torch.autograd.grad`` runs no post-accumulate hook)."""
    if not type(optimizer).__module__.startswith("torch.optim."):
        return False
    if optimizer._optimizer_step_pre_hooks or _GLOBAL_PRE_HOOKS:
        return False
    return all(
        p.grad is None and not p._backward_hooks and p._post_accumulate_grad_hooks is None
        for p in model.parameters()
    )


def _draws_random(graph: CapturedGraph) -> bool:
    return any(
        isinstance(node.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in node.target.tags
        for node in graph.gm.graph.nodes
    )


def _accumulate(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None]) -> None:
    """Each gradient into its parameter's ``.grad`` as autograd's AccumulateGrad puts a first one: the
    tensor itself when its strides are the parameter's (or, for a parameter that is not dense, it is
    contiguous), else a copy laid out so; a tensor that is the gradient of two parameters is copied for
    the second."""
    seen: set[int] = set()
    for param, grad in zip(params, grads):
        if grad is None:
            continue
        if id(grad) in seen or not _obeys_layout(grad, param):
            grad = _laid_out_as(grad, param)
        seen.add(id(grad))
        param.grad = grad.detach()


def _obeys_layout(grad: torch.Tensor, param: torch.Tensor) -> bool:
    if grad.layout is not torch.strided:
        return True
    if not is_non_overlapping_and_dense(param):
        return grad.is_contiguous()
    return all(size == 1 or a == b for size, a, b in zip(grad.shape, grad.stride(), param.stride()))


def _laid_out_as(grad: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    if not is_non_overlapping_and_dense(param):
        return grad.clone(memory_format=torch.contiguous_format)
    return torch.empty_strided(param.shape, param.stride(), dtype=grad.dtype, device=grad.device).copy_(grad)


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


def _check_step(model: Any, inputs: Sequence[Any], loss: Any, optimizer: Any) -> None:
    """A step needs a module with values (its parameters are what gradients and updates are compared by),
    a loss to call backward on, and an optimizer (if any) over that module's parameters; what the capture
    cannot model is refused here, naming the user's line, before anything is compiled."""
    if not isinstance(model, torch.nn.Module):
        raise ArgumentError(
            f"a training step needs an nn.Module (its named parameters get gradients and updates), not "
            f"{type(model).__name__}; wrap the function in a module.", argument="model",
        )
    if weightless(model, inputs):
        raise ArgumentError(
            "a training step compares the loss, every gradient and every updated parameter, but the model's "
            "parameters or inputs are on the meta device and have no values; build the model with real weights "
            "(a smaller configuration), or time its forward without loss= (numerics='none' or 'sample').",
            argument="model",
        )
    _check_module_hooks(model)
    if not callable(loss):
        raise ArgumentError(
            f"loss= must be a callable taking the model's outputs and returning the scalar loss, not {loss!r}.",
            argument="loss",
        )
    _check_loss_scaler(loss)
    if optimizer is None:
        return
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ArgumentError(
            f"optimizer= must be a torch.optim.Optimizer over the model's parameters, not {type(optimizer).__name__}.",
            argument="optimizer",
        )
    if _needs_closure(optimizer):
        raise ArgumentError(
            f"{type(optimizer).__name__}.step(closure) runs the model's forward and backward again inside the step, "
            "as often as it decides from the loss's values, so the step is not one graph to model; check the step "
            "with an optimizer that steps once from the gradients (SGD, Adam, AdamW).", argument="optimizer",
        )
    owned = {id(p) for p in model.parameters()}
    foreign = [p for group in optimizer.param_groups for p in group["params"] if id(p) not in owned]
    if foreign:
        raise ArgumentError(
            f"optimizer= updates {len(foreign)} tensor(s) that are not parameters of the model; build it over "
            "model.parameters() of the model passed to compare()/check().", argument="optimizer",
        )


def _where(function: Any) -> tuple[str, dict[str, Any]]:
    """Where a user's function (a hook, a loss) is defined: `` at file:line`` for the message and the
    error's ``file`` and ``entry`` fields; nothing for a callable without Python code."""
    code = getattr(function, "__code__", None) or getattr(getattr(function, "__func__", None), "__code__", None)
    if code is None:
        return "", {}
    path, line = code.co_filename, code.co_firstlineno
    return f" at {path}:{line}", {"file": path, "entry": f"line {line}"}


def _check_module_hooks(model: torch.nn.Module) -> None:
    """Module backward hooks (``register_full_backward_hook``, ``register_full_backward_pre_hook``, or a
    global one) need compiled autograd to be captured, which the step's backward (AOTAutograd's graph, as
    TorchAir compiles it) does not use; a hook on a tensor (``Tensor.register_hook``) is captured."""
    module_hooks = torch.nn.modules.module
    owners = [("every module (a global hook)",
               (*module_hooks._global_backward_hooks.values(), *module_hooks._global_backward_pre_hooks.values()))]
    owners += [(f"module {name!r} of the model" if name else "the model",
                (*module._backward_hooks.values(), *module._backward_pre_hooks.values()))
               for name, module in model.named_modules()]
    for owner, hooks in owners:
        if hooks:
            at, fields = _where(hooks[0])
            raise ArgumentError(
                f"a backward hook on {owner}{at} is not modeled: a module backward hook is captured only by "
                "compiled autograd, and the step's backward is AOTAutograd's graph. Register the hook on a tensor "
                "instead (output.register_hook(fn) in forward, or param.register_hook(fn)), which is modeled, or "
                "remove it for the check.", argument="model", **fields,
            )


def _check_loss_scaler(loss: Callable[..., Any]) -> None:
    """A ``torch.amp.GradScaler`` the loss calls: its ``scale`` checks for inf and grows or backs off its
    factor in eager code between graphs (and its ``step`` wraps the optimizer's), which the step's graphs
    do not hold; autocast alone is captured in the forward's graph."""
    try:
        names = inspect.getclosurevars(loss)
    except TypeError:  # a builtin or a callable object: nothing to inspect
        return
    for value in (*names.nonlocals.values(), *names.globals.values()):
        if isinstance(value, torch.amp.GradScaler):
            at, fields = _where(loss)
            raise ArgumentError(
                f"the loss{at} calls a torch.amp.GradScaler, which is not modeled: its scale factor and inf checks "
                "run eagerly between the step's graphs. Drop the scaler for the check (loss=lambda out: <the "
                "unscaled loss>); autocast in the forward is modeled.", argument="loss", **fields,
            )


def _needs_closure(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer's ``step`` has a required ``closure`` (LBFGS): it re-evaluates the model."""
    try:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return closure is not None and closure.default is inspect.Parameter.empty
