"""Which NPU target a test item runs on, and the item's key without it.

With several targets (``--npu-target=a2,a3``) every test that uses ``npufuse`` or ``npu_target`` is
parametrized over them; reports and baselines key results by target themselves.

A ``--npu-target`` given to pytest (on the command line or in the ini file) is also the device the code
under test runs on: ``torch.npu.get_device_name()`` names its SoC while the session collects and while
each test runs (the test's own target when it is parametrized over several), as under ``python -m
pytest_npufuse run --npu-target=...``. Without one, pytest states nothing, so a session started by
``run`` keeps ``run``'s target.
"""

from __future__ import annotations

import pytest

from ..target.profile import DEFAULT_TARGET, HardwareProfile
from ..target.running import stated_running_target, state_running_target
from .settings import settings_of

_BEFORE = pytest.StashKey[HardwareProfile | None]()
_GIVEN = pytest.StashKey[bool]()


def parametrize(metafunc: pytest.Metafunc) -> None:
    """With several targets, every test that uses npufuse or npu_target runs once per target."""
    names = list(settings_of(metafunc.config).profiles)
    wants = {"npufuse", "npu_target"} & set(metafunc.fixturenames)
    if wants and len(names) > 1:
        metafunc.parametrize("npu_target", names, indirect=True, ids=names)


def item_target(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "npu_target" in callspec.params:
        return callspec.params["npu_target"]
    return settings_of(item.config).default_target


def item_key(item: pytest.Item) -> str:
    """The node id without the target's parameter id, so a test keeps its baseline entry (which is
    keyed by target anyway) whether one target runs or several."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "npu_target" not in callspec.params:
        return item.nodeid
    ids = list(callspec._idlist)
    ids.remove(callspec.params["npu_target"])
    base = item.nodeid[: -len(callspec.id) - 2]
    return f"{base}[{'-'.join(ids)}]" if ids else base


def _given(config: pytest.Config) -> bool:
    """Whether pytest was told a target: on the command line, or an ini value other than the default."""
    return config.getoption("npu_target") is not None or config.getini("npu_target") != DEFAULT_TARGET


def _session_profile(config: pytest.Config) -> HardwareProfile | None:
    run = settings_of(config)
    return run.profiles[run.default_target] if config.stash[_GIVEN] else config.stash[_BEFORE]


def state_session_target(config: pytest.Config) -> None:
    """Say the session's target runs the code (when pytest was given one), keeping what was stated before
    (an outer session's, or ``run``'s) for :func:`restore_target`."""
    config.stash[_GIVEN] = _given(config)
    config.stash[_BEFORE] = stated_running_target()
    state_running_target(_session_profile(config))


def state_item_target(item: pytest.Item) -> None:
    """While ``item`` runs, its target runs the code."""
    if item.config.stash[_GIVEN]:
        state_running_target(settings_of(item.config).profiles[item_target(item)])


def end_item_target(item: pytest.Item) -> None:
    state_running_target(_session_profile(item.config))


def restore_target(config: pytest.Config) -> None:
    if _BEFORE in config.stash:
        state_running_target(config.stash[_BEFORE])
