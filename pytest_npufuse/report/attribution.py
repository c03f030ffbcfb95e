"""Where a modeled run spends its time: per module path, per op type, and compute / communication / free.

An Ascend engineer reads a profile in three tables, and this module gives the same three for a modeled
run, so the first question of docs/feature-docs.md#affinity-ops ("is the step computing, communicating or idle, and
which op dominates?") and of the profiler-driven scope choice of docs/feature-docs.md#scope-analysis ("which module is
the bottleneck?") are answered on a CPU:

- per module path: device time of the kernels traced inside each ``nn.Module`` call (inclusive of its
  children, and its own ``self`` share), from the ``nn_module_stack`` Dynamo records on every node. A
  SuperKernel's sub-kernels count for their own modules; its own cost beyond them (head, calls,
  intra-kernel syncs) counts for the innermost module all its sub-kernels share;
- per op type: msprof's ``op_statistic.csv`` (OP Type, Core Type, Count, Total/Min/Avg/Max Time, Ratio),
  over device tasks as msprof counts them (a SuperKernel is one task of type ``SuperKernel``);
- overlap: msprof's overlap analysis (docs/feature-docs.md#affinity-ops, figure 1): the share of the run's span that is
  computing, communication not hidden under computing, and free (the device idle).

A training step (:func:`attribute_step`) is attributed over all its graphs at once, and each op type's
row also says how much of its time the backward spends (the profile of docs/feature-docs.md#affinity-ops: IndexPutV2, a
backward op, took 75% of the step), as an extra ``Backward Time(us)`` column after msprof's.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from ..ir.lines import file_line
from ..ir.program import Kernel, ModuleFrame, Program
from ..simulate.step import chain_runs
from ..simulate.timeline import SUPERKERNEL_OP, KernelRun, RunReport
from ..vocabulary import Phase

OP_STATISTIC_COLUMNS = (
    "OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)", "Max Time(us)", "Ratio(%)",
)
BACKWARD_COLUMN = "Backward Time(us)"
MODEL_PATH = ""


def accelerator_core(engine: str, op_type: str) -> str:
    """The core type msprof reports for a kernel of ``engine`` (``Accelerator Core`` / ``Core Type``)."""
    if op_type == SUPERKERNEL_OP:
        return "MIX_AIC" if engine == "cube" else "MIX_AIV"
    return {"cube": "AI_CORE", "vector": "AI_VECTOR_CORE", "aicpu": "AI_CPU", "comm": "HCCL"}.get(engine, "HOST")


@dataclass(frozen=True)
class OpStatistic:
    """One row of ``op_statistic.csv``: every device task of one op type on one core type."""

    op_type: str
    core_type: str
    count: int
    total_us: float
    min_us: float
    max_us: float
    ratio_pct: float
    backward_us: float = 0.0
    """Of ``total_us``, the time of tasks in a training step's backward graph."""

    @property
    def avg_us(self) -> float:
        return self.total_us / self.count

    @property
    def backward_pct(self) -> float:
        """The share of this op type's time spent in the backward."""
        return 100.0 * self.backward_us / self.total_us if self.total_us else 0.0

    def row(self) -> tuple[Any, ...]:
        return (
            self.op_type, self.core_type, self.count, f"{self.total_us:.3f}", f"{self.min_us:.3f}",
            f"{self.avg_us:.3f}", f"{self.max_us:.3f}", f"{self.ratio_pct:.2f}",
        )


@dataclass(frozen=True)
class ModuleTime:
    """Device time of the kernels traced inside one module call path (``""`` is the whole model).

    ``total_us`` includes the module's children, ``self_us`` only kernels directly in it; ``depth``
    is the nesting level, for indenting a tree.
    """

    path: str
    type: str
    depth: int
    kernels: int
    total_us: float
    self_us: float
    ratio_pct: float

    @property
    def label(self) -> str:
        return self.path or "(model)"


@dataclass(frozen=True)
class Overlap:
    """msprof's overlap analysis of one run: over ``span_us``, the time some compute kernel runs,
    communication runs with no compute beside it, and the device is idle (the three add up to the span)."""

    span_us: float
    computing_us: float
    communication_us: float
    exposed_communication_us: float
    free_us: float

    def shares(self) -> dict[str, float]:
        """Percent of the span, by msprof's column names."""
        span = self.span_us or 1.0
        return {
            "Computing": 100.0 * self.computing_us / span,
            "Communication(Not Overlapped)": 100.0 * self.exposed_communication_us / span,
            "Free": 100.0 * self.free_us / span,
        }


