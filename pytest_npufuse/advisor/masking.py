"""The masking and indexing forms of docs/feature-docs.md#affinity-ops: IndexPutV2 (``x[mask] = v``, and the backward of
advanced indexing), the sum of the rows ``nonzero`` picks, and a ``torch.where`` between the two values its
condition compares; how each is found among a program's kernels, its rewrite's kernels, and the check of
the rewrite's numerics (gradients included: each changes the backward)."""

from __future__ import annotations

import math
from typing import Iterable

import torch

from ..ir.program import Kernel, TensorSpec
from ..numerics.exact import one_thread
from .rewrite import DataFlow, Match, NewKernel
from .verdict import compare_values, compare_with_grads, random_tensor, spec_like

# --- IndexPutV2 -> masked_fill -----------------------------------------------------------------------


def find_index_put(graph: DataFlow) -> Iterable[Match]:
    return (Match((k,)) for k in graph.program.kernels if k.op_type == "aten::index_put")


def index_put_replacement(graph: DataFlow, match: Match) -> list[NewKernel]:
    """A boolean mask becomes ``masked_fill`` (SelectV2); integer indices (advanced indexing, whose
    backward accumulates with IndexPutV2) become ``index_select`` on the flattened rows, whose backward
    is ``index_add`` (InplaceScatterAdd), so the IndexPutV2 of that line is an index_add."""
    kernel = match.kernels[0]
    specs = tuple(graph.input_specs(kernel))
    op_type = "aten::where" if any(spec.dtype == "bool" for spec in specs[1:]) else "aten::index_add"
    return [NewKernel(op_type, specs, kernel.output_specs[0])]


