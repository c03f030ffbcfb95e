"""The host model: how the host CPU gets a plan's tasks onto the device in each execution mode.

GE has two schedules (docs/feature-docs.md#host-scheduling). In *graph sink* (max-autotune, static shapes) and in
captured *graph replay* (reduce-overhead) the host issues one call and the device runs the whole graph. In *host
scheduling* (dynamic shapes) every op passes through host kernels: InferShape, Tiling (skipped on a hit
in the op node's own tiling cache, keyed on that node's input shapes: docs/sources.md#ge-tiling-cache),
device memory allocation and Launch. With
``MAX_RUNTIME_CORE_NUMBER=3`` these are three pipelined threads (ordinary, memory, launch); with one
thread they run back to back. Small-shape ops whose inputs live on the host (Pack, Gather, Concat, ...)
are computed on the host instead of launched, and an op whose InferShape/Tiling reads input *values*
(value-dependent) makes the host wait for the device and copy the value back when that input was computed
on the device. The *eager* reference runs every op through torch_npu's single-op path on one thread.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

from .. import cost
from ..errors import ArgumentError, NpufuseError
from ..ir.program import Kernel, Program
from ..plan.tasks import Plan
from ..target.profile import HardwareProfile
from ..vocabulary import Engine, Mode
from .device import DeviceModel

GRAPH_SINK = "graph-sink"
GRAPH_REPLAY = "graph-replay"
HOST_SCHEDULED = "host-scheduled"
EAGER = Mode.EAGER
MODES = tuple(mode.value for mode in Mode)
_HOST_FED_DTYPES = frozenset({"int32", "int64"})


def execution_of(mode: str, dynamic: bool) -> str:
    """How a TorchAir mode runs: max-autotune sinks a static graph and host-schedules a dynamic one;
    reduce-overhead and npugraph_ex replay their captured graph (recaptured per shape); eager launches
    op by op."""
    if mode == EAGER:
        return EAGER
    if Mode(mode).aclgraph:
        return GRAPH_REPLAY
    return HOST_SCHEDULED if dynamic else GRAPH_SINK


THREADS_ENV = "MAX_RUNTIME_CORE_NUMBER"
MAX_THREADS = 2**63 - 1
# The pipeline stages an op's host work runs in (ordinary, memory, launch): threads past these idle.
STAGES = 3


def threads_from_environment() -> int:
    """GE's host thread count from ``MAX_RUNTIME_CORE_NUMBER`` (docs/feature-docs.md#host-scheduling: set it to 3), 1
    when unset."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if not value:
        return 1
    digits = value.isascii() and value.isdigit() and len(value) <= len(str(MAX_THREADS))
    if not digits or not 1 <= int(value) <= MAX_THREADS:
        raise NpufuseError(
            f"environment variable {THREADS_ENV}={value[:40]!r}{'...' if len(value) > 40 else ''} is not a positive "
            f"integer of at most {MAX_THREADS} (an int64); GE reads it as the number of "
            "host threads (CANN's dynamic-shape scheduling article "
            f"recommends 3). Set e.g. {THREADS_ENV}=3 or unset it.",
            argument=THREADS_ENV,
        )
    return int(value)


@dataclass(frozen=True)
class HostConfig:
    """Host-side settings of a run.

    ``threads`` is GE's ``MAX_RUNTIME_CORE_NUMBER``, read from the environment as GE does
    (docs/feature-docs.md#host-scheduling recommends 3); ``tiling_cache``, ``small_shape_on_host`` and ``ge_fusion`` are
    GE optimisations that are on by default and can be turned off to measure them.

    GE keeps one tiling cache per op node, keyed on that node's input shapes and the host values it tiles
    on (docs/sources.md#ge-tiling-cache), so a node hits only on sizes an earlier call of the same node
    had; identical layers share nothing. ``warm_tiling_cache`` models a steady iteration at sizes seen
    before: every node hits (False: the first call, every node tiles). ``new_sizes`` models a call whose
    symbolic sizes are new (a decode step, its KV cache one token longer): the nodes whose inputs carry a
    symbolic size (:attr:`~pytest_npufuse.ir.program.Kernel.symbolic_sizes`) tile again, the others hit.
    Eager runs on one thread without GE's optimisations whatever is set here.

    ``rebound_ops`` names op types whose captured tasks the host rebinds after every replay of an
    aclgraph (:func:`_rebind`): ops that take host lists (an attention's per-sequence KV lengths) are
    frozen at their capture values, so a serving loop updates each one with torch_npu's
    ``graph_task_update_begin``/``_end`` around a fresh call of the op and records an event the captured
    task waits on. Other executions ignore it (their ops pass the host anyway).
    """

    threads: int = field(default_factory=threads_from_environment)
    tiling_cache: bool = True
    small_shape_on_host: bool = True
    warm_tiling_cache: bool = True
    new_sizes: bool = False
    ge_fusion: bool = True
    rebound_ops: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 1 <= self.threads <= MAX_THREADS:
            raise ArgumentError(
                f"HostConfig(threads={self.threads!r}): threads is MAX_RUNTIME_CORE_NUMBER, an int from 1 to "
                f"{MAX_THREADS} "
                "(CANN's dynamic-shape scheduling article recommends 3).", op="HostConfig", argument="threads"
            )
        for name in ("tiling_cache", "small_shape_on_host", "warm_tiling_cache", "new_sizes", "ge_fusion"):
            if not isinstance(getattr(self, name), bool):
                raise ArgumentError(
                    f"HostConfig({name}={getattr(self, name)!r}): {name} is True or False.",
                    op="HostConfig",
                )
        ops = self.rebound_ops
        if not isinstance(ops, frozenset) or not all(isinstance(op, str) for op in ops):
            raise ArgumentError(
                f"HostConfig(rebound_ops={ops!r}): rebound_ops is a frozenset of op types whose captured tasks "
                "the host updates after each replay, e.g. frozenset({'npu::npu_fused_infer_attention_score'}).",
                op="HostConfig", argument="rebound_ops"
            )


