"""Run a plan's kernels on the CPU, in the plan's order, to get the numbers a device would produce.

The aten graph is interpreted node by node: kernels run when the plan issues them, view ops are
evaluated when a kernel first needs them, and scope markers do nothing. A kernel whose input has not been
produced yet means the plan broke a data dependency, which is a bug in the planner, never silently
reordered here.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
import torch.fx

from . import scopes, syncs
from .capture import is_view
from .program import Program


def poison(value: torch.Tensor) -> torch.Tensor:
    """What fresh device memory may hold: NaN for floats, the byte pattern 0x5A for everything else."""
    if value.is_floating_point() or value.is_complex():
        return torch.full_like(value, float("nan"))
    raw = torch.full((value.numel() * value.element_size(),), 0x5A, dtype=torch.uint8)
    return raw.view(value.dtype).reshape(value.shape) if value.dtype != torch.bool else raw.bool().reshape(value.shape)


class _Interpreter:
    def __init__(self, gm: torch.fx.GraphModule, args: Sequence[Any]) -> None:
        self.gm = gm
        self.nodes = {node.name: node for node in gm.graph.nodes}
        self.env: dict[str, Any] = {}
        placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
        for node, value in zip(placeholders, args):
            self.env[node.name] = value

    def value(self, node: torch.fx.Node) -> Any:
        if node.name in self.env:
            return self.env[node.name]
        if node.op == "get_attr":
            self.env[node.name] = getattr(self.gm, str(node.target))
        elif node.op == "call_function" and (is_view(node) or scopes.is_scope_node(node) or syncs.is_sync_node(node)):
            self.run(node)
        else:
            raise RuntimeError(f"internal error: {node.name} is read before the plan ran it")
        return self.env[node.name]

    def run(self, node: torch.fx.Node, stale: frozenset[str] = frozenset()) -> None:
        """Run one node; inputs named in ``stale`` are read as a racing device could see them."""

        def read(arg: torch.fx.Node) -> Any:
            value = self.value(arg)
            return poison(value) if arg.name in stale and isinstance(value, torch.Tensor) else value

        args = torch.fx.node.map_arg(node.args, read)
        kwargs = torch.fx.node.map_arg(node.kwargs, read)
        self.env[node.name] = node.target(*args, **kwargs)

    def outputs(self) -> list[Any]:
        output = next(node for node in self.gm.graph.nodes if node.op == "output")
        return list(torch.fx.node.map_arg(output.args[0], self.value))


def run_in_order(
    gm: torch.fx.GraphModule,
    program: Program,
    order: Sequence[str],
    args: Sequence[Any],
    stale_reads: Mapping[str, frozenset[str]] | None = None,
) -> list[Any]:
    """Execute the kernels named in ``order`` (kernel names) and return the graph outputs.

    ``stale_reads`` maps a kernel to the input tensors it reads in a race (found by the sanitizer):
    those reads get poisoned memory, so a race changes the numbers exactly as it could on a device.
    """
    interpreter = _Interpreter(gm, args)
    node_of = {kernel.name: kernel.node for kernel in program.kernels}
    stale_reads = stale_reads or {}
    for name in order:
        interpreter.run(interpreter.nodes[node_of[name]], stale_reads.get(name, frozenset()))
    return interpreter.outputs()
