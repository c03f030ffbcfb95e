"""Device strings on the CPU: ``"npu"`` and ``"npu:0"`` mean the CPU, wherever torch takes a device.

A script written for an NPU names the device in factories (``torch.ones(..., device="npu")``), in
``Tensor.to("npu")`` / ``Module.to("npu")`` and with ``.npu()``. While the shim is installed those entry
points are wrapped: a device string starting with ``npu`` becomes ``"cpu"`` (any index below the target's
NPUs per node: a process stands for one NPU, and several processes for several) and everything else is
passed through untouched. The check is a string-prefix test on the
``device`` argument alone, so a test suite that never says ``npu`` pays one attribute lookup per call.
``torch.device("npu")`` stays unknown to torch (making it known would register an accelerator that
Dynamo then tries to drive) until the process joins an ``"hccl"`` process group; write the device as a
string.

A timing-only model lives on the meta device: inside ``init_empty_weights()`` an ``npu`` device means
``meta``, and moving a meta tensor or module "to the NPU" keeps it on the meta device (it has no values
to copy).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..errors import NotModeledError
from ..frontend.meta import creating_empty

# The NPU this process computes as (``torch.npu.set_device``): a property of the real process.
SELECTED: dict[str, int] = {"index": 0}

# torch factories that take ``device=`` (torch.* functions that allocate a new tensor).
FACTORIES = (
    "tensor", "as_tensor", "asarray", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
    "arange", "range", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
    "rand_like", "randn_like", "randint_like", "empty_strided", "tril_indices", "triu_indices", "scalar_tensor",
)


def _is_npu(device: object) -> bool:
    if device.__class__ is str:
        return device[:3] == "npu"  # type: ignore[index]
    return device.__class__ is torch.device and device.type == "npu"  # type: ignore[attr-defined]


def node_devices() -> int:
    """The NPUs of one node of the modeled target (``[comm] node_devices``): ``torch.npu.device_count()``."""
    from ..pipeline.backend import current_profile

    return current_profile().comm_node_devices


def device_index(device: object, api: str) -> int:
    """The NPU index ``device`` names (None or an index-less ``npu``: the current one), checked against
    the node's NPUs."""
    if device is None:
        return SELECTED["index"]
    if isinstance(device, int) and not isinstance(device, bool):
        return _in_range(device, device, api)
    if device.__class__ is torch.device and device.type == "npu":  # type: ignore[attr-defined]
        index = device.index  # type: ignore[attr-defined]
        return SELECTED["index"] if index is None else _in_range(index, device, api)
    if device.__class__ is str and device[:3] == "npu":  # type: ignore[index]
        _, _, index = device.partition(":")  # type: ignore[attr-defined]
        if device[3:4] in ("", ":") and (index == "" or index.isdigit()):  # type: ignore[index]
            return SELECTED["index"] if index == "" else _in_range(int(index), device, api)
    raise NotModeledError(
        f"{api}({device!r}): an NPU is named 'npu', 'npu:<index>', torch.device('npu', index) or an int index."
    )


def _in_range(index: int, device: object, api: str) -> int:
    count = node_devices()
    if not 0 <= index < count:
        raise NotModeledError(
            f"{api}({device!r}): the modeled node has {count} NPUs (0 to {count - 1}). One process stands for one "
            "NPU: multi-NPU code starts a process per rank, and each calls torch.npu.set_device(rank).",
            op=api, argument="device",
        )
    return index


def cpu_device(device: object) -> str:
    """``"npu"`` / ``"npu:<index>"`` -> ``"cpu"``: every modeled NPU computes on the CPU of its process."""
    device_index(device, "device")
    return "cpu"


def check_index(device: object, api: str) -> None:
    """Validate a device given to ``.npu(device)`` or a ``torch.npu`` call."""
    device_index(device, api)


def _on_meta(obj: Any) -> bool:
    """A meta tensor, or a module whose parameters are on the meta device."""
    if isinstance(obj, torch.Tensor):
        return obj.is_meta
    return any(p.is_meta for p in obj.parameters()) if isinstance(obj, torch.nn.Module) else False


def npu_device(device: object, meta: bool = False) -> str:
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
