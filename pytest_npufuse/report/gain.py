"""Why a modeled gain happened, and how far the model's gains of that kind can be trusted.

A check's speedup is one number; an engineer deciding whether to keep a SuperKernel scope or a second
stream wants to know where the saved time came from and how often the model is right about such a gain.
This module answers both from what the check already has:

- :func:`explain_gain` splits BASELINE minus VARIANT into the mechanisms of docs/sources.md#hw-6 and
  docs/feature-docs.md: tasks the device no longer launches and the idle gaps between tasks (launch,
  task waits), the summed time of the tasks themselves (kernel heads, cold starts and syncs a
  SuperKernel merges or adds), the time a second stream hides by running beside the first, and the host
  time before the device starts. The parts add up to the gain, so a reader sees which one carries it.
- :func:`gain_error` looks the gain's kind up in ``gain_errors.toml``, which ``benchmarks/calibration.py
  --gain-errors`` writes from its held-out figures over the published before/after pairs
  (benchmarks/data/published.toml, docs/fidelity.md): the median |error| over N pairs and the protocol.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Iterable, Mapping

from ..simulate.timeline import KernelRun, RunReport
from ..vocabulary import Vocabulary

ERRORS_FILE = "gain_errors.toml"


class GainKind(Vocabulary):
    """The kind of change a check compares, named as the published pairs of the dataset are."""

    SUPERKERNEL = "superkernel"
    MULTISTREAM = "multistream"


@dataclass(frozen=True)
class Occupancy:
    """How one run fills the device: its top-level tasks, their summed time, the time they overlap
    (several streams busy at once), the idle time between them, and the time before the first starts."""

    tasks: int
    task_us: float
    overlap_us: float
    idle_us: float
    lead_us: float

    @classmethod
    def of(cls, run: RunReport) -> "Occupancy":
        top = [k for k in run.kernels if k.parent is None and k.end_us > k.start_us]
        if not top:
            return cls(0, 0.0, 0.0, 0.0, run.time_us)
        start = min(k.start_us for k in top)
        span = max(k.end_us for k in top) - start
        busy = _union_us(top)
        task_us = sum(k.duration_us for k in top)
        return cls(len(top), task_us, task_us - busy, span - busy, run.time_us - span)


def _union_us(kernels: Iterable[KernelRun]) -> float:
    """The time at least one of ``kernels`` runs."""
    total, end = 0.0, float("-inf")
    for kernel in sorted(kernels, key=lambda k: k.start_us):
        if kernel.end_us > end:
            total += kernel.end_us - max(kernel.start_us, end)
            end = kernel.end_us
    return total


@dataclass(frozen=True)
class GainWhy:
    """BASELINE minus VARIANT by mechanism; the four parts add up to ``saved_us``."""

    saved_us: float
    tasks_saved: int
    gaps_us: float
    """Idle device time between tasks saved (launch and task waits of tasks that no longer exist)."""
    task_us: float
    """Summed task time saved (heads, cold starts, inter-kernel syncs merged; SuperKernel costs added)."""
    overlap_us: float
    """Time hidden by running streams side by side (extra overlap in the VARIANT)."""
    host_us: float
    """Time before the device's first task (host launch, graph execute) saved."""
    events: int

    def describe(self) -> str:
        """One line: where the saved (or lost) time came from, largest part first."""
        parts = [
            (self.gaps_us, f"idle gaps between tasks {_signed(self.gaps_us)}"),
            (self.task_us, f"task time {_signed(self.task_us)}"),
            (self.overlap_us, f"stream overlap {_signed(self.overlap_us)}"),
            (self.host_us, f"host lead-in {_signed(self.host_us)}"),
        ]
        shown = [text for value, text in sorted(parts, key=lambda p: -abs(p[0])) if abs(value) >= 0.05]
        tasks = f"{abs(self.tasks_saved)} {'fewer' if self.tasks_saved >= 0 else 'more'} device tasks"
        events = f", {self.events} cross-stream event wait(s)" if self.events else ""
        verb = "saved" if self.saved_us >= 0 else "lost"
        return f"{verb} {abs(self.saved_us):.1f} us: {tasks}{events}; " + (", ".join(shown) or "no change")

    def to_json(self) -> dict[str, Any]:
        return {
            "saved_us": round(self.saved_us, 3), "tasks_saved": self.tasks_saved, "gaps_us": round(self.gaps_us, 3),
            "task_us": round(self.task_us, 3), "overlap_us": round(self.overlap_us, 3),
            "host_us": round(self.host_us, 3), "events": self.events, "line": self.describe(),
        }


def _signed(value: float) -> str:
    """A saving as ``-x us`` of time (the VARIANT is shorter), a loss as ``+x us``."""
    return f"{-value:+.1f} us"


def explain_gain(baseline: RunReport, variant: RunReport) -> GainWhy:
    """Split the modeled gain into the mechanisms that produced it (see the module docstring)."""
    before, after = Occupancy.of(baseline), Occupancy.of(variant)
    return GainWhy(
        saved_us=baseline.time_us - variant.time_us,
        tasks_saved=before.tasks - after.tasks,
        gaps_us=before.idle_us - after.idle_us,
        task_us=before.task_us - after.task_us,
        overlap_us=after.overlap_us - before.overlap_us,
        host_us=before.lead_us - after.lead_us,
        events=sum(1 for event in variant.events if event.wait_start_us is not None),
    )


@dataclass(frozen=True)
class GainError:
    """The model's measured error on published gains of one kind, and how it was measured."""

    kind: str
    pairs: int
    median_pct: float
    within_30: int
    signs_right: int
    protocol: str

    def describe(self) -> str:
        return (
            f"model error on published {self.kind} gains: median {self.median_pct:.0f}% over {self.pairs} pairs, "
            f"{self.within_30}/{self.pairs} within the rule (±30%, or 3 points under a 10% gain), {self.signs_right}/{self.pairs} signs right ({self.protocol}; "
            "docs/fidelity.md)"
        )

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "pairs": self.pairs, "median_pct": self.median_pct, "within_30": self.within_30,
                "signs_right": self.signs_right, "protocol": self.protocol, "line": self.describe()}


@functools.cache
def _errors() -> Mapping[str, GainError]:
    text = resources.files(__package__).joinpath(ERRORS_FILE).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    protocol = data["protocol"]
    return {
        kind: GainError(kind, int(e["pairs"]), float(e["median_pct"]), int(e["within_30"]), int(e["signs_right"]),
                        protocol)
        for kind, e in data["gain"].items()
    }


def gain_kinds(segments: int, streams: int) -> tuple[GainKind, ...]:
    """The kinds of change a VARIANT makes: SuperKernel segments, a second stream, or both."""
    return tuple(kind for kind, on in ((GainKind.SUPERKERNEL, segments > 0), (GainKind.MULTISTREAM, streams > 1)) if on)


def gain_error(kind: GainKind) -> GainError | None:
    """The measured error of the model on published gains of ``kind`` (None when no pair measures it)."""
    return _errors().get(str(kind))
