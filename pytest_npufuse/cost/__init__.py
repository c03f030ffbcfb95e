"""What a kernel costs on a hardware profile: its block dim, its work and its on-core time.

Every op's costs come from one named rule of the registry (:mod:`.registry`, built-ins in
:mod:`.rules` and :mod:`.attention`), chosen by its catalog entry's ``cost`` key; a kernel whose entry names
``mpmd_tasks`` (a PyPTO kernel) runs that work as tasks its AI CPU scheduler hands out (:mod:`.mpmd`).
This module is the one place the rest of the
package asks: capture calls :func:`kernel_work`, the planner :func:`block_dim`, the simulator
:func:`body_us`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from . import attention as _attention_rules  # noqa: F401  (registers sparse_attention)
from . import mpmd
from . import rules as _builtin_rules  # noqa: F401  (registers the built-in rules)
from .registry import CostRule, Work, check_catalog, cost_rule, register_cost_rule, rule_names

if TYPE_CHECKING:
    from ..ir.op import OpInfo
    from ..ir.program import Kernel, TensorSpec
    from ..target.profile import HardwareProfile

__all__ = [
    "CostRule", "Work", "block_dim", "body_us", "check_catalog", "core_cap", "cost_rule", "kernel_work", "pointwise",
    "reads_hbm", "register_cost_rule", "rule_names", "tiling_class",
]


def core_cap(kernel: "Kernel", profile: "HardwareProfile") -> int:
    """Cores the kernel may launch on: the engine's count, lowered by ``limit_core_num`` (which caps AI
    Cube and AI Vector cores only)."""
    engine = kernel.info.engine
    cap = profile.cores(engine)
    limits = kernel.annotations
    limit = limits.aicore_limit if engine == "cube" else limits.vectorcore_limit if engine == "vector" else None
    return min(cap, limit) if limit else cap


def block_dim(kernel: "Kernel", profile: "HardwareProfile") -> int:
    """Launch core count, as ``Block Dim`` in kernel_details.csv would show it: a fixed count from the
    catalog (an integer, or ``one``), else the cost rule's, capped by :func:`core_cap`; an MPMD kernel
    occupies a core per task, up to that cap."""
    fixed = kernel.info.block_dim
    if kernel.info.mpmd_tasks:
        return mpmd.occupied_cores(kernel.info.mpmd_tasks, core_cap(kernel, profile))
    if isinstance(fixed, int):
        wanted = fixed
    elif fixed == "one":
        wanted = 1
    else:
        wanted = cost_rule(kernel.info.cost).block_dim(kernel, profile)
    return max(1, min(wanted, core_cap(kernel, profile)))


def body_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """On-core time of the kernel body (without dispatch, head or gaps) on ``dim`` cores: the cost rule's,
    times the profile's correction for the op type (``[corrections]``, fitted by ``calibrate`` to a
    team's own profile; 1 when the profile has none). An MPMD kernel's work is paced by its scheduler
    (:func:`.mpmd.scheduled_us`)."""
    body = cost_rule(kernel.info.cost).body_us(kernel, dim, profile)
    tasks = kernel.info.mpmd_tasks
    if tasks:
        body = mpmd.scheduled_us(body, tasks, dim, profile.overhead_us["mpmd_task"])
    return body * profile.corrections.get(kernel.info.kernel_type, 1.0)


def kernel_work(
    info: "OpInfo",
    inputs: Sequence["TensorSpec"],
    outputs: Sequence["TensorSpec"],
    input_names: Sequence[str] = (),
    resident: Sequence[str] = (),
    attrs: Sequence[tuple[str, object]] = (),
) -> tuple[float, int]:
    """Flops and HBM bytes actually touched by one kernel, by its cost rule. ``input_names`` (one per
    input) lets a tensor passed twice be read once; ``resident`` names buffers an L2 prefetch holds;
    ``attrs`` are the call's scalar arguments (``Kernel.attrs``), for rules the shapes leave open."""
    names = list(input_names) or [str(i) for i in range(len(inputs))]
    seen: set[str] = set()
    first_use = []
    for name in names:
        first_use.append(name not in seen)
        seen.add(name)
    held = set(resident)
    work = Work(tuple(inputs), tuple(outputs), tuple(first_use), tuple(name in held for name in names),
                info.flops_per_element, info.access_bytes, tuple(attrs))
    rule = cost_rule(info.cost)
    return rule.flops(work), rule.bytes(work)


def pointwise(info: "OpInfo") -> bool:
    """Whether GE's fusion pass may merge the op with a pointwise producer."""
    return cost_rule(info.cost).pointwise


def reads_hbm(info: "OpInfo") -> bool:
    """Whether the op's ``bytes`` are HBM traffic (not a message over the link)."""
    return cost_rule(info.cost).hbm


def tiling_class(info: "OpInfo") -> str:
    """``simple`` or ``complex``: which host Tiling cost an op pays in host scheduling
    (docs/feature-docs.md#host-scheduling)."""
    return cost_rule(info.cost).tiling
