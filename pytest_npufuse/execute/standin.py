"""Timing-only ops (``missing_ops="timing-only"``): an op with a fake kernel but no CPU kernel is priced like
any other, but its values cannot be computed. Its node gets zeros of the shape, dtype and strides its fake
kernel gave (:func:`stand_in_value`), so every other op still runs on real values; whatever is computed
from those zeros is not compared, and :func:`uncompared` says which of the model's outputs that is and
which ops they come from.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import torch
import torch.fx

from ..frontend.lower import mutated_arguments


def stand_in_value(node: torch.fx.Node) -> Any:
    """Zeros in place of ``node``'s value, laid out as its fake kernel's output (a tuple for a tuple)."""

    def zeros(fake: Any) -> Any:
        if not isinstance(fake, torch.Tensor):
            return fake
        return torch.zeros_like(torch.empty_strided(fake.shape, fake.stride(), dtype=fake.dtype), device="cpu")

    value = node.meta.get("val")
    return tuple(zeros(each) for each in value) if isinstance(value, (tuple, list)) else zeros(value)


def _op_type(node: torch.fx.Node) -> str:
    return getattr(node.target, "_schema").name


def stood_in(gm: torch.fx.GraphModule, seeds: Iterable[torch.fx.Node]) -> dict[str, frozenset[str]]:
    """Each node (and graph input written in place) whose value comes from a stand-in, with the op types of
    the stand-ins it comes from."""
    from_ops: dict[str, frozenset[str]] = {node.name: frozenset({_op_type(node)}) for node in seeds}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        ops = frozenset().union(*(from_ops.get(arg.name, frozenset()) for arg in node.all_input_nodes))
        ops |= from_ops.get(node.name, frozenset())
        if ops:
            from_ops[node.name] = ops
            for written in mutated_arguments(node):
                from_ops[written] = from_ops.get(written, frozenset()) | ops
    return from_ops


def _storage(value: Any) -> int | None:
    if not isinstance(value, torch.Tensor) or value.numel() == 0:
        return None
    return value.untyped_storage().data_ptr()


def uncompared(
    gm: torch.fx.GraphModule,
    from_ops: Mapping[str, frozenset[str]],
    graph_inputs: Sequence[Any],
    graph_outputs: Sequence[Any],
    leaves: Sequence[Any],
) -> dict[int, frozenset[str]]:
    """The positions among the model's output ``leaves`` that hold (or view) a value computed from a stand-in,
    with the op types it comes from. A leaf is matched to the graph's outputs and written inputs of one run
    (``graph_inputs``, ``graph_outputs``) by the memory it lives in."""
    ops_of: dict[int, frozenset[str]] = {}
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    for node, value in zip(placeholders, graph_inputs):
        if node.name in from_ops and (storage := _storage(value)) is not None:
            ops_of[storage] = ops_of.get(storage, frozenset()) | from_ops[node.name]
    for node, value in zip(gm.graph.output_node().args[0], graph_outputs):
        if isinstance(node, torch.fx.Node) and node.name in from_ops and (storage := _storage(value)) is not None:
            ops_of[storage] = ops_of.get(storage, frozenset()) | from_ops[node.name]
    return {
        position: ops_of[storage] for position, leaf in enumerate(leaves)
        if (storage := _storage(leaf)) is not None and storage in ops_of
    }
