"""What produced a run's modeled numbers, for the HTML report: package versions, each target's profile
digest, the model version, the Python and, in a git checkout, the commit. Read without importing torch
(its installed version comes from the package metadata), so a run that never used npufuse pays nothing.
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

from ..simulate.version import ModelIdentity
from ..target.profile import HardwareProfile

GIT_TIMEOUT_S = 5


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def git_commit(root: Path) -> str | None:
    """The checked-out commit of ``root`` (with ``+dirty`` when the tracked files changed), or None
    outside a git checkout or without git."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def run_environment(root: Path, profiles: dict[str, HardwareProfile], model: ModelIdentity) -> dict[str, str]:
    """Label -> value, in the order the report shows them."""
    environment = {
        "pytest-npufuse": _version("pytest-npufuse"),
        "torch": _version("torch"),
        "pytest": _version("pytest"),
        "python": f"{platform.python_version()} ({platform.machine()})",
        "model version": model.version,
        "simulator": model.simulator,
        "op catalog": model.catalog,
    }
    environment.update({f"profile {name}": f"{p.product}, digest {p.digest}" for name, p in profiles.items()})
    commit = git_commit(root)
    if commit is not None:
        environment["commit"] = commit
    return environment
