"""The plan: what one variant of a program asks the device to run, as tasks on streams.

The SuperKernel planner (:mod:`.superkernel`) writes it and every later stage reads it: the sanitizer
checks its streams, the simulator prices its tasks, the report names its scopes. A plan is the same
immutable data for the BASELINE (scopes ignored) and the VARIANT (scopes honoured).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..errors import NpufuseError
from ..vocabulary import Vocabulary

if TYPE_CHECKING:
    from ..ir.events import Event
    from .options import SuperKernelOptions
    from .streams import StreamPlan


class Variant(Vocabulary):
    """Which of the two plans of a case: scopes and streams ignored, or honoured."""

    BASELINE = "baseline"
    VARIANT = "variant"


@dataclass(frozen=True)
class LogRecord:
    """One plog line: a level (``WARNING`` or ``ERROR``), the module keyword, and the message."""

    level: str
    keyword: str
    message: str


@dataclass(frozen=True)
class Segment:
    """One SuperKernel formed from a contiguous run of fusable kernels of a scope.

    ``kernel_dims`` is each sub-kernel's own block dim (it runs on at most the SuperKernel's). ``reads``
    gives, for each sub-kernel, the earlier sub-kernels whose output it reads: the SuperKernel compiler
    puts an intra-kernel sync only there, so independent sub-kernels run back to back. ``early_start``
    and ``preload`` are the ``early-start`` and ``preload-code`` options in effect (Early-Start is off in
    a dual-stream SuperKernel); ``code_copies`` is ``split-mode``, the copies of each sub-kernel's code
    that spread the cores' instruction fetches; ``flush_before``/``flush_after`` mark the sub-kernels the dcci options
    (or ``debug-dcci-all``) flush the data cache around.
    """

    scope: str
    kernels: tuple[str, ...]
    name: str
    te_name: str
    block_dim: int
    kernel_type: str
    kernel_dims: tuple[int, ...]
    reads: tuple[tuple[int, ...], ...]
    feed_sync_all: bool = False
    lanes: tuple[str, ...] = ()
    early_start: bool = True
    preload: bool = True
    code_copies: int = 4
    flush_before: tuple[bool, ...] = ()
    flush_after: tuple[bool, ...] = ()
    options: SuperKernelOptions | None = None


@dataclass(frozen=True)
class ScopeBreak:
    """An unfusable op inside a scope that split it and ran as an ordinary task. ``unfusable`` is the
    catalog's reason word (:class:`~pytest_npufuse.vocabulary.Unfusable`) and ``why`` its sentence."""

    op_type: str
    kernel: str
    source: str
    engine: str
    unfusable: str = ""
    why: str = ""

    def describe(self) -> str:
        """The break in words, as every text about a split scope names it: op type, kernel, source line."""
        return f"{self.op_type} ({self.kernel}{' at ' + self.source if self.source else ''})"


def broken_by(breaks: Sequence[ScopeBreak]) -> str:
    """The ops that split a scope, in words ('' for none)."""
    return ", ".join(site.describe() for site in breaks)


class ScopeOutcome(Vocabulary):
    """What became of a SuperKernel scope (the ``outcome=`` words of the ``superkernel`` marker)."""

    FUSED = "fused"
    UNFUSED = "unfused"
    BYPASSED = "bypassed"
    ABORTED = "aborted"
    HANG = "hang"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class ScopePlan:
    """What became of one SuperKernel scope."""

    scope: str
    options: str
    outcome: ScopeOutcome
    segments: tuple[Segment, ...]
    breaks: tuple[ScopeBreak, ...]
    reason: str
    splits: tuple[str, ...] = ()

    @property
    def block_dim(self) -> int:
        return max((segment.block_dim for segment in self.segments), default=0)


@dataclass(frozen=True)
class Task:
    """One device task: an ordinary kernel (the task carries the kernel's name), or a SuperKernel
    calling its sub-kernels."""

    name: str
    kernels: tuple[str, ...]
    stream: str
    block_dim: int
    engine: str
    segment: Segment | None = None
    priority: int = 0


@dataclass(frozen=True)
class Plan:
    """The tasks of one variant in issue order (each stream runs its own tasks in this order), the
    events between streams, the fate of every SuperKernel scope, and the plog lines.

    ``failure`` is set when the variant cannot run to completion on the device: a compile abort, a
    modeled hang or a modeled deadlock. ``streams`` is the kernel-level stream plan the sanitizer
    checks; ``syncs`` are its events between device tasks (:func:`between_tasks`).
    """

    variant: Variant
    mode: str
    tasks: tuple[Task, ...]
    scopes: tuple[ScopePlan, ...]
    log: tuple[LogRecord, ...] = ()
    failure: str | None = None
    syncs: tuple[Event, ...] = ()
    streams: StreamPlan | None = None

    def scope(self, name: str) -> ScopePlan | None:
        return next((scope for scope in self.scopes if scope.scope == name), None)


def between_tasks(edges: Sequence[Event], tasks: Sequence[Task]) -> tuple[Event, ...]:
    """Events between kernels as the device scheduler takes them: between the tasks those kernels run
    in, on those tasks' streams (:meth:`Event.on_tasks`). Dropped: events that order kernels of one
    SuperKernel (it syncs inside itself) and waits at a stream's end, which only join work the run's
    makespan already covers. A wait whose event is never recorded keeps no recording task, so the
    device reports the deadlock too."""
    task_of = {kernel: task for task in tasks for kernel in task.kernels}
    events = []
    for edge in edges:
        if edge.wait_before is None:
            continue
        for kernel in (edge.record_after, edge.wait_before):
            if kernel is not None and kernel not in task_of:
                raise NpufuseError(f"event '{edge.event}' names kernel '{kernel}', which is not a kernel of the program.")
        waiter = task_of[edge.wait_before]
        if edge.record_after is None:
            events.append(edge.on_tasks(None, None, waiter.name, waiter.stream))
        elif (recorder := task_of[edge.record_after]) is not waiter:
            events.append(edge.on_tasks(recorder.name, recorder.stream, waiter.name, waiter.stream))
    return tuple(events)
