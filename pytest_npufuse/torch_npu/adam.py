"""``torch_npu.npu_apply_adam_w``: one AdamW step of a parameter, its moments updated in place.

torch_npu binds the op to its ``.out`` overload only: ``npu_apply_adam_w(beta1_power, beta2_power, lr,
weight_decay, beta1, beta2, epsilon, grad, max_grad_norm, amsgrad, maximize, out=(var, m, v))`` updates
``var``, ``m`` and ``v`` and returns them; the overload without ``out`` raises "npu_apply_adam_w is not
implemented for Tensor" (op-plugin ``ApplyAdamWKernelNpuOpApi.cpp``), as it has nothing to update.

The registered op takes ``var``, ``m`` and ``v`` as keyword-only inputs and returns their new values (one
functional node a traced graph holds, as functionalisation of the ``.out`` form leaves); the public
callable takes ``out=`` and writes the new values back into those tensors.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from ..errors import OpArgumentError
from ..gaps import user_line
from .checks import require_dtype, require_shape
from .registry import Arguments, Out, SampleCall, npu_op

ADAM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _adam_meta(call: Arguments) -> tuple[Out, Out, Out]:
    var = call.var
    require_dtype("var", var, ADAM_DTYPES)
    for name in ("m", "v", "grad", "max_grad_norm"):
        tensor = getattr(call, name)
        if tensor is None:
            continue
        require_dtype(name, tensor, (var.dtype,), "(var's dtype)")
        require_shape(name, tensor, (tuple(var.shape),))
    return Out(list(var.shape), var.dtype), Out(list(var.shape), var.dtype), Out(list(var.shape), var.dtype)


def _adam_kernel(call: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The golden of op-plugin test/test_base_ops/test_apply_adam_w.py (cpu_op_exec), in float32 with one
    rounding of each output to var's dtype."""
    var, m, v, grad = (t.to(torch.float32) for t in (call.var, call.m, call.v, call.grad))
    beta1, beta2, lr = float(call.beta1), float(call.beta2), float(call.lr)
    gt = -grad if call.maximize else grad
    m_out = m * beta1 - (beta1 - 1) * gt
    v_out = v * beta2 - (beta2 - 1) * gt * gt
    decayed = var * (1 - lr * float(call.weight_decay))
    beta1_power, beta2_power = float(call.beta1_power) * beta1, float(call.beta2_power) * beta2
    second = torch.maximum(call.max_grad_norm.to(torch.float32), v_out) if call.amsgrad else v_out
    denom = torch.sqrt(second / (1 - beta2_power)) + float(call.epsilon)
    var_out = decayed + (-lr * m_out / (1 - beta1_power)) / denom
    return tuple(t.to(call.var.dtype) for t in (var_out, m_out, v_out))


def _adam_samples() -> list[SampleCall]:
    """A float32 step, and an amsgrad bfloat16 step that maximizes."""
    gen = torch.Generator().manual_seed(0)
    state = [torch.rand(4, 6, generator=gen) for _ in range(5)]
    bf16 = [t.bfloat16() for t in state]
    scalars = (0.9, 0.99, 1e-3, 1e-2, 0.9, 0.999, 1e-8)
    return [
        SampleCall((*scalars, state[3], None, False, False), {"var": state[0], "m": state[1], "v": state[2]}),
        SampleCall((*scalars, bf16[3], bf16[4], True, True), {"var": bf16[0], "m": bf16[1], "v": bf16[2]}),
    ]


def npu_apply_adam_w(call: Arguments) -> None:
    """One AdamW step (op-plugin test_apply_adam_w.py golden; CANN ApplyAdamW), ``g = -grad`` if
    ``maximize`` else ``grad``:

    ``m' = beta1 m - (beta1 - 1) g``, ``v' = beta2 v - (beta2 - 1) g^2``,
    ``var' = var (1 - lr wd) - lr m' / (1 - beta1_power beta1) / (sqrt(s / (1 - beta2_power beta2)) + eps)``
    with ``s = max(max_grad_norm, v')`` under ``amsgrad`` (which needs ``max_grad_norm``), else ``v'``.
    The powers are the previous step's: the op multiplies them by the betas. var, m, v, grad (and
    max_grad_norm) share var's shape and dtype, float32, float16 or bfloat16; math is float32.

    Source: op-plugin op_plugin_functions.yaml ``npu_apply_adam_w.out`` (the form torch_npu runs),
    ApplyAdamWKernelNpuOpApi.cpp (amsgrad needs max_grad_norm) and test/test_base_ops/test_apply_adam_w.py.
    """
    if call.amsgrad and call.max_grad_norm is None:
        raise OpArgumentError("amsgrad=True needs max_grad_norm (the running maximum of v), as torch_npu checks",
                              argument="max_grad_norm")


_step = npu_op(meta=_adam_meta, kernel=_adam_kernel, writes_back={"var": 0, "m": 1, "v": 2},
               samples=_adam_samples)(npu_apply_adam_w)


def _apply_adam_w_out(*args: Any, out: Optional[Sequence[torch.Tensor]] = None,
                      **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torch_npu.npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad,
    max_grad_norm, amsgrad, maximize, *, out=(var, m, v)): one AdamW step written into
    ``out``'s tensors, which it returns (:func:`npu_apply_adam_w` gives the formula)."""
    if out is None or len(out) != 3 or not all(isinstance(t, torch.Tensor) for t in out):
        raise OpArgumentError(
            "npu_apply_adam_w is not implemented for Tensor: pass out=(var, m, v), the tensors the step updates "
            "(torch_npu runs only the op's .out form)", op="npu_apply_adam_w", argument="out",
            where=user_line() or None,
        )
    var, m, v = out
    return _step(*args, var=var, m=m, v=v, **kwargs)


_apply_adam_w_out.__name__ = _apply_adam_w_out.__qualname__ = "npu_apply_adam_w"
