"""``npugraph_ex._acl_concrete_graph.graph_pass``: the reinplace registry of
:mod:`pytest_npufuse.torchair.reinplace` at npugraph_ex's path (cann-recipes-infer tries this path too)."""

from __future__ import annotations

from ...torchair.reinplace import (
    InplaceableNpuOp,
    check_multi_stream_for_multi_reinplace,
    check_multi_stream_for_single_reinplace,
    inplaceable_npu_ops,
    register_inplaceable_npu_op,
)

__all__ = [
    "InplaceableNpuOp",
    "inplaceable_npu_ops",
    "register_inplaceable_npu_op",
    "check_multi_stream_for_single_reinplace",
    "check_multi_stream_for_multi_reinplace",
]
