"""Scope markers in the captured graph and their resolution into per-kernel annotations.

TorchAir implements every ``torchair.scope.*`` context manager as a pair of side-effecting custom ops,
``scope_enter(keys, values)`` / ``scope_exit()``, that Dynamo captures in program order. The backend then
walks the graph with a stack of attribute dicts and stamps the attributes on each op lowered inside. We do
the same, in our own ``npufuse`` namespace so a real TorchAir installed beside us never clashes.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx

from ..errors import ScopeError
from ..ir.program import DEFAULT_STREAM, NO_ANNOTATIONS, Annotations

SK_SCOPE = "_super_kernel_scope"
SK_OPTIONS = "_super_kernel_options"
STREAM_LABEL = "_user_stream_label"
STREAM_PRIORITY = "_user_stream_priority"
AICORE_NUM = "_op_aicore_num"
VECTORCORE_NUM = "_op_vectorcore_num"
INNER_PARALLEL = "_enable_inner_parallel"
NEVER_TIMEOUT = "_op_exec_never_timeout"
DATA_DUMP = "torchair_enable_data_dump"
# Set by ``with torch.npu.stream(s)`` or ``torch.npu.set_stream(s)`` (native API) beside the stream label,
# so mode rules and errors can name the call; its value says which of the two made the switch.
NATIVE_STREAM = "_npufuse_native_stream"
BY_WITH_BLOCK = "with"
BY_SET_STREAM = "set_stream"

_LIB = torch.library.Library("npufuse", "FRAGMENT")
_LIB.define("scope_enter(str[] keys, str[] values) -> ()")
_LIB.define("scope_exit() -> ()")


def _enter_kernel(keys: Sequence[str], values: Sequence[str]) -> None:
    """Inert at run time: the attributes only matter to the backend that reads the graph."""


def _exit_kernel() -> None:
    """Inert at run time, see :func:`_enter_kernel`."""


_LIB.impl("scope_enter", _enter_kernel, "CompositeExplicitAutograd")
_LIB.impl("scope_exit", _exit_kernel, "CompositeExplicitAutograd")
torch.library.register_fake("npufuse::scope_enter", _enter_kernel, lib=_LIB)
torch.library.register_fake("npufuse::scope_exit", _exit_kernel, lib=_LIB)
# torch.npu.super_kernel_scope_begin/end (npugraph_ex): markers paired by name in any order, not a stack.
_LIB.define("super_kernel_scope_begin(str? scope_name) -> ()")
_LIB.define("super_kernel_scope_end(str? scope_name) -> ()")


def _sk_marker_kernel(scope_name: str | None = None) -> None:
    """Inert at run time, see :func:`_enter_kernel`."""


for _name in ("super_kernel_scope_begin", "super_kernel_scope_end"):
    _LIB.impl(_name, _sk_marker_kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"npufuse::{_name}", _sk_marker_kernel, lib=_LIB)

SCOPE_ENTER = torch.ops.npufuse.scope_enter.default
SCOPE_EXIT = torch.ops.npufuse.scope_exit.default
SK_BEGIN = torch.ops.npufuse.super_kernel_scope_begin.default
SK_END = torch.ops.npufuse.super_kernel_scope_end.default
# Without this, Dynamo keeps the nodes but AOTAutograd and FX dead-code elimination drop them silently,
# because they return nothing that anything uses.
torch.fx.node.has_side_effect(SCOPE_ENTER)
torch.fx.node.has_side_effect(SCOPE_EXIT)
torch.fx.node.has_side_effect(SK_BEGIN)
torch.fx.node.has_side_effect(SK_END)


def is_scope_node(node: torch.fx.Node) -> bool:
    """True for the enter/exit marker nodes, which are not kernels."""
    return node.op == "call_function" and node.target in (SCOPE_ENTER, SCOPE_EXIT, SK_BEGIN, SK_END)


def describe_scope(attrs: dict[str, str]) -> str:
    """Name a scope the way the user wrote it, for error messages."""
    if SK_SCOPE in attrs:
        return f"super_kernel({attrs[SK_SCOPE] or None!r})"
    if NATIVE_STREAM in attrs:
        api = "torch.npu.set_stream" if attrs[NATIVE_STREAM] == BY_SET_STREAM else "torch.npu.stream"
        return f"{api}({attrs[STREAM_LABEL]!r})"
    if STREAM_LABEL in attrs:
        return f"npu_stream_switch({attrs[STREAM_LABEL]!r})"
    if AICORE_NUM in attrs:
        return f"limit_core_num({attrs[AICORE_NUM]}, {attrs.get(VECTORCORE_NUM)})"
    if NEVER_TIMEOUT in attrs:
        return f"op_never_timeout({attrs[NEVER_TIMEOUT]})"
    if DATA_DUMP in attrs:
        return "data_dump()"
    return f"scope {attrs}"


class ScopeStack:
    """The stack of open scopes while walking a graph in program order."""

    def __init__(self) -> None:
        self._frames: list[dict[str, str]] = []

    def enter(self, keys: Sequence[str], values: Sequence[str]) -> None:
        self._frames.append(dict(zip(keys, values)))

    def exit(self, where: str, line: str | None = None) -> None:
        """Leave the innermost scope; ``where`` says in what the exit is (the graph), ``line`` the user's line."""
        if not self._frames:
            raise ScopeError(
                f"scope exit without a matching enter in {where}. Scopes must be used as `with` blocks "
                "and the whole block must be captured in one graph (no graph break inside it).", where=line
            )
        self._frames.pop()

    def open_scopes(self) -> list[str]:
        return [describe_scope(frame) for frame in self._frames]

    def switched_by_set_stream(self) -> bool:
        """Whether the innermost open scope is a ``torch.npu.set_stream`` switch (not a block)."""
        return bool(self._frames) and self._frames[-1].get(NATIVE_STREAM) == BY_SET_STREAM

    def resolve(self) -> Annotations:
        """Apply the frames outermost first, as TorchAir does.

        Later (inner) frames overwrite the same key, so the innermost scope wins; different keys
        accumulate. ``super_kernel(None)`` arrives as an empty scope name and removes the SuperKernel
        attributes set by outer frames, then stops processing its own frame.
        """
        attrs: dict[str, str] = {}
        for frame in self._frames:
            for key, value in frame.items():
                if key == SK_SCOPE and value == "":
                    attrs.pop(SK_SCOPE, None)
                    attrs.pop(SK_OPTIONS, None)
                    break
                attrs[key] = value
        return _annotations_from(attrs) if attrs else NO_ANNOTATIONS


