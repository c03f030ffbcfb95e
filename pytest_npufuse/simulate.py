"""Deterministic model of one run of a plan on one die: host and device, as a timeline.

Each task pays the device scheduler's dispatch cost for its engine and one kernel head. A SuperKernel
is one task: it pays them once and then calls its sub-kernels back to back, each call costing a little,
with a barrier only before a sub-kernel that reads what an earlier one in the same SuperKernel wrote.
When the task starts is decided by :mod:`~pytest_npufuse.device` (streams, events, shared cores) as the
host model (:mod:`~pytest_npufuse.host`) launches tasks. All arithmetic is plain float math in a fixed
order, so every machine gives the same numbers.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

from . import cost
from .device import DeviceEvent, DeviceModel, DeviceTask
from .errors import NpufuseError
from .fusion import Plan, Segment, Task
from .hardware import HardwareProfile
from .host import GRAPH_SINK, HOST_SCHEDULED, EAGER, HostConfig, HostSlice, execution_of, kept_on_host, schedule
from .program import Kernel, Program


@dataclass(frozen=True)
class KernelRun:
    """One executed kernel on the modeled timeline (a SuperKernel and its sub-kernels each get one)."""

    name: str
    op_type: str
    stream: str
    start_us: float
    end_us: float
    block_dim: int
    engine: str
    parent: str | None = None
    kernel_type: str = ""

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class EventRun:
    """One cross-stream event: recorded on one stream, waited on another (a flow arrow in the trace)."""

    event: str
    record_stream: str
    record_start_us: float
    record_end_us: float
    wait_stream: str
    wait_start_us: float
    wait_end_us: float


@dataclass(frozen=True)
class RunReport:
    """The modeled run of one variant.

    ``time_us`` is one run end to end, from the host's first call to the device's last kernel;
    ``host_us`` is the host's busy span and ``device_us`` what the device alone would need once every
    task were launched. ``bound`` says which of the two limits the run.
    """

    variant: str
    target: str
    mode: str
    time_us: float
    device_us: float
    host_us: float
    bound: str
    tasks: int
    kernels: tuple[KernelRun, ...]
    execution: str = GRAPH_SINK
    host_threads: int = 1
    host: tuple[HostSlice, ...] = ()
    events: tuple[EventRun, ...] = ()
    streams: tuple[str, ...] = ("default",)
    failure: str | None = None


SUPERKERNEL_OP = "npufuse::superkernel"
_POOL_OF = {"cube": 0, "vector": 1, "aicpu": 2, "comm": 3}
_SPEC_KEY = attrgetter("shape", "nbytes")
_R = TypeVar("_R")
_new_object = object.__new__
_set_attribute = object.__setattr__

# What a sub-kernel's place in its SuperKernel depends on: block dim, body time, engine and SyncAll.
_SubKernel = tuple[int, float, str, bool]
# A laid-out SuperKernel: its duration, each sub-kernel's (start, end) offsets, and the cores it holds.
_Layout = tuple[float, tuple[tuple[float, float], ...], tuple[tuple[int, int], ...]]


def _record(cls: type[_R], fields: dict[str, Any]) -> _R:
    """An instance of the frozen dataclass ``cls`` with ``fields`` (every field, by name), made without
    its ``__init__``, which writes each field through ``object.__setattr__`` and is most of the cost of
    a report with 100k kernels. The result equals ``cls(**fields)`` (a test holds the two together)."""
    record = _new_object(cls)
    _set_attribute(record, "__dict__", fields)
    return record


class _Shape(NamedTuple):
    """A task's kernels relative to its start. ``row`` is the task's own kernel (name, op type, end
    offset, block dim, engine, kernel type); a SuperKernel adds its sub-kernels, what the layout knew
    of each, and their (start, end) offsets."""

    duration_us: float
    needs: tuple[tuple[int, int], ...]
    row: tuple[str, str, float, int, str, str]
    subs: tuple[Kernel, ...] = ()
    facts: tuple[_SubKernel, ...] = ()
    offsets: tuple[tuple[float, float], ...] = ()


class _Facts:
    """What one run needs to know about kernels, memoised by what it depends on: the layers of a model
    repeat the same kernels, and the same SuperKernels, many times over, so each is worked out once."""

    def __init__(self, program: Program, profile: HardwareProfile) -> None:
        self.profile = profile
        self.views = bool(program.view_storage)
        self.storage = program.view_storage.get
        overhead = profile.overhead_us
        self.head_us = overhead["kernel_head"]
        self.call_us = overhead["sk_subkernel_call"]
        self.sk_sync_us = overhead["sk_sync"]
        self.sync_all_us = overhead["sync_all"]
        self._bodies: dict[tuple, float] = {}
        self.subs: dict[tuple, _SubKernel] = {}
        self._layouts: dict[tuple, _Layout] = {}

    def body_us(self, kernel: Kernel, dim: int) -> float:
        info = kernel.info
        key = (info.engine, info.sync_all, dim, kernel.flops, kernel.bytes, kernel.compute_dtype)
        body = self._bodies.get(key)
        if body is None:
            body = self._bodies[key] = cost.body_us(kernel, dim, self.profile)
        return body

    def sub_kernel(self, kernel: Kernel, cap: int, key: tuple) -> _SubKernel:
        """Block dim (at most ``cap``, the SuperKernel's), body time, engine and SyncAll of a sub-kernel,
        remembered under ``key`` (see :func:`_superkernel_shape`)."""
        dim = min(cost.block_dim(kernel, self.profile), cap)
        fact = self.subs[key] = (dim, self.body_us(kernel, dim), kernel.info.engine, kernel.info.sync_all)
        return fact

    def layout(self, subs: tuple[_SubKernel, ...], reads: tuple[tuple[int | None, ...], ...], segment: Segment, block_dim: int) -> _Layout:
        """The layout of a SuperKernel of ``subs``; ``reads`` gives, for each input of each sub-kernel,
        the position of the earlier sub-kernel that wrote it (None: written outside the SuperKernel)."""
        key = (subs, reads, segment.lanes, segment.feed_sync_all, block_dim)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = self._lay_out(subs, reads, segment.lanes, segment.feed_sync_all, block_dim)
        return layout

    def _lay_out(
        self, subs: tuple[_SubKernel, ...], reads: tuple[tuple[int | None, ...], ...], lanes: tuple[str, ...],
        feed_sync_all: bool, block_dim: int,
    ) -> _Layout:
        """Sub-kernels back to back on their lane, a barrier before one that reads what an earlier one
        wrote; on several lanes (``stream-fusion=1``, one per stream) a Cube and a Vector sub-kernel
        overlap but two of one engine take turns. With ``feed-sync-all=1`` a SyncAll sub-kernel on
        fewer cores than the SuperKernel pays the SyncAll inserted on the idle cores."""
        lane_end: dict[str, float] = {}
        starts: list[float] = []
        ends: list[float] = []
        placed: list[tuple[float, float, str, str]] = []
        widest: dict[int, int] = {}
        for (dim, duration, engine, sync_all), writers, lane in zip(subs, reads, lanes or repeat("")):
            start = lane_end.get(lane, self.head_us) + self.call_us
            ready = [ends[position] for position in writers if position is not None]
            if ready:
                start = max(start, *ready) + self.sk_sync_us
            if feed_sync_all and sync_all and dim < block_dim:
                start += self.sync_all_us
            if lanes:
                start = _after_same_engine(start, duration, engine, lane, placed)
                placed.append((start, start + duration, engine, lane))
            end = start + duration
            starts.append(start)
            ends.append(end)
            pool = _POOL_OF[engine]
            widest[pool] = max(widest.get(pool, 0), dim)
            lane_end[lane] = end
        return max(lane_end.values()), tuple(zip(starts, ends)), tuple(sorted(widest.items()))


def _superkernel_shape(program: Program, task: Task, facts: _Facts) -> _Shape:
    """The SuperKernel as one task, laid out by :meth:`_Facts.layout`.

    This loop runs once per sub-kernel, so it looks up what it knows inline. A sub-kernel's facts depend
    on its op's catalog entry, held by identity (the program keeps it alive through the run, and an
    equal entry held twice only costs a miss), its outputs' shapes and sizes (one output as a pair,
    several as a tuple of pairs: plain tuples hash without calling into Python), its core limits,
    flops, bytes and compute dtype, and the SuperKernel's block dim."""
    kernels = tuple(map(program.kernel, task.kernels))
    storage, views, known, cap = facts.storage, facts.views, facts.subs, task.block_dim
    writer: dict[str, int] = {}
    writer_of = writer.get
    subs = []
    reads = []
    for position, kernel in enumerate(kernels):
        inputs, outputs, specs, limits = kernel.inputs, kernel.outputs, kernel.output_specs, kernel.annotations
        if views:
            inputs, outputs = tuple(map(storage, inputs, inputs)), tuple(map(storage, outputs, outputs))
        reads.append(tuple(map(writer_of, inputs)))
        key = (
            id(kernel.info), (specs[0].shape, specs[0].nbytes) if len(specs) == 1 else tuple(map(_SPEC_KEY, specs)),
            limits.aicore_limit, limits.vectorcore_limit, kernel.flops, kernel.bytes, kernel.compute_dtype, cap,
        )
        subs.append(known.get(key) or facts.sub_kernel(kernel, cap, key))
        for out in outputs:
            writer[out] = position
    subs = tuple(subs)
    total, offsets, needs = facts.layout(subs, tuple(reads), task.segment, cap)
    row = (task.name, SUPERKERNEL_OP, total, cap, task.engine, "SuperKernel")
    return _Shape(total, needs, row, kernels, subs, offsets)


