"""The shim's changes to torch: ``torch.npu`` on the CPU, ``"npu"`` devices, ``.npu()``,
``Tensor.record_stream`` for our streams (also under Dynamo), eager matmuls with the Cube's numerics
(:mod:`.eager`) and the ``npugraph_ex`` backend.

Each change is undone by :func:`pytest_npufuse.uninstall_shims` (they are recorded in its undo list).
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable, Mapping, Sequence

import torch

from .. import torch_npu
from ..vocabulary import Mode
from . import devices, npu
from .collectives import install_collectives
from .eager import install_cube_matmuls
from .undo import on_undo, patch

NPUGRAPH_EX = Mode.NPUGRAPH_EX.value  # the torch.compile backend name TorchAir registers


def install_devices() -> None:
    """torch.npu, npu device strings, .npu(), Tensor.record_stream and the npugraph_ex backend."""
    patch(torch_npu, "npu", npu)
    # torch.device("meta") as a context (init_empty_weights) redirects the factories it lists, by identity,
    # on their first use: list them before they are wrapped, so the wrappers' calls are still redirected.
    torch.utils._device._device_constructors()
    for name in devices.FACTORIES:
        factory = devices.wrap_factory(getattr(torch, name))
        # Dynamo lists torch's functions once, by identity: a wrapper installed after that (a second
        # install in one process) would be inlined into a call of the builtin it wraps, which Dynamo
        # cannot trace. Allowed in the graph, it is a call there that AOT traces into aten ops.
        torch._dynamo.allow_in_graph(factory)
        patch(torch, name, factory)
    patch(torch.Tensor, "to", devices.wrap_to(torch.Tensor.to))
    patch(torch.nn.Module, "to", devices.wrap_to(torch.nn.Module.to))
    patch(torch.Tensor, "npu", devices.tensor_npu)
    patch(torch.Tensor, "is_npu", devices.tensor_is_npu)
    patch(torch.nn.Module, "npu", devices.module_npu)
    patch(torch.Tensor, "record_stream", _record_stream(torch.Tensor.record_stream))
    patch(torch, "npu", npu)
    _patch_module_entry("torch.npu", npu)
    patch(torch, "_register_device_module", _share_device_module(torch._register_device_module))
    _share_assigned_npu()
    install_cube_matmuls()
    install_collectives()
    _patch_dynamo_record_stream()
    _register_npugraph_ex()
    patch(torch.ops.npu, "__class__", _NpuOps)


class _NpuOps(torch._ops._OpNamespace):
    """``torch.ops.npu`` under the shim: an op neither pytest-npufuse nor the user defined is a missing op,
    listed with a check's other gaps, as ``torch_npu.<op>`` is (real torch_npu puts its ops there)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("__"):
                raise
            return torch_npu.missing_op(name, f"torch.ops.npu.{name}")


def _patch_module_entry(name: str, module: Any) -> None:
    previous = sys.modules.get(name)
    sys.modules[name] = module

    def undo() -> None:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous

    on_undo(undo)


