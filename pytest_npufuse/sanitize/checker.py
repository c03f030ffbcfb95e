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

import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..ir.events import Event, EventKind
from ..ir.lines import code_at
from ..ir.program import Kernel, Program, TensorSpec
from ..plan.streams import MAX_AUTOTUNE, StreamPlan
from ..vocabulary import Mode, Vocabulary


@dataclass(frozen=True)
class Access:
    """One kernel's access to a tensor, with the user's line (``source``) and its code."""

    kernel: str
    op_type: str
    stream: str
    action: str
    source: str
    code: str = ""

    def describe(self) -> str:
        where = f" at {self.source}" if self.source else ""
        return f"{self.kernel} ({self.op_type}{where}) on stream '{self.stream}' {self.action}"

    def line(self, role: str) -> str:
        """The access as one line of a failure: what it does, where, and the code of its line."""
        where = self.source or "(no source line)"
        code = f": {self.code}" if self.code else ""
        return f"{role} on stream '{self.stream}' by {self.kernel} ({self.op_type}) at {where}{code}"


class RaceKind(Vocabulary):
    """What two unordered accesses do to one piece of memory."""

    READ_AFTER_WRITE = "read-after-write race"
    WRITE_AFTER_READ = "write-after-read race"
    WRITE_AFTER_WRITE = "write-after-write race"
    LIFETIME = "lifetime hazard"


# What each kind means for the tensor, between the two streams.
_MEANING = {
    RaceKind.READ_AFTER_WRITE: "read on stream '{second}' while stream '{first}' may still be writing it",
    RaceKind.WRITE_AFTER_READ: "overwritten on stream '{second}' while stream '{first}' may still be reading it",
    RaceKind.WRITE_AFTER_WRITE: "written on streams '{first}' and '{second}' in no fixed order",
    RaceKind.LIFETIME: "its memory can be reused on stream '{second}' while stream '{first}' still reads it",
}
# The roles of the two accesses, by kind.
_ROLES = {
    RaceKind.READ_AFTER_WRITE: ("written", "read"),
    RaceKind.WRITE_AFTER_READ: ("read", "overwritten"),
    RaceKind.WRITE_AFTER_WRITE: ("written", "written again"),
    RaceKind.LIFETIME: ("read", "reused"),
}


