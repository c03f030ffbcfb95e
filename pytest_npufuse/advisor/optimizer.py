"""The fused-optimizer entry of the affinity catalogue: a step's optimizer graph, and what it costs
written with torch_npu's fused optimizer.

A compiled ``torch.optim`` step (``foreach=True``) is one ``_foreach_*`` kernel per step of the update
over a list of every parameter, plus a ``copy_`` writing each updated parameter and state tensor back
and ``full_like`` fills of its scalars. torch_npu's fused optimizers (``NpuFusedAdamW`` ...) keep each
dtype's parameters, gradients and state in one combined buffer (``npu_combine_tensors``) and run each
step of the update as one element-wise kernel over it, in place. So the fused program is each
``_foreach_X`` kernel as one ``X`` kernel over the combined size, without the write-backs and fills.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch

from ..ir.program import Kernel, Program, TensorSpec
from ..target.catalog import OpCatalog
from ..vocabulary import Phase
from .catalogue import Tolerance, load_affinity_catalogue
from .rewrite import DataFlow, Match, NewKernel, substitute
from .verdict import compare_values

_DROPPED = ("aten::copy_", "aten::full_like")


def _foreach(kernel: Kernel) -> bool:
    return kernel.op_type.startswith("aten::_foreach_")


def find_optimizer(graph: DataFlow) -> Iterable[Match]:
    """The whole optimizer graph, when it is a ``foreach`` update (one occurrence per step)."""
    program = graph.program
    if program.phase == Phase.OPTIMIZER and any(_foreach(k) for k in program.kernels):
        yield Match(tuple(program.kernels))


def _combined(kernel: Kernel) -> NewKernel:
    """``kernel``'s ``_foreach_X`` as one ``X`` over the combined buffer of its list's tensors."""
    outputs = kernel.output_specs
    total = sum(math.prod(spec.shape) for spec in outputs)
    item = outputs[0].nbytes // max(1, math.prod(outputs[0].shape))
    flat = TensorSpec((total,), outputs[0].dtype, total * item)
    operands = max(1, round(len(kernel.input_specs) / max(1, len(outputs))))
    return NewKernel("aten::" + kernel.op_type.removeprefix("aten::_foreach_"), (flat,) * operands, flat)


def fused_optimizer(program: Program, catalog: OpCatalog) -> Program:
    """``program`` (an optimizer graph) as torch_npu's fused optimizer runs it."""
    matches = [
        (Match((kernel,)), [_combined(kernel)] if _foreach(kernel) else [])
        for kernel in program.kernels if _foreach(kernel) or kernel.op_type in _DROPPED
    ]
    return substitute(program, matches, catalog)


def suggests_fused_optimizer(optimizer_us: float, step_us: float, gain_us: float) -> bool:
    """The optimizer's kernels take a measurable share of the step (the catalogue's ``min_share_pct``)
    and the fused optimizer saves time."""
    share = 100.0 * optimizer_us / step_us if step_us > 0 else 0.0
    return gain_us > 0 and share >= load_affinity_catalogue().optimizer_min_share_pct


def optimizer_check(graph: DataFlow, match: Match, tolerance: Tolerance | None) -> str:
    """Two AdamW steps of ``torch.optim.AdamW(foreach=True)`` against torch_npu's ``NpuFusedAdamW`` on
    random parameters of the captured dtype: the fused optimizer's values, bit for bit or within the
    tolerance (torch's foreach AdamW updates the first moment with ``lerp``, torch_npu's with mul + add,
    so the last bit may differ)."""
    from ..torch_npu.optim import NpuFusedAdamW

    dtype = next((s.dtype for k in match.kernels for s in k.output_specs if s.dtype in ("float32", "float16")), None)
    if dtype is None:
        return "not checked: NpuFusedAdamW takes float32 or float16 parameters"
    gen = torch.Generator().manual_seed(0)
    shapes = [(64, 32), (32,), (16, 8)]
    start = [torch.randn(shape, generator=gen).to(getattr(torch, dtype)) for shape in shapes]
    grads = [[torch.randn(shape, generator=gen).to(getattr(torch, dtype)) for shape in shapes] for _ in range(2)]

    def run(make) -> list[torch.Tensor]:
        params = [torch.nn.Parameter(p.clone()) for p in start]
        optimizer = make(params)
        for step in grads:
            for param, grad in zip(params, step):
                if param.grad is None:
                    param.grad = grad.clone()
                else:  # in place, as a backward accumulates: the fused optimizer's grads are views of its buffer
                    param.grad.copy_(grad)
            optimizer.step()
        return [p.detach().clone() for p in params]

    plain = run(lambda params: torch.optim.AdamW(params, lr=1e-3, foreach=True))
    fused = run(lambda params: NpuFusedAdamW(params, lr=1e-3))
    flat = [torch.cat([p.flatten() for p in params]) for params in (plain, fused)]
    verdict = compare_values(*flat, tolerance)
    return f"{verdict} (two AdamW steps against NpuFusedAdamW)"
