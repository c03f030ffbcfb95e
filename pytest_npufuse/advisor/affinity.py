"""The affinity-op advisor: the NPU-affine rewrites of docs/feature-docs.md#affinity-ops, found in the captured graph
and priced.

The affinity-op guide (docs/feature-docs.md#affinity-ops) lists forms an Ascend NPU runs slowly and their replacements:
one_hot+sum -> zeros+scatter, ``nn.Linear`` -> ``addmm``, a bmm with output ``[b, 1, 1]`` -> a dot product,
``repeat_interleave`` with a scalar -> unsqueeze/expand/reshape, ``gather`` -> ``index_select`` /
indexing, IndexPutV2 -> ``masked_fill``, ``x[nonzero(mask)].sum()`` -> ``(x * mask).sum()``,
``where(x < y, y, x)`` -> ``lerp``, and unfused sequences that one fused op replaces (RotaryMul,
RmsNorm, ScaledMaskedSoftmax, SwiGlu, FlashAttentionScore, MatmulAllReduce). The guide's affinity-API
page adds ``npu_confusion_transpose``, the contrib SiLU and Mish modules and the fused optimizers.

Every form is an entry of the catalogue ``advisor/affinity.toml`` (pattern, replacement, conditions,
tolerance, source); :data:`FORMS` is the code behind each entry's ``form`` and :data:`PATTERNS` binds
them (:mod:`.catalogue`). Each pattern says how to find it among the captured kernels (op types,
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
from ..report.findings import BackwardKernels, Finding
from ..target.catalog import OpCatalog
from ..target.profile import HardwareProfile
from ..vocabulary import Phase
from .catalogue import Entry, Tolerance, load_affinity_catalogue
from .fused import (
    confusion_transpose_check,
    find_confusion_transpose,
    find_flash_attention,
    find_matmul_all_reduce,
    find_rotary,
    find_softmax,
    flash_attention_check,
    follow_chain,
    fused_replacement,
    matmul_all_reduce_check,
    mish_check,
    rms_norm_check,
    rotary_check,
    scaled_masked_softmax_check,
    silu_check,
    swiglu_check,
)
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
from .optimizer import find_optimizer, fused_optimizer, optimizer_check, suggests_fused_optimizer
from .rewrite import DataFlow, Match, NewKernel, fuse, program_run, program_time, substitute
from .verdict import compare_values, compare_with_grads, random_tensor, spec_like, torch_dtype


@dataclass(frozen=True)
class Pattern:
    """One catalogue entry (the forms of docs/feature-docs.md#affinity-ops and the affinity-API page) bound
    to code: how to find it, what replaces it, and how the rewrite's numerics compare (bit for bit, or
    against the entry's documented tolerance)."""

    name: str
    rewrite: str
    find: Callable[[DataFlow], Iterable[Match]]
    replacement: Callable[[DataFlow, Match], list[NewKernel]]
    check: Callable[[DataFlow, Match, "Tolerance | None"], str]
    note: str
    grad_op: str
    """In a training step, the op the backward kernels of a site's lines become with the rewrite (a fused
    op's Grad kernel, index_add for index_select); empty when the pattern's own search finds its backward
    kernels (IndexPutV2) or the rewrite leaves the backward as it is."""
    entry: Entry


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

# --- the catalogue: each entry's matcher ---------------------------------------------------------------------


def _chain_finder(entry: Entry) -> Callable[[DataFlow], Iterable[Match]]:
    """The matcher of an entry whose pattern is a chain ``a -> b -> c [-> d]``: a kernel of each op type
    reading the previous one, the bracketed tail taken when present; with ``shares_input`` the last
    kernel also reads the first one's input (``x * sigmoid(x)``)."""
    text, _, tail = entry.pattern.partition("[")
    ops = [op.strip() for op in text.split("->") if op.strip()]
    optional = [op.strip(" ]") for op in tail.split("->") if op.strip(" ]")]

    def find(graph: DataFlow) -> Iterable[Match]:
        for kernel in graph.program.kernels:
            if kernel.op_type != ops[0]:
                continue
            chain = follow_chain(graph, kernel, ops[1:])
            if chain is None:
                continue
            if entry.shares_input:
                first = {graph.program.storage(n) for n in chain[0].inputs}
                if not first & {graph.program.storage(n) for n in chain[-1].inputs}:
                    continue
            for op in optional:
                nxt = next((k for k in graph.consumers(chain[-1]) if k.op_type == op), None)
                if nxt is None:
                    break
                chain.append(nxt)
            yield Match(tuple(chain))

    return find


Check = Callable[[DataFlow, Match, "Tolerance | None"], str]


def _exact(check: Callable[[DataFlow, Match], str]) -> Check:
    """A check of a rewrite that must be bit-exact (no tolerance applies)."""
    return lambda graph, match, tolerance: check(graph, match)


@dataclass(frozen=True)
class Form:
    """How a catalogue form is found, rewritten and checked (the code behind an entry's ``form``)."""

    find: Callable[[DataFlow], Iterable[Match]] | None
    replacement: Callable[[DataFlow, Match], list[NewKernel]] | None
    check: Check


FORMS: dict[str, Form] = {
    "one_hot_sum": Form(_find_one_hot_sum, _one_hot_replacement, _exact(_one_hot_check)),
    "linear": Form(_find_linear, _same_kernels, _exact(_linear_check)),
    "bmm_b11": Form(_find_bmm_b11, _bmm_replacement, _exact(_bmm_check)),
    "repeat_interleave": Form(_find_repeat_interleave, _same_kernels, _exact(_repeat_check)),
    "gather": Form(_find_gather, _gather_replacement, _exact(_gather_check)),
    "index_put": Form(find_index_put, index_put_replacement, _exact(index_put_check)),
    "nonzero_sum": Form(find_nonzero_sum, nonzero_replacement, _exact(nonzero_check)),
    "where_compare": Form(find_where_compare, where_replacement, _exact(where_check)),
    "rotary": Form(find_rotary, None, rotary_check),
    "scaled_masked_softmax": Form(find_softmax, None, scaled_masked_softmax_check),
    "flash_attention": Form(find_flash_attention, None, flash_attention_check),
    "matmul_all_reduce": Form(find_matmul_all_reduce, None, matmul_all_reduce_check),
    "confusion_transpose": Form(find_confusion_transpose, None, confusion_transpose_check),
    "chain": Form(None, None, lambda graph, match, tolerance: "not checked"),
    "optimizer": Form(find_optimizer, None, optimizer_check),
}

# The chain entries' checks, by the fused op that replaces the chain.
_CHAIN_CHECKS: dict[str, Check] = {
    "npu::npu_rms_norm": rms_norm_check,
    "npu::npu_swiglu": swiglu_check,
    "npu::npu_silu": silu_check,
    "npu::npu_mish": mish_check,
}


def _pattern(entry: Entry) -> Pattern:
    """The catalogue entry bound to its form's code."""
    form = FORMS[entry.form]
    find = form.find or _chain_finder(entry)
    replacement = form.replacement or fused_replacement(entry.fused_op)
    check = _CHAIN_CHECKS[entry.fused_op] if entry.form == "chain" else form.check
    return Pattern(entry.name, entry.replacement, find, replacement, check, entry.note, entry.grad_op, entry)


PATTERNS: tuple[Pattern, ...] = tuple(_pattern(entry) for entry in load_affinity_catalogue().entries)


def _sites(pattern: Pattern, flows: Sequence[DataFlow]) -> dict[str, list[tuple[int, Match]]]:
    """The pattern's occurrences in each graph (by its index), grouped by the source line of the kernel
    that writes each one's result; a kernel belongs to one occurrence at most. An occurrence whose
    result has a dtype the replacement does not take is not a site."""
    sites: dict[str, list[tuple[int, Match]]] = {}
    for index, flow in enumerate(flows):
        claimed: set[str] = set()
        for match in pattern.find(flow):
            names = {k.name for k in match.kernels}
            if names & claimed or not pattern.entry.takes(match.kernels[-1].output_specs[0].dtype):
                continue
            claimed |= names
            sites.setdefault(match.kernels[-1].source, []).append((index, match))
    return sites


def _backward_caused(
    located: Sequence[tuple[int, Match]], backward: Program | None, durations: dict[str, float]
) -> tuple[BackwardKernels, ...]:
    """The backward kernels AOTAutograd derived from the site's forward lines (it keeps the forward's
    source line on each), grouped by op type with their modeled time."""
    if backward is None:
        return ()
    lines = {k.source for _, match in located for k in match.kernels if k.source and not k.name.startswith("backward/")}
    groups: dict[str, list[str]] = {}
    for kernel in backward.kernels:
        if kernel.source in lines:
            groups.setdefault(kernel.info.kernel_type or kernel.op_type, []).append(kernel.name)
    return tuple(
        BackwardKernels(kind, len(names), sum(durations.get(name, 0.0) for name in names))
        for kind, names in groups.items()
    )


def _rewritten(
    pattern: Pattern, located: Sequence[tuple[int, Match]], steps: Sequence[Program], flows: Sequence[DataFlow],
    backward: int | None, catalog: OpCatalog, training: bool,
) -> dict[int, Program]:
    """Each graph of the step with the site's occurrences rewritten (and, for a pattern whose rewrite
    has a backward op of its own, the backward kernels of the site's lines replaced by it)."""
    rewritten: dict[int, Program] = {}
    for index in dict.fromkeys(i for i, _ in located):
        if pattern.entry.form == "optimizer":
            rewritten[index] = fused_optimizer(steps[index], catalog)
            continue
        replacement = pattern.replacement
        if pattern.entry.inference_op and not training:
            replacement = fused_replacement(pattern.entry.inference_op)
        matches = [(m, replacement(flows[index], m)) for i, m in located if i == index]
        rewritten[index] = substitute(steps[index], matches, catalog)
    if pattern.grad_op and backward is not None and backward not in rewritten:
        lines = {k.source for _, match in located for k in match.kernels if k.source}
        group = [k for k in steps[backward].kernels if k.source in lines]
        if group:
            rewritten[backward] = fuse(steps[backward], group, pattern.grad_op, catalog)
    return rewritten


def find_affinity(
    programs: Program | Sequence[Program], profile: HardwareProfile, catalog: OpCatalog
) -> tuple[Finding, ...]:
    """Every catalogue entry (``advisor/affinity.toml``, docs/feature-docs.md#affinity-ops) in
    ``programs`` (one graph, or a training step's graphs), one finding per entry and source line, each
    priced by simulating the graphs with that line's occurrences rewritten (BASELINE plans, so no
    SuperKernel or stream effect blurs the op's own cost), the gain summed over the step's graphs.

    In a training step a site's backward changes with it. AOTAutograd keeps the forward's source line
    on every backward kernel, so an occurrence found in the backward graph (IndexPutV2 is both
    ``x[mask] = v`` and the backward of advanced indexing) joins its line's site, a pattern whose
    rewrite has a backward op of its own (:attr:`Pattern.grad_op`) has the backward kernels of the
    site's lines replaced by that one kernel, and every finding lists the backward kernels its forward
    lines cause. The optimizer graph is matched against the fused-optimizer entry, suggested when its
    kernels take a measurable share of the step."""
    steps = (programs,) if isinstance(programs, Program) else tuple(programs)
    flows = [DataFlow(program) for program in steps]
    runs = [program_run(program, profile) for program in steps]
    times = [run.time_us for run in runs]
    phases = frozenset(program.phase for program in steps)
    training = bool(phases & {Phase.BACKWARD, Phase.OPTIMIZER})
    backward = next((i for i, program in enumerate(steps) if program.phase == Phase.BACKWARD), None)
    durations = {k.name: k.duration_us for k in runs[backward].kernels} if backward is not None else {}
    findings = []
    for pattern in PATTERNS:
        if not pattern.entry.applies_to(phases):
            continue
        for source, located in _sites(pattern, flows).items():
            rewritten = _rewritten(pattern, located, steps, flows, backward, catalog, training)
            gain = sum(times[i] - program_time(program, profile) for i, program in rewritten.items())
            index, first = located[0]
            if pattern.entry.form == "optimizer" and not suggests_fused_optimizer(times[index], sum(times), gain):
                continue
            with torch.enable_grad():  # a check differentiates its CPU reference, also under the user's no_grad()
                exactness = pattern.check(flows[index], first, pattern.entry.tolerance)
            findings.append(Finding(
                pattern.name, source or pattern.entry.form, len(located), tuple(k.name for k in first.kernels),
                pattern.rewrite, gain,
                exactness, pattern.note,
                _backward_caused(located, steps[backward] if backward is not None else None, durations),
            ))
    return tuple(findings)
