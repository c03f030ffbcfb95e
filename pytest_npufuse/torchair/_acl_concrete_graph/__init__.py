"""``torchair._acl_concrete_graph``: TorchAir's private aclgraph package.

Of it, the model has what user code writes to or calls: :mod:`.graph_pass` (the registry of
reinplaceable ops and the pass over mutated inputs), :mod:`.utils`' general helpers and the graph
counter of :mod:`.replace_stream_event`. The rest (``AclConcreteGraph``, static kernel compilation, the
cat-with-out-tensor pass) is TorchAir's machinery: its names import, and using one is refused by name
(:mod:`pytest_npufuse.torchair._internal`), so tests that import them at their top, and save and
restore them around each case, run (torchair: python/torchair/_acl_concrete_graph/, commit fced8842).
"""

from __future__ import annotations

from typing import Any, Mapping

from .._internal import build_modules, refused_class, refused_function
from . import graph_pass, replace_stream_event, utils  # noqa: F401  (reached as attributes: torchair._acl_concrete_graph.replace_stream_event)


def machinery_modules(root: str) -> Mapping[str, Mapping[str, Any]]:
    """The machinery submodules of ``<root>._acl_concrete_graph`` (``torchair`` or ``npugraph_ex``, which
    ships the same package), each name refused under its own path."""
    path = f"{root}._acl_concrete_graph"
    return {
        "fx2acl_converter": {
            "AclConcreteGraph": refused_class(
                f"{path}.fx2acl_converter.AclConcreteGraph",
                ("__call__", "optimize_graph_without_runtime", "compile", "codegen", "save_fx_graph"),
            )
        },
        "static_kernel": {
            name: refused_function(f"{path}.static_kernel.{name}") for name in ("static_compile", "compile_static_kernel")
        },
        "cat_optimization": {
            "optimize_cat_with_out_tensor": refused_function(f"{path}.cat_optimization.optimize_cat_with_out_tensor")
        },
    }


build_modules(__name__, machinery_modules("torchair"))
