"""``torch_npu.utils``: the one name of torch_npu's utility module that tests ask, the CANN version.

The module's name is torch_npu's (``import torch_npu.utils``). Of its ``__all__`` the model answers
``get_cann_version`` (the CANN release the shim stands in for, :mod:`.release`); tensor combining, flop
counting, thread affinity and asynchronous saving act on a real device and are refused by name. Its
private ``_path_manager`` (``PathManager``, which torch_npu's ONNX tests import to make and remove their
export folders) is a submodule here too.
"""

from __future__ import annotations

from ...errors import NotModeledAttributeError
from ..release import get_cann_version

__all__ = ["get_cann_version"]


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotModeledAttributeError(
        f"torch_npu.utils.{name} is not modeled by pytest-npufuse (it has: {', '.join(__all__)}).",
        op=f"torch_npu.utils.{name}"
    )