def host_config(value: object) -> HostConfig:
    """The ``host=`` argument of a run: a :class:`HostConfig`, or None for the defaults."""
    if value is None:
        return HostConfig()
    if not isinstance(value, HostConfig):
        raise ArgumentError(
            f"host={value!r} must be a HostConfig, e.g. host=HostConfig(threads=3) "
            "(from pytest_npufuse.simulate.host import HostConfig), or None."
        )
    return value


class HostSlice(NamedTuple):
    """One host kernel on the modeled timeline (thread 0 is the ordinary thread); a named tuple, as
    :class:`~pytest_npufuse.simulate.timeline.KernelRun`, since host scheduling gives several per op."""

    name: str
    thread: int
    start_us: float
    end_us: float
    kernel: str


def _small(kernel: Kernel, program: Program, limit: int) -> bool:
    specs = [*kernel.output_specs, *(program.buffers[name].spec for name in kernel.inputs)]
    return all(math.prod(spec.shape) <= limit for spec in specs)


def kept_on_host(program: Program, plan: Plan, profile: HardwareProfile, execution: str, config: HostConfig) -> frozenset[str]:
    """Tasks that never reach the device: host-engine ops always, GE's size ops (``ge_shape``) outside
    host scheduling (a sunk or replayed graph knows its sizes), and in host scheduling the small
    ``host_small`` ops whose inputs are graph inputs or were themselves computed on the host."""
    on_host: set[str] = set()
    host_buffers = set(program.inputs)
    scheduled = execution == HOST_SCHEDULED
    small_ops = scheduled and config.small_shape_on_host
    for task in plan.tasks:
        if task.segment is not None:
            continue
        kernel = program.by_name[task.kernels[0]]
        if not (small_ops or task.engine == "host" or (kernel.info.ge_shape and not scheduled)):
            continue
        eligible = task.engine == "host" or (kernel.info.ge_shape and not scheduled) or (
            kernel.info.host_small
            and all(program.storage(name) in host_buffers for name in kernel.inputs)
            and _small(kernel, program, profile.small_shape_max_elements)
        )
        if eligible:
            on_host.add(task.name)
            host_buffers.update(kernel.outputs)
    return frozenset(on_host)


class _Threads:
    """Host threads as clocks; stage ``s`` of an op runs on thread ``min(s, threads - 1)``, so only the
    first :data:`STAGES` threads ever run (a huge ``MAX_RUNTIME_CORE_NUMBER`` allocates no more)."""

    def __init__(self, threads: int) -> None:
        self.clock = [0.0] * min(threads, STAGES)
        self.slices: list[HostSlice] = []

    def run(self, stage: int, after: float, steps: list[tuple[str, float]], kernel: str) -> float:
        thread = min(stage, len(self.clock) - 1)
        clock = max(self.clock[thread], after)
        for name, cost in steps:
            self.slices.append(HostSlice(name, thread, clock, clock + cost, kernel))
            clock += cost
        self.clock[thread] = clock
        return clock


# The host_us key of each tiling class (docs/feature-docs.md#host-scheduling: simple ops tile in a few us, complex ones
# in tens).
_TILING_COST = {"simple": "tiling", "complex": "tiling_complex"}


