"""The run's settings, resolved once at ``pytest_configure`` in every process (controller and xdist workers).

Bad settings stop the run as a usage error before any test: an unknown target, a bad profile or
baseline file, a trace directory that is a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Mapping

import pytest

from ..cost import check_catalog
from ..errors import NpufuseError
from ..files import Kind, check_outputs, kind_of
from ..gate.baseline import Gate, parse_percent
from ..simulate.version import ModelIdentity
from ..target.catalog import OpCatalog
from ..target.profile import BUILTIN_TARGETS, HardwareProfile
from ..target.resolve import Target, profile_of
from ..target.userconfig import UserConfig, load_user_config
from ..vocabulary import MissingOps
from .options import is_set, path_setting, setting


@dataclass(frozen=True)
class GateRequest:
    """The baseline options as given: the file, the tolerance in percent and whether to rewrite it."""

    path: Path
    tolerance_pct: float
    update: bool


@dataclass(frozen=True)
class RunSettings:
    """What every hook and fixture of the run reads: the targets by name (the first is the default), the
    user's settings, the output locations, and on first use the op catalog, the model identity and the
    baseline gate.

    The catalog is read when something needs it (a check, a report, the gate), not at start-up: parsing
    the op table is most of what the plugin would otherwise cost a run that never models anything. A
    run that names a baseline or declares its own ops reads it at once, so a bad file still stops the
    run before any test."""

    profiles: Mapping[str, HardwareProfile]
    user: UserConfig
    gate_request: GateRequest | None
    trace_dir: Path | None
    json_path: Path | None
    html_path: Path | None
    known_targets: tuple[str, ...] = ()
    advise: bool = False
    missing_ops: str = MissingOps.ERROR.value

    @cached_property
    def catalog(self) -> OpCatalog:
        try:
            return check_catalog(self.user.catalog())
        except NpufuseError as exc:
            raise pytest.UsageError(f"npufuse: {exc}") from None

    @cached_property
    def targets(self) -> Mapping[str, Target]:
        """Each target of the run with the project's op catalog, by name (read on first use, as the catalog)."""
        catalog = self.catalog
        return {
            name: Target.resolve(profile, project=self.user, catalog=catalog) for name, profile in self.profiles.items()
        }

    @cached_property
    def model(self) -> ModelIdentity:
        return ModelIdentity.of(self.profiles.values(), self.catalog)

    @cached_property
    def gate(self) -> Gate | None:
        """The baseline, read once, read-only, in every process."""
        request = self.gate_request
        if request is None:
            return None
        try:
            return Gate.open(request.path, request.tolerance_pct, request.update, self.model)
        except NpufuseError as exc:
            raise pytest.UsageError(f"--npufuse-baseline: {exc}") from None

    @classmethod
    def from_config(cls, config: pytest.Config) -> RunSettings:
        names = [name.strip() for name in str(setting(config, "npu_target")).split(",")]
        if not all(names):
            raise pytest.UsageError(f"--npu-target: empty target name in {','.join(names)!r}; use e.g. a3 or a2,a3.")
        try:
            user = _user_config(config)
            user.check_targets()
            profiles = _by_name([profile_of(name, user) for name in names], names)
        except NpufuseError as exc:
            raise pytest.UsageError(f"npufuse: {exc}") from None
        request = _gate_request(config)
        json_path, html_path = path_setting(config, "npufuse_json"), _output_file(config, "npufuse_html")
        _check_outputs(request, json_path, html_path)
        known = tuple(sorted({*BUILTIN_TARGETS, *user.targets, *profiles}))
        settings = cls(
            profiles, user, request, _trace_dir(config), json_path, html_path, known,
            bool(setting(config, "npufuse_advise")), _missing_ops(config),
        )
        if user.ops or request is not None:  # a bad [tool.npufuse.ops] or baseline must stop the run at once
            settings.read_files()
        return settings

    def read_files(self) -> None:
        """Read the op catalog and the baseline now instead of on first use."""
        for lazy in ("catalog", "model", "gate"):
            getattr(self, lazy)

    @property
    def default_target(self) -> str:
        return next(iter(self.profiles))


