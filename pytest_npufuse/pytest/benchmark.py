"""The pytest-benchmark mirror: a test taking ``npufuse`` and ``benchmark`` is timed on a modeled clock,
so pytest-benchmark's save/compare/compare-fail gate on modeled device time."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ..simulate import clock as modeledclock
from .failure import fail

if TYPE_CHECKING:
    from ..gate.baseline import Entry
    from ..report.case import CaseReport

_CLOCK = pytest.StashKey["modeledclock.ModeledClock | None"]()


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