def index_put_check(graph: DataFlow, match: Match) -> str:
    """The rewrite's values and its input's gradient against IndexPutV2's, on random data of the
    captured shapes."""
    specs = graph.input_specs(match.kernels[0])
    target = specs[0]
    mask = next((s for s in specs[1:] if s.dtype == "bool" and s.shape == target.shape), None)
    gen = torch.Generator().manual_seed(0)
    if mask is not None:
        values = random_tensor(target, gen).float().requires_grad_()
        where = torch.rand(target.shape, generator=gen) > 0.5
        original = values.clone()
        original[where] = 0
        return compare_with_grads(values, original, values.masked_fill(where, 0), gen)
    indexed = sum(s.dtype in ("int64", "int32") for s in specs[1:])
    if not 0 < indexed < len(target.shape):
        return "not checked (a bool mask, or integer indices into the leading axes, have a documented rewrite)"
    # k index tensors into the leading k axes address rows of the tensor flattened to [rows, the rest]
    lead = target.shape[:indexed]
    flat = (math.prod(lead), math.prod(target.shape[indexed:]))
    rows = torch.randint(0, flat[0], (max(1, flat[0] // 2),), generator=gen)
    updates = random_tensor(TensorSpec((rows.numel(), flat[1]), target.dtype, 0), gen).float()
    base = random_tensor(TensorSpec(flat, target.dtype, 0), gen).float()
    with one_thread():  # CPU index_put/index_add accumulate repeated rows in a thread-dependent order
        original = base.view(target.shape).index_put(
            torch.unravel_index(rows, lead), updates.view(rows.numel(), *target.shape[indexed:]), accumulate=True
        )
        rewritten = base.index_add(0, rows, updates)
    verdict = compare_values(original.view(flat), rewritten)
    return f"{verdict} (accumulating rows; repeated rows may add in another order)"


# --- Nonzero + indexing + sum -> a 0/1 mask multiplied in ---------------------------------------------


def find_nonzero_sum(graph: DataFlow) -> Iterable[Match]:
    """``x[torch.nonzero(mask).squeeze(1)].sum()``: the guide's documented form (the sum of the picked
    elements), where the picked elements feed nothing but the sum."""
    for kernel in graph.program.kernels:
        if kernel.op_type != "aten::nonzero":
            continue
        for index in graph.consumers(kernel):
            readers = graph.consumers(index) if index.op_type == "aten::index" else []
            if len(readers) == 1 and readers[0].op_type == "aten::sum":
                yield Match((kernel, index, readers[0]))


def _nonzero_specs(graph: DataFlow, match: Match) -> tuple[TensorSpec, TensorSpec]:
    """The mask nonzero reads and the tensor the indices pick from."""
    nonzero, index, _ = match.kernels
    (mask,) = graph.input_specs(nonzero)
    source = next(s for s in graph.input_specs(index) if s.dtype not in ("int64", "int32"))
    return mask, source


def nonzero_replacement(graph: DataFlow, match: Match) -> list[NewKernel]:
    mask, source = _nonzero_specs(graph, match)
    weights = spec_like(mask.shape, source.dtype, source)
    return [
        NewKernel("aten::_to_copy", (mask,), weights),
        NewKernel("aten::mul", (source, weights), source),
        NewKernel("aten::sum", (source,), match.kernels[-1].output_specs[0]),
    ]


def nonzero_check(graph: DataFlow, match: Match) -> str:
    mask, source = _nonzero_specs(graph, match)
    if mask.shape != source.shape[: len(mask.shape)] or len(mask.shape) != 1:
        return "not checked (the guide's rewrite is for a 1-D mask over the tensor's first axis)"
    gen = torch.Generator().manual_seed(0)
    values = random_tensor(source, gen).float().requires_grad_()
    picks = torch.rand(mask.shape, generator=gen) > 0.5
    weights = picks.to(values.dtype).view(-1, *[1] * (len(source.shape) - 1))
    original = values[torch.nonzero(picks, as_tuple=False).squeeze(1)].sum()
    return compare_with_grads(values, original, (values * weights).sum(), gen)


# --- where of a comparison of its own operands -> lerp --------------------------------------------------

_COMPARISONS = ("aten::lt", "aten::gt", "aten::le", "aten::ge")


def _comparison(graph: DataFlow, select: Kernel) -> Kernel | None:
    """The comparison writing ``select``'s condition when it compares the two values ``select`` picks
    between (``torch.where(x < y, y, x)``, the form the guide rewrites with ``torch.lerp``)."""
    if select.op_type != "aten::where" or len(select.inputs) != 3:
        return None
    compare = graph.program.producer(select.inputs[0])
    if compare is None or compare.op_type not in _COMPARISONS or len(compare.inputs) != 2:
        return None
    values = {graph.program.storage(name) for name in select.inputs[1:]}
    compared = {graph.program.storage(name) for name in compare.inputs}
    return compare if len(values) == 2 and compared == values else None


def find_where_compare(graph: DataFlow) -> Iterable[Match]:
    return (Match((k,)) for k in graph.program.kernels if _comparison(graph, k) is not None)


def where_replacement(graph: DataFlow, match: Match) -> list[NewKernel]:
    """The comparison stays (its 0/1 result becomes lerp's weight); the select becomes a cast of the
    condition to the values' dtype and one Lerp."""
    (select,) = match.kernels
    condition, chosen, other = graph.input_specs(select)
    out = select.output_specs[0]
    weights = spec_like(condition.shape, out.dtype, out)
    return [NewKernel("aten::_to_copy", (condition,), weights), NewKernel("aten::lerp", (other, chosen, weights), out)]


def where_check(graph: DataFlow, match: Match) -> str:
    """``where(x < y, y, x)`` against ``lerp(x, y, (x < y).float())`` (or the captured comparison), the
    values and both operands' gradients, on random data of the captured shapes."""
    (select,) = match.kernels
    compare = _comparison(graph, select)
    _, chosen, other = graph.input_specs(select)
    gen = torch.Generator().manual_seed(0)
    a, b = random_tensor(chosen, gen).float().requires_grad_(), random_tensor(other, gen).float().requires_grad_()
    # the operand the comparison reads first decides the condition's sense
    chosen_first = graph.program.storage(compare.inputs[0]) == graph.program.storage(select.inputs[1])
    op = getattr(torch, compare.op_type.removeprefix("aten::"))
    condition = op(a, b) if chosen_first else op(b, a)
    original, rewritten = torch.where(condition, a, b), torch.lerp(b, a, condition.to(a.dtype))
    grad = torch.randn(original.shape, generator=gen)
    before = torch.autograd.grad(original, (a, b), grad)
    after = torch.autograd.grad(rewritten, (a, b), grad)
    values, grads = compare_values(original.detach(), rewritten.detach()), [compare_values(x, y) for x, y in zip(before, after)]
    if values == "bit-exact" and grads == ["bit-exact", "bit-exact"]:
        return "bit-exact (values and gradients)"
    return f"{values} (gradients {', '.join(grads)})"
