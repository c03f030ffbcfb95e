"""Property: for every declared op, the CPU kernel's outputs have the shapes, dtypes and strides its fake
kernel promises, whatever the layout of the inputs: contiguous, transposed, sliced or expanded.

A compiled graph plans every later op (a ``view``, a ``reshape``) from the fake kernel's strides, so a CPU
kernel that returns its input's layout where the fake promises a dense tensor breaks the compiled model
while eager mode works: ``npu_rotary_mul`` on Hugging Face's ``q.transpose(1, 2)`` did. The inputs come
from each op's declared samples (``npu_op(samples=...)``); each tensor keeps its shape and, unless it is
expanded (floating-point tensors only), its values. An expanded input whose new values the CPU kernel
refuses (an ATB mask must stay causal) is no example: a fake tensor has no values to check.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import pytest
import torch
import torch.utils._pytree as pytree
from hypothesis import Phase, given, reject, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

from pytest_npufuse import torch_npu  # noqa: F401  (declares every op)
from pytest_npufuse.errors import NpufuseError
from pytest_npufuse.torch_npu.registry import OPS, NpuOp, SampleCall

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
    """The same shape with one dim broadcast (stride 0): only for floating-point tensors, as an integer
    tensor holds indices or counts the op must see unchanged."""
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
        return "error", type(error)


def _fake_run(op: NpuOp, args: tuple, kwargs: dict) -> tuple[str, Any]:
    with FakeTensorMode() as mode:
        fake_args, fake_kwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
        return _run(op, fake_args, fake_kwargs)


@functools.cache
def _samples(name: str) -> Sequence[SampleCall]:
    """Each op's samples, built once: the ops are functional, so no example changes them."""
    return OPS[name].samples()


@pytest.mark.parametrize("op", [op for op in OPS.values() if op.samples is not None], ids=lambda op: op.name)
@settings(max_examples=8, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate, Phase.shrink))
@given(data=st.data())
def test_cpu_kernel_returns_the_fake_kernels_layout(op: NpuOp, data: st.DataObject) -> None:
    samples = _samples(op.name)
    sample = samples[data.draw(st.integers(0, len(samples) - 1), label="sample")]

    def relayout(t: torch.Tensor) -> torch.Tensor:
        layout = data.draw(st.sampled_from(LAYOUTS), label=f"layout of {list(t.shape)}")
        return _RELAYOUT[layout](t, data.draw)

    args, kwargs = pytree.tree_map_only(torch.Tensor, relayout, (sample.args, dict(sample.kwargs)))
    cpu, fake = _run(op, args, kwargs), _fake_run(op, args, kwargs)
    if cpu[0] == "error" and fake[0] == "ok" and issubclass(cpu[1], NpufuseError):
        reject()  # the kernel refused the values an expanded float input took (a mask); a fake has no values
    assert cpu == fake


def test_rotary_mul_of_a_hugging_face_query_is_dense_in_eager_and_compiled_graphs() -> None:
    """Hugging Face rotates ``q.transpose(1, 2)``; torch_npu returns a dense tensor, and a compiled graph's
    ``view`` of the result, planned from the fake kernel, must work on what the CPU kernel returns."""
    x, cos, sin = _samples("npu_rotary_mul")[0].args
    query = x.transpose(1, 2).contiguous().transpose(1, 2)
    eager = torch_npu.npu_rotary_mul(query, cos, sin)
    assert eager.is_contiguous()

    def rotate_and_flatten(query: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return torch_npu.npu_rotary_mul(query, cos, sin).view(query.shape[0], -1)

    compiled = torch.compile(rotate_and_flatten, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(query, cos, sin), eager.view(query.shape[0], -1))
