"""``torch_npu.npu.utils`` on the CPU: the SoC and CANN queries test suites gate on.

torch_npu's op tests import it (``import torch_npu.npu.utils as utils``) and its testing helpers ask it
whether the installed CANN is new enough (``_is_gte_cann_version``). The SoC is the modeled target's (the
one ``torch.npu.get_device_name()`` names), the CANN version the release the shim stands in for
(:mod:`pytest_npufuse.torch_npu.release`). The device and stream functions of torch_npu's module are
``torch.npu``'s; any other name of torch_npu's ``__all__`` is refused by name.
"""

from __future__ import annotations

from ..errors import NotModeledAttributeError
from ..torch_npu.release import get_cann_version, is_gte_cann_version, soc_version
from .npu import (  # noqa: F401 - torch_npu.npu.utils re-exports torch.npu's device and stream functions
    current_device,
    current_stream,
    default_stream,
    get_device_name,
    is_bf16_supported,
    set_device,
    set_stream,
    stream,
    synchronize,
)

__all__ = [
    "get_soc_version", "get_cann_version", "current_device", "current_stream", "default_stream",
    "is_bf16_supported", "set_device", "set_stream", "stream", "synchronize",
]


def get_soc_version() -> int:
    """torch_npu's SocVersion number of the modeled target's SoC (221 for Ascend910B2, 250 for Ascend910_9391)."""
    return soc_version(get_device_name())


def _is_gte_cann_version(version: str, module: str = "CANN") -> bool:
    """Whether the modeled CANN is ``version`` or newer."""
    return is_gte_cann_version(version, module)


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotModeledAttributeError(
        f"torch_npu.npu.utils.{name} is not modeled by pytest-npufuse "
        f"(it has: {', '.join(__all__)}, _is_gte_cann_version).",
        op=f"torch_npu.npu.utils.{name}"
    )
