"""The stream sanitizer: happens-before between streams, in the spirit of PyTorch's CUDA sanitizer.

Every stream carries a vector clock (the latest kernel of each stream it is known to follow). Kernels
run in a legal order of the stream plan: in order on their stream, and after the events they wait for.
A record snapshots its stream's clock; a wait merges the snapshot in. For every block of memory we keep
the last write and the reads since; an access from another stream that the clock does not cover is a
race, reported with both kernels, their streams, the tensor and the sync that would order them.

Lifetime hazards come from memory reuse, so the caching allocator is modeled (reduce-overhead and eager,
where PyTorch's allocator serves the graph; GE plans graph memory itself in max-autotune): a buffer is
freed when the host has issued its last use, and a later allocation on the same stream may take its
block; a reader on another stream that is not ordered before the new writer may then see foreign data.
``npu_record_tagged_stream`` keeps the block out of reuse, as ``Tensor.record_stream`` does.

A wait that can never be satisfied, or a cycle of waits, is a modeled deadlock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..ir.events import Event, EventKind
from ..ir.program import Kernel, Program, TensorSpec
from ..plan.streams import MAX_AUTOTUNE, StreamPlan
from ..vocabulary import Vocabulary


@dataclass(frozen=True)
class Access:
    """One kernel's access to a tensor."""

    kernel: str
    op_type: str
    stream: str
    action: str
    source: str

    def describe(self) -> str:
        where = f" at {self.source}" if self.source else ""
        return f"{self.kernel} ({self.op_type}{where}) on stream '{self.stream}' {self.action}"


class RaceKind(Vocabulary):
    """What two unordered accesses do to one piece of memory."""

    READ_AFTER_WRITE = "read-after-write race"
    WRITE_AFTER_READ = "write-after-read race"
    WRITE_AFTER_WRITE = "write-after-write race"
    LIFETIME = "lifetime hazard"


@dataclass(frozen=True)
class Race:
    """Two unordered accesses to the same memory from different streams (or a lifetime hazard)."""

    kind: RaceKind
    tensor: str
    spec: TensorSpec | None
    first: Access
    second: Access
    fix: str

    def describe(self) -> str:
        shape = f" ({self.spec.dtype} {list(self.spec.shape)})" if self.spec else ""
        return (
            f"{self.kind} on tensor {self.tensor}{shape}: {self.first.describe()}, and {self.second.describe()} "
            f"with no event between them. Fix: {self.fix}"
        )


@dataclass(frozen=True)
class Deadlock:
    """Streams blocked forever on events."""

    blocked: tuple[str, ...]

    def describe(self) -> str:
        return "modeled deadlock: " + "; ".join(self.blocked)


@dataclass(frozen=True)
class SanitizerReport:
    races: tuple[Race, ...]
    deadlock: Deadlock | None
    order: tuple[str, ...]

    def poisoned_reads(self) -> Mapping[str, frozenset[str]]:
        """Per kernel, the input tensors a device could read before their data is ready (or after their
        memory was reused): those reads see poisoned memory in the numerics run."""
        reads: dict[str, set[str]] = {}
        for race in self.races:
            reader = race.second if race.second.action.startswith("reads") else race.first
            if reader.action.startswith("reads"):
                reads.setdefault(reader.kernel, set()).add(race.tensor)
        return {kernel: frozenset(tensors) for kernel, tensors in reads.items()}


@dataclass
class _Mem:
    last_write: tuple[Kernel, int] | None = None
    reads: list[tuple[Kernel, int, str]] = field(default_factory=list)


def _fix(first: Kernel, second: Kernel, mode: str) -> str:
    if mode == MAX_AUTOTUNE:
        return (
            f"order {second.name} after {first.name}: on stream '{second.stream}' call "
            f"npu_wait_tensor(<an input of {second.name}>, <the output of {first.name}>) or wait([...]) before it."
        )
    return (
        f"record a tagged event on stream '{first.stream}' after {first.name} (npu_tagged_event_record) and wait "
        f"for it on stream '{second.stream}' before {second.name} (npu_tagged_event_wait)."
    )


