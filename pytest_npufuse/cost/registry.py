"""The cost-rule registry: one named rule per way an op's cost is worked out.

Like ``torch.utils.flop_counter.register_flop_formula``, a rule is registered once under a name and the
op catalog refers to it by that name (key ``cost``). A rule answers four questions about one kernel:
how many cores it launches on (``block_dim``), how much arithmetic it does (``flops``), how many bytes it
actually touches in HBM (``bytes``) and how long its body runs on a given number of cores (``body_us``).
Capture asks the first ``flops``/``bytes`` once per kernel; planning asks ``block_dim``; the simulator
asks ``body_us``. Nothing else in the package branches on op types or rule names.

``body_us`` may read only the kernel's catalog entry, ``flops``, ``bytes``, ``compute_dtype``,
``output_specs`` and ``input_specs`` (the simulator memoises it on exactly those; a fused matmul +
all-reduce needs its message, the output, besides its matmul's flops and bytes; a sparse attention the
shape of its index and caches), and ``block_dim`` may read shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

from ..errors import ProfileError

if TYPE_CHECKING:
    from ..ir.program import Kernel, TensorSpec
    from ..target.catalog import OpCatalog
    from ..target.profile import HardwareProfile


class Work(NamedTuple):
    """What capture knows about one kernel's tensors when it prices it.

    ``first_use`` marks, per input, whether this is the first time the kernel reads that buffer (a
    tensor passed twice is read once); ``resident`` marks inputs a prefetch already put in L2.
    ``per_element`` and ``access_bytes`` come from the op's catalog entry.
    """

    inputs: Sequence["TensorSpec"]
    outputs: Sequence["TensorSpec"]
    first_use: Sequence[bool]
    resident: Sequence[bool]
    per_element: float
    access_bytes: int
    attrs: Sequence[tuple[str, object]] = ()  # the call's scalar arguments by schema name (an attention's layout)


BlockDim = Callable[["Kernel", "HardwareProfile"], int]
Flops = Callable[[Work], float]
Bytes = Callable[[Work], int]
Body = Callable[["Kernel", int, "HardwareProfile"], float]


@dataclass(frozen=True)
class CostRule:
    """How one kind of kernel costs time; ``tiling`` is its host tiling class (``simple`` or
    ``complex``, docs/feature-docs.md#host-scheduling: complex ops tile for tens of microseconds); ``hbm`` says whether
    its ``bytes`` are HBM traffic (False for collectives and MC2, whose bytes cross the link), which L2 residency and
    the HBM-bandwidth pool apply to; ``pointwise`` marks element-by-element ops GE's fusion pass may merge
    with a pointwise producer."""

    name: str
    block_dim: BlockDim
    flops: Flops
    bytes: Bytes
    body_us: Body
    tiling: str = "simple"
    hbm: bool = True
    pointwise: bool = False


TILING_CLASSES = ("simple", "complex")
_RULES: dict[str, CostRule] = {}  # declarations, each made once at import (not session state)


def register_cost_rule(
    name: str, *, block_dim: BlockDim, flops: Flops, bytes: Bytes, body_us: Body, tiling: str = "simple",
    hbm: bool = True, pointwise: bool = False,
) -> CostRule:
    """Register the rule ``name`` (an op catalog entry selects it with ``cost = "name"``). Registering
    a name twice is an error: two homes for one rule would silently disagree."""
    if name in _RULES:
        raise ValueError(f"cost rule '{name}' is already registered")
    if tiling not in TILING_CLASSES:
        raise ValueError(f"cost rule '{name}': tiling class '{tiling}' is not one of {', '.join(TILING_CLASSES)}")
    rule = _RULES[name] = CostRule(name, block_dim, flops, bytes, body_us, tiling, hbm, pointwise)
    return rule


def cost_rule(name: str, where: str = "op catalog") -> CostRule:
    """The rule registered as ``name``; an unknown name is a profile error listing the known ones."""
    rule = _RULES.get(name)
    if rule is None:
        raise ProfileError(
            f"{where}: cost rule '{name}' is not registered; known rules: {', '.join(sorted(_RULES))}.",
            entry=where, argument=name,
        )
    return rule


def check_catalog(catalog: "OpCatalog") -> "OpCatalog":
    """``catalog``, once every entry names a registered rule; else a profile error naming the entry's
    file and table. The catalog only reads the names (it sits below the rules); a check here runs when a
    catalog is taken in (by pytest's settings, the CLI, a capture), after a user's own rules are registered."""
    for where, info in catalog.declared():
        cost_rule(info.cost, where)
    return catalog


def rule_names() -> tuple[str, ...]:
    """Every registered rule name, sorted (for messages and documentation)."""
    return tuple(sorted(_RULES))
