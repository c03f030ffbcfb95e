"""Every pytest-npufuse option, declared once: its command-line flag, its ini key and its help.

An option named ``npufuse_x`` is ``--npufuse-x`` on the command line and ``npufuse_x`` in the ini file;
the command line wins. To add an option, append a row to :data:`OPTIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pytest

from ..target.profile import DEFAULT_TARGET, TARGET_HELP


class Kind(Enum):
    """How an option's value is read: as text, as a file path (ini values relative to the ini file), or as a
    switch."""

    TEXT = "text"
    PATH = "path"
    SWITCH = "switch"


@dataclass(frozen=True)
class Option:
    """One row of the table: ``name`` is the ``dest`` and the ini key; the flag is derived from it."""

    name: str
    help: str
    kind: Kind = Kind.TEXT
    default: str | bool = ""
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def register(self, group: pytest.OptionGroup, parser: pytest.Parser) -> None:
        extra: dict[str, object] = {"action": "store_true"} if self.kind is Kind.SWITCH else {"metavar": self.metavar}
        group.addoption(self.flag, dest=self.name, default=None, help=f"{self.help} (ini: {self.name}).", **extra)
        relative = " (relative to the ini file)" if self.kind is Kind.PATH else ""
        # Switches are read as text and parsed here: pytest's own bool parsing fails without naming the key.
        default = ("true" if self.default else "false") if self.kind is Kind.SWITCH else self.default
        parser.addini(self.name, f"Default for {self.flag}{relative}.", type="string", default=default)


OPTIONS: tuple[Option, ...] = (
    Option(
        "npu_target",
        f"NPU target(s) to model: {TARGET_HELP}, or a comma list such as a2,a3 that runs every npufuse test once "
        "per target",
        default=DEFAULT_TARGET,
    ),
    Option(
        "npufuse_trace_dir",
        "write a Perfetto trace (trace_view.json) and kernel_details.csv per case and variant under this directory",
        Kind.PATH,
        metavar="DIR",
    ),
    Option(
        "npufuse_profile",
        "a TOML file of hardware profiles: one complete profile, or [targets.NAME] tables that add targets or "
        "override built-in ones key by key; name them with --npu-target",
        Kind.PATH,
        metavar="FILE",
    ),
    Option(
        "npufuse_baseline",
        "CI gate: compare each checked case's modeled variant time with its entry in this baseline JSON file; "
        "a slower case fails, a missing entry is recorded with a warning",
        Kind.PATH,
        metavar="FILE",
    ),
    Option(
        "npufuse_update_baseline",
        "rewrite the baseline entries of the tests that ran (others are kept) instead of failing on a regression",
        Kind.SWITCH,
        default=False,
    ),
    Option(
        "npufuse_tolerance",
        "percent by which a modeled time may exceed its baseline before the test fails "
        "(default 0: modeled times are exact)",
        default="0",
        metavar="PCT",
    ),
    Option(
        "npufuse_advise",
        "add the advisors' findings to the terminal summary: each check's known-slow op forms (Ascend's affinity-op guide) "
        "(slow forms, rewrite, modeled gain) and where its modeled time goes (overlap shares, top op types)",
        Kind.SWITCH,
        default=False,
    ),
    Option(
        "npufuse_missing_ops",
        "what a check does about an op with a fake kernel but no CPU kernel: error (stop, listing every gap of the "
        "check at once) or timing-only (time it, leave what is computed from it uncompared: numerics partial); "
        "the markers' and check()'s missing_ops= override it",
        default="error",
        metavar="error|timing-only",
    ),
    Option(
        "npufuse_shim_modules",
        "map import torchair / import torch_npu to pytest-npufuse and put torch.npu on the CPU, so scripts "
        "written for a real NPU run unchanged: auto (when the real packages are absent), true or false",
        default="auto",
        metavar="auto|true|false",
    ),
    Option(
        "npufuse_json",
        "write the whole run (every outcome and modeled result, schema_version, model_version) to this JSON file",
        Kind.PATH,
        metavar="FILE",
    ),
    Option(
        "npufuse_html",
        "write one self-contained HTML report of the run (summary table, BASELINE and VARIANT timelines, scope "
        "breaks, races, time tables; no network needed to open it) to this file",
        Kind.PATH,
        metavar="FILE",
    ),
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("npufuse", "pytest-npufuse: modeled Ascend NPU SuperKernel and multi-stream checks")
    for option in OPTIONS:
        option.register(group, parser)


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0", "")


def _option(name: str) -> Option:
    return next(option for option in OPTIONS if option.name == name)


def setting(config: pytest.Config, name: str) -> str | bool:
    """An option's value: from the command line if given there, else from the ini file (or its default).
    A switch's ini value is parsed here so that a bad one names its key."""
    given = config.getoption(name)
    if given == "":
        flag = _option(name).flag
        raise pytest.UsageError(f"{flag}= is empty; give a value or leave the option out.")
    if given is not None:
        return given
    value = config.getini(name)
    if _option(name).kind is not Kind.SWITCH:
        return value
    text = str(value).strip().lower()
    if text not in _TRUE + _FALSE:
        raise pytest.UsageError(f"ini key {name} = {value!r} is not a boolean; use true or false.")
    return text in _TRUE


def is_set(config: pytest.Config, name: str) -> bool:
    """Whether the user set the option (on the command line, or in the ini file to a non-default value)."""
    return config.getoption(name) not in (None, "") or str(config.getini(name)) != str(_option(name).default)


def path_setting(config: pytest.Config, name: str) -> Path | None:
    """A file option: as given on the command line, or its ini value relative to the ini file. An empty
    value given on purpose (``--npufuse-baseline=``) is an error, not a silently absent option."""
    given = config.getoption(name)
    if given == "":
        flag = _option(name).flag
        raise pytest.UsageError(f"{flag}= is empty; give a path, e.g. {flag}=npufuse.json, or leave the option out.")
    if given:
        return Path(given)
    value = config.getini(name)
    if not value:
        return None
    return (config.inipath.parent if config.inipath else config.rootpath) / value
