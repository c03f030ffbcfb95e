"""Property: for every declared op, the CPU kernel's outputs have the shapes, dtypes and strides its fake
kernel promises, whatever the layout of the inputs: contiguous, transposed, sliced or expanded.

A compiled graph plans every later op (a ``view``, a ``reshape``) from the fake kernel's strides, so a CPU
kernel that returns its input's layout where the fake promises a dense tensor breaks the compiled model
while eager mode works: ``npu_rotary_mul`` on Hugging Face's ``q.transpose(1, 2)`` did. The inputs come
from each op's declared samples (``npu_op(samples=...)``); each tensor keeps its shape and, unless it is a
floating-point tensor (whose values no op validates against its indices), its values.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.utils._pytree as pytree
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

from pytest_npufuse import torch_npu  # noqa: F401  (declares every op)
from pytest_npufuse.torch_npu.registry import OPS, NpuOp

LAYOUTS = ("contiguous", "transposed", "sliced", "expanded")


def _transposed(t: torch.Tensor, draw: Callable[[Any], Any]) -> torch.Tensor:
    """The same values and shape, stored with two dims swapped (as ``x.transpose(1, 2)`` hands an op)."""
    if t.dim() < 2:
        return t.clone()
    first, second = draw(st.lists(st.integers(0, t.dim() - 1), min_size=2, max_size=2, unique=True))
    return t.transpose(first, second).contiguous().transpose(first, second)


def _sliced(t: torch.Tensor, draw: Callable[[Any], Any]) -> torch.Tensor:
    """The same values and shape, a narrow view into a larger buffer (a storage offset and padded rows)."""
    if t.dim() == 0:
        return t.clone()
    dim, start = draw(st.integers(0, t.dim() - 1)), draw(st.integers(0, 2))
    padded = list(t.shape)
    padded[dim] += start + 1
    buffer = t.new_zeros(padded)
    view = buffer.narrow(dim, start, t.shape[dim])
    view.copy_(t)
    return view


def _expanded(t: torch.Tensor, draw: Callable[[Any], Any]) -> torch.Tensor:
    """The same shape with one dim broadcast (stride 0): only for floating-point tensors, whose values the
    ops take as data, not as indices or counts."""
    wide = [dim for dim, size in enumerate(t.shape) if size > 1]
    if not t.is_floating_point() or not wide:
        return t.clone()
    dim = draw(st.sampled_from(wide))
    return t.narrow(dim, 0, 1).expand(t.shape)


_RELAYOUT = {"contiguous": lambda t, draw: t.clone(), "transposed": _transposed, "sliced": _sliced,
             "expanded": _expanded}


def _significant_strides(t: torch.Tensor) -> tuple[int, ...]:
    """The strides that decide the layout: a dim of size 1 may have any stride."""
    return tuple(stride for stride, size in zip(t.stride(), t.shape) if size > 1)


def _metadata(outputs: Any) -> list[tuple]:
    return [
        (tuple(t.shape), t.dtype, _significant_strides(t)) if isinstance(t, torch.Tensor) else t
        for t in pytree.tree_leaves(outputs)
    ]


def _run(op: NpuOp, args: tuple, kwargs: dict) -> tuple[str, Any]:
    """The op's outputs' metadata, or the type of the error it raises."""
    try:
        return "ok", _metadata(op.graph_op(*args, **kwargs))
    except Exception as error:  # the fake must refuse what the CPU kernel refuses, with the same error
        return "error", type(error).__name__


def _fake_run(op: NpuOp, args: tuple, kwargs: dict) -> tuple[str, Any]:
    with FakeTensorMode() as mode:
        fake_args, fake_kwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
        return _run(op, fake_args, fake_kwargs)


@pytest.mark.parametrize("op", [op for op in OPS.values() if op.samples is not None], ids=lambda op: op.name)
@settings(max_examples=8, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate, Phase.shrink))
@given(data=st.data())
def test_cpu_kernel_returns_the_fake_kernels_layout(op: NpuOp, data: st.DataObject) -> None:
    samples = op.samples()
    sample = samples[data.draw(st.integers(0, len(samples) - 1), label="sample")]

    def relayout(t: torch.Tensor) -> torch.Tensor:
        layout = data.draw(st.sampled_from(LAYOUTS), label=f"layout of {list(t.shape)}")
        return _RELAYOUT[layout](t, data.draw)

    args, kwargs = pytree.tree_map_only(torch.Tensor, relayout, (sample.args, dict(sample.kwargs)))
    assert _run(op, args, kwargs) == _fake_run(op, args, kwargs)
