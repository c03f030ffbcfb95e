"""Device strings on the CPU: ``"npu"`` and ``"npu:0"`` mean the CPU, wherever torch takes a device.

A script written for an NPU names the device in factories (``torch.ones(..., device="npu")``), in
``Tensor.to("npu")`` / ``Module.to("npu")`` and with ``.npu()``. While the shim is installed those entry
points are wrapped: a device string starting with ``npu`` becomes ``"cpu"`` (index 0 only: the model has
one device) and everything else is passed through untouched. The check is a string-prefix test on the
``device`` argument alone, so a test suite that never says ``npu`` pays one attribute lookup per call.
``torch.device("npu")`` stays unknown to torch (making it known would register an accelerator that
Dynamo then tries to drive); write the device as a string.

A timing-only model lives on the meta device: inside ``init_empty_weights()`` an ``npu`` device means
``meta``, and moving a meta tensor or module "to the NPU" keeps it on the meta device (it has no values
to copy).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..errors import NotModeledError
from ..frontend.meta import creating_empty

# torch factories that take ``device=`` (torch.* functions that allocate a new tensor).
FACTORIES = (
    "tensor", "as_tensor", "asarray", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
    "arange", "range", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
    "rand_like", "randn_like", "randint_like", "empty_strided", "tril_indices", "triu_indices", "scalar_tensor",
)


def _is_npu(device: object) -> bool:
    return device.__class__ is str and device[:3] == "npu"  # type: ignore[index]


def cpu_device(device: str) -> str:
    """``"npu"`` / ``"npu:0"`` -> ``"cpu"``; any other index is refused, since the model has one device."""
    _, _, index = device.partition(":")
    if device[3:4] not in ("", ":") or index not in ("", "0"):
        raise NotModeledError(
            f"device {device!r}: pytest-npufuse models one NPU, 'npu' or 'npu:0'; multi-device code needs a real "
            "NPU (collectives are modeled inside one graph instead).", argument="device"
        )
    return "cpu"


def check_index(device: object, api: str) -> None:
    """Validate a device given to ``.npu(device)`` or a ``torch.npu`` call: None, 0, 'npu', 'npu:0'."""
    if device is None or device == 0 and not isinstance(device, bool):
        return
    if _is_npu(device):
        cpu_device(device)  # type: ignore[arg-type]
        return
    raise NotModeledError(
        f"{api}({device!r}): pytest-npufuse models one NPU, device 0 ('npu' or 'npu:0').",
        op=api, argument="device",
    )


def _on_meta(obj: Any) -> bool:
    """A meta tensor, or a module whose parameters are on the meta device."""
    if isinstance(obj, torch.Tensor):
        return obj.is_meta
    return any(p.is_meta for p in obj.parameters()) if isinstance(obj, torch.nn.Module) else False


def npu_device(device: str, meta: bool = False) -> str:
    """Where an ``npu`` device string puts a tensor: the CPU, or the meta device for a timing-only model
    (``meta``, or inside ``init_empty_weights()``)."""
    target = cpu_device(device)
    return "meta" if meta or creating_empty() else target


def wrap_factory(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` with an ``npu`` device mapped to the CPU (the meta device in ``init_empty_weights()``)."""

    def factory(*args: Any, **kwargs: Any) -> Any:
        if _is_npu(kwargs.get("device")):
            kwargs["device"] = npu_device(kwargs["device"])
        return original(*args, **kwargs)

    factory.__name__ = factory.__qualname__ = original.__name__
    factory.__doc__ = original.__doc__
    return factory


def wrap_to(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Tensor.to`` / ``Module.to`` with an ``npu`` device (first argument or ``device=``) mapped."""

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and _is_npu(args[0]):
            args = (npu_device(args[0], _on_meta(self)), *args[1:])
        if _is_npu(kwargs.get("device")):
            kwargs["device"] = npu_device(kwargs["device"], _on_meta(self))
        return original(self, *args, **kwargs)

    to.__name__ = to.__qualname__ = "to"
    to.__doc__ = original.__doc__
    return to


def tensor_npu(self: torch.Tensor, device: object = None, non_blocking: bool = False, **kwargs: Any) -> torch.Tensor:
    """``Tensor.npu()``: the tensor is already where the model computes, so it is returned as it is."""
    check_index(device, "Tensor.npu")
    return self


@property  # type: ignore[misc]
def tensor_is_npu(self: torch.Tensor) -> bool:
    """``Tensor.is_npu``: True, since every tensor already lives where the model computes (``.npu()``
    returns the tensor itself). Torch also expects it once its PrivateUse1 backend is named ``npu``."""
    return True


def module_npu(self: torch.nn.Module, device: object = None) -> torch.nn.Module:
    """``Module.npu()``: parameters already live where the model computes."""
    check_index(device, "Module.npu")
    return self


class _NpuHooks(torch._C._acc.PrivateUse1Hooks):
    """The PrivateUse1 runtime hooks torch_npu's C++ backend registers: the one modeled device is there."""

    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _NpuGuard(torch._C._acc.DeviceGuard):
    """The PrivateUse1 device guard: device 0 and its default stream, all torch asks of it."""

    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1


def provide_privateuse1_runtime() -> None:
    """Once ``torch.utils.rename_privateuse1_backend("npu")`` made ``npu`` torch's accelerator, torch and
    Dynamo ask its runtime for the current device and stream, which the real torch_npu answers from C++.
    Without a runtime behind the name every ``torch.compile`` fails (``PyTorch is not linked with support
    for npu devices``), so the shim registers Python hooks and a device guard answering for the one
    modeled device. Torch keeps these for the process (they cannot be unregistered); a runtime that is
    already there is left alone."""
    try:
        torch.accelerator.current_stream()
    except RuntimeError:
        torch._C._acc.register_python_privateuseone_hook(_NpuHooks())
        torch._C._acc.register_python_privateuseone_device_guard(_NpuGuard())
