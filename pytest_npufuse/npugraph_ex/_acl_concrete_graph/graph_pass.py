"""``npugraph_ex._acl_concrete_graph.graph_pass``: the reinplace registry of
:mod:`pytest_npufuse.torchair._reinplace` at npugraph_ex's path (cann-recipes-infer tries this path too)."""

from __future__ import annotations

from ...torchair._reinplace import *
from ...torchair._reinplace import __all__  # noqa: F401
from ...torchair._internal import refused_function

# As torchair's: reinplacing of functional aten ops is not reproduced.
_reinplace_inplaceable_ops_pass = refused_function("npugraph_ex._acl_concrete_graph.graph_pass._reinplace_inplaceable_ops_pass")
