"""``torchair.ge_concrete_graph``: the module paths TorchAir keeps for compatibility with converter
code written before its GE modules went private (torchair: python/torchair/ge_concrete_graph/, kept
"for N+4 versions" from 2024-07-27).

Converter modules import these names at their top, so every module and name of the compatibility list
imports; each name is a :class:`~pytest_npufuse.torchair.ge.RefusedName`, an error naming it when used,
as all of ``torchair.ge``; a name off the list is refused the same way. ``ge_converter.experimental``
holds the two modules that patch torch.distributed when imported (:mod:`.ge_converter.experimental`). The submodules are built from :data:`COMPAT_NAMES` when this package loads.
"""

from __future__ import annotations

import sys
import types
from typing import Mapping

from ..ge import RefusedName, refuse_in

COMPAT_NAMES: Mapping[str, tuple[str, ...]] = {
    "ge_apis": (),
    "fx2ge_converter": ("register_fx_node_ge_converter", "declare_supported"),
    "ge_graph": (
        "Tensor", "TensorSpec", "DataType", "get_default_ge_graph", "next_unique_name", "compat_as_bytes",
        "compat_as_bytes_list", "get_invalid_desc", "auto_convert_to_tensor",
    ),
    "utils": ("dtype_promote",),
}


def _build() -> None:
    for relative, names in COMPAT_NAMES.items():
        full = f"{__name__}.{relative}"
        path = f"torchair.ge_concrete_graph.{relative}"
        module = types.ModuleType(full, f"{path}: compatibility names, not modeled.")
        module.__getattr__ = refuse_in(path)  # type: ignore[method-assign]
        module.__path__ = []  # type: ignore[attr-defined]  # a package, so deeper compatibility paths import
        module.__all__ = list(names)  # type: ignore[attr-defined]
        for name in names:
            setattr(module, name, RefusedName(f"{path}.{name}"))
        sys.modules[full] = module
        parent, _, leaf = relative.rpartition(".")
        setattr(sys.modules[f"{__name__}.{parent}"] if parent else sys.modules[__name__], leaf, module)


_build()
