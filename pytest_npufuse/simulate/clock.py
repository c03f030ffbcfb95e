"""Clocks that read modeled device time instead of the wall clock.

:func:`device_clock` is the modeled device time of the current session (:mod:`pytest_npufuse.session`):
every call of a modeled graph advances it by the graph's modeled time, and ``torch.npu.Event.elapsed_time``
under the shim reads it, so a script's own ``begin.record(); step(x); end.record()`` timing prints modeled
milliseconds. Each test, check and script starts its own at zero.

The pytest-benchmark mirror:

pytest-benchmark times a call by reading its timer before and after. Given this clock as its timer
and a call that advances the clock by the modeled time, its statistics are the modeled time exactly,
so ``--benchmark-save``, ``--benchmark-compare`` and ``--benchmark-compare-fail`` gate on modeled
time, and never flake. Only ``benchmark.pedantic`` is used: pytest-benchmark's auto-calibration
needs a clock that moves on its own.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..session import SessionKey, current_session


class ModeledClock:
    """A per-test clock, in seconds, that moves only when a modeled run advances it.

    Each test gets a fresh clock starting at zero, so the measured difference is the modeled time
    with no float rounding from an accumulated offset.
    """

    # pytest-benchmark records its timer by name in saved runs; a stable name keeps those diffs quiet.
    __name__ = "npufuse_modeled_clock"

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds

    def run(self, seconds: float) -> None:
        """What pytest-benchmark "times": the device running for ``seconds`` of modeled time."""
        self.seconds += seconds


def measure(benchmark: Any, clock: ModeledClock, time_us: float, extra_info: Mapping[str, Any]) -> None:
    """Have the ``benchmark`` fixture record ``time_us`` of modeled time as its one measurement."""
    benchmark.extra_info.update(extra_info)
    benchmark.pedantic(clock.run, args=(time_us * 1e-6,), rounds=1, iterations=1, warmup_rounds=0)


DEVICE_CLOCK = SessionKey("the modeled device clock", ModeledClock)


def device_clock() -> ModeledClock:
    """The current session's device clock."""
    return current_session()[DEVICE_CLOCK]
