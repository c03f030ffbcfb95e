"""``npugraph_ex._acl_concrete_graph.utils``: the helpers of :mod:`pytest_npufuse.torchair._acl_concrete_graph.utils`
at npugraph_ex's path."""

from __future__ import annotations

from ...torchair._acl_concrete_graph.utils import LazyMessage, WeakRef, reconstruct_args_kwargs  # noqa: F401

__all__: list[str] = []
