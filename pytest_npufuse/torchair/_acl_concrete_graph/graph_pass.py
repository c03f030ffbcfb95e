"""``torchair._acl_concrete_graph.graph_pass``: the names of TorchAir's module that user code uses to
register its own functional ops as reinplaceable in the aclgraph modes (hicann cann-recipes-infer
registers its mla_prolog op this way); the registry and the pass are :mod:`pytest_npufuse.torchair.reinplace`."""

from __future__ import annotations

from ..reinplace import (
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
