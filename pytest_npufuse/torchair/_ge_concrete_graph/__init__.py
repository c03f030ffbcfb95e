"""``torchair._ge_concrete_graph``: TorchAir's private package that turns an FX graph into a GE graph.

TorchAir's tests and converter code import its names at their top (``GeConcreteGraph``, ``ge_apis``,
``ExecutorType``, ``_normalize_ge_graph``); building GE graphs has no meaning on the CPU model, so each
name imports and refuses every use by name, as all of ``torchair.ge`` does (a class's methods can be
read and put back, see :mod:`pytest_npufuse.torchair._internal`). Names are TorchAir's (torchair:
python/torchair/_ge_concrete_graph/, commit fced8842).
"""

from __future__ import annotations

from typing import Any

from .._internal import build_modules, refused_class, refused_function
from ..ge import refusal, refuse_in


def _functions(module: str, *names: str) -> dict[str, Any]:
    return {name: refused_function(f"torchair._ge_concrete_graph.{module}.{name}", refusal) for name in names}


_FX2GE = "torchair._ge_concrete_graph.fx2ge_converter"
build_modules(
    __name__,
    {
        "ge_apis": {},
        "fx2ge_converter": {
            "GeConcreteGraph": refused_class(
                f"{_FX2GE}.GeConcreteGraph",
                ("__call__", "optimize_graph_without_runtime", "compile", "codegen", "dump", "export"),
                refusal,
            ),
            "ExecutorType": refused_class(f"{_FX2GE}.ExecutorType", (), refusal),
            "Placement": refused_class(f"{_FX2GE}.Placement", (), refusal),
            **_functions(
                "fx2ge_converter", "register_fx_node_ge_converter", "declare_supported", "_normalize_ge_graph",
                "_mapping_assign_op_to_graph_output", "replace_data_to_refdata",
            ),
        },
        "graph_pass": _functions("graph_pass", "optimize_reference_op_redundant_copy"),
        "utils": _functions("utils", "dtype_promote", "_append_real_input_shape"),
        "hcom_utils": _functions("hcom_utils", "get_group_name_and_record"),
    },
    refuse_in,
)