def _tiling_key(kernel: Kernel, program: Program) -> tuple:
    """What an eager op's tiling is reused on: op type and input/output shapes and dtypes (the aclnn cache
    is one per host thread for every op, docs/sources.md#ge-tiling-cache, so identical layers share entries)."""
    inputs = tuple((program.buffers[name].spec.shape, program.buffers[name].spec.dtype) for name in kernel.inputs)
    outputs = tuple((spec.shape, spec.dtype) for spec in kernel.output_specs)
    return (kernel.op_type, inputs, outputs)


def host_fed(program: Program) -> tuple[str, ...]:
    """The graph inputs a step copies from host memory: integer tensors (token ids, positions, shape and
    index tensors a serving loop feeds each step). Parameters and caches are float and stay on the device."""
    buffers = program.buffers
    return tuple(
        name for name in program.inputs
        if name in buffers and buffers[name].producer is None and buffers[name].spec.dtype in _HOST_FED_DTYPES
    )


def _h2d(nbytes: int, profile: HardwareProfile) -> float:
    """One host-to-device copy: a fixed call cost and the bytes over PCIe."""
    return profile.host_us["h2d_copy"] + nbytes / (profile.h2d_gbps * 1e3)


def _last_uses(program: Program, plan: Plan, on_device: Mapping[str, int]) -> dict[int, list[str]]:
    """Task position -> device-produced buffers whose last reader it is (freed once it is launched)."""
    last: dict[str, int] = {}
    task_of = {name: position for position, task in enumerate(plan.tasks) for name in task.kernels}
    for kernel in program.kernels:
        position = task_of.get(kernel.name)
        if position is None or plan.tasks[position].name not in on_device:
            continue
        for name in kernel.inputs:
            storage = program.storage(name)
            producer = program.buffers[storage].producer
            if producer is not None and producer in task_of and plan.tasks[task_of[producer]].name in on_device:
                last[storage] = position
    by_task: dict[int, list[str]] = {}
    for storage, position in sorted(last.items(), key=lambda item: item[1]):
        by_task.setdefault(position, []).append(storage)
    return by_task


def _fused_into_previous(kernel: Kernel, previous: Kernel | None, program: Program) -> bool:
    """GE's automatic fusion: a pointwise op that reads the previous pointwise op's output, with the same
    output shape, becomes part of the previous op, so it passes the host kernels only once
    (docs/feature-docs.md#host-scheduling, "other techniques": fusion reduces the host kernels to issue)."""
    if previous is None or not (cost.pointwise(kernel.info) and cost.pointwise(previous.info)):
        return False
    if kernel.output_specs[:1] != previous.output_specs[:1]:
        return False
    return any(program.storage(name) in previous.outputs for name in kernel.inputs)


def schedule(
    program: Program,
    plan: Plan,
    profile: HardwareProfile,
    execution: str,
    config: HostConfig,
    device: DeviceModel,
    device_index: Mapping[str, int],
) -> tuple[tuple[HostSlice, ...], float]:
    """Drive ``device`` as the host would and return the host's slices and when its last one ends: one
    launch call for a sunk or replayed graph, else every op through the host kernels.

    Host scheduling (docs/feature-docs.md#host-scheduling, section 4): the ordinary thread runs InferShape and Tiling,
    the memory thread allocates an op's output and frees the buffers whose last reader it launched, the launch thread
    copies host tensors the op reads to the device (graph inputs fed from the host, values a small-shape op
    computed on the host) and launches it. GE's fusion lets a pointwise op ride on its producer's host
    kernels. Eager runs every op on one thread through torch_npu's dispatch, without GE's optimisations."""
    task_of = {name: task.name for task in plan.tasks for name in task.kernels}
    if execution in (GRAPH_SINK, GRAPH_REPLAY):
        rebound = config.rebound_ops if execution == GRAPH_REPLAY else frozenset()
        return _launch_graph(program, plan, profile, execution, device, device_index, task_of, rebound)
    host = profile.host_us
    eager = execution == EAGER
    threads = _Threads(1 if eager else max(1, config.threads))
    tiled: set[tuple] = set()
    on_host = set(host_fed(program)) | {name for task in plan.tasks if task.name not in device_index
                                        for kernel_name in task.kernels for name in program.kernel(kernel_name).outputs}
    copied: set[str] = set()
    frees = _last_uses(program, plan, device_index)
    previous: Kernel | None = None
    launched, issued = 0.0, []
    for position, task in enumerate(plan.tasks):
        kernel = program.kernel(task.kernels[0])
        if eager and kernel.info.ge_shape:
            continue  # eager computes sizes in Python
        drained = issued if eager else None
        after = _value_sync(kernel, program, task_of, device, device_index, host["stream_sync"], threads, drained)
        fused = config.ge_fusion and not eager and _fused_into_previous(kernel, previous, program)
        if task.name in device_index and fused:
            device.release(device_index[task.name], launched)
            previous = kernel
            continue
        first = [("EagerDispatch", host["eager_dispatch"])] if eager else []
        if task.name not in device_index:
            # an eager host op (``.item()``) is torch_npu's own code: no GE InferShape, no kernel
            shape = [] if eager else [("InferShape", host["infer_shape"])]
            threads.run(0, after, [*first, *shape, ("HostCompute", host["host_op"])], task.name)
            previous = None
            continue
        first.append(("InferShape", host["infer_shape"]))
        first.append(_eager_tiling(kernel, program, config, host, tiled) if eager else _ge_tiling(kernel, config, host))
        ready = threads.run(0, after, first, task.name)
        ready = threads.run(1, ready, [("AllocMem", host["alloc"])], task.name)
        copies = [program.storage(name) for name in kernel.inputs if program.storage(name) in on_host - copied]
        copied.update(copies)
        steps = [("MemcpyH2D", _h2d(program.buffers[name].spec.nbytes, profile)) for name in dict.fromkeys(copies)]
        launched = threads.run(2, ready, [*steps, ("Launch", _launch_us(kernel, host))], task.name)
        device.release(device_index[task.name], launched)
        issued.append(device_index[task.name])
        if position in frees and not eager:
            threads.run(1, launched, [("FreeMem", host["free"])] * len(frees[position]), task.name)
        previous = kernel
    slices = tuple(threads.slices)
    return slices, max((s.end_us for s in slices), default=0.0)


