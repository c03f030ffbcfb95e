"""Programs and plans built by hand, without capturing a model.

The simulator's tests, the calibration and the speed benchmarks need programs that ``torch.compile``
cannot give cheaply: thousands of kernels, several streams joined by events, ops a CPU has no kernel
for. :class:`ProgramBuilder` writes the same immutable IR capture writes, priced by the same catalog,
and :func:`plan_program` plans it with the real SuperKernel segmentation and the given events.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Sequence

from .. import cost
from ..ir.events import Event
from ..ir.program import Annotations, Buffer, Kernel, Program, TensorSpec, compute_dtype_of
from ..plan.superkernel import fused_tasks, plan_variant, segment_scopes
from ..plan.tasks import Plan, ScopePlan, Variant, between_tasks
from ..report.attribution import attribute
from ..report.case import CaseReport, ScopeReport
from ..report.contention import stream_contention
from ..simulate.timeline import simulate
from ..target.catalog import OpCatalog, load_catalog
from ..target.profile import HardwareProfile
from ..vocabulary import Mode

_ITEM_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int8": 1, "int32": 4, "int64": 8, "bool": 1}


def spec(shape: Sequence[int], dtype: str = "bfloat16") -> TensorSpec:
    """A tensor spec; ``dtype`` is a torch dtype name without ``torch.``."""
    return TensorSpec(tuple(shape), dtype, math.prod(shape) * _ITEM_BYTES[dtype])


class ProgramBuilder:
    """Append kernels in program order; each returns the name of its output buffer."""

    def __init__(self, catalog: OpCatalog | None = None) -> None:
        self.catalog = catalog or load_catalog()
        self.buffers: dict[str, Buffer] = {}
        self.kernels: list[Kernel] = []
        self.inputs: list[str] = []
        self._names: dict[str, int] = {}
        self._prefetched: set[str] = set()

    def input(self, name: str, shape: Sequence[int], dtype: str = "bfloat16") -> str:
        self.buffers[name] = Buffer(name, spec(shape, dtype), None)
        self.inputs.append(name)
        return name

    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        shape: Sequence[int],
        dtype: str = "bfloat16",
        *,
        stream: str | None = None,
        priority: int = 0,
        scope: str | None = None,
        flops: float | None = None,
        form: str = "",
        symbolic: bool = False,
    ) -> str:
        """One kernel of ``op_type`` reading ``inputs`` and writing one tensor of ``shape``.

        ``flops`` replaces the catalog's flops rule (e.g. a matmul whose K the shapes do not show);
        ``form`` is the torch call it was lowered from (``Linear``), as capture records it; ``symbolic``:
        its input sizes are symbolic in a dynamic-shape graph (``Kernel.symbolic_sizes``).
        """
        input_specs = [self.buffers[name].spec for name in inputs]
        output = spec(shape, dtype)
        info = self.catalog.lookup(op_type, form).for_dtypes([*(s.dtype for s in input_specs), dtype])
        count = self._names.get(info.kernel_type, 0)
        self._names[info.kernel_type] = count + 1
        name = info.kernel_type if count == 0 else f"{info.kernel_type}_{count}"
        buffer = f"buf{len(self.kernels)}"
        work_flops, nbytes = cost.kernel_work(info, input_specs, [output], inputs, self._prefetched)
        if info.cost == "prefetch":
            self._prefetched.update(inputs[:1])
        self.buffers[buffer] = Buffer(buffer, output, name)
        self.kernels.append(
            Kernel(
                index=len(self.kernels), name=name, node=buffer, op_type=op_type, info=info, inputs=tuple(inputs),
                outputs=(buffer,), output_specs=(output,),
                annotations=Annotations(sk_scope=scope, stream=stream, stream_priority=priority),
                flops=flops if flops is not None else work_flops,
                bytes=nbytes,
                compute_dtype=compute_dtype_of(input_specs, [output]),
                source="",
                input_specs=tuple(input_specs),
                call=form,
                symbolic_sizes=symbolic,
            )
        )
        return buffer

    def build(self, outputs: Sequence[str] = ()) -> Program:
        return Program(tuple(self.kernels), MappingProxyType(dict(self.buffers)), tuple(self.inputs), tuple(outputs))


def plan_program(
    program: Program,
    profile: HardwareProfile,
    *,
    variant: str = Variant.VARIANT,
    mode: str = Mode.MAX_AUTOTUNE,
    syncs: Sequence[Event] = (),
) -> Plan:
    """Plan a hand-built program: the VARIANT honours its scopes and streams, the BASELINE runs every
    kernel alone on the default stream (and then carries no events). ``syncs`` are events between
    kernels, ``Event(name, record_after, wait_before)``, as a stream plan binds them."""
    if variant == Variant.BASELINE:
        return plan_variant(program, profile, variant=variant, mode=mode)
    segments = segment_scopes(program, profile)
    tasks = fused_tasks(program, segments, profile, multistream=True)
    return Plan(variant, mode, tasks, (), syncs=between_tasks(syncs, tasks))


def case_report(program: Program, profile: HardwareProfile, syncs: Sequence[Event] = ()) -> CaseReport:
    """A hand-built program's BASELINE and VARIANT, simulated, as a CaseReport.

    Timelines only: a hand-built program has no tensors, so there are no outputs to compare and no
    sanitizer run; report renderers and their benchmarks use it for programs too large to capture.
    """
    baseline, variant = (
        simulate(program, plan_program(program, profile, variant=which, syncs=syncs if which == Variant.VARIANT else ()), profile)
        for which in (Variant.BASELINE, Variant.VARIANT)
    )
    scopes = {
        name: ScopeReport.from_plan(ScopePlan(name, "", "fused" if segments else "unfused", tuple(segments), (), ""))
        for name, segments in segment_scopes(program, profile).items()
    }
    return CaseReport(
        profile.name, Mode.MAX_AUTOTUNE, baseline, variant, (), scopes, variant.streams, (), (),
        attribution={run.variant: attribute(program, run) for run in (baseline, variant)},
        contention=stream_contention(variant, profile),
    )
