"""Every gap of a check at once: the ops without a CPU kernel in a captured graph, and a survey run of a model
whose capture met a gap (a missing op, module or name, an argument the CPU model does not implement).

The survey runs the model eagerly with :func:`pytest_npufuse.gaps.surveying` on: each gap is recorded at the
user's line and the model runs on with a stand-in, so one :class:`~pytest_npufuse.errors.GapsError` lists
them all. An op the user registered with a fake kernel but no CPU kernel (``torch.library.define`` and
``register_fake``) is a gap too, when its values are to be computed: the survey computes its shapes on the
meta device and goes on with zeros.
"""

from __future__ import annotations

import contextlib
import traceback
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import Gap, GapsError
from ..gaps import record, surveying, user_line
from .meta import npu_is_meta
from .source import source_line, user_frame


def has_cpu_kernel(op: torch._ops.OpOverload) -> bool:
    """Whether ``op`` can be computed on the CPU (its own CPU kernel, or a composite one)."""
    return torch._C._dispatch_has_computed_kernel_for_dispatch_key(op.name(), "CPU")


def cpu_kernel_fix(op_type: str) -> str:
    """What a user can do about an op with a fake kernel but no CPU kernel."""
    return (
        f'register its CPU reference with torch.library.impl("{op_type}", "cpu") (or define the op with '
        "torch.library.custom_op, whose function is its reference), or check with missing_ops='timing-only' to "
        "time it without comparing what it computes"
    )


def without_cpu_kernel(gm: torch.fx.GraphModule) -> tuple[torch.fx.Node, ...]:
    """The nodes of ``gm`` whose op has a fake kernel (it was captured) but no CPU kernel."""
    return tuple(
        node for node in gm.graph.nodes
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and not has_cpu_kernel(node.target)
    )


def cpu_kernel_gaps(gm: torch.fx.GraphModule) -> tuple[Gap, ...]:
    """One gap per op without a CPU kernel and user line that calls it."""
    gaps = []
    for node in without_cpu_kernel(gm):
        op_type = node.target._schema.name
        gap = Gap("cpu kernel", op_type, source_line(node), cpu_kernel_fix(op_type))
        if gap not in gaps:
            gaps.append(gap)
    return tuple(gaps)


class _WithoutCpuKernel(TorchDispatchMode):
    """In a survey, an op called on CPU tensors that has no CPU kernel is a gap: its outputs are zeros of the
    shapes its fake kernel gives, so the model runs on."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        tensors = [leaf for leaf in pytree.tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
        if not isinstance(func, torch._ops.OpOverload) or has_cpu_kernel(func) or all(t.is_meta for t in tensors):
            return func(*args, **kwargs)
        op_type = func._schema.name
        record(Gap("cpu kernel", op_type, user_line(), cpu_kernel_fix(op_type)))
        on_meta = pytree.tree_map_only(torch.Tensor, lambda t: t.to("meta"), (args, kwargs))
        shapes = func(*on_meta[0], **on_meta[1])
        return pytree.tree_map_only(torch.Tensor, lambda t: torch.zeros(t.shape, dtype=t.dtype), shapes)


def survey(model: Callable[..., Any], inputs: Sequence[Any], weightless: bool) -> GapsError | None:
    """Run ``model`` eagerly, recording every gap it meets; the error listing them (None when it met none).
    A failure after a gap (a stand-in of the wrong shape) ends the survey, and the error says where."""
    stopped = ""
    with surveying() as met:
        try:
            with torch.no_grad(), npu_is_meta() if weightless else contextlib.nullcontext(), _WithoutCpuKernel():
                model(*inputs)
        except Exception as exc:  # noqa: BLE001 - whatever stopped the run, the gaps before it are reported
            where = user_frame("".join(traceback.format_tb(exc.__traceback__))) or "a line of the model"
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            stopped = f"{where} ({type(exc).__name__}: {reason})"
    return GapsError(met, stopped) if met else None