def _ge_tiling(kernel: Kernel, config: HostConfig, host: Mapping[str, float]) -> tuple[str, float]:
    """An op's Tiling under GE host scheduling, through its node's own cache: a hit costs the key's hash and
    look-up; a miss pays them too, then tiles (GE's CacheableTiling, docs/sources.md#ge-tiling-cache)."""
    if not config.tiling_cache:
        return _tiling_step(kernel, host)
    if config.warm_tiling_cache and not (config.new_sizes and kernel.symbolic_sizes):
        return "TilingCacheHit", host["tiling_cache_hit"]
    name, cost = _tiling_step(kernel, host)
    return name, cost + host["tiling_cache_hit"]


def _eager_tiling(
    kernel: Kernel, program: Program, config: HostConfig, host: Mapping[str, float], tiled: set[tuple]
) -> tuple[str, float]:
    """An eager op's Tiling: reused from an earlier op of this call with the same arguments (the aclnn cache)."""
    key = _tiling_key(kernel, program)
    hit = config.tiling_cache and key in tiled
    tiled.add(key)
    return ("TilingCacheHit", host["tiling_cache_hit"]) if hit else _tiling_step(kernel, host)


def _tiling_step(kernel: Kernel, host: Mapping[str, float]) -> tuple[str, float]:
    """One op's Tiling on the host when nothing cached it: a simple op's few us, or a complex op's tens."""
    return "Tiling", host[_TILING_COST[cost.tiling_class(kernel.info)]]


def _launch_us(kernel: Kernel, host: Mapping[str, float]) -> float:
    """One op's launch call: a collective's costs more, since HCCL builds its tasks (the notifies and
    the transfers between the ranks) on the host before any of them is issued."""
    return host["launch_collective"] if kernel.info.engine == Engine.COMM else host["launch"]