def _after_same_engine(start: float, duration: float, engine: str, lane: str, placed: list[tuple[float, float, str, str]]) -> float:
    """The first start at or after ``start`` where no sub-kernel of another lane uses the same engine."""
    moved = True
    while moved:
        moved = False
        for other_start, other_end, other_engine, other_lane in placed:
            if other_lane != lane and other_engine == engine and other_start < start + duration and start < other_end:
                start, moved = other_end, True
    return start


def _kernel_shape(program: Program, task: Task, facts: _Facts) -> _Shape:
    kernel = program.kernel(task.kernels[0])
    info = kernel.info
    end = facts.head_us + facts.body_us(kernel, task.block_dim)
    row = (kernel.name, kernel.op_type, end, task.block_dim, info.engine, info.kernel_type)
    return _Shape(end, ((_POOL_OF[info.engine], task.block_dim),), row)


def _streams(plan: Plan) -> tuple[str, ...]:
    """Streams in a fixed order: the default stream first, then the others by first use."""
    seen = {"default": None}
    for task in plan.tasks:
        seen.setdefault(task.stream, None)
    return tuple(seen)


class _DeviceBuild:
    """The scheduler's view of a plan: device tasks, events and each task's kernel layout."""

    def __init__(self, program: Program, plan: Plan, profile: HardwareProfile, on_host: frozenset[str]) -> None:
        self.streams = _streams(plan)
        stream_index = {name: i for i, name in enumerate(self.streams)}
        device_tasks = [task for task in plan.tasks if task.name not in on_host]
        self.index = {task.name: i for i, task in enumerate(device_tasks)}
        # Events may name a task or a kernel inside it (a SuperKernel's sub-kernel).
        owner = {**{k: i for i, task in enumerate(device_tasks) for k in task.kernels}, **self.index}
        self.events = tuple(
            DeviceEvent(edge.event, owner.get(edge.record_after) if edge.record_after else None)
            for edge in plan.syncs
        )
        waits: dict[int, list[int]] = {}
        records: dict[int, list[int]] = {}
        for number, edge in enumerate(plan.syncs):
            if edge.wait_before not in owner:
                raise NpufuseError(f"event '{edge.event}' is waited on before '{edge.wait_before}', which is not a device task of the plan.")
            waits.setdefault(owner[edge.wait_before], []).append(number)
            recorder = self.events[number].recorder
            if recorder is not None:
                records.setdefault(recorder, []).append(number)
        facts = _Facts(program, profile)
        dispatch_us = {engine: profile.dispatch_us(engine) for engine in _POOL_OF}
        self.shapes: list[_Shape] = []
        self.tasks: list[DeviceTask] = []
        for i, task in enumerate(device_tasks):
            shape = (_superkernel_shape if task.segment is not None else _kernel_shape)(program, task, facts)
            self.shapes.append(shape)
            self.tasks.append(_record(DeviceTask, {
                "name": task.name, "stream": stream_index[task.stream], "priority": task.priority,
                "needs": shape.needs, "dispatch_us": dispatch_us[task.engine], "duration_us": shape.duration_us,
                "waits": tuple(waits.get(i, ())), "records": tuple(records.get(i, ())),
            }))

    def model(self, profile: HardwareProfile) -> DeviceModel:
        capacity = (profile.aic, profile.aiv, profile.aicpu, 1)
        overhead = profile.overhead_us
        return DeviceModel(self.tasks, self.streams, capacity, self.events, overhead["event_record"], overhead["event_wait"])

    def kernels(self, device: DeviceModel) -> tuple[KernelRun, ...]:
        runs = []
        append = runs.append
        for task, shape, start in zip(self.tasks, self.shapes, device.start):
            stream = self.streams[task.stream]
            name, op_type, end, dim, engine, kernel_type = shape.row
            append(_record(KernelRun, {
                "name": name, "op_type": op_type, "stream": stream, "start_us": start + 0.0, "end_us": start + end,
                "block_dim": dim, "engine": engine, "parent": None, "kernel_type": kernel_type,
            }))
            for kernel, (dim, _, engine, _), (offset, end) in zip(shape.subs, shape.facts, shape.offsets):
                append(_record(KernelRun, {
                    "name": kernel.name, "op_type": kernel.op_type, "stream": stream, "start_us": start + offset,
                    "end_us": start + end, "block_dim": dim, "engine": engine, "parent": name,
                    "kernel_type": kernel.info.kernel_type,
                }))
        return tuple(runs)

    def event_runs(self, device: DeviceModel, profile: HardwareProfile) -> tuple[EventRun, ...]:
        waiters = {number: task for task in self.tasks for number in task.waits}
        record_us, wait_us = profile.overhead_us["event_record"], profile.overhead_us["event_wait"]
        runs = []
        for number, event in enumerate(self.events):
            recorded, waited = device.recorded[number], device.waited[number]
            recorder = self.tasks[event.recorder]
            runs.append(
                EventRun(event.name, self.streams[recorder.stream], recorded - record_us, recorded,
                         self.streams[waiters[number].stream], waited, waited + wait_us)
            )
        return tuple(runs)


