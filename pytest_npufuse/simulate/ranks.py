"""N ranks of an EP/TP/DP deployment from one capture: each rank's timeline, joined at its collectives.

Every rank runs the same program; what differs is the work routing gives each one (:mod:`.routing`: the
rows an MC2 dispatch delivers to it). Each rank is simulated as one die (:mod:`.timeline`'s device
model, tasks launched when the host launches them on rank 0), and the ranks are advanced together: a
task holding a collective (an MC2 dispatch or combine, an all-reduce, an all-gather...) is held on every
rank until every rank is ready for it, then starts on all of them at once and lasts as long as its
slowest rank's (a collective ends when the last rank's data has arrived). So a rank with more routed rows
makes every other rank wait at the next collective: the imbalance cost, reported against the same step
with every rank at the mean (uniform) routing.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..ir.program import Program
from ..plan.tasks import Plan
from ..target.profile import HardwareProfile
from ..errors import NotModeledError
from .device import DeviceModel
from .host import HostConfig, execution_of, kept_on_host, schedule
from .routing import Routing, is_dispatch, rank_rows, routed_program, world_of
from .timeline import _DeviceBuild, _joined_end

COLLECTIVE_COSTS = frozenset(
    {"all_reduce", "collective", "mc2_dispatch", "mc2_combine", "matmul_all_reduce", "matmul_reduce_scatter",
     "matmul_all_gather"}
)
"""Cost rules of kernels every rank of the group takes part in."""

Planner = Callable[[Program], Plan]


@dataclass(frozen=True)
class RankRun:
    """One rank's step: when it ends, how long it waited for slower ranks (before a collective, and inside
    it while the slowest rank's part runs on), and the rows its MC2 dispatches delivered (summed)."""

    rank: int
    time_us: float
    wait_us: float
    routed_rows: int


@dataclass(frozen=True)
class RanksReport:
    """The step of ``count`` ranks under ``routing``: each rank's run, the step (the slowest rank), the step
    with every rank at the uniform routing, and the difference, the imbalance cost."""

    count: int
    routing: str
    ranks: tuple[RankRun, ...]
    time_us: float
    balanced_us: float

    @property
    def imbalance_us(self) -> float:
        return self.time_us - self.balanced_us

    @property
    def slowest(self) -> RankRun:
        return max(self.ranks, key=lambda run: (run.routed_rows, -run.wait_us, -run.rank))

    def describe(self) -> str:
        return (
            f"{self.count} ranks ({self.routing}): step {self.time_us:.1f} us, balanced {self.balanced_us:.1f} us, "
            f"imbalance {self.imbalance_us:+.1f} us; most rows on rank {self.slowest.rank} ({self.slowest.routed_rows})"
        )

    def lines(self, limit: int = 8) -> list[str]:
        """The summary line and the ranks with the most routed rows (at most ``limit``)."""
        busiest = sorted(self.ranks, key=lambda run: (-run.routed_rows, run.rank))[:limit]
        return [self.describe(), *(
            f"  rank {run.rank}: {run.routed_rows} routed rows, waited {run.wait_us:.1f} us at collectives"
            for run in busiest
        )]

    def to_json(self) -> dict[str, object]:
        return {
            "count": self.count, "routing": self.routing, "time_us": round(self.time_us, 3),
            "balanced_us": round(self.balanced_us, 3), "imbalance_us": round(self.imbalance_us, 3),
            "ranks": [{"rank": r.rank, "time_us": round(r.time_us, 3), "wait_us": round(r.wait_us, 3),
                       "routed_rows": r.routed_rows} for r in self.ranks],
        }


def ep_world(program: Program) -> int:
    """The EP world size of the program's MC2 dispatches (1 without any)."""
    return max((world_of(kernel) for kernel in program.kernels if is_dispatch(kernel)), default=1)


def simulate_ranks(
    program: Program, count: int, routing: Routing, plan_of: Planner, profile: HardwareProfile,
    host: HostConfig | None = None, dynamic: bool = False,
) -> RanksReport:
    """The step of ``count`` ranks of ``program`` under ``routing``; ``plan_of`` plans a rank's program
    (the VARIANT plan of the check). Ranks beyond the program's EP world see its routing as rank
    ``rank % world``."""
    host = host or HostConfig()
    paused = gc.isenabled()
    gc.disable()
    try:
        world = ep_world(program)
        programs = {rank: routed_program(program, routing, rank % world) for rank in range(count)}
        rows = [sum(rank_rows(k, routing, rank % world) for k in program.kernels if is_dispatch(k)) for rank in range(count)]
        ends, waits = _lockstep([programs[rank] for rank in range(count)], plan_of, profile, host, dynamic)
        balanced_program = routed_program(program, Routing(), 0)
        balanced, _ = _lockstep([balanced_program], plan_of, profile, host, dynamic)
    finally:
        if paused:
            gc.enable()
    runs = tuple(RankRun(rank, ends[rank], waits[rank], rows[rank]) for rank in range(count))
    return RanksReport(count, routing.describe(), runs, max(ends), balanced[0])


