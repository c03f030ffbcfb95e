"""The torch_npu ops ``torch_npu.onnx`` exports as standard operators: while an export runs they are
computed with torch ops that have ONNX translations, and outside one they are the ops themselves."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional, Sequence

import torch

from ... import torch_npu as package


def _layer_norm_eval(
    input: torch.Tensor, normalized_shape: Sequence[int], weight: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None, eps: float = 1e-05,
) -> torch.Tensor:
    return torch.layer_norm(input, normalized_shape, weight, bias, eps, False)


def _confusion_transpose(
    x: torch.Tensor, perm: Sequence[int], shape: Sequence[int], transpose_first: bool
) -> torch.Tensor:
    if transpose_first:
        return x.permute(*perm).contiguous().view(shape)
    return x.view(shape).permute(*perm)


DECOMPOSITIONS: dict[str, Callable[..., torch.Tensor]] = {
    "npu_layer_norm_eval": _layer_norm_eval,
    "npu_confusion_transpose": _confusion_transpose,
}


def decomposed(op: Callable[..., Any], decomposition: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    """``op``, computed by ``decomposition`` (given the arguments in ``op``'s order) while
    ``torch.onnx.export`` runs."""
    signature = inspect.signature(op)

    @functools.wraps(op)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.onnx.is_in_onnx_export():
            return op(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return decomposition(*bound.arguments.values())

    return run


def export_decomposed() -> None:
    """Re-bind each op of :data:`DECOMPOSITIONS` in the ``torch_npu`` package, as torch_npu.onnx does."""
    for name, decomposition in DECOMPOSITIONS.items():
        setattr(package, name, decomposed(getattr(package, name), decomposition))