@dataclass(frozen=True)
class SiteTime:
    """Device time of one op type at one user source line (``source`` is ``path:line``, '' when the op
    has none), over every kernel made there (a line in a layer's forward runs once per layer). A
    SuperKernel's own cost beyond its sub-kernels (head, calls, syncs) is the site ``SuperKernel <scope>``."""

    op_type: str
    source: str
    total_us: float
    count: int

    @property
    def key(self) -> str:
        """How a baseline records the site: the op type and the file name and line, without the
        directory (as :func:`~pytest_npufuse.report.explain.break_key`), or the SuperKernel's scope."""
        where = file_line(self.source)
        return f"{self.op_type} at {where}" if where else self.op_type


@dataclass(frozen=True)
class Attribution:
    """The summaries of one modeled run (``variant`` is ``baseline`` or ``variant``): per module, per op
    type, the overlap, and per op type and source line (``sites``, slowest first)."""

    variant: str
    modules: tuple[ModuleTime, ...]
    op_types: tuple[OpStatistic, ...]
    overlap: Overlap
    step: bool = False
    """Attributes a training step (its rows carry the backward's time)."""
    sites: tuple[SiteTime, ...] = ()

    def module(self, path: str) -> ModuleTime | None:
        return next((row for row in self.modules if row.path == path), None)

    def op_type(self, name: str) -> OpStatistic | None:
        """The row of op type ``name`` (all core types of it summed when it runs on several)."""
        rows = [row for row in self.op_types if row.op_type == name]
        if len(rows) <= 1:
            return rows[0] if rows else None
        total, backward = sum(r.total_us for r in rows), sum(r.backward_us for r in rows)
        count, ratio = sum(r.count for r in rows), sum(r.ratio_pct for r in rows)
        low, high = min(r.min_us for r in rows), max(r.max_us for r in rows)
        return OpStatistic(name, rows[0].core_type, count, total, low, high, ratio, backward)

    def op_statistic_csv(self) -> str:
        """The rows of msprof's ``op_statistic.csv``, slowest op type first (a training step's with the
        backward's time after msprof's columns)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        extra = (BACKWARD_COLUMN,) if self.step else ()
        writer.writerow(OP_STATISTIC_COLUMNS + extra)
        writer.writerows(row.row() + ((f"{row.backward_us:.3f}",) if self.step else ()) for row in self.op_types)
        return buffer.getvalue()

    def module_csv(self) -> str:
        """Per module path: kernels, inclusive and self time, share of all device time."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(("Module", "Type", "Depth", "Kernels", "Total Time(us)", "Self Time(us)", "Ratio(%)"))
        writer.writerows(
            (row.label, row.type, row.depth, row.kernels, f"{row.total_us:.3f}", f"{row.self_us:.3f}", f"{row.ratio_pct:.2f}")
            for row in self.modules
        )
        return buffer.getvalue()

    def to_json(self) -> dict[str, Any]:
        return {
            "modules": [
                {"path": row.path, "type": row.type, "depth": row.depth, "kernels": row.kernels,
                 "total_us": round(row.total_us, 3), "self_us": round(row.self_us, 3), "ratio_pct": round(row.ratio_pct, 2)}
                for row in self.modules
            ],
            "op_statistic": [self._op_row(row) for row in self.op_types],
            "overlap": {
                "span_us": round(self.overlap.span_us, 3),
                **{name: round(share, 2) for name, share in self.overlap.shares().items()},
            },
        }

    def _op_row(self, row: OpStatistic) -> dict[str, Any]:
        extra = {BACKWARD_COLUMN: f"{row.backward_us:.3f}"} if self.step else {}
        return {**dict(zip(OP_STATISTIC_COLUMNS, row.row())), **extra}

    def lines(self, top: int = 8) -> list[str]:
        """A short text summary: the overlap shares, the slowest op types and the slowest modules."""
        shares = ", ".join(f"{name} {share:.1f}%" for name, share in self.overlap.shares().items())
        ops = ", ".join(f"{row.op_type} {row.ratio_pct:.1f}%" for row in self.op_types[:top])
        leaves = sorted((row for row in self.modules if row.path), key=lambda row: (-row.self_us, row.path))
        modules = ", ".join(f"{row.path} {row.self_us:.1f} us" for row in leaves[:top])
        return [f"{self.variant}: {shares}", f"  op types: {ops}", f"  modules (by self time): {modules}"]


