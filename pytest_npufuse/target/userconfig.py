"""A project's own targets and ops: ``[tool.npufuse]`` in its ``pyproject.toml`` and profile files.

    [tool.npufuse.targets.a3.overhead_us]      # override one key of the built-in a3
    kernel_head = 3.0

    [tool.npufuse.targets.b4-lowclock]         # a new target laid over a built-in one
    base = "910b4"
    clock = { cube_mhz = 1300, vector_mhz = 1300 }

    [tool.npufuse.ops."acc::my_op"]            # a custom op for the catalog
    engine = "vector"
    fusable = true
    sync_all = false
    block_dim = "vector_bytes"

The pytest plugin reads the file in its rootdir; library users call :func:`load_user_config` with a path.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from ..errors import ProfileError
from ..files import present
from ..files.toml import PROFILE_FILE, read_toml
from .catalog import OpCatalog, load_catalog
from .profile import HardwareProfile, TargetTable, load_profile, profile_file_targets, target_tables


@dataclass(frozen=True)
class UserConfig:
    """The user's targets (by name) and catalog entries, with where each came from."""

    targets: Mapping[str, TargetTable] = field(default_factory=dict)
    ops: Mapping[str, Any] = field(default_factory=dict)
    ops_source: str = "[tool.npufuse.ops]"

    def profile(self, target: str) -> HardwareProfile:
        """The profile of ``target``; its ``[corrections]`` may name only op types of this catalog (a
        misspelt one would leave its kernels uncorrected without a word)."""
        profile = load_profile(target, self.targets)
        if profile.corrections:
            known = sorted({info.kernel_type for info in self.catalog().entries.values()})
            for name in profile.corrections:
                if name not in known:
                    hint = difflib.get_close_matches(name, known, n=1)
                    raise ProfileError(
                        f"{profile.source} [corrections]: unknown op type '{name}'"
                        + (f"; did you mean '{hint[0]}'?" if hint else "; use an OP Type of the op catalog "
                           "(python -m pytest_npufuse ops) or of [tool.npufuse.ops]."),
                        file=str(profile.source), entry=f"[corrections] {name}"
                    )
        return profile

    def check_targets(self) -> None:
        """Load every target the user declared, so that a broken one is reported even when this run does
        not select it: a profile file passed by hand would otherwise be ignored without a word."""
        for name in self.targets:
            self.profile(name)

    def catalog(self) -> OpCatalog:
        """The built-in op catalog overlaid with these ops, read once: every target of the project prices
        its kernels with it, and it warns once per op type it does not know."""
        return self._catalog

    @cached_property
    def _catalog(self) -> OpCatalog:
        return load_catalog(self.ops, self.ops_source)

    def with_profile_file(self, path: Path) -> "UserConfig":
        """These settings with the targets of a ``--npufuse-profile`` file added (the file wins)."""
        return UserConfig({**self.targets, **profile_file_targets(path)}, self.ops, self.ops_source)


SECTIONS = ("targets", "ops")


def user_config_from_table(table: Mapping[str, Any], source: str) -> UserConfig:
    """Settings from a ``[tool.npufuse]`` table already parsed; ``source`` names it in errors. A
    misspelt table (``[tool.npufuse.target.a3]``) is an error: its settings would be ignored silently."""
    for key in sorted(set(table) - set(SECTIONS)):
        near = difflib.get_close_matches(key, SECTIONS, n=1)
        hint = f"did you mean [tool.npufuse.{near[0]}]?" if near else f"the tables are {', '.join(SECTIONS)}."
        raise ProfileError(f"{source}: unknown table [tool.npufuse.{key}]; {hint}")
    targets = table.get("targets", {})
    ops = table.get("ops", {})
    for key, value in (("targets", targets), ("ops", ops)):
        if not isinstance(value, dict):
            raise ProfileError(f"{source}: [tool.npufuse.{key}] must be a table, got {value!r}.")
    return UserConfig(target_tables(targets, f"{source} [tool.npufuse]"), ops, f"{source} [tool.npufuse.ops]")


def load_user_config(pyproject: Path | None) -> UserConfig:
    """Settings from ``pyproject`` (a missing file or section means none)."""
    if pyproject is None or not present(pyproject, PROFILE_FILE):
        return UserConfig()
    tool = read_toml(pyproject).get("tool", {})
    table = tool.get("npufuse", {}) if isinstance(tool, dict) else None
    if not isinstance(table, dict):
        name = "[tool.npufuse]" if isinstance(tool, dict) else "tool"
        raise ProfileError(f"{pyproject}: {name} must be a table; fix it in that file.", file=str(pyproject),
                           entry=name)
    return user_config_from_table(table, str(pyproject))
