"""A training step on the modeled timeline: its graphs (forward, backward, optimizer) one after another.

Each graph of a step is its own launch (GE loads and runs each compiled graph as a model of its own;
an aclgraph replays each captured graph), and the next graph needs the previous one's results (the
backward reads the forward's saved tensors and the loss's gradient, the optimizer reads the gradients),
so the step's timeline is the graphs' timelines end to end: graph ``k`` starts when graph ``k-1``
ended. The host's launch of the next graph is not overlapped with the previous graph's device work
(estimate: autograd reaches the backward only after the forward returned its outputs; a host that ran
ahead would hide at most one model launch per graph).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from ..ir.events import Event
from .timeline import Bound, RunReport


def _shifted_event(event: Event, offset: float) -> Event:
    if event.record_start_us is None or event.wait_start_us is None:
        return event
    return event.timed(
        event.record_start_us + offset, (event.record_end_us or 0.0) + offset, event.wait_start_us + offset,
        (event.wait_end_us or 0.0) + offset,
    )


def chain_runs(runs: Sequence[RunReport]) -> RunReport:
    """The runs of a step's graphs as one run: times add up, every kernel, host slice and event moves by
    the time the graphs before it took, and a graph that cannot finish makes the step unable to finish."""
    if not runs:
        raise ValueError("a step has at least one graph")
    if len(runs) == 1:
        return runs[0]
    failed = next((run for run in runs if run.failure is not None), None)
    first = runs[0]
    if failed is not None:
        return replace(
            failed, time_us=math.inf, device_us=math.inf, tasks=sum(run.tasks for run in runs), kernels=(), host=(),
            events=(),
        )
    offset = 0.0
    kernels, host, events, streams = [], [], [], dict.fromkeys(first.streams)
    for run in runs:
        kernels += [k._replace(start_us=k.start_us + offset, end_us=k.end_us + offset) for k in run.kernels]
        host += [s._replace(start_us=s.start_us + offset, end_us=s.end_us + offset) for s in run.host]
        events += [_shifted_event(event, offset) for event in run.events]
        streams.update(dict.fromkeys(run.streams))
        offset += run.time_us
    device_us = sum(run.device_us for run in runs)
    host_us = sum(run.host_us for run in runs)
    return replace(
        first,
        time_us=offset,
        device_us=device_us,
        host_us=host_us,
        bound=Bound.HOST if host_us > device_us else Bound.DEVICE,
        tasks=sum(run.tasks for run in runs),
        kernels=tuple(kernels),
        host=tuple(host),
        events=tuple(events),
        streams=tuple(streams),
    )
