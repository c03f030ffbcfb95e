"""The import shim: run code written for a real NPU (``import torchair``, ``import torch_npu``,
``.npu()``, ``torch.npu.Stream``) unchanged on the CPU model.

    import pytest_npufuse
    pytest_npufuse.install_shims()
    import torchair, torch_npu          # pytest-npufuse's modules

:func:`install_shims` maps the package names ``torchair`` and ``torch_npu`` (and their submodules) to
ours, installs ``torch.npu`` (:mod:`pytest_npufuse.shim.npu`), maps ``"npu"`` devices to the CPU
(:mod:`pytest_npufuse.shim.devices`) and registers the ``npugraph_ex`` ``torch.compile`` backend. A name
whose real package is importable is never shadowed: with a real ``torch_npu``, neither it nor ``torch.npu``
nor any device is touched. Everything is undone by :func:`uninstall_shims`. The pytest plugin calls
:func:`install_shims` when ``npufuse_shim_modules`` is ``true``, or ``auto`` (the default) and the real
packages are absent.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import devices

ROOTS = {
    "torchair": "pytest_npufuse.torchair",
    "torch_npu": "pytest_npufuse.torch_npu",
    "npugraph_ex": "pytest_npufuse.npugraph_ex",
}
EXACT = {"torch_npu.npu": "pytest_npufuse.shim.npu"}
NPUGRAPH_EX = "npugraph_ex"


@dataclass(frozen=True)
class ShimState:
    """What the shim maps right now (empty when it is not installed)."""

    modules: tuple[str, ...] = ()
    real: tuple[str, ...] = ()
    torch_npu_device: bool = False

    @property
    def active(self) -> bool:
        return bool(self.modules)

    def describe(self) -> str:
        """One line for the pytest header and the ``run`` command."""
        if not self.active and not self.real:
            return "shim off"
        mapped = ", ".join(f"{name} -> {ROOTS[name]}" for name in self.modules)
        parts = [f"shim active: {mapped}" if mapped else "shim inactive"]
        if self.torch_npu_device:
            parts.append('torch.npu on the CPU, device "npu" -> cpu, torch.compile backend "npugraph_ex"')
        if self.real:
            parts.append(f"real {', '.join(self.real)} installed, left alone")
        return "; ".join(parts)


_STATE = ShimState()
_UNDO: list[Callable[[], None]] = []


def real_packages() -> tuple[str, ...]:
    """The packages among ``torchair`` / ``torch_npu`` that are really installed (not our aliases)."""
    if _STATE.active:
        return _STATE.real
    return tuple(name for name in ROOTS if importlib.util.find_spec(name) is not None)


def state() -> ShimState:
    return _STATE


def _patch(owner: Any, name: str, value: Any) -> None:
    missing = object()
    original = owner.__dict__.get(name, missing) if isinstance(owner, type) else getattr(owner, name, missing)

    def undo() -> None:
        if original is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, original)

    setattr(owner, name, value)
    _UNDO.append(undo)


def _install_devices() -> None:
    """torch.npu, npu device strings, .npu(), Tensor.record_stream and the npugraph_ex backend."""
    from .. import torch_npu
    from . import npu

    _patch(torch_npu, "npu", npu)
    for name in devices.FACTORIES:
        factory = devices.wrap_factory(getattr(torch, name))
        # Dynamo lists torch's functions once, by identity: a wrapper installed after that (a second
        # install in one process) would be inlined into a call of the builtin it wraps, which Dynamo
        # cannot trace. Allowed in the graph, it is a call there that AOT traces into aten ops.
        torch._dynamo.allow_in_graph(factory)
        _patch(torch, name, factory)
    _patch(torch.Tensor, "to", devices.wrap_to(torch.Tensor.to))
    _patch(torch.nn.Module, "to", devices.wrap_to(torch.nn.Module.to))
    _patch(torch.Tensor, "npu", devices.tensor_npu)
    _patch(torch.Tensor, "is_npu", devices.tensor_is_npu)
    _patch(torch.nn.Module, "npu", devices.module_npu)
    _patch(torch.Tensor, "record_stream", _record_stream(torch.Tensor.record_stream))
    _patch(torch, "npu", npu)
    _patch_module_entry("torch.npu", npu)
    _patch(torch, "_register_device_module", _share_device_module(torch._register_device_module))
    _patch_dynamo_record_stream()
    _register_npugraph_ex()


def _patch_module_entry(name: str, module: Any) -> None:
    previous = sys.modules.get(name)
    sys.modules[name] = module

    def undo() -> None:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous

    _UNDO.append(undo)


def _share_device_module(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch._register_device_module("npu", module)`` from a test that fakes the NPU runtime itself
    (TorchAir's own CPU tests do, after ``torch.utils.rename_privateuse1_backend("npu")``). Torch refuses a
    second ``npu`` module, so the shim steps aside: the caller's module becomes ``torch.npu``, and the
    names it lacks are still the shim's (its own names win), so streams, events and seeds keep working.
    With the backend renamed to ``npu`` and no runtime behind it, the shim provides the runtime torch then
    asks for (:func:`devices.provide_privateuse1_runtime`). Any other device goes to torch unchanged."""
    from . import npu

    def register_device_module(device_type: str, module: Any) -> None:
        if str(device_type).split(":")[0] != "npu" or getattr(torch, "npu", None) is not npu:
            return original(device_type, module)
        if "__getattr__" not in vars(module):
            module.__getattr__ = _fallback_to(npu)
            _UNDO.append(lambda: delattr(module, "__getattr__"))
        setattr(torch, "npu", module)
        sys.modules["torch.npu"] = module
        if torch._C._get_privateuse1_backend_name() == "npu":
            devices.provide_privateuse1_runtime()
        return None

    register_device_module.__doc__ = original.__doc__
    return register_device_module