class _HeldDevice(DeviceModel):
    """A rank's device model whose collective tasks wait to be let go (:meth:`let_go`) once every rank is
    ready for them."""

    def __init__(self, *args: object, held: frozenset[int], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.held = held
        self.waiting: dict[int, tuple[float, int, int]] = {}

    def _enqueue(self, ready: float, priority: int, stream: int, index: int) -> None:
        if index in self.held:
            self.waiting[index] = (ready, priority, stream)
        else:
            super()._enqueue(ready, priority, stream, index)

    def let_go(self, index: int, at: float) -> float:
        """Start collective ``index`` no earlier than ``at``; how long this rank waited for it."""
        ready, priority, stream = self.waiting.pop(index)
        super()._enqueue(max(ready, at), priority, stream, index)
        return max(0.0, at - ready)


def _lockstep(
    programs: Sequence[Program], plan_of: Planner, profile: HardwareProfile, host: HostConfig, dynamic: bool,
) -> tuple[list[float], list[float]]:
    """Each rank's end and total wait at collectives, the ranks advanced together collective by collective."""
    plans: dict[int, tuple[Plan, _DeviceBuild]] = {}
    builds = []
    for program in programs:
        key = id(program)
        if key not in plans:
            plan = plan_of(program)
            execution = execution_of(plan.mode, dynamic)
            plans[key] = (plan, _DeviceBuild(program, plan, profile, kept_on_host(program, plan, profile, execution, host)))
        builds.append((program, *plans[key]))
    first_program, first_plan, first = builds[0]
    names = [task.name for task in first.tasks]
    if any([task.name for task in build.tasks] != names for _, _, build in builds):
        raise NotModeledError(
            "the ranks' programs were planned into different tasks (their routed rows changed how SuperKernel "
            "scopes split), so their collectives cannot be matched rank to rank; model the ranks without the "
            "scopes (superkernel=False) or with a routing whose rows keep the same plan."
        )
    launches = _launch_times(first_program, first_plan, first, profile, host, dynamic)
    execution = execution_of(first_plan.mode, dynamic)
    held = _collectives(first_program, first_plan, first)
    tasks = [build.tasks for _, _, build in builds]
    slowest = {index: max(rank_tasks[index].duration_us for rank_tasks in tasks) for index in held}
    devices = []
    for (_, _, build), rank_tasks in zip(builds, tasks):
        joined = [task._replace(duration_us=slowest[i]) if i in slowest else task for i, task in enumerate(rank_tasks)]
        device = build.model(profile, joined, _HeldDevice, execution, held=frozenset(held))
        for index, at in enumerate(launches):
            if at is not None:
                device.release(index, at)
        devices.append(device)
    # A rank idles inside a collective for as long as the slowest rank's part of it outlasts its own.
    waits = [math.fsum(slowest[index] - rank_tasks[index].duration_us for index in held) for rank_tasks in tasks]
    for index in held:
        for device in devices:
            device.run(check=False)
        if any(index not in device.waiting for device in devices):
            break  # a rank cannot reach this collective: the final run names the deadlock
        at = max(device.waiting[index][0] for device in devices)
        for rank, device in enumerate(devices):
            waits[rank] += device.let_go(index, at)
    ends = []
    for device in devices:
        device.run()
        ends.append(_joined_end(device, profile))
    return ends, waits


def _collectives(program: Program, plan: Plan, build: _DeviceBuild) -> list[int]:
    """Device tasks (indices, in plan order) that hold a kernel every rank takes part in."""
    found = []
    for task in plan.tasks:
        index = build.index.get(task.name)
        if index is not None and any(program.kernel(name).info.cost in COLLECTIVE_COSTS for name in task.kernels):
            found.append(index)
    return found


def _launch_times(
    program: Program, plan: Plan, build: _DeviceBuild, profile: HardwareProfile, host: HostConfig, dynamic: bool,
) -> list[float | None]:
    """When the host launches each device task: rank 0's host schedule, which every rank runs alike."""
    execution = execution_of(plan.mode, dynamic)
    device = build.model(profile, execution=execution)
    schedule(program, plan, profile, execution, host, device, build.index)
    return [device.released_at(index) for index in range(len(build.tasks))]

