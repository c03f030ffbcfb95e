"""``npugraph_ex._acl_concrete_graph.graph_pass``: the reinplace registry of
:mod:`pytest_npufuse.torchair._reinplace` at npugraph_ex's path (cann-recipes-infer tries this path too)."""

from __future__ import annotations

from ...torchair._reinplace import *
from ...torchair._reinplace import __all__  # noqa: F401
