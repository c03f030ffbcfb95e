"""Which NPU target a test item runs on, and the item's key without it.

With several targets (``--npu-target=a2,a3``) every test that uses ``npufuse`` or ``npu_target`` is
parametrized over them; reports and baselines key results by target themselves. The code under test runs
on the item's target too (:mod:`.sessions`).
"""

from __future__ import annotations

import pytest

from .settings import settings_of


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
