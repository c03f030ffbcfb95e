"""The affinity-op advisor: the NPU-affine rewrites of docs/feature-docs.md#affinity-ops, found in the captured graph
and priced.

The affinity-op guide (docs/feature-docs.md#affinity-ops) lists forms an Ascend NPU runs slowly and their replacements:
one_hot+sum -> zeros+scatter, ``nn.Linear`` -> ``addmm``, a bmm with output ``[b, 1, 1]`` -> a dot product,
``repeat_interleave`` with a scalar -> unsqueeze/expand/reshape, ``gather`` -> ``index_select`` /
indexing, IndexPutV2 -> ``masked_fill``, ``x[nonzero(mask)].sum()`` -> ``(x * mask).sum()``,
``where(x < y, y, x)`` -> ``lerp``, and unfused sequences that one fused op replaces (RotaryMul,
RmsNorm, ScaledMaskedSoftmax, SwiGlu, FlashAttentionScore, MatmulAllReduce).

Each pattern is declared once (:data:`PATTERNS`): how to find it among the captured kernels (op types,
the torch call Dynamo lowered them from, the data flow between them), the kernels of its rewrite, and
a check of the rewrite's numerics on CPU at the captured shapes. Every site (pattern and source line)
is priced on the target by building the rewritten program (the site's kernels replaced by the
rewrite's, everywhere the line runs) and simulating it against the captured one, with the cost rules
of the op catalog.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from ..ir.program import Kernel, Program, TensorSpec
from ..report.findings import Finding
from ..target.catalog import OpCatalog
from ..target.profile import HardwareProfile
from ..vocabulary import Phase
from .masking import (
    find_index_put,
    find_nonzero_sum,
    find_where_compare,
    index_put_check,
    index_put_replacement,
    nonzero_check,
    nonzero_replacement,
    where_check,
    where_replacement,
)
from .rewrite import DataFlow, Match, NewKernel, fuse, program_time, substitute
from .verdict import compare_values, compare_with_grads, random_tensor, spec_like, torch_dtype


@dataclass(frozen=True)
class Pattern:
    """One of the forms of docs/feature-docs.md#affinity-ops: how to find it, what replaces it, and how the rewrite's
    numerics compare."""

    name: str
    rewrite: str
    find: Callable[[DataFlow], Iterable[Match]]
    replacement: Callable[[DataFlow, Match], list[NewKernel]]
    check: Callable[[DataFlow, Match], str]
    note: str = ""
    grad_op: str = ""
    """In a training step, the op the backward kernels of a site's lines become with the rewrite (a fused
    op's Grad kernel, index_add for index_select); empty when the pattern's own search finds its backward
    kernels (IndexPutV2) or the rewrite leaves the backward as it is."""


# --- one_hot + sum -> zeros + scatter --------------------------------------------------------------


def _find_one_hot_sum(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.op_type == "aten::sum" and any(p.call == "one_hot" for p in graph.producers(kernel)):
            line = next(p.source for p in graph.producers(kernel) if p.call == "one_hot")
            parts = [k for k in graph.program.kernels if k.call == "one_hot" and k.source == line and k.index < kernel.index]
            yield Match((*parts, kernel))


def _one_hot_shapes(graph: DataFlow, match: Match) -> tuple[TensorSpec, int, TensorSpec]:
    eq = next(k for k in match.kernels if k.op_type == "aten::eq")
    index = next(s for s in graph.input_specs(eq) if len(s.shape) >= 2)
    classes = eq.output_specs[0].shape[-1]
    return index, classes, match.kernels[-1].output_specs[0]


def _one_hot_replacement(graph: DataFlow, match: Match) -> list[NewKernel]:
    index, _, out = _one_hot_shapes(graph, match)
    zeros = NewKernel("aten::zeros", (), out)
    return [zeros, NewKernel("aten::scatter", (out, index), out)]


def _one_hot_check(graph: DataFlow, match: Match) -> str:
    index, classes, _ = _one_hot_shapes(graph, match)
    rows, picks = math.prod(index.shape[:-1]), index.shape[-1]
    gen = torch.Generator().manual_seed(0)
    distinct = torch.rand(rows, classes, generator=gen).argsort(-1)[:, :picks]
    original = F.one_hot(distinct, classes).sum(dim=1)
    rewritten = torch.zeros(rows, classes, dtype=original.dtype).scatter_(-1, distinct, 1)
    verdict = compare_values(original, rewritten)
    return f"{verdict} for distinct indices per row (top-k routing); a repeated index counts once after the rewrite"


# --- nn.Linear -> addmm -----------------------------------------------------------------------------


def _find_linear(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.call in ("Linear", "linear") and kernel.op_type in ("aten::addmm", "aten::mm", "aten::linear"):
            yield Match((kernel,))


def _same_kernels(graph: DataFlow, match: Match) -> list[NewKernel]:
    return [NewKernel(k.op_type, tuple(graph.input_specs(k)), k.output_specs[0]) for k in match.kernels]


def _linear_check(graph: DataFlow, match: Match) -> str:
    specs = graph.input_specs(match.kernels[0])
    matrices = [s for s in specs if len(s.shape) == 2]
    if len(matrices) != 2:
        return "not checked"
    (m, k), (_, n) = matrices[0].shape, matrices[1].shape
    gen = torch.Generator().manual_seed(0)
    dtype = torch_dtype(matrices[0].dtype)
    x = torch.randn(min(m, 64), k, generator=gen).to(dtype)
    weight = torch.randn(n, k, generator=gen).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype)
    return compare_values(F.linear(x, weight, bias), torch.addmm(bias, x, weight.t()))


# --- bmm with an output [b, 1, 1] -> dot product ---------------------------------------------------------


def _find_bmm_b11(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.op_type in ("aten::bmm", "aten::baddbmm") and kernel.output_specs[0].shape[-2:] == (1, 1):
            yield Match((kernel,))


def _shared_rhs(graph: DataFlow, kernel: Kernel) -> bool:
    """The right operand is one ``[n, 1]`` matrix broadcast over the batch (an expand of it): the
    case of docs/feature-docs.md#affinity-ops, where b merges into the rows of one MatMul."""
    rhs = graph.spec(kernel.inputs[-1])
    stored = graph.spec(graph.program.storage(kernel.inputs[-1]))
    return math.prod(stored.shape) == math.prod(rhs.shape[-2:]) < math.prod(rhs.shape)


