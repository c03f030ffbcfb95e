"""Numerics on a sample of layers: bit-exactness of a deep model checked on the layers that stand for it.

A decoder stack repeats a few kinds of layer (DeepSeek-V3: 3 dense, then 58 MoE). Whether a scope or a
second stream changes the numbers is a property of a layer's code, so checking the first layer, the
last one and the first of each kind not yet among them covers every kind at its real size without
computing (or holding) them all. The sample is captured and computed once: the model with only the
sampled layers in its stack, in order (everything around the stack kept: embedding, final norm, head),
its BASELINE and its VARIANT with racy reads poisoned, every output compared bit for bit. A layer of a
timing-only model gets seeded weights (:mod:`.seeded`), each made when the graph first reads it and
dropped after its last read, so a sample holds about one layer's weights (or the embedding or head
while they run), not the model's.

The layers are those of the model's decoder stack (its longest ``ModuleList``, repeated or not); a
model without one is computed whole, in the same way (seeded weights where it has none).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from ..errors import ArgumentError
from ..frontend.backend import Capture
from ..frontend.repeat import Stack, layer_container, only_layers
from ..ir.program import Kernel, Program
from ..numerics.compare import compare_outputs
from ..report.findings import Mismatch
from ..target.catalog import OpCatalog
from .graph import cone_run, run_graph, writes_inputs
from .routing import ExpertCounts
from .seeded import seeded_like, seeded_rows

@dataclass(frozen=True)
class Sampled:
    """The computed layers (module paths), every output compared, the first difference of each that
    differs, and the kernels the numerics computed."""

    layers: tuple[str, ...]
    outputs: tuple[str, ...]
    mismatches: tuple[Mismatch, ...]
    kernels_executed: int
    weights: str
    experts: tuple[int, ...] = ()


def sampled_layers(stack: Stack) -> tuple[int, ...]:
    """The first layer, the last, and the first of each kind neither of them is: e.g. (0, 60) for
    DeepSeek-V3, whose layer 0 is dense and layer 60 MoE."""
    size = len(stack.container)
    picked = {0, size - 1}
    for kind in stack.kinds():
        if not picked & set(kind):
            picked.add(kind[0])
    return tuple(sorted(picked))


@dataclass(frozen=True)
class SampleGraph:
    """The captured sample: the model with only its sampled layers, its graph and the flat inputs it runs on."""

    layers: tuple[str, ...]
    capture: Capture

    @property
    def program(self) -> Program:
        return self.capture.graph.program


def capture_sample(model: Callable[..., Any], inputs: Sequence[Any], catalog: OpCatalog) -> SampleGraph:
    """Capture ``model`` with only its sampled layers in its stack (the whole model when it has no decoder
    stack); the model has all its layers back afterwards."""
    torch._dynamo.reset()
    stack = layer_container(model)
    if stack is None:
        return fitting(SampleGraph(("model",), Capture(model, inputs, catalog)))
    picks = sampled_layers(stack)
    with only_layers(stack, picks):
        sample = SampleGraph(tuple(f"{stack.path}.{index}" for index in picks), Capture(model, inputs, catalog))
    return fitting(sample)


def host_memory() -> int:
    """Bytes of physical memory of this host: the most one computed kernel may hold."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def fitting(sample: SampleGraph, bound: int | None = None) -> SampleGraph:
    """``sample``, refused before any value is made when one of its kernels would not fit in the host's memory
    (``bound``, physical memory by default): computing a kernel holds its inputs and outputs at once, and past
    the host's memory the allocation fails deep inside torch or the host swaps for minutes. A timing-only
    model of any size is priced from shapes and never reaches here."""
    limit = host_memory() if bound is None else bound
    biggest = max(sample.program.kernels, key=_held_bytes, default=None)
    if biggest is None or _held_bytes(biggest) <= limit:
        return sample
    frame = biggest.modules[-1] if biggest.modules else None
    where = biggest.source or (frame.call_site if frame else "")
    module = f" in {frame.path or 'the model'} ({frame.type})" if frame else ""
    at = f" at {where}" if where else ""
    raise ArgumentError(
        f"numerics='sample' computes the sampled layers at their real size, but {biggest.op_type}{module}{at} "
        f"holds {_held_bytes(biggest) / 2**30:.1f} GiB of inputs and outputs, more than this host's "
        f"{limit / 2**30:.1f} GiB of memory; time the model without numerics (numerics='none'), or sample a "
        "smaller configuration of it.",
        argument="numerics", bound=limit,
    )


def _held_bytes(kernel: Kernel) -> int:
    return sum(spec.nbytes for spec in (*kernel.input_specs, *kernel.output_specs))


def compute_sample(sample: SampleGraph, stale: Mapping[str, frozenset[str]]) -> Sampled:
    """BASELINE and VARIANT numerics of the captured sample, every output compared bit for bit. Runs the
    graph directly on the capture's inputs (no Dynamo), so it may run on another thread while a capture
    runs on this one."""
    captured = sample.capture
    gm, program = captured.graph.gm, captured.graph.program
    cone, keep = cone_run(gm, stale, program)
    copies = writes_inputs(gm)
    seeded: list[bool] = []

    def materialize(position: int, meta: torch.Tensor, *, rows: torch.Tensor | None = None) -> torch.Tensor:
        """A meta graph input's values (or the ``rows`` of them a lookup reads): the real input it stands
        for, else seeded values (a weight)."""
        if id(meta) in captured.real_inputs:
            real = captured.real_inputs[id(meta)]
            if rows is not None:
                return real[rows]
            return real.clone() if copies else real  # each run writes into its own copy
        seeded.append(True)
        return seeded_like(meta, position) if rows is None else seeded_rows(meta, position, rows)

    lazy = materialize if captured.weightless else None
    args = captured.graph_args
    experts = ExpertCounts(program)
    with torch.no_grad():
        base = run_graph(gm, program, [_copy(a) for a in args] if copies else args, {}, keep=keep, materialize=lazy,
                         observe=experts)
        variant = run_graph(gm, program, args, stale, only=cone, given=base.kept, materialize=lazy) if cone else base
    names = tuple(f"output[{i}]" for i in range(len(base.outputs)))
    mismatches = tuple(compare_outputs(list(names), base.outputs, variant.outputs))
    kernels = base.kernels_run + (variant.kernels_run if cone else 0)
    return Sampled(sample.layers, names, mismatches, kernels, "seeded" if seeded else "model", experts.shares())


def _copy(value: Any) -> Any:
    """A copy of a real input a graph writes into; a meta one is materialized afresh on each run."""
    return value.clone() if isinstance(value, torch.Tensor) and not value.is_meta else value
