"""Run a captured graph on the CPU to get the numbers a device would produce.

The aten graph is interpreted node by node in its own order, which is the program's issue order and
always a legal order for the data; scope and sync markers are no-ops. Each read the sanitizer found
racing sees poisoned memory instead of its value, so a race changes the numbers as it could on a device.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
import torch.fx

from .program import Program


def poison(value: torch.Tensor) -> torch.Tensor:
    """What fresh device memory may hold: NaN for floats, the byte pattern 0x5A for everything else."""
    if value.is_floating_point() or value.is_complex():
        return torch.full_like(value, float("nan"))
    raw = torch.full((value.numel() * value.element_size(),), 0x5A, dtype=torch.uint8)
    return raw.view(value.dtype).reshape(value.shape) if value.dtype != torch.bool else raw.bool().reshape(value.shape)


def run_graph(
    gm: torch.fx.GraphModule, program: Program, args: Sequence[Any], stale_reads: Mapping[str, frozenset[str]]
) -> list[Any]:
    """The graph's outputs for ``args``. ``stale_reads`` maps a kernel to the input tensors it reads in
    a race (found by the sanitizer); those reads get poisoned memory."""
    stale_of_node = {kernel.node: stale_reads[kernel.name] for kernel in program.kernels if kernel.name in stale_reads}
    inputs = iter(args)
    env: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node.name] = next(inputs)
        elif node.op == "get_attr":
            env[node.name] = getattr(gm, str(node.target))
        elif node.op != "output":
            stale = stale_of_node.get(node.name, frozenset())

            def read(arg: torch.fx.Node) -> Any:
                value = env[arg.name]
                return poison(value) if arg.name in stale and isinstance(value, torch.Tensor) else value

            env[node.name] = node.target(*torch.fx.node.map_arg(node.args, read), **torch.fx.node.map_arg(node.kwargs, read))
    return list(torch.fx.node.map_arg(gm.graph.output_node().args[0], lambda arg: env[arg.name]))