def _bmm_replacement(graph: DataFlow, match: Match) -> list[NewKernel]:
    """The guide's rewrite (docs/feature-docs.md#affinity-ops): a shared ``[n, 1]`` right operand merges b into M (one
    MatMul ``[b, n] x [n, 1]``); per-batch vectors become a dot product (mul + sum)."""
    kernel = match.kernels[0]
    a, b = graph.input_specs(kernel)[-2:]
    out = kernel.output_specs[0]
    rows = spec_like((a.shape[0], a.shape[-1]), a.dtype, a)
    if _shared_rhs(graph, kernel):
        return [NewKernel("aten::mm", (rows, spec_like(b.shape[-2:], b.dtype, b)), spec_like((a.shape[0], 1), out.dtype, out))]
    return [NewKernel("aten::mul", (rows, rows), rows), NewKernel("aten::sum", (rows,), out)]


def _bmm_check(graph: DataFlow, match: Match) -> str:
    kernel = match.kernels[0]
    a_spec, b_spec = graph.input_specs(kernel)[-2:]
    gen = torch.Generator().manual_seed(0)
    a = random_tensor(a_spec, gen)
    if _shared_rhs(graph, kernel):
        w = random_tensor(TensorSpec(b_spec.shape[-2:], b_spec.dtype, 0), gen)
        merged = (a.view(a.shape[0], -1) @ w).view(-1, 1, 1)
        return compare_values(torch.bmm(a, w.expand(a.shape[0], -1, -1)), merged)
    b = random_tensor(b_spec, gen)
    dot = (a.squeeze(-2) * b.squeeze(-1)).sum(-1).view(-1, 1, 1)
    return compare_values(torch.bmm(a, b), dot)


