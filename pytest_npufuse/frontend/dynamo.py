"""Driving Dynamo: a model compiled as one static graph, and Dynamo's failures turned into errors a user can act on.

A graph break names the scope it split; an error of the model's own call to our API gets the user's line;
a model that fails without compilation too reports that failure, not Dynamo's account of tracing it."""

from __future__ import annotations

import ast
import contextlib
import inspect
import re
import textwrap
import traceback
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx
from torch._dynamo.exc import BackendCompilerFailed, TorchDynamoException

from ..errors import ArgumentError, CaptureError, NpufuseError, ScopeError
from ..gaps import gap_of
from ..ir.program import Program
from . import scopes
from .source import user_frame
from .survey import survey


@contextlib.contextmanager
def value_dependent_capture() -> Iterator[None]:
    """Let Dynamo keep value-dependent ops in the graph (``.item()``, ``torch.nonzero``, masks) instead
    of breaking it: GE runs them too, with a host stream sync (docs/feature-docs.md#host-scheduling), which the host
    model prices."""
    with torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
        yield


def compile_static(model: Callable[..., Any], backend: Callable[..., Any]) -> Callable[..., Any]:
    """``model`` compiled by ``backend`` as one static graph (compiled on its first call), with
    value-dependent ops kept in the graph whenever it is called."""
    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)

    def run(*args: Any, **kwargs: Any) -> Any:
        with value_dependent_capture():
            return compiled(*args, **kwargs)

    return run


def compile_once(model: Callable[..., Any], inputs: Sequence[Any], backend: Callable[..., Any]) -> Any:
    """Compile and run ``model`` with ``backend`` as one static graph; errors as :func:`call_compiled`."""
    return call_compiled(model, compile_static(model, backend), inputs)


def call_compiled(
    model: Callable[..., Any], compiled: Callable[..., Any], inputs: Sequence[Any], weightless: bool = False, *,
    grad: bool = False,
) -> Any:
    """Run ``compiled`` (``model`` compiled), turning Dynamo failures into errors a user can act on (a
    graph break names the scope it split); the model and its inputs are checked first. A ``weightless``
    model (on the meta device) is never run uncompiled to diagnose a failure: it has no values to run on.
    ``grad``: run with gradients on (a training step's forward), else under ``torch.no_grad()``."""
    check_call(model, inputs)
    try:
        with torch.set_grad_enabled(grad):
            return compiled(*inputs)
    except NpufuseError as exc:
        raise _ours(exc, model, inputs, weightless) from None
    except BackendCompilerFailed as exc:
        raise root_cause(exc) from None
    except TorchDynamoException as exc:
        ours = root_cause(exc)
        if isinstance(ours, NpufuseError):
            raise _ours(ours, model, inputs, weightless) from None
        where = user_frame(str(exc).strip()) or None
        if weightless:
            raise CaptureError(_weightless_break_message(exc), where=where) from None
        raised = eager_error(model, inputs, grad)
        raise (raised or CaptureError(_graph_break_message(model, inputs, exc), where=where)) from None


def _ours(error: NpufuseError, model: Callable[..., Any], inputs: Sequence[Any], weightless: bool) -> NpufuseError:
    """The error to show for one of ours raised while the model was traced: for a gap (a missing op, name
    or argument), every gap of the model at once (a survey run); for any other, it at the user's line."""
    if gap_of(error) is not None:
        found = survey(model, inputs, weightless)
        if found is not None:
            return found
    return _at_user_line(error) if weightless else _located(error, model, inputs)


def _weightless_break_message(exc: Exception) -> str:
    """Why a timing-only model could not be captured whole: most often it decides something from a tensor's
    value, which a meta tensor does not have."""
    text = str(exc).strip()
    reason = text.splitlines()[0].rstrip(". ") if text else type(exc).__name__
    frame = user_frame(text)
    at = f" at {frame}" if frame else ""
    if "device" in reason.lower():
        return (
            f"the model is timing-only (parameters or inputs on the meta device), but an op{at} mixes a meta tensor "
            f"with a tensor on another device ({reason}). Create the model's tensors on the meta device too: build "
            "them under init_empty_weights(), or derive their device from an input (device=x.device)."
        )
    return (
        f"the model is timing-only (parameters or inputs on the meta device) and cannot be captured as one graph{at}: "
        f"{reason}. A meta tensor has a shape and a dtype but no value, so code that decides something from a value "
        "(`if tensor...:`, `int(tensor)`, `.tolist()`) cannot run. Make the decision depend on shapes or configuration "
        "(or keep it on the device: torch.where, torch.cond), or give the model real weights."
    )


def check_outputs_used(program: Program) -> None:
    """A graph that returns no tensor had every op removed as dead code: nothing could be compared."""
    if not any(name is not None for name in program.outputs):
        raise CaptureError(
            "the model returns no tensor (its outputs are None or not tensors), so every op in it is dead code a "
            "compiler removes and nothing can be compared; return the tensors it computes."
        )