def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """``intervals`` merged into sorted, disjoint ones."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def intervals_length(intervals: Sequence[tuple[float, float]]) -> float:
    """The total length of disjoint ``intervals``."""
    return sum(end - start for start, end in intervals)


def _intersection(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Total length of the overlap of two sorted, disjoint interval lists."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def overlap_of(run: RunReport) -> Overlap:
    """Computing, exposed communication and free time over the run (zero for a run that never ends)."""
    tasks = [kernel for kernel in run.kernels if kernel.parent is None]
    span = run.time_us if math.isfinite(run.time_us) else 0.0
    computing = merge_intervals((k.start_us, k.end_us) for k in tasks if k.engine != "comm")
    communication = merge_intervals((k.start_us, k.end_us) for k in tasks if k.engine == "comm")
    exposed = intervals_length(communication) - _intersection(computing, communication)
    busy = intervals_length(computing) + exposed
    return Overlap(span, intervals_length(computing), intervals_length(communication), exposed, max(0.0, span - busy))


def op_statistics(run: RunReport, backward: frozenset[str] = frozenset()) -> tuple[OpStatistic, ...]:
    """Device tasks grouped by op type and core type, slowest total first (ties by name); ``backward``
    names the tasks of a training step's backward graph."""
    groups: dict[tuple[str, str], list[float]] = {}
    in_backward: dict[tuple[str, str], float] = {}
    for kernel in run.kernels:
        if kernel.parent is None:
            op_type = "SuperKernel" if kernel.op_type == SUPERKERNEL_OP else kernel.kernel_type or kernel.op_type
            key = (op_type, accelerator_core(kernel.engine, kernel.op_type))
            groups.setdefault(key, []).append(kernel.duration_us)
            if kernel.name in backward:
                in_backward[key] = in_backward.get(key, 0.0) + kernel.duration_us
    grand = sum(sum(times) for times in groups.values()) or 1.0
    rows = [
        OpStatistic(
            op_type, core, len(times), sum(times), min(times), max(times), 100.0 * sum(times) / grand,
            in_backward.get((op_type, core), 0.0),
        )
        for (op_type, core), times in groups.items()
    ]
    return tuple(sorted(rows, key=lambda row: (-row.total_us, row.op_type, row.core_type)))


def _common(stacks: Sequence[tuple[ModuleFrame, ...]]) -> tuple[ModuleFrame, ...]:
    """The module frames every stack starts with."""
    shared = stacks[0]
    for stack in stacks[1:]:
        length = next((i for i, (a, b) in enumerate(zip(shared, stack)) if a != b), min(len(shared), len(stack)))
        shared = shared[:length]
    return shared


def _charges(by_name: Mapping[str, Kernel], run: RunReport) -> list[tuple[tuple[ModuleFrame, ...], float, int]]:
    """(module stack, device time, kernels) charged for each kernel run: a kernel's own duration, and
    for a SuperKernel the time its sub-kernels do not cover, to the modules they all share."""
    children: dict[str, list[KernelRun]] = {}
    for kernel in run.kernels:
        if kernel.parent is not None:
            children.setdefault(kernel.parent, []).append(kernel)
    charges = []
    for kernel in run.kernels:
        if kernel.op_type == SUPERKERNEL_OP:
            subs = children.get(kernel.name, [])
            covered = intervals_length(merge_intervals((sub.start_us, sub.end_us) for sub in subs))
            stacks = [by_name[sub.name].modules for sub in subs if sub.name in by_name]
            charges.append((_common(stacks) if stacks else (), max(0.0, kernel.duration_us - covered), 0))
        elif kernel.name in by_name:
            charges.append((by_name[kernel.name].modules, kernel.duration_us, 1))
    return charges


def module_times(program: Program, run: RunReport) -> tuple[ModuleTime, ...]:
    """Per module path in order of first use: inclusive and self device time (the model first)."""
    return _module_times(program.by_name, run)


def _module_times(by_name: Mapping[str, Kernel], run: RunReport) -> tuple[ModuleTime, ...]:
    totals: dict[str, list[float]] = {MODEL_PATH: [0.0, 0.0, 0]}
    kinds: dict[str, tuple[str, int]] = {MODEL_PATH: ("", 0)}
    for stack, time_us, count in _charges(by_name, run):
        paths = [MODEL_PATH, *(frame.path for frame in stack if frame.path)]
        for depth, frame in enumerate(stack, start=1):
            kinds.setdefault(frame.path, (frame.type, depth))
        for path in paths:
            row = totals.setdefault(path, [0.0, 0.0, 0])
            row[0] += time_us
            row[2] += count
        totals[paths[-1]][1] += time_us
    grand = totals[MODEL_PATH][0] or 1.0
    return tuple(
        ModuleTime(path, kinds[path][0], kinds[path][1], int(count), total, own, 100.0 * total / grand)
        for path, (total, own, count) in totals.items()
    )


