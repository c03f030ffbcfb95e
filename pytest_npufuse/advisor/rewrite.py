"""Rewriting a captured program to price an alternative: data flow between kernels, kernels replaced by
others, and the rewritten program's modeled time.

The affinity advisor (:mod:`.affinity`) finds a slow form among a program's kernels and asks what the
program would cost written the other way: the matched kernels are replaced by the rewrite's
(:func:`substitute`), and in a training step the backward kernels AOTAutograd derived from them by the
rewrite's gradient kernel (:func:`fuse`); both programs are then simulated (:func:`program_time`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Sequence

from .. import cost
from ..ir.program import Buffer, Kernel, Program, TensorSpec, compute_dtype_of
from ..plan.superkernel import plan_variant
from ..plan.tasks import Variant
from ..simulate.timeline import RunReport, simulate
from ..target.catalog import OpCatalog
from ..target.profile import HardwareProfile


@dataclass(frozen=True)
class NewKernel:
    """One kernel of a rewrite: its op type, what it reads and the tensor it writes."""

    op_type: str
    inputs: tuple[TensorSpec, ...]
    output: TensorSpec


@dataclass(frozen=True)
class Match:
    """The kernels of one occurrence, the last of which writes the result the rest of the graph reads."""

    kernels: tuple[Kernel, ...]


class DataFlow:
    """Data flow between a program's kernels: who wrote a buffer's memory, who reads it."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.readers: dict[str, list[Kernel]] = {}
        for kernel in program.kernels:
            for name in kernel.inputs:
                self.readers.setdefault(program.storage(name), []).append(kernel)

    def producers(self, kernel: Kernel) -> list[Kernel]:
        found = (self.program.producer(name) for name in kernel.inputs)
        return [k for k in found if k is not None]

    def consumers(self, kernel: Kernel) -> list[Kernel]:
        return [k for name in kernel.outputs for k in self.readers.get(self.program.storage(name), [])]

    def spec(self, name: str) -> TensorSpec:
        return self.program.buffers[name].spec

    def input_specs(self, kernel: Kernel) -> list[TensorSpec]:
        return [self.spec(name) for name in kernel.inputs]


def _priced(kernel: Kernel, op_type: str, reads: Sequence[TensorSpec], writes: Sequence[TensorSpec],
            catalog: OpCatalog, **fields: object) -> Kernel:
    """``kernel`` turned into an ``op_type`` kernel reading tensors ``reads`` and writing ``writes``,
    priced by that op's cost rule; ``fields`` set the rest (its name, index, buffer names)."""
    info = catalog.lookup(op_type).for_dtypes([*(s.dtype for s in reads), *(s.dtype for s in writes)])
    flops, nbytes = cost.kernel_work(info, reads, writes)
    return replace(
        kernel, op_type=op_type, info=info, output_specs=tuple(writes), flops=flops, bytes=nbytes,
        input_specs=tuple(reads), compute_dtype=compute_dtype_of(reads, writes), **fields,
    )


def substitute(program: Program, matches: Sequence[tuple[Match, list[NewKernel]]], catalog: OpCatalog) -> Program:
    """``program`` with each match's kernels replaced by its rewrite (at the match's last kernel, whose
    output buffer the last new kernel writes, so the rest of the graph reads it unchanged)."""
    removed = {k.name for match, _ in matches for k in match.kernels}
    at = {match.kernels[-1].name: (match, new) for match, new in matches}
    buffers = dict(program.buffers)
    kernels: list[Kernel] = []
    for kernel in program.kernels:
        if kernel.name in at:
            match, new = at[kernel.name]
            for position, spec in enumerate(new):
                last = position == len(new) - 1
                output = kernel.outputs[0] if last and kernel.outputs else f"{kernel.name}_rewrite{position}"
                name = f"{kernel.name}_rewrite{position}"
                if not last or not kernel.outputs:
                    buffers[output] = Buffer(output, spec.output, name)
                inputs = tuple(n for k in match.kernels for n in k.inputs if n in buffers)[: len(spec.inputs)]
                kernels.append(_priced(
                    kernel, spec.op_type, spec.inputs, [spec.output], catalog, index=len(kernels), name=name,
                    inputs=inputs, outputs=(output,),
                ))
        elif kernel.name not in removed:
            kernels.append(replace(kernel, index=len(kernels)) if kernel.index != len(kernels) else kernel)
    return replace(program, kernels=tuple(kernels), buffers=MappingProxyType(buffers))


def fuse(program: Program, group: Sequence[Kernel], op_type: str, catalog: OpCatalog) -> Program:
    """``program`` with the kernels of ``group`` replaced by one ``op_type`` kernel (at the last of them)
    that reads what they read from outside the group and writes every buffer of theirs read outside it:
    a fused op's backward kernel in place of the unfused form's backward kernels."""
    names = {k.name for k in group}
    inside = {program.storage(out) for k in group for out in k.outputs}
    read_outside = {program.storage(n) for k in program.kernels if k.name not in names for n in k.inputs}
    read_outside |= {program.storage(n) for n in program.outputs if n is not None}
    inputs = tuple(dict.fromkeys(n for k in group for n in k.inputs if program.storage(n) not in inside))
    outputs = tuple(dict.fromkeys(out for k in group for out in k.outputs if program.storage(out) in read_outside))
    last = group[-1]
    fused = _priced(
        last, op_type, [program.buffers[n].spec for n in inputs], [program.buffers[n].spec for n in outputs], catalog,
        name=f"{last.name}_fused", inputs=inputs, outputs=outputs,
    )
    buffers = dict(program.buffers)
    for out in outputs:
        buffers[out] = replace(buffers[out], producer=fused.name)
    kernels: list[Kernel] = []
    for kernel in program.kernels:
        chosen = fused if kernel.name == last.name else None if kernel.name in names else kernel
        if chosen is not None:
            kernels.append(replace(chosen, index=len(kernels)) if chosen.index != len(kernels) else chosen)
    return replace(program, kernels=tuple(kernels), buffers=MappingProxyType(buffers))


def program_run(program: Program, profile: HardwareProfile) -> RunReport:
    """The program's modeled run on its BASELINE plan (no SuperKernel or stream effect blurs an op's own
    cost)."""
    return simulate(program, plan_variant(program, profile, variant=Variant.BASELINE), profile)


def program_time(program: Program, profile: HardwareProfile) -> float:
    """The modeled time of :func:`program_run`."""
    return program_run(program, profile).time_us
