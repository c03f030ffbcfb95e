"""The device scheduler: when each task of a plan starts, given streams, events and shared cores.

Each stream is an in-order queue. The task scheduler dispatches a stream's tasks one after another as
soon as the host has launched them, while earlier tasks still run (dispatch is pipelined: it costs time
only when kernels are shorter than their dispatch). A task becomes ready when it is dispatched, the
stream's previous task has ended plus the residual task gap (the "Task wait" profiles show), and every
event it waits on has been recorded; then it asks for cores. The cores are pools shared by all streams:
AI Cube (AIC) and AI Vector (AIV) cores, AI CPU cores, the communication engine, the DMA engine (L2
prefetch), and HBM bandwidth in thousandths: a memory-bound kernel holds nearly all of it, so two of them
on different streams take turns instead of overlapping for free. A task holds its block dim of each pool it needs from start to end.
Ready tasks are served in order of stream priority (a smaller number first, as ACL stream priorities),
then readiness, then stream order; a task that does not fit blocks lower-ranked tasks from the pools it
waits for, so a wide kernel is never starved by a stream of narrow ones.

Every tie is broken by integers assigned in plan order, never by dict order, hashes or wall clock, so the
schedule is identical on every machine. A wait that can never be satisfied raises
:class:`~pytest_npufuse.errors.ModeledDeadlockError` naming the streams and events; nothing hangs.
"""

from __future__ import annotations

import heapq
from operator import itemgetter
from typing import NamedTuple, Sequence

from ..errors import ModeledDeadlockError, NpufuseError
from ..ir.events import Event

POOLS = ("aic", "aiv", "aicpu", "comm", "dma", "hbm")
HBM_POOL = 5
HBM_UNITS = 1000
# Ready and waiting tasks are (ready time, priority, stream, index); waiting ones start in rank order:
# priority first, then readiness, then stream and plan order.
_RANK = itemgetter(1, 0, 2, 3)


class DeviceTask(NamedTuple):
    """What the scheduler needs to know about one task: where it runs, what it holds, how long (a named
    tuple: the simulator builds one per task of a 100k-kernel program)."""

    name: str
    stream: int
    priority: int
    needs: tuple[tuple[int, int], ...]
    dispatch_us: float
    duration_us: float
    waits: tuple[int, ...] = ()
    records: tuple[int, ...] = ()
    cold_us: float = 0.0