class _Sanitizer:
    def __init__(self, program: Program, plan: StreamPlan) -> None:
        self.program = program
        self.plan = plan
        self.streams = list(plan.streams)
        self.queues = {s: [k for k in program.kernels if plan.kernel_stream[k.name] == s] for s in self.streams}
        self.waits: dict[str | None, list[Event]] = {}
        self.end_waits: dict[str, list[Event]] = {s: [] for s in self.streams}
        self.records: dict[str, list[Event]] = {}
        for edge in plan.edges:
            if edge.wait_before is None:
                self.end_waits.setdefault(edge.stream, []).append(edge)
            else:
                self.waits.setdefault(edge.wait_before, []).append(edge)
            if edge.record_after is not None:
                self.records.setdefault(edge.record_after, []).append(edge)
        self.clock = {s: {t: 0 for t in self.streams} for s in self.streams}
        self.seq: dict[str, int] = {}
        self.kernel_clock: dict[str, dict[str, int]] = {}
        self.snapshots: dict[int, dict[str, int]] = {}
        self.memory: dict[str, _Mem] = {}
        self.block_of = _allocate(program, plan) if plan.mode != MAX_AUTOTUNE else {}
        self.races: list[Race] = []
        self.order: list[str] = []

    def _ready(self, edges: Sequence[Event]) -> bool:
        return all(not e.never_recorded and id(e) in self.snapshots for e in edges)

    def run(self) -> SanitizerReport:
        """Two passes: vector clocks from a legal execution (they do not depend on which one), then the
        memory accesses in host issue order, as the device receives them."""
        heads = {s: 0 for s in self.streams}
        progress = True
        while progress:
            progress = False
            for stream in self.streams:
                queue = self.queues[stream]
                while heads[stream] < len(queue) and self._ready(self.waits.get(queue[heads[stream]].name, [])):
                    self._execute(queue[heads[stream]], stream)
                    heads[stream] += 1
                    progress = True
        for kernel in self.program.kernels:
            if kernel.name in self.kernel_clock:
                self._accesses(kernel)
        return SanitizerReport(tuple(self.races), self._deadlock(heads), tuple(self.order))

    def _execute(self, kernel: Kernel, stream: str) -> None:
        clock = self.clock[stream]
        for edge in self.waits.get(kernel.name, []):
            for other, value in self.snapshots[id(edge)].items():
                clock[other] = max(clock[other], value)
        clock[stream] += 1
        self.seq[kernel.name] = clock[stream]
        self.kernel_clock[kernel.name] = dict(clock)
        self.order.append(kernel.name)
        for edge in self.records.get(kernel.name, []):
            self.snapshots[id(edge)] = dict(clock)

    def _accesses(self, kernel: Kernel) -> None:
        for buffer in kernel.inputs:
            self._read(kernel, buffer)
        for buffer in kernel.outputs:
            self._write(kernel, buffer)

    def _block(self, buffer: str) -> str:
        storage = self.program.storage(buffer)
        return self.block_of.get(storage, storage)

    def _covered(self, kernel: Kernel, other: Kernel, seq: int) -> bool:
        """Whether ``other`` (its ``seq``-th kernel on its stream) happens before ``kernel``."""
        other_stream = self.plan.kernel_stream[other.name]
        return other_stream == self.plan.kernel_stream[kernel.name] or seq <= self.kernel_clock[kernel.name][other_stream]

    def _read(self, kernel: Kernel, buffer: str) -> None:
        mem = self.memory.setdefault(self._block(buffer), _Mem())
        if mem.last_write is not None:
            writer, seq = mem.last_write
            if not self._covered(kernel, writer, seq):
                self._report(RaceKind.READ_AFTER_WRITE, buffer, writer, "writes it", kernel, "reads it")
        mem.reads.append((kernel, self.seq[kernel.name], buffer))

    def _write(self, kernel: Kernel, buffer: str) -> None:
        block = self._block(buffer)
        mem = self.memory.setdefault(block, _Mem())
        reused = block != self.program.storage(buffer)
        for reader, seq, read_buffer in mem.reads:
            if not self._covered(kernel, reader, seq):
                if reused:
                    self._lifetime(read_buffer, reader, kernel, buffer)
                else:
                    self._report(RaceKind.WRITE_AFTER_READ, read_buffer, reader, "reads it", kernel, "writes it")
        if not mem.reads and mem.last_write is not None and not reused:
            writer, seq = mem.last_write
            if not self._covered(kernel, writer, seq):
                self._report(RaceKind.WRITE_AFTER_WRITE, buffer, writer, "writes it", kernel, "writes it")
        mem.last_write, mem.reads = (kernel, self.seq[kernel.name]), []

    def _access(self, kernel: Kernel, action: str) -> Access:
        return Access(kernel.name, kernel.op_type, self.plan.kernel_stream[kernel.name], action, kernel.source)

    def _report(self, kind: RaceKind, buffer: str, first: Kernel, first_action: str, second: Kernel, second_action: str) -> None:
        spec = self.program.buffers[buffer].spec if buffer in self.program.buffers else None
        race = Race(kind, buffer, spec, self._access(first, first_action), self._access(second, second_action), _fix(first, second, self.plan.mode))
        self.races.append(race)

    def _lifetime(self, read_buffer: str, reader: Kernel, writer: Kernel, new_buffer: str) -> None:
        spec = self.program.buffers[read_buffer].spec if read_buffer in self.program.buffers else None
        fix = (
            f"call npu_record_tagged_stream({read_buffer}, '{self.plan.kernel_stream[reader.name]}') after its use on "
            f"stream '{self.plan.kernel_stream[reader.name]}', so its memory is not reused before that stream is done."
        )
        self.races.append(
            Race(
                RaceKind.LIFETIME,
                read_buffer,
                spec,
                self._access(reader, "reads it"),
                self._access(writer, f"writes {new_buffer} into its reused memory"),
                fix,
            )
        )

    def _deadlock(self, heads: Mapping[str, int]) -> Deadlock | None:
        """Blocked streams, those waiting for an event nothing records (the cause) before those waiting
        for a stream that is itself blocked (the consequence)."""
        blocked: list[tuple[bool, str]] = []
        for stream in self.streams:
            queue = self.queues[stream]
            if heads[stream] < len(queue):
                kernel = queue[heads[stream]]
                pending = [e for e in self.waits.get(kernel.name, []) if e.never_recorded or id(e) not in self.snapshots]
                where = f"waits before {kernel.name}"
            elif not self._ready(self.end_waits.get(stream, [])):
                pending = [e for e in self.end_waits[stream] if e.never_recorded or id(e) not in self.snapshots]
                where = "waits at its end"
            else:
                continue
            blocked.append((not any(e.never_recorded for e in pending), f"stream '{stream}' {where} for {_why(pending)}"))
        return Deadlock(tuple(text for _, text in sorted(blocked, key=lambda item: item[0]))) if blocked else None


