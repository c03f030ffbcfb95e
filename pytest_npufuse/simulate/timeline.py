"""Deterministic model of one run of a plan on one die: host and device, as a timeline.

Each task pays the device scheduler's dispatch cost for its engine (pipelined, see
:mod:`~pytest_npufuse.simulate.device`), a kernel head (scalar init, tiling-data load), a cold instruction cache
and the cache flush every task ends with. A SuperKernel is one task: it pays them once and then calls
its sub-kernels back to back, each call costing a little, with a barrier only before a sub-kernel that
reads what an earlier one in the same SuperKernel wrote. Its options change that: Early-Start
(``early-start``, off in a dual-stream SuperKernel) hides part of each barrier under the next
sub-kernel's scalar init; ``preload-code=none`` leaves every sub-kernel with a cold ICache; the dcci
options and ``debug-dcci-all`` add cache flushes. Every task also holds its share of HBM bandwidth.
When the task starts is decided by :mod:`~pytest_npufuse.simulate.device` (streams, events, shared cores) as the
host model (:mod:`~pytest_npufuse.simulate.host`) launches tasks. All arithmetic is plain float math in a fixed
order, so every machine gives the same numbers.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass
from itertools import count, repeat
from operator import attrgetter, itemgetter
from types import MappingProxyType
from typing import Any, Mapping, NamedTuple

from .. import cost
from ..errors import NpufuseError
from ..ir.events import Event
from ..ir.program import Kernel, Program
from ..plan.tasks import Plan, Segment, Task
from ..target.profile import HardwareProfile
from ..vocabulary import Vocabulary
from .l2 import effective_bytes
from .device import HBM_POOL, HBM_UNITS, DeviceModel, DeviceTask
from .host import (
    EAGER, GRAPH_REPLAY, GRAPH_SINK, HOST_SCHEDULED, HostConfig, HostSlice, execution_of, kept_on_host, schedule
)


class KernelRun(NamedTuple):
    """One executed kernel on the modeled timeline (a SuperKernel and its sub-kernels each get one).

    A named tuple rather than a dataclass: a report holds one per kernel, up to 100k of them, and a
    tuple is several times cheaper to build; it is just as immutable and reads the same by field name.
    """

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


class Bound(Vocabulary):
    """Which side limits a run: the host issuing work, or the device doing it."""

    HOST = "host"
    DEVICE = "device"


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
    bound: Bound
    tasks: int
    kernels: tuple[KernelRun, ...]
    execution: str = GRAPH_SINK
    host_threads: int = 1
    host: tuple[HostSlice, ...] = ()
    events: tuple[Event, ...] = ()
    streams: tuple[str, ...] = ("default",)
    failure: str | None = None


SUPERKERNEL_OP = "npufuse::superkernel"
_POOL_OF = {"cube": 0, "vector": 1, "aicpu": 2, "comm": 3, "dma": 4}
# AI Vector cores per AI Cube core of a SuperKernel's kernel type (docs/sources.md#torchair-2-4 ratio table).
_AIV_PER_AIC = {"MIX_AIC_1_2": 2}
# Engines whose kernels stream HBM through the AI Cores or the DMA engine (collectives and AI CPU move
# their bytes over other paths).
_HBM_ENGINES = frozenset({"cube", "vector", "dma"})
# Engines whose kernels start AI Cores and so pay a cold start on an idle stream.
_AI_CORE = frozenset({"cube", "vector"})
_new_tuple = tuple.__new__
_NAME_OF = attrgetter("name")
_STREAM_OF = attrgetter("stream")

# What a sub-kernel's place in its SuperKernel depends on: block dim, body time, engine, SyncAll, and
# the kernel type its row reports.
_SubKernel = tuple[int, float, str, bool, str]


class _Layout(NamedTuple):
    """A laid-out SuperKernel: its duration, the cores it holds, and a column per sub-kernel field
    (offsets from the SuperKernel's start, block dim, engine, kernel type), from which a run builds the
    sub-kernels' rows."""

    duration_us: float
    needs: tuple[tuple[int, int], ...]
    starts: tuple[float, ...]
    ends: tuple[float, ...]
    dims: tuple[int, ...]
    engines: tuple[str, ...]
    kernel_types: tuple[str, ...]


class _Shape(NamedTuple):
    """A task's kernels relative to its start. ``row`` is the task's own kernel (name, op type, end
    offset, block dim, engine, kernel type); a SuperKernel adds its sub-kernels and their layout."""

    duration_us: float
    needs: tuple[tuple[int, int], ...]
    row: tuple[str, str, float, int, str, str]
    subs: tuple[Kernel, ...] = ()
    layout: _Layout | None = None


class _Facts:
    """What one run needs to know about kernels, memoised by what it depends on: the layers of a model
    repeat the same kernels, and the same SuperKernels, many times over, so each is worked out once.

    A kernel's timing depends on its op's catalog entry, held by identity (the program keeps it alive
    through the run, and an equal entry held twice only costs a miss), the cores it runs on, and its
    flops, bytes and compute dtype: its key is ``(id(info), dim, flops, bytes, compute_dtype)``. The keys
    are built in plain loops: CPython specialises those, and they beat ``map`` chains of builtins.
    """

    def __init__(self, profile: HardwareProfile, effective: Mapping[str, int] = MappingProxyType({})) -> None:
        self.profile = profile
        self.effective = effective
        overhead = profile.overhead_us
        self.head_us = overhead["kernel_head"]
        self.icache_us = overhead["icache_miss"]
        self.flush_us = overhead["task_flush"]
        self.dcci_us = overhead["dcci_flush"]
        self.fetch_us = overhead["fetch_per_core"]
        self.call_us = overhead["sk_subkernel_call"]
        self.sk_sync_us = overhead["sk_sync"]
        self.early_us = overhead["early_start_overlap"]
        self.sync_all_us = overhead["sync_all"]
        self.cold_us = overhead["cold_start"]
        self.hbm_bytes_per_us = profile.hbm_gbps * 1e3
        self._bodies: dict[tuple, float] = {}
        self.timings: dict[tuple, tuple[float, tuple[tuple[int, int], ...]]] = {}
        self._layouts: dict[tuple, _Layout] = {}

    def priced(self, kernel: Kernel) -> Kernel:
        """The kernel with the HBM bytes it really pulls, once L2-resident inputs are taken out
        (:mod:`~pytest_npufuse.simulate.l2`)."""
        nbytes = self.effective.get(kernel.name)
        return kernel if nbytes is None else kernel.with_bytes(nbytes)

    def body_us(self, kernel: Kernel, dim: int) -> float:
        info = kernel.info
        key = (id(info), dim, kernel.flops, kernel.bytes, kernel.compute_dtype, kernel.output_specs, kernel.input_specs)
        body = self._bodies.get(key)
        if body is None:
            body = self._bodies[key] = cost.body_us(kernel, dim, self.profile)
        return body

    def timing(self, kernel: Kernel, dim: int, key: tuple) -> tuple[float, tuple[tuple[int, int], ...]]:
        """Duration (head, cold ICache, same-address instruction fetch of ``dim`` cores, body, closing cache
        flush) and resources held of an ordinary kernel task on ``dim`` cores, remembered under ``key``. Host and communication kernels run no AI Core
        code, so they pay only their body."""
        engine = kernel.info.engine
        body = self.body_us(kernel, dim)
        start_us = self.head_us + self.icache_us + self.fetch_us * dim + self.flush_us
        duration = start_us + body if engine in _HBM_ENGINES or engine == "aicpu" else body
        needs = ((_POOL_OF[engine], dim),) if engine != "host" else ()
        streamed = kernel.bytes if engine in _HBM_ENGINES and cost.reads_hbm(kernel.info) else 0
        timing = self.timings[key] = (duration, needs + self.hbm_share(streamed, duration))
        return timing

    def hbm_share(self, nbytes: float, duration: float) -> tuple[tuple[int, int], ...]:
        """The thousandths of peak HBM bandwidth a task streaming ``nbytes`` over ``duration`` holds: a
        memory-bound kernel at the profile's memory efficiency holds that share, leaving the rest to a
        compute-bound kernel on another stream."""
        if not nbytes or duration <= 0:
            return ()
        return ((HBM_POOL, min(HBM_UNITS, math.ceil(HBM_UNITS * nbytes / self.hbm_bytes_per_us / duration))),)

    def superkernel(self, kernels: tuple[Kernel, ...], keys: tuple[tuple, ...], segment: Segment, block_dim: int) -> _Layout:
        """The layout of a SuperKernel of ``kernels`` with these timing keys (see :meth:`_lay_out`)."""
        key = (keys, segment.reads, segment.lanes, segment.feed_sync_all, segment.early_start, segment.preload,
               segment.code_copies, segment.flush_before, segment.flush_after, block_dim)
        layout = self._layouts.get(key)
        if layout is None:
            kernels = tuple(map(self.priced, kernels)) if self.effective else kernels
            subs = tuple(
                (key[1], self.body_us(kernel, key[1]), kernel.info.engine, kernel.info.sync_all, kernel.info.kernel_type)
                for kernel, key in zip(kernels, keys)
            )
            layout = self._lay_out(subs, segment, block_dim)
            nbytes = sum(
                kernel.bytes for kernel in kernels if kernel.info.engine in _HBM_ENGINES and cost.reads_hbm(kernel.info)
            )
            layout = self._layouts[key] = layout._replace(needs=layout.needs + self.hbm_share(nbytes, layout.duration_us))
        return layout

    def _lay_out(self, subs: tuple[_SubKernel, ...], segment: Segment, block_dim: int) -> _Layout:
        """Sub-kernels back to back on their lane after one kernel head, each call costing a little (and a
        cold ICache with ``preload-code=none``), a barrier before one that reads what an earlier one
        wrote (``reads``, from the plan), shortened by Early-Start; on several lanes (``stream-fusion=1``,
        one per stream) a Cube and a Vector sub-kernel overlap but two of one engine take turns. With
        ``feed-sync-all=1`` a SyncAll sub-kernel on fewer cores than the SuperKernel pays the SyncAll
        inserted on the idle cores. Each call's instruction fetch queues less than a separate kernel's,
        since ``split-mode`` gives the cores that many code copies. dcci flushes come before or after the
        sub-kernels they name, and one cache flush ends the SuperKernel as it ends every task."""
        lanes = segment.lanes
        call_us = self.call_us + (0.0 if segment.preload else self.icache_us)
        barrier_us = max(0.0, self.sk_sync_us - (self.early_us if segment.early_start else 0.0))
        fetch_us = self.fetch_us / segment.code_copies
        before = segment.flush_before or repeat(False)
        after = segment.flush_after or repeat(False)
        lane_end: dict[str, float] = {}
        starts: list[float] = []
        ends: list[float] = []
        placed: list[tuple[float, float, str, str]] = []
        widest: dict[int, int] = {}
        for (dim, duration, engine, sync_all, _), writers, lane, flush_first, flush_last in zip(
            subs, segment.reads, lanes or repeat(""), before, after,
        ):
            start = lane_end.get(lane, self.head_us) + call_us + fetch_us * dim + (self.dcci_us if flush_first else 0.0)
            if writers:
                start = max(start, *[ends[position] for position in writers]) + barrier_us
            if segment.feed_sync_all and sync_all and dim < block_dim:
                start += self.sync_all_us
            if lanes:
                start = _after_same_engine(start, duration, engine, lane, placed)
                placed.append((start, start + duration, engine, lane))
            end = start + duration
            starts.append(start)
            ends.append(end)
            pool = _POOL_OF[engine]
            widest[pool] = max(widest.get(pool, 0), dim)
            lane_end[lane] = end + (self.dcci_us if flush_last else 0.0)
        dims, _, engines, _, kernel_types = zip(*subs)
        return _Layout(
            max(lane_end.values()) + self.flush_us, tuple(sorted(widest.items())), tuple(starts), tuple(ends), dims,
            engines, kernel_types,
        )


def _superkernel_shape(program: Program, task: Task, facts: _Facts) -> _Shape:
    """The SuperKernel as one task, laid out by :meth:`_Facts.superkernel`. Each sub-kernel runs on its own
    block dim, at most the SuperKernel's: its block dim counts AI Cube cores of a MIX_AIC kernel, and a
    Vector sub-kernel gets the AIV cores its ratio pairs with them, two per AIC at 1:2 but one at 1:1
    (a Vector sub-kernel tiled for 48 AIV runs on 24 in a 1:1 SuperKernel: the ratio-mismatch slowdown)."""
    names = task.kernels
    kernels = itemgetter(*names)(program.by_name) if len(names) > 1 else (program.by_name[names[0]],)
    cap = task.block_dim
    vector_cap = cap * _AIV_PER_AIC.get(task.segment.kernel_type, 1)
    effective = facts.effective
    keys = []
    for kernel, dim in zip(kernels, task.segment.kernel_dims):
        limit = vector_cap if kernel.info.engine == "vector" else cap
        nbytes = effective.get(kernel.name, kernel.bytes) if effective else kernel.bytes
        keys.append((id(kernel.info), dim if dim < limit else limit, kernel.flops, nbytes, kernel.compute_dtype))
    layout = facts.superkernel(kernels, tuple(keys), task.segment, cap)
    row = (task.name, SUPERKERNEL_OP, layout.duration_us, cap, task.engine, "SuperKernel")
    return _new_tuple(_Shape, (layout.duration_us, layout.needs, row, kernels, layout))


def _after_same_engine(start: float, duration: float, engine: str, lane: str, placed: list[tuple[float, float, str, str]]) -> float:
    """The first start at or after ``start`` where no sub-kernel of another lane uses the same engine."""
    moved = True
    while moved:
        moved = False
        for other_start, other_end, other_engine, other_lane in placed:
            if other_lane != lane and other_engine == engine and other_start < start + duration and start < other_end:
                start, moved = other_end, True
    return start


def _streams(plan: Plan) -> tuple[str, ...]:
    """Streams in a fixed order: the default stream first, then the others by first use."""
    return tuple({"default": None, **dict.fromkeys(map(_STREAM_OF, plan.tasks))})


class _DeviceBuild:
    """The scheduler's view of a plan: device tasks, events and each task's kernel layout."""

    def __init__(self, program: Program, plan: Plan, profile: HardwareProfile, on_host: frozenset[str]) -> None:
        self.streams = _streams(plan)
        stream_index = {name: i for i, name in enumerate(self.streams)}
        device_tasks = [task for task in plan.tasks if task.name not in on_host] if on_host else plan.tasks
        self.index = dict(zip(map(_NAME_OF, device_tasks), count()))
        self.events = plan.syncs
        waits: list[tuple[int, ...]] = [()] * len(device_tasks)
        records: list[tuple[int, ...]] = [()] * len(device_tasks)
        for number, event in enumerate(plan.syncs):
            waiter = self.index.get(event.wait_task)
            if waiter is None:
                raise NpufuseError(f"event '{event.event}' is waited on before '{event.wait_before}', which is not a device task of the plan.")
            waits[waiter] += (number,)
            recorder = self.index.get(event.record_task)
            if recorder is not None:
                records[recorder] += (number,)
        facts = _Facts(profile, effective_bytes(program, profile))
        dispatch_us = {engine: profile.dispatch_us(engine) for engine in _POOL_OF}
        self.shapes: list[_Shape] = []
        self.tasks: list[DeviceTask] = []
        by_name, timings, effective = program.by_name, facts.timings, facts.effective
        for task, task_waits, task_records in zip(device_tasks, waits, records):
            if task.segment is None:
                # An ordinary kernel, inline: most tasks are one, and a call per task shows in the run time.
                kernel = by_name[task.kernels[0]]
                info, dim = kernel.info, task.block_dim
                nbytes = effective.get(kernel.name, kernel.bytes) if effective else kernel.bytes
                key = (id(info), dim, kernel.flops, nbytes, kernel.compute_dtype, kernel.output_specs)
                end, needs = timings.get(key) or facts.timing(facts.priced(kernel), dim, key)
                row = (kernel.name, kernel.op_type, end, dim, info.engine, info.kernel_type)
                shape = _new_tuple(_Shape, (end, needs, row, (), None))
            else:
                shape = _superkernel_shape(program, task, facts)
            self.shapes.append(shape)
            self.tasks.append(_new_tuple(DeviceTask, (
                task.name, stream_index[task.stream], task.priority, shape.needs, dispatch_us[task.engine],
                shape.duration_us, task_waits, task_records, facts.cold_us if task.engine in _AI_CORE else 0.0,
            )))

    def model(self, profile: HardwareProfile, tasks: list[DeviceTask] | None = None,
              device: type[DeviceModel] = DeviceModel, execution: str = GRAPH_SINK, **extra: Any) -> DeviceModel:
        """The device model of these tasks (or of ``tasks``, the same ones with other durations). Only GE's
        sunk graph has its tasks preloaded on the device; every other execution submits them from the host
        (a replayed aclgraph, or ops launched one by one in eager and host scheduling), and such a task waits
        ``replay_task`` longer. So an eager run is never faster on the device than the replay of its graph."""
        capacity = (profile.aic, profile.aiv, profile.aicpu, 1, 1, HBM_UNITS)
        overhead = profile.overhead_us
        gap = overhead["task_gap"] + (overhead["replay_task"] if execution != GRAPH_SINK else 0.0)
        return device(
            self.tasks if tasks is None else tasks, self.streams, capacity, self.events, overhead["event_record"],
            overhead["event_wait"], gap, **extra,
        )

    def kernels(self, device: DeviceModel) -> tuple[KernelRun, ...]:
        runs = []
        append = runs.append
        for task, shape, start, cold in zip(self.tasks, self.shapes, device.start, device.cold):
            stream = self.streams[task.stream]
            name, op_type, end, dim, engine, kernel_type = shape.row
            row = (name, op_type, stream, start + 0.0, start + cold + end, dim, engine, None, kernel_type)
            append(_new_tuple(KernelRun, row))
            start += cold
            layout = shape.layout
            if layout is not None:
                runs += [
                    _new_tuple(KernelRun, (kernel.name, kernel.op_type, stream, start + offset, start + end, dim, engine, name, kernel_type))
                    for kernel, offset, end, dim, engine, kernel_type in zip(
                        shape.subs, layout.starts, layout.ends, layout.dims, layout.engines, layout.kernel_types,
                    )
                ]
        return tuple(runs)

def _joined_end(device: DeviceModel, profile: HardwareProfile) -> float:
    """When the run is over: the main stream's last task, or later, each side stream's last task plus
    the event that joins it back to the main stream before the outputs (TorchAir's closure in aclgraph;
    GE joins its streams the same way, an estimate). This join is why a second stream costs something
    even when nothing overlaps."""
    join = profile.overhead_us["event_record"] + profile.overhead_us["event_wait"]
    ends = [(stream, end) for stream in range(len(device.streams)) if (end := device.last_end(stream)) is not None]
    return max((end + (join if stream else 0.0) for stream, end in ends), default=0.0)


def simulate(
    program: Program,
    plan: Plan,
    profile: HardwareProfile,
    *,
    dynamic: bool = False,
    host: HostConfig | None = None,
    deadlock: str | None = None,
) -> RunReport:
    """Model one run of ``plan`` on ``profile``; ``dynamic`` selects host scheduling in max-autotune,
    ``host`` its settings (default: :class:`HostConfig` from the environment).

    A plan that cannot finish (compile abort, modeled hang, or the sanitizer's ``deadlock``) takes
    forever and has no timeline. The cyclic garbage collector is paused meanwhile: a large program allocates a few objects
    per kernel, none of them cyclic, and repeated full collections would make the run superlinear.
    """
    failure = plan.failure or deadlock
    if failure is not None:
        return RunReport(
            plan.variant, profile.name, plan.mode, math.inf, math.inf, 0.0, Bound.DEVICE, len(plan.tasks), (),
            failure=failure,
        )
    host = host or HostConfig()
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
    device = build.model(profile, execution=execution)
    slices, host_us = schedule(program, plan, profile, execution, host, device, build.index)
    device.run()
    last = _joined_end(device, profile)
    # the host releases tasks one by one (op by op, or a replay's rebound tasks as it updates them): the
    # device alone is the same tasks all released at once
    if execution in (HOST_SCHEDULED, EAGER) or (execution == GRAPH_REPLAY and host.rebound_ops):
        alone = build.model(profile, execution=execution)
        alone.release_all(0.0)
        alone.run()
        device_us = max((end for end in alone.end if end is not None), default=0.0)
    else:
        device_us = last - host_us if build.tasks else 0.0
    return RunReport(
        variant=plan.variant,
        target=profile.name,
        mode=plan.mode,
        time_us=max(last, host_us),
        device_us=device_us,
        host_us=host_us,
        bound=Bound.HOST if host_us > device_us else Bound.DEVICE,
        tasks=len(plan.tasks),
        kernels=build.kernels(device),
        execution=execution,
        host_threads=host.threads if execution == HOST_SCHEDULED else 1,
        host=slices,
        events=device.timed_events(),
        streams=build.streams,
    )
