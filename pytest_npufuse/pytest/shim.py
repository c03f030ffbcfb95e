"""The import shim inside pytest: ini ``npufuse_shim_modules = auto|true|false`` (default ``auto``).

``auto`` installs :func:`pytest_npufuse.install_shims` when the real ``torchair`` / ``torch_npu`` are not
importable, ``true`` installs it for whatever is absent (a real package is never shadowed either way),
``false`` leaves imports alone. It is installed at configure, before test modules are imported, and
removed at unconfigure by the session that installed it (a nested pytester session finds it on and
leaves it to its owner). While it is installed, the Python processes a test starts (``multiprocessing``
spawn children: multi-rank tests start one per NPU) get the shim too and model the run's first target,
as under ``python -m pytest_npufuse run``.
"""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from ..shim import install_shims, real_packages, state, uninstall_shims
from ..shim.children import shim_in_children
from .options import setting
from .settings import settings_of

MODES = ("auto", "true", "false")
_INSTALLED = pytest.StashKey[bool]()
_CHILDREN = pytest.StashKey[ExitStack]()


def configure(config: pytest.Config) -> None:
    mode = str(setting(config, "npufuse_shim_modules")).strip().lower()
    if mode not in MODES:
        raise pytest.UsageError(f"npufuse_shim_modules = {mode!r}: use one of {', '.join(MODES)}.")
    wanted = mode == "true" or (mode == "auto" and not real_packages())
    config.stash[_INSTALLED] = wanted and not state().active
    if wanted:
        install_shims(defer_torch=True)
    if config.stash[_INSTALLED] and not _distributes(config):
        children = ExitStack()
        pyproject = config.inipath if config.inipath is not None and config.inipath.name == "pyproject.toml" else None
        children.enter_context(shim_in_children(next(iter(settings_of(config).profiles)), pyproject))
        config.stash[_CHILDREN] = children


def _distributes(config: pytest.Config) -> bool:
    """True in pytest-xdist's controller: the processes it starts are its workers, which load the plugin
    through pytest and give the shim to their own tests' children."""
    return getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")


def unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_INSTALLED, False):
        if _CHILDREN in config.stash:
            config.stash[_CHILDREN].close()
        uninstall_shims()


def header() -> str:
    return f"npufuse: {state().describe()}"