def node_streams(graph: torch.fx.Graph) -> dict[torch.fx.Node, str]:
    """The stream each node of ``graph`` is issued on (:data:`DEFAULT_STREAM` outside any stream scope, as
    inside ``torch.npu.stream(torch.npu.default_stream())``), from the scope markers in program order under
    :meth:`ScopeStack.resolve`'s rules (the innermost stream scope wins). A marker node carries the stream
    in force after it. Lowering reports unbalanced markers; this walk skips an exit without an enter."""
    stack = ScopeStack()
    depth, current = 0, DEFAULT_STREAM
    streams: dict[torch.fx.Node, str] = {}
    for node in graph.nodes:
        if node.op == "call_function" and node.target in (SCOPE_ENTER, SCOPE_EXIT):
            if node.target is SCOPE_ENTER:
                stack.enter(*node.args[:2])
                depth += 1
            elif depth:
                stack.exit("")
                depth -= 1
            current = stack.resolve().stream or DEFAULT_STREAM
        streams[node] = current
    return streams


def _optional_int(value: str | None) -> int | None:
    return None if value is None else int(value)


def _annotations_from(attrs: dict[str, Any]) -> Annotations:
    return Annotations(
        sk_scope=attrs.get(SK_SCOPE),
        sk_options=attrs.get(SK_OPTIONS, ""),
        stream=attrs.get(STREAM_LABEL),
        stream_priority=int(attrs.get(STREAM_PRIORITY, "0")),
        aicore_limit=_optional_int(attrs.get(AICORE_NUM)),
        vectorcore_limit=_optional_int(attrs.get(VECTORCORE_NUM)),
        never_timeout=None if NEVER_TIMEOUT not in attrs else attrs[NEVER_TIMEOUT] == "True",
        data_dump=attrs.get(DATA_DUMP) == "True",
    )


STREAM_LABEL_META = "stream_label"
"""The node meta key TorchAir keeps a node's stream label under (None: the default stream)."""


def label_streams(gm: torch.fx.GraphModule) -> None:
    """Store each node's stream label (None: the default stream) in ``node.meta["stream_label"]``, where
    TorchAir keeps it for its reinplace checks and the ``extra_check`` functions user code registers read it;
    the labels are :func:`node_streams`'."""
    for node, stream in node_streams(gm.graph).items():
        node.meta[STREAM_LABEL_META] = None if stream == DEFAULT_STREAM else stream