def _fallback_to(owner: Any) -> Callable[[str], Any]:
    """A module ``__getattr__`` that reads a name the module lacks from ``owner``."""

    def fallback(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(owner, name)

    return fallback


def _record_stream(original: Callable[..., Any]) -> Callable[..., Any]:
    def record_stream(self: torch.Tensor, stream: Any) -> None:
        from . import npu

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

    from . import npu

    original = TensorVariable.method_record_stream

    def method_record_stream(self: Any, tx: Any, stream: Any) -> Any:
        if getattr(stream, "python_type", lambda: None)() is npu.Stream:
            from torch._dynamo.variables import ConstantVariable

            tag = stream.var_getattr(tx, "tag").as_python_constant()
            tx.output.create_proxy("call_function", torch.ops.npufuse.record_stream.default, (self.as_proxy(), tag), {})
            return ConstantVariable.create(None)
        return original(self, tx, stream)

    _patch(TensorVariable, "method_record_stream", method_record_stream)


def _register_npugraph_ex() -> None:
    from torch._dynamo.backends import registry

    from ..npugraph_ex.npu_fx_compiler import npugraph_ex_backend

    if NPUGRAPH_EX in registry._COMPILER_FNS:
        return
    registry.register_backend(npugraph_ex_backend, name=NPUGRAPH_EX)

    def unregister() -> None:
        registry._COMPILER_FNS.pop(NPUGRAPH_EX, None)
        registry._BACKENDS.pop(NPUGRAPH_EX, None)

    _UNDO.append(unregister)


def install_shims() -> ShimState:
    """Map ``torchair`` / ``torch_npu`` to pytest-npufuse and put ``torch.npu`` on the CPU, for every
    package that is not really installed. Idempotent; returns what is mapped."""
    global _STATE
    from .imports import AliasFinder

    if _STATE.active:
        return _STATE
    real = real_packages()
    roots = {name: target for name, target in ROOTS.items() if name not in real}
    if not roots:
        _STATE = ShimState((), real, False)
        return _STATE
    finder = AliasFinder(roots, {k: v for k, v in EXACT.items() if k.partition(".")[0] in roots})
    sys.meta_path.insert(0, finder)

    def remove_finder() -> None:
        # Every finder of ours, not just this one: pytester restores sys.meta_path snapshots, which can
        # bring back one installed before.
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, AliasFinder)]
        finder.remove_aliases()

    _UNDO.append(remove_finder)
    with_device = "torch_npu" in roots and not hasattr(torch, "npu")
    if with_device:
        _install_devices()
    _STATE = ShimState(tuple(roots), real, with_device)
    return _STATE


def uninstall_shims() -> None:
    """Undo :func:`install_shims`, newest change first."""
    global _STATE
    while _UNDO:
        _UNDO.pop()()
    _STATE = ShimState()
