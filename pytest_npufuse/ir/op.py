"""An op type's declared facts: the engine it runs on, whether a SuperKernel may call it, and which cost
rule prices it. The op catalog (:mod:`pytest_npufuse.target.catalog`) reads them from data; the program IR
carries one per kernel, and every later stage reads them from there, so they sit at the bottom with the IR.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from ..vocabulary import Engine, Unfusable


@dataclass(frozen=True)
class OpInfo:
    """How one op type runs on the device."""

    op_type: str
    engine: Engine
    fusable: bool
    sync_all: bool
    block_dim: int | str
    flops: str
    flops_per_element: float
    kernel_type: str
    known: bool = True
    bytes: str = "io"
    host_small: bool = False
    value_dependent: bool = False
    aicpu_dtypes: tuple[str, ...] = ()
    cost: str = "elementwise"
    access_bytes: int = 0
    unfusable: Unfusable | None = None
    """Why a SuperKernel cannot call it (None for a fusable op)."""
    ge_shape: bool = False
    mpmd_tasks: int = 0
    """Subgraph tasks a PyPTO kernel runs under its AI CPU scheduler (0: an ordinary kernel, cost/mpmd.py)."""

    def for_dtypes(self, dtypes: Iterable[str]) -> "OpInfo":
        """The op as it runs on tensors of ``dtypes``: an AI CPU kernel (never fusable) when one of
        them is a dtype the AI Core implementation lacks, else itself."""
        if any(dtype in self.aicpu_dtypes for dtype in dtypes):
            return replace(
                self, engine=Engine.AICPU, fusable=False, block_dim="auto", cost="aicpu", unfusable=Unfusable.AICPU_DTYPE
            )
        return self

    @property
    def why_unfusable(self) -> str:
        """Why a SuperKernel cannot call this op, in words a user can act on ('' when it can)."""
        if self.unfusable is None:
            return ""
        reason = _UNFUSABLE_WHY[self.unfusable]
        return reason.format(kernel=self.kernel_type, op=self.op_type, dtypes="/".join(self.aicpu_dtypes) or "its dtype")


# What each Unfusable reason means (docs/sources.md#torchair-2-3, docs/sources.md#hw-4-1 and docs/sources.md#hw-4-3; the
# catalog's entries cite theirs).
_UNFUSABLE_WHY = {
    Unfusable.TBE: "{kernel} is a TBE kernel, and a SuperKernel calls only Ascend C kernels",
    Unfusable.COPY: "{kernel} is a data copy, not an Ascend C compute kernel",
    Unfusable.AICPU: "{kernel} runs on the AI CPU, and a SuperKernel runs only on the AI Cores",
    Unfusable.AICPU_DTYPE: "{kernel} has no AI Core kernel for {dtypes}, so it runs on the AI CPU, outside any SuperKernel",
    Unfusable.HOST: "{kernel} has no device kernel (the host does it: an allocation, a constant or a scalar read)",
    Unfusable.COMM: "{kernel} is a collective, and a SuperKernel fuses only AllReduce, ReduceScatter, AllGather and AlltoAll",
    Unfusable.MC2: "{kernel} is an MC2 op that drives HCCL from inside its kernel; it is not known to run in a SuperKernel",
    Unfusable.ATB: "{kernel} is an ATB operation, launched by the ATB runtime rather than as a GE sub-kernel",
    Unfusable.PENDING: "{kernel} is not supported inside a SuperKernel yet (attention kernels wait for support)",
    Unfusable.UNVERIFIED: "there is no evidence that {kernel} runs as a SuperKernel sub-kernel, so the catalog keeps it unfusable",
    Unfusable.UNKNOWN: "{op} is not in the op catalog, which models an unknown op as an unfusable Vector kernel",
}