# --- repeat_interleave with a scalar -> unsqueeze / expand / reshape ------------------------------------


def _find_repeat_interleave(graph: DataFlow) -> Iterable[Match]:
    lines: dict[str, list[Kernel]] = {}
    for kernel in graph.program.kernels:
        if kernel.call == "repeat_interleave":
            lines.setdefault(kernel.source, []).append(kernel)
    for kernels in lines.values():
        if all(k.op_type != "aten::repeat_interleave" for k in kernels):
            yield Match(tuple(kernels))


def _repeat_check(graph: DataFlow, match: Match) -> str:
    out = match.kernels[-1].output_specs[0]
    source = graph.input_specs(match.kernels[0])[0]
    repeats = max(1, math.prod(out.shape) // max(1, math.prod(source.shape)))
    values = torch.arange(math.prod(source.shape))
    expanded = values.unsqueeze(-1).expand(-1, repeats).reshape(-1)
    return compare_values(torch.repeat_interleave(values, repeats), expanded)


# --- gather -> index_select / indexing -------------------------------------------------------------------


def _find_gather(graph: DataFlow) -> Iterable[Match]:
    return (Match((k,)) for k in graph.program.kernels if k.op_type == "aten::gather")


def _gather_replacement(graph: DataFlow, match: Match) -> list[NewKernel]:
    kernel = match.kernels[0]
    specs = tuple(graph.input_specs(kernel))
    op = "aten::index_select" if len(specs[0].shape) == 1 else "aten::index"
    return [NewKernel(op, specs, kernel.output_specs[0])]


def _gather_check(graph: DataFlow, match: Match) -> str:
    source, index = graph.input_specs(match.kernels[0])[:2]
    gen = torch.Generator().manual_seed(0)
    values = random_tensor(source, gen).float().requires_grad_()
    if len(source.shape) == 1:
        picks = torch.randint(0, source.shape[0], index.shape, generator=gen)
        return compare_with_grads(values, values.gather(0, picks), torch.index_select(values, 0, picks), gen)
    if len(source.shape) == 2 and index.shape[1:] == (1,):
        picks = torch.randint(0, source.shape[1], index.shape, generator=gen)
        rows = torch.arange(source.shape[0])
        return compare_with_grads(values, values.gather(1, picks).view(-1), values[rows, picks.squeeze(1)], gen)
    return "not checked (only 1-D and row-wise gathers have a documented rewrite)"

# --- unfused sequences a fused op replaces ---------------------------------------------------------------


def _chain(graph: DataFlow, start: Kernel, ops: Sequence[str]) -> list[Kernel] | None:
    """``start`` and then, for each op type in ``ops``, a consumer of the previous kernel of that type."""
    found = [start]
    for op in ops:
        nxt = next((k for k in graph.consumers(found[-1]) if k.op_type == op), None)
        if nxt is None:
            return None
        found.append(nxt)
    return found


def _find_rotary(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.op_type == "aten::neg":
            chain = _chain(graph, kernel, ("aten::cat", "aten::mul", "aten::add"))
            if chain is not None:
                other = [p for p in graph.producers(chain[-1]) if p.op_type == "aten::mul" and p is not chain[2]]
                yield Match(tuple(sorted({*chain, *other}, key=lambda k: k.index)))


def _find_rms_norm(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.op_type == "aten::pow":
            chain = _chain(graph, kernel, ("aten::mean", "aten::add", "aten::rsqrt", "aten::mul"))
            if chain is not None:
                scale = next((k for k in graph.consumers(chain[-1]) if k.op_type == "aten::mul"), None)
                yield Match(tuple(chain + ([scale] if scale is not None else [])))


def _find_softmax(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.op_type == "aten::_softmax":
            masks = [p for p in graph.producers(kernel) if p.op_type in ("aten::masked_fill", "aten::add", "aten::where")]
            scales = [p for m in masks for p in graph.producers(m) if p.op_type in ("aten::mul", "aten::div")]
            if masks and scales:
                yield Match((scales[0], masks[0], kernel))


def _find_swiglu(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.op_type == "aten::silu":
            product = next((k for k in graph.consumers(kernel) if k.op_type == "aten::mul"), None)
            if product is not None:
                yield Match((kernel, product))


def _find_flash_attention(graph: DataFlow) -> Iterable[Match]:
    matmuls = ("aten::bmm", "aten::mm", "aten::baddbmm")
    for kernel in graph.program.kernels:
        if kernel.op_type != "aten::_softmax":
            continue
        before, seen = [], [kernel]
        while seen and not any(k.op_type in matmuls for k in before):
            seen = [p for k in seen for p in graph.producers(k) if p.op_type in (*matmuls, "aten::mul", "aten::div", "aten::add", "aten::masked_fill")]
            before += seen
        after = next((k for k in graph.consumers(kernel) if k.op_type in matmuls), None)
        if after is not None and any(k.op_type in matmuls for k in before):
            yield Match(tuple(sorted({*before, kernel, after}, key=lambda k: k.index)))


def _find_matmul_all_reduce(graph: DataFlow) -> Iterable[Match]:
    for kernel in graph.program.kernels:
        if kernel.op_type == "_c10d_functional::all_reduce":
            mm = next((p for p in graph.producers(kernel) if p.op_type in ("aten::mm", "aten::addmm")), None)
            if mm is not None:
                yield Match((mm, kernel))


def _fused(op_type: str) -> Callable[[DataFlow, Match], list[NewKernel]]:
    """One fused kernel reading what the sequence read from outside and writing its result."""

    def replacement(graph: DataFlow, match: Match) -> list[NewKernel]:
        inside = {name for k in match.kernels for name in k.outputs}
        external = {name for k in match.kernels for name in k.inputs if name not in inside}
        specs = tuple(graph.spec(name) for name in sorted(external))
        return [NewKernel(op_type, specs, match.kernels[-1].output_specs[0])]

    return replacement


def _rms_norm_check(graph: DataFlow, match: Match) -> str:
    from ..torch_npu import npu_rms_norm

    x_spec = graph.input_specs(match.kernels[0])[0]
    gen = torch.Generator().manual_seed(0)
    x = random_tensor(x_spec, gen)
    gamma = torch.randn(x_spec.shape[-1], generator=gen).to(x.dtype)
    unfused = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma
    return compare_values(unfused, npu_rms_norm(x, gamma, 1e-6)[0])


def _rotary_check(graph: DataFlow, match: Match) -> str:
    from ..torch_npu import npu_rotary_mul

    x_spec = next(k for k in match.kernels if k.op_type == "aten::cat").output_specs[0]
    gen = torch.Generator().manual_seed(0)
    x = random_tensor(x_spec, gen).reshape(1, 1, -1, x_spec.shape[-1])
    cos, sin = random_tensor(x_spec, gen).reshape(x.shape), random_tensor(x_spec, gen).reshape(x.shape)
    first, second = x.chunk(2, -1)
    unfused = x * cos + torch.cat((-second, first), -1) * sin
    return compare_values(unfused, npu_rotary_mul(x, cos, sin))


def _swiglu_check(graph: DataFlow, match: Match) -> str:
    from ..torch_npu import npu_swiglu

    a_spec = graph.input_specs(match.kernels[0])[0]
    gen = torch.Generator().manual_seed(0)
    a, b = random_tensor(a_spec, gen), random_tensor(a_spec, gen)
    return compare_values(F.silu(a) * b, npu_swiglu(torch.cat((a, b), dim=-1)))


def _scaled_masked_softmax_check(graph: DataFlow, match: Match) -> str:
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
    return f"{compare_values(unfused, fused)} (mask filled with -10000, as the fused op does)"


def _flash_attention_check(graph: DataFlow, match: Match) -> str:
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
    return f"{compare_values(unfused.to(q.dtype), fused)} (no mask)"


def _matmul_all_reduce_check(graph: DataFlow, match: Match) -> str:
    from ..numerics.exact import cube_matmul
    from ..torch_npu import npu_mm_all_reduce_base

    x_spec, w_spec = [s for s in graph.input_specs(match.kernels[0]) if len(s.shape) >= 2][:2]
    if x_spec.dtype not in ("float16", "bfloat16"):
        return f"not checked: npu_mm_all_reduce_base takes float16/bfloat16 x1, not {x_spec.dtype}"
    gen = torch.Generator().manual_seed(0)
    x, w = random_tensor(x_spec, gen), random_tensor(w_spec, gen)
    verdict = compare_values(cube_matmul(x, w), npu_mm_all_reduce_base(x, w, "world"))
    return f"{verdict} on one rank (the all-reduce of the other ranks' partial products is not simulated)"


PATTERNS: tuple[Pattern, ...] = (
    Pattern("one_hot+sum", "zeros + scatter_ (2.2 ms -> 0.08 ms in Ascend's affinity-op guide)", _find_one_hot_sum, _one_hot_replacement, _one_hot_check),
    Pattern("nn.Linear", "torch.addmm(bias, x, weight.t())", _find_linear, _same_kernels, _linear_check,
            "torch_npu casts a Linear input to FRACTAL_NZ first unless the Cube reads it as ND (op-plugin npu_linear)"),
    Pattern("bmm [b,n,1] -> [b,1,1]", "merge b into the rows: a dot product (mul + sum) or one MatMul",
            _find_bmm_b11, _bmm_replacement, _bmm_check),
    Pattern("repeat_interleave(scalar)", "x.unsqueeze(-1).expand(-1, r).reshape(-1)", _find_repeat_interleave,
            _same_kernels, _repeat_check,
            "with a scalar count torch_npu runs RepeatInterleave's slow branch; the rewrite is a plain copy"),
    Pattern("gather (GatherElements)", "torch.index_select / row indexing (GatherV2)", _find_gather,
            _gather_replacement, _gather_check, grad_op="aten::index_add"),
    Pattern("index_put (IndexPutV2)", "masked_fill / torch.where (a mask); index_select on flattened rows (indices)",
            find_index_put, index_put_replacement, index_put_check),
    Pattern("Nonzero + index + sum", "(x * mask.float()).sum()", find_nonzero_sum, nonzero_replacement,
            nonzero_check, "NonZero's output size depends on the mask's values and the picked rows are gathered; "
            "the 0/1 mask multiplied in keeps one element-wise pass", grad_op="aten::mul"),
    Pattern("where(x < y, y, x)", "torch.lerp(x, y, (x < y).float())", find_where_compare, where_replacement,
            where_check, "the guide's gain is in the backward (SelectV2's scattered reads); SelectV2 and Lerp are "
            "both priced as streaming Vector ops here, so only the forward's kernels are repriced"),
    Pattern("RotaryMul (unfused)", "torch_npu.npu_rotary_mul(x, cos, sin)", _find_rotary, _fused("npu::npu_rotary_mul"),
            _rotary_check, grad_op="npu::npu_rotary_mul_backward"),
    Pattern("RmsNorm (unfused)", "torch_npu.npu_rms_norm(x, gamma, eps)", _find_rms_norm, _fused("npu::npu_rms_norm"),
            _rms_norm_check, grad_op="npu::npu_rms_norm_backward"),
    Pattern("ScaledMaskedSoftmax (unfused)", "torch_npu.npu_scaled_masked_softmax(x, mask, scale)", _find_softmax,
            _fused("npu::npu_scaled_masked_softmax"), _scaled_masked_softmax_check,
            grad_op="npu::npu_scaled_masked_softmax_backward"),
    Pattern("SwiGlu (unfused)", "torch_npu.npu_swiglu(torch.cat((a, b), -1))", _find_swiglu, _fused("npu::npu_swiglu"), _swiglu_check),
    Pattern("FlashAttentionScore (unfused)", "torch_npu.npu_fused_infer_attention_score / npu_fusion_attention",
            _find_flash_attention, _fused("npu::npu_fused_infer_attention_score"),
            _flash_attention_check, grad_op="npu::npu_fusion_attention_grad"),
    Pattern("MatmulAllReduce (unfused)", "torch_npu.npu_mm_all_reduce_base(x, w, group)", _find_matmul_all_reduce,
            _fused("npu::npu_mm_all_reduce_base"), _matmul_all_reduce_check),
)


def _sites(pattern: Pattern, flows: Sequence[DataFlow]) -> dict[str, list[tuple[int, Match]]]:
    """The pattern's occurrences in each graph (by its index), grouped by the source line of the kernel
    that writes each one's result; a kernel belongs to one occurrence at most."""
    sites: dict[str, list[tuple[int, Match]]] = {}
    for index, flow in enumerate(flows):
        claimed: set[str] = set()
        for match in pattern.find(flow):
            names = {k.name for k in match.kernels}
            if names & claimed:
                continue
            claimed |= names
            sites.setdefault(match.kernels[-1].source, []).append((index, match))
    return sites


def find_affinity(
    programs: Program | Sequence[Program], profile: HardwareProfile, catalog: OpCatalog
) -> tuple[Finding, ...]:
    """Every affinity-op pattern (docs/feature-docs.md#affinity-ops) in ``programs`` (one graph, or a training step's
    graphs), one finding per pattern and source line, each priced by simulating the graphs with that line's occurrences
    rewritten (BASELINE plans, so no SuperKernel or stream effect blurs the op's own cost), the gain
    summed over the step's graphs.

    In a training step a site's backward changes with it. AOTAutograd keeps the forward's source line
    on every backward kernel, so an occurrence found in the backward graph (IndexPutV2 is both
    ``x[mask] = v`` and the backward of advanced indexing) joins its line's site, and a pattern whose
    rewrite has a backward op of its own (:attr:`Pattern.grad_op`) has the backward kernels of the
    site's lines replaced by that one kernel."""
    steps = (programs,) if isinstance(programs, Program) else tuple(programs)
    flows = [DataFlow(program) for program in steps]
    times = [program_time(program, profile) for program in steps]
    backward = next((i for i, program in enumerate(steps) if program.phase == Phase.BACKWARD), None)
    findings = []
    for pattern in PATTERNS:
        for source, located in _sites(pattern, flows).items():
            rewritten: dict[int, Program] = {}
            for index in dict.fromkeys(i for i, _ in located):
                matches = [(m, pattern.replacement(flows[index], m)) for i, m in located if i == index]
                rewritten[index] = substitute(steps[index], matches, catalog)
            if pattern.grad_op and backward is not None and backward not in rewritten:
                lines = {k.source for _, match in located for k in match.kernels if k.source}
                group = [k for k in steps[backward].kernels if k.source in lines]
                if group:
                    rewritten[backward] = fuse(steps[backward], group, pattern.grad_op, catalog)
            gain = sum(times[i] - program_time(program, profile) for i, program in rewritten.items())
            index, first = located[0]
            with torch.enable_grad():  # a check differentiates its CPU reference, also under the user's no_grad()
                exactness = pattern.check(flows[index], first)
            findings.append(Finding(
                pattern.name, source, len(located), tuple(k.name for k in first.kernels), pattern.rewrite, gain,
                exactness, pattern.note,
            ))
    return tuple(findings)
