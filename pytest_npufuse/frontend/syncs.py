"""Cross-stream synchronisation ops in the graph, and the process's tagged-event registry.

TorchAir expresses stream ordering with ops Dynamo captures: ``wait_tensor`` (a control dependency, GE
mode), ``record()``/``wait([...])`` (anonymous events, both modes), tagged events and
``record_tagged_stream`` (aclgraph mode). Events and streams never become graph inputs: they are named
by string tags, as in TorchAir, so graphs stay plain data. The ops are inert at run time (``wait_tensor``
returns its input's values); the backend reads their positions in the graph.
"""

from __future__ import annotations

import torch
import torch.fx

_LIB = torch.library.Library("npufuse", "FRAGMENT")
_LIB.define("wait_tensor(Tensor self, Tensor dependency) -> Tensor")
_LIB.define("record() -> Tensor")
_LIB.define("wait(Tensor[] tensors) -> ()")
_LIB.define("tagged_event_record(str tag) -> ()")
_LIB.define("tagged_event_wait(str tag) -> ()")
_LIB.define("record_tagged_stream(Tensor input, str tag) -> ()")
# torch.npu's native API (npugraph_ex): an event recorded or waited on a named stream ('' = the current
# one), and Tensor.record_stream. TorchAir's aclgraph pass turns these into tagged events; we keep
# them apart so errors and mode rules name the API the user wrote.
_LIB.define("event_record(str tag, str stream) -> ()")
_LIB.define("event_wait(str tag, str stream) -> ()")
_LIB.define("record_stream(Tensor input, str stream) -> ()")


def _wait_tensor(self: torch.Tensor, dependency: torch.Tensor) -> torch.Tensor:
    """A fresh tensor with ``self``'s values: the schema promises no aliasing."""
    return self.clone()


def _record() -> torch.Tensor:
    """A token tensor that ``wait`` can name; it carries no data."""
    return torch.empty(0)


def _no_op(*args: object) -> None:
    """Ordering only: nothing to compute on the CPU."""


for _name, _kernel in (
    ("wait_tensor", _wait_tensor),
    ("record", _record),
    ("wait", _no_op),
    ("tagged_event_record", _no_op),
    ("tagged_event_wait", _no_op),
    ("record_tagged_stream", _no_op),
    ("event_record", _no_op),
    ("event_wait", _no_op),
    ("record_stream", _no_op),
):
    _LIB.impl(_name, _kernel, "CompositeExplicitAutograd")
torch.library.register_fake("npufuse::wait_tensor", lambda self, dependency: torch.empty_like(self), lib=_LIB)


def _wait_tensor_backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    """``wait_tensor`` passes ``self`` through unchanged, so its gradient passes back unchanged; the
    dependency only orders work and gets none."""
    return grad, None


torch.library.register_autograd("npufuse::wait_tensor", _wait_tensor_backward, lib=_LIB)
torch.library.register_fake("npufuse::record", lambda: torch.empty(0), lib=_LIB)
for _name in ("wait", "tagged_event_record", "tagged_event_wait", "record_tagged_stream", "event_record", "event_wait", "record_stream"):
    torch.library.register_fake(f"npufuse::{_name}", _no_op, lib=_LIB)

WAIT_TENSOR = torch.ops.npufuse.wait_tensor.default
RECORD = torch.ops.npufuse.record.default
WAIT = torch.ops.npufuse.wait.default
TAGGED_RECORD = torch.ops.npufuse.tagged_event_record.default
TAGGED_WAIT = torch.ops.npufuse.tagged_event_wait.default
RECORD_STREAM = torch.ops.npufuse.record_tagged_stream.default
EVENT_RECORD = torch.ops.npufuse.event_record.default
EVENT_WAIT = torch.ops.npufuse.event_wait.default
NATIVE_RECORD_STREAM = torch.ops.npufuse.record_stream.default
SYNC_OPS = frozenset(
    {WAIT_TENSOR, RECORD, WAIT, TAGGED_RECORD, TAGGED_WAIT, RECORD_STREAM, EVENT_RECORD, EVENT_WAIT, NATIVE_RECORD_STREAM}
)
# Nothing consumes what these return, so without the marking AOTAutograd would drop them.
for _op in (WAIT_TENSOR, WAIT, TAGGED_RECORD, TAGGED_WAIT, RECORD_STREAM, EVENT_RECORD, EVENT_WAIT, NATIVE_RECORD_STREAM):
    torch.fx.node.has_side_effect(_op)


def is_sync_node(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in SYNC_OPS


