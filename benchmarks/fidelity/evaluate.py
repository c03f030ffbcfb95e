"""Each row as a published and a modeled number.

A value row (kernel, collective, layer, step) compares its value; a before/after row compares the speedup
before/after and the sign of the gain (before - after); a saved-time row (``delta``) compares the saving.
A row the model cannot build says why (``lacks``) and counts as a miss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from . import eager, host_rows, kernels, pairs
from .gaps import gap_of
from .rows import Profiles, Row


@dataclass(frozen=True)
class Outcome:
    """What the model says about one row. ``published``/``modeled`` are the compared numbers (a value, a
    speedup, or a saved time); ``gain`` is (published, modeled) before - after for pair rows."""

    row: Row
    published: float
    modeled: float | None
    gain: tuple[float, float] | None = None
    lacks: str = ""

    @property
    def error(self) -> float:
        """Signed relative error; a row the model cannot build is infinitely wrong."""
        if self.modeled is None:
            return math.inf
        return self.modeled / self.published - 1.0

    @property
    def sign_right(self) -> bool | None:
        if self.gain is None:
            return None
        published, modeled = self.gain
        return (published > 0) == (modeled > 0) and modeled != 0


def _value(row: Row, profiles: Profiles) -> float:
    kind = row.kind
    if kind == "kernel" and row.get("metric") == "eager_call":
        return eager.call_us(row, profiles)
    if kind == "kernel":
        return kernels.kernel_us(row, profiles)
    if kind == "collective":
        return kernels.collective_us(row, profiles)
    if kind == "layer":
        return pairs.task_wait_per_layer_us(row, profiles)
    if kind == "step":
        return pairs.step_value(row, profiles)
    raise NotImplementedError(kind)


_PAIRS: dict[str, Callable[[Row, Profiles], tuple[float, float]]] = {
    "superkernel": pairs.superkernel_pair,
    "multistream": pairs.multistream_pair,
    "graph_mode": pairs.graph_mode_pair,
    "host": host_rows.host_pair,
}


def evaluate(row: Row, profiles: Profiles) -> Outcome:
    """The row's published and modeled numbers; a row outside +-30% names what the model lacks for it."""
    outcome = _evaluate(row, profiles)
    if outcome.modeled is not None and abs(outcome.error) > 0.3:
        return replace(outcome, lacks=gap_of(row.id))
    return outcome


def _evaluate(row: Row, profiles: Profiles) -> Outcome:
    try:
        if not row.is_pair:
            return Outcome(row, row.get("value"), _value(row, profiles))
        before, after = _PAIRS[row.kind](row, profiles)
    except pairs.NotModeled as reason:
        published = row.get("delta") or row.get("before", 1.0) / row.get("after", 1.0)
        return Outcome(row, published, None, lacks=str(reason))
    if row.get("delta") is not None:
        published = row.get("delta")
        return Outcome(row, published, before - after, (published, before - after))
    published_gain = row.get("before") - row.get("after")
    return Outcome(row, row.get("before") / row.get("after"), before / after, (published_gain, before - after))