def _joined_end(build: _DeviceBuild, device: DeviceModel, profile: HardwareProfile) -> float:
    """When the run is over: the main stream's last task, or later, each side stream's last task plus
    the event that joins it back to the main stream before the outputs (TorchAir's closure in aclgraph;
    GE joins its streams the same way, an estimate). This join is why a second stream costs something
    even when nothing overlaps."""
    last_of: dict[int, float] = {}
    for task, end in zip(build.tasks, device.end):
        if end is not None:
            last_of[task.stream] = max(last_of.get(task.stream, 0.0), end)
    join = profile.overhead_us["event_record"] + profile.overhead_us["event_wait"]
    return max((end + (join if stream else 0.0) for stream, end in last_of.items()), default=0.0)


def simulate(
    program: Program,
    plan: Plan,
    profile: HardwareProfile,
    *,
    dynamic: bool = False,
    host: HostConfig = HostConfig(),
) -> RunReport:
    """Model one run of ``plan`` on ``profile``; ``dynamic`` selects host scheduling in max-autotune.

    A plan that cannot finish (compile abort, modeled hang or deadlock) takes forever and has no
    timeline. The cyclic garbage collector is paused meanwhile: a large program allocates a few objects
    per kernel, none of them cyclic, and repeated full collections would make the run superlinear.
    """
    if plan.failure is not None:
        return RunReport(
            plan.variant, profile.name, plan.mode, math.inf, math.inf, 0.0, "device", len(plan.tasks), (),
            failure=plan.failure,
        )
    paused = gc.isenabled()
    gc.disable()
    try:
        return _simulate(program, plan, profile, dynamic, host)
    finally:
        if paused:
            gc.enable()


