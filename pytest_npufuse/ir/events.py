"""One cross-stream event, from the model's request to the modeled timeline.

A model orders its streams with requests at points of its issue order: ``record()``/``wait([...])``,
``npu_wait_tensor``, tagged events, ``torch.npu.Event`` and ``npu_record_tagged_stream``. Each stage after
capture refines the same :class:`Event`: it returns new instances with more fields resolved, and never
changes one it was given (they are frozen), so every stage's result stays what that stage produced.

=====================  ====================================================================================
stage                  what it resolves
=====================  ====================================================================================
capture (lowering)     a request at a point of the issue order: ``kind``, ``stream``, ``position``,
                       ``api``, ``source`` and, for ``keep_alive``, ``buffer`` (:attr:`Program.syncs`)
streams                a wait bound to the record it waits for: ``record_after`` and ``wait_before`` name
                       kernels (:meth:`Event.bound`, :attr:`StreamPlan.edges`)
fusion                 the device tasks those kernels run in and the tasks' streams: ``record_task``,
                       ``record_stream``, ``wait_task``, ``wait_stream`` (:meth:`Event.on_tasks`, :attr:`Plan.syncs`)
device / simulate      when it is recorded and waited on: ``record_start_us`` .. ``wait_end_us``
                       (:meth:`Event.timed`, :attr:`RunReport.events`)
=====================  ====================================================================================

A hand-built plan (:mod:`~pytest_npufuse.pipeline.synthetic`) enters at the streams stage, as
``Event(name, record_after, wait_before)``. A slotted dataclass: a 100k-kernel run builds thousands.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..vocabulary import Vocabulary


class EventKind(Vocabulary):
    """What a request asks for. ``record``: the event is recorded on ``stream`` after the stream's work
    issued so far. ``wait``: the stream's work issued from here on waits for the event. ``keep_alive``:
    ``buffer`` must outlive the work issued so far on ``stream`` (``npu_record_tagged_stream``,
    ``Tensor.record_stream``). ``noop``: an ordering request with nothing to wait for (on a graph input),
    kept so the mode rules still apply."""

    RECORD = "record"
    WAIT = "wait"
    KEEP_ALIVE = "keep_alive"
    NOOP = "noop"


@dataclass(frozen=True, slots=True)
class Event:
    """A cross-stream event at one stage of the pipeline (see the module docstring for which fields each
    stage resolves; a field a stage has not reached is None).

    From the streams stage on, an instance is one wait bound to its record: the event is recorded on the
    stream of ``record_after`` once that kernel ends (None: nothing records it, see
    :attr:`never_recorded`) and waited on before ``wait_before`` starts (None: at the end of ``stream``,
    before the graph's outputs). ``stream`` is the stream the request was made on: the recording
    stream of a record, the waiting stream of a wait, the stream a ``keep_alive`` keeps ``buffer`` for.
    ``position`` counts the kernels issued before the request (None: not a captured request, e.g. an
    event GE inserts). ``api`` names the user-facing call, for mode rules and messages; ``source`` is
    the user's line.
    """

    event: str
    record_after: str | None = None
    wait_before: str | None = None
    kind: EventKind = EventKind.WAIT
    stream: str | None = None
    position: int | None = None
    api: str = ""
    source: str = ""
    buffer: str | None = None
    record_task: str | None = None
    wait_task: str | None = None
    record_stream: str | None = None
    wait_stream: str | None = None
    record_start_us: float | None = None
    record_end_us: float | None = None
    wait_start_us: float | None = None
    wait_end_us: float | None = None

    @property
    def never_recorded(self) -> bool:
        """A bound wait that no record satisfies: the device would wait forever (a modeled deadlock).
        The stream plan binds a wait to no kernel only then, so this reads ``record_after``."""
        return self.record_after is None

    def bound(self, record_after: str | None, wait_before: str | None) -> Event:
        """This wait bound by the stream plan: after kernel ``record_after``, before ``wait_before``."""
        return Event(
            self.event, record_after, wait_before, self.kind, self.stream, self.position, self.api, self.source,
            self.buffer,
        )

    def on_tasks(self, record_task: str | None, record_stream: str | None, wait_task: str, wait_stream: str) -> Event:
        """This event between device tasks: recorded once task ``record_task`` (on ``record_stream``;
        None: never recorded) ends, waited on before task ``wait_task`` (on ``wait_stream``) starts."""
        return Event(
            self.event, self.record_after, self.wait_before, self.kind, self.stream, self.position, self.api,
            self.source, self.buffer, record_task, wait_task, record_stream, wait_stream,
        )

    def timed(self, record_start_us: float, record_end_us: float, wait_start_us: float, wait_end_us: float) -> Event:
        """This event on the modeled timeline: its record and its wait, each from start to end."""
        return Event(
            self.event, self.record_after, self.wait_before, self.kind, self.stream, self.position, self.api, self.source,
            self.buffer, self.record_task, self.wait_task, self.record_stream, self.wait_stream, record_start_us,
            record_end_us, wait_start_us, wait_end_us,
        )