def _share_device_module(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch._register_device_module("npu", module)`` from a test that fakes the NPU runtime itself
    (TorchAir's own CPU tests do, after ``torch.utils.rename_privateuse1_backend("npu")``). Torch refuses a
    second ``npu`` module, so the shim steps aside: the caller's module becomes ``torch.npu``, and the
    names it lacks are still the shim's (its own names win), so streams, events and seeds keep working.
    With the backend renamed to ``npu`` and no runtime behind it, the shim provides the runtime torch then
    asks for (:func:`devices.provide_privateuse1_runtime`). Any other device goes to torch unchanged."""

    def register_device_module(device_type: str, module: Any) -> None:
        if str(device_type).split(":")[0] != "npu" or getattr(torch, "npu", None) is not npu:
            return original(device_type, module)
        if "__getattr__" not in vars(module):
            module.__getattr__ = _fallback_to(npu)
            on_undo(lambda: delattr(module, "__getattr__"))
        setattr(torch, "npu", module)
        sys.modules["torch.npu"] = module
        if torch._C._get_privateuse1_backend_name() == "npu":
            devices.provide_privateuse1_runtime()
        return None

    register_device_module.__doc__ = original.__doc__
    return register_device_module


def _share_assigned_npu() -> None:
    """``torch.npu = stub`` from a test that stands its own object in for the NPU module (TorchAir's
    aclgraph tests assign a ``StubNpu`` instance in ``setUp``): as for a registered device module, the
    names the object lacks are read from the shim's ``torch.npu``, since torch itself asks the device
    module for them (Dynamo calls ``torch.accelerator.is_available()``, which asks ``torch.npu``). The
    object's class gets a ``__getattr__`` (an existing one is kept); torch's module class is extended to
    see the assignment, and both are undone with the shim."""
    original = type(torch)

    class TorchModule(original):  # type: ignore[misc, valid-type]
        def __setattr__(self, name: str, value: Any) -> None:
            if name == "npu" and value is not None and not isinstance(value, types.ModuleType):
                _fall_back_for_instances(type(value))
            super().__setattr__(name, value)

    torch.__class__ = TorchModule
    on_undo(lambda: setattr(torch, "__class__", original))


def _fall_back_for_instances(cls: type) -> None:
    """Instances of ``cls`` read the names they lack from the shim's ``torch.npu``."""
    if hasattr(cls, "__getattr__"):  # the class answers for missing names itself
        return
    fallback = _fallback_to(npu)

    def __getattr__(self: Any, name: str) -> Any:
        return fallback(name)

    cls.__getattr__ = __getattr__  # type: ignore[attr-defined]
    on_undo(lambda: delattr(cls, "__getattr__"))


def _fallback_to(owner: Any) -> Callable[[str], Any]:
    """A module ``__getattr__`` that reads a name the module lacks from ``owner``."""

    def fallback(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(owner, name)

    return fallback


def _record_stream(original: Callable[..., Any]) -> Callable[..., Any]:
    def record_stream(self: torch.Tensor, stream: Any) -> None:
        if isinstance(stream, npu.Stream):
            npu.record_stream(self, stream)
            return None
        return original(self, stream)

    record_stream.__doc__ = original.__doc__
    return record_stream


def _patch_dynamo_record_stream() -> None:
    """Dynamo traces ``Tensor.record_stream`` itself and accepts only ``torch.Stream`` objects; for our
    streams it must emit our op instead, with the stream's tag read from the traced object."""
    from torch._dynamo.variables.tensor import TensorVariable

    original = TensorVariable.method_record_stream

    def method_record_stream(self: Any, tx: Any, stream: Any) -> Any:
        if getattr(stream, "python_type", lambda: None)() is npu.Stream:
            from torch._dynamo.variables import ConstantVariable

            tag = stream.var_getattr(tx, "tag").as_python_constant()
            tx.output.create_proxy("call_function", torch.ops.npufuse.record_stream.default, (self.as_proxy(), tag), {})
            return ConstantVariable.create(None)
        return original(self, tx, stream)

    patch(TensorVariable, "method_record_stream", method_record_stream)


def _npugraph_ex(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Mapping[str, Any] | None = None
) -> Callable[..., Any]:
    """``torch.compile(backend="npugraph_ex")``: the npugraph_ex package's backend, imported at the first
    compile. torch is patched the moment it is imported, which may be in the middle of ``import torchair``
    (a script's first line), and the npugraph_ex package builds on torchair's config module."""
    from ..npugraph_ex.npu_fx_compiler import npugraph_ex_backend

    return npugraph_ex_backend(gm, example_inputs, options)


def _register_npugraph_ex() -> None:
    from torch._dynamo.backends import registry

    if NPUGRAPH_EX in registry._COMPILER_FNS:
        return
    registry.register_backend(_npugraph_ex, name=NPUGRAPH_EX)

    def unregister() -> None:
        registry._COMPILER_FNS.pop(NPUGRAPH_EX, None)
        registry._BACKENDS.pop(NPUGRAPH_EX, None)

    on_undo(unregister)