def _simulate(program: Program, plan: Plan, profile: HardwareProfile, dynamic: bool, host: HostConfig) -> RunReport:
    execution = execution_of(plan.mode, dynamic)
    on_host = kept_on_host(program, plan, profile, execution, host)
    build = _DeviceBuild(program, plan, profile, on_host)
    device = build.model(profile)
    slices, host_us = schedule(program, plan, profile, execution, host, device, build.index)
    device.run()
    ends = [end for end in device.end if end is not None]
    last = _joined_end(build, device, profile)
    if execution in (HOST_SCHEDULED, EAGER):
        alone = build.model(profile)
        alone.release_all(0.0)
        alone.run()
        device_us = max((end for end in alone.end if end is not None), default=0.0)
    else:
        device_us = last - host_us if ends else 0.0
    return RunReport(
        variant=plan.variant,
        target=profile.name,
        mode=plan.mode,
        time_us=max(last, host_us),
        device_us=device_us,
        host_us=host_us,
        bound="host" if host_us > device_us else "device",
        tasks=len(plan.tasks),
        kernels=build.kernels(device),
        execution=execution,
        host_threads=1 if execution == EAGER else host.threads if execution == HOST_SCHEDULED else 1,
        host=slices,
        events=build.event_runs(device, profile),
        streams=build.streams,
    )
