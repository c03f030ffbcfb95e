"""The one timing helper of the benchmarks: wall and CPU time, best of interleaved rounds, child
processes, and the PASS/FAIL line every benchmark prints.

Timing noise on a shared machine only ever adds time, so a benchmark keeps the best of several rounds,
and interleaves its sides within a round, so that a slow spell falls on every side alike instead of on
one. Wall-clock time is measured here only, never in the test suite.
"""

from __future__ import annotations

import math
import resource
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence


@dataclass(frozen=True)
class Timed:
    """One timed call: wall seconds, CPU seconds (of this process, or of the children it waited for)
    and what the call returned."""

    wall: float
    cpu: float
    value: Any = None


def timed(call: Callable[[], Any]) -> Timed:
    """Wall and process CPU seconds of ``call`` (CPU time is what a loaded machine inflates least)."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = call()
    return Timed(time.perf_counter() - wall, time.process_time() - cpu, value)


def timed_command(argv: Sequence[str], **kwargs: Any) -> Timed:
    """Wall seconds and the child's CPU seconds of one command; its CompletedProcess is the value."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(list(argv), capture_output=True, text=True, **kwargs)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall, cpu, done)


def best_of(rounds: int, sides: Sequence[Callable[[], Timed]]) -> list[Timed]:
    """Each side's best (shortest wall) over ``rounds`` rounds, the sides interleaved within a round."""
    best = [Timed(math.inf, math.inf)] * len(sides)
    for _ in range(rounds):
        for position, side in enumerate(sides):
            result = side()
            if result.wall < best[position].wall:
                best[position] = result
    return best


def check(passed: bool, what: str) -> bool:
    """Print the benchmark's verdict line for one target and return whether it passed."""
    print(f"  {'PASS' if passed else 'FAIL'}  {what}")
    return passed
