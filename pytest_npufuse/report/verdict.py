"""What a failed check is, in one word the user can act on: the verdict.

pytest's short test summary shows only the first line of a failure, so that line starts with the
verdict (``race``, ``lifetime``, ``scope break``, ``hang``, ``regression``, ``precision``, ...). One check
can fail several expectations; the verdict is the one that explains the others (a race corrupts the
outputs, so a race comes before the precision failure it causes), in the order of :class:`Verdict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..vocabulary import Vocabulary


class Verdict(Vocabulary):
    """The kind of an unmet expectation, causes before their consequences."""

    HANG = "hang"
    ABORT = "compile abort"
    RACE = "race"
    LIFETIME = "lifetime"
    SCOPE_BREAK = "scope break"
    OUTCOME = "scope outcome"
    STREAMS = "streams"
    PRECISION = "precision"
    SPEEDUP = "speedup"
    REGRESSION = "regression"
    SLOW_FORM = "slow op form"


@dataclass(frozen=True)
class Failure:
    """One unmet expectation: its verdict and the sentence (possibly several lines) that explains it."""

    verdict: Verdict
    text: str

    def __str__(self) -> str:
        return self.text


def first_cause(failures: Sequence[Failure]) -> list[Failure]:
    """``failures`` with causes first (stable within a verdict), so the first names the verdict."""
    order = list(Verdict)
    return sorted(failures, key=lambda failure: order.index(failure.verdict))