def site_times(by_name: Mapping[str, Kernel], run: RunReport) -> tuple[SiteTime, ...]:
    """Device time per op type and source line, slowest first (ties by key): each kernel's own
    duration at its line, and a SuperKernel's time beyond its sub-kernels under its scope's name (the
    segments of one scope together, so a split scope shows as one more SuperKernel)."""
    children: dict[str, list[KernelRun]] = {}
    for kernel in run.kernels:
        if kernel.parent is not None:
            children.setdefault(kernel.parent, []).append(kernel)
    totals: dict[tuple[str, str], list[float]] = {}
    for kernel in run.kernels:
        if kernel.op_type == SUPERKERNEL_OP:
            subs = children.get(kernel.name, [])
            covered = intervals_length(merge_intervals((sub.start_us, sub.end_us) for sub in subs))
            scopes = sorted({by_name[sub.name].annotations.sk_scope or "" for sub in subs if sub.name in by_name})
            key, time_us = (f"SuperKernel {'+'.join(scopes) or kernel.name}", ""), max(0.0, kernel.duration_us - covered)
        else:
            made = by_name.get(kernel.name)
            key, time_us = (kernel.op_type, made.source if made is not None else ""), kernel.duration_us
        row = totals.setdefault(key, [0.0, 0])
        row[0] += time_us
        row[1] += 1
    sites = [SiteTime(op_type, source, total, int(count)) for (op_type, source), (total, count) in totals.items()]
    return tuple(sorted(sites, key=lambda site: (-site.total_us, site.key)))


LONGEST_TASKS = 50
"""Device tasks a check's record keeps by name: enough to say which kernels got slower, bounded so a
record stays small (it travels in ``user_properties``, which JUnit XML copies)."""


def longest_tasks(run: RunReport, limit: int = LONGEST_TASKS) -> list[list[Any]]:
    """``[name, kernel type, duration us]`` of the run's ``limit`` longest device tasks (a SuperKernel
    is one task, named as GE names it), longest first, ties by name."""
    tasks = [kernel for kernel in run.kernels if kernel.parent is None]
    tasks.sort(key=lambda kernel: (-kernel.duration_us, kernel.name))
    return [[k.name, "SuperKernel" if k.op_type == SUPERKERNEL_OP else k.kernel_type or k.op_type, round(k.duration_us, 3)]
            for k in tasks[:limit]]


def attribute(program: Program, run: RunReport) -> Attribution:
    """The three summaries of ``run``, a modeled run of ``program``."""
    return Attribution(
        run.variant, module_times(program, run), op_statistics(run), overlap_of(run), sites=site_times(program.by_name, run)
    )


def attribute_step(programs: Sequence[Program], run: RunReport) -> Attribution:
    """The three summaries of a training step's ``run`` (its graphs' runs chained), whose kernels come
    from ``programs``; backward kernels count for the modules whose forward they differentiate (AOT
    keeps the forward's module stack on them). A SuperKernel task belongs to its sub-kernels' graph."""
    by_name: dict[str, Kernel] = {}
    backward: set[str] = set()
    for program in programs:
        by_name.update(program.by_name)
        if program.phase == Phase.BACKWARD:
            backward.update(program.by_name)
    backward.update(kernel.parent for kernel in run.kernels if kernel.parent is not None and kernel.name in backward)
    return Attribution(
        run.variant, _module_times(by_name, run), op_statistics(run, frozenset(backward)), overlap_of(run), step=True,
        sites=site_times(by_name, run),
    )


def attribute_calls(calls: Sequence[tuple[Program, RunReport]]) -> Attribution:
    """The three summaries of a sequence of graph calls (a profiled stretch of a script: each compiled
    graph's modeled run once per call, end to end). Distinct graphs may share kernel names (each
    compiled graph numbers its own), so a kernel is known by its graph and its name; a call of a
    backward graph counts in the backward column, as in a training step."""
    if not calls:
        raise ValueError("no graph calls to attribute")
    graphs: dict[int, int] = {}
    by_name: dict[str, Kernel] = {}
    backward: set[str] = set()
    runs = []
    for program, run in calls:
        tag = f"{graphs.setdefault(id(program), len(graphs))}:"
        by_name.update((tag + name, kernel) for name, kernel in program.by_name.items())
        tagged = tuple(
            k._replace(name=tag + k.name, parent=None if k.parent is None else tag + k.parent) for k in run.kernels
        )
        if program.phase == Phase.BACKWARD:
            backward.update(k.name for k in tagged)
        runs.append(replace(run, kernels=tagged))
    whole = chain_runs(runs)
    return Attribution(
        whole.variant, _module_times(by_name, whole), op_statistics(whole, frozenset(backward)), overlap_of(whole),
        step=bool(backward), sites=site_times(by_name, whole),
    )
