"""The stream plan: which stream each kernel runs on, and the events that order streams.

It binds the event requests the model made (:class:`~pytest_npufuse.ir.events.Event`, as captured) into
events between kernels, adding what the compiler adds in each mode:

- max-autotune (GE graph sink): GE inserts an event for every data dependency between streams
  (docs/sources.md#hw-2-4), so only control order needs ``npu_wait_tensor`` or
  ``record()``/``wait()``. Tagged events and ``npu_record_tagged_stream`` are not supported there.
- reduce-overhead and npugraph_ex (aclgraph capture): nothing is inserted for data; the user's tagged events are the only
  order, plus TorchAir's fork/join closure: every side stream waits for a start event recorded on the
  main stream, and the main stream waits, before the outputs, for an exit event recorded at the end of
  each stream scope (docs/sources.md#torchair-4-4). ``npu_wait_tensor`` is not supported there.

A wait binds to the latest record of its event issued before it; if there is none, to the first one
issued after it (the stream blocks until then); if the event is never recorded, the wait can never be
satisfied, which the sanitizer and the simulator report as a modeled deadlock.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..errors import ScopeError
from ..ir.events import Event, EventKind
from ..ir.program import Kernel, Program
from ..vocabulary import Mode

MAX_AUTOTUNE = Mode.MAX_AUTOTUNE
REDUCE_OVERHEAD = Mode.REDUCE_OVERHEAD
# max-autotune-only APIs and what to say instead.
_GE_ONLY = {
    # TorchAir's own error text: torchair python/torchair/scope/_wait_tensor.py @fced8842.
    "npu_wait_tensor": "TorchAir raises NotImplementedError: torch.ops.air.wait_tensor kernel_impl is not implemented! "
    "npu_wait_tensor is not support in this mode; order streams with events (torch.npu.Event, or "
    "npu_tagged_event_record / npu_tagged_event_wait)",
    "npu_stream_switch(enable_inner_parallel=False)": "TorchAir documents enable_inner_parallel for max-autotune "
    "only; drop the argument",
}
_TAGGED = {"npu_tagged_event_record", "npu_tagged_event_wait", "npu_record_tagged_stream"}
# torch.npu streams and events: TorchAir's aclgraph pass turns them into tagged events; GE has no converter.
_NATIVE = {"torch.npu.stream", "torch.npu.Event.record", "torch.npu.Event.wait", "Tensor.record_stream"}


@dataclass(frozen=True)
class StreamPlan:
    """Streams of the VARIANT, kernel by kernel, and the events between them (``edges``: each a wait
    bound to its record, :meth:`Event.bound`)."""

    mode: str
    streams: tuple[str, ...]
    kernel_stream: Mapping[str, str]
    edges: tuple[Event, ...]


def _check_mode(program: Program, mode: str) -> None:
    """TorchAir's mode rules, as errors that say which API to use instead."""
    for point in program.syncs:
        if point.api in _GE_ONLY and mode != MAX_AUTOTUNE:
            raise ScopeError(
                f"{point.api}{' at ' + point.source if point.source else ''} is not supported in {mode} mode "
                f"({_GE_ONLY[point.api]}).", op=point.api.partition("(")[0], where=point.source or None
            )
        eager_native = mode == Mode.EAGER and point.api in _NATIVE  # torch_npu runs native streams op by op
        if point.api in _TAGGED | _NATIVE and not Mode(mode).aclgraph and not eager_native:
            raise ScopeError(
                f"{point.api}{' at ' + point.source if point.source else ''} works only in the aclgraph modes "
                f"reduce-overhead and npugraph_ex (TorchAir has no {mode} converter for it); in max-autotune use "
                "torchair.scope.npu_stream_switch with npu_wait_tensor or record()/wait().",
                op=point.api.partition("(")[0], where=point.source or None
            )


