"""A rewrite's numerics against the captured form's, computed on the CPU at the captured shapes: the
verdict strings the affinity advisor's findings carry (``bit-exact``, or by how much they differ)."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ..ir.program import TensorSpec
from .catalogue import Tolerance


def spec_like(shape: Sequence[int], dtype: str, like: TensorSpec) -> TensorSpec:
    """A rewrite's tensor: ``shape`` and ``dtype``, sized with ``like``'s bytes per element."""
    item = like.nbytes // max(1, math.prod(like.shape)) if like.shape else max(1, like.nbytes)
    return TensorSpec(tuple(shape), dtype, math.prod(shape) * item)


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def compare_values(original: torch.Tensor, rewritten: torch.Tensor, tolerance: Tolerance | None = None) -> str:
    """``bit-exact`` or by how much the rewrite differs (max absolute difference); with a documented
    ``tolerance`` (a fused op that rounds differently), whether the difference stays within it."""
    if original.shape != rewritten.shape:
        return f"not bit-exact: shape {list(original.shape)} becomes {list(rewritten.shape)}"
    if torch.equal(original, rewritten):
        return "bit-exact"
    diff = (original.double() - rewritten.double()).abs().max().item()
    verdict = f"not bit-exact: max |diff| {diff:.3g}"
    return verdict if tolerance is None else f"{verdict}; {_within(original, rewritten, tolerance)}"


def _within(original: torch.Tensor, rewritten: torch.Tensor, tolerance: Tolerance) -> str:
    """The tolerance's verdict: mean and largest relative error against its per-dtype threshold."""
    dtype = str(rewritten.dtype).removeprefix("torch.")
    threshold = tolerance.thresholds.get(dtype)
    if threshold is None:
        return f"no documented tolerance for {dtype} ({tolerance.source})"
    golden = original.double()
    relative = (rewritten.double() - golden).abs() / (golden.abs() + 1e-7)
    mean, largest = relative.mean().item(), relative.max().item()
    inside = mean < threshold and largest < tolerance.max_factor * threshold
    word = "within" if inside else "OUTSIDE"
    return (
        f"{word} the documented tolerance (mean rel. err. {mean:.3g} < {threshold:.3g}, "
        f"max {largest:.3g} < {tolerance.max_factor * threshold:.3g} for {dtype}; {tolerance.source})"
    )


def random_tensor(spec: TensorSpec, gen: torch.Generator) -> torch.Tensor:
    """Normal random values of the captured shape and dtype, from ``gen`` (deterministic)."""
    return torch.randn(spec.shape, generator=gen).to(torch_dtype(spec.dtype))


def compare_with_grads(
    leaf: torch.Tensor, original: torch.Tensor, rewritten: torch.Tensor, gen: torch.Generator
) -> str:
    """:func:`compare_values` of the values and of ``leaf``'s gradient through each, for one random output gradient."""
    grad = torch.randn(original.shape, generator=gen)
    (before,) = torch.autograd.grad(original, leaf, grad)
    (after,) = torch.autograd.grad(rewritten, leaf, grad)
    values, grads = compare_values(original.detach(), rewritten.detach()), compare_values(before, after)
    if values == grads == "bit-exact":
        return "bit-exact (values and gradient)"
    return f"{values} (gradient {grads})"
