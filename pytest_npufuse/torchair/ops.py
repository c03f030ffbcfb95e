"""``torchair.ops``: explicit stream synchronisation, with TorchAir's names and errors.

``npu_print`` prints tensors from inside the graph (:mod:`._printing`). ``record()``/``wait([...])`` work
in every mode; the tagged-event API and ``npu_record_tagged_stream``
work in the aclgraph modes only, which the backend checks once it knows the mode.

TorchAir also exposes some torch_npu ops here (``torchair.ops.npu_fused_infer_attention_score``); they
are looked up by name in :mod:`pytest_npufuse.torch_npu` when used, so every op that package provides is
reachable, and one it does not provide is an error naming it.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import torch

from ..errors import NotModeledAttributeError, ScopeError
from ..gaps import missing
from ..frontend.tagged_events import TaggedEvent, tagged_events
from ._printing import npu_print

__all__ = [
    "npu_print",
    "record",
    "wait",
    "npu_create_tagged_event",
    "npu_tagged_event_record",
    "npu_tagged_event_wait",
    "npu_record_tagged_stream",
]

# TorchAir exposes npu_print as torchair.ops.npu_print; its home module here is private.
npu_print.__module__ = __name__


def record() -> torch.Tensor:
    """Record an event after the work issued so far on the current stream; pass the result to ``wait``."""
    return torch.ops.npufuse.record()


def wait(tensors: Sequence[torch.Tensor]) -> None:
    """Make the next op on the current stream wait for each tensor's producer (or ``record()`` token)."""
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ScopeError(
            "torchair.ops.wait(tensors) requires at least one tensor input, e.g. wait([x]).",
            op="torchair.ops.wait", argument="tensors",
        )
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise ScopeError(
            f"torchair.ops.wait(tensors) takes tensors only, got {[type(t).__name__ for t in tensors]}.",
            op="torchair.ops.wait", argument="tensors",
        )
    torch.ops.npufuse.wait(list(tensors))


def npu_create_tagged_event(tag: str) -> TaggedEvent:
    """Create the event named ``tag``; a tag may be created once per test or check (per process in TorchAir)."""
    if not isinstance(tag, str) or not tag:
        raise ScopeError(
            f"npu_create_tagged_event(tag=...) takes a non-empty str, got {tag!r}.",
            op="npu_create_tagged_event", argument="tag",
        )
    return tagged_events().create(tag, at_module_level=sys._getframe(1).f_code.co_name == "<module>")


def _tag(event: object, api: str) -> str:
    if not tagged_events().is_registered(event):
        raise ScopeError(
            f"{api}: tagged event {event!r} is not in use; create it with npu_create_tagged_event(tag).",
            op=api, argument="event",
        )
    return event.tag  # type: ignore[union-attr]


def npu_tagged_event_record(event: TaggedEvent) -> None:
    """Record ``event`` on the current stream (reduce-overhead only)."""
    torch.ops.npufuse.tagged_event_record(_tag(event, "npu_tagged_event_record"))


def npu_tagged_event_wait(event: TaggedEvent) -> None:
    """Make the current stream wait until ``event`` is recorded (reduce-overhead only)."""
    torch.ops.npufuse.tagged_event_wait(_tag(event, "npu_tagged_event_wait"))


def npu_record_tagged_stream(input: torch.Tensor, tagged_stream: str) -> None:
    """Keep ``input``'s memory alive until the work issued so far on ``tagged_stream`` is done, like
    ``Tensor.record_stream`` (which cannot enter an FX graph). Use ``'default'`` for the main stream."""
    if not isinstance(tagged_stream, str) or not tagged_stream:
        raise ScopeError(
            f"npu_record_tagged_stream(input, tagged_stream=...) takes a stream tag str, got {tagged_stream!r}.",
            op="npu_record_tagged_stream", argument="tagged_stream",
        )
    torch.ops.npufuse.record_tagged_stream(input, tagged_stream)


# torch_npu ops TorchAir re-exports from torchair.ops (torchair: python/torchair/ops/__init__.py).
TORCH_NPU_OPS = ("npu_fused_infer_attention_score", "npu_fused_infer_attention_score_v2")


def __getattr__(name: str) -> Any:
    if name in TORCH_NPU_OPS:
        from .. import torch_npu

        return getattr(torch_npu, name)
    if name.startswith("__"):
        raise AttributeError(name)
    has = f"torchair.ops has {', '.join(__all__ + list(TORCH_NPU_OPS))}"
    error = NotModeledAttributeError(f"torchair.ops.{name} is not modeled by pytest-npufuse; {has}.")
    return missing(error, "name", f"torchair.ops.{name}", f"pytest-npufuse does not model it; {has}")
