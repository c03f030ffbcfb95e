"""``torchair._acl_concrete_graph.graph_pass``: the names of TorchAir's module that user code uses to
register its own functional ops as reinplaceable in the aclgraph modes (hicann cann-recipes-infer
registers its mla_prolog op this way); the registry and the pass are :mod:`pytest_npufuse.torchair._reinplace`,
whose public names (its ``__all__``) this module is."""

from __future__ import annotations

from .._reinplace import *
from .._reinplace import __all__  # noqa: F401
from .._internal import refused_function

# TorchAir's reinplacing of functional aten ops and of registered ops on intermediate tensors (torch's
# reinplace pass), which the model does not reproduce; tests save and restore it around each case.
_reinplace_inplaceable_ops_pass = refused_function("torchair._acl_concrete_graph.graph_pass._reinplace_inplaceable_ops_pass")