class DeviceModel:
    """A resumable discrete-event run of tasks over streams and core pools.

    The host model releases tasks as it launches them (:meth:`release`) and may run the device until a
    given task ends (:meth:`run` with ``until``) when it must wait for a value; graph-sink modes release
    everything at once. ``events`` are the plan's events between tasks; a task's ``waits`` and
    ``records`` index them, which is all the scheduling loop reads. :meth:`timed_events` gives them
    back on the timeline.
    """

    def __init__(
        self,
        tasks: Sequence[DeviceTask],
        streams: Sequence[str],
        capacity: Sequence[int],
        events: Sequence[Event] = (),
        event_record_us: float = 0.0,
        event_wait_us: float = 0.0,
        task_gap_us: float = 0.0,
    ) -> None:
        self.tasks = tasks
        self.streams = streams
        self.events = events
        self._record_us = event_record_us
        self._wait_us = event_wait_us
        self._gap_us = task_gap_us
        self._free = list(capacity)
        self._capacity = tuple(capacity)
        self._queues: list[list[int]] = [[] for _ in streams]
        for index, task in enumerate(tasks):
            self._queues[task.stream].append(index)
        self._next = [0] * len(streams)
        self._stream_free = [0.0] * len(streams)
        self._dispatched = [0.0] * len(streams)
        self._busy = [False] * len(streams)
        self._release: list[float | None] = [None] * len(tasks)
        self.start: list[float | None] = [None] * len(tasks)
        self.end: list[float | None] = [None] * len(tasks)
        self.cold = [0.0] * len(tasks)
        self._arrived_late = [False] * len(tasks)
        self.recorded: list[float | None] = [None] * len(events)
        self.waited: list[float | None] = [None] * len(events)
        self._blocked: dict[int, list[int]] = {}
        self._ready: list[tuple[float, int, int, int]] = []
        self._waiting: list[tuple[float, int, int, int]] = []
        self._running: list[tuple[float, int]] = []

    def release(self, task: int, time: float) -> None:
        """The host has launched ``task`` at ``time``; it may start from then on."""
        self._release[task] = time
        self._activate(self.tasks[task].stream)

    def release_all(self, time: float) -> None:
        """Every task launched at once (graph sink or graph replay)."""
        self._release = [time] * len(self.tasks)
        for stream in range(len(self.streams)):
            self._activate(stream)

    def _activate(self, stream: int) -> None:
        """Make the stream's next task ready if nothing holds it back."""
        if self._busy[stream]:
            return
        queue = self._queues[stream]
        position = self._next[stream]
        if position == len(queue):
            return
        index = queue[position]
        release = self._release[index]
        if release is None:
            return
        task = self.tasks[index]
        idle_from = self._stream_free[stream] + (self._gap_us if position else 0.0)
        ready = idle_from
        waits = task.waits
        if waits:
            recorded = self.recorded
            for event in waits:
                at = recorded[event]
                if at is None:
                    self._blocked.setdefault(event, []).append(stream)
                    return
                if at > ready:
                    ready = at
            for event in waits:
                self.waited[event] = ready
            ready += self._wait_us * len(waits)
        dispatched = self._dispatched[stream]
        dispatched = (release if release > dispatched else dispatched) + task.dispatch_us
        self._dispatched[stream] = dispatched
        # Cold: the launch reached the device after the stream and its events were ready, so the task
        # waited for the host. A task held by an event instead (a side stream's first task in a graph)
        # was launched ahead and had its start-up hidden, like a task queued behind another.
        self._arrived_late[index] = dispatched > ready
        if dispatched > ready:
            ready = dispatched
        self._busy[stream] = True
        self._enqueue(ready, task.priority, stream, index)

    def _enqueue(self, ready: float, priority: int, stream: int, index: int) -> None:
        """The stream's next task is ready at ``ready``: it starts as soon as its cores are free (a model of
        several ranks holds a collective back here until every rank is ready for it)."""
        heapq.heappush(self._ready, (ready, priority, stream, index))

    def released_at(self, task: int) -> float | None:
        """When the host launched ``task`` (None: not yet)."""
        return self._release[task]

    def run(self, until: int | None = None, check: bool = True) -> None:
        """Advance until ``until`` has a known end (it has started), or until nothing more can run; then,
        unless ``check`` is off (a task is held back on purpose), every task must have run.

        Each stream has at most one task in flight, so both heaps hold at most one entry per stream.
        This loop runs twice per task, so it works on local names and handles inline what happens to
        nearly every task: a task ends (its cores return, its events are recorded, its stream's next
        task becomes ready), and the one task ready at a time starts if its cores are free.
        """
        ready, running, waiting = self._ready, self._running, self._waiting
        tasks, end, free, recorded = self.tasks, self.end, self._free, self.recorded
        stream_free, busy, position, blocked = self._stream_free, self._busy, self._next, self._blocked
        record_us, activate = self._record_us, self._activate
        pop = heapq.heappop
        while until is None or end[until] is None:
            if ready:
                now = ready[0][0]
                if running and running[0][0] < now:
                    now = running[0][0]
            elif running:
                now = running[0][0]
            else:
                break
            while running and running[0][0] <= now:
                index = pop(running)[1]
                task = tasks[index]
                for pool, count in task.needs:
                    free[pool] += count
                clock, stream, records = end[index], task.stream, task.records
                for event in records:
                    clock += record_us
                    recorded[event] = clock
                stream_free[stream] = clock
                busy[stream] = False
                position[stream] += 1
                activate(stream)
                for event in records:
                    for waiter in blocked.pop(event, ()):
                        activate(waiter)
            while ready and ready[0][0] <= now:
                waiting.append(pop(ready))
            if len(waiting) == 1:
                index = waiting[0][3]
                task = tasks[index]
                needs = task.needs
                for pool, count in needs:
                    if free[pool] < count:
                        self._check_fits(task)
                        break
                else:
                    waiting.clear()
                    self._begin(index, task, now)
            elif waiting:
                self._start_waiting(now)
        if until is None and check:
            self._check_finished()

    def _start_waiting(self, now: float) -> None:
        """Start ready tasks in rank order while they fit; a task that does not fit reserves its pools."""
        waiting, free, tasks = self._waiting, self._free, self.tasks
        waiting.sort(key=_RANK)
        reserved: set[int] = set()
        still: list[tuple[float, int, int, int]] = []
        for item in waiting:
            index = item[3]
            task = tasks[index]
            needs = task.needs
            for pool, count in needs:
                if free[pool] < count or pool in reserved:
                    self._check_fits(task)
                    reserved.update(pool for pool, _ in needs)
                    still.append(item)
                    break
            else:
                self._begin(index, task, now)
        waiting[:] = still

    def _begin(self, index: int, task: DeviceTask, now: float) -> None:
        """Start ``task`` at ``now``: it holds its cores until it ends."""
        free = self._free
        for pool, count in task.needs:
            free[pool] -= count
        self.start[index] = now
        cold = task.cold_us if self._arrived_late[index] else 0.0
        self.cold[index] = cold
        self.end[index] = finish = now + task.duration_us + cold
        heapq.heappush(self._running, (finish, index))

    def _check_fits(self, task: DeviceTask) -> None:
        """A task that waits for cores must fit once they are free, or it would wait forever."""
        for pool, count in task.needs:
            if count > self._capacity[pool]:
                raise NpufuseError(
                    f"task {task.name} needs {count} {POOLS[pool]} cores but the target has "
                    f"{self._capacity[pool]}; its block dim cannot exceed the hardware.",
                    entry=task.name, bound=self._capacity[pool]
                )

    def last_end(self, stream: int) -> float | None:
        """When the stream's last task that ran ends (None: none ran). A stream runs its tasks in order,
        each after the one before, so that is also the latest end on the stream."""
        end = self.end
        for index in reversed(self._queues[stream]):
            if end[index] is not None:
                return end[index]
        return None

    def _check_finished(self) -> None:
        stuck = [s for s, queue in enumerate(self._queues) if self._next[s] < len(queue)]
        if not stuck:
            return
        lines, never = [], []
        for stream in stuck:
            index = self._queues[stream][self._next[stream]]
            task = self.tasks[index]
            if self._release[index] is None:
                raise NpufuseError(f"internal error: task {task.name} was never launched by the host model")
            missing = [e for e in task.waits if self.recorded[e] is None]
            never += [self.events[e].event for e in missing]
            lines.append(
                f"stream '{self.streams[stream]}' waits before {task.name} on "
                + ", ".join(self._describe(event) for event in missing)
            )
        raise ModeledDeadlockError(
            "modeled deadlock: the device would wait forever. " + "; ".join(lines) + ". Record every event "
            "that is waited on, before the wait in program order, on another stream.",
            entry=", ".join(never),
        )

    def _describe(self, number: int) -> str:
        """Why event ``number`` is not recorded: no device task records it, or the one that does never runs."""
        event = self.events[number]
        if not any(number in task.records for task in self.tasks):
            return f"event '{event.event}', which is never recorded"
        return (
            f"event '{event.event}', recorded after {event.record_task} on stream '{event.record_stream}', "
            "which itself never runs"
        )

    def timed_events(self) -> tuple[Event, ...]:
        """The events on the timeline of the finished run (:meth:`Event.timed`): a record takes
        ``event_record_us`` up to when the event is recorded, a wait ``event_wait_us`` from when its
        stream starts waiting."""
        record_us, wait_us = self._record_us, self._wait_us
        return tuple(
            event.timed(recorded - record_us, recorded, waited, waited + wait_us)
            for event, recorded, waited in zip(self.events, self.recorded, self.waited)
        )
