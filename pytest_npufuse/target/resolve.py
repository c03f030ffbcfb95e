"""The target a check models, resolved in one place for every entry point.

    Target.resolve("a3")                      # built-in, or [tool.npufuse.targets.a3] of ./pyproject.toml
    Target.resolve("mine", "proj/pyproject.toml")   # a calibrated target of that project
    Target.resolve("my_die.toml")             # a profile file

The pytest plugin (``--npu-target``), the command line (``advise``, ``run``), the backends a script's
``torch.compile`` gets and the library's ``compare``/``check`` all resolve a target here, so a name means the
same target everywhere: a project's own table of that name (a target ``calibrate`` wrote) wins, then a
built-in target, then a profile file by path. The op catalog prices the target's kernels: the built-in
one overlaid with the project's ``[tool.npufuse.ops]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ProfileError
from .catalog import OpCatalog
from .profile import DEFAULT_TARGET, HardwareProfile, known_targets
from .userconfig import UserConfig, load_user_config

PYPROJECT = Path("pyproject.toml")
"""The project file a library call reads when given none: the current directory's, as the command line does."""


@dataclass(frozen=True)
class Target:
    """One modeled Ascend die: its hardware profile (with any calibration applied) and the op catalog
    that prices its kernels. Immutable; built by :meth:`resolve`."""

    profile: HardwareProfile
    catalog: OpCatalog

    @property
    def name(self) -> str:
        """The name reports, markers and baselines use (an alias keeps its own: ``a3``)."""
        return self.profile.name

    @classmethod
    def resolve(
        cls, target: str | Path | HardwareProfile | Target | None = None, pyproject: Path | str | None = None, *,
        project: UserConfig | None = None, catalog: OpCatalog | None = None,
    ) -> "Target":
        """``target`` by name or profile-file path (default :data:`DEFAULT_TARGET`), looked up among the
        project's own targets first; a profile or a Target is taken as it is. ``project`` is the project's
        settings when the caller has read them (the pytest plugin: the rootdir's pyproject.toml plus
        ``--npufuse-profile``), else they are read from ``pyproject`` (default ``./pyproject.toml``; a
        missing file means none). ``catalog`` replaces the project's op catalog."""
        if isinstance(target, Target):
            return target if catalog is None else replace(target, catalog=catalog)
        settings = project if project is not None else project_settings(pyproject)
        profile = profile_of(target, settings)
        return cls(profile, catalog if catalog is not None else settings.catalog())


def project_settings(pyproject: Path | str | None = None) -> UserConfig:
    """The ``[tool.npufuse]`` settings of ``pyproject`` (default ``./pyproject.toml``)."""
    return load_user_config(Path(pyproject) if pyproject is not None else PYPROJECT)


def profile_of(target: str | Path | HardwareProfile | None, project: UserConfig) -> HardwareProfile:
    """The profile step of :meth:`Target.resolve` alone, which reads no op catalog unless the profile
    has per-op-type corrections to check: the pytest plugin resolves its targets' profiles at start-up
    and reads the catalog only when a check needs it."""
    if isinstance(target, HardwareProfile):
        return target
    if target is None:
        return project.profile(DEFAULT_TARGET)
    if not str(target).strip():
        raise ProfileError(f"the NPU target name {str(target)!r} is empty; name a target: {known_targets(project.targets)}.",
                           argument="target")
    return project.profile(str(target))

