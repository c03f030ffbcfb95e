"""Where each stream's kernels went: a side stream whose kernels a SuperKernel on another stream took in
has no lane of its own on the timeline, and the case report says so (``stream-fusion=1`` runs them there
side by side)."""

from __future__ import annotations

from dataclasses import dataclass

from ..plan.tasks import Plan


@dataclass(frozen=True)
class StreamUse:
    """One stream of the VARIANT: its kernels, and those of them that run inside a SuperKernel issued
    on another stream (``superkernels`` names those SuperKernels; ``side_by_side`` says whether
    ``stream-fusion=1`` runs them on a lane of their own inside it)."""

    stream: str
    kernels: int
    fused_elsewhere: int
    superkernels: tuple[str, ...]
    host_stream: str
    side_by_side: bool

    def note(self) -> str:
        """One sentence on where this stream's kernels went; '' when they all run on it."""
        if not self.fused_elsewhere:
            return ""
        which = ", ".join(self.superkernels)
        how = (
            "stream-fusion=1 runs them side by side with the other stream's sub-kernels"
            if self.side_by_side
            else "stream-fusion=0: one after another, in issue order"
        )
        if self.fused_elsewhere == self.kernels:
            return (
                f"stream '{self.stream}' has no lane of its own on the timeline: all its {self.kernels} kernel(s) run "
                f"inside SuperKernel {which} on stream '{self.host_stream}' ({how})"
            )
        return (
            f"{self.fused_elsewhere} of stream '{self.stream}''s {self.kernels} kernels run inside SuperKernel "
            f"{which} on stream '{self.host_stream}' ({how})"
        )


def stream_uses(plan: Plan) -> tuple[StreamUse, ...]:
    """Each stream of the VARIANT's plan, with the kernels that a SuperKernel on another stream took in."""
    if plan.streams is None:
        return ()
    kernel_stream = plan.streams.kernel_stream
    counts: dict[str, int] = {}
    for stream in kernel_stream.values():
        counts[stream] = counts.get(stream, 0) + 1
    moved: dict[str, list[tuple[str, str, bool]]] = {}
    for task in plan.tasks:
        if task.segment is None:
            continue
        for kernel in task.kernels:
            own = kernel_stream.get(kernel, task.stream)
            if own != task.stream:
                moved.setdefault(own, []).append((task.segment.name, task.stream, bool(task.segment.lanes)))
    uses = []
    for stream in plan.streams.streams:
        if stream not in counts:
            continue
        into = moved.get(stream, [])
        names = tuple(dict.fromkeys(name for name, _, _ in into))
        host = into[0][1] if into else stream
        uses.append(StreamUse(stream, counts[stream], len(into), names, host, any(lanes for _, _, lanes in into)))
    return tuple(uses)
