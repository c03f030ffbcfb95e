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

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from ..frontend.backend import Capture
from ..frontend.repeat import Stack, layer_container, only_layers
from ..ir.program import Program
from ..numerics.compare import compare_outputs
from ..report.findings import Mismatch
from ..target.catalog import OpCatalog
from .graph import Execution, cone_run, run_graph, writes_inputs
from .seeded import seeded_like

# The racy reads of a program's VARIANT plan: what the chain's sanitizer run found for it.
StaleReads = Callable[[Program], Mapping[str, frozenset[str]]]


@dataclass(frozen=True)
class Sampled:
    """The computed layers (module paths), every output compared, the first difference of each that
    differs, and the kernels the numerics computed."""

    layers: tuple[str, ...]
    outputs: tuple[str, ...]
    mismatches: tuple[Mismatch, ...]
    kernels_executed: int
    weights: str


def sampled_layers(stack: Stack) -> tuple[int, ...]:
    """The first layer, the last, and the first of each kind neither of them is: e.g. (0, 60) for
    DeepSeek-V3, whose layer 0 is dense and layer 60 MoE."""
    size = len(stack.container)
    picked = {0, size - 1}
    for kind in stack.kinds():
        if not picked & set(kind):
            picked.add(kind[0])
    return tuple(sorted(picked))


def sample_numerics(
    model: Callable[..., Any], inputs: Sequence[Any], catalog: OpCatalog, stale_reads: StaleReads
) -> Sampled:
    """Compute and compare ``model`` with only its sampled layers in its stack (the whole model when it
    has no decoder stack): one capture, its BASELINE and its VARIANT."""
    stack = layer_container(model)
    if stack is None:
        run = _run(model, inputs, catalog, stale_reads)
        layers = ("model",)
    else:
        picks = sampled_layers(stack)
        with only_layers(stack, picks):
            run = _run(model, inputs, catalog, stale_reads)
        layers = tuple(f"{stack.path}.{index}" for index in picks)
    return Sampled(layers, run.names, tuple(compare_outputs(list(run.names), run.baseline, run.variant)), run.kernels,
                   "seeded" if run.seeded else "model")


@dataclass(frozen=True)
class _Run:
    names: tuple[str, ...]
    baseline: list[Any]
    variant: list[Any]
    kernels: int
    seeded: bool


def _run(model: Callable[..., Any], inputs: Sequence[Any], catalog: OpCatalog, stale_reads: StaleReads) -> _Run:
    """One capture of ``model`` as it stands (its sampled layers in its stack), computed twice: BASELINE
    and the VARIANT's racy cone, on the real tensors it has and seeded ones for its meta tensors."""
    torch._dynamo.reset()
    captured = Capture(model, inputs, catalog)
    gm, program = captured.graph.gm, captured.graph.program
    stale = stale_reads(program)
    cone, keep = cone_run(gm, stale, program)
    copies = writes_inputs(gm)
    seeded: list[bool] = []

    def materialize(position: int, meta: torch.Tensor) -> torch.Tensor:
        """A meta graph input's values: the real input it stands for, else seeded values (a weight)."""
        if id(meta) in captured.real_inputs:
            real = captured.real_inputs[id(meta)]
            return real.clone() if copies else real  # each run writes into its own copy
        seeded.append(True)
        return seeded_like(meta, position)

    def execute(args: list[Any]) -> _Both:
        lazy = materialize if captured.weightless else None
        base = run_graph(gm, program, [_copy(a) for a in args] if copies else args, {}, keep=keep, materialize=lazy)
        if not cone:
            return _Both(base.outputs, base)
        return _Both(base.outputs, base, run_graph(gm, program, args, stale, only=cone, given=base.kept, materialize=lazy))

    _, both = captured.run(captured.inputs, execute)
    variant = both.variant or both.baseline
    kernels = both.baseline.kernels_run + (both.variant.kernels_run if both.variant else 0)
    return _Run(tuple(f"output[{i}]" for i in range(len(both.outputs))), both.outputs, variant.outputs, kernels, any(seeded))


@dataclass(frozen=True)
class _Both:
    """What one call of the sampled graph computed: the BASELINE run (whose flat ``outputs`` the capture
    hands back to the model's code) and the VARIANT's cone run, if it has a cone."""

    outputs: list[Any]
    baseline: Execution
    variant: Execution | None = None


def _copy(value: Any) -> Any:
    """A copy of a real input a graph writes into; a meta one is materialized afresh on each run."""
    return value.clone() if isinstance(value, torch.Tensor) and not value.is_meta else value
