"""What a check found, as plain data: an output that differs bit for bit, and an op written in a form the
NPU runs slowly (with its rewrite and modeled gain)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Mismatch:
    """The first difference found in one output."""

    output: str
    index: tuple[int, ...] | None
    baseline: str
    variant: str
    differing: int

    def describe(self) -> str:
        if self.index is None:
            return f"{self.output}: baseline {self.baseline}, variant {self.variant}"
        return (
            f"{self.output}: {self.differing} element(s) differ; first at index {list(self.index)}: "
            f"baseline {self.baseline}, variant {self.variant}"
        )


@dataclass(frozen=True)
class BackwardKernels:
    """Backward kernels of one kind that a forward site causes in a training step, and their modeled time."""

    kernel_type: str
    count: int
    time_us: float

    def describe(self) -> str:
        return f"{self.kernel_type} x{self.count} ({self.time_us:.2f} us)"


@dataclass(frozen=True)
class Finding:
    """One site of a slow form: the pattern, where the user wrote it, how often it runs, the rewrite,
    what the rewrite saves on the target, and whether it changes the numbers."""

    pattern: str
    source: str
    occurrences: int
    kernels: tuple[str, ...]
    rewrite: str
    gain_us: float
    exactness: str
    note: str = ""
    backward: tuple[BackwardKernels, ...] = ()
    """In a training step, the backward kernels the site's forward lines cause (by kind, with time)."""

    @property
    def backward_us(self) -> float:
        return sum(group.time_us for group in self.backward)

    def describe(self) -> str:
        where = self.source.rsplit("/", 1)[-1] if self.source else "?"
        times = f" x{self.occurrences}" if self.occurrences > 1 else ""
        note = f"; {self.note}" if self.note else ""
        caused = ", ".join(group.describe() for group in self.backward)
        backward = f"; its backward: {caused}" if caused else ""
        return (
            f"{self.pattern} at {where}{times}: {self.rewrite}; modeled gain {self.gain_us:.2f} us; "
            f"{self.exactness}{backward}{note}"
        )


def findings_json(findings: Sequence[Finding]) -> list[Mapping[str, object]]:
    return [
        {"pattern": f.pattern, "source": f.source, "occurrences": f.occurrences, "kernels": list(f.kernels),
         "rewrite": f.rewrite, "gain_us": round(f.gain_us, 3), "exactness": f.exactness, "note": f.note,
         "backward": [{"kernel_type": g.kernel_type, "count": g.count, "time_us": round(g.time_us, 3)} for g in f.backward]}
        for f in findings
    ]
