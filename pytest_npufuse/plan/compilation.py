"""What building a variant's SuperKernels costs the compiler, counted in the sub-kernels it compiles.

docs/feature-docs.md#scope-analysis weighs a scope's size against its compile: a small scope "compiles fast", a large
one "compiles slowly" and may time out. The SuperKernel compiler keeps a cache: a SuperKernel identical to one it has
built (the same sub-kernels with the same shapes, dtypes and arguments, the same options) reuses it, and
one that differs, e.g. by an extra bias input or other options, is compiled online (graph-autofusion,
super_kernel/examples/super_kernel_profiling/README.md). So one scope per decoder layer compiles one
layer's SuperKernel and reuses it for every identical layer, while one scope around all layers compiles
every sub-kernel of the model into one. No published figure gives seconds per sub-kernel (vllm-ascend
PR #8882 says only "several minutes to tens of minutes depending on operator count" for static kernels),
so the work is counted, not converted into time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Hashable

from pathlib import Path

from ..files.toml import read_toml
from ..ir.program import Program
from .tasks import Plan, Segment


@dataclass(frozen=True)
class CompileCosts:
    """The compile-time estimates of ``plan/compile.toml``."""

    per_superkernel_s: float
    per_sub_kernel_s: float
    timeout_s: float


@lru_cache(maxsize=1)
def compile_costs() -> CompileCosts:
    table = read_toml(Path(__file__).with_name("compile.toml"))["superkernel"]
    return CompileCosts(float(table["per_superkernel_s"]), float(table["per_sub_kernel_s"]), float(table["timeout_s"]))


@dataclass(frozen=True)
class CompileWork:
    """The SuperKernels a variant launches, the distinct ones the compiler builds (the rest reuse its
    cache), the sub-kernels inside those, and the largest one's sub-kernels."""

    superkernels: int = 0
    compiled: int = 0
    sub_kernels: int = 0
    largest: int = 0

    @property
    def seconds(self) -> float:
        """Estimated compile time: each SuperKernel built, and each sub-kernel inside those."""
        costs = compile_costs()
        return self.compiled * costs.per_superkernel_s + self.sub_kernels * costs.per_sub_kernel_s

    def describe(self) -> str:
        if not self.superkernels:
            return "-"
        subs = f"{self.sub_kernels} sub-kernel{'' if self.sub_kernels == 1 else 's'}"
        time = f"~{self.seconds:.0f} s (estimate)"
        return f"{self.compiled} of {self.superkernels} SK, {subs} (largest {self.largest}), {time}"


def _identity(segment: Segment, options: str, program: Program) -> Hashable:
    """What makes two SuperKernels one binary: each sub-kernel's op, tensors, scalar arguments and block
    dim, which sub-kernel reads which, and the scope's options. Kernel names and scope labels do not."""
    subs = tuple(
        (kernel.op_type, kernel.input_specs, kernel.output_specs, kernel.attrs)
        for kernel in (program.kernel(name) for name in segment.kernels)
    )
    return options, segment.block_dim, segment.kernel_dims, segment.reads, subs


def compile_work(plan: Plan, program: Program) -> CompileWork:
    """Count the SuperKernels of ``plan`` and what compiling them takes once identical ones share a
    build."""
    built: dict[Hashable, int] = {}
    launched = 0
    for scope in plan.scopes:
        for segment in scope.segments:
            launched += 1
            built.setdefault(_identity(segment, scope.options, program), len(segment.kernels))
    return CompileWork(launched, len(built), sum(built.values()), max(built.values(), default=0))
