"""The affinity catalogue's fused-op forms: unfused sequences that one torch_npu op replaces (RotaryMul,
RmsNorm, ScaledMaskedSoftmax, SwiGlu, SiLU, Mish, FlashAttentionScore, MatmulAllReduce) and a transpose +
view (``npu_confusion_transpose``); how each is found among a program's kernels, the fused kernel that
replaces it, and the check of the fused op against the unfused form (docs/feature-docs.md#affinity-ops).
A fused op may round differently: its checks take the catalogue's documented tolerance."""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from ..ir.program import Kernel, TensorSpec
from .catalogue import Tolerance
from .rewrite import DataFlow, Match, NewKernel
from .verdict import compare_values, random_tensor


# --- unfused sequences a fused op replaces ---------------------------------------------------------------


def follow_chain(graph: DataFlow, start: Kernel, ops: Sequence[str]) -> list[Kernel] | None:
    """``start`` and then, for each op type in ``ops``, a consumer of the previous kernel of that type."""
    found = [start]
    for op in ops:
        nxt = next((k for k in graph.consumers(found[-1]) if k.op_type == op), None)
        if nxt is None:
            return None
        found.append(nxt)
    return found


def find_rotary(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.op_type == "aten::neg":
            chain = follow_chain(graph, kernel, ("aten::cat", "aten::mul", "aten::add"))
            if chain is not None:
                other = [p for p in graph.producers(chain[-1]) if p.op_type == "aten::mul" and p is not chain[2]]
                yield Match(tuple(sorted({*chain, *other}, key=lambda k: k.index)))




def find_softmax(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.op_type == "aten::_softmax":
            masks = [p for p in graph.producers(kernel) if p.op_type in ("aten::masked_fill", "aten::add", "aten::where")]
            scales = [p for m in masks for p in graph.producers(m) if p.op_type in ("aten::mul", "aten::div")]
            if masks and scales:
                yield Match((scales[0], masks[0], kernel))




# What may stand between the scores' matmul and the softmax: the scale, an additive mask, or a mask
# written in (masked_fill, where, or d2l's ``x[~mask] = value``, an IndexPutV2).
_SCORE_OPS = ("aten::mul", "aten::div", "aten::add", "aten::masked_fill", "aten::where", "aten::index_put")


def find_flash_attention(graph: DataFlow) -> Iterable[Match]:
    matmuls = ("aten::bmm", "aten::mm", "aten::baddbmm")
    for kernel in graph.program.kernels:
        if kernel.op_type != "aten::_softmax":
            continue
        before, seen = [], [kernel]
        while seen and not any(k.op_type in matmuls for k in before):
            seen = [p for k in seen for p in graph.producers(k) if p.op_type in (*matmuls, *_SCORE_OPS)]
            before += seen
        after = next((k for k in graph.consumers(kernel) if k.op_type in matmuls), None)
        if after is not None and any(k.op_type in matmuls for k in before):
            yield Match(tuple(sorted({*before, kernel, after}, key=lambda k: k.index)))


def find_matmul_all_reduce(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.op_type == "_c10d_functional::all_reduce":
            mm = next((p for p in graph.producers(kernel) if p.op_type in ("aten::mm", "aten::addmm")), None)
            if mm is not None:
                yield Match((mm, kernel))


def fused_replacement(op_type: str) -> Callable[[DataFlow, Match], list[NewKernel]]:
    """One fused kernel reading what the sequence read from outside and writing its result."""

    def replacement(graph: DataFlow, match: Match) -> list[NewKernel]:
        inside = {name for k in match.kernels for name in k.outputs}
        external = {name for k in match.kernels for name in k.inputs if name not in inside}
        specs = tuple(graph.spec(name) for name in sorted(external))
        return [NewKernel(op_type, specs, match.kernels[-1].output_specs[0])]

    return replacement


def rms_norm_check(graph: DataFlow, match: Match, tolerance: Tolerance | None) -> str:
    from ..torch_npu import npu_rms_norm

    x_spec = graph.input_specs(match.kernels[0])[0]
    gen = torch.Generator().manual_seed(0)
    x = random_tensor(x_spec, gen)
    gamma = torch.randn(x_spec.shape[-1], generator=gen).to(x.dtype)
    unfused = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma
    return compare_values(unfused, npu_rms_norm(x, gamma, 1e-6)[0], tolerance)


def rotary_check(graph: DataFlow, match: Match, tolerance: Tolerance | None) -> str:
    from ..torch_npu import npu_rotary_mul

    x_spec = next(k for k in match.kernels if k.op_type == "aten::cat").output_specs[0]
    gen = torch.Generator().manual_seed(0)
    x = random_tensor(x_spec, gen).reshape(1, 1, -1, x_spec.shape[-1])
    cos, sin = random_tensor(x_spec, gen).reshape(x.shape), random_tensor(x_spec, gen).reshape(x.shape)
    first, second = x.chunk(2, -1)
    unfused = x * cos + torch.cat((-second, first), -1) * sin
    return compare_values(unfused, npu_rotary_mul(x, cos, sin), tolerance)


def swiglu_check(graph: DataFlow, match: Match, tolerance: Tolerance | None) -> str:
    from ..torch_npu import npu_swiglu

    a_spec = graph.input_specs(match.kernels[0])[0]
    gen = torch.Generator().manual_seed(0)
    a, b = random_tensor(a_spec, gen), random_tensor(a_spec, gen)
    return compare_values(F.silu(a) * b, npu_swiglu(torch.cat((a, b), dim=-1)), tolerance)


def scaled_masked_softmax_check(graph: DataFlow, match: Match, tolerance: Tolerance | None) -> str:
    from ..torch_npu import npu_scaled_masked_softmax

    scores = match.kernels[-1].output_specs[0]
    if len(scores.shape) > 4:
        return "not checked: npu_scaled_masked_softmax takes 4-D scores"
    shape = (1,) * (4 - len(scores.shape)) + scores.shape
    gen = torch.Generator().manual_seed(0)
    x = random_tensor(TensorSpec(shape, scores.dtype, 0), gen)
    mask = torch.rand(1, 1, *shape[2:], generator=gen) > 0.5
    try:
        fused = npu_scaled_masked_softmax(x, mask, 0.125)
    except ValueError as exc:
        return f"not checked: the fused op does not take these scores ({exc})"
    unfused = torch.softmax((x * 0.125).masked_fill(mask, -10000.0), dim=-1)
    return f"{compare_values(unfused, fused, tolerance)} (mask filled with -10000, as the fused op does)"


def flash_attention_check(graph: DataFlow, match: Match, tolerance: Tolerance | None) -> str:
    from ..torch_npu import npu_fusion_attention

    first = match.kernels[0]
    q_spec, kt_spec = graph.input_specs(first)[:2]
    v_spec = graph.input_specs(match.kernels[-1])[-1]
    if not 3 <= len(q_spec.shape) <= 4 or q_spec.dtype not in ("float16", "bfloat16", "float32"):
        return "not checked: only [B, S, D] and [B, N, S, D] scores have a BNSD rewrite"
    four = (lambda shape: shape if len(shape) == 4 else (shape[0], 1, *shape[1:]))
    gen = torch.Generator().manual_seed(0)
    q = random_tensor(TensorSpec(four(q_spec.shape), q_spec.dtype, 0), gen)
    k = random_tensor(TensorSpec(four(kt_spec.shape), kt_spec.dtype, 0), gen).transpose(-1, -2)
    v = random_tensor(TensorSpec(four(v_spec.shape), v_spec.dtype, 0), gen)
    scale = 1.0 / math.sqrt(q.shape[-1])
    unfused = torch.softmax((q.float() @ k.float().transpose(-1, -2)) * scale, dim=-1) @ v.float()
    fused = npu_fusion_attention(q, k.contiguous(), v, q.shape[1], "BNSD", scale=scale)[0]
    return f"{compare_values(unfused.to(q.dtype), fused, tolerance)} (no mask)"


def matmul_all_reduce_check(graph: DataFlow, match: Match, tolerance: Tolerance | None) -> str:
    from ..numerics.exact import cube_matmul
    from ..torch_npu import npu_mm_all_reduce_base

    x_spec, w_spec = [s for s in graph.input_specs(match.kernels[0]) if len(s.shape) >= 2][:2]
    if x_spec.dtype not in ("float16", "bfloat16"):
        return f"not checked: npu_mm_all_reduce_base takes float16/bfloat16 x1, not {x_spec.dtype}"
    gen = torch.Generator().manual_seed(0)
    x, w = random_tensor(x_spec, gen), random_tensor(w_spec, gen)
    verdict = compare_values(cube_matmul(x, w), npu_mm_all_reduce_base(x, w, "world"), tolerance)
    return f"{verdict} on one rank (the all-reduce of the other ranks' partial products is not simulated)"




def silu_check(graph: DataFlow, match: Match, tolerance: Tolerance | None) -> str:
    from ..torch_npu import npu_silu

    x = random_tensor(graph.input_specs(match.kernels[0])[0], torch.Generator().manual_seed(0))
    return compare_values(x * torch.sigmoid(x), npu_silu(x), tolerance)


def mish_check(graph: DataFlow, match: Match, tolerance: Tolerance | None) -> str:
    from ..torch_npu import npu_mish

    x = random_tensor(graph.input_specs(match.kernels[0])[0], torch.Generator().manual_seed(0))
    return compare_values(x * torch.tanh(F.softplus(x)), npu_mish(x), tolerance)


# --- transpose + view -> npu_confusion_transpose -----------------------------------------------------------


def _permuted(graph: DataFlow, name: str) -> tuple[TensorSpec, TensorSpec] | None:
    """The viewed tensor and its permuted view when ``name`` is a view whose axes are those of the
    tensor it views in another order (a transpose or permute), of rank 3 or more."""
    base = graph.program.buffers[name].alias_of
    if base is None:
        return None
    view, stored = graph.spec(name), graph.spec(base)
    permutation = sorted(view.shape) == sorted(stored.shape) and view.shape != stored.shape
    return (stored, view) if permutation and len(view.shape) >= 3 else None


def find_confusion_transpose(graph: DataFlow) -> Iterable[Match]:
    """A copy of a permuted view (``.contiguous()`` / ``reshape``) read back, by a kernel or as an
    output, through a view of another rank: the transpose + view ``npu_confusion_transpose`` does in one op."""
    program = graph.program
    for kernel in program.kernels:
        if kernel.op_type != "aten::clone" or not kernel.inputs or _permuted(graph, kernel.inputs[0]) is None:
            continue
        rank, written = len(kernel.output_specs[0].shape), program.storage(kernel.outputs[0])
        read = [name for reader in graph.consumers(kernel) for name in reader.inputs]
        read += [name for name in program.outputs if name is not None]
        if any(program.storage(name) == written and len(graph.spec(name).shape) != rank for name in read):
            yield Match((kernel,))


def confusion_transpose_check(graph: DataFlow, match: Match, tolerance: Tolerance | None) -> str:
    from ..torch_npu import npu_confusion_transpose

    stored, view = _permuted(graph, match.kernels[0].inputs[0])
    if len(set(stored.shape)) != len(stored.shape):
        return "not checked: repeated axis sizes leave the permutation ambiguous"
    perm = tuple(stored.shape.index(size) for size in view.shape)
    x = random_tensor(stored, torch.Generator().manual_seed(0))
    shape = (view.shape[0], view.shape[1], math.prod(view.shape[2:]))
    unfused = x.permute(perm).contiguous().view(shape)
    return compare_values(unfused, npu_confusion_transpose(x, perm, shape, True), tolerance)
