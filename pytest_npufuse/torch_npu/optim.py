"""torch_npu's fused optimizers: ``torch_npu.optim.NpuFusedAdamW``.

torch_npu's fused optimizers (Ascend/pytorch ``torch_npu/optim/npu_fused_optim_base.py`` and
``npu_fused_adamw.py``) make the optimizer step a handful of kernels over one buffer instead of a dozen
per parameter: on their first step they copy every parameter of one dtype, and its gradient and state,
into one contiguous buffer (``npu_combine_tensors``) and make the parameters views of it; each step then
updates the whole buffer with AdamW's arithmetic, element by element. That is what the
"fused optimizer" rewrite of docs/feature-docs.md#affinity-ops buys on an NPU: launches, not arithmetic.

Here the same: the first step combines (eagerly, outside any compiled graph: it is a one-time layout
change, not part of a step's work, and ``torch.compile`` of the step traces only the update), every
later one updates the combined buffers. The arithmetic is torch_npu's, in its order, so a step's values
are those of the real optimizer on the same inputs.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Optional

import torch

from ..errors import OpArgumentError

__all__ = ["NpuFusedAdamW"]

_DTYPES = (torch.float32, torch.float16)


def _combine(tensors: list[torch.Tensor]) -> Optional[torch.Tensor]:
    """One contiguous buffer holding ``tensors``' values, each tensor made a view of its part (torch_npu's
    ``npu_combine_tensors``), or None for no tensors."""
    if not tensors:
        return None
    flat = torch.zeros(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device=tensors[0].device)
    offset = 0
    for tensor in tensors:
        part = flat[offset : offset + tensor.numel()]
        part.copy_(tensor.detach().reshape(-1))
        tensor.data = part.view_as(tensor)
        offset += tensor.numel()
    return flat


class NpuFusedAdamW(torch.optim.Optimizer):
    """AdamW over combined buffers, as ``torch_npu.optim.NpuFusedAdamW(params, lr=1e-3, betas=(0.9, 0.999),
    eps=1e-8, weight_decay=1e-2, amsgrad=False)``: float32 and float16 parameters only (one buffer per
    dtype); sparse gradients are refused; ``zero_grad(set_to_none=True)`` is refused, as torch_npu does,
    since the gradients are views of one buffer."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ) -> None:
        for name, value, ok in (
            ("lr", lr, lr >= 0.0), ("eps", eps, eps >= 0.0), ("betas[0]", betas[0], 0.0 <= betas[0] < 1.0),
            ("betas[1]", betas[1], 0.0 <= betas[1] < 1.0), ("weight_decay", weight_decay, weight_decay >= 0.0),
        ):
            if not ok:
                raise OpArgumentError(f"NpuFusedAdamW: invalid {name} {value!r}", op="NpuFusedAdamW", argument=name)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad))
        self.combined: list[list[dict[str, Any]]] = []

    def __getstate__(self) -> dict[str, Any]:
        """torch.optim.Optimizer pickles (and deep-copies) only its defaults, state and groups; the
        combined buffers go with them, so a copy's parameters stay views of the copy's buffer."""
        return {**super().__getstate__(), "combined": self.combined}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.combined = state.get("combined", [])

    @torch.compiler.disable
    def _combine_once(self) -> None:
        """torch_npu's first step: parameters, gradients and state combined per group and dtype."""
        if self.combined:
            return
        for group in self.param_groups:
            parts = []
            for dtype in _DTYPES:
                params = [p for p in group["params"] if p.grad is not None and p.dtype == dtype]
                if not params:
                    continue
                if any(p.grad.is_sparse for p in params):
                    raise OpArgumentError("NpuFusedAdamW does not support sparse gradients")
                parts.append({
                    "param": _combine(params),
                    "grad": _combine([p.grad for p in params]),
                    "exp_avg": _combine([torch.zeros_like(p) for p in params]),
                    "exp_avg_sq": _combine([torch.zeros_like(p) for p in params]),
                    "max_exp_avg_sq": _combine([torch.zeros_like(p) for p in params]) if group["amsgrad"] else None,
                    "step": 0,
                })
            bad = [p for p in group["params"] if p.grad is not None and p.dtype not in _DTYPES]
            if bad:
                raise OpArgumentError(
                    f"NpuFusedAdamW's parameters must be float32 or float16, got {bad[0].dtype} (torch_npu's rule)"
                )
            self.combined.append(parts)

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        loss = closure() if closure is not None else None
        self._combine_once()
        for group, parts in zip(self.param_groups, self.combined):
            for part in parts:
                self._update(group, part)
        return loss

    @staticmethod
    def _update(group: dict[str, Any], part: dict[str, Any]) -> None:
        """torch_npu's ``_group_step`` on one combined buffer."""
        param, grad, exp_avg, exp_avg_sq = part["param"], part["grad"], part["exp_avg"], part["exp_avg_sq"]
        beta1, beta2 = group["betas"]
        param.mul_(1 - group["lr"] * group["weight_decay"])
        part["step"] += 1
        bias_correction1 = 1 - beta1 ** part["step"]
        bias_correction2 = 1 - beta2 ** part["step"]
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        if group["amsgrad"]:
            torch.maximum(part["max_exp_avg_sq"], exp_avg_sq, out=part["max_exp_avg_sq"])
            denom = (part["max_exp_avg_sq"].sqrt() / math.sqrt(bias_correction2)).add_(group["eps"])
        else:
            denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(group["eps"])
        param.addcdiv_(exp_avg, denom, value=-group["lr"] / bias_correction1)

    def zero_grad(self, set_to_none: bool = False) -> None:
        if set_to_none:
            raise OpArgumentError(
                "set_to_none is not supported in fused optimizers (torch_npu's rule)",
                op=f"{type(self).__name__}.zero_grad", argument="set_to_none",
            )
        if not self.combined:
            super().zero_grad(set_to_none=False)
            return
        for parts in self.combined:
            for part in parts:
                part["grad"].zero_()