def _why(edges: Sequence[Event]) -> str:
    parts = []
    for edge in edges:
        event = edge.event.split(":", 1)[-1] if edge.event.startswith("tag:") else edge.event
        where = f" ({edge.api} at {edge.source})" if edge.source else f" ({edge.api})"
        if edge.never_recorded:
            parts.append(f"event '{event}'{where}, which is never recorded")
        else:
            parts.append(f"event '{event}'{where}, recorded after {edge.record_after}, which never runs")
    return ", ".join(parts)


def _allocate(program: Program, plan: StreamPlan) -> dict[str, str]:
    """Model the caching allocator: which earlier block each new buffer reuses (buffer -> block)."""
    last_use: dict[str, int] = {}
    for kernel in program.kernels:
        for buffer in kernel.inputs:
            last_use[program.storage(buffer)] = kernel.index
    pinned = {program.storage(p.buffer) for p in program.syncs if p.kind == EventKind.KEEP_ALIVE and p.buffer is not None}
    outputs = {program.storage(name) for name in program.outputs if name is not None}
    freed_after: dict[int, list[str]] = {}
    for storage, last in last_use.items():
        if storage not in outputs and storage not in pinned and program.buffers[storage].producer is not None:
            freed_after.setdefault(last, []).append(storage)
    free: dict[str, list[tuple[int, str]]] = {}
    block_of: dict[str, str] = {}
    for kernel in program.kernels:
        pool = free.setdefault(plan.kernel_stream[kernel.name], [])
        for buffer in kernel.outputs:
            if program.buffers[buffer].alias_of is not None:
                continue
            size = program.buffers[buffer].spec.nbytes
            fits = [block for block in pool if block[0] >= size]
            if fits:
                chosen = min(fits, key=lambda block: block[0])
                pool.remove(chosen)
                block_of[buffer] = block_of.get(chosen[1], chosen[1])
        for storage in freed_after.get(kernel.index, ()):
            alloc_stream = plan.kernel_stream[program.buffers[storage].producer]
            free.setdefault(alloc_stream, []).append((program.buffers[storage].spec.nbytes, storage))
    return block_of


def sanitize(program: Program, plan: StreamPlan) -> SanitizerReport:
    """Races, lifetime hazards and deadlocks of the VARIANT's stream plan."""
    return _Sanitizer(program, plan).run()