@dataclass(frozen=True)
class Race:
    """Two unordered accesses to the same memory from different streams (or a lifetime hazard).
    ``tensor`` is the graph's buffer, ``label`` what the user's code calls it; ``fix`` is in the API
    of the mode the test compiled in."""

    kind: RaceKind
    tensor: str
    spec: TensorSpec | None
    first: Access
    second: Access
    fix: str
    label: str = ""

    @property
    def name(self) -> str:
        """The tensor as the user's code names it (its variable or expression), else the graph's name."""
        return self.label or self.tensor

    def headline(self) -> str:
        """One sentence: the kind, the user's tensor and the two streams."""
        shape = f" ({self.spec.dtype} {list(self.spec.shape)})" if self.spec else ""
        meaning = _MEANING[self.kind].format(first=self.first.stream, second=self.second.stream)
        return f"{self.kind} on `{self.name}`{shape}: {meaning}"

    def describe(self) -> str:
        """The headline, both accesses with their code, and the fix, one per line."""
        first_role, second_role = _ROLES[self.kind]
        return "\n".join(
            (self.headline(), f"  {self.first.line(first_role)}", f"  {self.second.line(second_role)}", f"  fix: {self.fix}")
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


# A name the user's code can pass on: a variable, an attribute path or one subscript of it.
_VARIABLE = re.compile(r"[A-Za-z_][\w.]*(?:\[\d+\])?")


def _order_fix(mode: str, first: Access, second: Access, produced: str, consumed: str) -> str:
    """How to order ``second`` after ``first``, in the API of ``mode`` (``produced`` names an output of
    the first access's kernel, ``consumed`` an input of the second's).

    - max-autotune (GE): ``npu_wait_tensor(self, dependency)``, self an input of the later op and
      dependency an output of the earlier one (TorchAir docs/zh/ascend_ir/api/scope/npu_wait_tensor.md
      @ fced8842).
    - reduce-overhead: a tagged event made once, recorded and waited for by tag
      (TorchAir python/torchair/ops/_tagged_event.py @ fced8842).
    - npugraph_ex and eager: ``torch.npu.Event()``, ``record()`` then ``wait(stream)``, torch's native
      API (TorchAir docs/zh/npugraph_ex/advanced/multi_stream.md @ fced8842).
    """
    after = f"on stream '{first.stream}' after {first.source or first.kernel}"
    before = f"on stream '{second.stream}' before {second.source or second.kernel}"
    if mode == Mode.MAX_AUTOTUNE:
        return (
            f"call `torchair.scope.npu_wait_tensor({consumed}, {produced})` {before}."
        )
    if mode == Mode.REDUCE_OVERHEAD:
        return (
            "make `event = torchair.ops.npu_create_tagged_event(tag=\"<tag>\")` once (in __init__), then "
            f"`torchair.ops.npu_tagged_event_record(event)` {after}, and `torchair.ops.npu_tagged_event_wait(event)` {before}."
        )
    return f"`event = torch.npu.Event()`, `event.record()` {after}, and `event.wait()` {before}."


def _keep_alive_fix(mode: str, tensor: str, reader: Access) -> str:
    """How to keep ``tensor``'s memory from reuse until ``reader``'s stream is done, in ``mode``'s API
    (reduce-overhead: ``npu_record_tagged_stream``, TorchAir python/torchair/ops/_tagged_event.py;
    npugraph_ex and eager: ``Tensor.record_stream``, TorchAir docs/zh/npugraph_ex/advanced/multi_stream.md,
    both @ fced8842)."""
    where = f"on stream '{reader.stream}' after its use at {reader.source or reader.kernel}"
    if mode == Mode.REDUCE_OVERHEAD:
        return f"call `torchair.ops.npu_record_tagged_stream({tensor}, '{reader.stream}')` {where}, so its memory is not reused before that stream is done."
    return f"call `{tensor}.record_stream(torch.npu.current_stream())` {where}, so its memory is not reused before that stream is done."


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
        self._readers: dict[str, list[Kernel]] = {}
        for reader in program.kernels:
            for buffer in reader.inputs:
                self._readers.setdefault(buffer, []).append(reader)
        self._views: dict[str, list[str]] = {}
        for view in program.buffers.values():
            if view.alias_of is not None:
                self._views.setdefault(view.alias_of, []).append(view.name)

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
        stream = self.plan.kernel_stream[kernel.name]
        return Access(kernel.name, kernel.op_type, stream, action, kernel.source, code_at(kernel.source))

    def _name(self, buffer: str | None) -> str:
        """What the user's code calls ``buffer``: its label, else the graph's name."""
        known = self.program.buffers.get(buffer) if buffer is not None else None
        return known.user_name if known is not None else str(buffer)

    def _held(self, kernel: Kernel) -> str:
        """A variable of the user's code that holds ``kernel``'s output or a value computed from it later
        on the same stream ('' for none): an ``npu_wait_tensor`` dependency must be a tensor the code has,
        and an intermediate's expression (``cache @ self.w``) would compute it again."""
        stream, seen, frontier = self.plan.kernel_stream[kernel.name], set(), list(kernel.outputs)
        while frontier:
            buffer = frontier.pop(0)
            known = self.program.buffers.get(buffer)
            if known is not None and _VARIABLE.fullmatch(known.label):
                return known.label
            frontier.extend(self._views.get(buffer, ()))
            for reader in self._readers.get(buffer, ()):
                if reader.name not in seen and self.plan.kernel_stream[reader.name] == stream:
                    seen.add(reader.name)
                    frontier.extend(reader.outputs)
        return ""

    def _report(self, kind: RaceKind, buffer: str, first: Kernel, first_action: str, second: Kernel, second_action: str) -> None:
        known = self.program.buffers.get(buffer)
        before, after = self._access(first, first_action), self._access(second, second_action)
        produced = self._held(first) or self._name(first.outputs[0] if first.outputs else buffer)
        consumed = self._name(second.inputs[0] if second.inputs else buffer)
        if kind == RaceKind.READ_AFTER_WRITE:
            produced = consumed = self._name(buffer)
        fix = _order_fix(self.plan.mode, before, after, produced, consumed)
        label = known.label if known is not None else ""
        self.races.append(Race(kind, buffer, known.spec if known else None, before, after, fix, label))

    def _lifetime(self, read_buffer: str, reader: Kernel, writer: Kernel, new_buffer: str) -> None:
        known = self.program.buffers.get(read_buffer)
        read = self._access(reader, "reads it")
        reused = self._access(writer, f"writes `{self._name(new_buffer)}` into its reused memory")
        fix = _keep_alive_fix(self.plan.mode, self._name(read_buffer), read)
        label = known.label if known is not None else ""
        self.races.append(Race(RaceKind.LIFETIME, read_buffer, known.spec if known else None, read, reused, fix, label))

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
