"""The import shim inside pytest: ini ``npufuse_shim_modules = auto|true|false`` (default ``auto``).

``auto`` installs :func:`pytest_npufuse.install_shims` when the real ``torchair`` / ``torch_npu`` are not
importable, ``true`` installs it for whatever is absent (a real package is never shadowed either way),
``false`` leaves imports alone. It is installed at configure, before test modules are imported, and
removed at unconfigure by the session that installed it (a nested pytester session finds it on and
leaves it to its owner).
"""

from __future__ import annotations

import pytest

from ..shim import install_shims, real_packages, state, uninstall_shims
from .options import setting

MODES = ("auto", "true", "false")
_INSTALLED = pytest.StashKey[bool]()


def configure(config: pytest.Config) -> None:
    mode = str(setting(config, "npufuse_shim_modules")).strip().lower()
    if mode not in MODES:
        raise pytest.UsageError(f"npufuse_shim_modules = {mode!r}: use one of {', '.join(MODES)}.")
    wanted = mode == "true" or (mode == "auto" and not real_packages())
    config.stash[_INSTALLED] = wanted and not state().active
    if wanted:
        install_shims(defer_torch=True)


def unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_INSTALLED, False):
        uninstall_shims()


def header() -> str:
    return f"npufuse: {state().describe()}"