class _Issue:
    """Kernels per stream in issue order, to find the kernel before or after a point of a stream."""

    def __init__(self, kernels: Sequence[Kernel]) -> None:
        self.by_stream: dict[str, list[Kernel]] = {}
        for kernel in kernels:
            self.by_stream.setdefault(kernel.stream, []).append(kernel)
        self.indices = {stream: [k.index for k in queue] for stream, queue in self.by_stream.items()}

    def last_before(self, stream: str, position: int) -> str | None:
        at = bisect.bisect_left(self.indices.get(stream, []), position)
        return self.by_stream[stream][at - 1].name if at else None

    def first_from(self, stream: str, position: int) -> str | None:
        indices = self.indices.get(stream, [])
        at = bisect.bisect_left(indices, position)
        return self.by_stream[stream][at].name if at < len(indices) else None


def _bind_waits(points: Sequence[Event], issue: _Issue) -> list[Event]:
    """Pair each wait with the record it waits for, by issue order."""
    records: dict[str, list[int]] = {}
    for index, point in enumerate(points):
        if point.kind == EventKind.RECORD:
            records.setdefault(point.event, []).append(index)
    edges: list[Event] = []
    for index, point in enumerate(points):
        if point.kind != EventKind.WAIT:
            continue
        of_event = records.get(point.event, [])
        at = bisect.bisect_left(of_event, index)
        chosen = of_event[at - 1] if at else (of_event[at] if at < len(of_event) else None)
        record = None if chosen is None else points[chosen]
        wait_before = issue.first_from(point.stream, point.position)
        recorder = None if record is None else issue.last_before(record.stream, record.position)
        if record is not None and recorder is None:
            continue
        edges.append(point.bound(recorder, wait_before))
    return edges


def _closure_point(kind: EventKind, stream: str, position: int, event: str) -> Event:
    """A request the aclgraph capture inserts, as if the model had made it at ``position``."""
    return Event(event, kind=kind, stream=stream, position=position, api="fork/join closure")


def _closure_points(program: Program) -> list[Event]:
    """TorchAir's fork/join closure for aclgraph capture: one start event, one exit event per scope."""
    if not program.stream_scopes:
        return []
    record, wait = EventKind.RECORD, EventKind.WAIT
    points = [_closure_point(record, "default", 0, "closure:start")]
    for number, scope in enumerate(program.stream_scopes):
        exit_event = f"closure:exit:{scope.stream}:{number}"
        points.append(_closure_point(wait, scope.stream, scope.enter, "closure:start"))
        points.append(_closure_point(record, scope.stream, scope.exit, exit_event))
        points.append(_closure_point(wait, "default", len(program.kernels), exit_event))
    return points


def _ge_data_edges(program: Program) -> list[Event]:
    """GE orders every cross-stream data dependency with an event of its own."""
    edges: dict[tuple[str, str], Event] = {}
    for kernel in program.kernels:
        for buffer in kernel.inputs:
            producer = program.producer(buffer)
            if producer is not None and producer.stream != kernel.stream:
                edges.setdefault(
                    (producer.name, kernel.name),
                    Event(f"ge:{producer.name}->{kernel.name}", producer.name, kernel.name, stream=kernel.stream, api="GE data edge"),
                )
    return list(edges.values())


def _issue_sorted(points: Sequence[Event]) -> list[Event]:
    """Stable by position, so closure points interleave with the user's as the compiler inserts them."""
    return sorted(points, key=lambda p: p.position)


def stream_plan(program: Program, mode: str, *, multistream: bool = True) -> StreamPlan:
    """The VARIANT's streams for ``mode``; with ``multistream=False`` everything runs on the default stream."""
    if not multistream:
        kernel_stream = {k.name: "default" for k in program.kernels}
        return StreamPlan(mode, ("default",), kernel_stream, ())
    _check_mode(program, mode)
    issue = _Issue(program.kernels)
    user = [p for p in program.syncs if p.kind in (EventKind.RECORD, EventKind.WAIT)]
    points = _issue_sorted(user + _closure_points(program)) if Mode(mode).aclgraph else user
    edges = _bind_waits(points, issue)
    if mode == MAX_AUTOTUNE:
        edges += _ge_data_edges(program)
    named = {p.stream for p in program.syncs} - set(program.streams())
    streams = (*program.streams(), *sorted(named))
    return StreamPlan(mode, streams, {k.name: k.stream for k in program.kernels}, tuple(edges))
