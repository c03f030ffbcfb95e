"""Contention between streams: kernels on different streams that each want every core of one unit.

Multi-stream in a graph (docs/feature-docs.md#multi-stream): a second stream helps when the Cube is not fully used; "if the Cube
is already fully used, enabling it is not recommended: it may add scheduling and make the computation
slower". The scheduler models that: two kernels that each take every AI Cube core (or every AI Vector
core) take turns, whatever stream they are on. This module says so in the report, with how much of the
overlap the streams' busy time allows is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from ..simulate.timeline import KernelRun, RunReport
from .attribution import intervals_length, merge_intervals

# The units a kernel can saturate, by its engine: the AI Cube cores or the AI Vector cores.
_UNITS = {"cube": "Cube", "vector": "Vector"}


@dataclass(frozen=True)
class Contention:
    """Streams whose kernels each wanted every core of ``unit``, and the overlap that cost."""

    unit: str
    streams: tuple[str, ...]
    cores: int
    possible_us: float
    achieved_us: float

    @property
    def lost_pct(self) -> float:
        """The share of the overlap the streams' busy time allows that did not happen."""
        if self.possible_us <= 0:
            return 0.0
        return max(0.0, 100.0 * (self.possible_us - self.achieved_us) / self.possible_us)

    def describe(self) -> str:
        names = " and ".join(f"'{s}'" for s in self.streams)
        return (
            f"streams {names} both run kernels that take all {self.cores} {self.unit} cores, so they take turns: "
            f"{self.lost_pct:.1f}% of the overlap their busy time allows is lost "
            f"({self.achieved_us:.1f} of {self.possible_us:.1f} us overlapped); a second stream cannot help "
            f"while the {self.unit} is saturated (torchair multi-stream guide: not recommended once the Cube is fully used)"
        )


def contention_of(run: RunReport, cores: dict[str, int]) -> Contention | None:
    """The saturated unit two or more streams fought over in ``run``, or None. ``cores`` gives each
    unit's core count (``{"cube": aic, "vector": aiv}``)."""
    top = [k for k in run.kernels if k.parent is None]
    if len({k.stream for k in top}) < 2:
        return None
    for engine, unit in _UNITS.items():
        saturating: dict[str, list[KernelRun]] = {}
        for kernel in top:
            if kernel.engine == engine and kernel.block_dim >= cores[engine] and kernel.end_us > kernel.start_us:
                saturating.setdefault(kernel.stream, []).append(kernel)
        if len(saturating) < 2:
            continue
        busy = {
            stream: merge_intervals([(k.start_us, k.end_us) for k in top if k.stream == stream]) for stream in saturating
        }
        lengths = [intervals_length(intervals) for intervals in busy.values()]
        union = intervals_length(merge_intervals([span for intervals in busy.values() for span in intervals]))
        possible, achieved = sum(lengths) - max(lengths), sum(lengths) - union
        return Contention(unit, tuple(saturating), cores[engine], possible, achieved)
    return None
