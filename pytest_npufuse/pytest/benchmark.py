"""The pytest-benchmark mirror: a test taking ``npufuse`` and ``benchmark`` is timed on a modeled clock,
so pytest-benchmark's save/compare/compare-fail gate on modeled device time."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..simulate import clock as modeledclock
from .failure import fail

if TYPE_CHECKING:
    from ..gate.baseline import Entry
    from ..report.case import CaseReport

_CLOCK = pytest.StashKey["modeledclock.ModeledClock | None"]()
_NEW_STORAGE = pytest.StashKey[Path]()


def note_storage(config: pytest.Config) -> None:
    """Remember pytest-benchmark's storage folder (``.benchmarks`` by default) when this run is the one
    that will create it: pytest-benchmark makes it as it starts (its configure hook runs after this one),
    whether or not any test benchmarks anything, and pytest-npufuse brings pytest-benchmark along."""
    if not config.pluginmanager.hasplugin("benchmark"):
        return
    storage = config.getoption("benchmark_storage", None)
    if not isinstance(storage, str) or ("://" in storage and not storage.startswith("file://")):
        return
    folder = Path.cwd() / storage.removeprefix("file://")
    if not os.path.lexists(folder):
        config.stash[_NEW_STORAGE] = folder


def remove_unused_storage(config: pytest.Config) -> None:
    """Remove the storage folder this run created if nothing was saved in it: a user who never asked for
    pytest-benchmark's files should not find an empty ``.benchmarks`` in the project."""
    folder = config.stash.get(_NEW_STORAGE, None)
    if folder is not None:
        with contextlib.suppress(OSError):  # not empty (a benchmark was saved), or already gone
            folder.rmdir()


def install_clock(item: pytest.Item) -> None:
    """Give a mirrored test its modeled clock at collection.

    The clock goes in as the ``timer`` of the item's benchmark marker (keeping the marker's other
    settings); pytest-benchmark reads the marker when it builds the fixture. The stash says whether the
    test is mirrored: a clock, or None when the marker sets a timer of its own (a ``benchmark`` fixture
    of some other plugin is left alone).
    """
    if not {"npufuse", "benchmark"} <= set(getattr(item, "fixturenames", ())):
        return
    if not item.config.pluginmanager.hasplugin("benchmark"):
        return
    marker = item.get_closest_marker("benchmark")
    settings = dict(marker.kwargs) if marker else {}
    if "timer" in settings:
        item.stash[_CLOCK] = None
        return
    clock = modeledclock.ModeledClock()
    item.stash[_CLOCK] = clock
    item.add_marker(pytest.mark.benchmark(**settings, timer=clock), append=False)


def is_mirrored(item: pytest.Item) -> bool:
    return _CLOCK in item.stash


def mirror(request: pytest.FixtureRequest, report: CaseReport, entry: Entry, checks: int) -> None:
    """Let the test's ``benchmark`` fixture measure the VARIANT's modeled device time of its first check."""
    clock = request.node.stash[_CLOCK]
    if clock is None:
        pytest.fail(
            "npufuse: this test takes `benchmark`, whose marker sets its own timer=; the npufuse benchmark "
            "mirror times modeled device time with its own clock. Remove timer= from @pytest.mark.benchmark.",
            pytrace=False,
        )
    if checks > 1:
        pytest.fail(
            "npufuse: pytest-benchmark records one measurement per test and the benchmark mirror measured the "
            "first npufuse.check(); put each further check in a test of its own.",
            pytrace=False,
        )
    if entry.variant_us is None:
        fail(f"npufuse: the benchmark mirror cannot time a VARIANT that does not finish ({report.variant.failure}).")
    info = {"npufuse_target": report.target, "npufuse_mode": report.mode, "npufuse_baseline_us": entry.baseline_us,
            "npufuse_speedup": entry.speedup, "npufuse_model_version": entry.model_version}
    modeledclock.measure(request.getfixturevalue("benchmark"), clock, entry.variant_us, info)
