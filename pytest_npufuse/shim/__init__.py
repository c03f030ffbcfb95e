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

from ..session import Scope, SessionKey, current_session
from .imports import AliasFinder, PostImportHook
from .undo import on_undo, undo_all

ROOTS = {
    "torchair": "pytest_npufuse.torchair",
    "torch_npu": "pytest_npufuse.torch_npu",
    "npugraph_ex": "pytest_npufuse.npugraph_ex",
}
EXACT = {"torch_npu.npu": "pytest_npufuse.shim.npu", "torch_npu.npu.utils": "pytest_npufuse.shim.npu_utils"}


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


# The shim maps the real process's imports, so every session shares what it maps.
SHIM: SessionKey[ShimState] = SessionKey("the shim's state", ShimState, Scope.PROCESS)


def real_packages() -> tuple[str, ...]:
    """The packages among ``torchair`` / ``torch_npu`` that are really installed (not our aliases)."""
    current = state()
    if current.active:
        return current.real
    return tuple(name for name in ROOTS if importlib.util.find_spec(name) is not None)


def state() -> ShimState:
    return current_session()[SHIM]


def _became(new: ShimState) -> ShimState:
    current_session()[SHIM] = new
    return new


def install_shims(*, defer_torch: bool = False) -> ShimState:
    """Map ``torchair`` / ``torch_npu`` to pytest-npufuse and put ``torch.npu`` on the CPU, for every
    package that is not really installed. Idempotent; returns what is mapped.

    ``defer_torch`` (the pytest plugin's way) patches torch only when torch is imported, as a real
    torch_npu is loaded with torch by torch's device-backend autoload: a run that never imports torch
    pays nothing for the shim.
    """
    if state().active:
        return state()
    real = real_packages()
    roots = {name: target for name, target in ROOTS.items() if name not in real}
    if not roots:
        return _became(ShimState((), real, False))
    finder = AliasFinder(roots, {k: v for k, v in EXACT.items() if k.partition(".")[0] in roots})
    sys.meta_path.insert(0, finder)

    def remove_finder() -> None:
        # Every finder of ours, not just this one: pytester restores sys.meta_path snapshots, which can
        # bring back one installed before (and the names it presented since).
        ours = [f for f in sys.meta_path if isinstance(f, AliasFinder)]
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, AliasFinder)]
        for each in {id(f): f for f in [*ours, finder]}.values():
            each.remove_aliases()

    on_undo(remove_finder)
    torch_loaded = "torch" in sys.modules
    with_device = "torch_npu" in roots and not (torch_loaded and hasattr(sys.modules["torch"], "npu"))
    if with_device and (torch_loaded or not defer_torch):
        _patch_torch()
    elif with_device:
        hook = PostImportHook("torch", _patch_torch)
        sys.meta_path.insert(0, hook)
        on_undo(hook.remove)
    return _became(ShimState(tuple(roots), real, with_device))


def _patch_torch() -> None:
    from .torch_patches import install_devices  # torch is loaded by now: patching it needs it

    install_devices()


def uninstall_shims() -> None:
    """Undo :func:`install_shims`, newest change first."""
    undo_all()
    _became(ShimState())