def _missing_ops(config: pytest.Config) -> str:
    value = str(setting(config, "npufuse_missing_ops")).strip()
    if value not in set(MissingOps):
        choices = " or ".join(each.value for each in MissingOps)
        raise pytest.UsageError(f"--npufuse-missing-ops={value!r} is not a choice; use {choices}.")
    return value


_SETTINGS = pytest.StashKey[RunSettings]()


def configure(config: pytest.Config) -> RunSettings:
    """Resolve the settings and keep them on ``config`` for :func:`settings_of`."""
    config.stash[_SETTINGS] = RunSettings.from_config(config)
    return config.stash[_SETTINGS]


def settings_of(config: pytest.Config) -> RunSettings:
    return config.stash[_SETTINGS]


def _by_name(profiles: list[HardwareProfile], given: list[str]) -> dict[str, HardwareProfile]:
    """The profiles keyed by their own names, which reports, markers and baselines use, even when one
    was given as a file path; two that share a name would be indistinguishable in all of them."""
    by_name: dict[str, HardwareProfile] = {}
    for profile, text in zip(profiles, given):
        if profile.name in by_name:
            raise NpufuseError(f"--npu-target: {text!r} is target '{profile.name}' again; give each target once.")
        by_name[profile.name] = profile
    return by_name


def _user_config(config: pytest.Config) -> UserConfig:
    """``[tool.npufuse]`` of the rootdir's pyproject.toml, plus the ``--npufuse-profile`` file."""
    user = load_user_config(Path(config.rootpath) / "pyproject.toml")
    profile_file = path_setting(config, "npufuse_profile")
    return user.with_profile_file(profile_file) if profile_file else user


def _trace_dir(config: pytest.Config) -> Path | None:
    trace_dir = path_setting(config, "npufuse_trace_dir")
    kind = kind_of(trace_dir) if trace_dir is not None else Kind.MISSING
    if kind not in (Kind.MISSING, Kind.DIRECTORY):
        what = "a file" if kind is Kind.REGULAR else kind.value
        raise pytest.UsageError(
            f"--npufuse-trace-dir {trace_dir}: is {what}; give a directory (it is created if missing)."
        )
    return trace_dir


def _output_file(config: pytest.Config, name: str) -> Path | None:
    """A report file the run writes at its end: a directory there would only fail after every test ran."""
    path = path_setting(config, name)
    if path is not None and path.is_dir():
        flag = "--" + name.replace("_", "-")
        raise pytest.UsageError(f"{flag} {path}: is a directory; give a file name such as {path / 'report.html'}.")
    return path


def _tolerance(config: pytest.Config) -> float:
    text = str(setting(config, "npufuse_tolerance")).strip()
    value = parse_percent(text)
    if value is None:
        raise pytest.UsageError(f"--npufuse-tolerance: {text!r} is not a percentage >= 0; use e.g. 0 or 2.5.")
    return value


def _check_outputs(gate: GateRequest | None, json_path: Path | None, html_path: Path | None) -> None:
    """Refuse, before any test runs, outputs that share a file or cannot be written. A baseline is
    rewritten for sure only with --npufuse-update-baseline; a read-only one may still gate a run."""
    baseline = gate.path if gate is not None else None
    try:
        check_outputs(
            {"--npufuse-baseline": baseline, "--npufuse-json": json_path, "--npufuse-html": html_path},
            kept=() if gate is not None and gate.update else ("--npufuse-baseline",),
            streams=("--npufuse-json", "--npufuse-html"),
        )
    except NpufuseError as exc:
        raise pytest.UsageError(f"npufuse: {exc}") from None


def _gate_request(config: pytest.Config) -> GateRequest | None:
    """The baseline options, checked together: the tolerance and the update flag need a baseline."""
    path = path_setting(config, "npufuse_baseline")
    update = bool(setting(config, "npufuse_update_baseline"))
    tolerance = _tolerance(config)
    if path is None:
        if update:
            raise pytest.UsageError("--npufuse-update-baseline needs --npufuse-baseline FILE: the file to rewrite.")
        if is_set(config, "npufuse_tolerance"):
            raise pytest.UsageError(
                "--npufuse-tolerance needs --npufuse-baseline FILE: a tolerance applies to the baseline gate only."
            )
        return None
    return GateRequest(path, tolerance, update)
