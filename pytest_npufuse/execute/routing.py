"""The expert choices a computed MoE made: what ``routing="computed"`` prices every rank by.

Each MC2 dispatch the numerics compute receives its rank's ``expert_ids``; summed over every dispatch of
the run they give how many (token, expert) pairs each expert got, the model's own routing on these
inputs and weights (seeded weights route pseudo-randomly; real ones as the model does).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx

from ..frontend.lower import op_type_of
from ..ir.program import Program
from ..simulate.routing import is_dispatch


class ExpertCounts:
    """An observer of a graph run (:data:`~.graph.Observer`) that counts the experts each MC2 dispatch routes to."""

    def __init__(self, program: Program) -> None:
        dispatches = [kernel for kernel in program.kernels if is_dispatch(kernel)]
        self.op_types = frozenset(kernel.op_type for kernel in dispatches)
        self.experts = max((int(kernel.attr("moe_expert_num", 0) or 0) for kernel in dispatches), default=0)
        self.counts = torch.zeros(self.experts, dtype=torch.int64)

    def __call__(self, node: torch.fx.Node, read: Sequence[Any], value: Any) -> None:
        if node.op != "call_function" or op_type_of(node) not in self.op_types:
            return
        ids = node.kwargs.get("expert_ids", node.args[1] if len(node.args) > 1 else None)
        tensors = [arg for arg in node.all_input_nodes]
        if isinstance(ids, torch.fx.Node) and ids in tensors and len(read) == len(tensors):
            chosen = read[tensors.index(ids)].reshape(-1).to(torch.int64)
            self.counts += torch.bincount(chosen.clamp(0, max(self.experts - 1, 0)), minlength=self.experts)

    def shares(self) -> tuple[int, ...]:
        """Pairs per expert (empty when no dispatch was computed)."""
        return tuple(int(count) for count in self.counts) if int(self.counts.sum()) else ()
