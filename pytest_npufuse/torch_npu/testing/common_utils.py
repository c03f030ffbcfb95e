"""``torch_npu.testing.common_utils``: input makers and the device/CANN skip decorators of torch_npu's tests.

The device a test runs on is the modeled target's: ``SupportedDevices(['Ascend910B'])`` runs its test when
``torch.npu.get_device_name()`` names an Atlas A2 SoC (``--npu-target=a2``, ``910b1`` ... ``910b4``) and skips
it otherwise, with the reason upstream gives. Behaviour follows Ascend/pytorch
``torch_npu/testing/common_utils.py`` @9e73e708ab93.
"""

from __future__ import annotations

import functools
import itertools
import os
import unittest
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from ...errors import ArgumentError
from ..memory import npu_format_cast
from ..release import get_cann_version, is_gte_cann_version

__all__ = [
    "SupportedDevices", "SkipIfNotGteCANNVersion", "create_common_tensor", "create_dtype_tensor", "get_npu_device",
    "set_npu_device", "device_family", "iter_indices", "is_iterable",
]
# The environment variable torch_npu's test runner sets to pick a device index.
DEVICE_VARIABLE = "SET_NPU_DEVICE"
# How many leading characters of a SoC name make its family, as SupportedDevices lists them: "Ascend910B"
# for the 910B bins, "Ascend910_93" for the A3 dies, "Ascend950" for the 950 parts.
_FAMILY_PREFIX = (("Ascend910_", 12), ("Ascend950", 9))
_DEFAULT_FAMILY_LENGTH = 10


def get_npu_device() -> str:
    """The device string tests put inputs on: ``npu:<SET_NPU_DEVICE>``, else ``npu:0``."""
    index = os.environ.get(DEVICE_VARIABLE)
    if index is None:
        return "npu:0"
    if not (index.isascii() and index.isdigit() and len(index) <= 9):
        raise ArgumentError(
            f"environment variable {DEVICE_VARIABLE}={index[:40]!r} is not a device index; torch_npu's test runner "
            f"sets it to a whole number such as 0 (the test device is npu:<index>). Set {DEVICE_VARIABLE}=0 or "
            "unset it.",
            argument=DEVICE_VARIABLE,
        )
    return f"npu:{int(index)}"


def set_npu_device() -> str:
    """Select the test device (the one modeled NPU) and return its string."""
    device = get_npu_device()
    torch.npu.set_device(device)
    return device


def iter_indices(tensor: torch.Tensor) -> Iterable[Any]:
    """Every index of ``tensor`` (an int for 1-D, a tuple above; none for a 0-D tensor)."""
    if tensor.dim() == 0:
        return range(0)
    if tensor.dim() == 1:
        return range(tensor.size(0))
    return itertools.product(*(range(size) for size in tensor.size()))


def is_iterable(obj: object) -> bool:
    try:
        iter(obj)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True


def _on_device(values: np.ndarray, device: str | None, npu_format: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The CPU tensor of ``values`` and its copy on ``device``, cast to ``npu_format`` unless it is -1."""
    cpu = torch.from_numpy(values)
    npu = torch.from_numpy(values).to(device if device is not None else get_npu_device())
    if npu_format != -1:
        npu = npu_format_cast(npu, npu_format)
    return cpu, npu


def create_common_tensor(
    item: Sequence[Any], minValue: float, maxValue: float, device: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``item`` = (numpy dtype, ACL format or -1, shape): uniform values in [minValue, maxValue) as a CPU
    tensor and the same values on the NPU in that format."""
    dtype, npu_format, shape = item[0], item[1], item[2]
    values = np.random.uniform(minValue, maxValue, shape).astype(dtype)
    return _on_device(values, device, npu_format)


def create_dtype_tensor(
    shape: Sequence[int], dtype: torch.dtype, npu_format: int = -1, min_value: int = -5, max_value: int = 5,
    no_zero: bool = False, device: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A CPU tensor and its NPU copy of torch ``dtype``: random bools, uniform half/float values, or random
    integers (as int32) in [min_value, max_value]; ``no_zero`` turns zeros into ones. Only floating
    tensors are cast to ``npu_format``."""
    if dtype == torch.bool:
        values = np.random.randint(0, 2, size=shape).astype(bool)
    elif dtype in (torch.half, torch.float):
        values = np.random.uniform(min_value, max_value, shape).astype(np.float16 if dtype == torch.half else np.float32)
    else:
        values = np.random.randint(min_value, max_value + 1, size=shape).astype(np.int32)
    if no_zero:
        values = np.where(values != 0, values, np.ones_like(values))
    return _on_device(values, device, npu_format if dtype in (torch.half, torch.float) else -1)


def device_family(device_name: str) -> str:
    """The family of a SoC name as ``SupportedDevices`` lists it (``Ascend910B2`` -> ``Ascend910B``,
    ``Ascend910_9391`` -> ``Ascend910_93``)."""
    length = next((n for prefix, n in _FAMILY_PREFIX if device_name.startswith(prefix)), _DEFAULT_FAMILY_LENGTH)
    return device_name[:length]


class SupportedDevices:
    """Run the decorated test method only on the listed SoC families; skip it on any other."""

    def __init__(self, supported_devices: list[str]) -> None:
        self.supported_devices = supported_devices

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def gated(test: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # a failure in the test points at the test's line
            family = device_family(torch.npu.get_device_name(0))
            if family not in self.supported_devices:
                raise unittest.SkipTest(f"Only run on {self.supported_devices!r}, current device is {family}.")
            return fn(test, *args, **kwargs)

        return gated


class SkipIfNotGteCANNVersion:
    """Run the decorated test method only when the modeled CANN (of ``module``) is ``base_version`` or newer."""

    def __init__(self, base_version: str, module: str = "CANN") -> None:
        self.base_version = base_version
        self.module = module

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def gated(test: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # a failure in the test points at the test's line
            if not is_gte_cann_version(self.base_version, module=self.module):
                current = get_cann_version(module=self.module)
                raise unittest.SkipTest(
                    f"Only run on {self.base_version} or greater, current cann version is {current}."
                )
            return fn(test, *args, **kwargs)

        return gated