def _launch_graph(
    program: Program,
    plan: Plan,
    profile: HardwareProfile,
    execution: str,
    device: DeviceModel,
    device_index: Mapping[str, int],
    task_of: Mapping[str, str],
    rebound: frozenset[str] = frozenset(),
) -> tuple[tuple[HostSlice, ...], float]:
    """A sunk or replayed graph: one launch call runs it all, unless a value-dependent op (``.item()``,
    ``torch.nonzero``) reads a value the device computed. Then, as docs/feature-docs.md#host-scheduling says, the host
    must wait: the graph runs up to that value, the host syncs the stream and copies it back, and launches the
    rest, so each such op costs a stream sync plus a launch, and the device idles meanwhile. After a
    replay's launch the host rebinds the tasks of the ``rebound`` op types (:func:`_rebind`); each may
    start only once its update is done."""
    key = "model_launch" if execution == GRAPH_SINK else "replay_launch"
    launch = profile.overhead_us[key]
    name = "ModelExecute" if execution == GRAPH_SINK else "GraphReplay"
    slices, clock = [], 0.0
    for fed in host_fed(program):
        copy = _h2d(program.buffers[fed].spec.nbytes, profile)
        slices.append(HostSlice("MemcpyH2D", 0, clock, clock + copy, fed))
        clock += copy
    slices.append(HostSlice(name, 0, clock, clock + launch, plan.variant))
    clock, released = clock + launch, 0
    updated, host_free = _rebind(program, plan, profile, rebound, device_index, clock, slices)

    def release(task_name: str, at: float) -> None:
        if task_name in device_index:
            device.release(device_index[task_name], max(at, updated.get(task_name, at)))

    for position, task in enumerate(plan.tasks):
        producers = _device_producers(program.kernel(task.kernels[0]), program, task_of, device_index)
        if not producers:
            continue
        for earlier in plan.tasks[released:position]:
            release(earlier.name, clock)
        released = position
        done = max(clock, host_free, _run_until(device, producers))
        sync_end = done + profile.host_us["stream_sync"]
        slices.append(HostSlice("StreamSync", 0, done, sync_end, task.name))
        slices.append(HostSlice(name, 0, sync_end, sync_end + launch, task.name))
        clock = sync_end + launch
    for task in plan.tasks[released:]:
        release(task.name, clock)
    return tuple(slices), max(clock, host_free)


def _rebind(
    program: Program,
    plan: Plan,
    profile: HardwareProfile,
    rebound: frozenset[str],
    device_index: Mapping[str, int],
    clock: float,
    slices: list[HostSlice],
) -> tuple[dict[str, float], float]:
    """The host's update of a replayed graph's rebound tasks, in plan order, after the launch: each is
    one eager call of its op (torch_npu's dispatch, InferShape, Tiling of the new arguments, the launch
    that rewrites the captured task) and an event record the task waits on. Returns when each task's
    update ends and when the host is done. vLLM-Ascend's FULL decode graphs rebind every layer's
    attention this way (``update_graph_params`` of its attention backends); issue #13058 of
    vllm-project/vllm-ascend measures 3.68 ms of it for 20 layers at batch 1 on a 910B3 host."""
    host, updated = profile.host_us, {}
    for task in plan.tasks:
        kernel = program.kernel(task.kernels[0])
        if kernel.op_type not in rebound or task.name not in device_index:
            continue
        steps = [
            ("EagerDispatch", host["eager_dispatch"]),
            ("InferShape", host["infer_shape"]),
            _tiling_step(kernel, host),
            ("TaskUpdate", _launch_us(kernel, host)),
            ("EventRecord", profile.overhead_us["event_record"]),
        ]
        for step, spent in steps:
            slices.append(HostSlice(step, 0, clock, clock + spent, task.name))
            clock += spent
        updated[task.name] = clock
    return updated, clock


def _device_producers(
    kernel: Kernel, program: Program, task_of: Mapping[str, str], device_index: Mapping[str, int]
) -> list[int]:
    """The device tasks whose outputs a value-dependent ``kernel`` reads on the host (none for an
    ordinary kernel, or when its inputs were computed on the host)."""
    if not kernel.info.value_dependent:
        return []
    return sorted({
        device_index[task_of[producer.name]]
        for name in kernel.inputs
        if (producer := program.producer(name)) is not None and task_of.get(producer.name) in device_index
    })


def _run_until(device: DeviceModel, producers: list[int]) -> float:
    """Run the device until every task in ``producers`` has ended; when the last one ends."""
    for index in producers:
        device.run(until=index)
    return max(device.end[index] for index in producers)


def _value_sync(
    kernel: Kernel,
    program: Program,
    task_of: Mapping[str, str],
    device: DeviceModel,
    device_index: Mapping[str, int],
    sync_us: float,
    threads: _Threads,
    drained: list[int] | None = None,
) -> float:
    """When a value-dependent op reads a tensor the device computed, the host waits for that task to
    end, then pays a stream sync and copy; returns the earliest time its InferShape may start.

    Eager passes ``drained``, every task launched so far: torch_npu's ``.item()`` synchronizes the
    stream before its copy (Ascend/pytorch torch_npu/csrc/aten/common/LocalScalarDenseNpu.cpp
    @873be6a4c043f824b6910c706f2d52a5e33869b4, ``AclrtSynchronizeStreamWithTimeout``), so a value read
    waits for all the work queued before it, wherever the value itself came from."""
    if drained is not None and kernel.info.value_dependent:
        producers = list(drained)
    else:
        producers = _device_producers(kernel, program, task_of, device_index)
    if not producers:
        return 0.0
    return threads.run(0, _run_until(device, producers), [("StreamSync", sync_us)], kernel.name)
