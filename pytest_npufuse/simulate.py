"""Deterministic device model: when each task and kernel of a plan runs on one die.

One stream executes its tasks in order. Every task pays the device scheduler's dispatch cost for its
engine and one kernel head; a SuperKernel pays them once and then calls its sub-kernels back to back,
each call costing a little, with a barrier only before a sub-kernel that reads what an earlier one in
the same SuperKernel wrote. The host launches the whole graph once (graph sink or graph replay).
All arithmetic is plain float math in a fixed order, so every machine gives the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import cost
from .fusion import Plan, Task
from .hardware import HardwareProfile
from .program import Program


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

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class RunReport:
    """The modeled run of one variant."""

    variant: str
    target: str
    mode: str
    time_us: float
    device_us: float
    host_us: float
    bound: str
    tasks: int
    kernels: tuple[KernelRun, ...]
    failure: str | None = None


SUPERKERNEL_OP = "npufuse::superkernel"


def _depends_on_earlier(program: Program, kernel_name: str, earlier: list[str]) -> bool:
    """Whether a sub-kernel reads memory an earlier sub-kernel of the same SuperKernel wrote."""
    written = {program.storage(out) for name in earlier for out in program.kernel(name).outputs}
    return any(program.storage(buffer) in written for buffer in program.kernel(kernel_name).inputs)


def _run_superkernel(program: Program, task: Task, start: float, profile: HardwareProfile) -> list[KernelRun]:
    overhead = profile.overhead_us
    clock = start + overhead["kernel_head"]
    runs: list[KernelRun] = []
    for index, name in enumerate(task.kernels):
        kernel = program.kernel(name)
        clock += overhead["sk_subkernel_call"]
        if _depends_on_earlier(program, name, list(task.kernels[:index])):
            clock += overhead["sk_sync"]
        dim = min(cost.block_dim(kernel, profile), task.block_dim)
        if task.segment.feed_sync_all and kernel.info.sync_all and dim < task.block_dim:
            clock += overhead["sync_all"]
        end = clock + cost.body_us(kernel, dim, profile)
        runs.append(KernelRun(name, kernel.op_type, task.stream, clock, end, dim, kernel.info.engine, task.name))
        clock = end
    parent = KernelRun(task.name, SUPERKERNEL_OP, task.stream, start, clock, task.block_dim, task.engine)
    return [parent, *runs]


def _run_kernel(program: Program, task: Task, start: float, profile: HardwareProfile) -> list[KernelRun]:
    kernel = program.kernel(task.kernels[0])
    end = start + profile.overhead_us["kernel_head"] + cost.body_us(kernel, task.block_dim, profile)
    return [KernelRun(kernel.name, kernel.op_type, task.stream, start, end, task.block_dim, kernel.info.engine)]


def simulate(program: Program, plan: Plan, profile: HardwareProfile) -> RunReport:
    """Model one run of ``plan`` on ``profile``.

    ``time_us`` is the steady-state time of one step in a loop of launches: the larger of the host's
    launch work and the device's. A plan that cannot finish (compile abort, modeled hang) takes forever.
    """
    if plan.failure is not None:
        host_us = profile.overhead_us["model_launch"]
        return RunReport(plan.variant, profile.name, plan.mode, math.inf, math.inf, host_us, "device", len(plan.tasks), (), plan.failure)
    clock = 0.0
    kernels: list[KernelRun] = []
    for task in plan.tasks:
        start = clock + profile.dispatch_us(task.engine)
        runner = _run_superkernel if task.segment is not None else _run_kernel
        runs = runner(program, task, start, profile)
        kernels.extend(runs)
        clock = runs[0].end_us
    host_us = profile.overhead_us["model_launch"]
    return RunReport(
        variant=plan.variant,
        target=profile.name,
        mode=plan.mode,
        time_us=max(clock, host_us),
        device_us=clock,
        host_us=host_us,
        bound="host" if host_us > clock else "device",
        tasks=len(plan.tasks),
        kernels=tuple(kernels),
    )
