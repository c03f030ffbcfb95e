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

from . import cost
from .device import DeviceEvent, DeviceModel, DeviceTask
from .errors import NpufuseError
from .fusion import Plan, Task
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


@dataclass(frozen=True)
class _Shape:
    """A task's kernels relative to its start: (name, op_type, offset, end offset, block dim, engine,
    parent, kernel type)."""

    duration_us: float
    kernels: tuple[tuple[str, str, float, float, int, str, str | None, str], ...]
    needs: tuple[tuple[int, int], ...]


class _Bodies:
    """Kernel body times, memoised: the layers of a model repeat the same kernels many times over."""

    def __init__(self, profile: HardwareProfile) -> None:
        self.profile = profile
        self._known: dict[tuple, float] = {}

    def __call__(self, kernel: Kernel, dim: int) -> float:
        info = kernel.info
        key = (info.engine, info.sync_all, dim, kernel.flops, kernel.bytes, kernel.compute_dtype)
        body = self._known.get(key)
        if body is None:
            body = self._known[key] = cost.body_us(kernel, dim, self.profile)
        return body


def _superkernel_shape(program: Program, task: Task, profile: HardwareProfile, body_us: _Bodies) -> _Shape:
    """Lay the sub-kernels out inside the SuperKernel: back to back, a barrier before one that reads what
    an earlier one wrote, and with ``stream-fusion=1`` on one lane per stream, where a Cube and a Vector
    sub-kernel overlap but two of the same engine still take turns."""
    overhead = profile.overhead_us
    lanes = task.segment.lanes or ("",) * len(task.kernels)
    lane_end: dict[str, float] = {}
    written: dict[str, float] = {}
    placed: list[tuple[float, float, str, str]] = []
    children = []
    widest: dict[int, int] = {}
    for name, lane in zip(task.kernels, lanes):
        kernel = program.kernel(name)
        start = lane_end.get(lane, overhead["kernel_head"]) + overhead["sk_subkernel_call"]
        ready = [written[storage] for storage in map(program.storage, kernel.inputs) if storage in written]
        if ready:
            start = max(start, *ready) + overhead["sk_sync"]
        dim = min(cost.block_dim(kernel, profile), task.block_dim)
        if task.segment.feed_sync_all and kernel.info.sync_all and dim < task.block_dim:
            start += overhead["sync_all"]
        duration = body_us(kernel, dim)
        start = _after_same_engine(start, duration, kernel.info.engine, lane, placed)
        end = start + duration
        placed.append((start, end, kernel.info.engine, lane))
        children.append((name, kernel.op_type, start, end, dim, kernel.info.engine, task.name, kernel.info.kernel_type))
        written.update((program.storage(out), end) for out in kernel.outputs)
        pool = _POOL_OF[kernel.info.engine]
        widest[pool] = max(widest.get(pool, 0), dim)
        lane_end[lane] = end
    total = max(lane_end.values())
    parent = (task.name, SUPERKERNEL_OP, 0.0, total, task.block_dim, task.engine, None, "SuperKernel")
    return _Shape(total, (parent, *children), tuple(sorted(widest.items())))


def _after_same_engine(start: float, duration: float, engine: str, lane: str, placed: list[tuple[float, float, str, str]]) -> float:
    """The first start at or after ``start`` where no sub-kernel of another lane uses the same engine."""
    moved = True
    while moved:
        moved = False
        for other_start, other_end, other_engine, other_lane in placed:
            if other_lane != lane and other_engine == engine and other_start < start + duration and start < other_end:
                start, moved = other_end, True
    return start


def _kernel_shape(program: Program, task: Task, profile: HardwareProfile, body_us: _Bodies) -> _Shape:
    kernel = program.kernel(task.kernels[0])
    end = profile.overhead_us["kernel_head"] + body_us(kernel, task.block_dim)
    engine = kernel.info.engine
    row = (kernel.name, kernel.op_type, 0.0, end, task.block_dim, engine, None, kernel.info.kernel_type)
    return _Shape(end, (row,), ((_POOL_OF[engine], task.block_dim),))


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
        self.shapes: list[_Shape] = []
        self.tasks: list[DeviceTask] = []
        body_us = _Bodies(profile)
        for i, task in enumerate(device_tasks):
            shape = (_superkernel_shape if task.segment is not None else _kernel_shape)(program, task, profile, body_us)
            self.shapes.append(shape)
            self.tasks.append(
                DeviceTask(
                    task.name, stream_index[task.stream], task.priority, shape.needs, profile.dispatch_us(task.engine),
                    shape.duration_us, tuple(waits.get(i, ())), tuple(records.get(i, ())),
                )
            )

    def model(self, profile: HardwareProfile) -> DeviceModel:
        capacity = (profile.aic, profile.aiv, profile.aicpu, 1)
        overhead = profile.overhead_us
        return DeviceModel(self.tasks, self.streams, capacity, self.events, overhead["event_record"], overhead["event_wait"])

    def kernels(self, device: DeviceModel) -> tuple[KernelRun, ...]:
        runs = []
        for task, shape, start in zip(self.tasks, self.shapes, device.start):
            stream = self.streams[task.stream]
            for name, op_type, offset, end, dim, engine, parent, kernel_type in shape.kernels:
                runs.append(KernelRun(name, op_type, stream, start + offset, start + end, dim, engine, parent, kernel_type))
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