def check_call(model: Callable[..., Any], inputs: Sequence[Any]) -> None:
    """The model is something to call and takes these inputs: otherwise a plain TypeError would
    surface from inside Dynamo."""
    if isinstance(model, type):
        raise ArgumentError(
            f"got the class {model.__name__}, not a model; pass an instance, e.g. check({model.__name__}(), *inputs)."
        )
    if not callable(model):
        raise ArgumentError(f"the model {model!r} is not callable; pass an nn.Module instance or a function.")
    function = model.forward if isinstance(model, torch.nn.Module) else model
    _check_scopes_entered(function)
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*inputs)
    except TypeError as exc:
        name = getattr(function, "__qualname__", "model")
        raise ArgumentError(
            f"{name}{signature} cannot take the {len(inputs)} input(s) given: {exc}; pass every input of forward, in order."
        ) from None


_SCOPES = frozenset({"super_kernel", "npu_stream_switch", "limit_core_num"})


def _check_scopes_entered(function: Callable[..., Any]) -> None:
    """A scope called as a plain statement (``super_kernel("sp1")`` without ``with``) marks no op and
    would be ignored without a word; the model's source shows it, so it is refused before capture."""
    try:
        lines, first = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        path = inspect.getsourcefile(function)
    except (OSError, TypeError, SyntaxError):
        return  # no source to read (a lambda in a REPL, a compiled module): nothing to check
    for node in ast.walk(tree):
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if name in _SCOPES:
                raise ScopeError(
                    f"{name}(...) at {path}:{first + node.lineno - 1} is called but not entered, so it marks no op; "
                    f"use it as a with block: `with torchair.scope.{name}(...):`."
                )


def _located(error: NpufuseError, model: Callable[..., Any], inputs: Sequence[Any]) -> NpufuseError:
    """An error the model's own call to our API raised while Dynamo traced it, with the user's line
    added (Dynamo's traceback shows its interpreter, so the line may come from running the model eagerly)."""
    located = _at_user_line(error)
    if located.where or _HAS_LINE.search(located.problem):
        return located
    eager = eager_error(model, inputs)
    return eager if eager is not None and eager.problem.startswith(error.problem.rstrip(".")) else error


_HAS_LINE = re.compile(r"\.py:\d+")


def _at_user_line(error: NpufuseError) -> NpufuseError:
    """``error`` with its ``where`` field set to the innermost user frame of its traceback, unless it
    has one or its problem names a line already."""
    if error.where is None and not _HAS_LINE.search(error.problem):
        error.where = user_frame("".join(traceback.format_tb(error.__traceback__))) or None
    return error


def eager_error(
    model: Callable[..., Any], inputs: Sequence[Any], grad: bool = False, what: str = "the model"
) -> NpufuseError | None:
    """Run the model uncompiled: when it fails there too (a bad argument to an op or a scope), that
    error, with the model's own message, is the one to show, not Dynamo's account of tracing it. With
    ``grad`` as the compiled call had it: an in-place op on a parameter fails only with gradients on.
    ``what`` names the callable in the message."""
    try:
        with torch.set_grad_enabled(grad):
            model(*inputs)
    except NpufuseError as exc:
        return _at_user_line(exc)
    except Exception as exc:  # noqa: BLE001 - any error of the user's model is reported, not hidden
        frame = user_frame("".join(traceback.format_tb(exc.__traceback__)))
        at = f" at {frame}" if frame else ""
        reason = str(exc).rstrip(".")
        return CaptureError(
            f"{what} raises {type(exc).__name__}: {reason}{at}; it fails without compilation too.",
            where=frame or None
        )
    return None


def root_cause(exc: BaseException) -> BaseException:
    """The first NpufuseError in the chain Dynamo wrapped, else the innermost exception.

    An error of ours raised inside the backend reaches the caller wrapped in BackendCompilerFailed;
    any other exception there is a bug in the backend and is re-raised as itself, traceback intact.
    """
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        if isinstance(current, NpufuseError):
            return current
        seen.append(current)
        current = getattr(current, "inner_exception", None) or current.__cause__ or current.__context__
    return seen[-1]


def _graph_break_message(model: Callable[..., Any], inputs: Sequence[Any], exc: Exception) -> str:
    """Say where the graph broke and which scope it split, found by compiling again without fullgraph."""
    graphs: list[torch.fx.GraphModule] = []

    def record(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=record, fullgraph=False, dynamic=False)(*inputs)
    except Exception:  # noqa: BLE001 - the diagnosis is best effort; the original reason is reported anyway
        pass
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    frame = user_frame(text)
    at = f" at {frame}" if frame else ""
    split = _scope_split_by_break(graphs)
    where = f"inside {split}" if split else "in the model"
    return (
        f"graph break {where}{at}: {reason.rstrip('. ')}. npufuse captures the model as one static graph, as TorchAir "
        "max-autotune does; a scope cannot span a graph break. Move the breaking code (print, .item(), "
        "data-dependent control flow, unsupported calls) out of the scope, or make it traceable."
    )


def _scope_split_by_break(graphs: Sequence[torch.fx.GraphModule]) -> str | None:
    """The innermost scope left open at the end of a graph: the one a graph break cut in two."""
    for gm in graphs:
        stack = scopes.ScopeStack()
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            if node.target in (scopes.SCOPE_ENTER, torch.ops.npufuse.scope_enter):
                stack.enter(*node.args[:2])
            elif node.target in (scopes.SCOPE_EXIT, torch.ops.npufuse.scope_exit) and stack.open_scopes():
                stack.exit("graph")
        if stack.open_scopes():
            return stack.open_scopes()[-1]
    return None
