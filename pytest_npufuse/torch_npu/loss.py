"""Loss ops: torch_npu's fused cross-entropy (log-softmax and NLL in one kernel) and its backward.

Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_cross_entropy_loss.md (formula, shapes, the
unsupported z-loss), op_plugin/python/meta/_meta_registrations.py (output shapes) and derivatives.yaml
(only ``loss`` is differentiated, through ``npu_cross_entropy_loss_backward``).
"""

from __future__ import annotations

import torch

from ..errors import OpArgumentError
from .checks import FLOAT_DTYPES, require_choice, require_dtype, require_shape
from .registry import Arguments, Derivative, Out, SampleCall, npu_op

REDUCTIONS = ("mean", "sum", "none")


def _check_targets(logits_shape: list, target: torch.Tensor, weight: torch.Tensor | None) -> None:
    require_dtype("target", target, (torch.int64,))
    require_shape("target", target, ((logits_shape[0],),))
    if weight is not None:
        require_dtype("weight", weight, (torch.float32,))
        require_shape("weight", weight, ((logits_shape[1],),))


def _cross_entropy_meta(call: Arguments) -> tuple[Out, Out, Out, Out]:
    x = call.input
    require_dtype("input", x, FLOAT_DTYPES)
    if x.dim() != 2 or x.shape[1] == 0:
        raise OpArgumentError(f"input has shape {list(x.shape)}; expected [N, C] with C > 0", argument="input")
    _check_targets(list(x.shape), call.target, call.weight)
    loss = [x.shape[0]] if call.reduction == "none" else [1]
    return Out(loss, x.dtype), Out(list(x.shape), x.dtype), Out(loss, x.dtype), Out([x.shape[0]], x.dtype)


def _class_weights(call: Arguments, classes: int) -> torch.Tensor:
    return torch.ones(classes) if call.weight is None else call.weight.to(torch.float32)


def _cross_entropy_kernel(call: Arguments) -> tuple[torch.Tensor, ...]:
    """``l_n = -w[y_n] log_softmax(x_n)[y_n]`` (0 where ``y_n`` is ignore_index), mixed with the smoothed
    term ``-sum_c w[c] log_softmax(x_n)[c] / C`` by ``label_smoothing`` as torch's CrossEntropyLoss does;
    ``mean`` divides by the summed weights of the kept targets. z-loss outputs are zeros (not supported)."""
    x, target = call.input, call.target
    log_prob = torch.log_softmax(x.to(torch.float32), dim=-1)
    weights = _class_weights(call, x.shape[1])
    kept = target != call.ignore_index
    safe = torch.where(kept, target, 0)
    target_weight = weights[safe] * kept
    nll = -log_prob.gather(1, safe[:, None])[:, 0] * target_weight
    smooth = -(log_prob * weights).sum(dim=-1) / x.shape[1] * kept
    losses = (1 - call.label_smoothing) * nll + call.label_smoothing * smooth
    if call.reduction == "mean":
        loss = (losses.sum() / target_weight.sum()).reshape(1)
    elif call.reduction == "sum":
        loss = losses.sum().reshape(1)
    else:
        loss = losses
    zeros = torch.zeros_like(loss, dtype=x.dtype)
    return loss.to(x.dtype), log_prob.to(x.dtype), zeros, x.new_zeros(x.shape[0])


def _cross_entropy_setup(ctx: object, call: Arguments, output: tuple) -> None:
    ctx.save_for_backward(output[1], call.target, call.weight, output[3])
    ctx.reduction, ctx.ignore_index = call.reduction, call.ignore_index
    ctx.label_smoothing, ctx.lse_scale = call.label_smoothing, call.lse_square_scale_for_zloss


def _cross_entropy_grad(ctx: object, grad_loss: torch.Tensor, _log_prob: object, grad_zloss: torch.Tensor,
                        _lse: object) -> tuple:
    """derivatives.yaml: ``input: npu_cross_entropy_loss_backward(grads[0], result1, target, weight, grads[1],
    result3, reduction, ignore_index, label_smoothing, lse_square_scale_for_zloss)``."""
    log_prob, target, weight, lse = ctx.saved_tensors
    dx = torch.ops.npu.npu_cross_entropy_loss_backward(
        grad_loss, log_prob, target, weight, grad_zloss, lse, ctx.reduction, ctx.ignore_index,
        ctx.label_smoothing, ctx.lse_scale,
    )
    return (dx,) + (None,) * 7


def _cross_entropy_samples() -> list[SampleCall]:
    """Four rows of six classes: the mean loss, and per-row losses with a class weight and smoothing."""
    logits = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    target = torch.tensor([0, 5, 2, 3])
    return [SampleCall((logits, target)),
            SampleCall((logits, target, torch.rand(6, generator=torch.Generator().manual_seed(1)) + 0.5),
                       {"reduction": "none", "label_smoothing": 0.1})]


