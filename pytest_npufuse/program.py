"""The program IR: what the captured graph asks the device to do, independent of any target.

Kernels carry their op type, the buffers they read and write, and the scope annotations resolved for
them; view ops are aliases of a buffer, not kernels. Everything is immutable so that the planner, the
simulator and the sanitizer can share one program without copying.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

from .catalog import OpInfo
from .scopes import Annotations


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one tensor value; ``nbytes`` is what a kernel moves to read or write it."""

    shape: tuple[int, ...]
    dtype: str
    nbytes: int


@dataclass(frozen=True)
class Buffer:
    """A tensor value in the graph. ``alias_of`` names the buffer a view shares memory with."""

    name: str
    spec: TensorSpec
    producer: str | None
    alias_of: str | None = None


@dataclass(frozen=True)
class Kernel:
    """One device kernel: a non-view op of the captured graph."""

    index: int
    name: str
    node: str
    op_type: str
    info: OpInfo
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_specs: tuple[TensorSpec, ...]
    annotations: Annotations
    flops: float
    bytes: int
    compute_dtype: str
    source: str


@dataclass(frozen=True)
class Program:
    """The kernels of one captured graph in program order, with every buffer they touch."""

    kernels: tuple[Kernel, ...]
    buffers: Mapping[str, Buffer]
    inputs: tuple[str, ...]
    outputs: tuple[str | None, ...]

    @cached_property
    def _by_name(self) -> Mapping[str, Kernel]:
        return {kernel.name: kernel for kernel in self.kernels}

    def kernel(self, name: str) -> Kernel:
        """The kernel called ``name`` (GE-style kernel name)."""
        return self._by_name[name]

    def storage(self, buffer: str) -> str:
        """The buffer that owns the memory ``buffer`` lives in (itself unless it is a view)."""
        while (alias := self.buffers[buffer].alias_of) is not None:
            buffer = alias
        return buffer

    def superkernel_scopes(self) -> tuple[str, ...]:
        """SuperKernel scope names in order of first use."""
        seen: dict[str, None] = {}
        for kernel in self.kernels:
            if kernel.annotations.sk_scope is not None:
                seen.setdefault(kernel.annotations.sk_scope, None)
        return tuple(seen)

    def streams(self) -> tuple[str, ...]:
        """Stream tags the program asks for, the default stream first."""
        tags = {kernel.annotations.stream for kernel in self.kernels if kernel.annotations.stream is not None}
        return ("default", *sorted(tags - {"default"}))
