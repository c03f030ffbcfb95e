"""The fidelity figures of a set of outcomes: median and p90 |error|, shares within +-30% and +-10%, and
the sign of every gain. A row the model could not build counts as a miss in every share."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Summary:
    rows: int
    modeled: int
    median: float
    p90: float
    within_30: float
    within_10: float
    signs_right: int
    signs: int

    def line(self, label: str) -> str:
        return (
            f"{label:<26} {self.rows:>4} {self.modeled:>7} {100 * self.median:>8.1f}% {100 * self.p90:>8.1f}% "
            f"{100 * self.within_30:>8.0f}% {100 * self.within_10:>8.0f}% {self.signs_right:>5}/{self.signs:<3}"
        )


HEADER = f"{'set':<26} {'rows':>4} {'modeled':>7} {'median|e|':>9} {'p90|e|':>9} {'<=30%':>9} {'<=10%':>9} {'signs':>9}"


def _quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (inf for a missing row sorts last)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    if ordered[high] == math.inf:
        return math.inf if position > low or ordered[low] == math.inf else ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(outcomes: Sequence) -> Summary:
    errors = [abs(o.error) for o in outcomes]
    signs = [o.sign_right for o in outcomes if o.sign_right is not None]
    count = max(1, len(errors))
    return Summary(
        rows=len(errors),
        modeled=sum(o.modeled is not None for o in outcomes),
        median=_quantile(errors, 0.5),
        p90=_quantile(errors, 0.9),
        within_30=sum(e <= 0.3 for e in errors) / count,
        within_10=sum(e <= 0.1 for e in errors) / count,
        signs_right=sum(signs),
        signs=len(signs),
    )