@npu_op(
    meta=_cross_entropy_meta,
    kernel=_cross_entropy_kernel,
    derivative=Derivative(_cross_entropy_setup, _cross_entropy_grad),
    samples=_cross_entropy_samples,
)
def npu_cross_entropy_loss(call: Arguments) -> None:
    """Cross-entropy of logits ``input`` [N, C] against int64 ``target`` [N]: returns ``(loss, log_prob,
    zloss, lse_for_zloss)``, ``loss`` [1] (``mean``, ``sum``) or [N] (``none``) and ``log_prob`` [N, C] in
    input's dtype.

    Source: op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_cross_entropy_loss.md. ``weight`` is a
    float32 [C] per-class weight, ``ignore_index`` a label contributing nothing, ``label_smoothing`` in
    [0, 1). Computed in float32. The page marks the z-loss (``lse_square_scale_for_zloss``, ``return_zloss``)
    unsupported: both are refused, and ``zloss`` / ``lse_for_zloss`` are zeros of the meta's shapes.
    """
    require_choice("reduction", call.reduction, REDUCTIONS, "how the per-sample losses are reduced")
    if not 0 <= call.label_smoothing < 1:
        raise OpArgumentError(
            f"label_smoothing={call.label_smoothing}; it must be in [0.0, 1.0)", argument="label_smoothing"
        )
    if call.lse_square_scale_for_zloss != 0 or call.return_zloss:
        raise OpArgumentError(
            "lse_square_scale_for_zloss / return_zloss: the z-loss is not supported (the API page says so); "
            "pass 0.0 and False", argument="lse_square_scale_for_zloss"
        )


def _cross_entropy_backward_meta(call: Arguments) -> Out:
    log_prob = call.log_prob
    _check_targets(list(log_prob.shape), call.target, call.weight)
    expected = (log_prob.shape[0],) if call.reduction == "none" else (1,)
    require_shape("grad_loss", call.grad_loss, (expected,))
    return Out(list(log_prob.shape), log_prob.dtype)


def _cross_entropy_backward_kernel(call: Arguments) -> torch.Tensor:
    """d loss / d input: ``g_n (w-weighted) (softmax(x_n) - q_n)`` with ``q_n`` the smoothed one-hot target;
    ``g_n`` is the incoming gradient (divided by the summed kept weights for ``mean``)."""
    log_prob, target = call.log_prob.to(torch.float32), call.target
    classes = log_prob.shape[1]
    weights = torch.ones(classes) if call.weight is None else call.weight.to(torch.float32)
    kept = target != call.ignore_index
    safe = torch.where(kept, target, 0)
    target_weight = weights[safe] * kept
    grad = call.grad_loss.to(torch.float32)
    if call.reduction == "mean":
        grad = grad / target_weight.sum()
    per_sample = grad.expand(log_prob.shape[0]) if call.reduction != "none" else grad
    one_hot = torch.nn.functional.one_hot(safe, classes).to(torch.float32)
    smoothing = call.label_smoothing
    nll = (log_prob.exp() - one_hot) * target_weight[:, None]
    smooth = (log_prob.exp() * weights.sum() - weights) / classes * kept[:, None]
    return (per_sample[:, None] * ((1 - smoothing) * nll + smoothing * smooth)).to(call.log_prob.dtype)


def _cross_entropy_backward_samples() -> list[SampleCall]:
    """The mean loss's gradient from the forward's log-probabilities."""
    log_prob = torch.log_softmax(torch.randn(4, 6, generator=torch.Generator().manual_seed(2)), dim=1)
    return [SampleCall((torch.ones(1), log_prob, torch.tensor([0, 5, 2, 3])))]


@npu_op(meta=_cross_entropy_backward_meta, kernel=_cross_entropy_backward_kernel,
        samples=_cross_entropy_backward_samples)
def npu_cross_entropy_loss_backward(call: Arguments) -> None:
    """npu_cross_entropy_loss's gradient of ``input`` from ``loss``'s gradient and the forward's ``log_prob``.
    torch_npu's schema ``npu_cross_entropy_loss_backward(Tensor grad_loss, Tensor log_prob, Tensor target,
    Tensor? weight=None, Tensor? grad_zloss=None, Tensor? lse_for_zloss=None, str reduction='mean',
    int ignore_index=-100, float label_smoothing=0.0, float lse_square_scale_for_zloss=0.0) -> Tensor``;
    the z-loss terms are not supported, as in the forward."""
    require_choice("reduction", call.reduction, REDUCTIONS, "how the per-sample losses are reduced")
    if call.lse_square_scale_for_zloss != 0:
        raise OpArgumentError(
            "lse_square_scale_for_zloss: the z-loss is not supported; pass 0.0", argument="lse_square_scale_for_zloss"
        )
